// Live streams end to end inside one process: governors (each with its own
// store, hub, queue, fake upstream and data service on 127.0.0.1) run real
// producer and reader programs connected by pipes, named pipes and the data
// service. Test thread only.
#include "governor-control.h"
#include "result-batcher.h"
#include "stream-hub.h"
#include "test-tasks.h"
#include "test-util.h"

#include <dirent.h>
#include <sys/stat.h>
#include <functional>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <unistd.h>

namespace squall {
namespace {

// One governor's services, wired as main() wires them.
struct TestGovernor {
  TestGovernor(kj::AsyncIoContext& io, UvBridge& bridge, spdlog::logger& logger, TempDir& dir,
               kj::StringPtr name, CompressStreams compress, kj::Duration attachTimeout)
      : store(bridge, dir.sub(kj::str(name, "-objects")), logger, 64 << 20),
        env{bridge, io.provider->getTimer(), store, logger, dir.sub(kj::str(name, "-tasks")),
            kj::str(name), captureEnvironment()},
        fetcher(io.provider->getNetwork(), bridge, store, kj::str("secret"), logger),
        hub(io.unixEventPort, io.provider->getTimer(), bridge, store, fetcher, logger, kj::str(name),
            compress, attachTimeout),
        dataEnv{store, logger, kj::str("secret"), kj::str(name)} {
    env.streams = hub;
    dataEnv.streams = hub;
    makeDirs(env.tasksDir);
    auto receiver = waitWithTimeout(io, listenOn(io.provider->getNetwork(), "127.0.0.1:0"));
    address = kj::str("127.0.0.1:", receiver->getPort());
    listener = kj::heap<RpcListener>(
        kj::mv(receiver),
        [this](kj::Own<PeerGate> gate) -> capnp::Capability::Client {
          return kj::heap<DataBootstrapImpl>(dataEnv, kj::mv(gate));
        },
        io.provider->getTimer(), logger);
    listening = listener->run().eagerlyEvaluate(nullptr);
    auto fake = kj::heap<FakeUpstream>();
    upstream = fake.get();
    batcher = kj::heap<ResultBatcher>(wire::GovernorUpstream::Client(kj::mv(fake)), io.provider->getTimer(),
                                      logger);
    queue = kj::heap<TaskQueue>(env, fetcher, 8, std::vector<ResourcePool>{}, [this](TaskOutcome o) { batcher->report(kj::mv(o)); });
    control = kj::heap<GovernorControlImpl>(store, *queue, *batcher, logger);
  }

  ObjectStore store;
  TaskEnv env;
  DataFetcher fetcher;
  StreamHub hub;
  DataServiceEnv dataEnv;
  kj::String address;
  kj::Own<RpcListener> listener;
  kj::Promise<void> listening = nullptr;
  FakeUpstream* upstream = nullptr;
  kj::Own<ResultBatcher> batcher;
  kj::Own<TaskQueue> queue;
  wire::GovernorControl::Client control = nullptr;
};

struct StreamMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::shared_ptr<spdlog::logger> logger = testLogger();
  TempDir dir;
  UvBridge bridge{io.unixEventPort, io.provider->getTimer(), *logger};
  std::vector<kj::Own<TestGovernor>> governors;
};

std::string seqText(int n) {
  std::string text;
  for (int i = 1; i <= n; i++) text += std::to_string(i) + "\n";
  return text;
}

uint64_t hashOf(const std::string& text) {
  return hashBytes(kj::arrayPtr(reinterpret_cast<const kj::byte*>(text.data()), text.size()));
}

size_t openFdCount() {
  size_t n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  KJ_ASSERT(d != nullptr);
  while (auto* entry = ::readdir(d)) {
    if (entry->d_name[0] != '.') n++;
  }
  ::closedir(d);
  return n - 1;  // the directory's own descriptor
}

// A number from a "name: value" line of a /proc file, or -1.
int64_t procField(int pid, const char* file, const char* field) {
  auto text = readWholeFile(kj::str("/proc/", pid, "/", file));
  auto at = text.find(std::string(field) + ":");
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + strlen(field) + 1));
}

class StreamTest : public ::testing::Test {
 protected:
  // KJ objects may throw from destructors; gtest fixtures must not.
  std::unique_ptr<StreamMembers> members = std::make_unique<StreamMembers>();
  kj::AsyncIoContext& io = members->io;
  TempDir& dir = members->dir;

  TestGovernor& start(kj::StringPtr name, CompressStreams compress = CompressStreams::AUTO,
                      kj::Duration attachTimeout = 60 * kj::SECONDS) {
    members->governors.push_back(kj::heap<TestGovernor>(io, members->bridge, *members->logger, dir, name,
                                                        compress, attachTimeout));
    return *members->governors.back();
  }

  void TearDown() override {
    for (auto& g : members->governors) waitWithTimeout(io, g->queue->shutdown());
    while (!members->governors.empty()) members->governors.pop_back();
  }

  void assign(TestGovernor& g, const std::vector<ExecSpec>& specs) {
    auto request = g.control.assignRequest();
    auto tasks = request.initTasks(specs.size());
    for (size_t i = 0; i < specs.size(); i++) fillExec(tasks[i], specs[i]);
    waitWithTimeout(io, request.send());
  }

