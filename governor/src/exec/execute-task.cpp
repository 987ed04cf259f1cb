// The `execute` task: runs a program in a per-task sandbox directory
// <tasksDir>/<session>-<n>/ with its inputs at their paths, placed as
// input-isolation.h says (through the read-only store view, or as private
// copies; writable inputs as private copies the program may change), takes
// its outputs into the store (a dir output is the tree the program left,
// moved and sealed; an output at a writable input's path takes what the
// program made of it) and removes the sandbox, detaching mounted dir inputs
// first; that removal is the task's aftermath (TaskControl), done after its
// outcome is reported. Loop thread only; sandbox file work runs on the
// libuv pool.
//
// Nothing of the governor's lives in the sandbox, so no name a task uses can
// reach it: stdout and stderr go to anonymous files (O_TMPFILE in tasksDir)
// read back through the governor's descriptors, and an input fed only on
// stdin is opened for the program, not placed.
//
// The program may do anything inside its sandbox, including planting
// symbolic links; the governor never follows one there: outputs are taken
// through directory descriptors with O_NOFOLLOW, an output path that is a
// link fails the task (unless it is a link into the store view, which is
// replaced by what it names), and other links inside a dir output stay
// links.
//
// Live streams (stream-hub.h): a stream output is the program's stdout (a
// pipe) or a named pipe made in the sandbox before it starts; a live input
// is its stdin (a pipe) or a named pipe. Both are attached to the hub before
// the program starts. A failing live input kills the program at once; after
// the exit, inputs that reached their end wait for their producer's verdict,
// then the outputs are taken, the streams get this task's verdict (a death
// by SIGPIPE, or a shell's 141, after every reader had gone counts as
// success) and the outcome waits until they have ended for every reader.
#include "dir-tree.h"
#include "input-isolation.h"
#include "process-sets.h"
#include "stream-ends.h"
#include "task-env.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <squall/proto/errors.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {

constexpr size_t STDERR_TAIL_BYTES = 4096;
constexpr size_t STDOUT_TAIL_BYTES = 4096;

// What the program produced, gathered off the loop after it exits.
struct Harvest {
  kj::String stderrTail;
  kj::String stdoutTail;
  kj::Maybe<kj::String> error;
  kj::Vector<HashedSize> outputs;
  // Where the sandbox went (retireSandbox), to be removed after the outcome.
  kj::Maybe<kj::String> retired;
};

// Store paths the outputs are moved to before they are adopted; whatever
// was not adopted is removed (on the pool) when this goes.
struct OutputTemps {
  explicit OutputTemps(ObjectStore& store) : store(store) {}
  OutputTemps(OutputTemps&&) = default;
  ~OutputTemps() noexcept(false) {
    for (auto& path : paths) {
      KJ_IF_MAYBE(p, path) { store.removeLater(kj::mv(*p)); }
    }
  }
  kj::String release(size_t i) {
    auto path = kj::mv(KJ_ASSERT_NONNULL(paths[i]));
    paths[i] = nullptr;
    return path;
  }
  ObjectStore& store;
  kj::Vector<kj::Maybe<kj::String>> paths;
};

