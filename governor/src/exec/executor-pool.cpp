#include "executor-pool.h"

#include <cstring>
#include <squall/proto/errors.h>
#include <squall/proto/spec-names.h>
#include <sys/socket.h>
#include <unistd.h>

namespace squall {

namespace {

kj::String exitText(const ProcessExit& exit) {
  if (exit.termSignal != 0) return kj::str("was killed by ", signalName(exit.termSignal));
  return kj::str("exited with status ", exit.exitStatus);
}

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

class ExecutorPool::Worker {
 public:
  Worker(ExecutorPool& pool, kj::StringPtr executor) : pool(pool), executor(kj::str(executor)) { pool.alive++; }
  ~Worker() noexcept(false) { pool.alive--; }
  KJ_DISALLOW_COPY(Worker);

  ExecutorPool& pool;
  kj::String executor;
  kj::Own<ChildProcess> child;
  kj::Own<kj::AsyncCapabilityStream> stream;
  kj::Own<capnp::TwoPartyClient> rpc;
  wire::Executor::Client cap = nullptr;
  // Set once the process's exit is seen; `exited` resolves then.
  kj::Maybe<ProcessExit> exit;
  kj::ForkedPromise<void> exited = nullptr;
  kj::Promise<void> watch = nullptr;
};

ExecutorPool::ExecutorPool(UvBridge& bridge, kj::Timer& timer, kj::LowLevelAsyncIoProvider& io,
                           spdlog::logger& logger, kj::Vector<kj::String> env, kj::String cwd)
    : bridge(bridge), timer(timer), io(io), logger(logger), env(kj::mv(env)), cwd(kj::mv(cwd)) {}

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

kj::Own<ExecutorPool::Worker> ExecutorPool::spawn(kj::StringPtr executor, kj::StringPtr program) {
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
  options.cwd = kj::str(cwd);
  options.stdinFd = theirs.get();
  options.stdoutFd = STDERR_FILENO;
  options.stderrFd = STDERR_FILENO;
  auto started = ChildProcess::spawn(bridge, options);
  KJ_IF_MAYBE(code, started.tryGet<int>()) {
    SQUALL_FAIL("cannot start executor ", executor, " (", program, "): ", strerror(-*code));
  }
  auto worker = kj::heap<Worker>(*this, executor);
  worker->child = kj::mv(started.get<kj::Own<ChildProcess>>());
  theirs = nullptr;
  // A Unix socket that carries descriptors too: the pipe ends of streams
  // (call-task.cpp). Executors send none back, but capnp 0.9 attaches
  // descriptors to outgoing messages only when the network accepts some.
  worker->stream = io.wrapUnixSocketFd(ours.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  worker->rpc = kj::heap<capnp::TwoPartyClient>(*worker->stream, 1);
  worker->cap = worker->rpc->bootstrap().castAs<wire::Executor>();
  auto paf = kj::newPromiseAndFulfiller<void>();
  worker->exited = paf.promise.fork();
  worker->watch = worker->child->onExit()
                      .then([w = worker.get(), fulfiller = kj::mv(paf.fulfiller)](ProcessExit exit) mutable {
                        w->exit = exit;
                        w->pool.logger.info("event=executor-exited executor={} pid={} how=\"{}\"",
                                            w->executor.cStr(), w->child->pid(), exitText(exit).cStr());
                        fulfiller->fulfill();
                      })
                      .eagerlyEvaluate(nullptr);
  logger.info("event=executor-started executor={} program={} pid={}", executor.cStr(), program.cStr(),
              worker->child->pid());
  return worker;
}

kj::Promise<void> ExecutorPool::start(kj::Vector<ExecutorDecl> decls) {
  kj::Vector<kj::Promise<void>> described;
  for (uint i = 0; i < decls.size(); i++) {
    for (uint j = 0; j < i; j++) {
      SQUALL_REQUIRE(decls[i].name != decls[j].name, "executor ", decls[i].name, " is declared twice");
    }
  }
  for (auto& decl : decls) {
    auto worker = spawn(decl.name, decl.program);
    auto& ref = *worker;
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
    // `worker` rides on the last step, so `ref` stays valid through both
    // handlers.
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
                              for (auto o : f.getOutputs()) function.outputs.add(kj::str(o));
                              k.functions.add(kj::mv(function));
                            }
                            logger.info("event=executor-described executor={} functions={}", k.name.cStr(),
                                        k.functions.size());
                            known.add(kj::mv(k));
                            return kj::READY_NOW;
                          },
                          kj::mv(failed))
                      .then([this, worker = kj::mv(worker)]() mutable { giveBack(kj::mv(worker)); }));
  }
  return kj::joinPromises(described.releaseAsArray());
}

