// Turns a PipelinePlan into client calls on a Session: uploads local files
// (each once), creates one task per planned task and keeps what is to be
// collected. Nothing is sent until the caller submits.
#pragma once

#include "pipeline.h"

#include <map>
#include <squall/client/client.h>
#include <string>
#include <vector>

namespace squall {

// An output to write to a local path when its task has finished.
struct CollectTarget {
  size_t task;  // index into BuiltPipeline::tasks (= into the plan)
  DataObject object;
  ObjectKind kind;
  std::string path;
};

struct BuiltPipeline {
  std::vector<Task> tasks;  // one per planned task, same order
  std::vector<CollectTarget> collect;
};

// Borrows the session for the duration of build(); one builder per build.
class PipelineBuilder {
 public:
  // With `keepGoing`, every task is submitted as allowed to fail, so one
  // failure skips only what depends on it (the caller still reports it).
  PipelineBuilder(Session& session, bool keepGoing, bool waitForResources = false)
      : session(session), keepGoing(keepGoing), waitForResources(waitForResources) {}
  BuiltPipeline build(const PipelinePlan& plan);

 private:
  Session& session;
  bool keepGoing;
  // Every task waits for a governor that has what it asks.
  bool waitForResources;
  std::map<std::string, DataObject> uploads;  // local path -> its constant
  std::map<size_t, Actor> actors;              // planned task index -> the actor it made

  DataObject objectFor(const PlannedInput& input, const BuiltPipeline& built);
  // `index`: the planned task's, in PipelinePlan::tasks.
  Task makeTask(const PlannedTask& planned, size_t index, const BuiltPipeline& built);
};

}  // namespace squall
