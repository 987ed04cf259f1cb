#include <squall/proto/message-stream.h>

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/wire/data.capnp.h>
#include <unistd.h>

namespace squall {
namespace {

// A message whose root holds `text`.
kj::Array<capnp::word> message(kj::StringPtr text) {
  capnp::MallocMessageBuilder builder;
  builder.getRoot<capnp::AnyPointer>().setAs<capnp::Text>(text);
  return capnp::messageToFlatArray(builder);
}

kj::String textOf(capnp::MessageReader& reader) {
  return kj::str(reader.getRoot<capnp::AnyPointer>().getAs<capnp::Text>());
}

kj::Promise<void> send(capnp::MessageStream& out, kj::StringPtr text, kj::ArrayPtr<const int> fds = nullptr) {
  auto builder = kj::heap<capnp::MallocMessageBuilder>();
  builder->getRoot<capnp::AnyPointer>().setAs<capnp::Text>(text);
  auto segments = builder->getSegmentsForOutput();
  return out.writeMessage(fds, segments).attach(kj::mv(builder));
}

// Reads one message: its text and the contents of the pipes that came with
// it (each fd's bytes up to its end).
struct Received {
  kj::String text;
  kj::Vector<kj::String> fdContents;
};

Received receive(capnp::MessageStream& in, kj::WaitScope& ws) {
  kj::AutoCloseFd fds[4];
  auto got = in.tryReadMessage(kj::arrayPtr(fds, 4)).wait(ws);
  auto& m = KJ_REQUIRE_NONNULL(got, "the stream ended");
  Received r{textOf(*m.reader), {}};
  for (auto& fd : m.fds) {
    char buf[64];
    ssize_t n = read(fd.get(), buf, sizeof(buf));
    r.fdContents.add(kj::heapString(buf, n > 0 ? n : 0));
  }
  return r;
}

TEST(BufferedMessageStreamTest, MessagesWrittenInOneTurnLeaveInOneWriteAndArriveInFewReads) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BufferedMessageStream out(*pipe.ends[0]);
  BufferedMessageStream in(*pipe.ends[1]);
  constexpr int N = 500;
  kj::Vector<kj::Promise<void>> sent;
  for (int i = 0; i < N; i++) sent.add(send(out, kj::str("message ", i)));
  // Accepted at once: copied into the batch.
  for (auto& p : sent) EXPECT_TRUE(p.poll(io.waitScope));
  for (int i = 0; i < N; i++) EXPECT_EQ(receive(in, io.waitScope).text, kj::str("message ", i));
  EXPECT_EQ(out.counts().messagesOut, N);
  EXPECT_LE(out.counts().writes, 2u);
  EXPECT_EQ(in.counts().messagesIn, N);
  // Each read brought many messages (capnp's stream makes two per message).
  EXPECT_LT(in.counts().reads, N / 10u);
}

TEST(BufferedMessageStreamTest, MessagesLargerThanTheBufferPassBetweenSmallOnes) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BufferedMessageStream out(*pipe.ends[0]);
  BufferedMessageStream in(*pipe.ends[1]);
  kj::Vector<kj::String> texts;
  for (size_t size : {10, 70000, 3, 1 << 20, 65536 - 24, 65536, 200000, 5}) {
    auto t = kj::heapString(size);
    for (size_t i = 0; i < size; i++) t[i] = 'a' + (i * 7 + size) % 26;
    texts.add(kj::mv(t));
  }
  kj::Vector<kj::Promise<void>> sent;
  for (auto& t : texts) sent.add(send(out, t));
  auto all = kj::joinPromises(sent.releaseAsArray());
  // A 1 MiB message does not fit the socket's buffer: the reader's waits
  // drive the writes.
  kj::Vector<kj::String> got;
  for (size_t i = 0; i < texts.size(); i++) got.add(receive(in, io.waitScope).text);
  all.wait(io.waitScope);
  ASSERT_EQ(got.size(), texts.size());
  for (size_t i = 0; i < texts.size(); i++) EXPECT_TRUE(got[i] == texts[i]) << "message " << i;
}

