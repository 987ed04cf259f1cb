// Turns a burst of events into one scheduling pass and one batched RPC per
// governor. Loop thread only: every event handler calls kick(); the pass
// runs once the current burst of events has been handled.
//
// With a session log, the state changes of a pass are handed to a commit
// on the log's writer thread, while the loop goes on; changes queued while
// one is under way go together in the next (group commit). Assignments are
// sent at once; cancels and removals, and a governor's assignments queued
// behind its cancels, wait for the commit that has what led to them; and
// a governor is told its results are durable (resultsDurable) by the
// commit that wrote them. See docs/recovery.md.
#pragma once

#include "governor-pool.h"
#include "scheduler.h"
#include "session-table.h"

#include <deque>
#include <map>
#include <kj/async.h>
#include <kj/timer.h>
#include <spdlog/logger.h>

namespace squall {

class Dispatcher final : private kj::TaskSet::ErrorHandler {
 public:
  // Log commits start at most this often: nothing waits on them but
  // cancels, removals and governors' confirmations, and fewer, larger
  // transactions cost far less.
  static constexpr kj::Duration COMMIT_INTERVAL = 5 * kj::MILLISECONDS;
  // A task whose input's source went away is placed again after this, by
  // when the server has heard of the loss (SessionTable::taskResult).
  static constexpr kj::Duration INPUT_RETRY_DELAY = 200 * kj::MILLISECONDS;

  Dispatcher(SessionTable& sessions, GovernorPool& governors, Scheduler& scheduler, kj::Timer& timer,
             spdlog::logger& logger)
      : sessions(sessions), governors(governors), scheduler(scheduler), timer(timer), logger(logger),
        rpcs(*this) {}

  // Asks for a pass; many kicks before it runs make one pass.
  void kick();
  // The governor's queue ran dry (Scheduler::ranDry).
  void ranDry(GovernorState& governor) {
    uint32_t before = governor.deepQueue;
    scheduler.ranDry(governor);
    if (governor.deepQueue != before) {
      logger.debug("event=queue-deepened governor={} depth={}", governor.id, governor.deepQueue);
    }
  }
  // The governor's connection is gone: forget it, fail what depended on it.
  void governorLost(GovernorId id);
  // Resolves once what happened so far is in the session log (at once
  // without one); rejected OVERLOADED when that commit fails.
  kj::Promise<void> durable();
  // After a restart: no task is placed until resume(), so that governors
  // coming back can report what they still run before anything is run
  // twice. Events are still handled.
  void hold() { holding = true; }
  void resume();
  bool held() const { return holding; }
  // Resolves once tasks are placed (at once unless held).
  kj::Promise<void> whenPlacing();
  // Governors the log knew that did not come back in time: their copies
  // are gone (what is still needed is made again).
  void expectedGone(const std::map<std::string, GovernorId>& missing);

  // A submit naming uploads to `governor` (ObjectSpec.placedOn) was
  // applied: it is told to make them objects of its store, before any
  // assignment that reads them (calls on its capability arrive in order).
  // One it does not hold is lost (SessionTable::fail names it).
  void claimUploads(GovernorState& governor, uint64_t session, std::vector<Id> objects);

  size_t readyCount() const { return scheduler.readyCount(); }
  const Scheduler& placement() const { return scheduler; }
  uint64_t passes() const { return passCount; }

 private:
  SessionTable& sessions;
  GovernorPool& governors;
  Scheduler& scheduler;
  kj::Timer& timer;
  spdlog::logger& logger;
  bool pending = false;
  bool holding = false;
  uint64_t passCount = 0;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> waitingForPlacing;
  // durable() promises the next commit settles.
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> waitingForLog;
  // A log commit is under way; when the last one started; a pass is
  // already due for the next.
  bool committing = false;
  kj::TimePoint lastCommit = kj::origin<kj::TimePoint>();
  bool commitDue = false;
  kj::TaskSet rpcs;

  // How much of each governor's outboxes a commit covers.
  struct Cut {
    size_t assign = 0, cancel = 0, remove = 0;
    uint64_t durableUpdate = 0;  // confirmed to the governor (0: none)
  };
  using Cuts = std::map<GovernorId, Cut>;
  struct Commit {
    Cuts cuts;
    std::vector<kj::Own<kj::PromiseFulfiller<void>>> waiting;
  };

  void pass();
  // With a session log: sends what may go now, and starts or schedules a
  // commit for the rest.
  void sendWithLog();
  // Hands the log's queued changes to a commit; once it is done, confirms
  // the governors' updates it has and sends what waited for it.
  void commitLog();
  Cuts cutAll();
  void send(const Cuts& cuts);
  void flush(GovernorState& governor, const Cut& cut);
  // One assign call: the tasks assign[which...] and the constants.
  void sendAssign(GovernorState& governor, const std::vector<Id>& assign,
                  const std::vector<size_t>& which, const std::vector<ObjectNode*>& constants);
  // The governor answered an assign carrying these actors: it holds them
  // (ActorNode.heldBy).
  void actorsHeld(GovernorId governor, const std::vector<Id>& actors);
  void assignFailed(GovernorId governor, const std::vector<Id>& sent, const std::vector<Id>& constants,
                    kj::Exception&& e);
  // Asks the order's governor to fetch its objects ahead of their readers.
  void sendPrefetch(const PrefetchOrder& order);
  // Records the copies the governor confirmed (and removes those no longer
  // needed).
  void prefetched(GovernorId to, const std::vector<Id>& asked, const std::vector<Id>& held);
  // Asks the governor for the tasks back; those it gives are queued again.
  void retract(Retraction retraction);
  void retracted(const Retraction& retraction, const std::vector<Id>& back);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
