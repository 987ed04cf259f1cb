// Test helper: builds Submission.add chunks by hand. Tests only.
#pragma once

#include <capnp/message.h>
#include <initializer_list>
#include <optional>
#include <squall/wire/service.capnp.h>
#include <string>
#include <vector>

namespace squall::testing {

struct TestObject {
  uint64_t n;
  std::string data;  // constant when non-empty or `constant`
  bool constant = false;
  bool keep = false;
  wire::ObjectKind kind = wire::ObjectKind::BLOB;
  uint64_t session = 0;  // 0: the graph's session
};

struct TestTask {
  uint64_t n;
  std::vector<uint64_t> inputs;
  std::vector<uint64_t> outputs;
  std::vector<std::string> args;  // empty: concat; else execute
  std::vector<std::string> inputPaths;
  uint64_t inputSession = 0;
  std::optional<uint32_t> cpus;  // unset: the default (1), not asked for
  uint32_t retries = 0;
  bool allowFailure = false;
  std::string name;
  std::string attributes;
  // Execute: where each output is taken from ("" or missing: stdout).
  std::vector<std::string> outputPaths = {};
  // Execute: which inputs are writable (missing: not).
  std::vector<bool> writable = {};
  // Execute: the input fed on stdin (-1: none).
  int32_t stdinInput = -1;
  uint64_t expectedMs = 0;  // the scheduler's hint (0: unknown)
  uint64_t parent = 0;      // the task that submitted it (0: a client)
  // An actor of type executor/actorType (set: the task is one).
  std::string actorType = {};
};

// An execute task running `program` with inputs and outputs at paths.
inline TestTask executeTask(uint64_t n, std::vector<uint64_t> inputs, std::vector<uint64_t> outputs,
                            std::vector<std::string> inputPaths, std::vector<std::string> outputPaths,
                            std::vector<bool> writable = {}) {
  TestTask t{n, std::move(inputs), std::move(outputs), {"program"}, std::move(inputPaths)};
  t.outputPaths = std::move(outputPaths);
  t.writable = std::move(writable);
  return t;
}

class TestGraph {
 public:
  explicit TestGraph(uint64_t session) : session(session) {}
  TestGraph& object(TestObject o) {
    objects.push_back(std::move(o));
    return *this;
  }
  TestGraph& constant(uint64_t n, std::string data, bool keep = false) {
    return object({n, std::move(data), true, keep});
  }
  TestGraph& output(uint64_t n, bool keep = false) { return object({n, "", false, keep}); }
  TestGraph& task(TestTask t) {
    tasks.push_back(std::move(t));
    return *this;
  }

  wire::Submission::AddParams::Reader build() {
    message = std::make_unique<capnp::MallocMessageBuilder>();
    auto root = message->initRoot<wire::Submission::AddParams>();
    auto os = root.initObjects(objects.size());
    for (size_t i = 0; i < objects.size(); i++) {
      auto& o = objects[i];
      os[i].initId().setSession(o.session ? o.session : session);
      os[i].getId().setN(o.n);
      os[i].setKind(o.kind);
      os[i].setKeep(o.keep);
      os[i].setIsConstant(o.constant || !o.data.empty());
      os[i].setData(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(o.data.data()), o.data.size()));
    }
    auto ts = root.initTasks(tasks.size());
    for (size_t i = 0; i < tasks.size(); i++) {
      auto& t = tasks[i];
      ts[i].initId().setSession(session);
      ts[i].getId().setN(t.n);
      ts[i].setName(t.name);
      ts[i].setParent(t.parent);
      ts[i].setAttributes(t.attributes);
      ts[i].initResources().setCpus(t.cpus.value_or(1));
      ts[i].getResources().setCpusAsked(t.cpus.has_value());
      ts[i].initPolicy().setRetries(t.retries);
      ts[i].getPolicy().setAllowFailure(t.allowFailure);
      ts[i].getPolicy().setExpectedMs(t.expectedMs);
      auto in = ts[i].initInputs(t.inputs.size());
      for (size_t k = 0; k < t.inputs.size(); k++) {
        in[k].initObject().setSession(t.inputSession ? t.inputSession : session);
        in[k].getObject().setN(t.inputs[k]);
        in[k].setPath(k < t.inputPaths.size() ? t.inputPaths[k] : "in" + std::to_string(k));
        in[k].setWritable(k < t.writable.size() && t.writable[k]);
      }
      auto out = ts[i].initOutputs(t.outputs.size());
      for (size_t k = 0; k < t.outputs.size(); k++) {
        out[k].setSession(session);
        out[k].setN(t.outputs[k]);
      }
      if (!t.actorType.empty()) {
        auto actor = ts[i].initConfig().initActor();
        actor.setExecutor(t.actorType.substr(0, t.actorType.find('/')));
        actor.setType(t.actorType.substr(t.actorType.find('/') + 1));
      } else if (t.args.empty()) {
        ts[i].initConfig().setConcat();
      } else {
        auto e = ts[i].initConfig().initExecute();
        auto a = e.initArgs(t.args.size());
        for (size_t k = 0; k < t.args.size(); k++) a.set(k, t.args[k]);
        e.setStdinInput(t.stdinInput);
        auto m = e.initOutputs(t.outputs.size());
        for (size_t k = 0; k < t.outputs.size(); k++) {
          if (k < t.outputPaths.size() && !t.outputPaths[k].empty()) {
            m[k].setPath(t.outputPaths[k]);
          } else {
            m[k].setStdout();
          }
        }
      }
    }
    return root.asReader();
  }

 private:
  uint64_t session;
  std::vector<TestObject> objects;
  std::vector<TestTask> tasks;
  std::unique_ptr<capnp::MallocMessageBuilder> message;
};

}  // namespace squall::testing
