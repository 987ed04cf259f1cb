// Warm executor processes (tasklib, docs/tasklib.md): the programs declared
// with --executor NAME=PROGRAM. Each is started once when the governor
// starts, to learn its functions (an executor that cannot start or describe
// itself stops the governor with an error naming it); that process stays
// warm for the first call. Calls run one at a time per process; a call that
// finds no idle process of its executor starts another, so an executor has
// at most as many processes as calls of it run at once, which the task
// queue bounds by the governor's cpus. Idle processes stay until the
// governor stops. A process that dies (a crash, or killed by a cancel or a
// time limit) is dropped; the next call starts a fresh one. Processes speak
// the protocol of proto/executor.capnp over a socketpair that is their
// standard input; their standard output and error are the governor's
// standard error. Loop thread only.
#pragma once

#include "child-process.h"
#include "uv-bridge.h"

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/vector.h>
#include <spdlog/logger.h>
#include <squall/wire/executor.capnp.h>

namespace squall {

struct ExecutorDecl {
  kj::String name;
  kj::String program;
};

// "NAME=PROGRAM" as --executor takes it; nullptr and `error` set when bad.
kj::Maybe<ExecutorDecl> parseExecutorDecl(kj::StringPtr text, kj::String& error);

class ExecutorPool {
 public:
  struct Function {
    kj::String name;
    kj::Vector<kj::String> outputs;
    bool named = false;
  };
  struct Known {
    kj::String name;
    kj::String program;
    kj::Vector<Function> functions;
  };

  // Processes get `env` (NAME=VALUE) and start in `cwd`.
  ExecutorPool(UvBridge& bridge, kj::Timer& timer, kj::LowLevelAsyncIoProvider& io, spdlog::logger& logger,
               kj::Vector<kj::String> env, kj::String cwd);
  ~ExecutorPool() noexcept(false);
  KJ_DISALLOW_COPY(ExecutorPool);

  // Starts each declared executor and learns its functions. Rejects naming
  // the executor and why when one cannot start or answer.
  kj::Promise<void> start(kj::Vector<ExecutorDecl> decls);

  const kj::Vector<Known>& executors() const { return known; }
  kj::Maybe<const Function&> find(kj::StringPtr executor, kj::StringPtr function) const;

  class Worker;
  // One process, lent to one call.
  class Lease {
   public:
    Lease(ExecutorPool& pool, kj::Own<Worker> worker);
    // Destroyed without release(): the process is killed (its call did not
    // end well, or was cancelled) and dropped.
    ~Lease() noexcept(false);
    KJ_DISALLOW_COPY(Lease);
    wire::Executor::Client& executor();
    ChildProcess& process();
    // The call ended well: the process goes back to the idle ones.
    void release();
    // Why the process is gone, once it has gone ("exited with status 3",
    // "was killed by SIGSEGV"); nullptr while it runs. Waits up to `wait`
    // for its exit to be seen.
    kj::Promise<kj::Maybe<kj::String>> deathReason(kj::Duration wait);

   private:
    ExecutorPool& pool;
    kj::Maybe<kj::Own<Worker>> worker;
  };

  // A process of `executor` for one call: an idle one, or a new one.
  kj::Promise<kj::Own<Lease>> acquire(kj::StringPtr executor);

  // At the governor's end, after the tasks: idle processes see their
  // socket close and exit by themselves (their destructors run); resolves
  // once they have, or after a few seconds (then they are killed).
  kj::Promise<void> shutdown();

  // Processes alive (tests).
  size_t processCount() const { return alive; }
  size_t idleCount() const { return idle.size(); }

 private:
  UvBridge& bridge;
  kj::Timer& timer;
  kj::LowLevelAsyncIoProvider& io;
  spdlog::logger& logger;
  kj::Vector<kj::String> env;
  kj::String cwd;
  kj::Vector<Known> known;
  kj::Vector<kj::Own<Worker>> idle;
  size_t alive = 0;

  kj::Maybe<const Known&> findExecutor(kj::StringPtr name) const;
  // A fresh process of `executor` running `program`; throws naming it.
  kj::Own<Worker> spawn(kj::StringPtr executor, kj::StringPtr program);
  void giveBack(kj::Own<Worker> worker);

};

}  // namespace squall