kj::Promise<void> ExecutorPool::shutdown() {
  kj::Vector<kj::Promise<void>> exits;
  for (auto& worker : idle) {
    // End of file on its socket: its serve() returns.
    worker->cap = nullptr;
    worker->rpc = nullptr;
    worker->stream = nullptr;
    exits.add(worker->exited.addBranch());
  }
  return timer.timeoutAfter(3 * kj::SECONDS, kj::joinPromises(exits.releaseAsArray()))
      .catch_([this](kj::Exception&& e) {
        logger.warn("event=executors-slow-to-exit action=kill error=\"{}\"", e.getDescription().cStr());
      });
}

void ExecutorPool::giveBack(kj::Own<Worker> worker) {
  if (worker->exit != nullptr) return;  // gone: dropped here
  idle.add(kj::mv(worker));
}

kj::Promise<kj::Own<ExecutorPool::Lease>> ExecutorPool::acquire(kj::StringPtr executor) {
  // The most recently used idle process first (its caches are warmest);
  // dead ones are dropped on the way.
  for (size_t i = idle.size(); i > 0; i--) {
    auto& candidate = idle[i - 1];
    if (candidate->executor != executor) continue;
    auto worker = kj::mv(candidate);
    for (size_t j = i; j < idle.size(); j++) idle[j - 1] = kj::mv(idle[j]);
    idle.removeLast();
    if (worker->exit != nullptr) continue;
    return kj::Own<Lease>(kj::heap<Lease>(*this, kj::mv(worker)));
  }
  KJ_IF_MAYBE(k, findExecutor(executor)) {
    return kj::Own<Lease>(kj::heap<Lease>(*this, spawn(k->name, k->program)));
  }
  return SQUALL_EXCEPTION(FAILED, "this governor has no executor ", executor);
}

ExecutorPool::Lease::Lease(ExecutorPool& pool, kj::Own<Worker> worker) : pool(pool), worker(kj::mv(worker)) {}

ExecutorPool::Lease::~Lease() noexcept(false) {
  KJ_IF_MAYBE(w, worker) {
    // Not released: the call did not end well. The process goes, with
    // everything it started.
    (*w)->child->killGroup(SIGKILL);
  }
}

wire::Executor::Client& ExecutorPool::Lease::executor() { return KJ_ASSERT_NONNULL(worker)->cap; }

ChildProcess& ExecutorPool::Lease::process() { return *KJ_ASSERT_NONNULL(worker)->child; }

void ExecutorPool::Lease::release() {
  KJ_IF_MAYBE(w, worker) {
    auto mine = kj::mv(*w);
    worker = nullptr;
    pool.giveBack(kj::mv(mine));
  }
}

kj::Promise<kj::Maybe<kj::String>> ExecutorPool::Lease::deathReason(kj::Duration wait) {
  auto& w = *KJ_ASSERT_NONNULL(worker);
  return w.exited.addBranch().exclusiveJoin(pool.timer.afterDelay(wait)).then([&w]() -> kj::Maybe<kj::String> {
    KJ_IF_MAYBE(exit, w.exit) { return exitText(*exit); }
    return nullptr;
  });
}

}  // namespace squall
