// Sends task results to the server in batches: at most one
// GovernorUpstream.update is in flight; results that finish meanwhile go
// together in the next one. A result is kept until the server has it in
// its session log (the update said so, or GovernorControl.resultsDurable
// came for it later), and sent again after a reconnect until then. Loop
// thread only.
#pragma once

#include <unordered_set>

#include "task-outcome.h"

#include <deque>
#include <kj/async.h>
#include <kj/timer.h>
#include <map>
#include <spdlog/logger.h>
#include <squall/wire/service.capnp.h>
#include <vector>

namespace squall {

class ResultBatcher final : private kj::TaskSet::ErrorHandler {
 public:
  // Bytes of results per message, well under capnp's 64 MiB limit.
  static constexpr size_t MAX_BATCH_BYTES = 8 << 20;

  ResultBatcher(wire::GovernorUpstream::Client upstream, kj::Timer& timer, spdlog::logger& logger);
  // Not connected yet: results wait for connected().
  ResultBatcher(kj::Timer& timer, spdlog::logger& logger);
  KJ_DISALLOW_COPY(ResultBatcher);

  void report(TaskOutcome outcome);
  // The governor's queue ran dry (TaskQueue::onDry): the next update says
  // so, and the server may queue more here (docs/scheduling.md).
  void ranDry() { dry = true; }
  // Registered (again) with the server: sends what waits. Results whose
  // update was lost with the previous connection are sent again (the server
  // drops those it has already recorded).
  void connected(wire::GovernorUpstream::Client upstream);
  // The server's log holds the results of updates numbered up to `through`.
  void durable(uint64_t through);
  // The server is another (started again on another log: ServerLink's
  // start-over): every result waiting, in flight or not yet durable is
  // dropped, and so are those of `tasks` when they come (they were
  // cancelled). Call before connected().
  void abandon(const std::vector<Id>& tasks);
  // Resolves once every task abandoned has ended (its result dropped).
  kj::Promise<void> abandonedEnded();
  // Tasks whose results are not durable at the server yet (for the
  // inventory).
  std::vector<Id> unacknowledged() const;
  size_t undurableCount() const;

  size_t pendingCount() const { return pending.size(); }
  uint64_t updatesSent() const { return sent; }

 private:
  kj::Maybe<wire::GovernorUpstream::Client> upstream;
  kj::Timer& timer;
  spdlog::logger& logger;
  std::deque<TaskOutcome> pending;
  // Ids of the results of the update in flight.
  std::vector<Id> inFlight;
  // Results applied by the server and not yet in its log, by update number.
  std::map<uint64_t, kj::Vector<TaskOutcome>> applied;
  uint64_t nextUpdate = 1;
  uint64_t durableThrough = 0;
  bool busy = false;  // an update is scheduled or in flight
  bool dry = false;
  // Bumped by connected(): which connection an update went out on.
  uint64_t generation = 0;
  uint64_t sent = 0;
  // Tasks whose results are dropped when they come (abandon()).
  std::unordered_set<Id, IdHash> abandoned;
  kj::Own<kj::PromiseFulfiller<void>> abandonedWaiter;
  // Bumped by abandon(): which server's results an update carried.
  uint64_t epoch = 0;
  kj::TaskSet tasks;

  void schedule();
  kj::Promise<void> sendBatch();
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