// Descriptors go with the message they were sent with, whichever side
// batches: ours to ours, capnp's writer to our reader, ours to capnp's
// reader. Every third message carries the read end of a pipe holding its
// own number.
void checkDescriptorsFollowTheirMessages(capnp::MessageStream& out, capnp::MessageStream& in, kj::WaitScope& ws) {
  constexpr int N = 60;
  kj::Vector<kj::Promise<void>> sent;
  kj::Vector<kj::AutoCloseFd> keep;
  int raw[N];
  for (int i = 0; i < N; i++) {
    if (i % 3 == 0) {
      int p[2];
      ASSERT_EQ(pipe(p), 0);
      auto label = kj::str("fd of ", i);
      ASSERT_EQ(write(p[1], label.cStr(), label.size()), static_cast<ssize_t>(label.size()));
      close(p[1]);
      keep.add(kj::AutoCloseFd(p[0]));
      raw[i] = p[0];
      sent.add(send(out, kj::str("message ", i), kj::arrayPtr(&raw[i], 1).asConst()));
    } else {
      sent.add(send(out, kj::str("message ", i)));
    }
  }
  auto all = kj::joinPromises(sent.releaseAsArray());
  for (int i = 0; i < N; i++) {
    auto r = receive(in, ws);
    EXPECT_EQ(r.text, kj::str("message ", i));
    if (i % 3 == 0) {
      ASSERT_EQ(r.fdContents.size(), 1u) << "message " << i;
      EXPECT_EQ(r.fdContents[0], kj::str("fd of ", i));
    } else {
      EXPECT_EQ(r.fdContents.size(), 0u) << "message " << i;
    }
  }
  all.wait(ws);
}

TEST(BufferedMessageStreamTest, DescriptorsArriveWithTheirMessage) {
  auto io = kj::setupAsyncIo();
  {
    auto pipe = io.provider->newCapabilityPipe();
    BufferedMessageStream out(*pipe.ends[0]);
    BufferedMessageStream in(*pipe.ends[1]);
    checkDescriptorsFollowTheirMessages(out, in, io.waitScope);
  }
  {
    auto pipe = io.provider->newCapabilityPipe();
    capnp::AsyncCapabilityMessageStream out(*pipe.ends[0]);
    BufferedMessageStream in(*pipe.ends[1]);
    checkDescriptorsFollowTheirMessages(out, in, io.waitScope);
  }
  {
    auto pipe = io.provider->newCapabilityPipe();
    BufferedMessageStream out(*pipe.ends[0]);
    capnp::AsyncCapabilityMessageStream in(*pipe.ends[1]);
    checkDescriptorsFollowTheirMessages(out, in, io.waitScope);
  }
}

TEST(BufferedMessageStreamTest, TheEndBetweenMessagesIsNoMessageAndInsideOneIsAnError) {
  auto io = kj::setupAsyncIo();
  {
    auto pipe = io.provider->newTwoWayPipe();
    BufferedMessageStream out(*pipe.ends[0]);
    BufferedMessageStream in(*pipe.ends[1]);
    send(out, "last").wait(io.waitScope);
    out.end().wait(io.waitScope);
    EXPECT_EQ(receive(in, io.waitScope).text, "last");
    EXPECT_TRUE(in.tryReadMessage(nullptr).wait(io.waitScope) == nullptr);
  }
  for (size_t cut : {4, 8, 20}) {
    auto pipe = io.provider->newTwoWayPipe();
    BufferedMessageStream in(*pipe.ends[1]);
    auto words = message("a message cut short");
    auto bytes = words.asBytes();
    ASSERT_LT(cut, bytes.size());
    pipe.ends[0]->write(bytes.begin(), cut).wait(io.waitScope);
    pipe.ends[0]->shutdownWrite();
    auto e = kj::runCatchingExceptions([&]() { in.tryReadMessage(nullptr).wait(io.waitScope); });
    auto& ex = KJ_REQUIRE_NONNULL(e, "a message cut short was read", cut);
    EXPECT_EQ(ex.getType(), kj::Exception::Type::DISCONNECTED) << ex.getDescription().cStr();
  }
}

