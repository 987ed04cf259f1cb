// The governor's local queue: assigned tasks wait for their inputs (held,
// arriving, or fetched from another governor; a live stream input does not
// wait: it is read while its producer runs), then for their cpus and other
// resources (resources.h: never over-committed; a task's items are in its
// environment) in the server's priority order, run, and report their outcome. A call of a
// short function that finds no cpus free may instead queue behind the calls
// of a busy executor process, on the cpus that process holds
// (executor-pool.h). Stream outputs are announced to the
// StreamHub at assignment, and every outcome is passed to it before it is
// reported. Loop thread only.
#pragma once

#include "data-service.h"
#include "resources.h"
#include "task-env.h"

#include <deque>
#include <memory>
#include <set>
#include <kj/function.h>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace squall {

class TaskQueue final : private kj::TaskSet::ErrorHandler {
 public:
  using Reporter = kj::Function<void(TaskOutcome)>;

  // `report` receives every outcome exactly once per assigned task.
  // `pools`: the resources it offers besides its `cpus` (resources.h).
  TaskQueue(TaskEnv& env, DataFetcher& fetcher, uint32_t cpus, std::vector<ResourcePool> pools, Reporter report);
  ~TaskQueue() noexcept(false);
  KJ_DISALLOW_COPY(TaskQueue);

  // Copies the assignment and queues it. A task needing more cpus than the
  // governor has, or an input nobody can provide, fails at once.
  void assign(wire::Assignment::Reader assignment);

  // Drops a waiting task or kills a running one; either way it is reported
  // failed with "cancelled". Unknown (e.g. already finished) ids are
  // ignored: false for them.
  bool cancel(Id id);

  // Drops a task that has not started (queued, or fetching its inputs) as
  // if it had never been assigned: nothing is reported. False when it runs
  // already, is unknown, or reads or writes a stream live (its group was
  // placed together and its readers may have attached).
  bool retract(Id id);

  // Fetches `id` into the store ahead of the task that will read it here
  // (the server's prefetch), from the first of `sources` that gives it;
  // resolves true once held, false when none could (logged).
  kj::Promise<bool> prefetch(Id id, wire::ObjectKind kind, kj::Array<kj::String> sources);

  // Cancels everything; resolves once no task runs (every child is reaped
  // and every sandbox removed). Later assignments are refused.
  kj::Promise<void> shutdown();

  uint32_t totalCpus() const { return cpus; }
  uint32_t freeCpus() const { return static_cast<uint32_t>(allocator.freeUnits("cpus") / RESOURCE_UNIT); }
  // Its pools besides cpus, as announced to the server.
  std::vector<ResourcePool> offeredPools() const;
  // Running tasks whose cpus are lent (ResourceHold::lend): told to the
  // server at each registration.
  std::vector<Id> secededTasks() const { return {seceded.begin(), seceded.end()}; }
  // Called when a task lends its cpus (true) or takes them again (false),
  // to tell the server (ServerLink).
  void onLend(kj::Function<void(Id, bool)> listener) { lendListener = kj::mv(listener); }
  // Called when a task's end leaves cpus free and nothing ready to take
  // them: the queue the server keeps here ran dry (it sends more when the
  // results reach it; GovernorUpstream.update's ranDry).
  void onDry(kj::Function<void()> listener) { dryListener = kj::mv(listener); }
  size_t waitingCount() const { return tasks.size() - running; }
  size_t runningCount() const { return running; }
  // Whether it holds task `id` (waiting for inputs, ready or running).
  bool holds(Id id) const { return tasks.count(id) != 0; }
  // Every task it holds (waiting for inputs, ready or running).
  std::vector<Id> held() const {
    std::vector<Id> ids;
    for (auto& [id, task] : tasks) ids.push_back(id);
    return ids;
  }

 private:
  enum class State { WAITING_FOR_INPUTS, READY, RUNNING };

  struct Task {
    Id id;
    uint64_t serial;
    kj::Own<wire::Assignment::Reader> spec;
    // Its cpus and other resources; what it holds while it runs.
    std::vector<ResourceNeed> needs;
    std::optional<ResourceGrant> grant;
    State state = State::WAITING_FOR_INPUTS;
    TaskControl control;
    uint64_t startWallUs = 0;
    uint64_t startMonotonicUs = 0;
    // Fires control.timeOut() once the task's time limit passes.
    kj::Promise<void> deadline = nullptr;
  };

  // A call's cpus while its executor process holds them; gives them back
  // when dropped.
  class Hold;

  TaskEnv& env;
  DataFetcher& fetcher;
  uint32_t cpus;
  ResourceAllocator allocator;
  Reporter report;
  uint64_t nextSerial = 1;
  size_t running = 0;
  // Ended tasks whose aftermath (TaskControl::setAftermath) still runs.
  size_t finishing = 0;
  bool shuttingDown = false;
  bool pumpScheduled = false;
  // False once the queue is gone, for holds that outlive it.
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> idleFulfiller;
  std::unordered_map<Id, kj::Own<Task>, IdHash> tasks;
  // Tasks whose inputs are present, in the order they start: the server's
  // priority, highest first, then arrival (serial).
  struct ReadyEntry {
    double priority;
    uint64_t serial;
    Id id;
    bool operator<(const ReadyEntry& o) const {
      if (priority != o.priority) return priority > o.priority;
      return serial < o.serial;
    }
  };
  std::set<ReadyEntry> ready;
  void makeReady(Task& task);
  // Tasks whose cpus are lent, and the holds waiting to take theirs again
  // (served before any ready task starts), in the order they asked.
  std::unordered_set<Id, IdHash> seceded;
  std::deque<Hold*> rejoining;
  kj::Function<void(Id, bool)> lendListener = [](Id, bool) {};
  kj::Function<void()> dryListener = []() {};
  // Declared last: destroyed first, so no running promise outlives a Task.
  kj::TaskSet work;

  kj::Maybe<Task&> lookup(Id id, uint64_t serial);
  void inputsReady(Id id, uint64_t serial);
  void failWaiting(Id id, uint64_t serial, kj::String error, bool inputUnavailable = false);
  void pump();
  // pump() on a later turn of the loop.
  void schedulePump();
  // A hold was dropped.
  void released(ResourceGrant grant);
  // The index of the cpus pool in the allocator.
  size_t cpuPool() const;
  // A place for `task` (a call) behind the calls of a busy executor
  // process, when it may wait there.
  kj::Maybe<kj::Own<ExecutorLease>> ride(Task& task);
  // Fulfils a shutdown() waiting for the last task and aftermath.
  void checkIdle();
  void start(Task& task);
  void finish(Id id, uint64_t serial, TaskOutcome outcome);
  // Tells the stream hub (if any), then reports.
  void ended(wire::Assignment::Reader assignment, TaskOutcome outcome);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
