// GovernorControl: what the server calls on this governor (assign, remove,
// cancel, results durable). A thin adapter over ObjectStore, TaskQueue and
// ResultBatcher. Loop thread only.
#pragma once

#include "object-store.h"
#include "result-batcher.h"
#include "task-queue.h"
#include "uploads.h"

#include <spdlog/logger.h>
#include <squall/wire/service.capnp.h>

namespace squall {

class GovernorControlImpl final : public wire::GovernorControl::Server {
 public:
  GovernorControlImpl(ObjectStore& store, TaskQueue& queue, ResultBatcher& batcher,
                      spdlog::logger& logger, kj::Maybe<UploadTable&> uploads = nullptr)
      : store(store), queue(queue), batcher(batcher), logger(logger), uploads(uploads) {}

  // Stores the constants first, so tasks of the same call find them.
  kj::Promise<void> assign(AssignContext context) override;
  kj::Promise<void> removeObjects(RemoveObjectsContext context) override;
  kj::Promise<void> cancelTasks(CancelTasksContext context) override;
  kj::Promise<void> retract(RetractContext context) override;
  kj::Promise<void> resultsDurable(ResultsDurableContext context) override;
  kj::Promise<void> ping(PingContext context) override;
  kj::Promise<void> prefetch(PrefetchContext context) override;
  // Uploads named by an applied submit become store objects.
  kj::Promise<void> claimUploads(ClaimUploadsContext context) override;

 private:
  ObjectStore& store;
  TaskQueue& queue;
  ResultBatcher& batcher;
  spdlog::logger& logger;
  kj::Maybe<UploadTable&> uploads;
};

}  // namespace squall
