// libuv process handles wrapped for KJ code. Loop thread only.
#include "child-process.h"

#include <cerrno>
#include <csignal>
#include <cstring>

namespace squall {

struct ChildProcess::Box {
  uv_process_t handle;
  ChildProcess* owner = nullptr;
  bool exited = false;
};

kj::String signalName(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  if (abbrev == nullptr) return kj::str("signal ", signal);
  return kj::str("SIG", abbrev);
}

ChildProcess::ChildProcess(Box* box) : box(box), childPid(box->handle.pid) {
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
  kj::Vector<char*> argv;
  for (auto& a : options.args) argv.add(const_cast<char*>(a.cStr()));
  argv.add(nullptr);
  kj::Vector<char*> envp;
  for (auto& e : options.env) envp.add(const_cast<char*>(e.cStr()));
  envp.add(nullptr);

  uv_stdio_container_t stdio[3];
  int fds[3] = {options.stdinFd, options.stdoutFd, options.stderrFd};
  for (int i = 0; i < 3; i++) {
    KJ_REQUIRE(fds[i] >= 0, "every stdio descriptor must be given", i);
    stdio[i].flags = UV_INHERIT_FD;
    stdio[i].data.fd = fds[i];
  }

  uv_process_options_t uvOptions;
  memset(&uvOptions, 0, sizeof(uvOptions));
  uvOptions.exit_cb = &ChildProcess::onExitCallback;
  uvOptions.file = options.file.cStr();
  uvOptions.args = argv.begin();
  uvOptions.env = envp.begin();
  uvOptions.cwd = options.cwd.cStr();
  uvOptions.flags = UV_PROCESS_DETACHED;  // setsid(): own session and process group
  uvOptions.stdio_count = 3;
  uvOptions.stdio = stdio;

  auto* box = new Box();
  box->handle.data = box;
  int rc = uv_spawn(bridge.loop(), &box->handle, &uvOptions);
  if (rc < 0) {
    // A failed spawn still leaves a handle to close.
    box->exited = true;
    uv_close(reinterpret_cast<uv_handle_t*>(&box->handle), deleteBox);
    bridge.wake();
    return rc;
  }
  auto child = kj::Own<ChildProcess>(new ChildProcess(box), kj::_::HeapDisposer<ChildProcess>::instance);
  box->owner = child.get();
  // libuv starts watching SIGCHLD only inside uv_run.
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

void ChildProcess::onExitCallback(uv_process_t* handle, int64_t exitStatus, int termSignal) {
  auto* box = static_cast<Box*>(handle->data);
  box->exited = true;
  // The leader is reaped; whatever it left running in its group goes too, so
  // a task never leaks background processes.
  ::kill(-handle->pid, SIGKILL);
  if (auto* owner = box->owner) {
    ProcessExit result{exitStatus, termSignal};
    owner->exit = result;
    owner->exitFulfiller->fulfill(kj::mv(result));
    owner->box = nullptr;
  }
  uv_close(reinterpret_cast<uv_handle_t*>(handle), deleteBox);
}

void ChildProcess::closeAtTeardown(uv_process_t* handle) {
  auto* box = static_cast<Box*>(handle->data);
  if (!box->exited) ::kill(-handle->pid, SIGKILL);
  if (auto* owner = box->owner) {
    owner->box = nullptr;
    owner->exitFulfiller->reject(SQUALL_EXCEPTION(DISCONNECTED, "governor shutting down"));
  }
  uv_close(reinterpret_cast<uv_handle_t*>(handle), deleteBox);
}

void ChildProcess::deleteBox(uv_handle_t* handle) { delete static_cast<Box*>(handle->data); }

}  // namespace squall
