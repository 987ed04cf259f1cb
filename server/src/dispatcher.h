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
  // Resolves once what happened so far is in the session log (after the
  // next pass; at once without a log). Rejected OVERLOADED when the log
  // cannot be written (a full disk): the caller retries.
  kj::Promise<void> durable();
  // After a restart: no task is placed until resume(), so that governors
  // coming back can report what they still run before anything is run
  // twice. Events are still handled.
  void hold() { holding = true; }
  void resume();
  bool held() const { return holding; }
  // Governors the log knew that did not come back in time: their copies
  // are gone (what is still needed is made again).
  void expectedGone(const std::map<std::string, GovernorId>& missing);

  size_t readyCount() const { return ready.size(); }
  uint64_t passes() const { return passCount; }

 private:
  SessionTable& sessions;
  GovernorPool& governors;
  Scheduler& scheduler;
  spdlog::logger& logger;
  std::deque<Id> ready;
  bool pending = false;
  bool holding = false;
  uint64_t passCount = 0;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> waitingForLog;
  kj::TaskSet rpcs;

  void pass();
  // Writes the log's queued changes; settles durable() promises.
  void flushLog();
  void flush(GovernorState& governor);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
