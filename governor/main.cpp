// squall-governor: parses flags, builds the governor's services, registers
// with the server and runs the loop until a signal or the server goes away.
// Single-threaded (the KJ loop, with libuv inside); libuv's pool does file work.
#include "data-service.h"
#include "dir-tree.h"
#include "actor-host.h"
#include "executor-pool.h"
#include "governor-control.h"
#include "input-isolation.h"
#include "memory-tier.h"
#include "object-store.h"
#include "process-sets.h"
#include "resources.h"
#include "direct-calls.h"
#include "result-batcher.h"
#include "server-link.h"
#include "stream-hub.h"
#include "task-env.h"

#include <algorithm>
#include "task-queue.h"
#include "uv-bridge.h"

#include <CLI/CLI.hpp>
#include <squall/proto/version.h>
#include <capnp/rpc.h>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/debug.h>
#include <malloc.h>
#include <sched.h>
#include <squall/proto/errors.h>
#include <squall/proto/lifeline.h>
#include <squall/proto/listener.h>
#include <squall/proto/logging.h>
#include <squall/proto/rpc.h>
#include <squall/proto/tls.h>
#include <squall/proto/token.h>
#include <thread>
#include <unistd.h>

namespace squall {
namespace {

struct Flags {
  std::string server;
  std::string listen = "127.0.0.1:0";
  std::string workDir;
  uint32_t cpus = 0;
  std::string name;
  std::string token;
  std::string tokenFile;
  std::string logLevel = "info";
  double connectTimeout = 10;
  double authTimeout = 5;
  double reconnectTimeout = 600;
  double serverTimeout = 30;
  double uploadTtl = 900;
  uint64_t memoryMb = 256;
  std::string storeMemory = "auto";
  std::vector<std::string> allowPaths;
  std::vector<std::string> executors;
  bool insecure = false;
  squall::TlsFiles tls;
  uint32_t executorPipeline = squall::ExecutorPool::DEFAULT_PIPELINE;
  std::vector<std::string> resources;
  bool detect = false;
  std::string procRoot = "/proc";
  std::string compressStreams = "auto";
  std::string inputIsolation = "auto";
  bool noTaskCgroups = false;
  int lifelineFd = -1;
  // Bounds on dir objects (tree-walk.h); defaults there.
  TreeLimits treeLimits;
};

// What the governor offers besides cpus: what it detects, each pool
// replaced by a --resource of the same name, and the --resource pools.
std::vector<ResourcePool> offeredPools(const Flags& flags) {
  auto pools = detectResources(flags.procRoot, [](const char* name) { return getenv(name); });
  std::vector<ResourcePool> given;
  for (auto& flag : flags.resources) {
    auto pool = parseResourcePool(flag);
    for (auto& other : given) {
      if (other.name == pool.name) throw std::invalid_argument("--resource " + pool.name + " is given twice");
    }
    given.push_back(std::move(pool));
  }
  for (auto& pool : given) {
    pools.erase(std::remove_if(pools.begin(), pools.end(), [&](auto& p) { return p.name == pool.name; }),
                pools.end());
    pools.push_back(pool);
  }
  return pools;
}

uint32_t detectCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  uint32_t n = std::thread::hardware_concurrency();
  return n > 0 ? n : 1;
}

kj::String hostName() {
  char buffer[256];
  if (gethostname(buffer, sizeof(buffer)) < 0) return kj::str("localhost");
  buffer[sizeof(buffer) - 1] = '\0';
  return kj::str(buffer);
}

// Exits 2 with `message` on stderr (bad flags).
// The environment of executor processes: the governor's, and how a
// function reaches the server to submit tasks (docs/nested.md): its
// address, the token and the TLS files, replacing whatever the governor
// itself was started with under those names. The token goes in the
// environment (readable by the same user only), never on a command line.
kj::Vector<kj::String> executorEnvironment(const std::string& server, const std::string& token,
                                           const squall::TlsFiles& tls, kj::StringPtr governorName) {
  kj::Vector<kj::String> env;
  for (auto& var : captureEnvironment()) {
    kj::StringPtr text = var;
    bool ours = false;
    for (const char* name : {"SQUALL_SERVER=", "SQUALL_TOKEN=", "SQUALL_TOKEN_FILE=", "SQUALL_TLS_CERT=",
                             "SQUALL_TLS_KEY=", "SQUALL_TLS_CA=", "SQUALL_GOVERNOR_NAME="}) {
      if (text.startsWith(name)) ours = true;
    }
    if (!ours) env.add(kj::mv(var));
  }
  env.add(kj::str("SQUALL_SERVER=", server.c_str()));
  // Which node a function runs on (Ray's get_runtime_context().get_node_id()).
  env.add(kj::str("SQUALL_GOVERNOR_NAME=", governorName));
  if (!token.empty()) env.add(kj::str("SQUALL_TOKEN=", token.c_str()));
  if (!tls.cert.empty()) env.add(kj::str("SQUALL_TLS_CERT=", tls.cert.c_str()));
  if (!tls.key.empty()) env.add(kj::str("SQUALL_TLS_KEY=", tls.key.c_str()));
  if (!tls.ca.empty()) env.add(kj::str("SQUALL_TLS_CA=", tls.ca.c_str()));
  return env;
}

// What a stranger who reaches the data service could do, for the token
// checks and warnings.
constexpr const char* EXPOSED = "read every object this governor holds";

[[noreturn]] void usageError(kj::StringPtr message) {
  fprintf(stderr, "squall-governor: %s\n", message.cStr());
  exit(2);
}

// Exits 1 with `message` on stderr (a runtime failure).
[[noreturn]] void fatal(kj::StringPtr message) {
  fprintf(stderr, "squall-governor: %s\n", message.cStr());
  fflush(stderr);
  exit(1);
}

int run(const Flags& flags) {
  std::shared_ptr<spdlog::logger> loggerPtr;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { loggerPtr = makeLogger("governor", flags.logLevel); })) {
    usageError(kj::str("bad --log-level '", flags.logLevel.c_str(),
                       "': use trace, debug, info, warn, error or off"));
  }
  spdlog::logger& logger = *loggerPtr;
  KjLogForwarder forwarder(logger);

  // Input isolation (input-isolation.h). The namespace must be entered
  // before any thread exists; the store view is mounted once the store's
  // directory is there. `copyReason` says why inputs are copied instead.
  auto isolation = KJ_ASSERT_NONNULL(parseIsolationChoice(flags.inputIsolation.c_str()));
  bool ownNamespace = false;
  kj::String namespaceDetail = kj::str();
  kj::Maybe<kj::String> copyReason;
  if (isolation == IsolationChoice::COPY) {
    copyReason = kj::str("--input-isolation copy");
  } else {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  auto entered = enterOwnMountNamespace();
                  ownNamespace = entered.entered;
                  namespaceDetail = kj::mv(entered.detail);
                })) {
      fatal(kj::str("cannot set up a namespace of its own: ", e->getDescription()));
    }
    if (!ownNamespace) {
      if (isolation == IsolationChoice::MOUNT) {
        fatal(kj::str("--input-isolation mount: ", namespaceDetail,
                      "; run as root, allow user namespaces, or use --input-isolation copy"));
      }
      copyReason = kj::mv(namespaceDetail);
    }
  }

  std::string token;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { token = resolveToken(flags.token, flags.tokenFile); })) {
    usageError(kj::str("cannot read the token: ", e->getDescription()));
  }
  kj::Own<Tls> tls;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { tls = Tls::load(resolveTls(flags.tls)); })) {
    usageError(userMessage(*e));
  }
  if (tls.get() != nullptr && !tls->serves()) {
    usageError("TLS needs the governor's certificate and key (--tls-cert, --tls-key): it serves its data service "
               "over TLS too");
  }
  // Its data service serves every object it holds.
  auto openProblem =
      openListenProblem(flags.listen, token, flags.insecure, EXPOSED);
  if (!openProblem.empty()) usageError(kj::str(openProblem.c_str()));

  // Work directory: ours (temporary, removed at exit) unless given.
  kj::String workDir;
  bool ownWorkDir = false;
  if (flags.workDir.empty()) {
    const char* tmp = getenv("TMPDIR");
    auto pattern = kj::str(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/squall-governor-XXXXXX");
    if (mkdtemp(pattern.begin()) == nullptr) {
      fatal(kj::str("cannot create a work directory ", pattern, ": ", strerror(errno)));
    }
    workDir = kj::mv(pattern);
    ownWorkDir = true;
  } else {
    workDir = kj::str(flags.workDir.c_str());
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { makeDirs(workDir); })) {
      fatal(kj::str("cannot create the work directory ", workDir, ": ", e->getDescription()));
    }
  }
  AllowedRoots allowedRoots;
  {
    kj::Vector<kj::String> roots;
    for (auto& path : flags.allowPaths) roots.add(kj::str(path.c_str()));
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { allowedRoots = AllowedRoots(roots); })) {
      usageError(e->getDescription());
    }
  }
  auto tasksDir = kj::str(workDir, "/tasks");
  auto objectsDir = kj::str(workDir, "/objects");
  kj::String name = flags.name.empty() ? kj::str(hostName(), ":", getpid()) : kj::str(flags.name.c_str());

  // Before any program starts: they must not inherit it.
  kj::AutoCloseFd lifeline;
  if (flags.lifelineFd >= 0) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { lifeline = adoptLifeline(flags.lifelineFd); })) {
      usageError(userMessage(*e));
    }
  }

  // Signals KJ watches must be captured before any thread exists (libuv's
  // pool starts lazily). SIGCHLD stays with libuv.
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  signal(SIGPIPE, SIG_IGN);
  // Streams move 1 MiB messages through capnp (built and read afresh for
  // each chunk). glibc's adaptive thresholds hand such blocks back to the
  // kernel and fault them in again each time; measured here, a stream
  // between two governors went from ~300 to ~600 MB/s with the heap kept.
  // Memory stays bounded: streams hold a few chunks at a time.
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 128 << 20);

  auto openFiles = raiseOpenFilesLimit();
  auto io = kj::setupAsyncIo();
  auto& timer = io.provider->getTimer();
  // With TLS, every connection it makes or accepts (the server, other
  // governors' data services, its own) is one.
  kj::Own<kj::Network> tlsNetwork;
  if (tls.get() != nullptr) tlsNetwork = tls->wrap(io.provider->getNetwork());
  auto& network = tls.get() != nullptr ? *tlsNetwork : io.provider->getNetwork();

  // Set when the governor stops for a reason the operator must see.
  kj::Maybe<kj::String> failure;
  // Builds the services, registers, serves; returns the exit code. Every
  // object it builds is gone (children killed, handles closed) when it returns.
  auto serve = [&]() -> int {
    UvBridge bridge(io.unixEventPort, timer, logger);
    ProcessSets processSets(bridge, timer, logger, {!flags.noTaskCgroups});
    kj::Maybe<ObjectStore> storeSlot;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  // Sandboxes an earlier run left (a crash, kill -9) go,
                  // whatever they hold; what cannot is set aside.
                  KJ_IF_MAYBE(left, freshDirectory(tasksDir)) {
                    logger.warn("event=leftover-not-removed dir={} moved_to={} error=\"{}\"",
                                tasksDir.cStr(), left->movedTo.cStr(), left->error.cStr());
                  }
                  storeSlot.emplace(bridge, kj::str(objectsDir), logger, flags.memoryMb << 20,
                                    flags.treeLimits);
                })) {
      failure = kj::str("cannot prepare the work directory ", workDir, ": ", e->getDescription());
      return 1;
    }
    auto& store = KJ_ASSERT_NONNULL(storeSlot);
    // The store's memory tier (memory-tier.h), before the store view so
    // the view shows it (a tmpfs under the store's directory).
    kj::Maybe<MemoryTierDir> memoryTier;
    {
      uint64_t capacity = flags.storeMemory == "auto" ? defaultStoreMemory(flags.procRoot.c_str())
                                                      : KJ_ASSERT_NONNULL(parseStoreMemory(flags.storeMemory.c_str()));
      if (capacity > 0) {
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                      memoryTier.emplace(store.directory(), ownNamespace, "/dev/shm", logger);
                    })) {
          logger.warn("event=memory-tier-off error=\"{}\"", e->getDescription().cStr());
        }
      }
      KJ_IF_MAYBE(tier, memoryTier) {
        if (flags.storeMemory == "auto" && !tier->hasHugePages()) {
          // Without huge pages the page cache serves mapped reads faster
          // (docs/decisions-ray.md): only a size given asks for it then.
          logger.info("event=memory-tier-off reason=\"no tmpfs with huge pages ({}); --store-memory SIZE asks "
                      "for one anyway\"",
                      tier->how().cStr());
          memoryTier = nullptr;
        }
      }
      KJ_IF_MAYBE(tier, memoryTier) {
        store.useMemoryTier(kj::str(tier->path()), capacity);
        logger.info("event=memory-tier dir={} kind={} huge_pages={} capacity={}", tier->path().cStr(),
                    tier->how().cStr(), tier->hasHugePages(), capacity);
      } else if (capacity == 0) {
        logger.info("event=memory-tier-off reason=\"--store-memory 0\"");
      }
    }
    TaskEnv env{bridge,        timer,        store, logger, kj::str(tasksDir), kj::str(name),
                captureEnvironment(), kj::mv(allowedRoots)};
    env.processSets = processSets;
    logger.info("event=task-processes mode=\"{}\"", processSets.describe().cStr());
    // Unmounted (before the work directory is removed) when serve() returns.
    kj::Maybe<StoreView> storeView;
    if (ownNamespace) {
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                    char absolute[PATH_MAX];
                    if (realpath(workDir.cStr(), absolute) == nullptr) {
                      KJ_FAIL_SYSCALL("realpath", errno, workDir);
                    }
                    storeView.emplace(store.directory(), kj::str(absolute, "/objects-ro"));
                  })) {
        if (isolation == IsolationChoice::MOUNT) {
          failure = kj::str("--input-isolation mount: ", e->getDescription());
          return 1;
        }
        copyReason = kj::str(e->getDescription());
      }
    }
    KJ_IF_MAYBE(view, storeView) {
      env.storeView = *view;
      logger.info("event=input-isolation mode=mount namespace=\"{}\" view={}", namespaceDetail.cStr(),
                  view->path().cStr());
    } else KJ_IF_MAYBE(reason, copyReason) {
      if (isolation == IsolationChoice::COPY) {
        logger.info("event=input-isolation mode=copy reason=\"{}\"", reason->cStr());
      } else {
        logger.warn("event=input-isolation mode=copy reason=\"{}\" cost=\"every input is copied\"",
                    reason->cStr());
      }
    }
    DataServiceEnv dataEnv{store, logger, kj::str(token.c_str()), kj::str(name)};
    DataFetcher fetcher(network, bridge, store, kj::str(token.c_str()), logger);
    // Big constants clients upload here (docs/decisions-ray.md).
    UploadTable uploads(bridge, store, timer, logger, kj::str(name),
                        static_cast<int64_t>(flags.uploadTtl * 1000) * kj::MILLISECONDS);
    dataEnv.uploads = uploads;
    StreamHub streams(io.unixEventPort, timer, bridge, store, fetcher, logger, kj::str(name),
                      KJ_ASSERT_NONNULL(parseCompressStreams(flags.compressStreams.c_str())));
    env.streams = streams;
    dataEnv.streams = streams;

    // Executors (tasklib): started now, to learn their functions.
    kj::Vector<ExecutorDecl> decls;
    for (auto& text : flags.executors) {
      kj::String error;
      KJ_IF_MAYBE(decl, parseExecutorDecl(text.c_str(), error)) {
        decls.add(kj::mv(*decl));
      } else {
        failure = kj::str("bad --executor: ", error);
        return 1;
      }
    }
    ExecutorPool executors(bridge, timer, *io.lowLevelProvider, logger,
                           executorEnvironment(flags.server, token, resolveTls(flags.tls), name), kj::str(tasksDir),
                           flags.executorPipeline);
    // What executors print: each call's, kept as its tails and sent to its
    // session's watchers (docs/ray.md, "Output").
    TaskOutputs outputs(timer, logger);
    executors.printTo(outputs);
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { executors.start(kj::mv(decls)).wait(io.waitScope); })) {
      failure = kj::str(userMessage(*e));
      return 1;
    }
    env.executors = executors;
    // Declared before the queue, whose actor tasks and calls use it.
    ActorHosts actors(executors, timer, logger);
    env.actors = actors;

    // Actor calls clients send here directly (docs/actors.md).
    DirectCalls direct(store, actors, name, logger);
    dataEnv.directCalls = direct;
    // A direct call whose function submits tasks is recorded first.
    executors.recordCallsWith([&direct](Id task) { return direct.record(task); });

    // Results wait in the batcher while no server connection is up.
    ResultBatcher batcher(timer, logger);
    TaskQueue queue(env, fetcher, flags.cpus, offeredPools(flags), [&batcher, &direct, &outputs](TaskOutcome outcome) {
      outputs.finish(outcome);
      direct.ended(outcome);
      batcher.report(kj::mv(outcome));
    });
    direct.useQueue(queue);
    queue.onDry([&batcher]() { batcher.ranDry(); });

    // Data service.
    kj::Own<kj::ConnectionReceiver> receiver;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  receiver = listenOn(io.provider->getNetwork(), flags.listen.c_str()).wait(io.waitScope);
                })) {
      failure = kj::str("cannot listen on ", flags.listen.c_str(), ": ", e->getDescription());
      return 1;
    }
    auto listenHost = kj::str(flags.listen.substr(0, flags.listen.rfind(':')).c_str());
    if (listenHost == "0.0.0.0" || listenHost == "*" || listenHost == "::" || listenHost == "[::]") {
      // Listening everywhere: advertise a name other hosts can reach.
      listenHost = hostName();
    }
    auto dataAddress = kj::str(listenHost, ":", receiver->getPort());
    ListenerOptions listenerOptions;
    listenerOptions.service = "data";
    listenerOptions.authTimeout = static_cast<int64_t>(flags.authTimeout * 1000) * kj::MILLISECONDS;
    // Accepted plain and made TLS by the listener, each handshake on its own
    // and within the deadline.
    if (tls.get() != nullptr) listenerOptions.tls = &tls->tlsContext();
    RpcListener listener(
        kj::mv(receiver),
        [&dataEnv](kj::Own<PeerGate> gate) -> capnp::Capability::Client {
          return kj::heap<DataBootstrapImpl>(dataEnv, kj::mv(gate));
        },
        timer, logger, listenerOptions);
    // The listener ends only when accepting cannot succeed again; the
    // governor then stops (exit 1) rather than take tasks whose outputs no
    // one could fetch.
    kj::Maybe<kj::String> listenerEnded;
    auto listenerStop = kj::newPromiseAndFulfiller<void>();
    auto listening = listener.run()
                         .catch_([&logger, &listenerEnded, &listenerStop](kj::Exception&& e) {
                           logger.error("event=listener-ended service=data error=\"{}\" action=shutdown",
                                        e.getDescription().cStr());
                           listenerEnded = kj::str("the data service's listener ended: ", e.getDescription());
                           listenerStop.fulfiller->fulfill();
                         })
                         .eagerlyEvaluate(nullptr);

    // Server connection and registration; after a lost connection the
    // link registers again with what the governor still holds and runs.
    auto seconds = [](double value) { return static_cast<int64_t>(value * 1000) * kj::MILLISECONDS; };
    ServerLink link(network, timer, store, queue, batcher, logger,
                    ServerLinkOptions{kj::str(flags.server.c_str()), kj::str(token.c_str()), kj::str(name),
                                      kj::str(dataAddress), flags.cpus, executors, seconds(flags.connectTimeout),
                                      seconds(flags.reconnectTimeout), seconds(flags.serverTimeout), direct,
                                      uploads, outputs});
    direct.recordWith([&link](wire::Graph::Reader call) { return link.recordDirect(call); });
    auto connected = link.connect(io.waitScope);
    KJ_IF_MAYBE(message, connected.tryGet<kj::String>()) {
      failure = kj::mv(*message);
      return 1;
    }
    uint32_t governorId = connected.get<uint32_t>();
    printf("registered governor=%u data=%s\n", governorId, dataAddress.cStr());
    fflush(stdout);
    for (auto& warning : tokenWarnings(flags.listen, dataAddress.cStr(), token, !flags.token.empty(), EXPOSED)) {
      logger.warn("{}", warning);
    }
    logger.info(
        "event=registered governor={} name={} data={} cpus={} work_dir={} allowed=\"{}\" open_files_limit={}",
        governorId, name.cStr(), dataAddress.cStr(), flags.cpus, workDir.cStr(), env.allowedRoots.describe().cStr(),
        openFiles);

    kj::Promise<void> stopAsked = io.unixEventPort.onSignal(SIGINT)
                                      .exclusiveJoin(io.unixEventPort.onSignal(SIGTERM))
                                      .then([&logger](siginfo_t info) {
                                        logger.info("event=signal signal={}",
                                                    signalName(info.si_signo).cStr());
                                      });
    if (lifeline != nullptr) {
      // Its starter has gone (killed, crashed): stop as on SIGTERM.
      stopAsked = stopAsked.exclusiveJoin(lifelineCut(io.unixEventPort, lifeline).then([&logger]() {
        logger.info("event=starter-gone action=shutdown");
      }));
    }
    stopAsked = stopAsked.exclusiveJoin(kj::mv(listenerStop.promise));
    auto signalled = stopAsked.fork();
    int exitCode = 0;
    KJ_IF_MAYBE(why, link.run(io.waitScope, signalled)) {
      failure = kj::mv(*why);
      exitCode = 1;
    }
    KJ_IF_MAYBE(why, listenerEnded) {
      failure = kj::mv(*why);
      exitCode = 1;
    }

    // Kill running tasks; wait (bounded) for their children and sandboxes.
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  timer.timeoutAfter(10 * kj::SECONDS, queue.shutdown()).wait(io.waitScope);
                })) {
      logger.warn("event=shutdown-timeout error=\"{}\"", e->getDescription().cStr());
    }
    // Executors' hosts may call in as they go: nothing of what goes first.
    executors.stopRecordingCalls();
    direct.stopRecording();
    executors.shutdown().wait(io.waitScope);
    // Connections go before the services they call into.
    link.disconnect();
    listening = nullptr;
    return exitCode;
  };
  int exitCode = serve();
  // Every process it started is gone: what is left was left by them.
  ProcessSets::killAdoptedAtExit(logger);

  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                removeTree(tasksDir);
                removeTree(objectsDir);
                if (ownWorkDir) removeTree(workDir);
              })) {
    logger.warn("event=cleanup-failed error=\"{}\"", e->getDescription().cStr());
  }
  KJ_IF_MAYBE(message, failure) {
    fprintf(stderr, "squall-governor: %s\n", message->cStr());
    fflush(stderr);
  }
  logger.info("event=exit code={}", exitCode);
  return exitCode;
}

}  // namespace
}  // namespace squall

