// Test helpers. Test thread only.
#include "test-util.h"

#include "dir-tree.h"
#include "file-ops.h"
#include "safe-path.h"

#include <algorithm>
#include <fcntl.h>
#include <filesystem>
#include <vector>
#include <cstdlib>
#include <fstream>
#include <kj/debug.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <sstream>
#include <sys/stat.h>
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

void writeText(kj::StringPtr path, const std::string& content) {
  auto slash = KJ_ASSERT_NONNULL(path.findLast('/'));
  makeDirs(kj::heapString(path.slice(0, slash)));
  writeFile(path, kj::arrayPtr(reinterpret_cast<const kj::byte*>(content.data()), content.size()), 0644);
}

std::string describeTree(kj::StringPtr root) {
  namespace fs = std::filesystem;
  std::vector<std::string> lines;
  for (auto it = fs::recursive_directory_iterator(root.cStr()); it != fs::recursive_directory_iterator(); ++it) {
    auto rel = it->path().lexically_relative(root.cStr()).string();
    auto status = it->symlink_status();
    if (fs::is_symlink(status)) {
      lines.push_back(rel + " l " + fs::read_symlink(it->path()).string());
    } else if (fs::is_directory(status)) {
      lines.push_back(rel + " d");
    } else {
      lines.push_back(rel + " f " + readWholeFile(kj::str(it->path().c_str())));
    }
  }
  std::sort(lines.begin(), lines.end());
  std::string out;
  for (auto& line : lines) out += line + "\n";
  return out;
}

ObjectMeta putTree(ObjectStore& store, Id id, kj::StringPtr path) {
  auto temp = store.newTempPath();
  auto source = openDirectory(path);
  copyTree(source, AT_FDCWD, temp, FileCopy::COPY, "test tree", store.treeLimits());
  auto root = openDirectory(temp);
  auto hashed = sealTree(root, "test tree", store.treeLimits());
  return store.adoptDir(id, kj::mv(temp), hashed);
}

LowDescriptorLimit::LowDescriptorLimit(rlim_t max) {
  KJ_SYSCALL(getrlimit(RLIMIT_NOFILE, &saved));
  struct rlimit low = saved;
  low.rlim_cur = max;
  KJ_SYSCALL(setrlimit(RLIMIT_NOFILE, &low));
}

LowDescriptorLimit::~LowDescriptorLimit() { setrlimit(RLIMIT_NOFILE, &saved); }

void makeDeepTree(kj::StringPtr root, size_t depth) {
  auto dir = openDirectory(root);
  for (size_t i = 0; i < depth; i++) {
    KJ_SYSCALL(::mkdirat(dir, "d", 0755));
    dir = openChildDir(dir, "d");
  }
  int fd;
  KJ_SYSCALL(fd = ::openat(dir, "f", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  kj::AutoCloseFd file(fd);
  writeAll(file, kj::StringPtr("bottom").asBytes());
}

std::pair<size_t, bool> measureDeepTree(kj::StringPtr root) {
  auto dir = openDirectory(root);
  size_t depth = 0;
  for (;;) {
    int fd = ::openat(dir, "d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) break;
    dir = kj::AutoCloseFd(fd);
    depth++;
  }
  struct stat st;
  bool file = ::fstatat(dir, "f", &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
  return {depth, file};
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
