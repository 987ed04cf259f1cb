// Warm files for new memory-tier objects (warm-files.h). Loop thread; the
// checks and unlinks on the pool.
#include "warm-files.h"

#include "file-ops.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

bool WarmFiles::onlyHolder(int fd) {
  struct stat st;
  if (::fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) return false;
  // Granted only when no other open file (descriptor or mapping, in any
  // process) refers to the inode; given back at once, so an open
  // elsewhere never waits on it.
  if (::fcntl(fd, F_SETLEASE, F_WRLCK) < 0) return false;
  ::fcntl(fd, F_SETLEASE, F_UNLCK);
  return true;
}

void WarmFiles::limit(uint64_t bytes) {
  allowed = bytes;
  while (held > allowed && !files.empty()) {
    auto largest = std::prev(files.end());
    held -= largest->first;
    unlinkLater(kj::mv(largest->second));
    files.erase(largest);
  }
}

void WarmFiles::offer(kj::String path, uint64_t size) {
  if (size < MIN_BYTES || held + size > allowed || files.size() >= MAX_FILES) {
    unlinkLater(kj::mv(path));
    return;
  }
  auto checked = bridge.runOnPool<bool>([path = kj::str(path)]() {
    int fd = ::open(path.cStr(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return false;
    bool only = onlyHolder(fd);
    ::close(fd);
    return only;
  });
  background.add(checked.then([this, path = kj::mv(path), size](bool only) mutable {
    if (only) {
      keep(kj::mv(path), size);
    } else {
      unlinkLater(kj::mv(path));
    }
  }));
}

void WarmFiles::keep(kj::String path, uint64_t size) {
  // The room may have gone while the check ran.
  if (held + size > allowed || files.size() >= MAX_FILES) {
    unlinkLater(kj::mv(path));
    return;
  }
  // Named as what it is now (tests and people looking at the tier tell it
  // from an object or a file being written).
  auto slash = KJ_ASSERT_NONNULL(path.findLast('/'));
  auto named = kj::str(path.slice(0, slash), "/.warm-", ++counter);
  if (::rename(path.cStr(), named.cStr()) < 0) {
    unlinkLater(kj::mv(path));
    return;
  }
  held += size;
  files.emplace(size, kj::mv(named));
  logger.debug("event=warm-file-kept size={} warm_bytes={} warm_files={}", size, held, files.size());
}

uint64_t WarmFiles::pick(uint64_t size, kj::StringPtr path) {
  if (files.empty()) return 0;
  auto it = files.lower_bound(size);
  if (it == files.end()) it = std::prev(it);
  uint64_t had = it->first;
  auto from = kj::mv(it->second);
  files.erase(it);
  held -= had;
  // Writable again (the store made it read-only when it held an object).
  if (::rename(from.cStr(), path.cStr()) < 0 || ::chmod(path.cStr(), 0644) < 0) {
    logger.warn("event=warm-file-unusable path={} error=\"{}\"", from.cStr(), strerror(errno));
    unlinkLater(kj::str(path));
    unlinkLater(kj::mv(from));
    return 0;
  }
  return had;
}

bool WarmFiles::take(uint64_t size, kj::StringPtr path) {
  uint64_t had = pick(size, path);
  if (had == 0) return false;
  // Shrinking gives the tail's pages back; growing adds fresh ones for the
  // part past the old size. Both are metadata work, cheap on the loop.
  if (::truncate(path.cStr(), static_cast<off_t>(size)) < 0) {
    logger.warn("event=warm-file-unusable path={} error=\"{}\"", path.cStr(), strerror(errno));
    ::unlink(path.cStr());
    return false;
  }
  logger.debug("event=warm-file-taken size={} had={} warm_bytes={}", size, had, held);
  return true;
}

uint64_t WarmFiles::lend(uint64_t size, kj::StringPtr path) {
  uint64_t had = pick(size, path);
  if (had > 0) logger.debug("event=warm-file-lent size={} for={} warm_bytes={}", had, size, held);
  return had;
}

void WarmFiles::remember(kj::StringPtr producer, uint64_t size) {
  if (size < MIN_BYTES) return;
  std::string_view name(producer.cStr(), producer.size());
  auto it = made.find(name);
  if (it != made.end()) {
    it->second = size;
    return;
  }
  if (made.size() >= MAX_PRODUCERS) made.clear();
  made.emplace(name, size);
}

uint64_t WarmFiles::lastMade(kj::StringPtr producer) const {
  auto it = made.find(std::string_view(producer.cStr(), producer.size()));
  return it == made.end() ? 0 : it->second;
}

void WarmFiles::unlinkLater(kj::String path) {
  background.add(bridge.runOnPool<void>([path = kj::mv(path)]() { unlinkFile(path); }));
}

}  // namespace squall
