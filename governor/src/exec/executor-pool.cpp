#include "executor-pool.h"

#include <random>

#include "task-outcome.h"

#include <cstring>
#include <squall/proto/call-states.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <squall/proto/spec-names.h>
#include <sys/socket.h>
#include <unistd.h>

namespace squall {

kj::String exitText(const ProcessExit& exit) {
  if (exit.termSignal != 0) return kj::str("was killed by ", signalName(exit.termSignal));
  return kj::str("exited with status ", exit.exitStatus);
}

namespace {

// How long an executor has to describe itself at start.
constexpr kj::Duration DESCRIBE_TIMEOUT = 30 * kj::SECONDS;

}  // namespace

kj::Maybe<ExecutorDecl> parseExecutorDecl(kj::StringPtr text, kj::String& error) {
  KJ_IF_MAYBE(eq, text.findFirst('=')) {
    auto name = kj::str(text.slice(0, *eq));
    auto program = kj::str(text.slice(*eq + 1));
    if (!isPlainName(name)) {
      error = kj::str("executor name '", name, "': ", PLAIN_NAME_RULE);
      return nullptr;
    }
    if (program.size() == 0) {
      error = kj::str("executor ", name, " has no program");
      return nullptr;
    }
    return ExecutorDecl{kj::mv(name), kj::mv(program)};
  }
  error = kj::str("'", text, "' is not NAME=PROGRAM");
  return nullptr;
}

struct ExecutorPool::Slot {
  uint64_t serial = 0;
  // The call's task (its context): whose output the process prints.
  uint64_t session = 0;
  uint64_t task = 0;
  Function* function = nullptr;
  uint64_t expectedUs = 0;
  // Its entry in the process's call states (0: none, it cannot be taken
  // back).
  uint32_t state = 0;
  // Whose call it is; nullptr once nobody waits for its answer.
  ExecutorLease* lease = nullptr;
  kj::Own<StoreTemp> outDir;
};

struct ExecutorPool::Worker final : public ExecutorProcess {
  Worker(ExecutorPool& pool, kj::StringPtr executor) : ExecutorProcess(executor), pool(pool) { pool.alive++; }
  ~Worker() noexcept(false) { pool.alive--; }
  KJ_DISALLOW_COPY(Worker);

  ExecutorPool& pool;
  // Its connection failed: no call goes to it any more.
  bool broken = false;

  // The running call waits for tasks it submitted: the calls behind it go
  // elsewhere, nothing joins it, and its cpus are lent meanwhile.
  void secede(Id task) override {
    joinable = false;
    size_t given = pool.giveBackQueued(*this, "given back: the call before it waits for tasks it submitted");
    bool lent = false;
    KJ_IF_MAYBE(h, hold) { lent = (*h)->lend(task); }
    pool.logger.debug("event=call-seceded executor={} pid={} task={} given_back={} lent={}", executor.cStr(),
                      child->pid(), kj::str(task).cStr(), given, lent);
  }
  kj::Promise<void> rejoin() override {
    KJ_IF_MAYBE(h, hold) { return (*h)->reclaim(); }
    return kj::READY_NOW;
  }

  // Calls sent and not answered, in the order sent: the front one runs.
  std::deque<kj::Own<Slot>> queue;
  // Which of them may still be taken back (shared with the process).
  kj::Own<CallStates> states = CallStates::create();
  // Leases made and not sent yet, and leases that refer to it at all.
  uint32_t reserved = 0;
  uint32_t leases = 0;
  // The expected time of its calls (sent or reserved), for joining.
  uint64_t queuedUs = 0;
  // The resources of the call that took it while idle, and their cpus.
  kj::Maybe<kj::Own<ResourceHold>> hold;
  uint64_t holdUnits = 0;
  // Calls may queue behind its calls.
  bool joinable = false;
  // When the front call started, and which it is.
  uint64_t frontSinceUs = 0;
  uint64_t frontSerial = 0;
  // Gives back the waiting calls if the front one overruns.
  kj::Promise<void> watchdog = nullptr;
  uint64_t watchedSerial = 0;
  // When it last became idle (the most recent is taken first).
  uint64_t lastUse = 0;