  void cancel(TestGovernor& g, Id id) {
    auto request = g.control.cancelTasksRequest();
    id.to(request.initTasks(1)[0]);
    waitWithTimeout(io, request.send());
  }

  const Result& resultOf(TestGovernor& g, Id id) {
    waitWithTimeout(io, g.upstream->waitForAll({id}), 60);
    return g.upstream->results.at(id);
  }

  std::string objectBytes(TestGovernor& g, Id id) {
    auto data = KJ_ASSERT_NONNULL(g.store.data(id), "object missing", id);
    KJ_SWITCH_ONEOF(data) {
      KJ_CASE_ONEOF(blob, kj::Own<const Blob>) { return bytesOf(blob->bytes); }
      KJ_CASE_ONEOF(path, kj::String) { return readWholeFile(path); }
    }
    KJ_UNREACHABLE;
  }

  // Runs the loop until `condition` holds, looking every 10 ms, at most
  // `seconds`. For states no event announces (a process blocked in a
  // write, a reader attached).
  bool eventually(std::function<bool()> condition, int seconds = 20) {
    auto& timer = io.provider->getTimer();
    auto deadline = timer.now() + seconds * kj::SECONDS;
    while (!condition()) {
      if (timer.now() > deadline) return false;
      timer.afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
    }
    return true;
  }

  // The producer (a single dd that wrote its pid to `pidFile`) has blocked
  // in a pipe write that no longer progresses, and by then it had written
  // (/proc/PID/io wchar) no more than `bound` bytes.
  void expectThrottled(kj::StringPtr pidFile, uint64_t bound) {
    int pid = 0;
    ASSERT_TRUE(eventually([&]() {
      auto text = readWholeFile(pidFile);
      if (text.empty() || text.back() != '\n') return false;
      pid = std::stoi(text);
      return true;
    }));
    int64_t last = -1;
    bool stalled = eventually(
        [&]() {
          auto wchan = readWholeFile(kj::str("/proc/", pid, "/wchan"));
          int64_t written = procField(pid, "io", "wchar");
          bool blocked = wchan.find("pipe_write") != std::string::npos && written == last;
          last = written;
          return blocked;
        },
        30);
    ASSERT_TRUE(stalled) << "the producer did not block";
    EXPECT_LE(static_cast<uint64_t>(last), bound) << "the producer got " << last << " bytes ahead";
    EXPECT_GE(static_cast<uint64_t>(last), 65536u);
  }

  // A producer (a `seq`) and `readers` readers copying their stdin to an
  // output: reader i is task {1, 10 + 2i}, its copy {1, 11 + 2i}.
  ExecSpec seqProducer(int n, uint32_t readers, bool persist = false) {
    return {.id = {1, 1}, .args = {"seq", "1", std::to_string(n)},
            .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = readers, .persist = persist}},
            .name = "seq"};
  }
  ExecSpec catReader(int i, std::vector<std::string> sources = {}, bool earlyCloseIsError = false) {
    return {.id = {1, static_cast<uint64_t>(10 + 2 * i)}, .args = {"cat"}, .stdinInput = 0,
            .inputs = {{.object = {1, 2}, .sources = sources, .live = true,
                        .earlyCloseIsError = earlyCloseIsError}},
            .outputs = {{.object = {1, static_cast<uint64_t>(11 + 2 * i)}}}};
  }
  ExecSpec shellReader(int i, std::string line, std::vector<std::string> sources = {},
                       bool earlyCloseIsError = false) {
    auto spec = catReader(i, kj::mv(sources), earlyCloseIsError);
    spec.args = {kj::mv(line)};
    spec.shell = true;
    return spec;
  }
};

TEST_F(StreamTest, LocalProducerFeedsAReaderOnStdin) {
  auto& a = start("gov-a");
  auto text = seqText(200000);
  assign(a, {seqProducer(200000, 1), catReader(0)});
  auto& reader = resultOf(a, {1, 10});
  ASSERT_TRUE(reader.ok) << reader.error;
  EXPECT_EQ(objectBytes(a, {1, 11}), text);
  auto& producer = resultOf(a, {1, 1});
  ASSERT_TRUE(producer.ok) << producer.error;
  ASSERT_EQ(producer.outputs.size(), 1u);
  EXPECT_EQ(producer.outputs[0].second.first, text.size());  // bytes that flowed
  EXPECT_EQ(producer.outputs[0].second.second, 0u);          // not persisted: no hash
  EXPECT_TRUE(a.store.find({1, 2}) == nullptr);
  EXPECT_EQ(a.hub.activeCount(), 0u);
}

TEST_F(StreamTest, FanOutGivesEveryReaderEveryByte) {
  auto& a = start("gov-a");
  auto text = seqText(600000);  // several chunks
  assign(a, {catReader(0), seqProducer(600000, 3), catReader(1), catReader(2)});
  for (int i = 0; i < 3; i++) {
    auto& reader = resultOf(a, {1, static_cast<uint64_t>(10 + 2 * i)});
    ASSERT_TRUE(reader.ok) << reader.error;
    EXPECT_EQ(hashOf(objectBytes(a, {1, static_cast<uint64_t>(11 + 2 * i)})), hashOf(text)) << i;
  }
  auto& producer = resultOf(a, {1, 1});
  ASSERT_TRUE(producer.ok) << producer.error;
  EXPECT_EQ(producer.outputs[0].second.first, text.size());
}

