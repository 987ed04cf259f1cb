// RpcListener against peers that do and do not authenticate: refusals,
// deadlines, the bound on connections waiting, reads gated before
// authentication, running out of descriptors.
#include <squall/proto/listener.h>
#include <squall/proto/rpc.h>

#include <dirent.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sstream>
#include <squall/wire/data.capnp.h>
#include <sys/resource.h>

namespace squall {
namespace {

// open() admits the connection with the token "secret", refuses it with
// any other but "wait", and leaves it waiting with "wait". Counts calls
// and reports its destruction.
class GatedBootstrap final : public wire::DataBootstrap::Server {
 public:
  GatedBootstrap(kj::Own<PeerGate> gate, int& opened, kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> destroyed)
      : gate(kj::mv(gate)), opened(opened), destroyed(kj::mv(destroyed)) {}
  ~GatedBootstrap() {
    KJ_IF_MAYBE(d, destroyed) { (*d)->fulfill(); }
  }
  kj::Promise<void> open(OpenContext context) override {
    opened++;
    auto token = context.getParams().getToken();
    if (token == "wait") return kj::READY_NOW;
    if (token != "secret") {
      gate->refuse("wrong token");
      return KJ_EXCEPTION(FAILED, "bad token");
    }
    gate->admit();
    return kj::READY_NOW;
  }

 private:
  kj::Own<PeerGate> gate;
  int& opened;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> destroyed;
};

struct Fixture {
  explicit Fixture(ListenerOptions options = ListenerOptions()) {
    auto receiver = listenOn(io.provider->getNetwork(), "127.0.0.1:0").wait(io.waitScope);
    listener = kj::heap<RpcListener>(
        kj::mv(receiver),
        [this](kj::Own<PeerGate> gate) -> capnp::Capability::Client {
          EXPECT_TRUE(gate->peer().startsWith("127.0.0.1:")) << gate->peer().cStr();
          made++;
          kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> d;
          if (destroyed.get() != nullptr) d = kj::mv(destroyed);
          return kj::heap<GatedBootstrap>(kj::mv(gate), opened, kj::mv(d));
        },
        io.provider->getTimer(), *logger, options);
    running = listener->run().eagerlyEvaluate([this](kj::Exception&& e) { runFailed = kj::mv(e); });
  }

