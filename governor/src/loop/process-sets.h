// Keeps each task's processes together so that none outlives its task, not
// even one that left the task's process group (setsid, a daemon's double
// fork), and none outlives the governor. Loop thread only.
//
// Two ways, chosen at start (docs/deploy.md, "What a task leaves behind"):
// - a cgroup v2 of its own for each task, where the governor's cgroup can
//   be divided (a systemd unit with Delegate=yes; root in a container whose
//   cgroup2 is mounted writable): <own cgroup>/squall-governor-PID/task-N.
//   The task's first process is moved in once it has started, on libuv's
//   pool (a move after a quiet spell waits out an RCU grace period, ~20 ms
//   measured here; moves close together cost ~30 us); at the task's end
//   cgroup.kill kills whatever is in there, whatever its session or group.
// - else a mark: the task's environment names its set
//   (SQUALL_PROCESS_SET=PID.N), read back from /proc/PID/environ.
// In both the governor is a child subreaper (PR_SET_CHILD_SUBREAPER):
// whatever a task leaves behind becomes the governor's child once its
// parent dies. A sweep (soon after each task's end, and every second) kills
// the adopted children whose set has ended and reaps the adopted ones that
// died; never waitpid(-1), which would take the statuses of the children
// the loop waits for (child-process.h). The processes the governor started
// itself (tasks' first processes, executors, actors) are never touched.
#pragma once

#include "uv-bridge.h"

#include <kj/async.h>
#include <kj/string.h>
#include <kj/vector.h>
#include <spdlog/logger.h>
#include <unordered_set>

namespace squall {

class ProcessSet;

class ProcessSets final : private kj::TaskSet::ErrorHandler {
 public:
  struct Options {
    // Try cgroups (false: the mark and the subreaper only).
    bool cgroups = true;
    // Where the governor's cgroup v2 is looked up (tests point them at
    // files of their own).
    kj::StringPtr procSelfCgroup = "/proc/self/cgroup";
    kj::StringPtr mountInfo = "/proc/self/mountinfo";
    kj::Duration sweepInterval = 1 * kj::SECONDS;
  };

  ProcessSets(UvBridge& bridge, kj::Timer& timer, spdlog::logger& logger, Options options);
  // Kills what is left in the tasks' cgroups and removes them. Adopted
  // processes left outside them are killAdoptedAtExit()'s.
  ~ProcessSets() noexcept(false);
  KJ_DISALLOW_COPY(ProcessSets);

  // "cgroup DIR" or "mark (WHY NO CGROUP)": for the log line at start.
  kj::StringPtr describe() const { return description; }
  bool usesCgroups() const { return base != nullptr; }

  // A set for a task about to start; its end is the set's destruction.
  kj::Own<ProcessSet> open();

  // Kills adopted children whose set has ended, reaps the adopted that
  // died, retries removing emptied cgroups.
  void sweep();

  // For the very end of main(), once every process the governor started
  // has been killed and reaped: every child left is one adopted; kills them
  // and reaps them, again for the ones they leave, for at most `bound`.
  // Returns how many were killed.
  static size_t killAdoptedAtExit(spdlog::logger& logger, kj::Duration bound = 3 * kj::SECONDS);

  // The environment variable that marks a task's processes.
  static constexpr const char* MARK = "SQUALL_PROCESS_SET";

 private:
  friend class ProcessSet;
  UvBridge& bridge;
  kj::Timer& timer;
  spdlog::logger& logger;
  Options options;
  kj::String description;
  // <own cgroup>/squall-governor-PID; null without cgroups.
  kj::String base;
  uint64_t nextSet = 1;
  // Sets whose task has not ended.
  std::unordered_set<uint64_t> open_;
  // Cgroups killed but not yet empty.
  kj::Vector<kj::String> toRemove;
  bool sweepSoon = false;
  // The sweeps' timers.
  kj::TaskSet tasks;

  void findCgroup();
  void removeStale(kj::StringPtr dir);
  void disableCgroups(kj::StringPtr why);
  void ended(uint64_t set, kj::Maybe<kj::String> cgroup, kj::Maybe<kj::Promise<void>> moving);
  void requestSweep();
  kj::Promise<void> tick();
  void taskFailed(kj::Exception&& e) override;
};

// One task's processes. Owned by the task's runner; dropped when the task
// ends (its first process has exited, or it was cancelled).
class ProcessSet {
 public:
  ProcessSet(ProcessSets& sets, uint64_t number, kj::Maybe<kj::String> cgroup);
  // Kills what is left (cgroup.kill) and lets the sweep kill escaped ones.
  ~ProcessSet() noexcept(false);
  KJ_DISALLOW_COPY(ProcessSet);

  // MARK=PID.N, for the task's environment.
  kj::StringPtr environmentEntry() const { return entry; }
  // Moves the task's first process, just started, into the set's cgroup
  // (made then), on the pool. Whatever it starts before the move stays in
  // the governor's cgroup: the mark is what finds it.
  void adopt(int pid);

 private:
  ProcessSets& sets;
  uint64_t number;
  kj::String entry;
  kj::Maybe<kj::String> cgroup;
  kj::Maybe<kj::Promise<void>> moving;
};

}  // namespace squall
