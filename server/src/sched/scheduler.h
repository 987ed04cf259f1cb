// Placement of ready tasks on governors. Pure decisions over the state of
// SessionTable and GovernorPool; loop thread only. See docs/scheduling.md.
#pragma once

#include "governor-pool.h"
#include "ready-queue.h"
#include "session-table.h"

#include <random>

namespace squall {

enum class Placement {
  // Critical path first (b-level), onto the governor that can start the
  // task now with the fewest input bytes to move; work stealing.
  BLEVEL,
  // A governor with room drawn at random (seeded): the floor any
  // scheduler must beat (ESTEE), for benchmarks.
  RANDOM,
};

struct SchedulerOptions {
  // Cpus' worth of tasks a governor may hold beyond its own cpus, queued on
  // the governor so it never idles waiting for the server's next batch.
  // Deeper queues raise throughput for tiny tasks; work stealing takes
  // queued tasks back when another governor idles, so they cost little
  // balance for long tasks.
  // The base: a governor that runs dry while tasks wait on the server (its
  // tasks end faster than the server's next batch reaches it) gets twice
  // its depth, up to Scheduler::MAX_QUEUE_DEPTH, until no task waits.
  uint32_t queueDepth = 16;
  Placement placement = Placement::BLEVEL;
  // Seeds RANDOM's draws: the same graph on the same governors is placed
  // the same way.
  uint64_t seed = 1;
  // Whether idle governors take queued tasks from loaded ones (BLEVEL).
  bool steal = true;
  // Whether a waiting task's finished inputs go ahead to where it will
  // probably run (BLEVEL).
  bool prefetch = true;
  // Inputs smaller than this are not sent ahead (fetching them when the
  // task starts costs about nothing).
  uint64_t prefetchMinBytes = 16 * 1024;
};

// Objects for one governor to fetch ahead of their readers.
struct PrefetchOrder {
  GovernorId to;
  std::vector<ObjectNode*> objects;
};

// Queued tasks to take back from one governor (GovernorControl.retract)
// for another with free cpus.
struct Retraction {
  GovernorId from;
  GovernorId to;
  std::vector<Id> tasks;
  uint32_t cpus;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options) : options(options), random(options.seed) {}

  // Tasks that became READY join the queue at their b-level.
  void enqueue(const std::vector<Id>& ids, SessionTable& sessions);

  // Places queued tasks, highest b-level first, while some governor has
  // room; the rest stay queued in their order. A task goes to a governor
  // that can start it now (free cpus and resources) if there is one, else
  // into the queue of one with room; among those, where the fewest input
  // bytes must be moved, then the least loaded.
  //
  // A task joined to others by live streams goes only with its whole group,
  // once every member is READY, and only onto free cpus (not queue depth):
  // all of them must start at once. The group goes to one governor when one
  // has room (pipes stay local), else spread over several. While a group
  // waits for room, other tasks are placed without queue depth, so queues
  // drain and the group is not starved.
  void place(SessionTable& sessions, GovernorPool& governors);

  // The most cpus' worth a governor's queue grows to (ranDry).
  static constexpr uint32_t MAX_QUEUE_DEPTH = 1024;
  // `governor` ran dry: a task's end there left cpus free with none of its
  // tasks ready (GovernorUpstream.update's ranDry). If tasks wait here
  // meanwhile, its queue was too short to cover the trip of its results
  // and of the next batch (tiny tasks): its depth doubles.
  // (place() sets every depth back to the base once no task waits.)
  void ranDry(GovernorState& governor);

  // Work stealing, after place(): governors with free cpus that no queued
  // task could use take tasks that loaded governors hold queued beyond
  // their cpus, the most recently assigned first (the last in those
  // queues). The tasks chosen are marked `retracting`; the caller asks
  // their governors to give them back and returns those given back to the
  // queue (SessionTable::retracted).
  std::vector<Retraction> steal(SessionTable& sessions, GovernorPool& governors);
  // The governor answered (or the call failed): the thief no longer waits
  // for those cpus' worth (the tasks given back are queued again).
  void retractionSettled(const Retraction& retraction);
  // Prefetching, after place(): a task in `waiting` (an input of it just
  // finished; it still waits for others) reads several inputs, made on
  // several governors, and whichever governor runs it must fetch those made
  // elsewhere, after the last one is made. Instead its finished inputs go
  // ahead, as they finish, to one governor chosen when the first does (the
  // one holding most of its input bytes among those offering what it
  // needs), which then holds the most and is where place() puts it, all
  // else equal. Marks each object sent for in ObjectNode::prefetching; the
  // caller sends the orders and records the copies the governors confirm.
  std::vector<PrefetchOrder> prefetch(const std::vector<Id>& waiting, SessionTable& sessions,
                                      GovernorPool& governors);

  // Method calls (docs/actors.md), after place(): the calls of actors that
  // something happened to (a call became ready, the actor was placed) go
  // to their actor's governor, in their turns, as far as the first call
  // that is not ready. Calls of an actor that has ended fail.
  void placeCalls(SessionTable& sessions, GovernorPool& governors);
  // Actors placed other than by this scheduler (adopted from a governor
  // that came back): placeCalls() looks at their calls.
  void actorsPlaced(const std::vector<Id>& actors) {
    actorsToPlace.insert(actorsToPlace.end(), actors.begin(), actors.end());
  }

  size_t readyCount() const { return ready.size(); }
  // The queue in placement order (tests, `squall explain`).
  std::vector<Id> queued() const;
  const SchedulerOptions& settings() const { return options; }

 private:
  SchedulerOptions options;
  ReadyQueue ready;
  std::mt19937_64 random;
  // Counts place() calls: TaskNode::assignedAt.
  uint64_t passes = 0;
  // Cpus' worth of tasks being taken back for each thief, and from each
  // loaded governor.
  std::map<GovernorId, int64_t> incoming;
  std::map<GovernorId, int64_t> outgoing;
  // Actors (their tasks' ids) whose calls placeCalls() looks at next.
  std::vector<Id> actorsToPlace;

  // Places every member of `group` or none; false when they do not fit now.
  bool placeGroup(StreamGroup& group, SessionTable& sessions, GovernorPool& governors);
  // `shallow`: no queue depth at all (a stream group waits for room).
  GovernorState* choose(const TaskNode& task, GovernorPool& governors, bool shallow);
  uint32_t depthOf(const GovernorState& g, bool shallow) const {
    return shallow ? 0 : std::max(options.queueDepth, g.deepQueue);
  }
  void assign(TaskNode& task, GovernorState& governor, SessionTable& sessions, GovernorPool& governors);
};

}  // namespace squall
