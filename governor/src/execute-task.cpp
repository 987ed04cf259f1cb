// The `execute` task: runs a program in a per-task sandbox directory
// <tasksDir>/<session>-<n>/ with its inputs placed read-only at their paths,
// takes its outputs into the store and removes the sandbox. Loop thread
// only; sandbox file work runs on the libuv pool.
#include "task-env.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {

constexpr size_t STDERR_TAIL_BYTES = 4096;
constexpr const char* STDOUT_FILE = ".squall-stdout";
constexpr const char* STDERR_FILE = ".squall-stderr";
constexpr const char* STDIN_FILE = ".squall-stdin";

struct Placement {
  kj::String dest;  // absolute path in the sandbox
  ObjectData data;
};

// What the program produced, gathered off the loop after it exits.
struct Harvest {
  kj::String stderrTail;
  kj::Maybe<kj::String> error;
  kj::Vector<HashedSize> outputs;
};

kj::String parentOf(kj::StringPtr path) {
  KJ_IF_MAYBE(slash, path.findLast('/')) { return kj::heapString(path.slice(0, *slash)); }
  return kj::str(".");
}

kj::String trimTrailingNewlines(kj::StringPtr text) {
  size_t end = text.size();
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == '\r')) end--;
  return kj::heapString(text.slice(0, end));
}

kj::String spawnError(kj::StringPtr program, int code) {
  switch (code) {
    case UV_ENOENT: return kj::str("program '", program, "' not found");
    case UV_EACCES:
      return kj::str("program '", program, "' is not executable (permission denied)");
    default: return kj::str("cannot start program '", program, "': ", uvErrorText(code));
  }
}

kj::AutoCloseFd openForChild(kj::StringPtr path, int flags) {
  return openOrThrow(path, flags, 0644);
}