  bool gone() const { return broken || exit != nullptr; }
  bool idle() const { return !gone() && queue.empty() && reserved == 0; }
};

void ExecutorPool::ErrorHandler::taskFailed(kj::Exception&& e) {
  logger.error("event=executor-call-tracking-failed error=\"{}\"", e.getDescription().cStr());
}

ExecutorPool::ExecutorPool(UvBridge& bridge, kj::Timer& timer, kj::LowLevelAsyncIoProvider& io,
                           spdlog::logger& logger, kj::Vector<kj::String> env, kj::String cwd, uint32_t pipeline)
    : bridge(bridge), timer(timer), io(io), logger(logger), env(kj::mv(env)), cwd(kj::mv(cwd)),
      pipeline(pipeline < 1 ? 1 : pipeline), errors(logger), calls(errors) {
  // Random, so that no output mistakes itself for one by chance.
  std::random_device random;
  char hex[33];
  for (int i = 0; i < 4; i++) snprintf(hex + 8 * i, 9, "%08x", static_cast<unsigned>(random()));
  outputMark = kj::str("\x1e" "squall-call-end-", hex, "\x1e");
}

ExecutorPool::~ExecutorPool() noexcept(false) {}

kj::Maybe<const ExecutorPool::Known&> ExecutorPool::findExecutor(kj::StringPtr name) const {
  for (auto& k : known) {
    if (k.name == name) return k;
  }
  return nullptr;
}

kj::Maybe<const ExecutorPool::Function&> ExecutorPool::find(kj::StringPtr executor, kj::StringPtr function) const {
  KJ_IF_MAYBE(k, findExecutor(executor)) {
    for (auto& f : k->functions) {
      if (f.name == function) return f;
    }
  }
  return nullptr;
}

ExecutorPool::Function* ExecutorPool::findFunction(kj::StringPtr executor, kj::StringPtr function) {
  KJ_IF_MAYBE(f, find(executor, function)) { return const_cast<Function*>(f); }
  return nullptr;
}

// The governor's side of one executor process (proto/executor.capnp
// ExecutorHost): a function that waits for tasks it submitted gives its
// process's cpus back meanwhile (docs/nested.md).
class ExecutorPool::Host final : public wire::ExecutorHost::Server {
 public:
  Host(std::shared_ptr<ExecutorProcess*> process, std::shared_ptr<kj::Maybe<RecordCall>> recordCall)
      : process(kj::mv(process)), recordCall(kj::mv(recordCall)) {}

  kj::Promise<void> secede(SecedeContext context) override {
    auto c = context.getParams().getContext();
    if (*process != nullptr) (*process)->secede(Id{c.getSession(), c.getTask()});
    return kj::READY_NOW;
  }
  kj::Promise<void> rejoin(RejoinContext) override {
    if (*process == nullptr) return kj::READY_NOW;
    return (*process)->rejoin();
  }
  kj::Promise<void> record(RecordContext context) override {
    auto c = context.getParams().getContext();
    if (*process == nullptr) return kj::READY_NOW;
    KJ_IF_MAYBE(r, *recordCall) { return (*r)(Id{c.getSession(), c.getTask()}); }
    return kj::READY_NOW;
  }

