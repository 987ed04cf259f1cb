#include <squall/proto/logging.h>

#include <kj/debug.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace squall {

std::shared_ptr<spdlog::logger> makeLogger(const std::string& name, const std::string& level) {
  auto parsed = spdlog::level::from_str(level);
  KJ_REQUIRE(parsed != spdlog::level::off || level == "off",
             "unknown log level (use trace, debug, info, warn, error or off)", level);
  auto logger = std::make_shared<spdlog::logger>(
      name, std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_level(parsed);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %n: %v");
  logger->flush_on(spdlog::level::warn);
  return logger;
}

void KjLogForwarder::logMessage(kj::LogSeverity severity, const char* file, int line, int,
                                kj::String&& text) {
  spdlog::level::level_enum level = spdlog::level::info;
  switch (severity) {
    case kj::LogSeverity::INFO: level = spdlog::level::info; break;
    case kj::LogSeverity::WARNING: level = spdlog::level::warn; break;
    case kj::LogSeverity::ERROR:
    case kj::LogSeverity::FATAL: level = spdlog::level::err; break;
    case kj::LogSeverity::DBG: level = spdlog::level::debug; break;
  }
  kj::StringPtr body = text;
  if (body.size() > 0 && body[body.size() - 1] == '\n') {
    logger.log(level, "source=kj at={}:{} msg=\"{}\"", file, line,
               std::string_view(body.begin(), body.size() - 1));
  } else {
    logger.log(level, "source=kj at={}:{} msg=\"{}\"", file, line, body.cStr());
  }
}

}  // namespace squall
