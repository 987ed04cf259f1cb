#include <squall/proto/rpc.h>

#include <capnp/message.h>
#include <capnp/rpc.h>
#include <kj/debug.h>

namespace squall {

capnp::ReaderOptions readerOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 8 * 1024 * 1024;  // 64 MiB
  options.nestingLimit = 64;
  return options;
}

kj::Promise<kj::Own<kj::ConnectionReceiver>> listenOn(kj::Network& network,
                                                      kj::StringPtr address) {
  checkAddress(address);
  return network.parseAddress(address).then(
      [](kj::Own<kj::NetworkAddress> addr) { return addr->listen(); });
}

RpcClient::RpcClient(kj::Own<kj::AsyncIoStream> streamParam)
    : stream(kj::mv(streamParam)),
      messages(*stream),
      network(messages, capnp::rpc::twoparty::Side::CLIENT, readerOptions()),
      rpc(capnp::makeRpcClient(network)) {}

RpcClient::RpcClient(kj::Own<kj::AsyncCapabilityStream> streamParam, uint maxFds)
    : messages(*streamParam),
      network(messages, maxFds, capnp::rpc::twoparty::Side::CLIENT, readerOptions()),
      rpc(capnp::makeRpcClient(network)) {
  stream = kj::mv(streamParam);
}

kj::Promise<void> serveRpc(kj::AsyncCapabilityStream& stream, uint maxFds, capnp::Capability::Client bootstrap) {
  struct Served {
    Served(kj::AsyncCapabilityStream& stream, uint maxFds, capnp::Capability::Client bootstrap)
        : messages(stream),
          network(messages, maxFds, capnp::rpc::twoparty::Side::SERVER, readerOptions()),
          rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
    BufferedMessageStream messages;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  };
  auto served = kj::heap<Served>(stream, maxFds, kj::mv(bootstrap));
  auto disconnected = served->network.onDisconnect();
  return disconnected.attach(kj::mv(served));
}

kj::Promise<void> serveExecutorRpc(kj::AsyncCapabilityStream& stream, int fd, uint maxFds,
                                   capnp::Capability::Client bootstrap, BufferedMessageStream*& transport) {
  struct Served {
    Served(kj::AsyncCapabilityStream& stream, int fd, uint maxFds, capnp::Capability::Client bootstrap)
        : messages(stream),
          network((messages.useBlockingWrites(fd), messages), maxFds, capnp::rpc::twoparty::Side::SERVER,
                  readerOptions()),
          rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
    BufferedMessageStream messages;
    capnp::TwoPartyVatNetwork network;
    capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
  };
  auto served = kj::heap<Served>(stream, fd, maxFds, kj::mv(bootstrap));
  transport = &served->messages;
  auto disconnected = served->network.onDisconnect();
  return disconnected.attach(kj::mv(served), kj::defer([&transport]() { transport = nullptr; }));
}

capnp::Capability::Client RpcClient::bootstrapCap() {
  capnp::word scratch[4];
  memset(scratch, 0, sizeof(scratch));
  capnp::MallocMessageBuilder message(scratch);
  auto vatId = message.getRoot<capnp::rpc::twoparty::VatId>();
  vatId.setSide(capnp::rpc::twoparty::Side::SERVER);
  return rpc.bootstrap(vatId);
}

kj::Promise<kj::Own<RpcClient>> connectTo(kj::Network& network, kj::StringPtr address) {
  checkAddress(address);
  return network.parseAddress(address)
      .then([](kj::Own<kj::NetworkAddress> addr) {
        return addr->connect().attach(kj::mv(addr));
      })
      .then([](kj::Own<kj::AsyncIoStream> stream) { return kj::heap<RpcClient>(kj::mv(stream)); });
}

void checkAddress(kj::StringPtr address) {
  KJ_IF_MAYBE(colon, address.findLast(':')) {
    KJ_REQUIRE(*colon > 0, "address has no host (expected host:port)", address);
    auto port = address.slice(*colon + 1);
    KJ_REQUIRE(port.size() > 0 && port.size() <= 5, "address has no valid port (expected host:port)",
               address);
    for (char c : port) {
      KJ_REQUIRE(c >= '0' && c <= '9', "address has no valid port (expected host:port)", address);
    }
    KJ_REQUIRE(port.parseAs<uint>() <= 65535, "port out of range", address);
  } else {
    KJ_FAIL_REQUIRE("address has no port (expected host:port)", address);
  }
}

namespace {

kj::Promise<void> beatAfterPause(kj::Timer& timer, kj::Duration timeout,
                                 kj::Function<kj::Promise<void>()>& ping) {
  return timer.afterDelay(timeout / 3).then([&timer, timeout, &ping]() {
    return timer.timeoutAfter(timeout, ping()).then([&timer, timeout, &ping]() {
      return beatAfterPause(timer, timeout, ping);
    });
  });
}

}  // namespace

kj::Promise<void> heartbeat(kj::Timer& timer, kj::Duration timeout,
                            kj::Function<kj::Promise<void>()> ping) {
  auto owned = kj::heap(kj::mv(ping));
  auto& function = *owned;
  return beatAfterPause(timer, timeout, function).attach(kj::mv(owned));
}

}  // namespace squall
