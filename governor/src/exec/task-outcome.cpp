// TaskOutcome helpers. Any thread.
#include "task-outcome.h"

#include "object-store.h"

#include <capnp/serialize.h>
#include <chrono>

namespace squall {

TaskOutcome TaskOutcome::failure(Id id, kj::String error) {
  TaskOutcome outcome;
  outcome.id = id;
  outcome.ok = false;
  outcome.error = kj::mv(error);
  return outcome;
}

TaskOutcome TaskOutcome::success(Id id, Id output, uint64_t size, uint64_t hash) {
  TaskOutcome outcome;
  outcome.id = id;
  outcome.ok = true;
  outcome.outputs.add(OutputInfo{output, size, hash});
  return outcome;
}

void TaskOutcome::toWire(wire::TaskResult::Builder builder) const {
  id.to(builder.initId());
  builder.setOk(ok);
  builder.setError(error);
  builder.setExitStatus(exitStatus);
  builder.setSignal(signal);
  auto list = builder.initOutputs(outputs.size());
  for (size_t i = 0; i < outputs.size(); i++) {
    outputs[i].id.to(list[i].initId());
    list[i].setSize(outputs[i].size);
    list[i].setHash(outputs[i].hash);
    if (outputs[i].bytes.get() != nullptr) {
      list[i].setData(outputs[i].bytes->bytes);
      list[i].setInlined(true);
    }
  }
  builder.setStartTimeUs(startTimeUs);
  builder.setDurationUs(durationUs);
  builder.setStderrTail(stderrTail);
  builder.setStdoutTail(stdoutTail);
  builder.setTimedOut(timedOut);
  builder.setInputUnavailable(inputUnavailable);
  if (direct.size() > 0) {
    capnp::FlatArrayMessageReader graph(direct);
    builder.setDirect(graph.getRoot<wire::Graph>());
  }
}

size_t TaskOutcome::wireSize() const {
  size_t inlined = 0;
  for (auto& output : outputs) inlined += output.bytes.get() != nullptr ? output.bytes->bytes.size() : 0;
  return 128 + error.size() + stderrTail.size() + stdoutTail.size() + outputs.size() * 48 + inlined +
         direct.size() * sizeof(capnp::word);
}

void TaskOutcome::inlineSmallOutputs(const ObjectStore& store, size_t budget) {
  for (auto& output : outputs) {
    if (output.size > budget) continue;
    KJ_IF_MAYBE(data, store.data(output.id)) {
      // Small blobs are held in memory (a dir's data is its path).
      if (!data->is<kj::Own<const Blob>>()) continue;
      output.bytes = kj::mv(data->get<kj::Own<const Blob>>());
      budget -= output.size;
    }
  }
}

uint64_t wallClockUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t monotonicUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace squall
