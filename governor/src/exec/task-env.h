// What running a task needs from the governor, and the per-task cancel
// switch. Loop thread only.
#pragma once

#include "child-process.h"
#include "object-store.h"
#include "safe-path.h"
#include "task-outcome.h"
#include "uv-bridge.h"

#include <atomic>
#include <string>
#include <vector>
#include <kj/async.h>
#include <kj/timer.h>
#include <spdlog/logger.h>
#include <squall/wire/executor.capnp.h>
#include <squall/wire/service.capnp.h>

namespace squall {

// A task's count of milliseconds (time limit, sleep) as a kj::Duration,
// capped at 100 years: kj counts nanoseconds in an int64, and a bigger
// count wrapped round to a negative delay (a task with a huge time limit
// was killed at once).
inline kj::Duration taskMilliseconds(uint64_t ms) {
  constexpr uint64_t MAX_MS = uint64_t(100) * 365 * 24 * 3600 * 1000;
  return static_cast<int64_t>(ms < MAX_MS ? ms : MAX_MS) * kj::MILLISECONDS;
}

class ExecutorPool;
class ExecutorLease;
class ProcessSets;
class ActorHosts;
class StreamHub;
class StoreView;

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
  // Where load / load_dir / store may read and write (--allow-path); none
  // by default.
  AllowedRoots allowedRoots;
  // Live streams; without it, stream outputs and live inputs are refused.
  kj::Maybe<StreamHub&> streams = nullptr;
  // How programs' inputs are isolated from the objects (input-isolation.h):
  // through this read-only view of the store (mount mode), or, without it,
  // as private copies (copy mode).
  kj::Maybe<const StoreView&> storeView = nullptr;
  // Warm executor processes (--executor); without it, call tasks fail.
  kj::Maybe<ExecutorPool&> executors = nullptr;
  // The actors living here (actor-host.h); set with `executors`.
  kj::Maybe<ActorHosts&> actors = nullptr;
  // Keeps each program task's processes together (process-sets.h): what
  // a task leaves running is killed when it ends. Without it, only the
  // task's process group is.
  kj::Maybe<ProcessSets&> processSets = nullptr;
};

// Resources a task was granted, as an object that gives them back when
// dropped (task-queue.cpp).
class ResourceHold {
 public:
  virtual ~ResourceHold() noexcept(false) = default;
  // The function running for `task` waits for tasks it submitted: the cpus
  // go back meanwhile (the rest stays held). False when nothing was lent
  // (lent already, or nothing to lend).
  virtual bool lend(Id task) {
    (void)task;
    return false;
  }
  // Takes the lent cpus again: resolves once they are held (before tasks
  // that have not started get any). At once when none are lent.
  virtual kj::Promise<void> reclaim() { return kj::READY_NOW; }
};

// Set once a task is cancelled or timed out. Pool jobs, which cannot be
// interrupted, read it before they commit anything outside the store.
struct StopFlag final : public kj::AtomicRefcounted {
  mutable std::atomic<bool> stopped{false};
};

// Lets a running task be cancelled. Runners check isCancelled() between
// phases, race their waits against whenCancelled(), and register their child
// process so cancel() can kill its process group at once.
class TaskControl {
 public:
  TaskControl();
  ~TaskControl() noexcept(false);
  KJ_DISALLOW_COPY(TaskControl);

  bool isCancelled() const { return cancelled; }
  kj::Promise<void> whenCancelled() { return cancelledPromise.addBranch(); }
  void cancel();
  // Cancels because the task's time limit passed; the outcome then says so.
  void timeOut();
  bool hasTimedOut() const { return timedOut; }

  // For pool jobs: true once cancel() or timeOut() ran.
  kj::Own<const StopFlag> stopFlag() const { return kj::atomicAddRef(*stop); }

  // While set, cancel() SIGKILLs the process group.
  void setProcess(kj::Maybe<ChildProcess&> child) { process = child; }

