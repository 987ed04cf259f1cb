#include <squall/proto/listener.h>

#include <squall/proto/rpc.h>

#include <arpa/inet.h>
#include <fstream>
#include <kj/debug.h>
#include <netinet/in.h>
#include <sys/resource.h>

namespace squall {

uint64_t raiseOpenFilesLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  rlim_t target = limit.rlim_max;
  if (target == RLIM_INFINITY) {
    // The kernel refuses more than fs.nr_open.
    target = 1024 * 1024;
    std::ifstream nrOpen("/proc/sys/fs/nr_open");
    uint64_t value = 0;
    if (nrOpen >> value && value > 0) target = value;
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < target) {
    struct rlimit raised = limit;
    raised.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) return target;
  }
  return limit.rlim_cur;
}

void RateLimitedLog::warn(const std::string& line) {
  auto now = timer.now();
  if (now - windowStart >= window) {
    windowStart = now;
    inWindow = 0;
  }
  if (inWindow >= burst) {
    suppressed++;
    suppressedTotal++;
    return;
  }
  inWindow++;
  if (suppressed > 0) {
    logger.warn("{} suppressed={}", line, suppressed);
    suppressed = 0;
  } else {
    logger.warn("{}", line);
  }
}

bool acceptErrorIsTransient(const kj::Exception& e) {
  // kj turns EMFILE, ENFILE, ENOBUFS and ENOMEM into OVERLOADED, and a
  // connection reset before it was accepted into DISCONNECTED.
  return e.getType() == kj::Exception::Type::OVERLOADED || e.getType() == kj::Exception::Type::DISCONNECTED;
}

namespace {

kj::Duration nextBackoff(kj::Duration backoff) {
  if (backoff < 10 * kj::MILLISECONDS) return 10 * kj::MILLISECONDS;
  return kj::min(backoff * 2, 1 * kj::SECONDS);
}

int64_t inMs(kj::Duration d) { return d / kj::MILLISECONDS; }

kj::String peerName(kj::AsyncIoStream& stream) {
  struct sockaddr_storage addr;
  memset(&addr, 0, sizeof(addr));
  uint len = sizeof(addr);
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                stream.getpeername(reinterpret_cast<struct sockaddr*>(&addr), &len);
              })) {
    (void)e;
    return kj::str("?");
  }
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<struct sockaddr_in*>(&addr);
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return kj::str(text, ":", ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    auto* in = reinterpret_cast<struct sockaddr_in6*>(&addr);
    char text[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &in->sin6_addr, text, sizeof(text));
    return kj::str("[", text, "]:", ntohs(in->sin6_port));
  }
  return kj::str("?");
}

}  // namespace

// ------------------------------------------------------------ PeerGate

void PeerGate::admit() {
  if (isAdmitted || isRefused) return;
  isAdmitted = true;
  if (hooks != nullptr) hooks->admitted();
}

void PeerGate::refuse(kj::StringPtr reason) {
  if (isRefused) return;
  isRefused = true;
  if (hooks != nullptr) hooks->refused(reason);
}

// ------------------------------------------------------------ RpcListener

struct RpcListener::Connection final : public PeerGate::Hooks {
  // The RPC system over the connection, once its TLS handshake (if any)
  // is done. Reads gated until the peer authenticates.
  struct Rpc {
    Rpc(kj::AsyncIoStream& stream, capnp::Capability::Client bootstrap, const ListenerOptions& options)
        : messages(stream),
          network((messages.gateReads(options.messagesBeforeAuth, options.wordsBeforeAuth), messages),
                  capnp::rpc::twoparty::Side::SERVER, readerOptions()),
          rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
    BufferedMessageStream messages;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  };

