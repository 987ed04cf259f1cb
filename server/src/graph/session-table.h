// Every session's graph and the state transitions driven by clients and
// governors. Owned by the loop thread; never blocks, never sends RPCs
// itself: what must reach governors is queued in `effects()` and flushed by
// the Dispatcher once per pass, so a burst of events costs one RPC each.
#pragma once

#include "graph.h"
#include "session-log.h"
#include "stats.h"
#include "submit.h"

#include <algorithm>
#include <functional>
#include <deque>
#include <map>
#include <spdlog/logger.h>

namespace squall {

struct Effects {
  // Tasks that became READY, in order.
  std::vector<Id> ready;
  // (governor, task) to cancel; (governor, object) to remove.
  std::vector<std::pair<GovernorId, Id>> cancel;
  std::vector<std::pair<GovernorId, Id>> remove;
  // Lingering sessions whose last named actor ended: to close.
  std::vector<uint64_t> closeLingering;
  // READY tasks to place again after a pause (an input's source went away;
  // see SessionTable::taskResult), in order.
  std::vector<Id> readyLater;
  // WAITING tasks an input of which just finished (candidates for
  // prefetching the finished ones); may repeat.
  std::vector<Id> inputFinished;
  // Actors adopted from a governor that came back: their calls may follow
  // them (Scheduler::placeCalls).
  std::vector<Id> actorsPlaced;
};

class SessionTable {
 public:
  // Placements a task gets again when an input's source went away before
  // it ran (each after Dispatcher::INPUT_RETRY_DELAY), before it fails.
  static constexpr uint32_t MAX_INPUT_RETRIES = 10;
  // The most ids one reserveIds hands out.
  static constexpr uint64_t MAX_ID_BLOCK = uint64_t(1) << 32;

  explicit SessionTable(spdlog::logger& logger) : logger(logger) {}

  // Writes to `log` (none: nothing survives a restart). Not owned. The
  // table takes the log's incarnation; it keeps it when the log is taken
  // away (nullptr, at shutdown).
  void useLog(SessionLog* sessionLog) {
    log = sessionLog;
    if (log != nullptr) incarnationId = log->incarnation();
  }
  SessionLog* sessionLog() { return log; }
  // What session ids are ids of (SessionLog::incarnation): the log's, or
  // without one a random one of this table's own, so that a server started
  // again without a log is another incarnation too.
  uint64_t incarnation() const { return incarnationId; }

  // Durable before it returns when there is a log (throws FAILED naming
  // the log's problem, e.g. a full disk; nothing is opened then).
  Session& open(std::string name, const void* owner, bool persistent = false);
  // Brings back a session the log holds: its graph through the same
  // validation as a submit, then the recorded outcomes as if their
  // governors had reported them (`governorId` maps a recorded governor
  // name to the id it has or will have when it reconnects). Logs nothing.
  Session& restore(const SessionLog::SessionRecord& record,
                   const std::function<GovernorId(const std::string&)>& governorId);
  // New sessions get ids above `id` (one kept in the history), so that no
  // id names two sessions across a restart.
  void reserveIds(uint64_t id) { nextSession = std::max(nextSession, id + 1); }
  // The calling client owns the session from now (it re-attached after
  // losing its connection, or the server restarted).
  void adopt(Session& session, const void* owner) { session.owner = owner; }
  // Throws FAILED "unknown session" for ids never opened or already closed.
  Session& get(uint64_t id);
  kj::Maybe<Session&> find(uint64_t id);
  // A task of an open session, or nullptr.
  kj::Maybe<TaskNode&> findTask(Id id);
  kj::Maybe<ObjectNode&> findObject(Id id);
  // Closes the session; one with named actors alive lingers instead (it
  // stays open, ownerless, persistent in the log, until they end), unless
  // `evenIfNamedActors`.
  void close(uint64_t id, bool evenIfNamedActors = false);
  void closeOwnedBy(const void* owner);
  // The live named actors, by name.
  const std::map<std::string, Id>& namedActors() const { return named; }
  // How the last actor of `name` ended ("task 3 of session 2 failed: ..."),
  // while no live actor has the name; nullptr when none did since the
  // server started (kept for the last MAX_ENDED_NAMES names).
  const std::string* namedActorEnd(const std::string& name) const;
  // Registers the named actors of `session` not registered yet.
  void registerNamedActors(Session& session);
  // Unregisters the names of the session's actors (it closes or failed:
  // `why`, kept as how they ended).
  void forgetNames(Session& session, const char* why);
  // Drops a session from memory only (one that could not be restored: its
  // rows stay in the log).
  void forget(uint64_t id) { sessions.erase(id); }

  // Applies a validated submit (see PendingSubmit::commit).
  void submitted(Session& session, std::vector<TaskNode*> ready);

  void assigned(TaskNode& task, GovernorId governor);
  // Its governor gave it back before starting it (work stealing): it is
  // placed again.
  void retracted(TaskNode& task);
  // A governor reported a task's outcome. Results for tasks that are no
  // longer assigned (cancelled, session closed) are dropped, and any outputs
  // they made are queued for removal.
  void taskResult(wire::TaskResult::Reader result, GovernorId from, kj::StringPtr fromName);
  // `assigned`: the tasks it held. Its running and queued tasks go back to
  // be placed elsewhere; objects that lived only there and are still needed
  // (kept, or read by an unfinished task) are made again from lineage:
  // their producers run again, and so do the producers of those tasks'
  // inputs that are gone too, and no further. Tasks joined by live streams
  // cannot be resumed or remade: their session fails, naming them.
  void governorLost(GovernorId governor, kj::StringPtr name, const std::vector<Id>& assigned);
  // A governor (re)registered holding `tasks` (queued, running, or done
  // with results it has not delivered yet) and `objects`. Tasks still to be
  // run are adopted (ASSIGNED to it, returned so that the caller holds
  // their capacity); the rest are cancelled there. Objects that are
  // finished and wanted are adopted; others are removed there. Objects the
  // table thought it held but it no longer reports are lost (made again
  // as governorLost does). Tasks and objects in `direct` the table does
  // not know (actor calls clients sent there directly, GovernorInfo.
  // direct) are left alone: their results will record them.
  std::vector<TaskNode*> governorReturned(GovernorId governor, kj::StringPtr name,
                                          capnp::List<wire::Id>::Reader tasks,
                                          capnp::List<wire::ObjectInfo>::Reader objects,
                                          capnp::List<wire::Id>::Reader direct = {});

