// References to the server's parts, wired by main() and handed to the RPC
// service objects. Loop thread only.
#pragma once

#include "dispatcher.h"
#include "governor-pool.h"
#include "session-history.h"
#include "session-output.h"
#include "session-table.h"

#include <kj/timer.h>
#include <memory>
#include <spdlog/logger.h>
#include <string>

namespace squall {

struct ServerContext {
  SessionTable& sessions;
  // Closed sessions, for getState / getTasks / findSession.
  const SessionHistory& history;
  GovernorPool& governors;
  Dispatcher& dispatcher;
  spdlog::logger& logger;
  std::string token;
  Limits limits;
  // Bytes of every open submit (Limits::pendingBytes). Shared: submissions
  // can outlive the context (see `running`).
  std::shared_ptr<uint64_t> pendingSubmitBytes = std::make_shared<uint64_t>(0);
  // False once main() starts tearing the server down. RPC objects copy it:
  // capnp keeps some of them alive in the event loop, which outlives the
  // parts above, and their destructors must then leave those parts alone.
  std::shared_ptr<bool> running = std::make_shared<bool>(true);
  // Heartbeats: a governor that does not answer a ping within
  // `governorTimeout` is given up (0: never; no timer: no heartbeats).
  kj::Timer* timer = nullptr;
  kj::Duration governorTimeout = 0 * kj::SECONDS;
  // ClientService.placeData's turn: uploads go to the governors in turn.
  uint64_t nextPlace = 0;
  // What tasks printed, for ClientService.watchOutput (main() tells it
  // which sessions are open).
  SessionOutput output;
};

}  // namespace squall
