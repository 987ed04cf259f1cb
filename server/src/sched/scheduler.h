// Placement of ready tasks on governors. Pure decisions over the state of
// SessionTable and GovernorPool; loop thread only.
#pragma once

#include "governor-pool.h"
#include "session-table.h"

#include <deque>

namespace squall {

struct SchedulerOptions {
  // Cpus' worth of tasks a governor may hold beyond its own cpus, queued on
  // the governor so it never idles waiting for the server's next batch.
  // Deeper queues raise throughput for tiny tasks; shallower ones keep
  // placement decisions later (better locality and balance for long tasks).
  uint32_t queueDepth = 16;
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options) : options(options) {}

  // Places tasks from the front of `ready` while some governor has room;
  // those placed (and those no longer READY) leave the queue, the rest stay
  // in order. A task goes where most of its input bytes already are, then
  // to the least loaded governor.
  //
  // A task joined to others by live streams goes only with its whole group,
  // once every member is READY, and only onto free cpus (not queue depth):
  // all of them must start at once. The group goes to one governor when one
  // has room (pipes stay local), else spread over several. While a group
  // waits for room, other tasks are placed without queue depth, so queues
  // drain and the group is not starved.
  void place(std::deque<Id>& ready, SessionTable& sessions, GovernorPool& governors);

 private:
  SchedulerOptions options;

  // Places every member of `group` or none; false when they do not fit now.
  bool placeGroup(StreamGroup& group, SessionTable& sessions, GovernorPool& governors);

  bool hasRoom(const GovernorState& governor, uint32_t cpus, uint32_t depth) const {
    return cpus <= governor.cpus && governor.load + cpus <= governor.cpus + depth;
  }
};

}  // namespace squall