 private:
  std::shared_ptr<ExecutorProcess*> process;
  std::shared_ptr<kj::Maybe<RecordCall>> recordCall;
};

void ExecutorPool::launch(ExecutorProcess& process, kj::StringPtr program,
                          const std::vector<std::string>& extraEnv, bool marked) {
  int fds[2];
  KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
  kj::AutoCloseFd ours(fds[0]);
  kj::AutoCloseFd theirs(fds[1]);
  SpawnOptions options;
  options.file = kj::str(program);
  options.args.add(kj::str(program));
  options.args.add(kj::str("--squall-executor-fd"));
  options.args.add(kj::str("0"));
  for (auto& e : env) options.env.add(kj::str(e));
  for (auto& e : extraEnv) options.env.add(kj::str(e));
  options.cwd = kj::str(cwd);
  options.stdinFd = theirs.get();
  options.stdoutFd = STDERR_FILENO;
  options.stderrFd = STDERR_FILENO;
  KJ_IF_MAYBE(outputs, printed) {
    process.output = kj::heap<ProcessOutput>(io, *outputs, marked ? outputMark.asPtr() : kj::StringPtr(nullptr));
    options.stdoutFd = process.output->childStdout();
    options.stderrFd = process.output->childStderr();
    if (marked) options.env.add(kj::str("SQUALL_OUTPUT_MARK=", outputMark));
  }
  auto started = ChildProcess::spawn(bridge, options);
  KJ_IF_MAYBE(code, started.tryGet<int>()) {
    SQUALL_FAIL("cannot start executor ", process.executor, " (", program, "): ", strerror(-*code));
  }
  process.child = kj::mv(started.get<kj::Own<ChildProcess>>());
  theirs = nullptr;
  if (process.output.get() != nullptr) process.output->started(process.child->pid());
  // A Unix socket that carries descriptors too: the pipe ends of streams
  // (call-task.cpp). Executors send none back, but capnp 0.9 attaches
  // descriptors to outgoing messages only when the network accepts some.
  process.rpc =
      kj::heap<RpcClient>(io.wrapUnixSocketFd(ours.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP), 1);
  process.cap = process.rpc->bootstrap<wire::Executor>();
  {
    auto host = process.cap.hostRequest();
    host.setHost(kj::heap<Host>(process.self, recordCall));
    // Ahead of every call on the same connection; an executor that went
    // (or speaks another protocol: describe says so) needs no answer.
    calls.add(host.send().ignoreResult().catch_([](kj::Exception&&) {}));
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  process.exited = paf.promise.fork();
  process.watch = process.child->onExit()
                      .then([p = &process, &logger = logger, fulfiller = kj::mv(paf.fulfiller)](ProcessExit exit) mutable {
                        p->exit = exit;
                        logger.info("event=executor-exited executor={} pid={} how=\"{}\"", p->executor.cStr(),
                                    p->child->pid(), exitText(exit).cStr());
                        fulfiller->fulfill();
                      })
                      .eagerlyEvaluate(nullptr);
  logger.info("event=executor-started executor={} program={} pid={}", process.executor.cStr(), program.cStr(),
              process.child->pid());
}

ExecutorPool::Worker& ExecutorPool::spawn(kj::StringPtr executor, kj::StringPtr program) {
  workers.push_back(kj::heap<Worker>(*this, executor));
  auto* worker = workers.back().get();
  KJ_ON_SCOPE_FAILURE(workers.pop_back());
  launch(*worker, program, {}, true);
  // Right behind host(), ahead of every call.
  auto table = worker->cap.callStatesRequest();
  table.setTable(kj::heap<PipeEndCap>(worker->states->duplicateFd()));
  calls.add(table.send().ignoreResult().catch_([](kj::Exception&&) {}));
  return *worker;
}

kj::Own<ExecutorProcess> ExecutorPool::startProcess(kj::StringPtr executor, const std::vector<std::string>& extraEnv) {
  auto& k = KJ_REQUIRE_NONNULL(findExecutor(executor), "this governor has no executor", executor);
  auto process = kj::heap<ExecutorProcess>(executor);
  launch(*process, k.program, extraEnv, false);
  return process;
}

ExecutorPool::SocketPair ExecutorPool::socketPair() {
  int fds[2];
  KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
  kj::AutoCloseFd theirs(fds[1]);
  return SocketPair{io.wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP), kj::mv(theirs)};
}

kj::Promise<void> ExecutorPool::start(kj::Vector<ExecutorDecl> decls) {
  kj::Vector<kj::Promise<void>> described;
  for (uint i = 0; i < decls.size(); i++) {
    for (uint j = 0; j < i; j++) {
      SQUALL_REQUIRE(decls[i].name != decls[j].name, "executor ", decls[i].name, " is declared twice");
    }
  }
  for (auto& decl : decls) {
    auto& ref = spawn(decl.name, decl.program);
    auto answer = ref.cap.describeRequest().send();
    auto name = kj::str(decl.name);
    auto program = kj::str(decl.program);
    auto failed = [this, &ref, name = kj::str(name), program = kj::str(program)](kj::Exception&& e) mutable {
      // A program that is no executor exits at once: say how.
      return ref.exited.addBranch()
          .exclusiveJoin(timer.afterDelay(1 * kj::SECONDS))
          .then([&ref, name = kj::mv(name), program = kj::mv(program), e = kj::mv(e)]() -> kj::Promise<void> {
            KJ_IF_MAYBE(exit, ref.exit) {
              SQUALL_FAIL("executor ", name, " (", program, ") ", exitText(*exit),
                          " instead of describing itself; is it a program built on squall's tasklib?");
            }
            SQUALL_FAIL("executor ", name, " (", program, ") did not describe itself: ", userMessage(e));
          });
    };
    described.add(timer.timeoutAfter(DESCRIBE_TIMEOUT, kj::mv(answer))
                      .then(
                          [this, name = kj::mv(name), program = kj::mv(program)](
                              auto response) mutable -> kj::Promise<void> {
                            SQUALL_REQUIRE(response.getVersion() == wire::EXECUTOR_PROTOCOL_VERSION, "executor ",
                                           name, " (", program, ") speaks executor protocol ",
                                           response.getVersion(), "; this governor speaks ",
                                           wire::EXECUTOR_PROTOCOL_VERSION);
                            SQUALL_REQUIRE(response.getName() == name, "executor ", name, " (", program,
                                           ") calls itself '", response.getName(), "': use --executor ",
                                           response.getName(), "=", program);
                            Known k{kj::mv(name), kj::mv(program), {}};
                            for (auto f : response.getFunctions()) {
                              Function function{kj::str(f.getName()), {}, f.getNamed()};
                              function.actor = f.getActor();
                              for (auto o : f.getOutputs()) function.outputs.add(kj::str(o));
                              k.functions.add(kj::mv(function));
                            }
                            logger.info("event=executor-described executor={} functions={}", k.name.cStr(),
                                        k.functions.size());
                            known.add(kj::mv(k));
                            return kj::READY_NOW;
                          },
                          kj::mv(failed)));
  }
  return kj::joinPromises(described.releaseAsArray());
}

kj::Promise<void> ExecutorPool::shutdown() {
  if (!known.empty()) {
    logger.info("event=executors-stopping processes={} calls_queued={} given_back={}", alive, joined, givenBack);
  }
  kj::Vector<kj::Promise<void>> exits;
  for (auto& worker : workers) {
    if (worker->exit != nullptr) continue;
    // A call still running has nobody waiting for it (the tasks have
    // ended): it goes with its process.
    if (!worker->queue.empty()) worker->child->killGroup(SIGKILL);
    // End of file on its socket: its serve() returns.
    worker->cap = nullptr;
    worker->rpc = nullptr;
    worker->broken = true;
    exits.add(worker->exited.addBranch());
  }
  return timer.timeoutAfter(3 * kj::SECONDS, kj::joinPromises(exits.releaseAsArray()))
      .catch_([this](kj::Exception&& e) {
        logger.warn("event=executors-slow-to-exit action=kill error=\"{}\"", e.getDescription().cStr());
      });
}

void ExecutorPool::settle(Worker& worker) {
  if (!worker.queue.empty() || worker.reserved > 0) return;
  worker.watchdog = nullptr;
  worker.joinable = false;
  worker.queuedUs = 0;
  worker.lastUse = nextUse++;
  // Its cpus go back to the queue (which starts its next task later, not
  // from inside this call).
  worker.hold = nullptr;
  worker.holdUnits = 0;
  if (worker.gone() && worker.leases == 0) {
    for (size_t i = 0; i < workers.size(); i++) {
      if (workers[i].get() == &worker) {
        workers.erase(workers.begin() + i);
        break;
      }
    }
  }
}

namespace {
// What a call's wait behind others counts as: its function's mean if the
// function is short, else more than any wait allowed (nothing joins it).
uint64_t expectedWaitUs(const ExecutorPool::Function* f) {
  if (f != nullptr && f->isShort()) return f->meanUs + ExecutorPool::CALL_OVERHEAD_US;
  return ExecutorPool::QUEUE_BUDGET_US + 1;
}
}  // namespace

kj::Promise<kj::Own<ExecutorLease>> ExecutorPool::acquire(kj::StringPtr executor, kj::StringPtr function,
                                                          kj::Own<ResourceHold> hold, uint64_t cpuUnits, bool joinable) {
  // Processes that died while idle go.
  for (size_t i = workers.size(); i > 0; i--) {
    auto& w = *workers[i - 1];
    if (w.gone() && w.queue.empty() && w.reserved == 0 && w.leases == 0) workers.erase(workers.begin() + (i - 1));
  }
  // The most recently used idle process first (its caches are warmest).
  Worker* best = nullptr;
  for (auto& w : workers) {
    if (w->executor == executor && w->idle() && (best == nullptr || w->lastUse > best->lastUse)) best = w.get();
  }
  if (best == nullptr) {
    KJ_IF_MAYBE(k, findExecutor(executor)) {
      best = &spawn(k->name, k->program);
    } else {
      return SQUALL_EXCEPTION(FAILED, "this governor has no executor ", executor);
    }
  }
  auto* f = findFunction(executor, function);
  best->hold = kj::mv(hold);
  best->holdUnits = cpuUnits;
  best->joinable = joinable && pipeline > 1;
  return kj::heap<ExecutorLease>(*this, *best, f, expectedWaitUs(f));
}

kj::Maybe<kj::Own<ExecutorLease>> ExecutorPool::join(kj::StringPtr executor, kj::StringPtr function,
                                                     uint64_t cpuUnits) {
  if (pipeline <= 1) return nullptr;
  auto* f = findFunction(executor, function);
  if (f == nullptr || !f->isShort()) return nullptr;
  Worker* best = nullptr;
  for (auto& w : workers) {
    if (w->executor != executor || !w->joinable || w->gone() || w->hold == nullptr) continue;
    if (w->holdUnits < cpuUnits || w->queue.size() + w->reserved >= pipeline) continue;
    if (w->queuedUs + expectedWaitUs(f) > QUEUE_BUDGET_US) continue;
    // The shortest expected wait.
    if (best == nullptr || w->queuedUs < best->queuedUs) best = w.get();
  }
  if (best == nullptr) return nullptr;
  joined++;
  logger.debug("event=call-queued executor={} function={} pid={} behind={} mean_us={}", executor.cStr(),
               function.cStr(), best->child->pid(), best->queue.size() + best->reserved, f->meanUs);
  return kj::heap<ExecutorLease>(*this, *best, f, expectedWaitUs(f));
}

kj::Promise<void> ExecutorPool::send(Worker& worker, ExecutorLease& lease,
                                     capnp::Request<wire::Executor::CallParams, wire::Executor::CallResults> request,
                                     kj::Own<StoreTemp> outDir, kj::StringPtr name) {
  worker.reserved--;
  if (worker.gone()) {
    // It died between the lease and the call: the call never reached it.
    worker.queuedUs -= kj::min(worker.queuedUs, lease.expectedUs);
    return KJ_EXCEPTION(DISCONNECTED, "the executor process went before the call was sent");
  }
  auto slot = kj::heap<Slot>();
  slot->serial = nextUse++;
  slot->function = lease.function;
  slot->expectedUs = lease.expectedUs;
  slot->session = request.getContext().getSession();
  slot->task = request.getContext().getTask();
  slot->state = worker.states->take();
  request.setState(slot->state);
  slot->lease = &lease;
  slot->outDir = kj::mv(outDir);
  lease.slot = slot.get();
  auto& ref = *slot;
  // What it prints is its task's, named as the task is.
  worker.expect(OutputOwner{Id{ref.session, ref.task},
                            name != nullptr && name.size() > 0 ? kj::str(name) : kj::str(worker.executor)});
  worker.queue.push_back(kj::mv(slot));
  if (worker.queue.size() == 1) {
    worker.frontSinceUs = monotonicUs();
    worker.frontSerial = ref.serial;
    lease.started_ = true;
  } else {
    watch(worker);
  }
  calls.add(request.send().then(
      [this, &worker, &ref](capnp::Response<wire::Executor::CallResults> response) {
        answered(worker, ref, nullptr, kj::mv(response));
      },
      [this, &worker, &ref](kj::Exception&& e) { answered(worker, ref, kj::mv(e), nullptr); }));
  return kj::READY_NOW;
}

void ExecutorPool::watch(Worker& worker) {
  if (worker.queue.size() < 2 || worker.watchedSerial == worker.frontSerial) return;
  worker.watchedSerial = worker.frontSerial;
  uint64_t ranUs = monotonicUs() - worker.frontSinceUs;
  auto left = STUCK_AFTER - static_cast<int64_t>(ranUs) * kj::MICROSECONDS;
  worker.watchdog = timer.afterDelay(left > 0 * kj::SECONDS ? left : 0 * kj::SECONDS)
                        .then([this, &worker, serial = worker.frontSerial]() { unstick(worker, serial); })
                        .eagerlyEvaluate(nullptr);
}

void ExecutorPool::answered(Worker& worker, Slot& slot, kj::Maybe<kj::Exception> error,
                            kj::Maybe<capnp::Response<wire::Executor::CallResults>> response) {
  bool wasFront = !worker.queue.empty() && worker.queue.front().get() == &slot;
  // What it printed before it answered is there already: read now, it is
  // in the call's result (each call's end is marked, process-output.h).
  if (worker.output.get() != nullptr) worker.output->drain();
  bool disconnected = false;
  KJ_IF_MAYBE(e, error) { disconnected = e->getType() == kj::Exception::Type::DISCONNECTED; }
  KJ_IF_MAYBE(r, response) {
    if (slot.function != nullptr) {
      // How long the function ran, as the executor says: not the round
      // trip, which a loaded machine stretches whatever the function does.
      uint64_t ranUs = r->getRunUs();
      auto& f = *slot.function;
      f.meanUs = f.calls == 0 ? ranUs : f.meanUs - f.meanUs / 4 + ranUs / 4;
      if (f.calls < SHORT_AFTER_CALLS) f.calls++;
    }
  }
  kj::Own<Slot> own;
  for (auto it = worker.queue.begin(); it != worker.queue.end(); ++it) {
    if (it->get() == &slot) {
      own = kj::mv(*it);
      worker.queue.erase(it);
      break;
    }
  }
  worker.queuedUs -= kj::min(worker.queuedUs, slot.expectedUs);
  worker.states->release(slot.state);
  if (disconnected) worker.broken = true;
  if (slot.lease != nullptr) {
    auto& lease = *slot.lease;
    lease.slot = nullptr;
    slot.lease = nullptr;
    KJ_IF_MAYBE(e, error) {
      lease.fulfiller->reject(kj::mv(*e));
    } else {
      lease.fulfiller->fulfill(
          ExecutorLease::Answer{KJ_ASSERT_NONNULL(kj::mv(response)), kj::mv(slot.outDir)});
    }
  }
  // Once dead, the calls still queued fail as not started.
  if (wasFront && !worker.broken && !worker.queue.empty()) {
    auto& next = *worker.queue.front();
    worker.frontSinceUs = monotonicUs();
    worker.frontSerial = next.serial;
    if (next.lease != nullptr) next.lease->started_ = true;
    watch(worker);
  }
  // `own` (an abandoned call's output directory with it) goes now.
  own = nullptr;
  settle(worker);
}

size_t ExecutorPool::giveBackQueued(Worker& worker, const char* why) {
  size_t taken = 0;
  for (size_t i = 1; i < worker.queue.size(); i++) {
    auto& slot = *worker.queue[i];
    // Only what the process has not started (it may have run calls whose
    // answers are on their way); it answers these without running them.
    if (slot.lease == nullptr || !worker.states->drop(slot.state)) continue;
    auto& lease = *slot.lease;
    lease.slot = nullptr;
    slot.lease = nullptr;
    lease.fulfiller->reject(KJ_EXCEPTION(DISCONNECTED, why));
    taken++;
    givenBack++;
  }
  return taken;
}

void ExecutorPool::unstick(Worker& worker, uint64_t serial) {
  if (worker.frontSerial != serial || worker.queue.size() < 2) return;
  auto& front = *worker.queue.front();
  uint64_t ranUs = monotonicUs() - worker.frontSinceUs;
  if (front.function != nullptr) {
    // No longer short: nothing joins its calls until they are.
    front.function->meanUs = kj::max(front.function->meanUs, ranUs);
  }
  worker.joinable = false;
  size_t given = giveBackQueued(worker, "given back: the call before it overran");
  logger.warn("event=executor-call-overran executor={} pid={} function={} ran_ms={} given_back={}",
              worker.executor.cStr(), worker.child->pid(),
              front.function != nullptr ? front.function->name.cStr() : "?", ranUs / 1000, given);
}

// ------------------------------------------------------------ ExecutorLease

ExecutorLease::ExecutorLease(ExecutorPool& pool, ExecutorPool::Worker& worker, ExecutorPool::Function* function,
                             uint64_t expectedUs)
    : pool(pool), worker(worker), function(function), expectedUs(expectedUs) {
  worker.leases++;
  worker.reserved++;
  worker.queuedUs += expectedUs;
}

ExecutorLease::~ExecutorLease() noexcept(false) {
  if (!sent) {
    worker.reserved--;
    worker.queuedUs -= kj::min(worker.queuedUs, expectedUs);
  } else if (slot != nullptr) {
    // Dropped before its answer.
    slot->lease = nullptr;
    // Running: the task was cancelled; the process goes, with everything it
    // started. Waiting: it does not run there (unless it just started).
    if (started_) {
      kill();
    } else {
      worker.states->drop(slot->state);
    }
  }
  worker.leases--;
  pool.settle(worker);
}

void ExecutorLease::kill() {
  if (!started_ || slot == nullptr || worker.exit != nullptr) return;
  // Marked now: its answer, already on its way, must not make it idle.
  worker.broken = true;
  worker.joinable = false;
  worker.child->killGroup(SIGKILL);
}

wire::Executor::Client& ExecutorLease::executor() { return worker.cap; }

ChildProcess& ExecutorLease::process() { return *worker.child; }

kj::Promise<ExecutorLease::Answer> ExecutorLease::send(
    capnp::Request<wire::Executor::CallParams, wire::Executor::CallResults> request, kj::Own<StoreTemp> outDir,
    kj::StringPtr name) {
  KJ_REQUIRE(!sent, "a lease sends one call");
  sent = true;
  auto paf = kj::newPromiseAndFulfiller<Answer>();
  fulfiller = kj::mv(paf.fulfiller);
  return pool.send(worker, *this, kj::mv(request), kj::mv(outDir), name).then([promise = kj::mv(paf.promise)]() mutable {
    return kj::mv(promise);
  });
}

kj::Promise<kj::Maybe<kj::String>> ExecutorLease::deathReason(kj::Duration wait) {
  auto& w = worker;
  return w.exited.addBranch().exclusiveJoin(pool.timer.afterDelay(wait)).then([&w]() -> kj::Maybe<kj::String> {
    KJ_IF_MAYBE(exit, w.exit) { return exitText(*exit); }
    return nullptr;
  });
}

}  // namespace squall
