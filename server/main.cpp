// squall-server: parses flags, wires the server's parts, runs the loop.
#include "src/context.h"
#include "src/http/status-server.h"
#include "src/services.h"

#include <CLI/CLI.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/debug.h>
#include <squall/proto/errors.h>
#include <squall/proto/logging.h>
#include <squall/proto/rpc.h>
#include <squall/proto/token.h>

int main(int argc, char** argv) {
  CLI::App app{"squall-server: sessions, the task graph and scheduling for squall governors"};
  std::string listen = "127.0.0.1:" + std::to_string(squall::SERVER_PORT);
  std::string http = "127.0.0.1:" + std::to_string(squall::STATUS_HTTP_PORT);
  std::string token, tokenFile, logLevel = "info";
  uint32_t queueDepth = squall::SchedulerOptions{}.queueDepth;
  app.add_option("--listen", listen, "host:port for clients and governors (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--http", http,
                 "host:port of the status page and its JSON API (port 0: any free port; "
                 "'off': none). Read-only; keep it on loopback unless you mean to share it")
      ->capture_default_str();
  app.add_option("--token", token, "shared secret peers must present (or $SQUALL_TOKEN)");
  app.add_option("--token-file", tokenFile, "file holding the shared secret");
  app.add_option("--queue-depth", queueDepth,
                 "cpus' worth of tasks queued on a governor beyond its cpus")
      ->capture_default_str();
  app.add_option("--log-level", logLevel, "trace, debug, info, warn, error or off")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::shared_ptr<spdlog::logger> logger;
  std::string secret;
  try {
    logger = squall::makeLogger("server", logLevel);
    secret = squall::resolveToken(token, tokenFile);
    squall::checkAddress(listen);
    if (http != "off") squall::checkAddress(http);
  } catch (const kj::Exception& e) {
    fprintf(stderr, "squall-server: %s\n", squall::userMessage(e).cStr());
    return 2;
  }
  squall::KjLogForwarder forwarder(*logger);

  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  signal(SIGPIPE, SIG_IGN);
  auto io = kj::setupAsyncIo();

  squall::SessionTable sessions(*logger);
  squall::GovernorPool governors;
  auto wallMs = []() -> uint64_t {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  // Declared before the RPC listener: closing a client's sessions as the
  // listener goes reports them to the view.
  squall::StatusView statusView(
      sessions, governors, kj::str("protocol ", squall::wire::PROTOCOL_VERSION).cStr(), wallMs());
  sessions.onClose = [&statusView, &wallMs](const squall::Session& session) {
    statusView.sessionClosed(session, wallMs());
  };
  squall::Scheduler scheduler(squall::SchedulerOptions{queueDepth});
  squall::Dispatcher dispatcher(sessions, governors, scheduler, *logger);
  squall::ServerContext context{sessions, governors, dispatcher, *logger, secret, {}};

  kj::Own<kj::ConnectionReceiver> receiver;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                receiver = squall::listenOn(io.provider->getNetwork(), listen).wait(io.waitScope);
              })) {
    fprintf(stderr, "squall-server: cannot listen on %s: %s\n", listen.c_str(),
            squall::userMessage(*e).cStr());
    return 1;
  }
  squall::RpcListener listener(
      kj::mv(receiver),
      [&context](kj::StringPtr peer) -> capnp::Capability::Client {
        return squall::newBootstrap(context, peer);
      },
      *logger);
  auto host = listen.substr(0, listen.rfind(':'));
  logger->info("event=listening address={}:{}", host, listener.getPort());
  printf("listening address=%s:%u\n", host.c_str(), listener.getPort());
  fflush(stdout);

  // The status page, on its own port of the same loop.
  kj::Own<kj::ConnectionReceiver> httpReceiver;
  kj::Own<squall::StatusServer> statusServer;
  kj::Promise<void> serving = kj::READY_NOW;
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
    serving = statusServer->listen(*httpReceiver).eagerlyEvaluate([&logger](kj::Exception&& e) {
      logger->error("event=status-page-stopped error=\"{}\"", e.getDescription().cStr());
    });
    logger->info("event=status-page address={}:{}", httpHost, httpReceiver->getPort());
    printf("http address=%s:%u\n", httpHost.c_str(), httpReceiver->getPort());
    fflush(stdout);
  }

  auto running = listener.run();
  auto& port = io.unixEventPort;
  auto signalled = port.onSignal(SIGINT)
                       .exclusiveJoin(port.onSignal(SIGTERM))
                       .then([](siginfo_t info) { return info.si_signo; });
  auto stop = running.then([]() { return 0; }).exclusiveJoin(kj::mv(signalled));
  int signo = stop.wait(io.waitScope);
  logger->info("event=shutdown signal={}", signo);
  // Leave without running destructors: the event loop (made before the
  // session table) still holds RPC calls that capnp detached when their
  // connections went, and destroying them later closes sessions in a
  // table that is gone already (an endless loop over freed memory was seen
  // at exit). Nothing else needs flushing: the logs are.
  logger->flush();
  fflush(stdout);
  fflush(stderr);
  std::quick_exit(0);
}
