// One child process started through libuv, in its own session and process
// group so that it and everything it starts can be killed together.
// Loop thread only.
#pragma once

#include "uv-bridge.h"

#include <kj/one-of.h>
#include <kj/string.h>
#include <kj/vector.h>

namespace squall {

struct ProcessExit {
  int64_t exitStatus = 0;
  // Non-zero when killed by a signal.
  int termSignal = 0;
};

struct SpawnOptions {
  kj::String file;
  // argv, argv[0] included.
  kj::Vector<kj::String> args;
  // The complete environment, NAME=VALUE.
  kj::Vector<kj::String> env;
  kj::String cwd;
  // Descriptors the child gets as 0, 1 and 2; the caller keeps ownership.
  int stdinFd = -1;
  int stdoutFd = -1;
  int stderrFd = -1;
};

class ChildProcess {
 public:
  // The started child, or the libuv error (negative errno) when it could not
  // be started (missing program, not executable, ...): an expected outcome.
  static kj::OneOf<kj::Own<ChildProcess>, int> spawn(UvBridge& bridge, const SpawnOptions& options);

  // Killing the process group with SIGKILL if the child still runs; the
  // libuv handle then closes itself once the exit is seen.
  ~ChildProcess() noexcept(false);
  KJ_DISALLOW_COPY(ChildProcess);

  int pid() const { return childPid; }
  bool hasExited() const { return exit != nullptr; }

  // Resolves when the child exits. Once.
  kj::Promise<ProcessExit> onExit();

  // Sends `signal` to the child's process group (no-op once it has exited).
  void killGroup(int signal);

  // For UvBridge teardown: kills the group of a still-running child and
  // closes its handle.
  static void closeAtTeardown(uv_process_t* handle);

 private:
  struct Box;
  explicit ChildProcess(Box* box);

  Box* box;  // owned by libuv until its close callback; nulls `owner` on us
  int childPid;
  kj::Maybe<ProcessExit> exit;
  kj::Own<kj::PromiseFulfiller<ProcessExit>> exitFulfiller;
  kj::Maybe<kj::Promise<ProcessExit>> exitPromise;

  static void onExitCallback(uv_process_t* handle, int64_t exitStatus, int termSignal);
  static void deleteBox(uv_handle_t* handle);
};

// "SIGKILL" for 9; "signal 77" when unknown.
kj::String signalName(int signal);

}  // namespace squall
