#include "process-output.h"

#include <algorithm>
#include <cerrno>
#include <fcntl.h>
#include <kj/debug.h>
#include <unistd.h>

namespace squall {

namespace {

// Keeps the last `most` bytes of `tail` after appending `text`.
void appendTail(std::string& tail, kj::ArrayPtr<const char> text, size_t most) {
  if (text.size() >= most) {
    tail.assign(text.end() - most, text.end());
    return;
  }
  tail.append(text.begin(), text.size());
  if (tail.size() > most) tail.erase(0, tail.size() - most);
}

// Writes all of `text` to the governor's standard error, as the process
// would have.
void toStderr(kj::ArrayPtr<const char> text) {
  while (text.size() > 0) {
    ssize_t n = ::write(STDERR_FILENO, text.begin(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text = text.slice(static_cast<size_t>(n), text.size());
  }
}

}  // namespace

// ------------------------------------------------------------ TaskOutputs

TaskOutputs::TaskOutputs(kj::Timer& timer, spdlog::logger& logger) : timer(timer), logger(logger), tasks(*this) {}

void TaskOutputs::taskFailed(kj::Exception&& e) {
  logger.warn("event=task-output-failed error=\"{}\"", e.getDescription().cStr());
}

void TaskOutputs::sendWith(Send send) {
  sender = kj::mv(send);
  this->send();
}

void TaskOutputs::add(const OutputOwner& owner, int pid, bool isStderr, kj::ArrayPtr<const char> text) {
  if (text.size() == 0) return;
  auto found = tails.find(owner.task);
  if (found == tails.end()) {
    if (tails.size() >= MAX_TAILS) tails.erase(tails.begin());
    found = tails.emplace(owner.task, Tails{}).first;
  }
  appendTail(isStderr ? found->second.err : found->second.out, text, TAIL_BYTES);
  if (pendingBytes + text.size() > MAX_PENDING_BYTES) {
    dropped++;
    droppedUnsent++;
    return;
  }
  pending.push_back(Chunk{owner.task, isStderr, kj::str(owner.name, " pid=", pid), kj::heapString(text)});
  pendingBytes += text.size();
  if (inFlight == 0 && !timerSet) {
    timerSet = true;
    tasks.add(timer.afterDelay(SEND_AFTER).then([this]() {
      timerSet = false;
      send();
    }));
  }
}

void TaskOutputs::finish(TaskOutcome& outcome) {
  auto found = tails.find(outcome.id);
  if (found != tails.end()) {
    if (outcome.stdoutTail.size() == 0) outcome.stdoutTail = kj::str(found->second.out.c_str());
    if (outcome.stderrTail.size() == 0) outcome.stderrTail = kj::str(found->second.err.c_str());
    tails.erase(found);
  }
  send(true);
}

void TaskOutputs::send(bool ahead) {
  if (pending.empty() && droppedUnsent == 0) return;
  if (inFlight > (ahead ? MAX_IN_FLIGHT - 1 : 0)) return;
  KJ_IF_MAYBE(s, sender) {
    auto batch = kj::mv(pending);
    pending.clear();
    pendingBytes = 0;
    uint64_t droppedNow = droppedUnsent;
    KJ_IF_MAYBE(sent, (*s)(kj::arrayPtr(batch.data(), batch.size()), droppedNow)) {
      droppedUnsent = 0;
      inFlight++;
      tasks.add(sent->attach(kj::mv(batch))
                    .then(
                        [this]() {
                          inFlight--;
                          send();
                        },
                        [this](kj::Exception&& e) {
                          // The connection went: what it carried is lost
                          // (output is for watching; the tails stay).
                          logger.debug("event=task-output-send-failed error=\"{}\"", e.getDescription().cStr());
                          inFlight--;
                        }));
      return;
    }
    // No connection: they wait.
    pending = kj::mv(batch);
    for (auto& chunk : pending) pendingBytes += chunk.text.size();
  }
}

// ------------------------------------------------------------ ProcessOutput

ProcessOutput::ProcessOutput(kj::LowLevelAsyncIoProvider& io, TaskOutputs& outputs, kj::StringPtr mark)
    : io(io), outputs(outputs), mark(mark == nullptr ? "" : mark.cStr()) {
  open(out, false);
  open(err, true);
}

ProcessOutput::~ProcessOutput() noexcept(false) {
  // What the process printed last is its owner's.
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                drain();
                flushPartial(out);
                flushPartial(err);
              })) {
    (void)e;
  }
}