// Removes the sandbox, then resolves with `outcome`.
kj::Promise<TaskOutcome> cleanUp(TaskEnv& env, kj::StringPtr sandbox, TaskOutcome outcome) {
  return env.bridge.runOnPool<void>([sandbox = kj::str(sandbox)]() { removeTree(sandbox); })
      .catch_([&env, sandbox = kj::str(sandbox)](kj::Exception&& e) {
        env.logger.warn("event=sandbox-remove-failed path={} error=\"{}\"", sandbox.cStr(),
                        e.getDescription().cStr());
      })
      .then([outcome = kj::mv(outcome)]() mutable { return kj::mv(outcome); });
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
  for (uint i = 0; i < kinds.size(); i++) {
    if (kinds[i] != wire::ObjectKind::BLOB) {
      return fail(kj::str("output ", Id::from(task.getOutputs()[i]),
                          " is not a blob; only blob outputs are supported by this governor"));
    }
  }
  auto inputs = task.getInputs();
  int32_t stdinInput = config.getStdinInput();
  if (stdinInput < -1 || stdinInput >= static_cast<int32_t>(inputs.size())) {
    return fail(kj::str("stdinInput ", stdinInput, " is out of range (the task has ",
                        inputs.size(), " inputs)"));
  }
  kj::String sandbox = kj::str(env.tasksDir, "/", taskId.session, "-", taskId.n);
  kj::Vector<Placement> placements;
  kj::String stdinPath = kj::str("/dev/null");
  for (uint i = 0; i < inputs.size(); i++) {
    auto path = inputs[i].getPath();
    bool isStdin = static_cast<int32_t>(i) == stdinInput;
    kj::String dest;
    if (path.size() == 0 && isStdin) {
      // A stdin-only input needs no name in the sandbox.
      dest = kj::str(sandbox, "/", STDIN_FILE);
    } else if (!isSafeRelativePath(path)) {
      return fail(kj::str("input path '", path,
                          "' is not allowed: it must be a non-empty relative path without '..'"));
    } else {
      dest = kj::str(sandbox, "/", path);
    }
    Id inputId = Id::from(inputs[i].getObject());
    KJ_IF_MAYBE(data, env.store.data(inputId)) {
      if (isStdin) stdinPath = kj::str(dest);
      placements.add(Placement{kj::mv(dest), kj::mv(*data)});
    } else {
      return fail(kj::str("input ", inputId, " is not held by governor ", env.governorName));
    }
  }
  kj::Vector<kj::String> outputDirs;
  bool wantsStdout = false;
  for (auto mapping : mappings) {
    if (mapping.isStdout()) {
      wantsStdout = true;
    } else {
      auto path = mapping.getPath();
      if (!isSafeRelativePath(path)) {
        return fail(kj::str("output path '", path,
                            "' is not allowed: it must be a non-empty relative path without '..'"));
      }
      outputDirs.add(parentOf(kj::str(sandbox, "/", path)));
    }
  }
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
    for (auto& entry : env.baseEnv) {
      bool replaced = false;
      for (auto name : overridden) {
        if (entry.startsWith(name) && entry.size() > name.size() && entry[name.size()] == '=') {
          replaced = true;
        }
      }
      if (!replaced) environment.add(kj::str(entry));
    }
    for (auto var : config.getEnv()) environment.add(kj::str(var.getName(), "=", var.getValue()));
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
  options.env = kj::mv(environment);
  options.cwd = kj::str(sandbox);

  // --- prepare the sandbox off the loop
  auto prepare = env.bridge.runOnPool<void>(
      [sandbox = kj::str(sandbox), placements = kj::mv(placements), outputDirs = kj::mv(outputDirs)]() {
        removeTree(sandbox);
        makeDirs(sandbox);
        for (auto& p : placements) {
          makeDirs(parentOf(p.dest));
          KJ_SWITCH_ONEOF(p.data) {
            KJ_CASE_ONEOF(blob, kj::Own<const Blob>) { writeFile(p.dest, blob->bytes, 0444); }
            KJ_CASE_ONEOF(file, kj::String) {
              // A hard link shares the store's read-only inode; a copy is made
              // read-only here.
              linkOrCopy(file, p.dest);
              KJ_SYSCALL(::chmod(p.dest.cStr(), 0444), p.dest);
            }
          }
        }
        for (auto& dir : outputDirs) makeDirs(dir);
      }).catch_([](kj::Exception&& e) -> kj::Promise<void> {
        return SQUALL_EXCEPTION(FAILED, "cannot prepare the task's sandbox: ", e.getDescription());
      });

  return prepare.then(
      [&env, &control, spec, taskId, sandbox = kj::str(sandbox), program = kj::mv(program),
       options = kj::mv(options), stdinPath = kj::mv(stdinPath),
       wantsStdout]() mutable -> kj::Promise<TaskOutcome> {
        if (control.isCancelled()) {
          return cleanUp(env, sandbox, TaskOutcome::failure(taskId, kj::str("cancelled")));
        }
        // Opening files in our own fresh directory is a short metadata call.
        auto stdinFd = openForChild(stdinPath, O_RDONLY);
        auto stdoutFd = wantsStdout ? openForChild(kj::str(sandbox, "/", STDOUT_FILE),
                                                   O_WRONLY | O_CREAT | O_TRUNC)
                                    : openForChild("/dev/null", O_WRONLY);
        auto stderrFd = openForChild(kj::str(sandbox, "/", STDERR_FILE), O_WRONLY | O_CREAT | O_TRUNC);
        options.stdinFd = stdinFd;
        options.stdoutFd = stdoutFd;
        options.stderrFd = stderrFd;
        auto spawned = ChildProcess::spawn(env.bridge, options);
        if (spawned.is<int>()) {
          return cleanUp(env, sandbox,
                         TaskOutcome::failure(taskId, spawnError(program, spawned.get<int>())));
        }
        auto child = kj::mv(spawned.get<kj::Own<ChildProcess>>());
        env.logger.debug("event=task-spawned task={} pid={}", kj::str(taskId).cStr(), child->pid());
        control.setProcess(*child);
        auto exited = child->onExit();
        return exited.attach(kj::mv(child))
            .attach(kj::defer([&control]() { control.setProcess(nullptr); }))
            .then([&env, &control, spec, taskId, sandbox = kj::mv(sandbox),
                   program = kj::mv(program)](ProcessExit exit) mutable {
              control.setProcess(nullptr);
              bool success = exit.termSignal == 0 && exit.exitStatus == 0 && !control.isCancelled();
              auto task = spec.getTask();
              auto mappings = task.getConfig().getExecute().getOutputs();
              // Where each output goes before it is adopted; deleted if we
              // are dropped before that.
              kj::Vector<TempFile> temps;
              kj::Vector<kj::String> tempPaths;
              kj::Vector<kj::Maybe<kj::String>> sources;  // nullptr = stdout
              if (success) {
                for (auto mapping : mappings) {
                  temps.add(TempFile(env.store.newTempPath()));
                  tempPaths.add(kj::str(temps.back().path()));
                  if (mapping.isStdout()) {
                    sources.add(nullptr);
                  } else {
                    sources.add(kj::str(mapping.getPath()));
                  }
                }
              }
              auto harvest = env.bridge.runOnPool<Harvest>(
                  [sandbox = kj::str(sandbox), success, tempPaths = kj::mv(tempPaths),
                   sources = kj::mv(sources)]() {
                    Harvest h;
                    h.stderrTail = readTail(kj::str(sandbox, "/", STDERR_FILE), STDERR_TAIL_BYTES);
                    kj::Maybe<size_t> firstStdout;
                    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                    for (size_t i = 0; success && i < sources.size() && h.error == nullptr; i++) {
                      KJ_IF_MAYBE(rel, sources[i]) {
                        auto from = kj::str(sandbox, "/", *rel);
                        struct stat st;
                        if (::lstat(from.cStr(), &st) < 0) {
                          if (errno == ENOENT || errno == ENOTDIR) {
                            h.error = kj::str("output file '", *rel, "' was not created");
                          } else {
                            h.error = kj::str("cannot read output file '", *rel, "': ", strerror(errno));
                          }
                          break;
                        }
                        if (!S_ISREG(st.st_mode)) {
                          h.error = kj::str("output '", *rel, "' is not a regular file",
                                            S_ISDIR(st.st_mode) ? " (directory outputs are not supported yet)" : "");
                          break;
                        }
                        h.outputs.add(hashFile(from));
                        KJ_SYSCALL(::rename(from.cStr(), tempPaths[i].cStr()), from);
                      } else KJ_IF_MAYBE(first, firstStdout) {
                        h.outputs.add(h.outputs[*first]);
                        linkOrCopy(tempPaths[*first], tempPaths[i]);
                      } else {
                        auto from = kj::str(sandbox, "/", STDOUT_FILE);
                        h.outputs.add(hashFile(from));
                        KJ_SYSCALL(::rename(from.cStr(), tempPaths[i].cStr()), from);
                        firstStdout = i;
                      }
                    }
                    })) {
                      h.error = kj::str("cannot take the program's outputs: ", e->getDescription());
                    }
                    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { removeTree(sandbox); })) {
                      KJ_LOG(WARNING, "cannot remove sandbox", sandbox, e->getDescription());
                    }
                    return h;
                  });
              return harvest.then([&env, &control, spec, taskId, exit, program = kj::mv(program),
                                   temps = kj::mv(temps)](Harvest h) mutable {
                TaskOutcome outcome;
                outcome.id = taskId;
                outcome.stderrTail = kj::mv(h.stderrTail);
                outcome.exitStatus = exit.termSignal == 0 ? static_cast<int32_t>(exit.exitStatus) : -1;
                outcome.signal = exit.termSignal;
                if (control.isCancelled()) {
                  outcome.error = kj::str("cancelled");
                } else if (exit.termSignal != 0) {
                  outcome.error = kj::str("program '", program, "' was killed by signal ",
                                          exit.termSignal, " (", signalName(exit.termSignal), ")");
                } else if (exit.exitStatus != 0) {
                  auto tail = trimTrailingNewlines(outcome.stderrTail);
                  outcome.error = tail.size() == 0
                      ? kj::str("program '", program, "' exited with status ", exit.exitStatus)
                      : kj::str("program '", program, "' exited with status ", exit.exitStatus,
                                "; stderr:\n", tail);
                } else KJ_IF_MAYBE(error, h.error) {
                  outcome.error = kj::mv(*error);
                } else {
                  auto task = spec.getTask();
                  for (size_t i = 0; i < temps.size(); i++) {
                    Id outputId = Id::from(task.getOutputs()[i]);
                    auto meta = env.store.adoptFile(outputId, wire::ObjectKind::BLOB, temps[i].release(),
                                                    h.outputs[i]);
                    outcome.outputs.add(OutputInfo{outputId, meta.size, meta.hash});
                  }
                  outcome.ok = true;
                }
                return outcome;
              });
            });
      })
      .catch_([&env, taskId, sandbox = kj::str(sandbox)](kj::Exception&& e) {
        return cleanUp(env, sandbox, TaskOutcome::failure(taskId, kj::str(e.getDescription())));
      });
}

}  // namespace squall