// Takes the output `rel` of the sandbox into `temp`: checks what is there
// against the declared kind without following links, then moves it (a dir
// is then sealed). Links into the store view at `viewRoot` (an input the
// program moved or copied as a link) become copies of what they name.
// Returns its size and hash.
HashedSize takeOutput(int sandboxFd, kj::StringPtr rel, wire::ObjectKind kind, Id outputId,
                      kj::StringPtr temp, kj::Maybe<kj::StringPtr> viewRoot, const TreeLimits& limits) {
  auto parts = pathComponents(rel);
  auto what = kj::str("output '", rel, "'");
  auto parent = openDirChain(sandboxFd, parts, parts.size() - 1, false, what);
  auto& name = parts.back();
  struct stat st;
  auto look = [&]() {
    if (::fstatat(parent, name.cStr(), &st, AT_SYMLINK_NOFOLLOW) < 0) {
      if (errno == ENOENT) {
        if (kind == wire::ObjectKind::DIR) SQUALL_FAIL("output directory '", rel, "' was not created");
        SQUALL_FAIL("output file '", rel, "' was not created");
      }
      SQUALL_FAIL("cannot read output '", rel, "': ", strerror(errno));
    }
  };
  look();
  if (S_ISLNK(st.st_mode)) {
    KJ_IF_MAYBE(view, viewRoot) {
      if (replaceViewLink(*view, parent, name.cStr(), readLinkAt(parent, name.cStr()))) look();
    }
  }
  if (S_ISLNK(st.st_mode)) SQUALL_FAIL("output '", rel, "' is a symbolic link");
  if (kind == wire::ObjectKind::DIR) {
    if (!S_ISDIR(st.st_mode)) {
      SQUALL_FAIL("output '", rel, "' is ", entryKindName(st.st_mode), ", but output ", outputId,
                  " is declared a dir");
    }
    KJ_SYSCALL(::renameat(parent, name.cStr(), AT_FDCWD, temp.cStr()), rel);
    auto root = openDirectory(temp);
    KJ_IF_MAYBE(view, viewRoot) {
      LinkHook materialize = [view = *view](int dirFd, const char* entry, kj::StringPtr target) {
        return replaceViewLink(view, dirFd, entry, target);
      };
      return sealTree(root, what, limits, true, materialize);
    }
    return sealTree(root, what, limits);
  }
  if (!S_ISREG(st.st_mode)) {
    SQUALL_FAIL("output '", rel, "' is ", entryKindName(st.st_mode), ", but output ", outputId,
                " is declared a blob");
  }
  int fd;
  KJ_SYSCALL(fd = ::openat(parent, name.cStr(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), rel);
  kj::AutoCloseFd file(fd);
  KJ_SYSCALL(::fstat(file, &st), rel);
  if (!S_ISREG(st.st_mode)) SQUALL_FAIL("output '", rel, "' changed while it was taken");
  if (st.st_nlink > 1) {
    // Shares its inode with another file (maybe outside the sandbox): the
    // store takes a copy, so making it read-only touches nothing else.
    auto out = openOrThrow(temp, O_WRONLY | O_CREAT | O_EXCL, 0444);
    return copyFileFd(file, out, true);
  }
  auto hashed = hashFd(file);
  KJ_SYSCALL(::renameat(parent, name.cStr(), AT_FDCWD, temp.cStr()), rel);
  return hashed;
}

kj::String trimTrailingNewlines(kj::StringPtr text) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) end--;
  return kj::heapString(text.slice(0, end));
}

// Why `program` did not start on governor `governor`; `path` is the PATH
// the task had (where a bare name was looked for).
kj::String spawnError(kj::StringPtr program, int code, kj::StringPtr governor, kj::StringPtr path) {
  switch (code) {
    case UV_ENOENT:
      if (program.findFirst('/') != nullptr) {
        return kj::str("program '", program, "' not found on governor ", governor,
                       program.startsWith("/") ? "" : " (a relative path starts from the task's sandbox)");
      }
      return kj::str("program '", program, "' not found on governor ", governor, " in its PATH (", path,
                     "); the caller's PATH does not travel with a task: give the program's full path, or "
                     "set PATH in the task's environment (a pipeline's env)");
    case UV_EACCES:
      return kj::str("program '", program, "' is not executable (permission denied)");
    default: return kj::str("cannot start program '", program, "': ", uvErrorText(code));
  }
}

std::atomic<uint64_t> retiredSandboxes{0};

// Moves the sandbox away from its name, to <tasksDir>/.removing-N, so that
// the task can be run again at once (a retry on this governor) while the
// old one is removed. Returns the new path; nullptr if there was none.
// Pool threads.
kj::Maybe<kj::String> retireSandbox(kj::StringPtr tasksDir, kj::StringPtr sandbox) {
  auto retired = kj::str(tasksDir, "/.removing-", retiredSandboxes.fetch_add(1));
  if (::rename(sandbox.cStr(), retired.cStr()) == 0) return kj::mv(retired);
  if (errno == ENOENT) return nullptr;
  KJ_FAIL_SYSCALL("rename", errno, sandbox, retired);
}

// Releases what placing the inputs left outside the sandbox (the mounts in
// it first), then removes the retired sandbox: the task's aftermath.
kj::Promise<void> removeRetired(TaskEnv& env, kj::Maybe<kj::String> retired, kj::Own<PlacedInputs> placed) {
  return env.bridge.runOnPool<void>([retired = kj::mv(retired), placed = kj::mv(placed)]() mutable {
    placed->release();
    KJ_IF_MAYBE(path, retired) { removeTree(*path); }
  });
}