TEST_F(StreamTest, ReadersOnOtherGovernorsGetEveryByteWithAndWithoutLz4) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");                          // loopback: raw chunks
  auto& c = start("gov-c", CompressStreams::ON);     // LZ4 chunks
  auto text = seqText(600000);
  assign(b, {catReader(0, {a.address.cStr()})});
  assign(c, {catReader(1, {a.address.cStr()})});
  assign(a, {seqProducer(600000, 3), catReader(2)});
  auto& viaB = resultOf(b, {1, 10});
  ASSERT_TRUE(viaB.ok) << viaB.error;
  EXPECT_EQ(hashOf(objectBytes(b, {1, 11})), hashOf(text));
  auto& viaC = resultOf(c, {1, 12});
  ASSERT_TRUE(viaC.ok) << viaC.error;
  EXPECT_EQ(hashOf(objectBytes(c, {1, 13})), hashOf(text));
  auto& local = resultOf(a, {1, 14});
  ASSERT_TRUE(local.ok) << local.error;
  EXPECT_EQ(objectBytes(a, {1, 15}), text);
  auto& producer = resultOf(a, {1, 1});
  ASSERT_TRUE(producer.ok) << producer.error;
  EXPECT_EQ(producer.outputs[0].second.first, text.size());
  EXPECT_EQ(a.hub.activeCount(), 0u);
}

TEST_F(StreamTest, ASingleRemoteReaderGetsEveryByte) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  auto text = seqText(400000);
  assign(b, {catReader(0, {a.address.cStr()})});
  assign(a, {seqProducer(400000, 1)});
  auto& r = resultOf(b, {1, 10});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(hashOf(objectBytes(b, {1, 11})), hashOf(text));
  auto& p = resultOf(a, {1, 1});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.outputs[0].second.first, text.size());
}

TEST_F(StreamTest, LosingTheProducersGovernorFailsTheReader) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  ExecSpec yes{.id = {1, 1}, .args = {"yes"},
               .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 1}}};
  // The reader says when the first bytes arrived.
  auto marker = dir.sub("flowing");
  assign(b, {shellReader(0, kj::str("head -c 1 > /dev/null && touch ", marker, " && cat > /dev/null").cStr(),
                         {a.address.cStr()})});
  assign(a, {yes});
  EXPECT_TRUE(eventually([&]() { return access(marker.cStr(), F_OK) == 0; }));
  // gov-a's data connections go (as when its process dies).
  a.listening = nullptr;
  a.listener = nullptr;
  auto& r = resultOf(b, {1, 10});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind(std::string("input stream 1/2 failed: lost the producer's governor ") +
                              a.address.cStr(), 0),
            0u)
      << r.error;
  // For the producer the reader has gone: a broken pipe, not an error.
  auto& p = resultOf(a, {1, 1});
  EXPECT_TRUE(p.ok) << p.error;
  EXPECT_EQ(b.hub.activeCount(), 0u);
}

TEST_F(StreamTest, ChoosesCompressionByTheProducersAddress) {
  EXPECT_FALSE(shouldCompress(CompressStreams::AUTO, "127.0.0.1:7211"));
  EXPECT_FALSE(shouldCompress(CompressStreams::AUTO, "127.3.4.5:1"));
  EXPECT_FALSE(shouldCompress(CompressStreams::AUTO, "[::1]:7211"));
  EXPECT_FALSE(shouldCompress(CompressStreams::AUTO, "localhost:7211"));
  EXPECT_TRUE(shouldCompress(CompressStreams::AUTO, "10.0.0.7:7211"));
  EXPECT_TRUE(shouldCompress(CompressStreams::AUTO, "node7:7211"));
  EXPECT_TRUE(shouldCompress(CompressStreams::ON, "127.0.0.1:7211"));
  EXPECT_FALSE(shouldCompress(CompressStreams::OFF, "node7:7211"));
  EXPECT_TRUE(parseCompressStreams("auto") != nullptr);
  EXPECT_TRUE(parseCompressStreams("maybe") == nullptr);
}

