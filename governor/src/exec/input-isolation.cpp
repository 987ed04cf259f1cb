// Input isolation: the governor's own mount namespace, the read-only store
// view, and placing inputs through it or as private copies. Blocking;
// placement runs on the libuv pool.
#include "input-isolation.h"

#include "dir-tree.h"
#include "safe-path.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <squall/proto/sandbox-path.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

namespace squall {

namespace {

void writeProcFile(const char* path, kj::StringPtr text) {
  auto fd = openOrThrow(path, O_WRONLY);
  writeAll(fd, text.asBytes());
}

// Mounts we make stay ours; the host's later mounts still reach us. Until
// this succeeds no mount may be made here: it would appear on the host too.
kj::Maybe<kj::String> becomeSlave() {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) == 0) return nullptr;
  return kj::str("cannot keep its mounts from the host's (", strerror(errno), ")");
}

// A detached copy of the mount tree at `path` (`dirFd`-relative), made
// read-only (and nosuid, nodev) whatever the original was.
kj::AutoCloseFd readOnlyClone(int dirFd, kj::StringPtr path) {
  // Recursive: the store's memory tier is a tmpfs mounted inside it.
  int fd = ::open_tree(dirFd, path.cStr(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (fd < 0) SQUALL_FAIL("cannot clone the mount at ", path, ": ", strerror(errno));
  kj::AutoCloseFd tree(fd);
  struct mount_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (::mount_setattr(tree, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) < 0) {
    SQUALL_FAIL("cannot make the mount of ", path, " read-only: ", strerror(errno));
  }
  return tree;
}

kj::AutoCloseFd createAt(int dirFd, kj::StringPtr name, int mode) {
  int fd;
  KJ_SYSCALL(fd = ::openat(dirFd, name.cStr(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode),
             name);
  return kj::AutoCloseFd(fd);
}

}  // namespace

kj::Maybe<IsolationChoice> parseIsolationChoice(kj::StringPtr text) {
  if (text == "auto") return IsolationChoice::AUTO;
  if (text == "mount") return IsolationChoice::MOUNT;
  if (text == "copy") return IsolationChoice::COPY;
  return nullptr;
}

OwnNamespace enterOwnMountNamespace() {
  if (::unshare(CLONE_NEWNS) == 0) {
    KJ_IF_MAYBE(problem, becomeSlave()) { return OwnNamespace{false, kj::mv(*problem)}; }
    return OwnNamespace{true, kj::str("mount namespace")};
  }
  int direct = errno;
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) {
    return OwnNamespace{false, kj::str("cannot enter a mount namespace (", strerror(direct),
                                       ") nor a user namespace (", strerror(errno), ")")};
  }
  // No way back from here: until the ids are mapped the governor cannot even
  // create a file, so a failure to map them throws (fatal to the caller).
  writeProcFile("/proc/self/uid_map", kj::str(uid, " ", uid, " 1\n"));
  writeProcFile("/proc/self/setgroups", "deny");
  writeProcFile("/proc/self/gid_map", kj::str(gid, " ", gid, " 1\n"));
  KJ_IF_MAYBE(problem, becomeSlave()) { return OwnNamespace{false, kj::mv(*problem)}; }
  return OwnNamespace{true, kj::str("user and mount namespaces")};
}

// ------------------------------------------------------------------ StoreView

StoreView::StoreView(kj::StringPtr storeDir, kj::String path)
    : storeDir(kj::str(storeDir)), viewPath(kj::mv(path)) {
  if (::mkdir(viewPath.cStr(), 0700) < 0 && errno != EEXIST) {
    SQUALL_FAIL("cannot make the store view's directory ", viewPath, ": ", strerror(errno));
  }
  auto tree = readOnlyClone(AT_FDCWD, storeDir);
  if (::move_mount(tree, "", AT_FDCWD, viewPath.cStr(), MOVE_MOUNT_F_EMPTY_PATH) < 0) {
    SQUALL_FAIL("cannot mount the store view at ", viewPath, ": ", strerror(errno));
  }
  struct statvfs fs;
  KJ_SYSCALL(::statvfs(viewPath.cStr(), &fs), viewPath);
  KJ_ASSERT((fs.f_flag & ST_RDONLY) != 0, "the store view is not read-only", viewPath);
}

StoreView::~StoreView() noexcept(false) {
  if (::umount2(viewPath.cStr(), MNT_DETACH) < 0) {
    KJ_LOG(WARNING, "cannot unmount the store view", viewPath, strerror(errno));
    return;
  }
  ::rmdir(viewPath.cStr());
}

kj::String StoreView::viewOf(kj::StringPtr storePath) const {
  KJ_REQUIRE(storePath.startsWith(storeDir) && storePath.size() > storeDir.size() &&
                 storePath[storeDir.size()] == '/',
             "not a path in the store", storePath);
  return kj::str(viewPath, storePath.slice(storeDir.size()));
}

// --------------------------------------------------------------- PlacedInputs

PlacedInputs::~PlacedInputs() noexcept(false) {
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([this]() { release(); })) {
    KJ_LOG(WARNING, "cannot release a task's placed inputs", e->getDescription());
  }
}

