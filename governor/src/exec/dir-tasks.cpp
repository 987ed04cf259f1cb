// Built-in tasks on directories and on the governor's own file system:
// make_dir, slice_dir, load, load_dir and store. Validation runs on the loop
// (cheap, no file access); every file operation runs on the libuv pool.
// Paths follow safe-path.h: task paths never lead out of the object or
// sandbox they name, and load / store only touch allowed roots.
#include "dir-tree.h"
#include "safe-path.h"
#include "task-env.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <linux/openat2.h>
#include <squall/proto/spec-names.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {

// Turns a FAILED exception from validation or a pool job into the task's
// failure (its description is the user-facing message).
kj::Promise<TaskOutcome> failOnError(Id taskId, kj::Promise<TaskOutcome> promise) {
  return promise.catch_([taskId](kj::Exception&& e) {
    return TaskOutcome::failure(taskId, kj::str(e.getDescription()));
  });
}

// An input as the pool job needs it.
struct InputData {
  Id id;
  wire::ObjectKind kind;
  ObjectData data;
};

InputData inputData(TaskEnv& env, Id inputId) {
  KJ_IF_MAYBE(data, env.store.data(inputId)) {
    auto& meta = KJ_ASSERT_NONNULL(env.store.find(inputId));
    return InputData{inputId, meta.kind, kj::mv(*data)};
  }
  SQUALL_FAIL("input ", inputId, " is not held by governor ", env.governorName);
}

// Checks the output count and kind.
Id singleOutput(wire::Assignment::Reader spec, kj::StringPtr op, wire::ObjectKind kind) {
  auto task = spec.getTask();
  auto kinds = spec.getOutputKinds();
  if (task.getOutputs().size() != 1 || kinds.size() != 1) {
    SQUALL_FAIL(op, " needs exactly one output, got ", task.getOutputs().size());
  }
  Id output = Id::from(task.getOutputs()[0]);
  if (kinds[0] != kind) {
    SQUALL_FAIL(op, ": output ", output, " is a ", kindName(kinds[0]), ", but ", op, " makes a ",
                kindName(kind));
  }
  return output;
}

}  // namespace

void placeObject(wire::ObjectKind kind, const ObjectData& data, Id id, int parentFd,
                 kj::StringPtr name, kj::StringPtr label) {
  struct stat st;
  if (::fstatat(parentFd, name.cStr(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    SQUALL_FAIL(label, " is already taken by an earlier input");
  }
  KJ_SWITCH_ONEOF(data) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
      int fd;
      KJ_SYSCALL(fd = ::openat(parentFd, name.cStr(),
                               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444),
                 name);
      kj::AutoCloseFd out(fd);
      writeAll(out, blob->bytes);
    }
    KJ_CASE_ONEOF(path, kj::String) {
      if (kind == wire::ObjectKind::DIR) {
        auto source = openDirectory(path);
        // A held object is within the store's limits already.
        copyTree(source, parentFd, name, FileCopy::LINK, kj::str("input ", id), TreeLimits::none());
      } else if (::linkat(AT_FDCWD, path.cStr(), parentFd, name.cStr(), 0) < 0) {
        // Another filesystem: copy.
        auto in = openOrThrow(path, O_RDONLY);
        int fd;
        KJ_SYSCALL(fd = ::openat(parentFd, name.cStr(),
                                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0444),
                   name);
        kj::AutoCloseFd out(fd);
        copyFileFd(in, out, false);
      }
    }
  }
}

namespace {

// Builds a tree at `temp` with `build`, seals it (refused beyond `limits`);
// removes it on failure.
HashedSize buildTree(kj::StringPtr temp, kj::StringPtr what, const TreeLimits& limits,
                     kj::Function<void(int)> build) {
  KJ_SYSCALL(::mkdir(temp.cStr(), 0755), temp);
  HashedSize result;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                auto root = openDirectory(temp);
                build(root);
                result = sealTree(root, what, limits);
              })) {
    KJ_IF_MAYBE(e2, kj::runCatchingExceptions([&]() { removeTree(temp); })) {
      KJ_LOG(WARNING, "cannot remove a failed tree", temp, e2->getDescription());
    }
    kj::throwFatalException(kj::mv(*e));
  }
  return result;
}

// Size and hash of a file written at `temp`; removes it on failure.
HashedSize buildFile(kj::StringPtr temp, kj::Function<HashedSize()> build) {
  HashedSize result;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { result = build(); })) {
    ::unlink(temp.cStr());
    kj::throwFatalException(kj::mv(*e));
  }
  return result;
}