TEST_F(StreamTest, PersistedStreamIsHeldAsABlobAndFetchable) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  auto text = seqText(300000);
  assign(a, {seqProducer(300000, 1, true), shellReader(0, "wc -c")});
  auto& reader = resultOf(a, {1, 10});
  ASSERT_TRUE(reader.ok) << reader.error;
  EXPECT_EQ(objectBytes(a, {1, 11}), std::to_string(text.size()) + "\n");
  auto& producer = resultOf(a, {1, 1});
  ASSERT_TRUE(producer.ok) << producer.error;
  EXPECT_EQ(producer.outputs[0].second.first, text.size());
  EXPECT_EQ(producer.outputs[0].second.second, hashOf(text));
  auto meta = KJ_ASSERT_NONNULL(a.store.find({1, 2}));
  EXPECT_EQ(meta.kind, wire::ObjectKind::BLOB);
  EXPECT_EQ(meta.size, text.size());
  EXPECT_EQ(meta.hash, hashOf(text));
  EXPECT_EQ(objectBytes(a, {1, 2}), text);

  // Afterwards it is a blob like any other: fetched by another governor.
  waitWithTimeout(io, b.fetcher.fetch({1, 2}, wire::ObjectKind::BLOB, a.address));
  EXPECT_EQ(objectBytes(b, {1, 2}), text);

  // Persisted with no live reader at all.
  assign(a, {{.id = {2, 1}, .args = {"seq", "1", "1000"},
              .outputs = {{.object = {2, 2}, .stream = true, .liveReaders = 0, .persist = true}}}});
  auto& alone = resultOf(a, {2, 1});
  ASSERT_TRUE(alone.ok) << alone.error;
  EXPECT_EQ(objectBytes(a, {2, 2}), seqText(1000));
}

TEST_F(StreamTest, NamedPipeOutputFeedsNamedPipeInputs) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  auto text = seqText(100000);
  ExecSpec producer{.id = {1, 1}, .args = {"seq 1 100000 > out/stream.fifo"}, .shell = true,
                    .outputs = {{.object = {1, 2}, .path = "out/stream.fifo", .stream = true,
                                 .liveReaders = 2}},
                    .name = "seq"};
  ExecSpec local{.id = {1, 10}, .args = {"cat in/pipe > copy"}, .shell = true,
                 .inputs = {{.object = {1, 2}, .path = "in/pipe", .live = true}},
                 .outputs = {{.object = {1, 11}, .path = "copy"}}};
  ExecSpec remote{.id = {1, 12}, .args = {"test -p pipe && cat pipe > copy"}, .shell = true,
                  .inputs = {{.object = {1, 2}, .path = "pipe", .sources = {a.address.cStr()}, .live = true}},
                  .outputs = {{.object = {1, 13}, .path = "copy"}}};
  assign(b, {remote});
  assign(a, {producer, local});
  auto& r1 = resultOf(a, {1, 10});
  ASSERT_TRUE(r1.ok) << r1.error;
  EXPECT_EQ(objectBytes(a, {1, 11}), text);
  auto& r2 = resultOf(b, {1, 12});
  ASSERT_TRUE(r2.ok) << r2.error;
  EXPECT_EQ(objectBytes(b, {1, 13}), text);
  auto& p = resultOf(a, {1, 1});
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.outputs[0].second.first, text.size());
}

TEST_F(StreamTest, NamedPipeInputKeepsBytesTheProgramOpensLate) {
  auto& a = start("gov-a");
  // The stream has ended long before the reader opens its pipe.
  ExecSpec producer{.id = {1, 1}, .args = {"echo", "early bytes"},
                    .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 1}}};
  ExecSpec reader{.id = {1, 10}, .args = {"while [ ! -e go ]; do sleep 0.01; done; cat in > copy"},
                  .shell = true, .inputs = {{.object = {1, 2}, .path = "in", .live = true}},
                  .outputs = {{.object = {1, 11}, .path = "copy"}}};
  assign(a, {producer, reader});
  // The producer is reported only after the reader's end of file was
  // delivered, which waits for the reader to open its pipe.
  auto sandbox = kj::str(a.env.tasksDir, "/1-10");
  EXPECT_TRUE(eventually([&]() {
    struct stat st;
    return ::stat(kj::str(sandbox, "/in").cStr(), &st) == 0 && a.queue->runningCount() == 2;
  }));
  EXPECT_TRUE(a.upstream->results.empty());
  writeText(kj::str(sandbox, "/go"), "");
  auto& r = resultOf(a, {1, 10});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(objectBytes(a, {1, 11}), "early bytes\n");
  EXPECT_TRUE(resultOf(a, {1, 1}).ok);
}

TEST_F(StreamTest, ProducerFailureFailsLocalAndRemoteReaders) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  ExecSpec producer{.id = {1, 1}, .args = {"seq 1 100000; exit 3"}, .shell = true,
                    .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 2}}, .name = "zcat"};
  // Both would run long after their input ended: they must be killed.
  assign(b, {shellReader(0, "cat > /dev/null; sleep 1000", {a.address.cStr()})});
  assign(a, {producer, shellReader(1, "cat > /dev/null; sleep 1000")});
  auto& p = resultOf(a, {1, 1});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.exitStatus, 3);
  std::string expected = "input stream 1/2 failed: producer task 1/1 (zcat) exited with status 3";
  auto& local = resultOf(a, {1, 12});
  EXPECT_FALSE(local.ok);
  EXPECT_EQ(local.error, expected);
  auto& remote = resultOf(b, {1, 10});
  EXPECT_FALSE(remote.ok);
  EXPECT_EQ(remote.error, expected);
  EXPECT_EQ(a.hub.activeCount(), 0u);
}

