// squall-server: parses flags, wires the server's parts, runs the loop.
#include "context.h"
#include "status-server.h"
#include "recovery.h"
#include "services.h"
#include "session-history.h"
#include "session-log.h"

#include <CLI/CLI.hpp>
#include <squall/proto/version.h>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/debug.h>
#include <squall/proto/errors.h>
#include <squall/proto/lifeline.h>
#include <squall/proto/listener.h>
#include <squall/proto/logging.h>
#include <squall/proto/rpc.h>
#include <squall/proto/tls.h>
#include <squall/proto/token.h>

namespace {

// $XDG_STATE_HOME/squall/server.sqlite, else under ~/.local/state.
std::string defaultLogPath() {
  const char* state = getenv("XDG_STATE_HOME");
  if (state != nullptr && *state == '/') return std::string(state) + "/squall/server.sqlite";
  const char* home = getenv("HOME");
  if (home != nullptr && *home == '/') return std::string(home) + "/.local/state/squall/server.sqlite";
  return "squall-server.sqlite";
}

}  // namespace

// What a stranger who reaches the server could do, for its token warnings.
constexpr const char* EXPOSED = "run any program as the governors' users";

int main(int argc, char** argv) {
  CLI::App app{"squall-server: sessions, the task graph and scheduling for squall governors"};
  app.set_version_flag("--version", squall::versionText("squall-server"));
  std::string listen = "127.0.0.1:" + std::to_string(squall::SERVER_PORT);
  std::string http = "127.0.0.1:" + std::to_string(squall::STATUS_HTTP_PORT);
  std::string token, tokenFile, logLevel = "info";
  squall::SchedulerOptions schedulerOptions;
  std::string placement = "blevel";
  std::string logPath = defaultLogPath();
  uint64_t logMaxMb = 0;
  squall::HistoryLimits history;
  double governorGrace = 10, clientGrace = 60, governorTimeout = 30;
  int lifelineFd = -1;
  app.add_option("--listen", listen, "host:port for clients and governors (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--http", http,
                 "host:port of the status page and its JSON API (port 0: any free port; "
                 "'off': none). Read-only; keep it on loopback unless you mean to share it")
      ->capture_default_str();
  app.add_option("--token", token, "shared secret peers must present (or $SQUALL_TOKEN)");
  app.add_option("--token-file", tokenFile,
                 "file holding the shared secret (default: $SQUALL_TOKEN_FILE, else the file `squall start` "
                 "makes, if it exists: docs/deploy.md)");
  squall::TlsFiles tlsFlags;
  app.add_option("--tls-cert", tlsFlags.cert,
                 "PEM certificate: clients and governors reach the server over TLS (with --tls-key; default "
                 "$SQUALL_TLS_CERT)");
  app.add_option("--tls-key", tlsFlags.key, "PEM private key of --tls-cert (default $SQUALL_TLS_KEY)");
  app.add_option("--tls-ca", tlsFlags.ca,
                 "PEM CA: only peers with a certificate it signed get in (default $SQUALL_TLS_CA)");
  bool insecure = false;
  app.add_flag("--insecure", insecure,
               "listen off loopback without a token: anyone who can reach the address can run any program "
               "as the governors' users");
  app.add_option("--queue-depth", schedulerOptions.queueDepth,
                 "cpus' worth of tasks queued on a governor beyond its cpus")
      ->capture_default_str();
  app.add_option("--scheduler", placement,
                 "blevel: critical path first, where the fewest bytes move, with work stealing; "
                 "random: a governor with room at random (a baseline for benchmarks)")
      ->check(CLI::IsMember({"blevel", "random"}))
      ->capture_default_str();
  app.add_option("--scheduler-seed", schedulerOptions.seed, "seed of the random scheduler's draws")
      ->capture_default_str();
  bool noSteal = false;
  app.add_flag("--no-steal", noSteal, "idle governors do not take queued tasks from loaded ones");
  bool noPrefetch = false;
  app.add_flag("--no-prefetch", noPrefetch,
               "finished inputs of a task that waits for others are not sent ahead to where it will "
               "probably run (docs/scheduling.md)");
  app.add_option("--log-level", logLevel, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  app.add_option("--log", logPath,
                 "the session log (SQLite): open sessions, their graphs and finished work, "
                 "replayed when the server starts again; 'off': nothing survives a restart")
      ->capture_default_str();
  app.add_option("--log-max-mb", logMaxMb,
                 "refuse new sessions and submits once the session log reaches this size "
                 "(0: no cap but the disk's)")
      ->capture_default_str();
  app.add_option("--history-sessions", history.sessions,
                 "closed sessions whose graph, timeline, failures and tasks the server keeps for "
                 "the status page and `squall status` (the last closed; 0: none), in the session "
                 "log (in memory with --log off)")
      ->check(CLI::Range(size_t(0), size_t(1000000)))
      ->capture_default_str();
  app.add_option("--history-mb", history.megabytes,
                 "the most MiB those closed sessions may take together; the oldest go first")
      ->check(CLI::Range(uint64_t(1), uint64_t(1) << 20))
      ->capture_default_str();
  app.add_option("--governor-grace", governorGrace,
                 "after a restart, seconds to wait for the log's governors to come back before "
                 "placing tasks (what a missing one held is then made again)")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  app.add_option("--governor-timeout", governorTimeout,
                 "seconds a governor has to answer the server's heartbeat before it is given up "
                 "and its work done elsewhere (0: only a dropped connection counts)")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--client-grace", clientGrace,
                 "after a restart, seconds a client has to re-attach to its non-persistent "
                 "sessions before they are closed")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  app.add_option("--lifeline-fd", lifelineFd,
                 "the read end of a pipe inherited from the process that starts the server: "
                 "when it reaches end of file (that process has gone), the server stops as on "
                 "SIGTERM")
      ->check(CLI::NonNegativeNumber);
  double authTimeout = 5;
  app.add_option("--auth-timeout", authTimeout,
                 "seconds a connection has to show its token (its TLS handshake included) before "
                 "it is closed")
      ->check(CLI::Range(0.1, 600.0))
      ->capture_default_str();
  std::vector<std::string> limitAssignments;
  app.add_option("--limit", limitAssignments,
                 "NAME=VALUE: sets one of the bounds on what clients can submit (repeatable; "
                 "docs/guide.md lists them and their defaults)");
  CLI11_PARSE(app, argc, argv);
  squall::Limits limits;
  for (auto& assignment : limitAssignments) {
    if (auto problem = limits.set(assignment)) {
      fprintf(stderr, "squall-server: --limit %s\n", problem->c_str());
      return 2;
    }
  }

  std::shared_ptr<spdlog::logger> logger;
  std::string secret;
  kj::Own<squall::Tls> tls;
  kj::AutoCloseFd lifeline;
  try {
    if (lifelineFd >= 0) lifeline = squall::adoptLifeline(lifelineFd);
    logger = squall::makeLogger("server", logLevel);
    secret = squall::resolveToken(token, tokenFile);
    tls = squall::Tls::load(squall::resolveTls(tlsFlags));
    if (tls.get() != nullptr && !tls->serves()) {
      fprintf(stderr, "squall-server: TLS needs the server's certificate and key (--tls-cert, --tls-key)\n");
      return 2;
    }
    squall::checkAddress(listen);
    auto problem = squall::openListenProblem(listen, secret, insecure, EXPOSED);
    if (!problem.empty()) {
      fprintf(stderr, "squall-server: %s\n", problem.c_str());
      return 2;
    }
    if (http != "off") squall::checkAddress(http);
  } catch (const kj::Exception& e) {
    fprintf(stderr, "squall-server: %s\n", squall::userMessage(e).cStr());
    return 2;
  }
  squall::KjLogForwarder forwarder(*logger);

  auto openFiles = squall::raiseOpenFilesLimit();
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  signal(SIGPIPE, SIG_IGN);
  auto io = kj::setupAsyncIo();

  squall::SessionTable sessions(*logger);
  squall::SessionHistory sessionHistory(history, *logger);
  squall::GovernorPool governors;
  auto wallMs = []() -> uint64_t {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // Declared before the RPC listener: closing a client's sessions as the
  // listener goes reports them to the view and the history.
  squall::StatusView statusView(sessions, governors, sessionHistory,
                                kj::str("protocol ", squall::wire::PROTOCOL_VERSION).cStr(), wallMs());
  sessions.onClose = [&sessionHistory, &statusView, &wallMs](const squall::Session& session) {
    sessionHistory.keep(session, wallMs(), statusView.sessionClosed(session));
  };
  schedulerOptions.placement = placement == "random" ? squall::Placement::RANDOM : squall::Placement::BLEVEL;
  schedulerOptions.steal = !noSteal;
  schedulerOptions.prefetch = !noPrefetch;
  squall::Scheduler scheduler(schedulerOptions);
  squall::Dispatcher dispatcher(sessions, governors, scheduler, io.provider->getTimer(), *logger);
  squall::ServerContext context{sessions, sessionHistory, governors, dispatcher, *logger, secret, {}};
  context.output.setIsOpen([&sessions](uint64_t id) { return sessions.find(id) != nullptr; });
  context.limits = limits;
  context.timer = &io.provider->getTimer();
  context.governorTimeout = static_cast<int64_t>(governorTimeout * 1000) * kj::MILLISECONDS;

  // The session log, and what it holds from the last run.
  std::unique_ptr<squall::SessionLog> sessionLog;
  if (logPath != "off") {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  // It makes its directory (0700) if need be.
                  sessionLog = std::make_unique<squall::SessionLog>(logPath, *logger);
                  sessionLog->limitSize(logMaxMb);
                })) {
      fprintf(stderr, "squall-server: %s\n", squall::userMessage(*e).cStr());
      return 1;
    } else if (sessionLog == nullptr) {
      fprintf(stderr, "squall-server: cannot create the directory of the session log %s\n",
              logPath.c_str());
      return 1;
    }
    sessions.useLog(sessionLog.get());
    if (!squall::recoverSessions(*sessionLog, sessions, governors, *logger, stderr)) return 1;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { sessionHistory.open(*sessionLog); })) {
      fprintf(stderr, "squall-server: %s\n", squall::userMessage(*e).cStr());
      return 1;
    }
    sessions.reserveIds(sessionHistory.lastId());
  }

  kj::Own<kj::ConnectionReceiver> receiver;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                receiver = squall::listenOn(io.provider->getNetwork(), listen).wait(io.waitScope);
              })) {
    fprintf(stderr, "squall-server: cannot listen on %s: %s\n", listen.c_str(),
            squall::userMessage(*e).cStr());
    return 1;
  }
  squall::ListenerOptions listenerOptions;
  listenerOptions.service = "rpc";
  listenerOptions.authTimeout = static_cast<int64_t>(authTimeout * 1000) * kj::MILLISECONDS;
  // With TLS, every connection accepted is one.
  if (tls.get() != nullptr) listenerOptions.tls = &tls->tlsContext();
  squall::RpcListener listener(
      kj::mv(receiver),
      [&context](kj::Own<squall::PeerGate> gate) -> capnp::Capability::Client {
        return squall::newBootstrap(context, kj::mv(gate));
      },
      io.provider->getTimer(), *logger, listenerOptions);
  auto host = listen.substr(0, listen.rfind(':'));
  logger->info("event=listening address={}:{} auth={} tls={} open_files_limit={}", host, listener.getPort(),
               secret.empty() ? "none" : "token", tls.get() != nullptr ? "on" : "off", openFiles);
  for (auto& warning : squall::tokenWarnings(listen, host + ":" + std::to_string(listener.getPort()), secret,
                                             !token.empty(), EXPOSED)) {
    logger->warn("{}", warning);
  }
  printf("listening address=%s:%u\n", host.c_str(), listener.getPort());
  fflush(stdout);

  // The status page, on its own port of the same loop.
  kj::Own<kj::ConnectionReceiver> httpReceiver;
  kj::Own<squall::RetryingReceiver> httpRetrying;
  kj::Own<squall::StatusServer> statusServer;
  kj::Promise<void> serving = kj::NEVER_DONE;
  if (http != "off") {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  httpReceiver = squall::listenOn(io.provider->getNetwork(), http).wait(io.waitScope);
                })) {
      fprintf(stderr, "squall-server: cannot serve the status page on %s: %s (--http off for none)\n",
              http.c_str(), squall::userMessage(*e).cStr());
      return 1;
    }
    auto httpHost = http.substr(0, http.rfind(':'));
    squall::StatusServerOptions options;
    options.loopbackHostsOnly = squall::isLoopbackHost(httpHost);
    statusServer = kj::heap<squall::StatusServer>(statusView, io.provider->getTimer(), *logger, options);
    httpRetrying = kj::heap<squall::RetryingReceiver>(*httpReceiver, io.provider->getTimer(), *logger, "http");
    // Ends only on an accept that cannot succeed again: the server stops
    // with it (below), never serving on without its page.
    serving = statusServer->listen(*httpRetrying).then([]() -> kj::Promise<void> {
      return KJ_EXCEPTION(FAILED, "the status page's listener ended");
    });
    logger->info("event=status-page address={}:{}", httpHost, httpReceiver->getPort());
    printf("http address=%s:%u\n", httpHost.c_str(), httpReceiver->getPort());
    fflush(stdout);
  }

  // After a restart: governors get a while to come back and say what they
  // still run and hold, clients to re-attach to their sessions.
  kj::Promise<void> graceTimers = kj::READY_NOW;
  if (sessionLog != nullptr) {
    auto& timer = io.provider->getTimer();
    auto ms = [](double seconds) { return static_cast<int64_t>(seconds * 1000) * kj::MILLISECONDS; };
    kj::Vector<kj::Promise<void>> timers;
    if (governors.expectedCount() > 0) {
      dispatcher.hold();
      timers.add(timer.afterDelay(ms(governorGrace)).then([&]() {
        dispatcher.expectedGone(governors.takeExpected());
        dispatcher.resume();
      }));
    }
    std::vector<uint64_t> orphans;
    for (auto& [id, session] : sessions.all()) {
      if (!session.persistent) orphans.push_back(id);
    }
    if (!orphans.empty()) {
      timers.add(timer.afterDelay(ms(clientGrace)).then([&sessions, &dispatcher, &logger, orphans]() {
        for (auto id : orphans) {
          KJ_IF_MAYBE(session, sessions.find(id)) {
            if (session->owner != nullptr) continue;
            logger->info("event=session-not-reattached session={} action=close", id);
            sessions.close(id);
          }
        }
        dispatcher.kick();
      }));
    }
    graceTimers = kj::joinPromises(timers.releaseAsArray()).eagerlyEvaluate(nullptr);
  }

  // A listener that ends (accepts that cannot succeed again: anything but
  // running out of descriptors or memory, which they ride out) stops the
  // server with exit status 1, never silently.
  int listenerFailed = 0;
  auto running = listener.run()
                     .exclusiveJoin(kj::mv(serving))
                     .then([]() { return 0; },
                           [&logger, &listenerFailed](kj::Exception&& e) {
                             logger->error("event=listener-ended error=\"{}\" action=shutdown",
                                           e.getDescription().cStr());
                             fprintf(stderr, "squall-server: stopped: %s\n", squall::userMessage(e).cStr());
                             listenerFailed = 1;
                             return 0;
                           });
  auto& port = io.unixEventPort;
  auto signalled = port.onSignal(SIGINT)
                       .exclusiveJoin(port.onSignal(SIGTERM))
                       .then([](siginfo_t info) { return info.si_signo; });
  auto stop = running.exclusiveJoin(kj::mv(signalled));
  if (lifeline != nullptr) {
    // Its starter has gone (killed, crashed): stop as on SIGTERM.
    stop = stop.exclusiveJoin(squall::lifelineCut(port, lifeline).then([&logger]() {
      logger->info("event=starter-gone action=shutdown");
      return SIGTERM;
    }));
  }
  int signo = stop.wait(io.waitScope);
  logger->info("event=shutdown signal={}", signo);
  // From here on the parts are torn down in reverse order, and the event
  // loop (made first) goes last, with RPC calls capnp detached when their
  // connections went. Their destructors see `running` false and leave the
  // session table alone: shutting down is not a client leaving, and the
  // sessions stay in the log for the next start.
  *context.running = false;
  if (sessionLog != nullptr) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { sessionLog->flush(); })) {
      logger->error("event=log-failed action=final-flush error=\"{}\"", e->getDescription().cStr());
    }
    sessions.useLog(nullptr);
    sessionHistory.detachLog();
  }
  logger->flush();
  return listenerFailed;
}
