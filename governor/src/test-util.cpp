// Test helpers. Test thread only.
#include "test-util.h"

#include "file-ops.h"

#include <cstdlib>
#include <fstream>
#include <kj/debug.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sstream>
#include <unistd.h>

namespace squall {

TempDir::TempDir() {
  const char* tmp = getenv("TMPDIR");
  auto pattern = kj::str(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/squall-gov-test-XXXXXX");
  KJ_ASSERT(mkdtemp(pattern.begin()) != nullptr, strerror(errno));
  dirPath = kj::mv(pattern);
}

TempDir::~TempDir() { removeTree(dirPath); }

std::shared_ptr<spdlog::logger> testLogger() {
  auto logger = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  const char* level = getenv("SQUALL_TEST_LOG");
  logger->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
  return logger;
}

std::string readWholeFile(kj::StringPtr path) {
  std::ifstream in(path.cStr(), std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

bool isGoneOrZombie(int pid, int seconds) {
  for (int i = 0; i < seconds * 100; i++) {
    auto stat = readWholeFile(kj::str("/proc/", pid, "/stat"));
    if (stat.empty()) return true;
    auto close = stat.rfind(')');
    if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'Z') return true;
    usleep(10000);
  }
  return false;
}

}  // namespace squall
