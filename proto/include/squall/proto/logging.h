// Logging setup shared by every squall program. A logger is created once in
// main() and handed down; KJ's own log output is forwarded into it.
#pragma once

#include <kj/exception.h>
#include <memory>
#include <spdlog/logger.h>
#include <string>

namespace squall {

// A logger named `name` writing to stderr at `level` ("debug", "info", ...).
// Throws FAILED naming the bad level.
std::shared_ptr<spdlog::logger> makeLogger(const std::string& name, const std::string& level);

// While alive on a thread, KJ_LOG output and uncaught-exception reports on
// that thread go to `logger` instead of stderr.
class KjLogForwarder final : public kj::ExceptionCallback {
 public:
  explicit KjLogForwarder(spdlog::logger& logger) : logger(logger) {}
  void logMessage(kj::LogSeverity severity, const char* file, int line, int contextDepth,
                  kj::String&& text) override;

 private:
  spdlog::logger& logger;
};

}  // namespace squall
