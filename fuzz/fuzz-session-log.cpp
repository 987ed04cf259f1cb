// libFuzzer target: the session log at replay (server/src/session-log:
// SessionLog's open and load, server/src/recovery: recoverSessions with
// SessionTable::restore, and SessionHistory::open), as squall-server does
// at start. The input is the database file itself, so a corrupted log:
// SQLite's pages, the schema, and the packed capnp rows in them. Seeds are
// real logs (fuzz/seeds.cpp) with 512-byte pages, to keep them small.
#include "fuzz-util.h"

#include <fstream>
#include <recovery.h>
#include <session-history.h>
#include <spdlog/sinks/null_sink.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto logger =
      std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
  auto& scratch = squall::fuzz::scratchDir("session-log");
  auto path = scratch / "server.sqlite";
  for (auto suffix : {"-wal", "-shm"}) std::filesystem::remove(path.string() + suffix);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  squall::fuzz::expectingRefusals([&]() {
    squall::SessionLog log(path, *logger);
    squall::SessionTable sessions(*logger);
    squall::GovernorPool governors;
    squall::SessionHistory history(squall::HistoryLimits{}, *logger);
    sessions.useLog(&log);
    if (squall::recoverSessions(log, sessions, governors, *logger, nullptr)) history.open(log);
    sessions.useLog(nullptr);
  });
  return 0;
}