TEST_F(StreamTest, ProducerThatCannotStartFailsItsReaders) {
  auto& a = start("gov-a");
  ExecSpec producer{.id = {1, 1}, .args = {"squall-no-such-program"},
                    .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 1}}};
  assign(a, {catReader(0), producer});
  auto& r = resultOf(a, {1, 10});
  EXPECT_FALSE(r.ok);
  const std::string notFound = "program 'squall-no-such-program' not found on governor gov-a in its PATH (";
  EXPECT_EQ(r.error.rfind("input stream 1/2 failed: producer task 1/1 (squall-no-such-program) could not "
                          "start: " + notFound, 0), 0u) << r.error;
  EXPECT_EQ(resultOf(a, {1, 1}).error.rfind(notFound, 0), 0u) << resultOf(a, {1, 1}).error;
}

TEST_F(StreamTest, ReaderThatClosesEarlyLeavesTheProducerOkByDefault) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  ExecSpec yes{.id = {1, 1}, .args = {"yes"},
               .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 1}}};
  assign(a, {yes, shellReader(0, "head -c 10")});
  auto& r = resultOf(a, {1, 10});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(objectBytes(a, {1, 11}), "y\ny\ny\ny\ny\n");
  auto& p = resultOf(a, {1, 1});
  EXPECT_TRUE(p.ok) << p.error;

  // The same through a shell (status 141) and a reader on another governor.
  ExecSpec shellYes{.id = {2, 1}, .args = {"yes"}, .shell = true,
                    .outputs = {{.object = {2, 2}, .stream = true, .liveReaders = 1}}};
  ExecSpec remote{.id = {2, 10}, .args = {"head -c 4"}, .shell = true, .stdinInput = 0,
                  .inputs = {{.object = {2, 2}, .sources = {a.address.cStr()}, .live = true}},
                  .outputs = {{.object = {2, 11}}}};
  assign(b, {remote});
  assign(a, {shellYes});
  auto& r2 = resultOf(b, {2, 10});
  ASSERT_TRUE(r2.ok) << r2.error;
  EXPECT_EQ(objectBytes(b, {2, 11}), "y\ny\n");
  auto& p2 = resultOf(a, {2, 1});
  EXPECT_TRUE(p2.ok) << p2.error;
}

TEST_F(StreamTest, EarlyCloseIsAnErrorWhenTheEdgeSaysSo) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  ExecSpec yes{.id = {1, 1}, .args = {"yes"},
               .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 1}}};
  assign(a, {yes, shellReader(0, "head -c 10", {}, true)});
  EXPECT_TRUE(resultOf(a, {1, 10}).ok);
  auto& p = resultOf(a, {1, 1});
  EXPECT_FALSE(p.ok);
  EXPECT_EQ(p.error, "reader task 1/10 closed its end of stream 1/2 early (broken pipe)");

  ExecSpec yes2{.id = {2, 1}, .args = {"yes"},
                .outputs = {{.object = {2, 2}, .stream = true, .liveReaders = 1}}};
  ExecSpec remote{.id = {2, 10}, .args = {"head -c 4"}, .shell = true, .stdinInput = 0,
                  .inputs = {{.object = {2, 2}, .sources = {a.address.cStr()}, .live = true,
                              .earlyCloseIsError = true}},
                  .outputs = {{.object = {2, 11}}}};
  assign(b, {remote});
  assign(a, {yes2});
  EXPECT_TRUE(resultOf(b, {2, 10}).ok);
  auto& p2 = resultOf(a, {2, 1});
  EXPECT_FALSE(p2.ok);
  EXPECT_EQ(p2.error, "reader task 2/10 closed its end of stream 2/2 early (broken pipe)");

  // In a fan-out the other readers read on to the end, then fail with it.
  ExecSpec seq{.id = {3, 1}, .args = {"seq", "1", "1000000"},  // far more than the pipes hold
               .outputs = {{.object = {3, 2}, .stream = true, .liveReaders = 2}}, .name = "seq"};
  ExecSpec head{.id = {3, 10}, .args = {"head -c 10"}, .shell = true, .stdinInput = 0,
                .inputs = {{.object = {3, 2}, .live = true, .earlyCloseIsError = true}},
                .outputs = {{.object = {3, 11}}}};
  ExecSpec rest{.id = {3, 12}, .args = {"wc -c"}, .shell = true, .stdinInput = 0,
                .inputs = {{.object = {3, 2}, .sources = {a.address.cStr()}, .live = true}},
                .outputs = {{.object = {3, 13}}}};
  assign(b, {rest});
  assign(a, {seq, head});
  EXPECT_TRUE(resultOf(a, {3, 10}).ok);
  EXPECT_EQ(resultOf(a, {3, 1}).error, "reader task 3/10 closed its end of stream 3/2 early (broken pipe)");
  EXPECT_EQ(resultOf(b, {3, 12}).error,
            "input stream 3/2 failed: producer task 3/1 (seq) fails because reader task 3/10 closed its "
            "end of stream 3/2 early (broken pipe)");
}

