// Cap'n Proto RPC over TCP, shared by the server, governors and clients,
// and over the Unix sockets of executors. Every connection's messages go
// through a BufferedMessageStream (message-stream.h). Everything here lives
// on the thread that owns the KJ event loop.
#pragma once

#include <squall/proto/message-stream.h>

#include <capnp/capability.h>
#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/function.h>
#include <spdlog/logger.h>

namespace squall {

// Default ports. The status page (HTTP) comes with its own issue.
constexpr uint SERVER_PORT = 7210;
constexpr uint GOVERNOR_DATA_PORT = 7211;

// Reader limits for every connection: capnp's default 64 MiB per message.
// Submits are chunked by the client so no graph needs more.
capnp::ReaderOptions readerOptions();

// Binds `address` ("host:port", port 0 for any free one).
kj::Promise<kj::Own<kj::ConnectionReceiver>> listenOn(kj::Network& network,
                                                      kj::StringPtr address);

// One outgoing connection.
class RpcClient {
 public:
  explicit RpcClient(kj::Own<kj::AsyncIoStream> stream);
  // Over a Unix socket that carries file descriptors: a message may bring
  // up to `maxFds`.
  RpcClient(kj::Own<kj::AsyncCapabilityStream> stream, uint maxFds);

  template <typename T>
  typename T::Client bootstrap() {
    return bootstrapCap().castAs<T>();
  }
  kj::Promise<void> onDisconnect() { return network.onDisconnect(); }

 private:
  kj::Own<kj::AsyncIoStream> stream;
  BufferedMessageStream messages;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;

  capnp::Capability::Client bootstrapCap();
};

// Serves `bootstrap` on `stream`, a Unix socket whose messages may bring up
// to `maxFds` descriptors, until the peer goes.
kj::Promise<void> serveRpc(kj::AsyncCapabilityStream& stream, uint maxFds, capnp::Capability::Client bootstrap);

// As serveRpc, for an executor (tasklib) on its socket `fd`: writes block
// (BufferedMessageStream::useBlockingWrites), and `transport` points at
// the message stream while it serves, so that the executor can write its
// answers so far before it runs an actor's method (writeNow()).
kj::Promise<void> serveExecutorRpc(kj::AsyncCapabilityStream& stream, int fd, uint maxFds,
                                   capnp::Capability::Client bootstrap, BufferedMessageStream*& transport);

// Connects to `address` ("host:port"); throws DISCONNECTED when refused,
// FAILED when the address does not parse.
kj::Promise<kj::Own<RpcClient>> connectTo(kj::Network& network, kj::StringPtr address);

// Splits "host:port" and checks both parts; throws FAILED naming the problem.
void checkAddress(kj::StringPtr address);

// A heartbeat: calls `ping` every third of `timeout`. Never resolves; rejects
// with the error once a ping fails or is not answered within `timeout`.
kj::Promise<void> heartbeat(kj::Timer& timer, kj::Duration timeout,
                            kj::Function<kj::Promise<void>()> ping);

}  // namespace squall