  kj::Own<RpcClient> connect() {
    return connectTo(io.provider->getNetwork(), kj::str("127.0.0.1:", listener->getPort())).wait(io.waitScope);
  }
  // Whether `promise` settles within `seconds`.
  bool settles(kj::Promise<void> promise, int seconds = 10) {
    return io.provider->getTimer()
        .timeoutAfter(seconds * kj::SECONDS, promise.then([]() { return true; }, [](kj::Exception&&) { return true; }))
        .then([](bool b) { return b; }, [](kj::Exception&&) { return false; })
        .wait(io.waitScope);
  }
  void pause(kj::Duration d) { io.provider->getTimer().afterDelay(d).wait(io.waitScope); }

  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::ostringstream said;
  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(said));
  int opened = 0;
  int made = 0;
  kj::Own<kj::PromiseFulfiller<void>> destroyed;
  kj::Maybe<kj::Exception> runFailed;
  kj::Own<RpcListener> listener;
  kj::Promise<void> running = nullptr;
};

capnp::RemotePromise<wire::DataBootstrap::OpenResults> openWith(wire::DataBootstrap::Client& bootstrap,
                                                                  kj::StringPtr token) {
  auto req = bootstrap.openRequest();
  req.setToken(token);
  return req.send();
}

TEST(ListenerTest, EachConnectionGetsABootstrapReleasedWhenThePeerGoes) {
  Fixture f;
  auto destroyed = kj::newPromiseAndFulfiller<void>();
  f.destroyed = kj::mv(destroyed.fulfiller);
  {
    auto client = f.connect();
    auto bootstrap = client->bootstrap<wire::DataBootstrap>();
    openWith(bootstrap, "secret").wait(f.io.waitScope);
    openWith(bootstrap, "secret").wait(f.io.waitScope);
    EXPECT_EQ(f.opened, 2);
    EXPECT_EQ(f.made, 1);
    EXPECT_EQ(f.listener->unauthenticatedCount(), 0u);
  }
  EXPECT_TRUE(f.settles(kj::mv(destroyed.promise)));
}

TEST(ListenerTest, ARefusalIsAnsweredAndThenTheConnectionClosed) {
  Fixture f;
  auto client = f.connect();
  auto bootstrap = client->bootstrap<wire::DataBootstrap>();
  try {
    openWith(bootstrap, "guess").wait(f.io.waitScope);
    FAIL() << "a wrong token was let in";
  } catch (const kj::Exception& e) {
    EXPECT_TRUE(kj::StringPtr(e.getDescription()).endsWith("bad token")) << e.getDescription().cStr();
  }
  EXPECT_TRUE(f.settles(client->onDisconnect()));
  EXPECT_NE(f.said.str().find("event=auth-refused service=rpc peer=127.0.0.1:"), std::string::npos) << f.said.str();
}

TEST(ListenerTest, RefusalsAreLoggedAFewASecondWithACountOfThoseLeftOut) {
  Fixture f;
  for (int i = 0; i < 40; i++) {
    auto client = f.connect();
    auto bootstrap = client->bootstrap<wire::DataBootstrap>();
    EXPECT_ANY_THROW(openWith(bootstrap, "guess").wait(f.io.waitScope));
  }
  auto text = f.said.str();
  size_t lines = 0;
  for (size_t at = text.find("event=auth-refused"); at != std::string::npos;
       at = text.find("event=auth-refused", at + 1)) {
    lines++;
  }
  // 40 refusals in (much) less than 4 s: at most 10 a second get a line.
  EXPECT_GE(lines, 10u);
  EXPECT_LT(lines, 40u) << text;
}

TEST(ListenerTest, AConnectionThatDoesNotAuthenticateIsClosedAtItsDeadline) {
  ListenerOptions options;
  options.authTimeout = 200 * kj::MILLISECONDS;
  Fixture f(options);
  auto idle = f.connect();
  // (Only its Bootstrap: so that this end reads, and sees the close.)
  auto idleBootstrap = idle->bootstrap<wire::DataBootstrap>();
  auto admitted = f.connect();
  auto bootstrap = admitted->bootstrap<wire::DataBootstrap>();
  openWith(bootstrap, "secret").wait(f.io.waitScope);
  EXPECT_TRUE(f.settles(idle->onDisconnect()));
  EXPECT_NE(f.said.str().find("event=auth-timeout service=rpc"), std::string::npos) << f.said.str();
  // The one that authenticated has no deadline.
  f.pause(400 * kj::MILLISECONDS);
  openWith(bootstrap, "secret").wait(f.io.waitScope);
}

TEST(ListenerTest, OneConnectionMoreThanMayWaitClosesTheOldestWaiting) {
  ListenerOptions options;
  options.maxUnauthenticated = 3;
  Fixture f(options);
  auto admitted = f.connect();
  auto bootstrap = admitted->bootstrap<wire::DataBootstrap>();
  openWith(bootstrap, "secret").wait(f.io.waitScope);
  kj::Vector<kj::Own<RpcClient>> waiting;
  for (int i = 0; i < 4; i++) {
    waiting.add(f.connect());
    // Each accepted before the next connects: the oldest is the first.
    auto b = waiting.back()->bootstrap<wire::DataBootstrap>();
    openWith(b, "wait").wait(f.io.waitScope);
  }
  EXPECT_TRUE(f.settles(waiting[0]->onDisconnect()));
  EXPECT_EQ(f.listener->unauthenticatedCount(), 3u);
  // The others and the authenticated one are served still.
  for (int i = 1; i < 4; i++) {
    auto b = waiting[i]->bootstrap<wire::DataBootstrap>();
    openWith(b, "wait").wait(f.io.waitScope);
  }
  openWith(bootstrap, "secret").wait(f.io.waitScope);
}

TEST(ListenerTest, BeforeAuthenticatingOnlyAFewMessagesAreRead) {
  ListenerOptions options;
  options.authTimeout = 500 * kj::MILLISECONDS;
  options.messagesBeforeAuth = 8;
  Fixture f(options);
  auto client = f.connect();
  auto bootstrap = client->bootstrap<wire::DataBootstrap>();
  kj::Vector<kj::Promise<void>> calls;
  for (int i = 0; i < 100; i++) calls.add(openWith(bootstrap, "wait").ignoreResult());
  EXPECT_TRUE(f.settles(client->onDisconnect()));
  // The Bootstrap message and 7 calls; the rest never left the kernel.
  EXPECT_EQ(f.opened, 7);
}

TEST(ListenerTest, ALargeMessageWaitsUntilThePeerHasAuthenticated) {
  ListenerOptions options;
  options.authTimeout = 500 * kj::MILLISECONDS;
  Fixture f(options);
  std::string large(100 * 1024, 'x');
  {
    // Never authenticates: the large call is never read.
    auto client = f.connect();
    auto bootstrap = client->bootstrap<wire::DataBootstrap>();
    auto call = openWith(bootstrap, large.c_str());
    EXPECT_TRUE(f.settles(client->onDisconnect()));
    EXPECT_EQ(f.opened, 0);
  }
  // Authenticated first (pipelined): read, and refused for its token.
  auto client = f.connect();
  auto bootstrap = client->bootstrap<wire::DataBootstrap>();
  auto first = openWith(bootstrap, "secret");
  auto second = openWith(bootstrap, large.c_str());
  first.wait(f.io.waitScope);
  EXPECT_ANY_THROW(second.wait(f.io.waitScope));
  EXPECT_EQ(f.opened, 2);
}

TEST(ListenerTest, ARetryingReceiverClosesConnectionsPastItsCap) {
  auto io = kj::setupAsyncIo();
  std::ostringstream said;
  auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(said));
  auto receiver = listenOn(io.provider->getNetwork(), "127.0.0.1:0").wait(io.waitScope);
  RetryingReceiver retrying(*receiver, io.provider->getTimer(), *logger, "http", 2);
  auto address = io.provider->getNetwork().parseAddress(kj::str("127.0.0.1:", receiver->getPort())).wait(io.waitScope);
  auto a = address->connect().wait(io.waitScope);
  auto b = address->connect().wait(io.waitScope);
  auto c = address->connect().wait(io.waitScope);
  auto first = retrying.accept().wait(io.waitScope);
  auto second = retrying.accept().wait(io.waitScope);
  EXPECT_EQ(retrying.openConnections(), 2u);
  // The third is closed as it comes; the accept waits for another.
  auto third = retrying.accept();
  char byte;
  EXPECT_EQ(c->tryRead(&byte, 1, 1).wait(io.waitScope), 0u);
  EXPECT_NE(said.str().find("event=connection-closed service=http"), std::string::npos) << said.str();
  first = nullptr;
  EXPECT_EQ(retrying.openConnections(), 1u);
  auto d = address->connect().wait(io.waitScope);
  auto fourth = third.wait(io.waitScope);
  EXPECT_EQ(retrying.openConnections(), 2u);
  d->write("x", 1).wait(io.waitScope);
  EXPECT_EQ(fourth->tryRead(&byte, 1, 1).wait(io.waitScope), 1u);
}