TEST(BufferedMessageStreamTest, AHeaderClaimingTooMuchIsRefusedBeforeAnythingIsAllocated) {
  auto io = kj::setupAsyncIo();
  struct Case {
    uint32_t countMinusOne;
    uint32_t size0;
    const char* error;
  };
  for (auto c : {Case{1000, 1, "too many segments"}, Case{0xffffffffu, 1, "too many segments"},
                 Case{0, 0xf0000000u, "too large"}}) {
    auto pipe = io.provider->newTwoWayPipe();
    BufferedMessageStream in(*pipe.ends[1]);
    uint32_t header[2] = {c.countMinusOne, c.size0};  // little-endian on this machine
    pipe.ends[0]->write(header, sizeof(header)).wait(io.waitScope);
    auto e = kj::runCatchingExceptions([&]() { in.tryReadMessage(nullptr).wait(io.waitScope); });
    auto& ex = KJ_REQUIRE_NONNULL(e, "a bad header was accepted");
    EXPECT_TRUE(strstr(ex.getDescription().cStr(), c.error) != nullptr) << ex.getDescription().cStr();
  }
}

TEST(BufferedMessageStreamTest, AWriterWhosePeerDoesNotReadIsHeldBack) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BufferedMessageStream out(*pipe.ends[0]);
  BufferedMessageStream in(*pipe.ends[1]);
  auto chunk = kj::heapString(32 * 1024 - 64);
  for (auto& c : chunk) c = 'x';
  // capnp's write queue sends the next message once the last one's promise
  // resolves: so does this loop. Nobody reads, so some write must wait.
  int accepted = 0;
  kj::Promise<void> last = kj::READY_NOW;
  while (accepted < 10000) {
    last = send(out, chunk);
    if (!last.poll(io.waitScope)) break;
    last.wait(io.waitScope);
    accepted++;
  }
  EXPECT_LT(accepted, 10000) << "every write was accepted: nothing holds a writer back";
  // What waits is bounded: the high-water mark and the socket's buffers.
  EXPECT_LT(accepted * chunk.size(), BufferedMessageStream::HIGH_WATER_BYTES + 16 * 1024 * 1024);
  // Reading lets it go on.
  for (int i = 0; i <= accepted; i++) EXPECT_EQ(receive(in, io.waitScope).text.size(), chunk.size());
  last.wait(io.waitScope);
}

TEST(BufferedMessageStreamTest, AWriterThatDoesNotWaitForAPeerThatDoesNotReadIsCutOff) {
  // capnp's RPC system queues each message behind the last one's promise
  // without bound; this is what that queue meets when the peer never reads.
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BufferedMessageStream out(*pipe.ends[0]);
  kj::Vector<kj::Promise<void>> writes;
  kj::Maybe<kj::Exception> cut;
  auto text = kj::str(kj::repeat('z', 1000));
  for (size_t i = 0; i < 20000 && cut == nullptr; i++) {
    auto written = send(out, text).then([]() {}, [&cut](kj::Exception&& e) {
      if (cut == nullptr) cut = kj::mv(e);
    });
    writes.add(written.eagerlyEvaluate(nullptr));
    if (i % 64 == 0) io.waitScope.poll();
  }
  io.waitScope.poll();
  KJ_IF_MAYBE(e, cut) {
    EXPECT_EQ(e->getType(), kj::Exception::Type::DISCONNECTED);
    EXPECT_NE(std::string(e->getDescription().cStr()).find("does not read"), std::string::npos)
        << e->getDescription().cStr();
    EXPECT_LE(writes.size(), BufferedMessageStream::MAX_WAITING_WRITES + 2000);
  } else {
    FAIL() << "a peer that reads nothing held " << writes.size() << " writes";
  }
  // The reading end sees the connection end (both ways were shut).
  BufferedMessageStream in(*pipe.ends[1]);
  kj::AutoCloseFd none[1];
  size_t read = 0;
  for (;;) {
    auto got = in.tryReadMessage(kj::arrayPtr(none, 0)).then(
        [](kj::Maybe<capnp::MessageReaderAndFds> m) { return m != nullptr; }, [](kj::Exception&&) { return false; });
    if (!got.wait(io.waitScope)) break;
    read++;
  }
  EXPECT_GT(read, 0u);
}

