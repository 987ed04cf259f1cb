#include <squall/proto/rpc.h>

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/wire/data.capnp.h>

namespace squall {
namespace {

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
