// References to the server's parts, wired by main() and handed to the RPC
// service objects. Loop thread only.
#pragma once

#include "dispatcher.h"
#include "governor-pool.h"
#include "session-table.h"

#include <spdlog/logger.h>
#include <string>

namespace squall {

struct ServerContext {
  SessionTable& sessions;
  GovernorPool& governors;
  Dispatcher& dispatcher;
  spdlog::logger& logger;
  std::string token;
  SubmitLimits limits;
};

}  // namespace squall