TEST(BufferedMessageStreamTest, AGatedStreamReadsAFewSmallMessagesUntilOpened) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newTwoWayPipe();
  BufferedMessageStream out(*pipe.ends[0]);
  BufferedMessageStream in(*pipe.ends[1]);
  in.gateReads(2, 16);
  send(out, "one").wait(io.waitScope);
  send(out, "two").wait(io.waitScope);
  send(out, "three").wait(io.waitScope);
  out.drain().wait(io.waitScope);
  EXPECT_EQ(receive(in, io.waitScope).text, "one");
  EXPECT_EQ(receive(in, io.waitScope).text, "two");
  kj::AutoCloseFd none[1];
  auto third = in.tryReadMessage(kj::arrayPtr(none, 0));
  EXPECT_FALSE(third.poll(io.waitScope));
  in.openGate();
  auto got = third.wait(io.waitScope);
  EXPECT_EQ(textOf(*KJ_ASSERT_NONNULL(got).reader), "three");
  // A large one waits for the gate too, with only its header read.
  BufferedMessageStream small(*pipe.ends[1]);
  small.gateReads(5, 16);
  send(out, kj::str(kj::repeat('y', 1000))).wait(io.waitScope);
  out.drain().wait(io.waitScope);
  auto large = small.tryReadMessage(kj::arrayPtr(none, 0));
  EXPECT_FALSE(large.poll(io.waitScope));
  small.openGate();
  EXPECT_EQ(textOf(*KJ_ASSERT_NONNULL(large.wait(io.waitScope)).reader).size(), 1000u);
}

// The RPC system over it: calls and answers, with capabilities carrying
// descriptors.
class Echo final : public wire::DataBootstrap::Server {
 public:
  kj::Promise<void> open(OpenContext context) override {
    KJ_REQUIRE(context.getParams().getToken() == "secret", "bad token");
    return kj::READY_NOW;
  }
};

TEST(BufferedMessageStreamTest, CarriesCapnpRpc) {
  auto io = kj::setupAsyncIo();
  auto pipe = io.provider->newCapabilityPipe();
  BufferedMessageStream serverStream(*pipe.ends[0]);
  BufferedMessageStream clientStream(*pipe.ends[1]);
  capnp::TwoPartyVatNetwork serverNet(serverStream, 4, capnp::rpc::twoparty::Side::SERVER);
  capnp::TwoPartyVatNetwork clientNet(clientStream, 4, capnp::rpc::twoparty::Side::CLIENT);
  auto server = capnp::makeRpcServer(serverNet, kj::heap<Echo>());
  auto client = capnp::makeRpcClient(clientNet);
  capnp::word scratch[4] = {};
  capnp::MallocMessageBuilder vat(scratch);
  auto id = vat.getRoot<capnp::rpc::twoparty::VatId>();
  id.setSide(capnp::rpc::twoparty::Side::SERVER);
  auto cap = client.bootstrap(id).castAs<wire::DataBootstrap>();
  kj::Vector<kj::Promise<void>> calls;
  for (int i = 0; i < 1000; i++) {
    auto req = cap.openRequest();
    req.setToken(i % 100 == 99 ? "wrong" : "secret");
    calls.add(req.send().then([](auto) { return true; }, [](kj::Exception&&) { return false; })
                  .then([i](bool ok) { EXPECT_EQ(ok, i % 100 != 99) << i; }));
  }
  kj::joinPromises(calls.releaseAsArray()).wait(io.waitScope);
  // A thousand calls in far fewer writes than messages.
  EXPECT_LT(clientStream.counts().writes, clientStream.counts().messagesOut / 4);
}

// A data service that never answers a read (until cancelled) and says
// when it is gone.
class Held final : public wire::DataService::Server {
 public:
  Held(bool& gone, bool& cancelled) : gone(gone), cancelled(cancelled) {}
  ~Held() { gone = true; }
  kj::Promise<void> read(ReadContext context) override {
    context.allowCancellation();
    return kj::Promise<void>(kj::NEVER_DONE).attach(kj::defer([this]() { cancelled = true; }));
  }

 private:
  bool& gone;
  bool& cancelled;
};

// open() hands out a Held service; counts the opens.
class Opener final : public wire::DataBootstrap::Server {
 public:
  kj::Promise<void> open(OpenContext context) override {
    opens++;
    goneAtOpen.push_back(gone);
    gone = cancelled = false;
    context.getResults().setService(kj::heap<Held>(gone, cancelled));
    return kj::READY_NOW;
  }
  int opens = 0;
  bool gone = false, cancelled = false;
  // Whether the service handed out before was gone when each open came.
  std::vector<bool> goneAtOpen;
};