void PlacedInputs::release() {
  for (auto& fd : mounts) {
    // The descriptor's /proc name leads to the mount's root wherever it is
    // now. EINVAL: no longer mounted (a root program unmounted it).
    auto name = kj::str("/proc/self/fd/", fd.get());
    if (::umount2(name.cStr(), MNT_DETACH) < 0 && errno != EINVAL) {
      KJ_LOG(WARNING, "cannot detach a dir input's mount", strerror(errno));
    }
  }
  mounts.clear();
  KJ_IF_MAYBE(dir, storeFiles) { removeTree(*dir); }
}

// ------------------------------------------------------------------ placement

namespace {

// True when `inner` (components joined by '/') is `outer` or lies inside it.
bool atOrInside(kj::StringPtr inner, kj::StringPtr outer) {
  return isAtOrInside(std::string_view(inner.begin(), inner.size()),
                      std::string_view(outer.begin(), outer.size()));
}

}  // namespace

void choosePlacements(kj::ArrayPtr<SandboxInput> inputs, kj::ArrayPtr<const kj::String> outputPaths,
                      kj::ArrayPtr<const kj::String> fifos, kj::Maybe<const StoreView&> view,
                      kj::StringPtr storeFiles, kj::Maybe<InputSource&> stdinOnly) {
  auto placementOf = [&](const SandboxInput& p) {
    if (p.input.placement == InputPlacement::WRITABLE) return InputPlacement::WRITABLE;
    for (auto& out : outputPaths) {
      if (atOrInside(out, p.path)) return InputPlacement::WRITABLE;
    }
    if (view == nullptr) return InputPlacement::COPY;
    for (auto& out : outputPaths) {
      if (atOrInside(p.path, out)) return InputPlacement::COPY;
    }
    if (p.input.kind == wire::ObjectKind::DIR) {
      for (auto& other : inputs) {
        if (&other != &p && atOrInside(other.path, p.path)) return InputPlacement::COPY;
      }
      for (auto& fifo : fifos) {
        if (atOrInside(fifo, p.path)) return InputPlacement::COPY;
      }
    }
    return InputPlacement::VIEW;
  };
  for (auto& p : inputs) p.input.placement = placementOf(p);
  KJ_IF_MAYBE(source, stdinOnly) {
    source->placement = view != nullptr ? InputPlacement::VIEW : InputPlacement::COPY;
  }
  KJ_IF_MAYBE(v, view) {
    uint files = 0;
    auto viewed = [&](InputSource& source) {
      if (source.placement != InputPlacement::VIEW) return;
      if (source.data.is<kj::String>()) {
        source.viewPath = v->viewOf(source.data.get<kj::String>());
      } else {
        auto file = kj::str(storeFiles, "/", files++);
        source.viewPath = v->viewOf(file);
        source.storeFile = kj::mv(file);
      }
    };
    for (auto& p : inputs) viewed(p.input);
    KJ_IF_MAYBE(source, stdinOnly) { viewed(*source); }
  }
}

namespace {

// Writes a blob held in memory to its store file (see InputSource), making
// the task's directory in the store first if need be.
void writeStoreFile(const Blob& blob, kj::StringPtr path) {
  auto slash = KJ_ASSERT_NONNULL(path.findLast('/'));
  auto dir = kj::heapString(path.slice(0, slash));
  if (::mkdir(dir.cStr(), 0700) < 0 && errno != EEXIST) KJ_FAIL_SYSCALL("mkdir", errno, dir);
  auto out = openOrThrow(path, O_WRONLY | O_CREAT | O_EXCL, 0444);
  writeAll(out, blob.bytes);
}

}  // namespace

