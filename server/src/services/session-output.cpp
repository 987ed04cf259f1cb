#include "session-output.h"

#include <chrono>

namespace squall {

SessionOutput::SessionOutput(std::function<bool(uint64_t)> isOpen, uint64_t firstNumber)
    : isOpen(std::move(isOpen)),
      firstNumber(firstNumber != 0 ? firstNumber
                                   : static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                               std::chrono::system_clock::now().time_since_epoch())
                                                               .count())) {}

SessionOutput::Tail& SessionOutput::tailOf(uint64_t session) {
  auto found = sessions.find(session);
  if (found == sessions.end()) {
    if (sessions.size() >= SWEEP_AFTER_SESSIONS) sweep();
    found = sessions.emplace(session, Tail{}).first;
    found->second.next = firstNumber;
  }
  return found->second;
}

void SessionOutput::add(uint64_t session, uint64_t task, bool isStderr, kj::StringPtr label, kj::StringPtr governor,
                        kj::StringPtr text) {
  if (text.size() == 0) return;
  if (isOpen && !isOpen(session)) return;
  auto& tail = tailOf(session);
  // A chunk longer than the whole tail keeps its end.
  kj::StringPtr kept = text.size() > MAX_SESSION_BYTES ? text.slice(text.size() - MAX_SESSION_BYTES) : text;
  tail.chunks.push_back(Chunk{tail.next++, task, isStderr, std::string(label.cStr(), label.size()),
                              std::string(governor.cStr(), governor.size()), std::string(kept.cStr(), kept.size())});
  tail.bytes += kept.size();
  while (tail.bytes > MAX_SESSION_BYTES && tail.chunks.size() > 1) {
    tail.bytes -= tail.chunks.front().text.size();
    tail.chunks.pop_front();
  }
  for (auto& waiter : tail.waiters) waiter->fulfill();
  tail.waiters.clear();
}

kj::Promise<void> SessionOutput::whenPast(uint64_t session, uint64_t since, kj::Timer& timer, kj::Duration most) {
  if (sessions.count(session) == 0 && isOpen && !isOpen(session)) return kj::READY_NOW;
  auto& tail = tailOf(session);
  if (since == 0 ? !tail.chunks.empty() : tail.next > since) return kj::READY_NOW;
  // Drop the waiters whose calls went (cancelled) before counting.
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> live;
  for (auto& waiter : tail.waiters) {
    if (waiter->isWaiting()) live.push_back(kj::mv(waiter));
  }
  tail.waiters = kj::mv(live);
  if (tail.waiters.size() >= MAX_WAITERS) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  tail.waiters.push_back(kj::mv(paf.fulfiller));
  return paf.promise.exclusiveJoin(timer.afterDelay(most));
}

void SessionOutput::fill(uint64_t session, uint64_t since,
                         wire::ClientService::WatchOutputResults::Builder results) const {
  auto found = sessions.find(session);
  if (found == sessions.end()) {
    results.setNext(since);
    return;
  }
  auto& tail = found->second;
  uint64_t first = tail.chunks.empty() ? tail.next : tail.chunks.front().number;
  uint64_t asked = since == 0 ? firstNumber : since;
  uint64_t from = asked < first ? first : asked;
  results.setDropped(asked < first ? first - asked : 0);
  size_t count = 0, bytes = 0;
  for (size_t i = from - first; i < tail.chunks.size(); i++) {
    if (count > 0 && bytes + tail.chunks[i].text.size() > MAX_ANSWER_BYTES) break;
    bytes += tail.chunks[i].text.size();
    count++;
  }
  auto list = results.initChunks(count);
  for (size_t i = 0; i < count; i++) {
    auto& chunk = tail.chunks[from - first + i];
    auto out = list[i];
    out.setTask(chunk.task);
    out.setStderr(chunk.isStderr);
    out.setLabel(chunk.label);
    out.setGovernor(chunk.governor);
    out.setText(chunk.text);
  }
  results.setNext(from + count);
}

void SessionOutput::forget(uint64_t session) {
  auto found = sessions.find(session);
  if (found == sessions.end()) return;
  for (auto& waiter : found->second.waiters) waiter->fulfill();
  sessions.erase(found);
}

void SessionOutput::sweep() {
  if (!isOpen) return;
  for (auto it = sessions.begin(); it != sessions.end();) {
    if (!isOpen(it->first)) {
      for (auto& waiter : it->second.waiters) waiter->fulfill();
      it = sessions.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace squall