int main(int argc, char** argv) {
  squall::Flags flags;
  const char* envServer = getenv("SQUALL_SERVER");
  flags.server = envServer != nullptr && *envServer != '\0' ? envServer : "127.0.0.1:7210";
  flags.cpus = squall::detectCpus();

  CLI::App app{"squall-governor: runs the tasks a squall server assigns to this node"};
  app.set_version_flag("--version", squall::versionText("squall-governor"));
  app.add_option("--server", flags.server, "server address HOST:PORT (default $SQUALL_SERVER or 127.0.0.1:7210)");
  app.add_option("--listen", flags.listen, "address of the data service HOST:PORT (port 0: any free port)");
  app.add_option("--work-dir", flags.workDir, "directory for objects and task sandboxes (default: a new temp dir)");
  app.add_option("--cpus", flags.cpus, "cpus offered to tasks (default: detected)")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--name", flags.name, "governor name (default HOSTNAME:PID)");
  app.add_option("--token", flags.token, "shared secret (default $SQUALL_TOKEN)");
  app.add_option("--token-file", flags.tokenFile,
                 "file holding the shared secret (default: $SQUALL_TOKEN_FILE, else the file `squall start` "
                 "makes, if it exists: docs/deploy.md)");
  app.add_option("--tls-cert", flags.tls.cert,
                 "PEM certificate: the data service serves TLS and the governor shows it to its peers (with "
                 "--tls-key; default $SQUALL_TLS_CERT)");
  app.add_option("--tls-key", flags.tls.key, "PEM private key of --tls-cert (default $SQUALL_TLS_KEY)");
  app.add_option("--tls-ca", flags.tls.ca,
                 "PEM CA the server and other governors must be signed by (default $SQUALL_TLS_CA)");
  app.add_flag("--insecure", flags.insecure,
               "let the data service listen off loopback without a token: anyone who can reach it can read "
               "every object this governor holds");
  app.add_option("--log-level", flags.logLevel, "trace, debug, info, warn, error or off");
  app.add_option("--auth-timeout", flags.authTimeout,
                 "seconds a connection to the data service has to show its token (its TLS handshake "
                 "included) before it is closed")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  app.add_option("--connect-timeout", flags.connectTimeout, "seconds to keep retrying the server")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--reconnect-timeout", flags.reconnectTimeout,
                 "seconds to keep trying to reach the server again after losing it (tasks keep "
                 "running meanwhile); then the governor exits")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--server-timeout", flags.serverTimeout,
                 "seconds the server has to answer this governor's heartbeat before the connection "
                 "counts as lost and is made again (0: only a dropped connection counts)")
      ->check(CLI::Range(0.0, 86400.0));
  app.add_option("--upload-ttl", flags.uploadTtl,
                 "seconds a finished upload of a big constant waits for the submit that names it "
                 "before it is removed")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--memory-mb", flags.memoryMb, "memory for small in-memory objects, MiB")
      ->check(CLI::Range(uint64_t(0), uint64_t(1) << 30));
  app.add_option("--store-memory", flags.storeMemory,
                 "the object store's memory tier: bytes (suffix K, M, G or T) of objects kept in shared memory "
                 "before the least recently used spill to the work dir; 0 for none; auto: 30% of the memory "
                 "available at start")
      ->check([](const std::string& text) -> std::string {
        if (text == "auto" || squall::parseStoreMemory(text.c_str()) != nullptr) return "";
        return "'" + text + "' is not a size in bytes (such as 512M or 4G), 0 or auto";
      });
  app.add_option("--allow-path", flags.allowPaths,
                 "a directory (and everything under it) that load, load_dir and store tasks may "
                 "read and write; repeatable; none by default")
      ->type_name("DIR");
  app.add_option("--executor", flags.executors,
                 "an executor program (built on squall's tasklib) whose functions this governor runs as "
                 "call tasks, as NAME=PROGRAM; repeatable. Started with the governor to learn its "
                 "functions and kept warm (docs/tasklib.md)")
      ->type_name("NAME=PROGRAM");
  app.add_option("--executor-pipeline", flags.executorPipeline,
                 "calls an executor process may hold at once, the running one included: when no cpu is "
                 "free, a call of a short function (its recent calls ran under 1 ms) may wait behind the calls "
                 "of a busy process instead of for a cpu (docs/tasklib.md); 1: one call at a time")
      ->check(CLI::Range(1, 1024));
  app.add_option("--resource", flags.resources,
                 "a resource offered to tasks besides cpus: NAME=[ID,ID,...] (items with ids), NAME=COUNT "
                 "(items 0..COUNT-1) or NAME=sum(AMOUNT) (an amount, e.g. sum(200G)); repeatable; replaces a "
                 "detected pool of that name (docs/resources.md)")
      ->type_name("NAME=VALUE");
  app.add_flag("--detect", flags.detect, "print the resources this governor would offer and exit");
  app.add_option("--proc", flags.procRoot, "where /proc is, for detecting memory and GPUs (tests)")
      ->group("");
  app.add_option("--lifeline-fd", flags.lifelineFd,
                 "the read end of a pipe inherited from the process that starts the governor: "
                 "when it reaches end of file (that process has gone), the governor stops as on "
                 "SIGTERM, killing its tasks")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--compress-streams", flags.compressStreams,
                 "LZ4 for live streams read from other governors: auto (unless the producer's "
                 "address is a loopback one), on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  app.add_flag("--no-task-cgroups", flags.noTaskCgroups,
               "keep each task's processes together by a mark in their environment only, not by a cgroup of "
               "their own even where the governor's cgroup can be divided");
  app.add_option("--input-isolation", flags.inputIsolation,
                 "how programs are kept from changing their inputs' objects: mount (inputs reached "
                 "through a read-only mount of the store: writes fail; needs root or user "
                 "namespaces), copy (each input a private copy: costs its bytes) or auto (mount "
                 "where possible)")
      ->check(CLI::IsMember({"auto", "mount", "copy"}));
  app.add_option("--max-dir-depth", flags.treeLimits.maxDepth,
                 "deepest level a dir object may have (an output, a dir constant, a fetched or "
                 "loaded tree): a task whose output goes deeper fails, naming the limit")
      ->check(CLI::Range(1u, 100000u))
      ->capture_default_str();
  app.add_option("--max-dir-entries", flags.treeLimits.maxEntries,
                 "most entries (files, directories, links) a dir object may hold; a task whose "
                 "output holds more fails, naming the limit")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 40))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  std::vector<squall::ResourcePool> pools;
  try {
    pools = squall::offeredPools(flags);
  } catch (const std::invalid_argument& e) {
    squall::usageError(kj::str(e.what()));
  }
  if (flags.detect) {
    printf("cpus: %u (ids 0..%u)\n", flags.cpus, flags.cpus - 1);
    for (auto& pool : pools) {
      if (pool.indexed) {
        std::string ids;
        for (auto& id : pool.ids) ids += (ids.empty() ? "" : ",") + id;
        printf("%s: %zu (ids %s)\n", pool.name.c_str(), pool.ids.size(), ids.c_str());
      } else {
        printf("%s: %s\n", pool.name.c_str(), squall::formatAmount(pool.total).c_str());
      }
    }
    return 0;
  }
  for (auto* address : {&flags.server, &flags.listen}) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { squall::checkAddress(address->c_str()); })) {
      squall::usageError(kj::str("bad address '", address->c_str(), "': expected HOST:PORT"));
    }
  }
  return squall::run(flags);
}