// Retires the sandbox and leaves its removal to the task's aftermath, then
// resolves with `outcome`.
kj::Promise<TaskOutcome> cleanUp(TaskEnv& env, TaskControl& control, kj::StringPtr sandbox,
                                 kj::Own<PlacedInputs> placed, TaskOutcome outcome) {
  return env.bridge
      .runOnPool<kj::Maybe<kj::String>>([tasksDir = kj::str(env.tasksDir), sandbox = kj::str(sandbox)]() {
        return retireSandbox(tasksDir, sandbox);
      })
      .catch_([&env, sandbox = kj::str(sandbox)](kj::Exception&& e) -> kj::Maybe<kj::String> {
        env.logger.warn("event=sandbox-remove-failed path={} error=\"{}\"", sandbox.cStr(),
                        e.getDescription().cStr());
        return nullptr;
      })
      .then([&env, &control, placed = kj::mv(placed),
             outcome = kj::mv(outcome)](kj::Maybe<kj::String> retired) mutable {
        control.setAftermath(removeRetired(env, kj::mv(retired), kj::mv(placed)));
        return kj::mv(outcome);
      });
}


// What readers of the task's streams are told when it did not succeed.
kj::String producerFailure(TaskControl& control, ProcessExit exit, kj::Maybe<kj::StringPtr> inputFailure,
                           kj::Maybe<kj::StringPtr> harvestError) {
  if (control.isCancelled()) return kj::str(control.hasTimedOut() ? "timed out" : "was cancelled");
  KJ_IF_MAYBE(f, inputFailure) { return kj::str("failed: ", *f); }
  if (exit.termSignal != 0) {
    return kj::str("was killed by signal ", exit.termSignal, " (", signalName(exit.termSignal), ")");
  }
  if (exit.exitStatus != 0) return kj::str("exited with status ", exit.exitStatus);
  KJ_IF_MAYBE(e, harvestError) { return kj::str("failed: ", *e); }
  return kj::str("failed");
}