  // `closer`: fulfilled, the connection ends (close()).
  Connection(RpcListener& listener, kj::Own<PeerGate> gate, kj::Own<kj::PromiseFulfiller<void>> closer)
      : listener(listener), gate(kj::mv(gate)), closer(kj::mv(closer)) {
    this->gate->hooks = this;
    listener.waiting.push_back(this);
    waitingAt = --listener.waiting.end();
  }
  ~Connection() noexcept(false) {
    gate->hooks = nullptr;
    leaveWaiting();
  }

  RpcListener& listener;
  kj::Own<PeerGate> gate;
  bool isWaiting = true;
  std::list<Connection*>::iterator waitingAt;
  kj::Own<kj::PromiseFulfiller<void>> closer;
  // After a refusal: the answer written, then close().
  kj::Promise<void> closing = nullptr;
  // Declared before `rpc`, which reads and writes it: goes after it.
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<Rpc> rpc;

  void leaveWaiting() {
    if (!isWaiting) return;
    listener.waiting.erase(waitingAt);
    isWaiting = false;
  }
  void close() { closer->fulfill(); }

  void admitted() override {
    leaveWaiting();
    if (rpc.get() != nullptr) rpc->messages.openGate();
  }

  void refused(kj::StringPtr reason) override {
    listener.refusals.warn(fmt::format("event=auth-refused service={} peer={} reason=\"{}\"",
                                       listener.options.service.cStr(), gate->peer().cStr(), reason.cStr()));
    // After every event queued now, among them the one that writes the
    // refusal's answer; then what is written goes out, and the connection
    // with it.
    closing = kj::evalLast([this]() -> kj::Promise<void> {
                if (rpc.get() == nullptr) return kj::READY_NOW;
                return rpc->messages.drain();
              })
                  .then([this]() { close(); }, [this](kj::Exception&&) { close(); })
                  .eagerlyEvaluate(nullptr);
  }
};

RpcListener::RpcListener(kj::Own<kj::ConnectionReceiver> receiverParam, BootstrapFactory makeBootstrap,
                         kj::Timer& timer, spdlog::logger& logger, ListenerOptions options)
    : receiver(kj::mv(receiverParam)),
      makeBootstrap(kj::mv(makeBootstrap)),
      timer(timer),
      logger(logger),
      options(options),
      refusals(timer, logger),
      drops(timer, logger),
      // Out of descriptors: the oldest connections that have not shown a
      // token give theirs back (a few at a time: one freed is taken by the
      // next connection in the backlog).
      accepting(*receiver, timer, logger, options.service, 0, kj::Function<size_t()>([this]() {
                  size_t closed = 0;
                  while (closed < 16 && closeOldestWaiting("out of descriptors")) closed++;
                  return closed;
                })),
      connections(*this) {}

RpcListener::~RpcListener() noexcept(false) {}

kj::Promise<void> RpcListener::run() {
  return accepting.accept().then(
      [this](kj::Own<kj::AsyncIoStream> stream) -> kj::Promise<void> {
        accepted(kj::mv(stream));
        return run();
      },
      [this](kj::Exception&& e) -> kj::Promise<void> {
        logger.error("event=listener-failed service={} error=\"{}\"", options.service.cStr(),
                     e.getDescription().cStr());
        return kj::mv(e);
      });
}

