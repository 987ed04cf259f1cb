// Child processes for KJ code, started with posix_spawn and watched through
// a pidfd polled by libuv. Loop thread only.
//
// Why not uv_spawn: libuv 1.44 starts every child with fork(), whose cost
// grows with the governor's page tables; measured here it was most of the
// governor's cpu time per `true` task (perf: page-table copies under fork).
// glibc's posix_spawn uses CLONE_VM|CLONE_VFORK and copies nothing. The
// child is still owned by the one libuv loop: its exit is a uv_poll event on
// the pidfd, and we reap exactly our own pid (libuv reaps only the children
// it spawned itself, and it spawns none here).
#include "child-process.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern "C" {  // glibc 2.36 forgot the C linkage markers in this header
#include <sys/pidfd.h>
}

namespace squall {

struct ChildProcess::Box {
  uv_poll_t handle;
  int pid = -1;
  int pidfd = -1;
  ChildProcess* owner = nullptr;
  bool exited = false;
};

kj::String signalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev == nullptr) return kj::str("signal ", signal);
  return kj::str("SIG", abbrev);
}

namespace {

// Resolves `file` the way execvp would, but with the PATH of the child's
// environment. Returns 0 and sets `resolved`, or a negative errno.
int resolveProgram(const SpawnOptions& options, kj::String& resolved) {
  kj::StringPtr file = options.file;
  if (file.findFirst('/') != nullptr) {
    resolved = kj::str(file);
    return 0;
  }
  kj::StringPtr path = "/usr/local/bin:/usr/bin:/bin";
  for (auto& entry : options.env) {
    if (entry.startsWith("PATH=")) path = entry.slice(5);
  }
  int firstError = -ENOENT;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = start;
    while (end < path.size() && path[end] != ':') end++;
    auto dir = start == end ? kj::str(".") : kj::heapString(path.slice(start, end));
    auto candidate = kj::str(dir, "/", file);
    struct stat st;
    if (::stat(candidate.cStr(), &st) == 0 && S_ISREG(st.st_mode)) {
      if (::access(candidate.cStr(), X_OK) == 0) {
        resolved = kj::mv(candidate);
        return 0;
      }
      firstError = -EACCES;
    }
    start = end + 1;
  }
  return firstError;
}

}  // namespace

ChildProcess::ChildProcess(Box* box) : box(box), childPid(box->pid) {
  auto paf = kj::newPromiseAndFulfiller<ProcessExit>();
  exitFulfiller = kj::mv(paf.fulfiller);
  exitPromise = kj::mv(paf.promise);
}

ChildProcess::~ChildProcess() noexcept(false) {
  if (box != nullptr) {
    box->owner = nullptr;
    if (!box->exited) ::kill(-childPid, SIGKILL);
  }
}