size_t openDescriptors() {
  size_t n = 0;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  while (readdir(dir) != nullptr) n++;
  closedir(dir);
  return n;
}

// A receiver whose accept() throws at once, as kj's does when accept(2)
// fails with EMFILE, `failures` times, then accepts.
class FailingReceiver final : public kj::ConnectionReceiver {
 public:
  FailingReceiver(kj::Own<kj::ConnectionReceiver> inner, int failures) : inner(kj::mv(inner)), failures(failures) {}
  kj::Promise<kj::Own<kj::AsyncIoStream>> accept() override {
    if (failures > 0) {
      failures--;
      kj::throwFatalException(KJ_EXCEPTION(OVERLOADED, "accept: Too many open files"));
    }
    return inner->accept();
  }
  uint getPort() override { return inner->getPort(); }

 private:
  kj::Own<kj::ConnectionReceiver> inner;
  int failures;
};

TEST(ListenerTest, AnAcceptThatThrowsForWantOfDescriptorsIsRetried) {
  auto io = kj::setupAsyncIo();
  std::ostringstream said;
  auto logger = std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_st>(said));
  int opened = 0;
  auto receiver = kj::heap<FailingReceiver>(listenOn(io.provider->getNetwork(), "127.0.0.1:0").wait(io.waitScope), 3);
  auto port = receiver->getPort();
  RpcListener listener(
      kj::mv(receiver),
      [&opened](kj::Own<PeerGate> gate) -> capnp::Capability::Client {
        return kj::heap<GatedBootstrap>(kj::mv(gate), opened, nullptr);
      },
      io.provider->getTimer(), *logger);
  kj::Maybe<kj::Exception> failed;
  auto running = listener.run().eagerlyEvaluate([&failed](kj::Exception&& e) { failed = kj::mv(e); });
  auto client = connectTo(io.provider->getNetwork(), kj::str("127.0.0.1:", port)).wait(io.waitScope);
  auto bootstrap = client->bootstrap<wire::DataBootstrap>();
  openWith(bootstrap, "secret").wait(io.waitScope);
  EXPECT_EQ(opened, 1);
  EXPECT_EQ(failed, nullptr);
  EXPECT_NE(said.str().find("event=accept-failed service=rpc error="), std::string::npos) << said.str();
}