void placeInput(const InputSource& input, int parentFd, kj::StringPtr name, kj::StringPtr label,
                PlacedInputs& placed) {
  struct stat st;
  if (::fstatat(parentFd, name.cStr(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    SQUALL_FAIL(label, " is already taken by an earlier input");
  }
  int fileMode = input.placement == InputPlacement::WRITABLE ? 0644 : 0444;
  KJ_SWITCH_ONEOF(input.data) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
      KJ_IF_MAYBE(storeFile, input.storeFile) {
        writeStoreFile(*blob, *storeFile);
        KJ_SYSCALL(::symlinkat(KJ_ASSERT_NONNULL(input.viewPath).cStr(), parentFd, name.cStr()), name);
      } else {
        auto out = createAt(parentFd, name, fileMode);
        writeAll(out, blob->bytes);
      }
    }
    KJ_CASE_ONEOF(path, kj::String) {
      auto what = kj::str("input ", input.id);
      if (input.placement == InputPlacement::VIEW) {
        auto& viewPath = KJ_ASSERT_NONNULL(input.viewPath);
        if (input.kind == wire::ObjectKind::DIR) {
          KJ_SYSCALL(::mkdirat(parentFd, name.cStr(), 0555), name);
          auto tree = readOnlyClone(AT_FDCWD, viewPath);
          if (::move_mount(tree, "", parentFd, name.cStr(), MOVE_MOUNT_F_EMPTY_PATH) < 0) {
            SQUALL_FAIL("cannot mount ", what, " at ", label, ": ", strerror(errno));
          }
          placed.addMount(kj::mv(tree));
        } else {
          KJ_SYSCALL(::symlinkat(viewPath.cStr(), parentFd, name.cStr()), name);
        }
      } else if (input.kind == wire::ObjectKind::DIR) {
        auto source = openDirectory(path);
        // A held object is within the store's limits already.
        copyTree(source, parentFd, name, FileCopy::COPY, what, TreeLimits::none());
        if (input.placement == InputPlacement::COPY) {
          auto placed = openChildDir(parentFd, std::string(name.cStr()));
          sealTree(placed, label, TreeLimits::none(), false);
        }
      } else {
        auto in = openOrThrow(path, O_RDONLY);
        auto out = createAt(parentFd, name, fileMode);
        cloneFileFd(in, out);
      }
    }
  }
}

kj::AutoCloseFd openStdinInput(const InputSource& input, kj::StringPtr scratchDir) {
  KJ_SWITCH_ONEOF(input.data) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
      KJ_IF_MAYBE(storeFile, input.storeFile) {
        writeStoreFile(*blob, *storeFile);
        return openOrThrow(KJ_ASSERT_NONNULL(input.viewPath), O_RDONLY);
      }
      auto file = openAnonymousFile(scratchDir);
      writeAll(file, blob->bytes);
      KJ_SYSCALL(::lseek(file, 0, SEEK_SET));
      return file;
    }
    KJ_CASE_ONEOF(path, kj::String) {
      KJ_IF_MAYBE(viewPath, input.viewPath) { return openOrThrow(*viewPath, O_RDONLY); }
      auto in = openOrThrow(path, O_RDONLY);
      auto file = openAnonymousFile(scratchDir);
      cloneFileFd(in, file);
      KJ_SYSCALL(::lseek(file, 0, SEEK_SET));
      return file;
    }
  }
  KJ_UNREACHABLE;
}

bool replaceViewLink(kj::StringPtr viewRoot, int dirFd, const char* name, kj::StringPtr target) {
  if (!target.startsWith(viewRoot) || target.size() <= viewRoot.size() + 1 ||
      target[viewRoot.size()] != '/') {
    return false;
  }
  auto rest = kj::str(target.slice(viewRoot.size() + 1));
  if (relativePathProblem(rest) != nullptr) return false;
  auto view = openDirectory(viewRoot);
  int fd = openNoSymlinks(view, rest, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;  // the object is gone: the link stays a link
  kj::AutoCloseFd source(fd);
  struct stat st;
  KJ_SYSCALL(::fstat(source, &st));
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) return false;
  KJ_SYSCALL(::unlinkat(dirFd, name, 0), name);
  if (S_ISDIR(st.st_mode)) {
    // A held object; the output it joins is sealed within the limits.
    copyTree(source, dirFd, name, FileCopy::COPY, kj::str("'", target, "'"), TreeLimits::none());
  } else {
    auto out = createAt(dirFd, name, st.st_mode & 0777);
    cloneFileFd(source, out);
  }
  return true;
}

}  // namespace squall
