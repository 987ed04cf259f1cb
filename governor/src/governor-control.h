// GovernorControl: what the server calls on this governor (assign, remove,
// cancel). A thin adapter over ObjectStore and TaskQueue. Loop thread only.
#pragma once

#include "object-store.h"
#include "task-queue.h"

#include <spdlog/logger.h>
#include <squall/wire/service.capnp.h>

namespace squall {

class GovernorControlImpl final : public wire::GovernorControl::Server {
 public:
  GovernorControlImpl(ObjectStore& store, TaskQueue& queue, spdlog::logger& logger)
      : store(store), queue(queue), logger(logger) {}

  // Stores the constants first, so tasks of the same call find them.
  kj::Promise<void> assign(AssignContext context) override;
  kj::Promise<void> removeObjects(RemoveObjectsContext context) override;
  kj::Promise<void> cancelTasks(CancelTasksContext context) override;

 private:
  ObjectStore& store;
  TaskQueue& queue;
  spdlog::logger& logger;
};

}  // namespace squall
