// What running a task needs from the governor, and the per-task cancel
// switch. Loop thread only.
#pragma once

#include "child-process.h"
#include "object-store.h"
#include "task-outcome.h"
#include "uv-bridge.h"

#include <kj/async.h>
#include <kj/timer.h>
#include <spdlog/logger.h>
#include <squall/wire/service.capnp.h>

namespace squall {

// Shared services, owned by main() and outliving every task.
struct TaskEnv {
  UvBridge& bridge;
  kj::Timer& timer;
  ObjectStore& store;
  spdlog::logger& logger;
  // Sandboxes are made under here: <tasksDir>/<session>-<n>/.
  kj::String tasksDir;
  // Used in error texts.
  kj::String governorName;
  // The environment programs inherit (NAME=VALUE), captured at startup.
  kj::Vector<kj::String> baseEnv;
};

// Lets a running task be cancelled. Runners check isCancelled() between
// phases, race their waits against whenCancelled(), and register their child
// process so cancel() can kill its process group at once.
class TaskControl {
 public:
  TaskControl();
  KJ_DISALLOW_COPY(TaskControl);

  bool isCancelled() const { return cancelled; }
  kj::Promise<void> whenCancelled() { return cancelledPromise.addBranch(); }
  void cancel();

  // While set, cancel() SIGKILLs the process group.
  void setProcess(kj::Maybe<ChildProcess&> child) { process = child; }

 private:
  bool cancelled = false;
  kj::Own<kj::PromiseFulfiller<void>> fulfiller;
  kj::ForkedPromise<void> cancelledPromise;
  kj::Maybe<ChildProcess&> process;
};

// The environment of the current process as NAME=VALUE strings.
kj::Vector<kj::String> captureEnvironment();

// Runs one task of any built-in type or `execute`, storing its outputs.
// Resolves with the outcome (failures included); timing fields are left to
// the caller. `spec` and `control` must outlive the promise.
kj::Promise<TaskOutcome> runTask(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);

// Per-type runners (builtin-tasks.cpp, execute-task.cpp).
kj::Promise<TaskOutcome> runConcat(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);
kj::Promise<TaskOutcome> runSleep(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);
kj::Promise<TaskOutcome> runExecute(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);

}  // namespace squall
