// Batched upstream results. Loop thread only.
#include "result-batcher.h"

#include <kj/debug.h>

namespace squall {

ResultBatcher::ResultBatcher(wire::GovernorUpstream::Client upstream, kj::Timer& timer,
                             spdlog::logger& logger)
    : upstream(kj::mv(upstream)), timer(timer), logger(logger), tasks(*this) {}

ResultBatcher::ResultBatcher(kj::Timer& timer, spdlog::logger& logger)
    : timer(timer), logger(logger), tasks(*this) {}

void ResultBatcher::connected(wire::GovernorUpstream::Client client) {
  upstream = kj::mv(client);
  generation++;
  // Results the previous server had not logged yet go again, in order
  // (one that had them drops the copies).
  for (auto it = applied.rbegin(); it != applied.rend(); ++it) {
    for (size_t i = it->second.size(); i > 0; i--) pending.push_front(kj::mv(it->second[i - 1]));
  }
  applied.clear();
  schedule();
}

void ResultBatcher::durable(uint64_t through) {
  durableThrough = std::max(durableThrough, through);
  applied.erase(applied.begin(), applied.upper_bound(through));
}

std::vector<Id> ResultBatcher::unacknowledged() const {
  std::vector<Id> ids = inFlight;
  for (auto& [number, batch] : applied) {
    for (auto& outcome : batch) ids.push_back(outcome.id);
  }
  for (auto& outcome : pending) ids.push_back(outcome.id);
  return ids;
}

size_t ResultBatcher::undurableCount() const {
  size_t count = 0;
  for (auto& [number, batch] : applied) count += batch.size();
  return count;
}

void ResultBatcher::abandon(const std::vector<Id>& tasks) {
  logger.info("event=results-abandoned waiting={} in_flight={} undurable={} tasks={}", pending.size(),
              inFlight.size(), undurableCount(), tasks.size());
  pending.clear();
  inFlight.clear();
  applied.clear();
  // An update in flight answers into nothing.
  epoch++;
  for (auto id : tasks) abandoned.insert(id);
}

kj::Promise<void> ResultBatcher::abandonedEnded() {
  if (abandoned.empty()) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  abandonedWaiter = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

void ResultBatcher::report(TaskOutcome outcome) {
  if (abandoned.erase(outcome.id) > 0) {
    if (abandoned.empty() && abandonedWaiter.get() != nullptr) abandonedWaiter->fulfill();
    return;
  }
  logger.debug("event=task-finished task={} ok={} error=\"{}\"", kj::str(outcome.id).cStr(),
               outcome.ok, outcome.error.cStr());
  pending.push_back(kj::mv(outcome));
  schedule();
}

void ResultBatcher::schedule() {
  if (busy || pending.empty() || upstream == nullptr) return;
  busy = true;
  // One evalLater so that results finishing in the same turn share a message.
  tasks.add(kj::evalLater([this]() { return sendBatch(); }));
}

kj::Promise<void> ResultBatcher::sendBatch() {
  auto request = KJ_ASSERT_NONNULL(upstream).updateRequest();
  size_t count = 0;
  size_t bytes = 0;
  for (auto& outcome : pending) {
    bytes += outcome.wireSize();
    if (count > 0 && bytes > MAX_BATCH_BYTES) break;
    count++;
  }
  uint64_t number = nextUpdate++;
  request.setNumber(number);
  request.setRanDry(std::exchange(dry, false));
  auto list = request.initResults(count);
  for (size_t i = 0; i < count; i++) {
    pending[i].toWire(list[i]);
  }
  // Kept until acknowledged so an OVERLOADED server gets them again.
  kj::Vector<TaskOutcome> batch(count);
  inFlight.clear();
  for (size_t i = 0; i < count; i++) {
    inFlight.push_back(pending.front().id);
    batch.add(kj::mv(pending.front()));
    pending.pop_front();
  }
  sent++;
  logger.debug("event=update-sent results={}", count);
  // Shared by the two continuations (only one of them runs).
  auto held = kj::heap<kj::Vector<TaskOutcome>>(kj::mv(batch));
  auto& kept = *held;
  return request.send()
      .then(
          [this, number, &kept, sentOn = generation, sentEpoch = epoch](auto response) -> kj::Promise<void> {
            if (sentEpoch != epoch) {
              busy = false;
              schedule();
              return kj::READY_NOW;
            }
            inFlight.clear();
            // Applied; kept until logged (unless the confirmation came
            // first, or the server keeps no log).
            if (!response.getDurable() && number > durableThrough) {
              if (sentOn == generation) {
                applied.emplace(number, kj::mv(kept));
              } else {
                // Answered by a connection replaced since: sent again.
                for (size_t i = kept.size(); i > 0; i--) pending.push_front(kj::mv(kept[i - 1]));
              }
            }
            busy = false;
            schedule();
            return kj::READY_NOW;
          },
          [this, &kept, sentOn = generation, sentEpoch = epoch](kj::Exception&& e) mutable -> kj::Promise<void> {
            auto& batch = kept;
            if (sentEpoch != epoch) batch.clear();
            inFlight.clear();
            if (e.getType() == kj::Exception::Type::OVERLOADED ||
                e.getType() == kj::Exception::Type::DISCONNECTED) {
              // Kept: sent again (after a reconnect, for a lost connection).
              for (size_t i = batch.size(); i > 0; i--) pending.push_front(kj::mv(batch[i - 1]));
            }
            if (e.getType() == kj::Exception::Type::DISCONNECTED) {
              logger.warn("event=update-lost results={} error=\"{}\" action=resend-after-reconnect",
                          batch.size(), e.getDescription().cStr());
              // Nothing more goes into the dead connection; a new one may
              // have come meanwhile.
              if (sentOn == generation) upstream = nullptr;
              busy = false;
              schedule();
              return kj::READY_NOW;
            }
            if (e.getType() == kj::Exception::Type::OVERLOADED) {
              logger.warn("event=update-overloaded results={} retry_ms=1000 error=\"{}\"",
                          batch.size(), e.getDescription().cStr());
              return timer.afterDelay(1 * kj::SECONDS).then([this]() {
                busy = false;
                schedule();
              });
            }
            logger.error("event=update-rejected results={} error=\"{}\"", batch.size(),
                         e.getDescription().cStr());
            busy = false;
            schedule();
            return kj::READY_NOW;
          })
      .attach(kj::mv(held));
}

void ResultBatcher::taskFailed(kj::Exception&& exception) {
  busy = false;
  logger.error("event=update-failed error=\"{}\"", exception.getDescription().cStr());
}

}  // namespace squall