TEST_F(StreamTest, ASlowReaderThrottlesTheProducer) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  auto localPid = dir.sub("local.pid");
  auto remotePid = dir.sub("remote.pid");
  auto producer = [](Id id, kj::StringPtr pidFile) {
    return ExecSpec{.id = id,
                    .args = {kj::str("echo $$ > ", pidFile, ".tmp; mv ", pidFile, ".tmp ", pidFile,
                                     "; exec dd if=/dev/zero bs=65536 status=none")
                                 .cStr()},
                    .shell = true,
                    .outputs = {{.object = {id.session, 2}, .stream = true, .liveReaders = 1}}};
  };
  // Readers that take one byte and stop reading.
  ExecSpec local{.id = {1, 10}, .args = {"dd bs=1 count=1 status=none > /dev/null; sleep 1000"},
                 .shell = true, .stdinInput = 0, .inputs = {{.object = {1, 2}, .live = true}}};
  ExecSpec remote{.id = {2, 10}, .args = {"dd bs=1 count=1 status=none > /dev/null; sleep 1000"},
                  .shell = true, .stdinInput = 0,
                  .inputs = {{.object = {2, 2}, .sources = {a.address.cStr()}, .live = true}}};
  assign(a, {producer({1, 1}, localPid), local});
  assign(b, {remote});
  assign(a, {producer({2, 1}, remotePid)});
  // Local: the producer's pipe and the reader's (1 MiB each) and a chunk.
  expectThrottled(localPid, 3u << 20);
  // Remote: add the RPC window (the socket's send buffer) and the reader
  // governor's chunk in hand.
  expectThrottled(remotePid, 16u << 20);

  for (Id id : {Id{1, 1}, Id{1, 10}, Id{2, 1}}) cancel(a, id);
  cancel(b, {2, 10});
  EXPECT_EQ(resultOf(a, {1, 1}).error, "cancelled");
  EXPECT_EQ(resultOf(a, {2, 1}).error, "cancelled");
  EXPECT_EQ(resultOf(a, {1, 10}).error, "cancelled");
  EXPECT_EQ(resultOf(b, {2, 10}).error, "cancelled");
  EXPECT_EQ(a.hub.activeCount(), 0u);
  EXPECT_EQ(b.hub.activeCount(), 0u);
}

TEST_F(StreamTest, CancellingTheProducerMidFlowFailsItsReadersAndLeavesNothing) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  size_t fdsBefore = openFdCount();
  ExecSpec yes{.id = {1, 1}, .args = {"yes"},
               .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 2}}, .name = "yes"};
  assign(b, {shellReader(0, "cat > /dev/null", {a.address.cStr()})});
  assign(a, {yes, shellReader(1, "cat > /dev/null")});
  EXPECT_TRUE(eventually([&]() { return a.queue->runningCount() == 2 && b.queue->runningCount() == 1; }));
  cancel(a, {1, 1});
  EXPECT_EQ(resultOf(a, {1, 1}).error, "cancelled");
  std::string expected = "input stream 1/2 failed: producer task 1/1 (yes) was cancelled";
  EXPECT_EQ(resultOf(a, {1, 12}).error, expected);
  EXPECT_EQ(resultOf(b, {1, 10}).error, expected);
  EXPECT_EQ(a.queue->runningCount(), 0u);
  EXPECT_EQ(b.queue->runningCount(), 0u);
  EXPECT_EQ(a.hub.activeCount(), 0u);
  // Every pipe is closed (the connection between the governors stays).
  EXPECT_TRUE(eventually([&]() { return openFdCount() <= fdsBefore + 2; }, 5))
      << openFdCount() << " open, " << fdsBefore << " before";
}

TEST_F(StreamTest, CancellingAReaderMidFlowLeavesTheProducerOk) {
  auto& a = start("gov-a");
  size_t fdsBefore = openFdCount();
  ExecSpec yes{.id = {1, 1}, .args = {"yes"},
               .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 1}}};
  assign(a, {yes, shellReader(0, "cat > /dev/null")});
  EXPECT_TRUE(eventually([&]() { return a.queue->runningCount() == 2; }));
  cancel(a, {1, 10});
  EXPECT_EQ(resultOf(a, {1, 10}).error, "cancelled");
  auto& p = resultOf(a, {1, 1});
  EXPECT_TRUE(p.ok) << p.error;
  EXPECT_EQ(a.queue->runningCount(), 0u);
  EXPECT_EQ(a.hub.activeCount(), 0u);
  EXPECT_TRUE(eventually([&]() { return openFdCount() <= fdsBefore; }, 5))
      << openFdCount() << " open, " << fdsBefore << " before";
}

TEST_F(StreamTest, ReaderMayAttachBeforeItsProducerIsAssigned) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  auto text = seqText(50000);
  assign(a, {catReader(0)});
  assign(b, {catReader(1, {a.address.cStr()})});
  // Both readers run and wait at gov-a for a stream nobody produces yet.
  EXPECT_TRUE(eventually([&]() { return a.hub.activeCount() == 1 && b.queue->runningCount() == 1; }));
  EXPECT_EQ(a.queue->runningCount(), 1u);
  assign(a, {seqProducer(50000, 2)});
  auto& local = resultOf(a, {1, 10});
  ASSERT_TRUE(local.ok) << local.error;
  EXPECT_EQ(objectBytes(a, {1, 11}), text);
  auto& remote = resultOf(b, {1, 12});
  ASSERT_TRUE(remote.ok) << remote.error;
  EXPECT_EQ(objectBytes(b, {1, 13}), text);
  EXPECT_TRUE(resultOf(a, {1, 1}).ok);
}

