// Sends task results to the server in batches: at most one
// GovernorUpstream.update is in flight; results that finish meanwhile go
// together in the next one. Loop thread only.
#pragma once

#include "task-outcome.h"

#include <deque>
#include <kj/async.h>
#include <kj/timer.h>
#include <spdlog/logger.h>
#include <squall/wire/service.capnp.h>

namespace squall {

class ResultBatcher final : private kj::TaskSet::ErrorHandler {
 public:
  // Bytes of results per message, well under capnp's 64 MiB limit.
  static constexpr size_t MAX_BATCH_BYTES = 8 << 20;

  ResultBatcher(wire::GovernorUpstream::Client upstream, kj::Timer& timer, spdlog::logger& logger);
  KJ_DISALLOW_COPY(ResultBatcher);

  void report(TaskOutcome outcome);

  size_t pendingCount() const { return pending.size(); }
  uint64_t updatesSent() const { return sent; }

 private:
  wire::GovernorUpstream::Client upstream;
  kj::Timer& timer;
  spdlog::logger& logger;
  std::deque<TaskOutcome> pending;
  bool busy = false;  // an update is scheduled or in flight
  uint64_t sent = 0;
  kj::TaskSet tasks;

  void schedule();
  kj::Promise<void> sendBatch();
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
