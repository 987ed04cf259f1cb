// Warm executor processes (tasklib, docs/tasklib.md): the programs declared
// with --executor NAME=PROGRAM. Each is started once when the governor
// starts, to learn its functions (an executor that cannot start or describe
// itself stops the governor with an error naming it); that process stays
// warm for the first call. Processes speak the protocol of
// proto/executor.capnp over a socketpair that is their standard input;
// their standard output and error are pipes the governor reads for the
// call each runs (process-output.h), or, without printTo(), the
// governor's standard error. Loop thread only.
//
// A call takes an idle process of its executor, or starts another one, and
// hands it the resources it was granted (its cpus): the process holds them
// until it has no call left. So an executor has at most as many busy
// processes as the governor's cpus allow; idle ones stay until the governor
// stops. A process that dies (a crash, or killed by a cancel or a time
// limit) is dropped; the next call starts a fresh one.
//
// Calls queued on a busy process. A call of a *short* function (its recent
// calls ran at most SHORT_CALL on average, as the executor times them)
// may join a busy process whose calls are all short, when the governor has
// no cpus free for it: the executor runs it as soon as the call before it
// answers, without the wake-up a call sent to an idle process costs (two
// cross-core wake-ups, ~50 us on these VMs: docs/benchmarks.md). At most
// --executor-pipeline calls per process, and only as many as keep the
// expected wait under QUEUE_BUDGET. A joined call that has not started is
// taken back, and its task queued again, when its process dies or its
// running call overruns (STUCK_AFTER) or waits for tasks it submitted.
// Which calls have started is decided through a table both processes map
// (CallStates): the governor takes back only calls it moved from QUEUED
// to DROPPED before the executor moved them to STARTED, so a call taken
// back never runs there too; one that started meanwhile stays.
#pragma once

#include "child-process.h"
#include "object-store.h"
#include "process-output.h"
#include "task-env.h"
#include "uv-bridge.h"

#include <capnp/rpc-twoparty.h>
#include <deque>
#include <kj/async-io.h>
#include <kj/vector.h>
#include <spdlog/logger.h>
#include <squall/proto/rpc.h>
#include <squall/wire/executor.capnp.h>
#include <vector>

namespace squall {

struct ExecutorDecl {
  kj::String name;
  kj::String program;
};

// "NAME=PROGRAM" as --executor takes it; nullptr and `error` set when bad.
kj::Maybe<ExecutorDecl> parseExecutorDecl(kj::StringPtr text, kj::String& error);

class ExecutorLease;

// One running executor program and its connection. The pool's processes
// are these; an actor's process (actor-host.h) is one of its own, outside
// the pool. Loop thread only.
struct ExecutorProcess {
  explicit ExecutorProcess(kj::StringPtr executor) : executor(kj::str(executor)) {}
  virtual ~ExecutorProcess() noexcept(false) { *self = nullptr; }
  KJ_DISALLOW_COPY(ExecutorProcess);

  // Its call for `task` waits for tasks it submitted (ExecutorHost.secede):
  // what it holds that others may use meanwhile goes back. Nothing by
  // default (an actor keeps its resources).
  virtual void secede(Id task) { (void)task; }
  // Done waiting: resolves once it holds again what secede() gave back.
  virtual kj::Promise<void> rejoin() { return kj::READY_NOW; }
  // This process while it lives (null after), for its ExecutorHost.
  std::shared_ptr<ExecutorProcess*> self = std::make_shared<ExecutorProcess*>(this);

  kj::String executor;
  kj::Own<ChildProcess> child;
  kj::Own<RpcClient> rpc;
  wire::Executor::Client cap = nullptr;
  // Set once the process's exit is seen; `exited` resolves then.
  kj::Maybe<ProcessExit> exit;
  kj::ForkedPromise<void> exited = nullptr;
  kj::Promise<void> watch = nullptr;
  // Its standard output and error, when the pool reads them (printTo()).
  kj::Own<ProcessOutput> output;

  // What it prints from now on is `owner`'s (nullptr: nobody's): an
  // actor's process.
  void workFor(kj::Maybe<OutputOwner> owner) {
    if (output.get() != nullptr) output->workFor(kj::mv(owner));
  }
  // A call was sent to it (a pool process, which marks each call's end).
  void expect(OutputOwner owner) {
    if (output.get() != nullptr) output->expect(kj::mv(owner));
  }
};

// One pipe or socket end for an executor. capnp attaches getFd()'s
// descriptor to the message carrying the capability; ours stays open until
// the executor releases the capability, which it does with the call's
// params when the call returns (so the readers of a stream output see its
// end then).
class PipeEndCap final : public wire::PipeEnd::Server {
 public:
  explicit PipeEndCap(kj::AutoCloseFd fd) : fd(kj::mv(fd)) {}
  kj::Maybe<int> getFd() override { return fd.get(); }