  // NAME=VALUE variables that say which resources the task holds
  // (SQUALL_RESOURCE_GPUS, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS, ...):
  // set when it starts, given to its program.
  void setResourceEnv(std::vector<std::string> vars) { resourceVars = std::move(vars); }
  const std::vector<std::string>& resourceEnv() const { return resourceVars; }

  // Work a runner leaves for after its outcome is reported (removing the
  // sandbox: detaching a mount waits out an RCU grace period, milliseconds
  // that no task needs to wait for). The queue takes it when the task ends
  // and waits for it only at shutdown.
  void setAftermath(kj::Promise<void> work) { aftermath = kj::mv(work); }
  kj::Maybe<kj::Promise<void>> takeAftermath() { return kj::mv(aftermath); }

  // What gives the task's cpus back when dropped (task-queue.cpp), and how
  // many (RESOURCE_UNITs): a runner whose process holds them beyond the
  // task's end (a call's executor process, executor-pool.h) takes it; else
  // the queue drops it when the task ends.
  void offerHold(kj::Own<ResourceHold> hold, uint64_t cpuUnits);
  kj::Maybe<kj::Own<ResourceHold>> takeHold();
  uint64_t heldCpuUnits() const { return holdUnits; }
  // For a call that holds no cpus of its own: its place behind the calls of
  // a busy executor process (task-queue.cpp).
  void setRide(kj::Own<ExecutorLease> lease);
  kj::Maybe<kj::Own<ExecutorLease>> takeRide();

 private:
  bool cancelled = false;
  bool timedOut = false;
  kj::Own<const StopFlag> stop = kj::atomicRefcounted<StopFlag>();
  kj::Own<kj::PromiseFulfiller<void>> fulfiller;
  kj::ForkedPromise<void> cancelledPromise;
  kj::Maybe<ChildProcess&> process;
  kj::Maybe<kj::Promise<void>> aftermath;
  std::vector<std::string> resourceVars;
  kj::Maybe<kj::Own<ResourceHold>> hold;
  uint64_t holdUnits = 0;
  kj::Maybe<kj::Own<ExecutorLease>> ride;
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
// call-task.cpp
kj::Promise<TaskOutcome> runCall(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);
// A method call on an actor living here (actor-host.h).
kj::Promise<TaskOutcome> runActorCall(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);
// Fills `list` (one per input) with the task's inputs as the store holds
// them, for an executor: a store path (through the read-only view when
// inputs are isolated by mount) or a small blob's bytes. None may be read
// live.
void setStoredCallInputs(TaskEnv& env, wire::TaskSpec::Reader task,
                         capnp::List<wire::CallInput, capnp::Kind::STRUCT>::Builder list);
// Who a call or construct runs for: the task's session and n, so that the
// function may submit tasks there (docs/nested.md).
void setCallContext(wire::CallContext::Builder context, wire::TaskSpec::Reader task);
// dir-tasks.cpp
kj::Promise<TaskOutcome> runMakeDir(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);
kj::Promise<TaskOutcome> runSliceDir(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);
kj::Promise<TaskOutcome> runLoad(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);
kj::Promise<TaskOutcome> runStore(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control);

// Places a held object (blob bytes, blob file or dir tree) as the new entry
// `name` of the directory `parentFd`: files hard-linked (read-only inodes of
// the store) or written 0444, trees copied with hard links. `label` names
// the place in errors ("... is already taken by an earlier input"). For
// make_dir, whose tree joins the store and never meets a program; a
// program's inputs are placed by placeInput (input-isolation.h). Pool
// threads.
void placeObject(wire::ObjectKind kind, const ObjectData& data, Id id, int parentFd,
                 kj::StringPtr name, kj::StringPtr label);

// "time limit of 1.5 s exceeded"
kj::String timeLimitMessage(uint64_t limitMs);

}  // namespace squall
