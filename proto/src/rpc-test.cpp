#include <squall/proto/rpc.h>

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <spdlog/sinks/null_sink.h>
#include <squall/wire/data.capnp.h>

namespace squall {
namespace {

// Answers open() with the token it was given, to prove calls cross a real
// TCP connection, and reports its own destruction.
class EchoBootstrap final : public wire::DataBootstrap::Server {
 public:
  EchoBootstrap(int& opened, kj::Own<kj::PromiseFulfiller<void>> destroyed)
      : opened(opened), destroyed(kj::mv(destroyed)) {}
  ~EchoBootstrap() { destroyed->fulfill(); }
  kj::Promise<void> open(OpenContext context) override {
    opened++;
    KJ_REQUIRE(context.getParams().getToken() == "secret", "bad token");
    return kj::READY_NOW;
  }

 private:
  int& opened;
  kj::Own<kj::PromiseFulfiller<void>> destroyed;
};

TEST(RpcTest, ListenerGivesEachConnectionABootstrapAndReleasesItOnDisconnect) {
  auto io = kj::setupAsyncIo();
  auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  int opened = 0;
  int made = 0;
  auto destroyed = kj::newPromiseAndFulfiller<void>();
  auto receiver = listenOn(io.provider->getNetwork(), "127.0.0.1:0").wait(io.waitScope);
  RpcListener listener(kj::mv(receiver),
                       [&](kj::StringPtr peer) -> capnp::Capability::Client {
                         EXPECT_TRUE(peer.startsWith("127.0.0.1:")) << peer.cStr();
                         made++;
                         return kj::heap<EchoBootstrap>(opened, kj::mv(destroyed.fulfiller));
                       },
                       *logger);
  auto running = listener.run().eagerlyEvaluate(nullptr);
  {
    auto client = connectTo(io.provider->getNetwork(), kj::str("127.0.0.1:", listener.getPort()))
                      .wait(io.waitScope);
    auto bootstrap = client->bootstrap<wire::DataBootstrap>();
    auto req = bootstrap.openRequest();
    req.setToken("secret");
    req.send().wait(io.waitScope);
    auto bad = bootstrap.openRequest();
    bad.setToken("wrong");
    EXPECT_ANY_THROW(bad.send().wait(io.waitScope));
    EXPECT_EQ(opened, 2);
    EXPECT_EQ(made, 1);
  }
  // The client is gone: the server side notices and drops the bootstrap.
  io.provider->getTimer()
      .timeoutAfter(10 * kj::SECONDS, kj::mv(destroyed.promise))
      .wait(io.waitScope);
}

TEST(RpcTest, BadAddressesAreRejectedWithAClearError) {
  EXPECT_ANY_THROW(checkAddress("localhost"));
  EXPECT_ANY_THROW(checkAddress(":80"));
  EXPECT_ANY_THROW(checkAddress("host:"));
  EXPECT_ANY_THROW(checkAddress("host:99999"));
  EXPECT_ANY_THROW(checkAddress("host:8a"));
  EXPECT_NO_THROW(checkAddress("127.0.0.1:7210"));
}

TEST(RpcTest, ConnectionRefusedIsDisconnected) {
  auto io = kj::setupAsyncIo();
  // Bind then close to get a port nobody listens on.
  uint port;
  {
    auto receiver = listenOn(io.provider->getNetwork(), "127.0.0.1:0").wait(io.waitScope);
    port = receiver->getPort();
  }
  auto result = connectTo(io.provider->getNetwork(), kj::str("127.0.0.1:", port))
                    .then([](auto) { return kj::Maybe<kj::Exception>(nullptr); },
                          [](kj::Exception&& e) { return kj::Maybe<kj::Exception>(kj::mv(e)); })
                    .wait(io.waitScope);
  KJ_IF_MAYBE(e, result) {
    EXPECT_EQ(e->getType(), kj::Exception::Type::DISCONNECTED);
  } else {
    FAIL() << "connect should fail";
  }
}

}  // namespace
}  // namespace squall
