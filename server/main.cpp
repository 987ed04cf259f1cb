// squall-server: parses flags, wires the server's parts, runs the loop.
#include "src/context.h"
#include "src/services.h"

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
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
  std::string token, tokenFile, logLevel = "info";
  uint32_t queueDepth = squall::SchedulerOptions{}.queueDepth;
  app.add_option("--listen", listen, "host:port for clients and governors (port 0: any free port)")
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

  auto running = listener.run();
  auto& port = io.unixEventPort;
  auto signalled = port.onSignal(SIGINT)
                       .exclusiveJoin(port.onSignal(SIGTERM))
                       .then([](siginfo_t info) { return info.si_signo; });
  auto stop = running.then([]() { return 0; }).exclusiveJoin(kj::mv(signalled));
  int signo = stop.wait(io.waitScope);
  logger->info("event=shutdown signal={}", signo);
  return 0;
}
