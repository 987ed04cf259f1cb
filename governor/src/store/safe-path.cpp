// Path rules and descriptor-relative opening. Any thread; blocking.
#include "safe-path.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <kj/debug.h>
#include <linux/openat2.h>
#include <string_view>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace squall {

kj::Maybe<kj::StringPtr> relativePathProblem(kj::StringPtr path) {
  if (strlen(path.cStr()) != path.size()) return kj::StringPtr("it contains a NUL byte");
  if (path.size() == 0) return kj::StringPtr("it is empty");
  if (path[0] == '/') return kj::StringPtr("it is absolute");
  bool any = false;
  size_t start = 0;
  for (size_t i = 0; i <= path.size(); i++) {
    if (i == path.size() || path[i] == '/') {
      std::string_view part(path.begin() + start, i - start);
      if (part == "..") return kj::StringPtr("it contains '..'");
      if (part.size() > 0 && part != ".") any = true;
      start = i + 1;
    }
  }
  if (!any) return kj::StringPtr("it names no file");
  return nullptr;
}

kj::Vector<kj::String> pathComponents(kj::StringPtr path) {
  kj::Vector<kj::String> parts;
  size_t start = 0;
  for (size_t i = 0; i <= path.size(); i++) {
    if (i == path.size() || path[i] == '/') {
      std::string_view part(path.begin() + start, i - start);
      if (part.size() > 0 && part != ".") parts.add(kj::heapString(part.data(), part.size()));
      start = i + 1;
    }
  }
  return parts;
}

kj::String joinPath(kj::ArrayPtr<const kj::String> components, size_t count) {
  kj::Vector<char> out;
  for (size_t i = 0; i < count; i++) {
    if (i > 0) out.add('/');
    out.addAll(components[i]);
  }
  return kj::heapString(out.begin(), out.size());
}

int openat2Raw(int dirFd, kj::StringPtr path, int flags, uint64_t resolve, int mode) {
  struct open_how how;
  memset(&how, 0, sizeof(how));
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = resolve;
  for (;;) {
    long fd = syscall(SYS_openat2, dirFd, path.cStr(), &how, sizeof(how));
    if (fd >= 0) return static_cast<int>(fd);
    if (errno != EINTR && errno != EAGAIN) return -errno;
  }
}

int openNoSymlinks(int rootFd, kj::StringPtr path, int flags, int mode) {
  return openat2Raw(rootFd, path, flags,
                    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS, mode);
}

kj::AutoCloseFd openDirChain(int rootFd, kj::ArrayPtr<const kj::String> components, size_t count,
                             bool create, kj::StringPtr what) {
  int current;
  KJ_SYSCALL(current = ::fcntl(rootFd, F_DUPFD_CLOEXEC, 0));
  kj::AutoCloseFd dir(current);
  for (size_t i = 0; i < count; i++) {
    auto& name = components[i];
    int fd = ::openat(dir, name.cStr(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT && create) {
      if (::mkdirat(dir, name.cStr(), 0755) < 0 && errno != EEXIST) {
        KJ_FAIL_SYSCALL("mkdirat", errno, joinPath(components, i + 1));
      }
      fd = ::openat(dir, name.cStr(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      int error = errno;
      auto prefix = joinPath(components, i + 1);
      struct stat st;
      if ((error == ELOOP || error == ENOTDIR) &&
          ::fstatat(dir, name.cStr(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        if (S_ISLNK(st.st_mode)) SQUALL_FAIL(what, " is inside '", prefix, "', which is a symbolic link");
        SQUALL_FAIL(what, " is inside '", prefix, "', which is not a directory");
      }
      if (error == ENOENT) SQUALL_FAIL(what, " is inside '", prefix, "', which does not exist");
      SQUALL_FAIL(what, ": cannot open '", prefix, "': ", strerror(error));
    }
    dir = kj::AutoCloseFd(fd);
  }
  return dir;
}

kj::AutoCloseFd openDirectory(kj::StringPtr path) {
  int fd;
  KJ_SYSCALL(fd = ::open(path.cStr(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC), path);
  return kj::AutoCloseFd(fd);
}

AllowedRoots::AllowedRoots(kj::ArrayPtr<const kj::String> paths) {
  for (auto& path : paths) {
    char resolved[PATH_MAX];
    if (::realpath(path.cStr(), resolved) == nullptr) {
      SQUALL_FAIL("--allow-path ", path, ": ", strerror(errno));
    }
    int fd = ::open(resolved, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) SQUALL_FAIL("--allow-path ", path, ": ", strerror(errno));
    roots.add(Root{kj::str(resolved), kj::AutoCloseFd(fd)});
  }
}

kj::String AllowedRoots::describe() const {
  kj::Vector<kj::String> parts;
  for (auto& root : roots) parts.add(kj::str("--allow-path ", root.path));
  return kj::strArray(parts, " ");
}

AllowedRoots::Resolved AllowedRoots::resolve(kj::StringPtr op, kj::StringPtr path) const {
  if (roots.size() == 0) {
    SQUALL_FAIL(op, ": no paths are allowed on this governor (start it with --allow-path DIR)");
  }
  if (strlen(path.cStr()) != path.size()) SQUALL_FAIL(op, ": path '", path, "' contains a NUL byte");
  if (path.size() == 0 || path[0] != '/') {
    SQUALL_FAIL(op, ": path '", path, "' is not absolute");
  }
  // Lexical normalisation: "//", "." and ".." are folded before the root
  // check, so "/data/../etc" is judged as "/etc".
  kj::Vector<kj::String> parts;
  for (auto& part : pathComponents(path)) {
    if (part == "..") {
      if (parts.size() > 0) parts.removeLast();
    } else {
      parts.add(kj::mv(part));
    }
  }
  auto normalised = kj::str("/", joinPath(parts, parts.size()));
  for (auto& root : roots) {
    kj::StringPtr rootPath = root.path;
    bool under;
    size_t skip;
    if (rootPath == "/") {
      under = true;
      skip = 1;
    } else {
      under = normalised == rootPath ||
              (normalised.startsWith(rootPath) && normalised[rootPath.size()] == '/');
      skip = rootPath.size() + 1;
    }
    if (under) {
      auto relative = normalised.size() > skip ? kj::heapString(normalised.slice(skip)) : kj::str();
      return Resolved{root.fd.get(), root.path, kj::mv(relative), kj::mv(normalised)};
    }
  }
  SQUALL_FAIL(op, ": path '", path, "' is outside the allowed roots (", describe(), ")");
}

kj::String beneathError(kj::StringPtr op, kj::StringPtr path, kj::StringPtr root, int error) {
  switch (error) {
    case ENOENT: return kj::str(op, ": path '", path, "' does not exist");
    case EXDEV:
      return kj::str(op, ": path '", path, "' leads outside its allowed root ", root,
                     " through a symbolic link");
    case ELOOP: return kj::str(op, ": path '", path, "' has too many levels of symbolic links");
    case ENOTDIR: return kj::str(op, ": path '", path, "' goes through something that is not a directory");
    default: return kj::str(op, ": cannot open '", path, "': ", strerror(error));
  }
}

}  // namespace squall
