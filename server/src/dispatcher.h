// Turns a burst of events into one scheduling pass and one batched RPC per
// governor. Loop thread only: every event handler calls kick(); the pass
// runs once the current burst of events has been handled.
#pragma once

#include "governor-pool.h"
#include "scheduler.h"
#include "session-table.h"

#include <deque>
#include <kj/async.h>
#include <spdlog/logger.h>

namespace squall {

class Dispatcher final : private kj::TaskSet::ErrorHandler {
 public:
  Dispatcher(SessionTable& sessions, GovernorPool& governors, Scheduler& scheduler,
             spdlog::logger& logger)
      : sessions(sessions), governors(governors), scheduler(scheduler), logger(logger), rpcs(*this) {}

  // Asks for a pass; many kicks before it runs make one pass.
  void kick();
  // The governor's connection is gone: forget it, fail what depended on it.
  void governorLost(GovernorId id);

  size_t readyCount() const { return ready.size(); }
  uint64_t passes() const { return passCount; }

 private:
  SessionTable& sessions;
  GovernorPool& governors;
  Scheduler& scheduler;
  spdlog::logger& logger;
  std::deque<Id> ready;
  bool pending = false;
  uint64_t passCount = 0;
  kj::TaskSet rpcs;

  void pass();
  void flush(GovernorState& governor);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