// The same with the real limit. Not under the sanitizers: their checks
// need descriptors of their own (UBSan's vptr check opens a pipe to see
// whether memory is readable, and calls a check it cannot make a report).
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(ListenerTest, RunningOutOfDescriptorsIsRiddenOut) {
  Fixture f;
  struct rlimit before;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  struct rlimit low = before;
  low.rlim_cur = openDescriptors() + 24;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  {
    // 16 peers that never authenticate: with their 16 descriptors here,
    // the listener runs out before it has accepted them all.
    kj::Vector<kj::Own<RpcClient>> flood;
    for (int i = 0; i < 16; i++) flood.add(f.connect());
    for (int i = 0; i < 200 && f.said.str().find("event=accept-failed") == std::string::npos; i++) {
      f.pause(10 * kj::MILLISECONDS);
    }
    EXPECT_NE(f.said.str().find("event=accept-failed service=rpc"), std::string::npos)
        << f.listener->connectionCount() << " " << openDescriptors() << " " << low.rlim_cur;
    auto closedAt = f.said.str().find("closed_waiting=");
    ASSERT_NE(closedAt, std::string::npos) << f.said.str();
    EXPECT_NE(f.said.str()[closedAt + 15], '0') << f.said.str();
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
  // Still listening: a peer with the token is served.
  auto client = f.connect();
  auto bootstrap = client->bootstrap<wire::DataBootstrap>();
  openWith(bootstrap, "secret").wait(f.io.waitScope);
  EXPECT_EQ(f.runFailed, nullptr);
  EXPECT_FALSE(f.running.poll(f.io.waitScope));
}
#endif

TEST(ListenerTest, RaisingTheOpenFilesLimitReachesTheHardLimit) {
  struct rlimit before;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  struct rlimit low = before;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  auto now = raiseOpenFilesLimit();
  struct rlimit after;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(now, after.rlim_cur);
  if (before.rlim_max != RLIM_INFINITY) {
    EXPECT_EQ(after.rlim_cur, before.rlim_max);
  }
  EXPECT_GT(after.rlim_cur, 64u);
  setrlimit(RLIMIT_NOFILE, &before);
}

}  // namespace
}  // namespace squall
