// Directory trees: copy, seal, hash, remove. Any thread; blocking.
#include "dir-tree.h"

#include "safe-path.h"

#include <algorithm>
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
}  // namespace

std::vector<std::string> listDir(int dirFd) {
  int dup;
  KJ_SYSCALL(dup = ::fcntl(dirFd, F_DUPFD_CLOEXEC, 0));
  DIR* dir = ::fdopendir(dup);
  if (dir == nullptr) {
    int error = errno;
    ::close(dup);
    KJ_FAIL_SYSCALL("fdopendir", error);
  }
  KJ_DEFER(::closedir(dir));
  ::rewinddir(dir);
  std::vector<std::string> names;
  for (;;) {
    errno = 0;
    struct dirent* entry = ::readdir(dir);
    if (entry == nullptr) {
      if (errno != 0) KJ_FAIL_SYSCALL("readdir", errno);
      break;
    }
    std::string name(entry->d_name);
    if (name == "." || name == "..") continue;
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
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

std::string childPath(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "/" + name;
}

[[noreturn]] void failKind(kj::StringPtr what, const std::string& path, uint32_t mode) {
  SQUALL_FAIL(what, " contains '", path.c_str(), "', ", entryKindName(mode),
              "; only regular files, directories and symbolic links are allowed");
}

void copyInto(int src, int dst, const std::string& prefix, FileCopy how, kj::StringPtr what) {
  for (auto& name : listDir(src)) {
    auto path = childPath(prefix, name);
    struct stat st;
    KJ_SYSCALL(::fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW), path.c_str());
    if (S_ISDIR(st.st_mode)) {
      KJ_SYSCALL(::mkdirat(dst, name.c_str(), 0755), path.c_str());
      auto from = openChildDir(src, name);
      auto to = openChildDir(dst, name);
      copyInto(from, to, path, how, what);
    } else if (S_ISREG(st.st_mode)) {
      if (how == FileCopy::LINK) {
        if (::linkat(src, name.c_str(), dst, name.c_str(), 0) == 0) continue;
        if (errno != EXDEV && errno != EMLINK && errno != EPERM) {
          KJ_FAIL_SYSCALL("linkat", errno, path.c_str());
        }
      }
      int in;
      KJ_SYSCALL(in = ::openat(src, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path.c_str());
      kj::AutoCloseFd inFd(in);
      int out;
      KJ_SYSCALL(out = ::openat(dst, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                (st.st_mode & 0777) | 0600),
                 path.c_str());
      kj::AutoCloseFd outFd(out);
      cloneFileFd(inFd, outFd);
    } else if (S_ISLNK(st.st_mode)) {
      auto target = readLinkAt(src, name.c_str());
      KJ_SYSCALL(::symlinkat(target.cStr(), dst, name.c_str()), path.c_str());
    } else {
      failKind(what, path, st.st_mode);
    }
  }
}

void unshareFile(int dirFd, const std::string& name, const std::string& path) {
  int in;
  KJ_SYSCALL(in = ::openat(dirFd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path.c_str());
  kj::AutoCloseFd inFd(in);
  struct stat st;
  KJ_SYSCALL(::fstat(inFd, &st), path.c_str());
  auto temp = kj::str(".squall-unshare-", name.c_str());
  int out;
  KJ_SYSCALL(out = ::openat(dirFd, temp.cStr(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            st.st_mode & 0777),
             path.c_str());
  kj::AutoCloseFd outFd(out);
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                copyFileFd(inFd, outFd, false);
                KJ_SYSCALL(::renameat(dirFd, temp.cStr(), dirFd, name.c_str()), path.c_str());
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

void collect(int dirFd, const std::string& prefix, bool seal, kj::StringPtr what,
             kj::Maybe<LinkHook&> onLink, std::vector<TreeEntry>& out) {
  for (auto& name : listDir(dirFd)) {
    auto path = childPath(prefix, name);
    struct stat st;
    KJ_SYSCALL(::fstatat(dirFd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW), path.c_str());
    KJ_IF_MAYBE(hook, onLink) {
      if (S_ISLNK(st.st_mode) && (*hook)(dirFd, name.c_str(), readLinkAt(dirFd, name.c_str()))) {
        KJ_SYSCALL(::fstatat(dirFd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW), path.c_str());
      }
    }
    if (S_ISDIR(st.st_mode)) {
      out.push_back(TreeEntry{path, 'd'});
      auto child = openChildDir(dirFd, name);
      collect(child, path, seal, what, onLink, out);
      if (seal) {
        KJ_SYSCALL(::fchmod(child, 0555), path.c_str());
      }
    } else if (S_ISREG(st.st_mode)) {
      out.push_back(TreeEntry{path, 'f', static_cast<uint64_t>(st.st_size)});
      if (seal && (st.st_mode & 0222) != 0) {
        // A writable file with other hard links may share its inode with a
        // file outside the tree: it becomes a copy of its own before its
        // mode changes, so sealing never touches anything outside.
        if (st.st_nlink > 1) unshareFile(dirFd, name, path);
        KJ_SYSCALL(::fchmodat(dirFd, name.c_str(), st.st_mode & 0555, 0), path.c_str());
      }
    } else if (S_ISLNK(st.st_mode)) {
      auto target = readLinkAt(dirFd, name.c_str());
      out.push_back(TreeEntry{path, 'l', 0, std::string(target.cStr(), target.size())});
    } else {
      failKind(what, path, st.st_mode);
    }
  }
}

void removeChildren(int dirFd) {
  for (auto& name : listDir(dirFd)) removeTreeAt(dirFd, name.c_str());
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

void copyTree(int srcDirFd, int dstParentFd, kj::StringPtr name, FileCopy how, kj::StringPtr what) {
  KJ_SYSCALL(::mkdirat(dstParentFd, name.cStr(), 0755), name);
  auto to = openChildDir(dstParentFd, name.cStr());
  copyInto(srcDirFd, to, "", how, what);
}

void copyTreeContents(int srcDirFd, int dstDirFd, FileCopy how, kj::StringPtr what) {
  copyInto(srcDirFd, dstDirFd, "", how, what);
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

HashedSize walkTree(int rootFd, kj::StringPtr what, bool seal, bool hash, kj::Maybe<LinkHook&> onLink) {
  std::vector<TreeEntry> entries;
  collect(rootFd, "", seal, what, onLink, entries);
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
      int fd = openNoSymlinks(rootFd, entry.path.c_str(), O_RDONLY | O_NOFOLLOW);
      if (fd < 0) KJ_FAIL_SYSCALL("openat2", -fd, entry.path.c_str());
      kj::AutoCloseFd file(fd);
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

HashedSize sealTree(int rootFd, kj::StringPtr what, bool hash, kj::Maybe<LinkHook&> onLink) {
  return walkTree(rootFd, what, true, hash, onLink);
}

HashedSize hashTree(int rootFd) { return walkTree(rootFd, "tree", false, true, nullptr); }

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

kj::String readTailFd(int fd, size_t max) {
  struct stat st;
  KJ_SYSCALL(fstat(fd, &st));
  uint64_t size = st.st_size;
  uint64_t start = size > max ? size - max : 0;
  auto bytes = preadUpTo(fd, start, size - start);
  return kj::heapString(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

}  // namespace squall