struct RpcPair {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::TwoWayPipe pipe = io.provider->newTwoWayPipe();
  BufferedMessageStream serverStream{*pipe.ends[0]};
  BufferedMessageStream clientStream{*pipe.ends[1]};
  capnp::TwoPartyVatNetwork serverNet{serverStream, capnp::rpc::twoparty::Side::SERVER};
  capnp::TwoPartyVatNetwork clientNet{clientStream, capnp::rpc::twoparty::Side::CLIENT};
  Opener* opener;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> server;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> client = capnp::makeRpcClient(clientNet);
  wire::DataBootstrap::Client cap = nullptr;

  explicit RpcPair(kj::Own<Opener> bootstrap)
      : opener(bootstrap.get()), server(capnp::makeRpcServer(serverNet, kj::mv(bootstrap))) {
    capnp::word scratch[4] = {};
    capnp::MallocMessageBuilder vat(scratch);
    auto id = vat.getRoot<capnp::rpc::twoparty::VatId>();
    id.setSide(capnp::rpc::twoparty::Side::SERVER);
    cap = client.bootstrap(id).castAs<wire::DataBootstrap>();
  }
  // Runs the loop until nothing is left to do on either side.
  void settle() {
    for (int i = 0; i < 100; i++) io.waitScope.poll();
  }
};

// A Finish for a call whose Return has come goes with the next message,
// not in a write of its own that wakes the peer for nothing; likewise a
// Release, which the peer sees before the message it came with.
TEST(BufferedMessageStreamTest, FinishesAndReleasesGoWithTheNextMessage) {
  auto opener = kj::heap<Opener>();
  RpcPair rpc(kj::mv(opener));
  constexpr int N = 50;
  rpc.cap.openRequest().send().wait(rpc.io.waitScope);
  rpc.settle();
  auto writesBefore = rpc.clientStream.counts().writes;
  auto messagesBefore = rpc.clientStream.counts().messagesOut;
  for (int i = 0; i < N; i++) {
    {
      // The answer and its service are dropped when this scope ends: a
      // Finish and a Release to send.
      auto answer = rpc.cap.openRequest().send().wait(rpc.io.waitScope);
    }
    rpc.settle();  // the client's loop idles: they were not written alone
    EXPECT_TRUE(rpc.opener->goneAtOpen.back() || i == 0) << i;
  }
  auto writes = rpc.clientStream.counts().writes - writesBefore;
  auto messages = rpc.clientStream.counts().messagesOut - messagesBefore;
  EXPECT_GE(messages, 2u * N);  // calls, finishes and releases
  EXPECT_LE(writes, static_cast<uint64_t>(N) + 1);  // one write a call
  EXPECT_EQ(rpc.opener->opens, N + 1);
  // Each open found the service handed out before it already released.
  for (int i = 2; i <= N; i++) EXPECT_TRUE(rpc.opener->goneAtOpen[i]) << i;
  EXPECT_FALSE(rpc.opener->gone);  // the last one's Release still waits
}

// A Finish for a call still running cancels it: that goes at once.
TEST(BufferedMessageStreamTest, AFinishThatCancelsACallGoesAtOnce) {
  RpcPair rpc(kj::heap<Opener>());
  auto service = rpc.cap.openRequest().send().wait(rpc.io.waitScope).getService();
  {
    auto req = service.readRequest();
    auto pending = req.send();
    rpc.settle();
    EXPECT_FALSE(rpc.opener->cancelled);
  }  // dropped: cancelled
  rpc.settle();
  EXPECT_TRUE(rpc.opener->cancelled);
}

// Clean-up messages held pile up to MAX_HELD_MESSAGES at most.
TEST(BufferedMessageStreamTest, HeldCleanUpMessagesAreBounded) {
  RpcPair rpc(kj::heap<Opener>());
  {
    std::vector<wire::DataService::Client> services;
    for (size_t i = 0; i < 2 * BufferedMessageStream::MAX_HELD_MESSAGES; i++) {
      services.push_back(rpc.cap.openRequest().send().wait(rpc.io.waitScope).getService());
    }
    rpc.settle();
  }
  auto writes = rpc.clientStream.counts().writes;
  EXPECT_FALSE(rpc.opener->gone);
  rpc.settle();
  // 128 Releases, dropped in one turn: written without a call to carry
  // them, the 64th on.
  EXPECT_EQ(rpc.clientStream.counts().writes, writes + 1);
  EXPECT_TRUE(rpc.opener->gone);
}

}  // namespace
}  // namespace squall
