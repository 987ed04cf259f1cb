// Directory trees: copy, seal, hash, remove. Any thread; blocking.
#include "dir-tree.h"

#include "safe-path.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cerrno>
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <kj/debug.h>
#include <kj/vector.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>
#include <xxhash.h>

namespace squall {

namespace {
constexpr size_t IO_PIECE = 1 << 20;
// Numbers the trees freshDirectory() moves aside.
std::atomic<uint64_t> staleCounter{0};
}  // namespace

kj::AutoCloseFd duplicateFd(int fd) {
  int copy;
  KJ_SYSCALL(copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0));
  return kj::AutoCloseFd(copy);
}

kj::AutoCloseFd openChildDir(int dirFd, const std::string& name) {
  int fd;
  KJ_SYSCALL(fd = ::openat(dirFd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), name);
  return kj::AutoCloseFd(fd);
}

kj::String readLinkAt(int dirFd, const char* name) {
  kj::Vector<char> buffer(256);
  buffer.resize(256);
  for (;;) {
    ssize_t n;
    KJ_SYSCALL(n = ::readlinkat(dirFd, name, buffer.begin(), buffer.size()), name);
    if (static_cast<size_t>(n) < buffer.size()) return kj::heapString(buffer.begin(), n);
    buffer.resize(buffer.size() * 2);
  }
}