  // Ends an actor at its client's word (docs/actors.md): its task ends
  // cancelled (its governor is told to stop it), not failed, and so do its
  // calls that have not run (their outputs are never made; what reads them
  // is skipped). Nothing for an actor that has ended. Throws FAILED for a
  // task that is no actor.
  void killActor(Session& session, uint64_t n);
  // The actor's task has ended: its calls not done end too (cancelled if it
  // was killed, else failed, saying why), without failing the session
  // again; what reads their outputs is skipped.
  void actorEnded(Session& session, ActorNode& actor);
  // Cancels task n and, transitively, every task it submitted (TaskSpec.
  // parent): each unfinished one ends cancelled (an actor as if killed),
  // what reads their outputs is skipped, and the session goes on. A task
  // that has ended keeps its outcome, its children are still cancelled.
  // Throws FAILED for an unknown task.
  void cancelTask(Session& session, uint64_t n);
  // Cancels the children of `parent` (transitively), saying `why`: it
  // failed, was cancelled, or is run again (a new run submits its own).
  void cancelChildren(Session& session, TaskNode& parent, const std::string& why);
  // One task of cancelTask/cancelChildren: cancelled saying `why` (an actor
  // killed); nothing for one that has ended.
  void cancelOne(Session& session, TaskNode& task, const std::string& why);
  // reserveIds: [first, first + count) of the session, durable on return.
  uint64_t reserveIds(Session& session, uint64_t count);

  // Fails the session: its unfinished tasks are cancelled.
  void fail(Session& session, std::string message, const TaskNode* task = nullptr,
            wire::TaskResult::Reader result = {});
  void unkeep(Session& session, capnp::List<uint64_t>::Reader ids);

  // Resolves when every id is finished (ids empty: every task so far), when
  // one is (any), or when the session fails or closes. Unknown ids throw.
  kj::Promise<void> wait(Session& session, capnp::List<uint64_t>::Reader ids, bool any);

  Effects& effects() { return pending; }
  const std::map<uint64_t, Session>& all() const { return sessions; }
  // Counters for the status page; the Dispatcher adds its own to them.
  ServerStats& stats() { return counters; }
  // Called with a session just before close() forgets it, its unfinished
  // tasks cancelled (main() keeps it in the SessionHistory). Must not touch
  // the table.
  std::function<void(const Session&)> onClose;

 private:
  spdlog::logger& logger;
  SessionLog* log = nullptr;
  uint64_t incarnationId = SessionLog::newIncarnation();
  // Set while restore() re-applies what the log holds.
  bool restoring = false;
  std::map<uint64_t, Session> sessions;
  uint64_t nextSession = 1;
  Effects pending;
  std::map<std::string, Id> named;
  static constexpr size_t MAX_ENDED_NAMES = 10000;
  std::map<std::string, std::string> endedNames;  // name -> how its last actor ended
  std::deque<std::string> endedOrder;             // its names, the first to end first
  // Its named actors that have not ended.
  static size_t livingNamedActors(const Session& session);
  // A lingering session without them is queued to close (once).
  void closeIfNoNamedActorLives(Session& session);
  // Unregisters the actor's name (if it holds it) and keeps why it ended.
  void unname(const Session& session, const ActorNode& actor, const char* why);
  ServerStats counters;

  void finishTask(Session& session, TaskNode& task, wire::TaskResult::Reader result, GovernorId from);
  // Queues the task's outcome (and its outputs') for the log's next flush.
  void record(Session& session, TaskNode& task, wire::TaskResult::Reader result);
  // `governor` no longer holds the objects for which `held` says false:
  // forgets those copies and makes again what is still needed.
  void locationsLost(GovernorId governor, kj::StringPtr name,
                     const std::function<bool(const ObjectNode&)>& held,
                     std::vector<std::pair<Session*, TaskNode*>>& touched);
  // An allowed failure: the task's outputs will never be made; tasks that
  // need them are skipped, transitively. The session carries on.
  void abandon(Session& session, TaskNode& task);
  // Fails a task the server decided about itself (an actor whose governor
  // was lost, its restarts used up), as a failed result would.
  void failLost(Session& session, TaskNode& task, const std::string& error);
  void taskDone(Session& session, TaskNode& task);
  void releaseInput(ObjectNode& object);
  // Marks `lost` (and, as needed, the inputs of its producer, transitively)
  // to be made again; collects the tasks whose readiness changed. Returns
  // false when it cannot (a stream group): the session has been failed.
  bool remake(Session& session, ObjectNode& lost, kj::StringPtr governor,
              std::vector<TaskNode*>& touched);
  // A task that is not done: READY (and queued) when every non-live input
  // is finished, else WAITING.
  void requeue(Session& session, TaskNode& task);
  void maybeRemove(ObjectNode& object);
  void removeNow(ObjectNode& object);
  void notify(std::vector<std::shared_ptr<Waiter>>& waiters);
  void notifyAll(Session& session);
};

}  // namespace squall
