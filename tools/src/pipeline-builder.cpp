// PipelineBuilder: plan -> Session calls.
#include "pipeline-builder.h"

#include <algorithm>

namespace squall {

DataObject PipelineBuilder::objectFor(const PlannedInput& input, const BuiltPipeline& built) {
  if (input.task != SIZE_MAX) return built.tasks.at(input.task).output(input.output);
  auto it = uploads.find(input.localPath);
  if (it != uploads.end()) return it->second;
  auto object = input.localIsDir ? session.directory(input.localPath) : session.fileBlob(input.localPath);
  uploads.emplace(input.localPath, object);
  return object;
}

Task PipelineBuilder::makeTask(const PlannedTask& planned, size_t index, const BuiltPipeline& built) {
  switch (planned.kind) {
    case PlannedTask::Kind::EXECUTE: {
      bool argInputs = std::any_of(planned.inputs.begin(), planned.inputs.end(),
                                   [](const PlannedInput& in) { return in.arg; });
      // A shell line with argument inputs gets them as "$@": sh -c LINE NAME ARGS...
      Program program = !planned.shell ? Program(planned.args)
                        : argInputs   ? Program({"/bin/sh", "-c", planned.args[0], planned.step})
                                      : Program::shell(planned.args[0]);
      for (auto& in : planned.inputs) {
        auto object = objectFor(in, built);
        if (in.isStdin) {
          program.stdinFrom(object);
        } else {
          program.input(object, in.path, {.arg = in.arg, .writable = in.writable});
        }
      }
      for (auto& out : planned.outputs) {
        if (out.path.empty()) {
          program.stdoutOutput(out.kind);
        } else {
          program.output(out.path, out.kind);
        }
      }
      for (auto& [name, value] : planned.env) program.env(name, value);
      if (planned.cpus) program.cpus(*planned.cpus);
      program.name(planned.name);
      if (planned.brokenPipeIsError) program.brokenPipeIsError();
      return session.execute(program);
    }
    case PlannedTask::Kind::ACTOR: {
      std::vector<DataObject> inputs;
      for (auto& in : planned.inputs) inputs.push_back(objectFor(in, built));
      auto actor = session.actor(planned.function, inputs, planned.config);
      actor.maxRestarts(planned.maxRestarts).maxCallRetries(planned.maxCallRetries);
      if (planned.cpus) actor.cpus(*planned.cpus);
      if (!planned.actorName.empty()) actor.named(planned.actorName);
      for (size_t i = 0; i < planned.inputs.size(); i++) {
        if (!planned.inputs[i].label.empty()) actor.task().inputLabel(i, planned.inputs[i].label);
      }
      actors.emplace(index, actor);
      return actor.task();
    }
    case PlannedTask::Kind::CALL: {
      std::vector<DataObject> inputs;
      for (auto& in : planned.inputs) inputs.push_back(objectFor(in, built));
      std::vector<ObjectKind> kinds;
      for (auto& out : planned.outputs) kinds.push_back(out.kind);
      auto task = planned.actor != SIZE_MAX ? actors.at(planned.actor).call(planned.method, inputs, planned.config, kinds)
                                            : session.call(planned.function, inputs, planned.config, kinds);
      for (size_t i = 0; i < planned.inputs.size(); i++) {
        if (!planned.inputs[i].label.empty()) task.inputLabel(i, planned.inputs[i].label);
      }
      if (planned.cpus) task.cpus(*planned.cpus);
      return task;
    }
    case PlannedTask::Kind::MAKE_DIR: {
      std::vector<std::pair<std::string, DataObject>> entries;
      for (auto& in : planned.inputs) entries.emplace_back(in.path, objectFor(in, built));
      return session.makeDir(entries);
    }
    case PlannedTask::Kind::SLICE:
      return session.sliceDir(objectFor(planned.inputs.at(0), built), planned.path);
    case PlannedTask::Kind::LOAD:
      return planned.outputs.at(0).kind == ObjectKind::DIR ? session.loadDir(planned.path)
                                                           : session.load(planned.path);
    case PlannedTask::Kind::STORE:
      return session.store(objectFor(planned.inputs.at(0), built), planned.path, planned.overwrite);
    case PlannedTask::Kind::CONCAT: {
      std::vector<DataObject> parts;
      for (auto& in : planned.inputs) parts.push_back(objectFor(in, built));
      return session.concat(parts);
    }
  }
  throw Error("unknown planned task kind");
}

BuiltPipeline PipelineBuilder::build(const PipelinePlan& plan) {
  BuiltPipeline built;
  built.tasks.reserve(plan.tasks.size());
  for (size_t i = 0; i < plan.tasks.size(); i++) {
    auto& planned = plan.tasks[i];
    auto task = makeTask(planned, i, built);
    task.name(planned.name);
    for (auto& [name, amount] : planned.resources) task.resource(name, amount);
    if (planned.retries) task.retries(planned.retries);
    if (planned.allowFailure || keepGoing) task.allowFailure(true);
    if (waitForResources) task.waitForResources(true);
    if (planned.timeLimit.count()) task.timeLimit(planned.timeLimit);
    if (planned.expected.count()) task.expectedDuration(planned.expected);
    for (size_t o = 0; o < planned.outputs.size(); o++) {
      if (planned.outputs[o].collect.empty()) continue;
      auto object = task.output(o);
      object.keep();
      built.collect.push_back({i, object, planned.outputs[o].kind, planned.outputs[o].collect});
    }
    built.tasks.push_back(task);
  }
  return built;
}

}  // namespace squall