// After the program has exited and its live inputs are settled: takes its
// outputs (on the pool), gives its streams their verdict, waits until they
// have ended for every reader, and makes the outcome.
kj::Promise<TaskOutcome> harvestAndReport(TaskEnv& env, TaskControl& control,
                                          wire::Assignment::Reader spec, Id taskId, kj::String sandbox,
                                          kj::String program, kj::Own<const SharedFd> stdoutFd,
                                          kj::Own<const SharedFd> stderrFd, bool wantsStdout,
                                          kj::Own<StreamEnds> ends, kj::Own<PlacedInputs> placed,
                                          ProcessExit exit) {
  // A producer whose readers had all gone, ended by the SIGPIPE that
  // closing its pipe caused (or a shell's 141 for it), finished as a pipe
  // stage does: successfully.
  bool brokenPipeOk = !control.isCancelled() && ends->closedByReaders() &&
                      (exit.termSignal == SIGPIPE || (exit.termSignal == 0 && exit.exitStatus == 128 + SIGPIPE));
  bool exitedOk = brokenPipeOk || (exit.termSignal == 0 && exit.exitStatus == 0);
  bool success = exitedOk && !control.isCancelled() && ends->inputFailure == nullptr;
  auto task = spec.getTask();
  auto mappings = task.getConfig().getExecute().getOutputs();
  auto kinds = spec.getOutputKinds();
  // Where each output goes before it is adopted; removed if we are dropped
  // before that.
  OutputTemps temps(env.store);
  kj::Vector<kj::String> tempPaths;
  kj::Vector<kj::Maybe<kj::String>> sources;  // nullptr = stdout
  kj::Vector<wire::ObjectKind> outputKinds;
  if (success) {
    for (uint i = 0; i < mappings.size(); i++) {
      outputKinds.add(kinds[i]);
      if (kinds[i] == wire::ObjectKind::STREAM) {
        // Its bytes have flowed (and were persisted by the hub).
        tempPaths.add(kj::str());
        temps.paths.add(nullptr);
        sources.add(nullptr);
        continue;
      }
      auto path = env.store.newTempPath();
      tempPaths.add(kj::str(path));
      temps.paths.add(kj::mv(path));
      if (mappings[i].isStdout()) {
        sources.add(nullptr);
      } else {
        auto parts = pathComponents(mappings[i].getPath());
        sources.add(joinPath(parts, parts.size()));
      }
    }
  }
  kj::Vector<Id> outputIds;
  for (auto output : task.getOutputs()) outputIds.add(Id::from(output));
  kj::Maybe<kj::String> viewRoot;
  KJ_IF_MAYBE(view, env.storeView) { viewRoot = kj::str(view->path()); }
  auto harvest = env.bridge.runOnPool<Harvest>(
      [sandbox = kj::str(sandbox), success, tempPaths = kj::mv(tempPaths), sources = kj::mv(sources),
       kinds = kj::mv(outputKinds), outputIds = kj::mv(outputIds), stdoutFd = kj::mv(stdoutFd),
       stderrFd = kj::mv(stderrFd), wantsStdout, tasksDir = kj::str(env.tasksDir),
       viewRoot = kj::mv(viewRoot), limits = env.store.treeLimits()]() mutable {
        Harvest h;
        h.stderrTail = readTailFd(stderrFd->fd, STDERR_TAIL_BYTES);
        if (!wantsStdout) h.stdoutTail = readTailFd(stdoutFd->fd, STDOUT_TAIL_BYTES);
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
          if (!success) return;
          auto root = openDirectory(sandbox);
          kj::Maybe<HashedSize> stdoutHash;
          for (size_t i = 0; i < sources.size(); i++) {
            if (kinds[i] == wire::ObjectKind::STREAM) {
              h.outputs.add(HashedSize{});
            } else KJ_IF_MAYBE(rel, sources[i]) {
              h.outputs.add(takeOutput(root, *rel, kinds[i], outputIds[i], tempPaths[i],
                                       viewRoot.map([](const kj::String& v) -> kj::StringPtr { return v; }),
                                       limits));
            } else {
              linkFdOrCopy(stdoutFd->fd, tempPaths[i]);
              KJ_IF_MAYBE(known, stdoutHash) {
                h.outputs.add(*known);
              } else {
                auto hashed = hashFd(stdoutFd->fd);
                stdoutHash = hashed;
                h.outputs.add(hashed);
              }
            }
          }
        })) {
          h.error = kj::str(e->getDescription());
        }
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { h.retired = retireSandbox(tasksDir, sandbox); })) {
          KJ_LOG(WARNING, "cannot remove sandbox", sandbox, e->getDescription());
        }
        return h;
      });
  return harvest.then([&env, &control, spec, taskId, exit, exitedOk, program = kj::mv(program),
                       temps = kj::mv(temps), ends = kj::mv(ends),
                       placed = kj::mv(placed)](Harvest h) mutable {
    control.setAftermath(removeRetired(env, kj::mv(h.retired), kj::mv(placed)));
    // The streams' verdict: their readers learn it once the flow has ended.
    kj::Maybe<kj::String> failure;
    if (!exitedOk || control.isCancelled() || ends->inputFailure != nullptr || h.error != nullptr) {
      failure = producerFailure(control, exitedOk ? ProcessExit{} : exit,
                                ends->inputFailure.map([](const kj::String& s) -> kj::StringPtr { return s; }),
                                h.error.map([](const kj::String& s) -> kj::StringPtr { return s; }));
    }
    auto settled = ends->finish(failure.map([](const kj::String& s) -> kj::StringPtr { return s; }),
                                control.whenCancelled());
    return settled
        .then([&env, &control, spec, taskId, exit, exitedOk, program = kj::mv(program),
               temps = kj::mv(temps), h = kj::mv(h),
               ends = kj::mv(ends)](kj::Array<StreamOutput::Result> streams) mutable {
          TaskOutcome outcome;
          outcome.id = taskId;
          outcome.stderrTail = kj::mv(h.stderrTail);
          outcome.stdoutTail = kj::mv(h.stdoutTail);
          outcome.exitStatus = exit.termSignal == 0 ? static_cast<int32_t>(exit.exitStatus) : -1;
          outcome.signal = exit.termSignal;
          auto streamError = firstStreamError(streams);
          if (control.isCancelled()) {
            outcome.error = kj::str("cancelled");
          } else KJ_IF_MAYBE(f, ends->inputFailure) {
            outcome.error = kj::str(*f);
          } else if (!exitedOk && exit.termSignal != 0) {
            outcome.error = kj::str("program '", program, "' was killed by signal ", exit.termSignal, " (",
                                    signalName(exit.termSignal), ")");
          } else if (!exitedOk) {
            auto tail = trimTrailingNewlines(outcome.stderrTail);
            outcome.error = tail.size() == 0
                ? kj::str("program '", program, "' exited with status ", exit.exitStatus)
                : kj::str("program '", program, "' exited with status ", exit.exitStatus, "; stderr:\n",
                          tail);
          } else KJ_IF_MAYBE(error, h.error) {
            outcome.error = kj::mv(*error);
          } else KJ_IF_MAYBE(error, streamError) {
            outcome.error = kj::str(*error);
          } else {
            auto task = spec.getTask();
            auto kinds = spec.getOutputKinds();
            size_t nextStream = 0;
            for (size_t i = 0; i < temps.paths.size(); i++) {
              Id outputId = Id::from(task.getOutputs()[i]);
              if (kinds[i] == wire::ObjectKind::STREAM) {
                auto& r = streams[nextStream++];
                outcome.outputs.add(OutputInfo{outputId, r.size, r.hash});
                continue;
              }
              auto meta = kinds[i] == wire::ObjectKind::DIR
                              ? env.store.adoptDir(outputId, temps.release(i), h.outputs[i])
                              : env.store.adoptFile(outputId, wire::ObjectKind::BLOB, temps.release(i),
                                                    h.outputs[i]);
              outcome.outputs.add(OutputInfo{outputId, meta.size, meta.hash});
            }
            outcome.ok = true;
          }
          return outcome;
        });
  });
}

}  // namespace

