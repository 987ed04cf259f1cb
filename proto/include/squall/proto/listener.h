// Where squall's parts accept connections: the server's RPC port, a
// governor's data port (RpcListener) and the status page's HTTP port
// (RetryingReceiver). What a peer that has not authenticated can make
// them do is bounded here, once for all of them (docs/deploy.md, "What a
// peer without the token can cost"):
//
// - An accept that fails for want of resources (EMFILE, ENFILE, ENOMEM,
//   ENOBUFS: kj's OVERLOADED) or because the connection broke first
//   (DISCONNECTED) is no reason to stop listening: the listener backs off
//   (10 ms doubling to 1 s), makes room if it can, and accepts again. Any
//   other failure ends run() with it, and the process that listens stops
//   (a listener never ends silently).
// - At most `maxUnauthenticated` connections wait to authenticate; one
//   more closes the oldest of them. Each has `authTimeout` from its accept
//   to authenticate (its TLS handshake included), or it is closed.
// - Before it has authenticated, a connection's messages are read only a
//   few at a time and small (BufferedMessageStream::gateReads): a later or
//   larger one waits, unread, in the kernel's buffers.
// - A refused authentication closes the connection once its answer is
//   written; refusals are logged at most a few a second, with a count of
//   those left out.
//
// Loop thread only.
#pragma once

#include <squall/proto/message-stream.h>

#include <capnp/capability.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <kj/function.h>
#include <kj/timer.h>
#include <list>
#include <spdlog/logger.h>

namespace squall {

// Raises the soft limit of open files to the hard one (a server holds a
// descriptor per connection; systemd's default soft limit is 1024).
// Returns the soft limit now in force.
uint64_t raiseOpenFilesLimit();

// Logs at most `burst` lines per `window`; the next line logged after some
// were left out says how many (suppressed=N). Loop thread only.
class RateLimitedLog {
 public:
  RateLimitedLog(kj::Timer& timer, spdlog::logger& logger, uint burst = 10,
                 kj::Duration window = 1 * kj::SECONDS)
      : timer(timer), logger(logger), burst(burst), window(window) {}

  // Logs `line` (key=value pairs) at warning level unless over the limit.
  void warn(const std::string& line);
  uint64_t suppressedSoFar() const { return suppressedTotal; }

 private:
  kj::Timer& timer;
  spdlog::logger& logger;
  uint burst;
  kj::Duration window;
  kj::TimePoint windowStart = kj::origin<kj::TimePoint>();
  uint inWindow = 0;
  uint64_t suppressed = 0;
  uint64_t suppressedTotal = 0;
};

struct ListenerOptions {
  // For logs: "rpc", "data".
  kj::StringPtr service = "rpc";
  size_t maxUnauthenticated = 256;
  kj::Duration authTimeout = 5 * kj::SECONDS;
  // Read before authentication: messages, and words in any one of them.
  size_t messagesBeforeAuth = 8;
  size_t wordsBeforeAuth = 16 * 1024 / sizeof(capnp::word);
  // Each connection accepted is a TLS server's end (its handshake within
  // authTimeout); null: plain TCP.
  kj::TlsContext* tls = nullptr;
};

// A ConnectionReceiver whose accept() rides out running out of
// resources (OVERLOADED: EMFILE, ENFILE, ENOBUFS, ENOMEM) and connections
// that broke before they were accepted (DISCONNECTED): it backs off (10 ms
// doubling to 1 s, or 1 ms when `makeRoom` closed some connections) and
// accepts again, logged rate-limited; it fails only on anything else. It
// hands out at most `maxConnections` open connections at once (0: no
// bound), closing any more as they come (it cannot close the ones it
// handed out). RpcListener accepts through one; so does kj-http's
// listener, which stops for good on the first failed accept and holds
// connections as long as their peers do. Must outlive the connections it
// accepted.
class RetryingReceiver final : public kj::ConnectionReceiver {
 public:
  // `makeRoom`, on OVERLOADED: closes what it can spare and says how many.
  RetryingReceiver(kj::ConnectionReceiver& inner, kj::Timer& timer, spdlog::logger& logger,
                   kj::StringPtr service, size_t maxConnections = 128,
                   kj::Maybe<kj::Function<size_t()>> makeRoom = nullptr);
  kj::Promise<kj::Own<kj::AsyncIoStream>> accept() override;
  uint getPort() override { return inner.getPort(); }
  size_t openConnections() const { return open; }

