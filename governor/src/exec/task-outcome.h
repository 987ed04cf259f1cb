// A task's outcome as the governor keeps it until it is sent upstream.
// Plain values; any thread.
#pragma once

#include "blob.h"

#include <capnp/common.h>
#include <cstdint>
#include <kj/array.h>
#include <kj/string.h>
#include <kj/vector.h>
#include <squall/proto/ids.h>
#include <squall/wire/common.capnp.h>

namespace squall {

class ObjectStore;

struct OutputInfo {
  Id id;
  uint64_t size = 0;
  uint64_t hash = 0;
  // A small blob's bytes, sent with the result (ObjectInfo.data); null
  // when not sent.
  kj::Own<const Blob> bytes{};
};

// Something that must know when an outcome is forgotten (delivered to the
// server durably, or dropped): it is destroyed with the outcome.
class OutcomeWatch {
 public:
  virtual ~OutcomeWatch() noexcept(false) = default;
};

struct TaskOutcome {
  Id id;
  bool ok = false;
  kj::String error;
  // -1 when not a process or killed by a signal.
  int32_t exitStatus = -1;
  int32_t signal = 0;
  kj::Vector<OutputInfo> outputs;
  uint64_t startTimeUs = 0;
  uint64_t durationUs = 0;
  kj::String stderrTail;
  // The program's stdout when it is not one of its outputs.
  kj::String stdoutTail;
  bool timedOut = false;
  // An input's source went away while it was fetched (TaskResult).
  bool inputUnavailable = false;
  // The task never started (a call given back before its executor process
  // reached it, executor-pool.h): the queue runs it again, nothing is
  // reported.
  bool notStarted = false;
  // An actor call a client sent here directly (DirectCalls): its graph as
  // a flat message (a wire::Graph), sent with the result so that the
  // server records the call (TaskResult.direct). Empty otherwise.
  kj::Array<capnp::word> direct;
  kj::Own<OutcomeWatch> watch;

  static TaskOutcome failure(Id id, kj::String error);
  // A finished built-in task with one output.
  static TaskOutcome success(Id id, Id output, uint64_t size, uint64_t hash);
  void toWire(wire::TaskResult::Builder builder) const;
  // Rough bytes this result takes in a message, for batch limits.
  size_t wireSize() const;
  // Attaches the bytes of blob outputs held in `store`, up to `budget`
  // bytes in all (Assignment.inlineOutputBytes).
  void inlineSmallOutputs(const ObjectStore& store, size_t budget);
};

// Wall clock, microseconds since the Unix epoch.
uint64_t wallClockUs();
// Monotonic clock, microseconds, for durations.
uint64_t monotonicUs();

}  // namespace squall