TEST_F(StreamTest, ReaderWhoseProducerNeverAppearsFailsClearly) {
  auto& a = start("gov-a", CompressStreams::AUTO, 300 * kj::MILLISECONDS);
  auto& b = start("gov-b");
  assign(a, {catReader(0)});
  assign(b, {catReader(1, {a.address.cStr()})});
  EXPECT_EQ(resultOf(a, {1, 10}).error,
            "input stream 1/2 failed: its producer did not appear on governor gov-a within 0.3 s");
  // A live read from another governor waits as long, and says the same.
  EXPECT_EQ(resultOf(b, {1, 12}).error,
            "input stream 1/2 failed: its producer did not appear on governor gov-a within 0.3 s");
  EXPECT_EQ(a.hub.activeCount(), 0u);
}

TEST_F(StreamTest, AFetchOfAnObjectNotHeldFailsAtOnce) {
  // A governor with live streams still answers a plain read of an id it
  // does not hold at once: only a live read waits for a producer.
  auto& a = start("gov-a", CompressStreams::AUTO, 3600 * kj::SECONDS);
  auto& b = start("gov-b");
  auto error = waitWithTimeout(io, b.fetcher.fetch({1, 2}, wire::ObjectKind::BLOB, a.address)
                                       .then([]() { return std::string("no error"); },
                                             [](kj::Exception&& e) { return std::string(e.getDescription().cStr()); }));
  EXPECT_EQ(error, std::string("cannot fetch object 1/2 from ") + a.address.cStr() +
                       ": object 1/2 is not held by governor gov-a");
  EXPECT_EQ(a.hub.activeCount(), 0u);
  EXPECT_TRUE(b.store.find({1, 2}) == nullptr);

  // A live read starts at offset 0.
  auto client = waitWithTimeout(io, connectTo(io.provider->getNetwork(), a.address));
  auto open = client->bootstrap<wire::DataBootstrap>().openRequest();
  open.setVersion(wire::PROTOCOL_VERSION);
  open.setToken("secret");
  auto read = open.send().getService().readRequest();
  Id{1, 2}.to(read.initId());
  read.setOffset(5);
  read.setLive(true);
  auto refused = waitWithTimeout(io, read.send().then([](auto) { return std::string("no error"); },
                                                      [](kj::Exception&& e) { return std::string(userMessage(e).cStr()); }));
  EXPECT_EQ(refused, "offset 5 is not allowed for a live read of stream 1/2 on governor gov-a: a live "
                     "reader reads from offset 0");
  EXPECT_EQ(a.hub.activeCount(), 0u);
}

TEST_F(StreamTest, AReaderThatEndsBeforeAttachingDoesNotHoldUpItsProducer) {
  auto& a = start("gov-a");
  // The reader fails before it starts (a missing input); its producer must
  // not wait for it forever.
  ExecSpec reader{.id = {1, 10}, .args = {"cat"}, .stdinInput = 0,
                  .inputs = {{.object = {1, 2}, .live = true}, {.object = {7, 7}, .path = "missing"}}};
  assign(a, {reader, seqProducer(10, 1)});
  EXPECT_FALSE(resultOf(a, {1, 10}).ok);
  auto& p = resultOf(a, {1, 1});
  EXPECT_TRUE(p.ok) << p.error;
}

TEST_F(StreamTest, AReaderCancelledBeforeAttachingReleasesItsProducer) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  // `yes` never ends by itself: only its readers' ends closing stop it.
  auto yes = [](uint64_t session, uint32_t readers) {
    return ExecSpec{.id = {session, 1}, .args = {"yes"},
                    .outputs = {{.object = {session, 2}, .stream = true, .liveReaders = readers}},
                    .name = "yes"};
  };
  // Readers that wait in their governor's queue for cpus (8 each, where
  // the producer or another task holds one), so they never attach.
  auto queued = [](uint64_t session, std::vector<std::string> sources, bool earlyCloseIsError) {
    return ExecSpec{.id = {session, 10}, .args = {"cat"}, .stdinInput = 0,
                    .inputs = {{.object = {session, 2}, .sources = sources, .live = true,
                                .earlyCloseIsError = earlyCloseIsError}},
                    .outputs = {{.object = {session, 11}}}, .cpus = 8};
  };
  ExecSpec occupant{.id = {9, 1}, .args = {"sleep", "1000"}};
  assign(b, {occupant});

  // Local reader, remote reader, each with and without earlyCloseIsError.
  // (The queue does not let a task overtake one that waits for cpus.)
  assign(a, {yes(1, 1), yes(2, 1), queued(1, {}, false)});
  assign(b, {queued(2, {a.address.cStr()}, false)});
  EXPECT_TRUE(eventually([&]() { return a.queue->runningCount() == 2 && b.queue->waitingCount() == 1; }));
  cancel(a, {1, 10});
  cancel(b, {2, 10});
  EXPECT_EQ(resultOf(a, {1, 10}).error, "cancelled");
  EXPECT_EQ(resultOf(b, {2, 10}).error, "cancelled");
  auto& p1 = resultOf(a, {1, 1});
  EXPECT_TRUE(p1.ok) << p1.error;
  auto& p2 = resultOf(a, {2, 1});
  EXPECT_TRUE(p2.ok) << p2.error;

  assign(a, {yes(3, 1), yes(4, 1), queued(3, {}, true)});
  assign(b, {queued(4, {a.address.cStr()}, true)});
  EXPECT_TRUE(eventually([&]() { return a.queue->runningCount() == 2 && b.queue->waitingCount() == 1; }));
  cancel(a, {3, 10});
  cancel(b, {4, 10});
  auto& p3 = resultOf(a, {3, 1});
  EXPECT_FALSE(p3.ok);
  EXPECT_EQ(p3.error, "reader task 3/10 closed its end of stream 3/2 early (broken pipe)");
  auto& p4 = resultOf(a, {4, 1});
  EXPECT_FALSE(p4.ok);
  EXPECT_EQ(p4.error, "reader task 4/10 closed its end of stream 4/2 early (broken pipe)");
  EXPECT_EQ(a.hub.activeCount(), 0u);
  EXPECT_EQ(b.hub.activeCount(), 0u);
  cancel(b, {9, 1});
}

