// Test assignments and the fake upstream. Test thread only.
#include "test-tasks.h"

#include <algorithm>
#include <gtest/gtest.h>

namespace squall {

kj::Promise<void> FakeUpstream::update(UpdateContext context) {
  updates++;
  lastNumber = context.getParams().getNumber();
  if (context.getParams().getRanDry()) dryUpdates++;
  context.getResults().setDurable(durable);
  for (auto r : context.getParams().getResults()) {
    Result result;
    result.ok = r.getOk();
    result.error = r.getError();
    result.exitStatus = r.getExitStatus();
    result.signal = r.getSignal();
    result.stderrTail = r.getStderrTail();
    result.inputUnavailable = r.getInputUnavailable();
    result.startTimeUs = r.getStartTimeUs();
    for (auto o : r.getOutputs()) {
      result.outputs.push_back({Id::from(o.getId()), {o.getSize(), o.getHash()}});
    }
    Id id = Id::from(r.getId());
    EXPECT_TRUE(results.find(id) == results.end()) << "reported twice: " << kj::str(id).cStr();
    results[id] = result;
  }
  check();
  return kj::READY_NOW;
}

kj::Promise<void> FakeUpstream::waitFor(size_t count) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiting = count;
  waitingIds.clear();
  fulfiller = kj::mv(paf.fulfiller);
  check();
  return kj::mv(paf.promise);
}

kj::Promise<void> FakeUpstream::waitForAll(std::vector<Id> ids) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiting = 0;
  waitingIds = kj::mv(ids);
  fulfiller = kj::mv(paf.fulfiller);
  check();
  return kj::mv(paf.promise);
}

void FakeUpstream::check() {
  if (results.size() < waiting) return;
  for (auto& id : waitingIds) {
    if (results.find(id) == results.end()) return;
  }
  KJ_IF_MAYBE(f, fulfiller) {
    (*f)->fulfill();
    fulfiller = nullptr;
  }
}

void fillCommon(wire::Assignment::Builder a, Id id, const std::vector<InputSpec>& inputs,
                const std::vector<Id>& outputs, uint32_t cpus) {
  auto task = a.initTask();
  id.to(task.initId());
  task.initResources().setCpus(cpus);
  auto in = task.initInputs(inputs.size());
  auto locations = a.initInputs(inputs.size());
  for (size_t i = 0; i < inputs.size(); i++) {
    inputs[i].object.to(in[i].initObject());
    in[i].setPath(inputs[i].path);
    in[i].setEarlyCloseIsError(inputs[i].earlyCloseIsError);
    auto sources = locations[i].initSources(inputs[i].sources.size());
    for (size_t j = 0; j < inputs[i].sources.size(); j++) sources.set(j, inputs[i].sources[j]);
    if (inputs[i].live) {
      locations[i].setLive(true);
      locations[i].setKind(wire::ObjectKind::STREAM);
    }
  }
  auto out = task.initOutputs(outputs.size());
  auto kinds = a.initOutputKinds(outputs.size());
  for (size_t i = 0; i < outputs.size(); i++) {
    outputs[i].to(out[i]);
    kinds.set(i, wire::ObjectKind::BLOB);
  }
}

void fillExec(wire::Assignment::Builder a, const ExecSpec& spec) {
  std::vector<Id> outputs;
  for (auto& o : spec.outputs) outputs.push_back(o.object);
  fillCommon(a, spec.id, spec.inputs, outputs, spec.cpus);
  a.getTask().setName(spec.name);
  auto config = a.getTask().getConfig().initExecute();
  auto args = config.initArgs(spec.args.size());
  for (size_t i = 0; i < spec.args.size(); i++) args.set(i, spec.args[i]);
  config.setShell(spec.shell);
  config.setStdinInput(spec.stdinInput);
  auto mappings = config.initOutputs(spec.outputs.size());
  auto kinds = a.getOutputKinds();
  bool anyStream = std::any_of(spec.outputs.begin(), spec.outputs.end(),
                               [](const OutputSpec& o) { return o.stream; });
  auto readers = a.initLiveReaders(anyStream ? spec.outputs.size() : 0);
  auto persist = a.initPersist(anyStream ? spec.outputs.size() : 0);
  for (size_t i = 0; i < spec.outputs.size(); i++) {
    if (spec.outputs[i].path.empty()) {
      mappings[i].setStdout();
    } else {
      mappings[i].setPath(spec.outputs[i].path);
    }
    if (spec.outputs[i].stream) {
      kinds.set(i, wire::ObjectKind::STREAM);
      readers.set(i, spec.outputs[i].liveReaders);
      persist.set(i, spec.outputs[i].persist);
    }
  }
  auto env = config.initEnv(spec.env.size());
  for (size_t i = 0; i < spec.env.size(); i++) {
    env[i].setName(spec.env[i].first);
    env[i].setValue(spec.env[i].second);
  }
}

std::string bytesOf(kj::ArrayPtr<const kj::byte> bytes) {
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

}  // namespace squall
