// One child process, in its own session and process group so that it and
// everything it starts can be killed together; its exit is an event of the
// governor's libuv loop. Loop thread only.
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
  // The started child, or a negative errno (as libuv's UV_E* codes) when it
  // could not be started (missing program, not executable, ...): an
  // expected outcome. The program is looked up in the PATH of options.env.
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

  // The pids of the children started through `bridge` that are not reaped
  // yet (a zombie whose exit the loop has not seen is among them).
  static kj::Vector<int> unreapedPids(UvBridge& bridge);

  // For UvBridge teardown: kills the group of a still-running child and
  // closes its handle. The governor's only uv_poll handles are children's.
  static void closeAtTeardown(uv_poll_t* handle);

 private:
  struct Box;
  explicit ChildProcess(Box* box);

  Box* box;  // owned by libuv until its close callback; nulls `owner` on us
  int childPid;
  kj::Maybe<ProcessExit> exit;
  kj::Own<kj::PromiseFulfiller<ProcessExit>> exitFulfiller;
  kj::Maybe<kj::Promise<ProcessExit>> exitPromise;

  static void onPidfdReadable(uv_poll_t* handle, int status, int events);
  static void deleteBox(uv_handle_t* handle);
};

// "SIGKILL" for 9; "signal 77" when unknown.
kj::String signalName(int signal);

}  // namespace squall