void RpcListener::accepted(kj::Own<kj::AsyncIoStream> stream) {
  auto gate = kj::refcounted<PeerGate>(peerName(*stream));
  logger.debug("event=accept service={} peer={}", options.service.cStr(), gate->peer().cStr());
  auto closed = kj::newPromiseAndFulfiller<void>();
  auto connection = kj::heap<Connection>(*this, kj::addRef(*gate), kj::mv(closed.fulfiller));
  auto& c = *connection;
  if (waiting.size() > options.maxUnauthenticated) closeOldestWaiting("too many connections waiting to authenticate");

  kj::Promise<kj::Own<kj::AsyncIoStream>> ready =
      options.tls != nullptr ? options.tls->wrapServer(kj::mv(stream))
                             : kj::Promise<kj::Own<kj::AsyncIoStream>>(kj::mv(stream));
  auto life = ready.then([this, &c, gate = kj::mv(gate)](kj::Own<kj::AsyncIoStream> secured) mutable {
    c.stream = kj::mv(secured);
    c.rpc = kj::heap<Connection::Rpc>(*c.stream, makeBootstrap(kj::mv(gate)), options);
    // Admitted already (a bootstrap that admits at once).
    if (c.gate->admitted()) c.rpc->messages.openGate();
    return c.rpc->network.onDisconnect();
  });
  auto deadline = timer.afterDelay(options.authTimeout).then([this, &c]() -> kj::Promise<void> {
    if (c.gate->admitted()) return kj::NEVER_DONE;
    drops.warn(fmt::format("event=auth-timeout service={} peer={} after_ms={} tls_done={}",
                              options.service.cStr(), c.gate->peer().cStr(), inMs(options.authTimeout),
                              c.rpc.get() != nullptr ? "yes" : "no"));
    return kj::READY_NOW;
  });
  connections.add(
      life.exclusiveJoin(kj::mv(closed.promise)).exclusiveJoin(kj::mv(deadline)).attach(kj::mv(connection)));
}

bool RpcListener::closeOldestWaiting(kj::StringPtr why) {
  if (waiting.empty()) return false;
  auto* oldest = waiting.front();
  oldest->leaveWaiting();
  drops.warn(fmt::format("event=connection-closed service={} peer={} reason=\"{}\"", options.service.cStr(),
                            oldest->gate->peer().cStr(), why.cStr()));
  oldest->close();
  return true;
}

void RpcListener::taskFailed(kj::Exception&& exception) {
  logger.debug("event=connection-error service={} error=\"{}\"", options.service.cStr(),
               exception.getDescription().cStr());
}

// ------------------------------------------------------------ RetryingReceiver

RetryingReceiver::RetryingReceiver(kj::ConnectionReceiver& inner, kj::Timer& timer, spdlog::logger& logger,
                                   kj::StringPtr service, size_t maxConnections,
                                   kj::Maybe<kj::Function<size_t()>> makeRoom)
    : inner(inner),
      timer(timer),
      service(service),
      maxConnections(maxConnections),
      makeRoom(kj::mv(makeRoom)),
      errors(timer, logger) {}

kj::Promise<kj::Own<kj::AsyncIoStream>> RetryingReceiver::accept() {
  // (kj's accept() throws at once when accept(2) fails: evalNow makes that
  // a rejection the handler below sees.)
  return kj::evalNow([this]() { return inner.accept(); })
      .then(
          [this](kj::Own<kj::AsyncIoStream> stream) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
            backoff = 0 * kj::SECONDS;
            if (maxConnections > 0 && open >= maxConnections) {
              errors.warn(fmt::format("event=connection-closed service={} peer={} reason=\"{} connections open\"",
                                      service.cStr(), peerName(*stream).cStr(), open));
              stream = nullptr;
              return accept();
            }
            open++;
            return stream.attach(kj::defer([this]() { open--; }));
          },
          [this](kj::Exception&& e) -> kj::Promise<kj::Own<kj::AsyncIoStream>> {
            if (!acceptErrorIsTransient(e)) return kj::mv(e);
            size_t closed = 0;
            if (e.getType() == kj::Exception::Type::OVERLOADED) {
              KJ_IF_MAYBE(room, makeRoom) { closed = (*room)(); }
            }
            // With room made, accepting goes on as soon as it is free.
            backoff = closed > 0 ? 1 * kj::MILLISECONDS : nextBackoff(backoff);
            errors.warn(fmt::format(
                "event=accept-failed service={} error=\"{}\" action=retry retry_ms={} closed_waiting={} connections={}",
                service.cStr(), e.getDescription().cStr(), inMs(backoff), closed, open));
            return timer.afterDelay(backoff).then([this]() { return accept(); });
          });
}

}  // namespace squall