kj::Promise<TaskOutcome> runExecute(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control) {
  auto task = spec.getTask();
  Id taskId = Id::from(task.getId());
  auto config = task.getConfig().getExecute();
  auto fail = [taskId](kj::String message) { return TaskOutcome::failure(taskId, kj::mv(message)); };

  // --- validate (no side effects yet)
  auto args = config.getArgs();
  if (args.size() == 0 || args[0].size() == 0) {
    return fail(kj::str("execute task has no program (args is empty)"));
  }
  kj::String program = kj::str(args[0]);
  auto mappings = config.getOutputs();
  if (mappings.size() != task.getOutputs().size()) {
    return fail(kj::str("execute task maps ", mappings.size(), " outputs but declares ",
                        task.getOutputs().size()));
  }
  auto kinds = spec.getOutputKinds();
  if (kinds.size() != mappings.size()) {
    return fail(kj::str("the assignment gives ", kinds.size(), " output kinds for ", mappings.size(),
                        " outputs"));
  }
  kj::Vector<StreamOutputSpec> streamOutputs;
  uint stdoutMappings = 0;
  for (auto mapping : mappings) {
    if (mapping.isStdout()) stdoutMappings++;
  }
  for (uint i = 0; i < kinds.size(); i++) {
    Id outputId = Id::from(task.getOutputs()[i]);
    if (kinds[i] == wire::ObjectKind::STREAM) {
      if (env.streams == nullptr) {
        return fail(kj::str("output ", outputId, " is a stream; this governor runs programs with blob "
                            "and dir outputs only"));
      }
      if (mappings[i].isStdout()) {
        if (stdoutMappings > 1) {
          return fail(kj::str("output ", outputId, " is a stream on the program's stdout, which no "
                              "other output may share"));
        }
        streamOutputs.add(StreamOutputSpec{i, outputId, nullptr});
      } else {
        auto path = mappings[i].getPath();
        KJ_IF_MAYBE(problem, relativePathProblem(path)) {
          return fail(kj::str("output path '", path, "' is not allowed: ", *problem));
        }
        auto parts = pathComponents(path);
        streamOutputs.add(StreamOutputSpec{i, outputId, joinPath(parts, parts.size())});
      }
    }
    if (kinds[i] == wire::ObjectKind::DIR && mappings[i].isStdout()) {
      return fail(kj::str("output ", outputId, " is a dir, so it cannot be the program's stdout"));
    }
  }
  auto inputs = task.getInputs();
  auto locations = spec.getInputs();
  int32_t stdinInput = config.getStdinInput();
  if (stdinInput < -1 || stdinInput >= static_cast<int32_t>(inputs.size())) {
    return fail(kj::str("stdinInput ", stdinInput, " is out of range (the task has ",
                        inputs.size(), " inputs)"));
  }
  kj::String sandbox = kj::str(env.tasksDir, "/", taskId.session, "-", taskId.n);
  // Output paths (normalised) the program writes, and the directories above them.
  kj::Vector<kj::String> outputPaths;
  kj::Vector<kj::String> outputDirs;
  // Named pipes to make in the sandbox (live inputs and stream outputs).
  kj::Vector<kj::String> fifos;
  bool wantsStdout = false;
  bool stdoutIsStream = false;
  for (uint i = 0; i < mappings.size(); i++) {
    auto mapping = mappings[i];
    if (mapping.isStdout()) {
      if (kinds[i] == wire::ObjectKind::STREAM) {
        stdoutIsStream = true;
      } else {
        wantsStdout = true;
      }
    } else {
      auto path = mapping.getPath();
      KJ_IF_MAYBE(problem, relativePathProblem(path)) {
        return fail(kj::str("output path '", path, "' is not allowed: ", *problem));
      }
      auto parts = pathComponents(path);
      outputPaths.add(joinPath(parts, parts.size()));
      if (kinds[i] == wire::ObjectKind::STREAM) fifos.add(joinPath(parts, parts.size()));
      parts.removeLast();
      if (parts.size() > 0) outputDirs.add(joinPath(parts, parts.size()));
    }
  }
  kj::Vector<SandboxInput> placements;
  kj::Vector<LiveInputSpec> liveInputs;
  // An input fed on stdin only is opened for the program, not placed.
  kj::Maybe<InputSource> stdinSource;
  kj::Maybe<kj::String> stdinPath;
  for (uint i = 0; i < inputs.size(); i++) {
    auto path = inputs[i].getPath();
    bool isStdin = static_cast<int32_t>(i) == stdinInput;
    Id inputId = Id::from(inputs[i].getObject());
    if (i < locations.size() && locations[i].getLive()) {
      // Read while its producer runs: a pipe on stdin, or a named pipe.
      auto checked = liveInputSpec(env.streams != nullptr, inputs[i], locations[i]);
      KJ_IF_MAYBE(problem, checked.tryGet<kj::String>()) { return fail(kj::mv(*problem)); }
      auto live = kj::mv(checked.get<LiveInputSpec>());
      if (!isStdin) {
        KJ_IF_MAYBE(problem, relativePathProblem(path)) {
          return fail(kj::str("input path '", path, "' is not allowed: ", *problem));
        }
        auto parts = pathComponents(path);
        live.fifo = joinPath(parts, parts.size());
        fifos.add(joinPath(parts, parts.size()));
      }
      liveInputs.add(kj::mv(live));
      continue;
    }
    if (path.size() > 0 || !isStdin) {
      KJ_IF_MAYBE(problem, relativePathProblem(path)) {
        return fail(kj::str("input path '", path, "' is not allowed: ", *problem));
      }
    }
    auto data = env.store.data(inputId);
    if (data == nullptr) {
      return fail(kj::str("input ", inputId, " is not held by governor ", env.governorName));
    }
    auto kind = KJ_ASSERT_NONNULL(env.store.find(inputId)).kind;
    if (isStdin && kind == wire::ObjectKind::DIR) {
      return fail(kj::str("input ", inputId, " is a dir, so it cannot be the program's stdin"));
    }
    InputSource source{inputId, kind, kj::mv(KJ_ASSERT_NONNULL(data)),
                       inputs[i].getWritable() ? InputPlacement::WRITABLE : InputPlacement::VIEW, nullptr};
    if (path.size() == 0) {
      stdinSource = kj::mv(source);
      continue;
    }
    auto parts = pathComponents(path);
    auto rel = joinPath(parts, parts.size());
    if (isStdin) stdinPath = kj::str(rel);
    placements.add(SandboxInput{kj::mv(rel), kj::mv(source)});
  }
  // The task's directory in the store, for blobs held in memory (mount mode).
  auto storeFiles = kj::str(env.store.directory(), "/.inputs-", taskId.session, "-", taskId.n);
  choosePlacements(placements, outputPaths, fifos, env.storeView, storeFiles, stdinSource);
  kj::Vector<kj::String> environment;
  {
    kj::Vector<kj::StringPtr> overridden;
    for (auto var : config.getEnv()) {
      auto name = var.getName();
      if (name.size() == 0 || name.findFirst('=') != nullptr) {
        return fail(kj::str("environment variable name '", name, "' is not allowed"));
      }
      overridden.add(name);
    }
    // Set by the governor: which run of the task this is (1 = the first),
    // and the resources it holds (a task cannot claim others').
    overridden.add("SQUALL_ATTEMPT");
    overridden.add(ProcessSets::MARK);
    kj::Vector<kj::String> resourceNames;
    for (auto& var : control.resourceEnv()) resourceNames.add(kj::str(var.substr(0, var.find('=')).c_str()));
    for (auto& name : resourceNames) overridden.add(name);
    for (auto& entry : env.baseEnv) {
      bool replaced = false;
      for (auto name : overridden) {
        if (entry.startsWith(name) && entry.size() > name.size() && entry[name.size()] == '=') {
          replaced = true;
        }
      }
      if (!replaced) environment.add(kj::str(entry));
    }
    for (auto var : config.getEnv()) {
      bool governorSets = var.getName() == "SQUALL_ATTEMPT" || var.getName() == ProcessSets::MARK;
      for (auto& name : resourceNames) governorSets = governorSets || var.getName() == name;
      if (!governorSets) environment.add(kj::str(var.getName(), "=", var.getValue()));
    }
    environment.add(kj::str("SQUALL_ATTEMPT=", kj::max(spec.getAttempt(), 1u)));
    for (auto& var : control.resourceEnv()) environment.add(kj::str(var.c_str()));
  }
  SpawnOptions options;
  if (config.getShell()) {
    options.file = kj::str("/bin/sh");
    options.args.add(kj::str("/bin/sh"));
    options.args.add(kj::str("-c"));
    // Further args become $0, $1, ... as with `sh -c`.
    for (auto a : args) options.args.add(kj::str(a));
  } else {
    options.file = kj::str(program);
    for (auto a : args) options.args.add(kj::str(a));
  }
  // Its processes, together: killed when it ends, wherever they went.
  kj::Maybe<kj::Own<ProcessSet>> processSet;
  KJ_IF_MAYBE(sets, env.processSets) {
    auto set = sets->open();
    environment.add(kj::str(set->environmentEntry()));
    processSet = kj::mv(set);
  }
  // Where a bare program name is looked for (named if it is not found).
  kj::String searchPath = kj::str(getenv("PATH") != nullptr ? getenv("PATH") : "");
  for (auto& entry : environment) {
    if (entry.startsWith("PATH=")) searchPath = kj::str(entry.slice(5));
  }
  options.env = kj::mv(environment);
  options.cwd = kj::str(sandbox);

  // --- prepare the sandbox off the loop
  auto placed = kj::atomicRefcounted<PlacedInputs>(
      env.storeView == nullptr ? kj::Maybe<kj::String>(nullptr) : kj::mv(storeFiles));
  auto prepare = env.bridge.runOnPool<kj::AutoCloseFd>(
      [sandbox = kj::str(sandbox), scratchDir = kj::str(env.tasksDir), placements = kj::mv(placements),
       outputDirs = kj::mv(outputDirs), fifos = kj::mv(fifos), stdinSource = kj::mv(stdinSource),
       stdinPath = kj::mv(stdinPath), placed = kj::atomicAddRef(*placed)]() mutable {
        removeTree(sandbox);
        makeDirs(sandbox);
        auto root = openDirectory(sandbox);
        // Placed one after another without following links: a dir input
        // holding a link cannot make a later input land outside.
        for (auto& p : placements) {
          auto parts = pathComponents(p.path);
          auto label = kj::str("input path '", p.path, "'");
          auto parent = openDirChain(root, parts, parts.size() - 1, true, label);
          placeInput(p.input, parent, parts.back(), label, *placed);
        }
        for (auto& dir : outputDirs) {
          auto parts = pathComponents(dir);
          openDirChain(root, parts, parts.size(), true, kj::str("output directory '", dir, "'"));
        }
        for (auto& fifo : fifos) {
          auto parts = pathComponents(fifo);
          auto label = kj::str("named pipe '", fifo, "'");
          auto parent = openDirChain(root, parts, parts.size() - 1, true, label);
          if (::mkfifoat(parent, parts.back().cStr(), 0644) < 0) {
            if (errno == EEXIST) SQUALL_FAIL("named pipe '", fifo, "' is already taken by an input");
            SQUALL_FAIL("cannot make the named pipe '", fifo, "': ", strerror(errno));
          }
        }
        KJ_IF_MAYBE(source, stdinSource) { return openStdinInput(*source, scratchDir); }
        KJ_IF_MAYBE(rel, stdinPath) {
          // What we placed there a moment ago (a link into the view is
          // followed: that is how the program would read it).
          auto parts = pathComponents(*rel);
          auto parent = openDirChain(root, parts, parts.size() - 1, false, kj::str("stdin '", *rel, "'"));
          int fd;
          KJ_SYSCALL(fd = ::openat(parent, parts.back().cStr(), O_RDONLY | O_CLOEXEC), *rel);
          return kj::AutoCloseFd(fd);
        }
        return openOrThrow("/dev/null", O_RDONLY);
      }).catch_([](kj::Exception&& e) -> kj::Promise<kj::AutoCloseFd> {
        return SQUALL_EXCEPTION(FAILED, "cannot prepare the task's sandbox: ", e.getDescription());
      });

  return prepare.then(
      [&env, &control, spec, taskId, sandbox = kj::str(sandbox), program = kj::mv(program),
       searchPath = kj::mv(searchPath), options = kj::mv(options), wantsStdout, stdoutIsStream,
       liveInputs = kj::mv(liveInputs),
       streamOutputs = kj::mv(streamOutputs), processSet = kj::mv(processSet),
       placed = kj::atomicAddRef(*placed)](kj::AutoCloseFd stdinFd) mutable -> kj::Promise<TaskOutcome> {
        if (control.isCancelled()) {
          return cleanUp(env, control, sandbox, kj::mv(placed), TaskOutcome::failure(taskId, kj::str("cancelled")));
        }
        kj::Own<StreamEnds> ends;
        KJ_IF_MAYBE(hub, env.streams) {
          ends = openStreamEnds(*hub, sandbox, taskId, liveInputs, streamOutputs);
        } else {
          ends = kj::heap<StreamEnds>();
        }
        // Outside the sandbox and nameless: read back through these
        // descriptors after the exit, whatever the program did meanwhile.
        // (A short metadata call on the loop.)
        kj::Own<const SharedFd> stdoutFd = kj::atomicRefcounted<SharedFd>(openAnonymousFile(env.tasksDir));
        kj::Own<const SharedFd> stderrFd = kj::atomicRefcounted<SharedFd>(openAnonymousFile(env.tasksDir));
        // A live input without a named pipe is stdin, a stream output
        // without one stdout: at most one each.
        options.stdinFd = ends->taskInputEnds.size() > 0 ? ends->taskInputEnds[0].get() : stdinFd.get();
        options.stdoutFd = stdoutIsStream ? ends->taskOutputEnds[0].get() : stdoutFd->fd.get();
        options.stderrFd = stderrFd->fd;
        auto spawned = ChildProcess::spawn(env.bridge, options);
        // The program holds its ends now: ours would keep a pipe from
        // ending (stdout) or from breaking (stdin).
        ends->taskInputEnds.clear();
        ends->taskOutputEnds.clear();
        stdinFd = nullptr;
        if (spawned.is<int>()) {
          auto error = spawnError(program, spawned.get<int>(), env.governorName, searchPath);
          ends->producerExited(kj::StringPtr(kj::str("could not start: ", error)));
          return cleanUp(env, control, sandbox, kj::mv(placed), TaskOutcome::failure(taskId, kj::mv(error)));
        }
        auto child = kj::mv(spawned.get<kj::Own<ChildProcess>>());
        env.logger.debug("event=task-spawned task={} pid={}", kj::str(taskId).cStr(), child->pid());
        KJ_IF_MAYBE(set, processSet) { (*set)->adopt(child->pid()); }
        control.setProcess(*child);
        ends->watchInputs([&process = *child]() { process.killGroup(SIGKILL); });
        auto exited = child->onExit();
        // The set goes right after the child: its group is killed at its
        // exit, then whatever left the group.
        return exited.attach(kj::mv(child), kj::mv(processSet))
            .attach(kj::defer([&control]() { control.setProcess(nullptr); }))
            .then([&env, &control, spec, taskId, sandbox = kj::mv(sandbox), program = kj::mv(program),
                   stdoutFd = kj::mv(stdoutFd), stderrFd = kj::mv(stderrFd), wantsStdout,
                   ends = kj::mv(ends), placed = kj::mv(placed)](ProcessExit exit) mutable {
              control.setProcess(nullptr);
              auto inputsSettled = ends->settleInputs().exclusiveJoin(control.whenCancelled());
              return inputsSettled.then([&env, &control, spec, taskId, sandbox = kj::mv(sandbox),
                                         program = kj::mv(program), stdoutFd = kj::mv(stdoutFd),
                                         stderrFd = kj::mv(stderrFd), wantsStdout,
                                         ends = kj::mv(ends), placed = kj::mv(placed), exit]() mutable {
                return harvestAndReport(env, control, spec, taskId, kj::mv(sandbox), kj::mv(program),
                                        kj::mv(stdoutFd), kj::mv(stderrFd), wantsStdout, kj::mv(ends),
                                        kj::mv(placed), exit);
              });
            });
      })
      .catch_([&env, &control, taskId, sandbox = kj::str(sandbox),
               placed = kj::mv(placed)](kj::Exception&& e) mutable {
        return cleanUp(env, control, sandbox, kj::mv(placed),
                       TaskOutcome::failure(taskId, kj::str(e.getDescription())));
      });
}

}  // namespace squall