TEST_F(StreamTest, ATaskReadingAStreamTwiceCountsAsTwoReaders) {
  auto& a = start("gov-a");
  auto text = seqText(20000);
  // Three readers: one task reading the stream twice, and catReader(0)
  // assigned only once the first has been cancelled: the flow must wait
  // for it, so it gets every byte.
  ExecSpec twice{.id = {1, 20}, .args = {"sleep 1000 < in"}, .shell = true, .stdinInput = 0,
                 .inputs = {{.object = {1, 2}, .live = true}, {.object = {1, 2}, .path = "in", .live = true}}};
  assign(a, {seqProducer(20000, 3), twice});
  EXPECT_TRUE(eventually([&]() { return a.queue->runningCount() == 2; }));
  cancel(a, {1, 20});
  EXPECT_EQ(resultOf(a, {1, 20}).error, "cancelled");
  EXPECT_EQ(a.hub.activeCount(), 1u);
  assign(a, {catReader(0)});
  auto& r = resultOf(a, {1, 10});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(objectBytes(a, {1, 11}), text);
  auto& p = resultOf(a, {1, 1});
  EXPECT_TRUE(p.ok) << p.error;
}

TEST_F(StreamTest, ReadersThatGaveUpBeforeTheProducerCameStillCount) {
  // The stream is remembered for the attach timeout after it gave up: long
  // enough for the waiting reader to be killed and reported.
  auto& a = start("gov-a", CompressStreams::AUTO, 1 * kj::SECONDS);
  // Readers that end before they attach (a missing input).
  auto doomed = [](uint64_t n) {
    return ExecSpec{.id = {1, n}, .args = {"cat"}, .stdinInput = 0,
                    .inputs = {{.object = {1, 2}, .live = true}, {.object = {7, 7}, .path = "missing"}}};
  };
  // One ends before the stream gives up on its producer, one waits in
  // vain, one ends after that.
  assign(a, {doomed(20), catReader(0)});
  EXPECT_FALSE(resultOf(a, {1, 20}).ok);
  EXPECT_EQ(resultOf(a, {1, 10}).error,
            "input stream 1/2 failed: its producer did not appear on governor gov-a within 1 s");
  ASSERT_EQ(a.hub.activeCount(), 0u);
  assign(a, {doomed(21)});
  EXPECT_FALSE(resultOf(a, {1, 21}).ok);
  // The producer comes late, while the stream is still remembered: its
  // three readers have gone, so it meets a broken pipe instead of waiting
  // for them forever.
  ExecSpec yes{.id = {1, 1}, .args = {"yes"},
               .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 3}}};
  assign(a, {yes});
  auto& p = resultOf(a, {1, 1});
  EXPECT_TRUE(p.ok) << p.error;
  EXPECT_EQ(a.hub.activeCount(), 0u);
}

TEST_F(StreamTest, ARemoteReaderThatFailsBeforeAttachingReleasesItsProducer) {
  auto& a = start("gov-a");
  auto& b = start("gov-b");
  ExecSpec yes{.id = {1, 1}, .args = {"yes"},
               .outputs = {{.object = {1, 2}, .stream = true, .liveReaders = 2}}, .name = "yes"};
  // One reader can never run on gov-b (9 cpus of 8); the other reads on.
  auto doomed = catReader(0, {a.address.cStr()});
  doomed.cpus = 9;
  assign(b, {doomed});
  assign(a, {yes, shellReader(1, "head -c 100000 > /dev/null")});
  EXPECT_EQ(resultOf(b, {1, 10}).error, "task needs 9 cpus but governor gov-b has only 8");
  auto& reader = resultOf(a, {1, 12});
  EXPECT_TRUE(reader.ok) << reader.error;
  auto& p = resultOf(a, {1, 1});
  EXPECT_TRUE(p.ok) << p.error;
  EXPECT_EQ(a.hub.activeCount(), 0u);
}

}  // namespace
}  // namespace squall