 private:
  kj::ConnectionReceiver& inner;
  kj::Timer& timer;
  kj::StringPtr service;
  size_t maxConnections;
  kj::Maybe<kj::Function<size_t()>> makeRoom;
  size_t open = 0;
  RateLimitedLog errors;
  kj::Duration backoff = 0 * kj::SECONDS;
};

// One connection's standing, shared by the listener and the bootstrap
// capability it made for the connection, which may outlive it (a call in
// flight): once the connection has gone, admit() and refuse() do nothing.
class PeerGate final : public kj::Refcounted {
 public:
  // Made by RpcListener for each connection it accepts.
  explicit PeerGate(kj::String peer) : peerName(kj::mv(peer)) {}
  // "host:port" of the peer, for logs.
  kj::StringPtr peer() const { return peerName; }
  bool admitted() const { return isAdmitted; }
  // The peer authenticated: no more limits on its reads, no deadline.
  void admit();
  // The peer failed to authenticate: logged (rate-limited) with `reason`,
  // and the connection is closed once the answer saying so is written.
  void refuse(kj::StringPtr reason);

 private:
  friend class RpcListener;
  struct Hooks {
    virtual void admitted() = 0;
    virtual void refused(kj::StringPtr reason) = 0;
  };
  kj::String peerName;
  bool isAdmitted = false;
  bool isRefused = false;
  Hooks* hooks = nullptr;
};

// Accepts TCP connections on one port. Each connection gets its own
// bootstrap capability from `makeBootstrap(gate)`, which must call
// gate->admit() once the peer has shown its token (or gate->refuse()), and
// lives until the peer goes; the capabilities it exported are then
// released, so their destructors are where per-connection state (a
// client's sessions, a governor) is let go.
class RpcListener final : private kj::TaskSet::ErrorHandler {
 public:
  using BootstrapFactory = kj::Function<capnp::Capability::Client(kj::Own<PeerGate> gate)>;

  RpcListener(kj::Own<kj::ConnectionReceiver> receiver, BootstrapFactory makeBootstrap, kj::Timer& timer,
              spdlog::logger& logger, ListenerOptions options = ListenerOptions());
  ~RpcListener() noexcept(false);
  KJ_DISALLOW_COPY(RpcListener);

  uint getPort() { return receiver->getPort(); }

  // Accepts until the returned promise is dropped (connections already
  // accepted are dropped with the listener). Rejects only when accepting
  // failed for good (see the header).
  kj::Promise<void> run();

  // For tests and /metrics-like logs.
  size_t unauthenticatedCount() const { return waiting.size(); }
  size_t connectionCount() const { return accepting.openConnections(); }

 private:
  struct Connection;

  kj::Own<kj::ConnectionReceiver> receiver;
  BootstrapFactory makeBootstrap;
  kj::Timer& timer;
  spdlog::logger& logger;
  ListenerOptions options;
  // Each kind limited on its own, so that a flood of one hides no other.
  RateLimitedLog refusals;
  RateLimitedLog drops;
  // Accepts from `receiver`; out of descriptors, closes connections
  // waiting to authenticate.
  RetryingReceiver accepting;
  // Not yet authenticated, oldest first.
  std::list<Connection*> waiting;
  kj::TaskSet connections;

  void accepted(kj::Own<kj::AsyncIoStream> stream);
  // Closes the oldest connection that has not authenticated; false when
  // there is none.
  bool closeOldestWaiting(kj::StringPtr why);
  void taskFailed(kj::Exception&& exception) override;
};

// Whether an accept that failed with `e` is worth another try.
bool acceptErrorIsTransient(const kj::Exception& e);

}  // namespace squall
