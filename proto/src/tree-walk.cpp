// Bounded walks of directory trees. Any thread; blocking.
#include <squall/proto/tree-walk.h>

#include <squall/proto/errors.h>

#include <algorithm>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <kj/debug.h>
#include <unistd.h>

namespace squall {

namespace {

// A path for a message: a deep one is cut in the middle, its ends kept.
kj::String shortPath(kj::StringPtr path) {
  constexpr size_t HEAD = 60;
  constexpr size_t TAIL = 40;
  if (path.size() <= HEAD + TAIL + 3) return kj::str(path);
  return kj::str(path.slice(0, HEAD), "…", path.slice(path.size() - TAIL));
}

// The names in `dirFd`, failing once there are more than `room`: a
// directory of millions of entries is refused before all its names are in
// memory.
std::vector<std::string> listNames(int dirFd, uint64_t room, kj::StringPtr what, kj::StringPtr path,
                                   const TreeLimits& limits) {
  int dup;
  KJ_SYSCALL(dup = ::fcntl(dirFd, F_DUPFD_CLOEXEC, 0));
  DIR* dir = ::fdopendir(dup);
  if (dir == nullptr) {
    int error = errno;
    ::close(dup);
    KJ_FAIL_SYSCALL("fdopendir", error, path);
  }
  KJ_DEFER(::closedir(dir));
  ::rewinddir(dir);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    struct dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) KJ_FAIL_SYSCALL("readdir", errno, path);
      break;
    }
    std::string name(entry->d_name);
    if (name == "." || name == "..") continue;
    if (names.size() >= room) {
      SQUALL_FAIL(what, ": the number of entries exceeds the limit of ", limits.maxEntries,
                  " (--max-dir-entries) in '", shortPath(path.size() > 0 ? path : "."), "'");
    }
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

void checkTreeLimits(const TreeLimits& limits, kj::StringPtr what, kj::StringPtr path, size_t depth,
                     uint64_t count) {
  if (depth > limits.maxDepth) {
    SQUALL_FAIL(what, ": directory depth ", depth, " exceeds the limit of ", limits.maxDepth,
                " (--max-dir-depth) at '", shortPath(path), "'");
  }
  if (path.size() > limits.maxPathLength) {
    SQUALL_FAIL(what, ": path length ", path.size(), " exceeds the limit of ", limits.maxPathLength,
                " bytes at '", shortPath(path), "'");
  }
  if (count > limits.maxEntries) {
    SQUALL_FAIL(what, ": the number of entries exceeds the limit of ", limits.maxEntries,
                " (--max-dir-entries) at '", shortPath(path), "'");
  }
}

std::vector<std::string> listDir(int dirFd) {
  return listNames(dirFd, UINT64_MAX, "", "", TreeLimits::none());
}

// ------------------------------------------------------------------ DirCursor

DirCursor::DirCursor(kj::AutoCloseFd top) : current(kj::mv(top)) {}

void DirCursor::enter(kj::StringPtr name) {
  struct stat st;
  KJ_SYSCALL(::fstat(current, &st));
  int fd;
  KJ_SYSCALL(fd = ::openat(current, name.cStr(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), name);
  above.push_back(Identity{st.st_dev, st.st_ino});
  current = kj::AutoCloseFd(fd);
}

void DirCursor::leave() {
  KJ_REQUIRE(!above.empty(), "already at the top");
  int fd;
  KJ_SYSCALL(fd = ::openat(current, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  kj::AutoCloseFd parent(fd);
  struct stat st;
  KJ_SYSCALL(::fstat(parent, &st));
  auto expected = above.back();
  if (st.st_dev != expected.dev || st.st_ino != expected.ino) {
    SQUALL_FAIL("a directory was moved while its tree was walked");
  }
  above.pop_back();
  current = kj::mv(parent);
}

// ------------------------------------------------------------------- TreeWalk

TreeWalk::TreeWalk(kj::AutoCloseFd root, kj::StringPtr what, TreeLimits limits)
    : cursor(kj::mv(root)), what(kj::str(what)), limits(limits) {
  memset(&currentStat, 0, sizeof(currentStat));
}

void TreeWalk::pushLevel(size_t pathLength) {
  Level level;
  level.names = listNames(cursor.fd(), limits.maxEntries - kj::min(count, limits.maxEntries), what,
                          kj::StringPtr(currentPath.c_str(), pathLength), limits);
  level.pathLength = pathLength;
  count += level.names.size();
  levels.push_back(kj::mv(level));
}

TreeWalk::Step TreeWalk::next() {
  if (!started) {
    started = true;
    pushLevel(0);
  } else if (enterPending) {
    enterPending = false;
    cursor.enter(currentName);
    pushLevel(currentPath.size());
  }
  if (levels.empty()) return Step::END;
  auto& level = levels.back();
  if (level.index < level.names.size()) {
    auto& name = level.names[level.index++];
    currentPath.resize(level.pathLength);
    if (level.pathLength > 0) currentPath += '/';
    currentPath += name;
    currentName = kj::heapString(name.data(), name.size());
    // Counted as listed; checked here, where the entry's path is known.
    checkTreeLimits(limits, what, path(), levels.size(), 0);
    KJ_SYSCALL(::fstatat(cursor.fd(), currentName.cStr(), &currentStat, AT_SYMLINK_NOFOLLOW),
               currentPath.c_str());
    return Step::ENTRY;
  }
  size_t pathLength = level.pathLength;
  levels.pop_back();
  if (levels.empty()) return Step::END;
  cursor.leave();
  currentPath.resize(pathLength);
  auto slash = currentPath.rfind('/');
  auto name = slash == std::string::npos ? currentPath : currentPath.substr(slash + 1);
  currentName = kj::heapString(name.data(), name.size());
  return Step::LEAVE;
}

void TreeWalk::enter() {
  KJ_REQUIRE(S_ISDIR(currentStat.st_mode), "only a directory can be entered", currentPath.c_str());
  enterPending = true;
}

void TreeWalk::restat() {
  KJ_SYSCALL(::fstatat(cursor.fd(), currentName.cStr(), &currentStat, AT_SYMLINK_NOFOLLOW),
             currentPath.c_str());
}

}  // namespace squall