kj::OneOf<kj::Own<ChildProcess>, int> ChildProcess::spawn(UvBridge& bridge,
                                                          const SpawnOptions& options) {
  KJ_REQUIRE(options.args.size() > 0, "a process needs argv[0]");
  int fds[3] = {options.stdinFd, options.stdoutFd, options.stderrFd};
  for (int i = 0; i < 3; i++) KJ_REQUIRE(fds[i] >= 0, "every stdio descriptor must be given", i);

  kj::String program;
  if (int rc = resolveProgram(options, program); rc < 0) return rc;
  kj::Vector<char*> argv;
  for (auto& a : options.args) argv.add(const_cast<char*>(a.cStr()));
  argv.add(nullptr);
  kj::Vector<char*> envp;
  for (auto& e : options.env) envp.add(const_cast<char*>(e.cStr()));
  envp.add(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  KJ_DEFER(posix_spawn_file_actions_destroy(&actions));
  for (int i = 0; i < 3; i++) posix_spawn_file_actions_adddup2(&actions, fds[i], i);
  posix_spawn_file_actions_addchdir_np(&actions, options.cwd.cStr());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  KJ_DEFER(posix_spawnattr_destroy(&attr));
  sigset_t all, none;
  sigfillset(&all);
  sigemptyset(&none);
  // Every signal at its default (the governor ignores SIGPIPE; programs must
  // not inherit that), nothing blocked, and a session (so a process group)
  // of its own so cancel can kill everything it starts.
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

  pid_t pid;
  int rc = posix_spawn(&pid, program.cStr(), &actions, &attr, argv.begin(), envp.begin());
  if (rc != 0) return -rc;

  int pidfd = pidfd_open(pid, 0);
  if (pidfd < 0) {
    int error = errno;
    ::kill(-pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return -error;
  }
  auto* box = new Box();
  box->pid = pid;
  box->pidfd = pidfd;
  box->handle.data = box;
  SQUALL_UV_CHECK(uv_poll_init(bridge.loop(), &box->handle, pidfd));
  SQUALL_UV_CHECK(uv_poll_start(&box->handle, UV_READABLE, &ChildProcess::onPidfdReadable));
  auto child = kj::Own<ChildProcess>(new ChildProcess(box), kj::_::HeapDisposer<ChildProcess>::instance);
  box->owner = child.get();
  // libuv registers the new poll handle only inside uv_run.
  bridge.wake();
  return kj::mv(child);
}

kj::Promise<ProcessExit> ChildProcess::onExit() {
  KJ_IF_MAYBE(p, exitPromise) {
    auto result = kj::mv(*p);
    exitPromise = nullptr;
    return kj::mv(result);
  }
  KJ_FAIL_REQUIRE("onExit() may be called only once");
}

void ChildProcess::killGroup(int signal) {
  if (exit != nullptr) return;
  if (::kill(-childPid, signal) < 0 && errno != ESRCH) {
    KJ_FAIL_SYSCALL("kill(-pid)", errno, childPid, signal);
  }
}

void ChildProcess::onPidfdReadable(uv_poll_t* handle, int, int) {
  auto* box = static_cast<Box*>(handle->data);
  int status = 0;
  pid_t reaped = ::waitpid(box->pid, &status, WNOHANG);
  if (reaped == 0) return;  // not yet (spurious wake-up)
  box->exited = true;
  // The leader is reaped; whatever it left running in its group goes too, so
  // a task never leaks background processes.
  ::kill(-box->pid, SIGKILL);
  if (auto* owner = box->owner) {
    ProcessExit result;
    if (reaped < 0) {
      result.exitStatus = -1;  // cannot happen for our own child; be safe
    } else if (WIFSIGNALED(status)) {
      result.termSignal = WTERMSIG(status);
    } else {
      result.exitStatus = WEXITSTATUS(status);
    }
    owner->exit = result;
    owner->exitFulfiller->fulfill(kj::mv(result));
    owner->box = nullptr;
  }
  uv_poll_stop(handle);
  uv_close(reinterpret_cast<uv_handle_t*>(handle), deleteBox);
}

kj::Vector<int> ChildProcess::unreapedPids(UvBridge& bridge) {
  kj::Vector<int> pids;
  uv_walk(
      bridge.loop(),
      [](uv_handle_t* handle, void* arg) {
        // Poll handles are children's pidfds (see closeAtTeardown).
        if (handle->type != UV_POLL) return;
        auto* box = static_cast<Box*>(handle->data);
        if (!box->exited) static_cast<kj::Vector<int>*>(arg)->add(box->pid);
      },
      &pids);
  return pids;
}

void ChildProcess::closeAtTeardown(uv_poll_t* handle) {
  auto* box = static_cast<Box*>(handle->data);
  if (!box->exited) {
    ::kill(-box->pid, SIGKILL);
    ::waitpid(box->pid, nullptr, 0);
    box->exited = true;
  }
  if (auto* owner = box->owner) {
    owner->box = nullptr;
    owner->exitFulfiller->reject(SQUALL_EXCEPTION(DISCONNECTED, "governor shutting down"));
  }
  uv_close(reinterpret_cast<uv_handle_t*>(handle), deleteBox);
}

void ChildProcess::deleteBox(uv_handle_t* handle) {
  auto* box = static_cast<Box*>(handle->data);
  if (box->pidfd >= 0) ::close(box->pidfd);
  delete box;
}

}  // namespace squall