 private:
  kj::AutoCloseFd fd;
};

// "exited with status 3", "was killed by SIGSEGV".
kj::String exitText(const ProcessExit& exit);

class ExecutorPool {
 public:
  // A call of a function whose calls average at most this is short.
  static constexpr uint64_t SHORT_CALL_US = 1000;
  // Calls seen before a function can be called short.
  static constexpr uint32_t SHORT_AFTER_CALLS = 4;
  // A call joins a busy process only if the calls before it there are
  // expected to take at most this.
  static constexpr uint64_t QUEUE_BUDGET_US = 10000;
  // What a call costs its process besides its function (reading it,
  // answering), counted in the expected wait.
  static constexpr uint64_t CALL_OVERHEAD_US = 50;
  // A running call with calls waiting behind it that runs this long gives
  // them back, and its function is no longer short.
  static constexpr kj::Duration STUCK_AFTER = 1 * kj::SECONDS;
  static constexpr uint32_t DEFAULT_PIPELINE = 16;

  struct Function {
    kj::String name;
    kj::Vector<kj::String> outputs;
    bool named = false;
    // An actor type (its constructor; its methods are "Type.method"
    // entries), not a function to call.
    bool actor = false;
    // Its calls answered, and how long they ran on average (a moving one,
    // recent calls weighing most; the executor's timing).
    uint32_t calls = 0;
    uint64_t meanUs = 0;
    bool isShort() const { return calls >= SHORT_AFTER_CALLS && meanUs <= SHORT_CALL_US; }
  };
  struct Known {
    kj::String name;
    kj::String program;
    kj::Vector<Function> functions;
  };

  // Processes get `env` (NAME=VALUE) and start in `cwd`. `pipeline`: calls
  // a process may hold at once, the running one included (1: one at a time).
  ExecutorPool(UvBridge& bridge, kj::Timer& timer, kj::LowLevelAsyncIoProvider& io, spdlog::logger& logger,
               kj::Vector<kj::String> env, kj::String cwd, uint32_t pipeline = DEFAULT_PIPELINE);
  ~ExecutorPool() noexcept(false);
  KJ_DISALLOW_COPY(ExecutorPool);

  // Starts each declared executor and learns its functions. Rejects naming
  // the executor and why when one cannot start or answer.
  kj::Promise<void> start(kj::Vector<ExecutorDecl> decls);

  // Processes started from now on print to `outputs` (process-output.h).
  void printTo(TaskOutputs& outputs) { printed = outputs; }
  // What ExecutorHost.record does: resolves once the server has the call
  // of `task` (DirectCalls::record); at once without it.
  using RecordCall = kj::Function<kj::Promise<void>(Id task)>;
  void recordCallsWith(RecordCall record) { *recordCall = kj::mv(record); }
  void stopRecordingCalls() { *recordCall = nullptr; }

  const kj::Vector<Known>& executors() const { return known; }
  kj::Maybe<const Known&> findExecutor(kj::StringPtr name) const;
  kj::Maybe<const Function&> find(kj::StringPtr executor, kj::StringPtr function) const;

  // A process of `executor` for a call of `function`: an idle one, or a new
  // one. It keeps `hold` (what gives back the call's resources when
  // dropped; may be null) and its `cpuUnits` until it has no call left or
  // has died. `joinable`: the call reads and writes no live stream, so
  // calls may queue behind it.
  kj::Promise<kj::Own<ExecutorLease>> acquire(kj::StringPtr executor, kj::StringPtr function, kj::Own<ResourceHold> hold,
                                              uint64_t cpuUnits, bool joinable);

  // A place behind the calls of a busy process of `executor` for a call of
  // `function` needing `cpuUnits` (at most what the process holds), when the
  // function is short and such a process has room (see above); nullptr
  // otherwise. The caller checks the call itself may wait (no live stream,
  // no time limit).
  kj::Maybe<kj::Own<ExecutorLease>> join(kj::StringPtr executor, kj::StringPtr function, uint64_t cpuUnits);

  // A process of `executor` of its own, not in the pool: an actor's
  // (actor-host.h). `extraEnv` (NAME=VALUE) is added to its environment:
  // the resources its actor holds. Throws naming the executor when it
  // cannot start. Its owner stops it (killGroup, or dropping its
  // connection, which ends its serve()).
  kj::Own<ExecutorProcess> startProcess(kj::StringPtr executor, const std::vector<std::string>& extraEnv);

  // A connected pair of Unix sockets for an actor's calls channel
  // (executor.capnp, openCalls): the governor's end, on the loop, and the
  // descriptor of the process's end, to send.
  struct SocketPair {
    kj::Own<kj::AsyncIoStream> ours;
    kj::AutoCloseFd theirs;
  };
  SocketPair socketPair();

  // At the governor's end, after the tasks: idle processes see their
  // socket close and exit by themselves (their destructors run), busy ones
  // (running calls nobody waits for) are killed; resolves once they have
  // gone, or after a few seconds (then they are killed).
  kj::Promise<void> shutdown();

 private:
  friend class ExecutorLease;
  struct Worker;
  struct Slot;