// Relative path below a root for openat2: "." for the root itself.
kj::String relativeOrDot(kj::StringPtr relative) {
  return relative.size() == 0 ? kj::str(".") : kj::str(relative);
}

std::atomic<uint64_t> storeCounter{0};

}  // namespace

// ------------------------------------------------------------------ make_dir

kj::Promise<TaskOutcome> runMakeDir(TaskEnv& env, wire::Assignment::Reader spec, TaskControl&) {
  auto task = spec.getTask();
  Id taskId = Id::from(task.getId());
  return failOnError(taskId, kj::evalNow([&env, spec, taskId]() {
    auto task = spec.getTask();
    Id outputId = singleOutput(spec, "make_dir", wire::ObjectKind::DIR);
    struct Placement {
      kj::String path;
      InputData input;
    };
    kj::Vector<Placement> placements;
    for (auto input : task.getInputs()) {
      auto path = input.getPath();
      KJ_IF_MAYBE(problem, relativePathProblem(path)) {
        SQUALL_FAIL("make_dir: input path '", path, "' is not allowed: ", *problem);
      }
      placements.add(Placement{kj::str(path), inputData(env, Id::from(input.getObject()))});
    }
    auto temp = kj::heap<StoreTemp>(env.store);
    return env.bridge
        .runOnPool<HashedSize>([temp = kj::str(temp->path()), placements = kj::mv(placements),
                                limits = env.store.treeLimits()]() mutable {
          return buildTree(temp, "make_dir", limits, [&placements](int root) {
            for (auto& p : placements) {
              auto parts = pathComponents(p.path);
              auto label = kj::str("make_dir: input path '", p.path, "'");
              auto parent = openDirChain(root, parts, parts.size() - 1, true, label);
              placeObject(p.input.kind, p.input.data, p.input.id, parent, parts.back(), label);
            }
          });
        })
        .then([&env, taskId, outputId, temp = kj::mv(temp)](HashedSize hashed) mutable {
          auto meta = env.store.adoptDir(outputId, temp->release(), hashed);
          return TaskOutcome::success(taskId, outputId, meta.size, meta.hash);
        });
  }));
}

// ----------------------------------------------------------------- slice_dir

