// Helpers shared by the governor's unit tests. Test thread only.
#pragma once

#include "object-store.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <kj/string.h>
#include <memory>
#include <spdlog/logger.h>
#include <string>
#include <sys/resource.h>
#include <utility>

namespace squall {

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  kj::StringPtr path() const { return dirPath; }
  kj::String sub(kj::StringPtr name) const { return kj::str(dirPath, "/", name); }

 private:
  kj::String dirPath;
};

// A logger that prints warnings and errors only (set SQUALL_TEST_LOG=debug
// for more).
std::shared_ptr<spdlog::logger> testLogger();

// Waits for `promise` at most `seconds`; fails the test (by exception) on timeout.
template <typename T>
T waitWithTimeout(kj::AsyncIoContext& io, kj::Promise<T> promise, int seconds = 20) {
  return io.provider->getTimer().timeoutAfter(seconds * kj::SECONDS, kj::mv(promise)).wait(io.waitScope);
}

std::string readWholeFile(kj::StringPtr path);

// Writes `content` to `path`, creating parent directories.
void writeText(kj::StringPtr path, const std::string& content);

// Every entry below `root` (links not followed), sorted, one per line:
// "path d", "path f <bytes>", "path l <target>".
std::string describeTree(kj::StringPtr root);

// Copies the tree at `path` into `store` as dir object `id` (sealed).
ObjectMeta putTree(ObjectStore& store, Id id, kj::StringPtr path);

// Lowers the soft limit on open descriptors while it lives: a walk that
// held one descriptor per level failed with EMFILE well before 1,500.
class LowDescriptorLimit {
 public:
  explicit LowDescriptorLimit(rlim_t max);
  ~LowDescriptorLimit();

 private:
  struct rlimit saved;
};

// Makes `depth` nested directories "d" below `root` (which must exist) with
// a file "f" holding "bottom" at the bottom (at depth + 1), one level at a
// time: no long paths, two descriptors.
void makeDeepTree(kj::StringPtr root, size_t depth);

// How deep the "d" chain below `root` goes, and whether "f" is at its bottom.
std::pair<size_t, bool> measureDeepTree(kj::StringPtr root);

// Polls /proc until `pid` has exited or is a zombie, for at most `seconds`.
bool isGoneOrZombie(int pid, int seconds);

}  // namespace squall