  UvBridge& bridge;
  kj::Timer& timer;
  kj::LowLevelAsyncIoProvider& io;
  spdlog::logger& logger;
  kj::Vector<kj::String> env;
  kj::String cwd;
  uint32_t pipeline;
  kj::Maybe<TaskOutputs&> printed;
  // What pool processes write after each call (SQUALL_OUTPUT_MARK).
  kj::String outputMark;
  // Shared with the processes' ExecutorHosts, which may outlive the pool.
  std::shared_ptr<kj::Maybe<RecordCall>> recordCall = std::make_shared<kj::Maybe<RecordCall>>();
  kj::Vector<Known> known;
  // Processes alive (for the log).
  size_t alive = 0;
  uint64_t nextUse = 1;
  // Calls that joined a busy process, and those of them given back (logged
  // when the governor stops).
  uint64_t joined = 0;
  uint64_t givenBack = 0;
  // Every process, alive or dead but still referred to.
  std::vector<kj::Own<Worker>> workers;
  class ErrorHandler final : public kj::TaskSet::ErrorHandler {
   public:
    explicit ErrorHandler(spdlog::logger& logger) : logger(logger) {}
    void taskFailed(kj::Exception&& e) override;

   private:
    spdlog::logger& logger;
  };
  ErrorHandler errors;
  // Calls in flight, each holding its worker; declared after `workers`, so
  // destroyed before them.
  kj::TaskSet calls;

  Function* findFunction(kj::StringPtr executor, kj::StringPtr function);
  // A fresh process of `executor` running `program`; throws naming it.
  Worker& spawn(kj::StringPtr executor, kj::StringPtr program);
  // Starts `program` as `process`, with `extraEnv` besides the pool's.
  // `marked`: a pool process, which marks each call's end in its output.
  void launch(ExecutorProcess& process, kj::StringPtr program, const std::vector<std::string>& extraEnv,
              bool marked);
  // Sends `request` on `worker` as the call of `lease`.
  kj::Promise<void> send(Worker& worker, ExecutorLease& lease,
                         capnp::Request<wire::Executor::CallParams, wire::Executor::CallResults> request,
                         kj::Own<StoreTemp> outDir, kj::StringPtr name);
  void answered(Worker& worker, Slot& slot, kj::Maybe<kj::Exception> error,
                kj::Maybe<capnp::Response<wire::Executor::CallResults>> response);
  // Arms the watchdog of the call now running on `worker` when calls wait
  // behind it.
  void watch(Worker& worker);
  // Gives back the calls waiting behind a call that overran.
  void unstick(Worker& worker, uint64_t head);
  // Gives back the calls waiting behind the running one (`why`).
  size_t giveBackQueued(Worker& worker, const char* why);
  class Host;
  // Releases a process with no call left: its hold goes, and a dead one is
  // dropped once nothing refers to it.
  void settle(Worker& worker);

};

// One call's place on one process: reserved (acquire, join), then sent.
// What a call task holds while its call runs. Dropped before its answer,
// a call that runs kills its process (it was cancelled), and a call that
// waits is taken out of its process's queue (it does not run there).
class ExecutorLease {
 public:
  ExecutorLease(ExecutorPool& pool, ExecutorPool::Worker& worker, ExecutorPool::Function* function,
                uint64_t expectedUs);
  ~ExecutorLease() noexcept(false);
  KJ_DISALLOW_COPY(ExecutorLease);

  struct Answer {
    capnp::Response<wire::Executor::CallResults> response;
    kj::Own<StoreTemp> outDir;
  };

  wire::Executor::Client& executor();
  ChildProcess& process();
  // Sends the call (once). `outDir` is its output directory in the store,
  // kept until the call answers, and handed back with the answer. Rejects
  // with the call's exception (the function threw: FAILED; the process
  // went: DISCONNECTED); started() then says whether the function ran.
  // `name`: the task's, as its output is prefixed.
  kj::Promise<Answer> send(capnp::Request<wire::Executor::CallParams, wire::Executor::CallResults> request,
                           kj::Own<StoreTemp> outDir, kj::StringPtr name = nullptr);
  // True once the call has reached the front of its process's queue.
  bool started() const { return started_; }
  // Kills the process (its group) while the call runs, and no call goes to
  // it any more. Does nothing once the call has been answered: the process
  // may be running another call by then.
  void kill();
  // Why the process is gone, once it has gone ("exited with status 3",
  // "was killed by SIGSEGV"); nullptr while it runs. Waits up to `wait`
  // for its exit to be seen.
  kj::Promise<kj::Maybe<kj::String>> deathReason(kj::Duration wait);

 private:
  friend class ExecutorPool;
  ExecutorPool& pool;
  ExecutorPool::Worker& worker;
  ExecutorPool::Function* function;
  // What it counts as in its process's expected wait.
  uint64_t expectedUs;
  // Its call once sent, until answered.
  ExecutorPool::Slot* slot = nullptr;
  bool sent = false;
  bool started_ = false;
  kj::Own<kj::PromiseFulfiller<Answer>> fulfiller;
};

}  // namespace squall