kj::Promise<TaskOutcome> runSliceDir(TaskEnv& env, wire::Assignment::Reader spec, TaskControl&) {
  Id taskId = Id::from(spec.getTask().getId());
  return failOnError(taskId, kj::evalNow([&env, spec, taskId]() -> kj::Promise<TaskOutcome> {
    auto task = spec.getTask();
    kj::StringPtr path = task.getConfig().getSliceDir();
    bool wantDir = path.endsWith("/");
    KJ_IF_MAYBE(problem, relativePathProblem(path)) {
      SQUALL_FAIL("slice_dir: path '", path, "' is not allowed: ", *problem);
    }
    Id outputId = singleOutput(spec, "slice_dir", wantDir ? wire::ObjectKind::DIR : wire::ObjectKind::BLOB);
    if (task.getInputs().size() != 1) {
      SQUALL_FAIL("slice_dir needs exactly one input, got ", task.getInputs().size());
    }
    auto input = inputData(env, Id::from(task.getInputs()[0].getObject()));
    if (input.kind != wire::ObjectKind::DIR) {
      SQUALL_FAIL("slice_dir: input ", input.id, " is a ", kindName(input.kind), ", not a dir");
    }
    auto root = kj::str(input.data.get<kj::String>());
    auto relative = joinPath(pathComponents(path), pathComponents(path).size());
    auto temp = kj::heap<StoreTemp>(env.store);
    auto job = env.bridge.runOnPool<HashedSize>([root = kj::mv(root), relative = kj::mv(relative),
                                                 path = kj::str(path), wantDir, temp = kj::str(temp->path()),
                                                 inputId = input.id, limits = env.store.treeLimits()]() {
      auto rootFd = openDirectory(root);
      int fd = openNoSymlinks(rootFd, relative, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
      if (fd < 0) {
        switch (-fd) {
          case ENOENT: SQUALL_FAIL("slice_dir: path '", path, "' does not exist in input ", inputId);
          case ELOOP:
            SQUALL_FAIL("slice_dir: path '", path, "' is or goes through a symbolic link in input ",
                        inputId, "; links are not followed");
          case ENOTDIR:
            SQUALL_FAIL("slice_dir: path '", path, "' goes through a file in input ", inputId);
          default: KJ_FAIL_SYSCALL("openat2", -fd, path);
        }
      }
      kj::AutoCloseFd opened(fd);
      struct stat st;
      KJ_SYSCALL(::fstat(opened, &st), path);
      if (wantDir) {
        if (!S_ISDIR(st.st_mode)) {
          SQUALL_FAIL("slice_dir: path '", path, "' is ", entryKindName(st.st_mode),
                      ", not a directory (drop the trailing '/' to take a file)");
        }
        return buildTree(temp, "slice_dir", limits, [&](int to) {
          copyTreeContents(opened, to, FileCopy::LINK, kj::str("input ", inputId), limits);
        });
      }
      if (!S_ISREG(st.st_mode)) {
        SQUALL_FAIL("slice_dir: path '", path, "' is ", entryKindName(st.st_mode),
                    S_ISDIR(st.st_mode) ? " (end it with '/' to take a directory)" : ", not a file");
      }
      return buildFile(temp, [&]() {
        linkFdOrCopy(opened, temp);
        return hashFd(opened);
      });
    });
    return job.then([&env, taskId, outputId, wantDir, temp = kj::mv(temp)](HashedSize hashed) mutable {
      auto meta = wantDir ? env.store.adoptDir(outputId, temp->release(), hashed)
                          : env.store.adoptFile(outputId, wire::ObjectKind::BLOB, temp->release(), hashed);
      return TaskOutcome::success(taskId, outputId, meta.size, meta.hash);
    });
  }));
}

// ----------------------------------------------------------- load, load_dir

kj::Promise<TaskOutcome> runLoad(TaskEnv& env, wire::Assignment::Reader spec, TaskControl&) {
  Id taskId = Id::from(spec.getTask().getId());
  return failOnError(taskId, kj::evalNow([&env, spec, taskId]() -> kj::Promise<TaskOutcome> {
    auto task = spec.getTask();
    bool isDir = task.getConfig().isLoadDir();
    kj::StringPtr op = isDir ? "load_dir" : "load";
    kj::StringPtr path = isDir ? task.getConfig().getLoadDir() : task.getConfig().getLoad();
    Id outputId = singleOutput(spec, op, isDir ? wire::ObjectKind::DIR : wire::ObjectKind::BLOB);
    auto resolved = env.allowedRoots.resolve(op, path);
    auto temp = kj::heap<StoreTemp>(env.store);
    auto job = env.bridge.runOnPool<HashedSize>([rootFd = resolved.rootFd, root = kj::str(resolved.root),
                                                 relative = relativeOrDot(resolved.relative),
                                                 path = kj::str(path), op, isDir, temp = kj::str(temp->path()),
                                                 limits = env.store.treeLimits()]() {
      // Symbolic links inside the root are followed; none may lead out.
      int fd = openat2Raw(rootFd, relative, O_RDONLY | O_NONBLOCK, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
      if (fd < 0) SQUALL_FAIL(beneathError(op, path, root, -fd));
      kj::AutoCloseFd opened(fd);
      struct stat st;
      KJ_SYSCALL(::fstat(opened, &st), path);
      if (isDir) {
        if (!S_ISDIR(st.st_mode)) {
          SQUALL_FAIL("load_dir: path '", path, "' is ", entryKindName(st.st_mode),
                      ", not a directory", S_ISREG(st.st_mode) ? " (use load)" : "");
        }
        auto what = kj::str("load_dir: path '", path, "'");
        return buildTree(temp, what, limits, [&](int to) {
          copyTreeContents(opened, to, FileCopy::COPY, what, limits);
        });
      }
      if (!S_ISREG(st.st_mode)) {
        SQUALL_FAIL("load: path '", path, "' is ", entryKindName(st.st_mode), ", not a file",
                    S_ISDIR(st.st_mode) ? " (use load_dir)" : "");
      }
      return buildFile(temp, [&]() {
        auto out = openOrThrow(temp, O_WRONLY | O_CREAT | O_EXCL, 0444);
        return copyFileFd(opened, out, true);
      });
    });
    return job.then([&env, taskId, outputId, isDir, temp = kj::mv(temp)](HashedSize hashed) mutable {
      auto meta = isDir ? env.store.adoptDir(outputId, temp->release(), hashed)
                        : env.store.adoptFile(outputId, wire::ObjectKind::BLOB, temp->release(), hashed);
      return TaskOutcome::success(taskId, outputId, meta.size, meta.hash);
    });
  }));
}

// --------------------------------------------------------------------- store

kj::Promise<TaskOutcome> runStore(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control) {
  Id taskId = Id::from(spec.getTask().getId());
  return failOnError(taskId, kj::evalNow([&env, &control, spec, taskId]() -> kj::Promise<TaskOutcome> {
    auto task = spec.getTask();
    auto config = task.getConfig().getStore();
    kj::StringPtr path = config.getPath();
    bool overwrite = config.getOverwrite();
    if (task.getOutputs().size() != 0) {
      SQUALL_FAIL("store has no outputs, got ", task.getOutputs().size());
    }
    if (task.getInputs().size() != 1) {
      SQUALL_FAIL("store needs exactly one input, got ", task.getInputs().size());
    }
    auto resolved = env.allowedRoots.resolve("store", path);
    if (resolved.relative.size() == 0) {
      SQUALL_FAIL("store: path '", path, "' is an allowed root itself; name a path inside it");
    }
    auto input = inputData(env, Id::from(task.getInputs()[0].getObject()));
    auto job = env.bridge.runOnPool<void>([rootFd = resolved.rootFd, root = kj::str(resolved.root),
                                           relative = kj::mv(resolved.relative), path = kj::str(path),
                                           overwrite, input = kj::mv(input),
                                           stop = control.stopFlag()]() {
      auto parts = pathComponents(relative);
      // Parent directories: created where missing; links inside the root
      // are followed, none may lead out of it.
      kj::AutoCloseFd parent;
      for (size_t i = 0; i + 1 < parts.size(); i++) {
        auto prefix = joinPath(parts, i + 1);
        int fd = openat2Raw(rootFd, prefix, O_RDONLY | O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
        if (fd == -ENOENT) {
          int at = i == 0 ? rootFd : parent.get();
          if (::mkdirat(at, parts[i].cStr(), 0755) < 0 && errno != EEXIST) {
            KJ_FAIL_SYSCALL("mkdirat", errno, prefix);
          }
          fd = openat2Raw(rootFd, prefix, O_RDONLY | O_DIRECTORY, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS);
        }
        if (fd < 0) SQUALL_FAIL(beneathError("store", path, root, -fd));
        parent = kj::AutoCloseFd(fd);
      }
      if (parent.get() < 0) {
        int fd;
        KJ_SYSCALL(fd = ::fcntl(rootFd, F_DUPFD_CLOEXEC, 0));
        parent = kj::AutoCloseFd(fd);
      }
      auto& name = parts.back();
      struct stat st;
      bool exists = ::fstatat(parent, name.cStr(), &st, AT_SYMLINK_NOFOLLOW) == 0;
      if (exists && !overwrite) {
        SQUALL_FAIL("store: path '", path, "' already exists (set overwrite to replace it)");
      }
      // Written beside the target, then renamed over it: readers never see
      // a half-written file.
      auto temp = kj::str(".", name, ".squall-", getpid(), "-", storeCounter.fetch_add(1));
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                    KJ_SWITCH_ONEOF(input.data) {
                      KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
                        int fd;
                        KJ_SYSCALL(fd = ::openat(parent, temp.cStr(),
                                                 O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
                        kj::AutoCloseFd out(fd);
                        writeAll(out, blob->bytes);
                      }
                      KJ_CASE_ONEOF(file, kj::String) {
                        if (input.kind == wire::ObjectKind::DIR) {
                          auto source = openDirectory(file);
                          copyTree(source, parent, temp, FileCopy::COPY, kj::str("input ", input.id),
                                   TreeLimits::none());
                        } else {
                          auto in = openOrThrow(file, O_RDONLY);
                          int fd;
                          KJ_SYSCALL(fd = ::openat(parent, temp.cStr(),
                                                   O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
                          kj::AutoCloseFd out(fd);
                          copyFileFd(in, out, false);
                        }
                      }
                    }
                    // Abandoned (cancelled, timed out) while copying: the
                    // target is left as it was.
                    if (stop->stopped) SQUALL_FAIL("store: stopped before '", path, "' was written");
                    if (exists) removeTreeAt(parent, name);
                    if (::renameat2(parent, temp.cStr(), parent, name.cStr(), RENAME_NOREPLACE) < 0) {
                      if (errno == EEXIST) {
                        SQUALL_FAIL("store: path '", path, "' appeared while it was written");
                      }
                      KJ_FAIL_SYSCALL("renameat2", errno, path);
                    }
                  })) {
        KJ_IF_MAYBE(e2, kj::runCatchingExceptions([&]() { removeTreeAt(parent, temp); })) {
          KJ_LOG(WARNING, "cannot remove a failed store", temp, e2->getDescription());
        }
        kj::throwFatalException(kj::mv(*e));
      }
    });
    return job.then([taskId]() {
      TaskOutcome outcome;
      outcome.id = taskId;
      outcome.ok = true;
      return outcome;
    });
  }));
}

}  // namespace squall