void ProcessOutput::open(Stream& stream, bool isStderr) {
  int fds[2];
  KJ_SYSCALL(pipe2(fds, O_CLOEXEC));
  stream.isStderr = isStderr;
  stream.ours = kj::AutoCloseFd(fds[0]);
  stream.childEnd = kj::AutoCloseFd(fds[1]);
  KJ_SYSCALL(fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK));
}

void ProcessOutput::started(int childPid) {
  pid = childPid;
  for (auto* stream : {&out, &err}) {
    stream->childEnd = nullptr;
    stream->in = io.wrapInputFd(stream->ours.get());
    stream->reading = readOn(*stream).eagerlyEvaluate([](kj::Exception&&) {});
  }
}

kj::Promise<void> ProcessOutput::readOn(Stream& stream) {
  return stream.in->tryRead(stream.buffer, 1, sizeof(stream.buffer)).then([this, &stream](size_t n) -> kj::Promise<void> {
    if (n == 0) {
      flushPartial(stream);
      return kj::READY_NOW;
    }
    took(stream, kj::arrayPtr(stream.buffer, n));
    return readOn(stream);
  });
}

void ProcessOutput::drain() {
  for (auto* stream : {&out, &err}) {
    if (stream->in.get() == nullptr) continue;
    for (;;) {
      ssize_t n = ::read(stream->ours.get(), stream->buffer, sizeof(stream->buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      took(*stream, kj::arrayPtr(stream->buffer, static_cast<size_t>(n)));
    }
  }
}

void ProcessOutput::workFor(kj::Maybe<OutputOwner> next) {
  drain();
  // Not a mark's start the process is still writing: handed on as text it
  // would land in a call's output and the mark after it be lost.
  for (auto* stream : {&out, &err}) handOn(*stream, stream->held.size() - markStartAtEnd(stream->held), true);
  owner = kj::mv(next);
}

size_t ProcessOutput::markStartAtEnd(const std::string& held) const {
  if (mark.empty()) return 0;
  for (size_t k = std::min(held.size(), mark.size() - 1); k > 0; k--) {
    if (held.compare(held.size() - k, k, mark, 0, k) == 0) return k;
  }
  return 0;
}

void ProcessOutput::expect(OutputOwner next) { owners.push_back(kj::mv(next)); }

kj::Maybe<const OutputOwner&> ProcessOutput::ownerOf(const Stream& stream) const {
  if (mark.empty()) {
    KJ_IF_MAYBE(o, owner) { return *o; }
    return nullptr;
  }
  uint64_t at = stream.marks - dropped;
  if (stream.marks < dropped || at >= owners.size()) return nullptr;
  return owners[at];
}

void ProcessOutput::took(Stream& stream, kj::ArrayPtr<const char> bytes) {
  stream.held.append(bytes.begin(), bytes.size());
  if (!mark.empty()) {
    for (size_t at; (at = stream.held.find(mark)) != std::string::npos;) {
      // All before the mark is the call's it ends, a last partial line too.
      handOn(stream, at, true);
      stream.held.erase(0, mark.size());
      stream.marks++;
      // Owners both streams are past go.
      while (!owners.empty() && out.marks > dropped && err.marks > dropped) {
        owners.pop_front();
        dropped++;
      }
    }
  }
  // What may be the start of a mark waits for the next read.
  size_t open = mark.empty() ? 0 : std::min(stream.held.size(), mark.size() - 1);
  handOn(stream, stream.held.size() - open, false);
  if (stream.held.size() >= TaskOutputs::TAIL_BYTES + mark.size()) handOn(stream, stream.held.size() - open, true);
}

void ProcessOutput::handOn(Stream& stream, size_t length, bool all) {
  size_t end = length;
  if (!all) {
    auto newline = stream.held.rfind('\n', length == 0 ? 0 : length - 1);
    if (length == 0 || newline == std::string::npos) return;
    end = newline + 1;
  }
  if (end == 0) return;
  give(stream, kj::arrayPtr(stream.held.data(), end));
  stream.held.erase(0, end);
}

void ProcessOutput::flushPartial(Stream& stream) { handOn(stream, stream.held.size(), true); }

void ProcessOutput::give(Stream& stream, kj::ArrayPtr<const char> text) {
  KJ_IF_MAYBE(o, ownerOf(stream)) {
    outputs.add(*o, pid, stream.isStderr, text);
  } else {
    toStderr(text);
  }
}

}  // namespace squall