namespace {

[[noreturn]] void failKind(kj::StringPtr what, kj::StringPtr path, uint32_t mode) {
  SQUALL_FAIL(what, " contains '", path, "', ", entryKindName(mode),
              "; only regular files, directories and symbolic links are allowed");
}

void copyInto(int src, int dst, FileCopy how, kj::StringPtr what, const TreeLimits& limits) {
  TreeWalk walk(duplicateFd(src), what, limits);
  DirCursor to(duplicateFd(dst));
  for (;;) {
    auto step = walk.next();
    if (step == TreeWalk::Step::END) break;
    if (step == TreeWalk::Step::LEAVE) {
      to.leave();
      continue;
    }
    auto& st = walk.stat();
    const char* name = walk.name().cStr();
    const char* path = walk.path().cStr();
    int from = walk.dirFd();
    if (S_ISDIR(st.st_mode)) {
      KJ_SYSCALL(::mkdirat(to.fd(), name, 0755), path);
      walk.enter();
      to.enter(name);
    } else if (S_ISREG(st.st_mode)) {
      if (how == FileCopy::LINK) {
        if (::linkat(from, name, to.fd(), name, 0) == 0) continue;
        if (errno != EXDEV && errno != EMLINK && errno != EPERM) {
          KJ_FAIL_SYSCALL("linkat", errno, path);
        }
      }
      int in;
      KJ_SYSCALL(in = ::openat(from, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path);
      kj::AutoCloseFd inFd(in);
      int out;
      KJ_SYSCALL(out = ::openat(to.fd(), name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                (st.st_mode & 0777) | 0600),
                 path);
      kj::AutoCloseFd outFd(out);
      cloneFileFd(inFd, outFd);
    } else if (S_ISLNK(st.st_mode)) {
      auto target = readLinkAt(from, name);
      KJ_SYSCALL(::symlinkat(target.cStr(), to.fd(), name), path);
    } else {
      failKind(what, walk.path(), st.st_mode);
    }
  }
}

void unshareFile(int dirFd, kj::StringPtr name, kj::StringPtr path) {
  int in;
  KJ_SYSCALL(in = ::openat(dirFd, name.cStr(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path);
  kj::AutoCloseFd inFd(in);
  struct stat st;
  KJ_SYSCALL(::fstat(inFd, &st), path);
  auto temp = kj::str(".squall-unshare-", name);
  int out;
  KJ_SYSCALL(out = ::openat(dirFd, temp.cStr(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            st.st_mode & 0777),
             path);
  kj::AutoCloseFd outFd(out);
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                copyFileFd(inFd, outFd, false);
                KJ_SYSCALL(::renameat(dirFd, temp.cStr(), dirFd, name.cStr()), path);
              })) {
    ::unlinkat(dirFd, temp.cStr(), 0);
    kj::throwFatalException(kj::mv(*e));
  }
}

struct TreeEntry {
  std::string path;
  char kind;  // 'd', 'f', 'l'
  uint64_t size = 0;
  std::string target;
};

void collect(int rootFd, bool seal, kj::StringPtr what, const TreeLimits& limits,
             kj::Maybe<LinkHook&> onLink, std::vector<TreeEntry>& out) {
  TreeWalk walk(duplicateFd(rootFd), what, limits);
  for (;;) {
    auto step = walk.next();
    if (step == TreeWalk::Step::END) break;
    if (step == TreeWalk::Step::LEAVE) {
      // Read-only once its entries are done: nothing more is made in it.
      if (seal) {
        auto child = openChildDir(walk.dirFd(), walk.name().cStr());
        KJ_SYSCALL(::fchmod(child, 0555), walk.path());
      }
      continue;
    }
    int dirFd = walk.dirFd();
    auto name = walk.name();
    auto path = walk.path();
    KJ_IF_MAYBE(hook, onLink) {
      if (S_ISLNK(walk.stat().st_mode) && (*hook)(dirFd, name.cStr(), readLinkAt(dirFd, name.cStr()))) {
        walk.restat();
      }
    }
    auto& st = walk.stat();
    if (S_ISDIR(st.st_mode)) {
      out.push_back(TreeEntry{std::string(path.cStr()), 'd'});
      walk.enter();
    } else if (S_ISREG(st.st_mode)) {
      out.push_back(TreeEntry{std::string(path.cStr()), 'f', static_cast<uint64_t>(st.st_size)});
      if (seal && (st.st_mode & 0222) != 0) {
        // A writable file with other hard links may share its inode with a
        // file outside the tree: it becomes a copy of its own before its
        // mode changes, so sealing never touches anything outside.
        if (st.st_nlink > 1) unshareFile(dirFd, name, path);
        KJ_SYSCALL(::fchmodat(dirFd, name.cStr(), st.st_mode & 0555, 0), path);
      }
    } else if (S_ISLNK(st.st_mode)) {
      auto target = readLinkAt(dirFd, name.cStr());
      out.push_back(TreeEntry{std::string(path.cStr()), 'l', 0, std::string(target.cStr(), target.size())});
    } else {
      failKind(what, path, st.st_mode);
    }
  }
}

// Opens the file at `path` below `rootFd` without following a link: by
// openat2 when the path fits in PATH_MAX, else a directory at a time.
kj::AutoCloseFd openTreeFile(int rootFd, kj::StringPtr path) {
  if (path.size() < PATH_MAX) {
    int fd = openNoSymlinks(rootFd, path, O_RDONLY | O_NOFOLLOW);
    if (fd < 0) KJ_FAIL_SYSCALL("openat2", -fd, path);
    return kj::AutoCloseFd(fd);
  }
  auto parts = pathComponents(path);
  auto parent = openDirChain(rootFd, parts, parts.size() - 1, false, path);
  int fd;
  KJ_SYSCALL(fd = ::openat(parent, parts.back().cStr(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path);
  return kj::AutoCloseFd(fd);
}

// Removes the entries of the directory open at `dirFd`, whatever its depth.
void removeChildren(int dirFd) {
  TreeWalk walk(duplicateFd(dirFd), "tree", TreeLimits::none());
  for (;;) {
    auto step = walk.next();
    if (step == TreeWalk::Step::END) break;
    const char* name = walk.name().cStr();
    auto path = walk.path();
    if (step == TreeWalk::Step::LEAVE) {
      if (::unlinkat(walk.dirFd(), name, AT_REMOVEDIR) < 0 && errno != ENOENT) {
        KJ_FAIL_SYSCALL("rmdir", errno, path);
      }
    } else if (S_ISDIR(walk.stat().st_mode)) {
      // Read-only directories (sealed trees, programs' leftovers) first
      // become writable so their entries can go.
      ::fchmodat(walk.dirFd(), name, 0700, 0);
      walk.enter();
    } else if (::unlinkat(walk.dirFd(), name, 0) < 0 && errno != ENOENT) {
      KJ_FAIL_SYSCALL("unlink", errno, path);
    }
  }
}

}  // namespace

kj::StringPtr entryKindName(uint32_t mode) {
  if (S_ISFIFO(mode)) return "a fifo";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a file";
  return "of an unknown kind";
}

void copyTree(int srcDirFd, int dstParentFd, kj::StringPtr name, FileCopy how, kj::StringPtr what,
              const TreeLimits& limits) {
  KJ_SYSCALL(::mkdirat(dstParentFd, name.cStr(), 0755), name);
  auto to = openChildDir(dstParentFd, name.cStr());
  copyInto(srcDirFd, to, how, what, limits);
}

void copyTreeContents(int srcDirFd, int dstDirFd, FileCopy how, kj::StringPtr what,
                      const TreeLimits& limits) {
  copyInto(srcDirFd, dstDirFd, how, what, limits);
}

HashedSize copyFileFd(int from, int to, bool hash) {
  HashedSize result;
  if (!hash) {
    // In-kernel copy where the filesystem can.
    for (;;) {
      ssize_t n = ::copy_file_range(from, nullptr, to, nullptr, 1 << 30, 0);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) break;
        KJ_FAIL_SYSCALL("copy_file_range", errno);
      }
      if (n == 0) return result;
      result.size += n;
    }
  }
  XXH3_state_t* state = XXH3_createState();
  KJ_ASSERT(state != nullptr);
  KJ_DEFER(XXH3_freeState(state));
  XXH3_64bits_reset(state);
  auto buffer = kj::heapArray<kj::byte>(IO_PIECE);
  for (;;) {
    ssize_t n;
    KJ_SYSCALL(n = ::read(from, buffer.begin(), buffer.size()));
    if (n == 0) break;
    if (hash) XXH3_64bits_update(state, buffer.begin(), n);
    writeAll(to, buffer.slice(0, n));
    result.size += n;
  }
  if (hash) result.hash = XXH3_64bits_digest(state);
  return result;
}

void cloneFileFd(int from, int to) {
  if (::ioctl(to, FICLONE, from) == 0) return;
  // EOPNOTSUPP, EXDEV, EINVAL, ENOTTY...: no block sharing here.
  copyFileFd(from, to, false);
}

void linkFdOrCopy(int fd, kj::StringPtr to) {
  auto proc = kj::str("/proc/self/fd/", fd);
  if (::linkat(AT_FDCWD, proc.cStr(), AT_FDCWD, to.cStr(), AT_SYMLINK_FOLLOW) == 0) return;
  auto out = openOrThrow(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  KJ_SYSCALL(::lseek(fd, 0, SEEK_SET));
  copyFileFd(fd, out, false);
}

namespace {

HashedSize walkTree(int rootFd, kj::StringPtr what, const TreeLimits& limits, bool seal, bool hash,
                    kj::Maybe<LinkHook&> onLink) {
  std::vector<TreeEntry> entries;
  collect(rootFd, seal, what, limits, onLink, entries);
  if (seal) {
    KJ_SYSCALL(::fchmod(rootFd, 0555));
  }
  if (!hash) return HashedSize{};
  std::sort(entries.begin(), entries.end(),
            [](const TreeEntry& a, const TreeEntry& b) { return a.path < b.path; });
  XXH3_state_t* state = XXH3_createState();
  KJ_ASSERT(state != nullptr);
  KJ_DEFER(XXH3_freeState(state));
  XXH3_64bits_reset(state);
  auto buffer = kj::heapArray<kj::byte>(IO_PIECE);
  HashedSize result;
  const char zero = '\0';
  for (auto& entry : entries) {
    XXH3_64bits_update(state, entry.path.data(), entry.path.size());
    XXH3_64bits_update(state, &zero, 1);
    XXH3_64bits_update(state, &entry.kind, 1);
    if (entry.kind == 'f') {
      auto file = openTreeFile(rootFd, entry.path.c_str());
      uint64_t size = 0;
      kj::byte sizeBytes[8];
      for (int i = 0; i < 8; i++) sizeBytes[i] = static_cast<kj::byte>(entry.size >> (8 * i));
      XXH3_64bits_update(state, sizeBytes, 8);
      for (;;) {
        ssize_t n;
        KJ_SYSCALL(n = ::read(file, buffer.begin(), buffer.size()), entry.path.c_str());
        if (n == 0) break;
        XXH3_64bits_update(state, buffer.begin(), n);
        size += n;
      }
      KJ_REQUIRE(size == entry.size, "file changed size while it was hashed", entry.path.c_str());
      result.size += size;
    } else if (entry.kind == 'l') {
      XXH3_64bits_update(state, entry.target.data(), entry.target.size());
      XXH3_64bits_update(state, &zero, 1);
    }
  }
  result.hash = XXH3_64bits_digest(state);
  return result;
}

}  // namespace

HashedSize sealTree(int rootFd, kj::StringPtr what, const TreeLimits& limits, bool hash,
                    kj::Maybe<LinkHook&> onLink) {
  return walkTree(rootFd, what, limits, true, hash, onLink);
}

HashedSize hashTree(int rootFd) {
  return walkTree(rootFd, "tree", TreeLimits::none(), false, true, nullptr);
}

void removeTreeAt(int parentFd, kj::StringPtr name) {
  struct stat st;
  if (::fstatat(parentFd, name.cStr(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
    if (errno == ENOENT) return;
    KJ_FAIL_SYSCALL("fstatat", errno, name);
  }
  if (S_ISDIR(st.st_mode)) {
    // Read-only directories (sealed trees, programs' leftovers) first
    // become writable so their entries can go.
    ::fchmodat(parentFd, name.cStr(), 0700, 0);
    int fd = ::openat(parentFd, name.cStr(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) return;
      KJ_FAIL_SYSCALL("openat", errno, name);
    }
    {
      kj::AutoCloseFd dir(fd);
      removeChildren(dir);
    }
    if (::unlinkat(parentFd, name.cStr(), AT_REMOVEDIR) < 0 && errno != ENOENT) {
      KJ_FAIL_SYSCALL("rmdir", errno, name);
    }
  } else if (::unlinkat(parentFd, name.cStr(), 0) < 0 && errno != ENOENT) {
    KJ_FAIL_SYSCALL("unlink", errno, name);
  }
}

void removeTree(kj::StringPtr path) {
  // The walk starts from the parent's descriptor; the path itself may be
  // relative or end in '/'.
  size_t end = path.size();
  while (end > 1 && path[end - 1] == '/') end--;
  auto trimmed = kj::heapString(path.slice(0, end));
  kj::String parent;
  kj::String name;
  KJ_IF_MAYBE(slash, trimmed.findLast('/')) {
    parent = *slash == 0 ? kj::str("/") : kj::heapString(trimmed.slice(0, *slash));
    name = kj::heapString(trimmed.slice(*slash + 1));
  } else {
    parent = kj::str(".");
    name = kj::mv(trimmed);
  }
  KJ_REQUIRE(name.size() > 0 && name != "." && name != "..", "cannot remove this path", path);
  int fd = ::open(parent.cStr(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return;
    KJ_FAIL_SYSCALL("open", errno, parent);
  }
  kj::AutoCloseFd parentFd(fd);
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { removeTreeAt(parentFd, name); })) {
    SQUALL_FAIL("cannot remove ", path, ": ", e->getDescription());
  }
}

kj::Maybe<LeftBehind> freshDirectory(kj::StringPtr path) {
  kj::Maybe<LeftBehind> left;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { removeTree(path); })) {
    auto aside = kj::str(path, ".stale-", getpid(), "-", staleCounter.fetch_add(1));
    if (::rename(path.cStr(), aside.cStr()) < 0) {
      SQUALL_FAIL(e->getDescription(), "; moving it aside failed too: ", strerror(errno));
    }
    left = LeftBehind{kj::mv(aside), kj::str(e->getDescription())};
  }
  makeDirs(path, 0700);
  KJ_SYSCALL(::chmod(path.cStr(), 0700), path);
  return left;
}

kj::String readTailFd(int fd, size_t max) {
  struct stat st;
  KJ_SYSCALL(fstat(fd, &st));
  uint64_t size = st.st_size;
  uint64_t start = size > max ? size - max : 0;
  auto bytes = preadUpTo(fd, start, size - start);
  return kj::heapString(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

}  // namespace squall
