// Drives GovernorControlImpl in-process, with a fake GovernorUpstream
// (test-tasks.h) collecting the results: execute with real programs,
// built-ins, fetching, cancel and batching. Test thread only.
#include "governor-control.h"

#include "result-batcher.h"
#include "test-tasks.h"
#include "test-util.h"

#include <fcntl.h>
#include <squall/proto/chunk-codec.h>
#include <sys/stat.h>
#include <unistd.h>
#include <map>
#include <vector>

namespace squall {
namespace {

struct ControlMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::shared_ptr<spdlog::logger> logger = testLogger();
  TempDir dir;
  UvBridge bridge{io.unixEventPort, io.provider->getTimer(), *logger};
  ObjectStore store{bridge, dir.sub("objects"), *logger, 64 << 20};
  TaskEnv env{bridge, io.provider->getTimer(), store, *logger, dir.sub("tasks"), kj::str("gov-test"),
              captureEnvironment()};
  DataFetcher fetcher{io.provider->getNetwork(), bridge, store, kj::str(""), *logger};
  kj::Own<ResultBatcher> batcher;
  kj::Own<TaskQueue> queue;
  wire::GovernorControl::Client control = nullptr;
};

class GovernorControlTest : public ::testing::Test {
 protected:
  // KJ objects may throw from destructors; gtest fixtures must not.
  std::unique_ptr<ControlMembers> members = std::make_unique<ControlMembers>();
  kj::AsyncIoContext& io = members->io;
  std::shared_ptr<spdlog::logger> logger = members->logger;
  TempDir& dir = members->dir;
  UvBridge& bridge = members->bridge;
  ObjectStore& store = members->store;
  TaskEnv& env = members->env;
  DataFetcher& fetcher = members->fetcher;
  kj::Own<ResultBatcher>& batcher = members->batcher;
  kj::Own<TaskQueue>& queue = members->queue;
  wire::GovernorControl::Client& control = members->control;
  FakeUpstream* upstream = nullptr;

  void SetUp() override {
    makeDirs(env.tasksDir);
    auto fake = kj::heap<FakeUpstream>();
    upstream = fake.get();
    batcher = kj::heap<ResultBatcher>(wire::GovernorUpstream::Client(kj::mv(fake)),
                                      io.provider->getTimer(), *logger);
    queue = kj::heap<TaskQueue>(env, fetcher, 2, std::vector<ResourcePool>{}, [this](TaskOutcome o) { batcher->report(kj::mv(o)); });
    queue->onDry([this]() { batcher->ranDry(); });
    control = kj::heap<GovernorControlImpl>(store, *queue, *batcher, *logger);
  }

  void TearDown() override {
    waitWithTimeout(io, queue->shutdown());
    control = nullptr;
    queue = nullptr;
    batcher = nullptr;
  }

  // Runs one execute task with optional constants; returns its result.
  Result runExec(const ExecSpec& spec,
                 const std::vector<std::pair<Id, std::string>>& constants = {}) {
    auto request = control.assignRequest();
    fillExec(request.initTasks(1)[0], spec);
    addConstants(request, constants);
    waitWithTimeout(io, request.send());
    waitWithTimeout(io, upstream->waitFor(upstream->results.size() + 1));
    return upstream->results.at(spec.id);
  }

  template <typename Request>
  void addConstants(Request& request, const std::vector<std::pair<Id, std::string>>& constants) {
    auto list = request.initConstants(constants.size());
    for (size_t i = 0; i < constants.size(); i++) {
      constants[i].first.to(list[i].initId());
      list[i].setKind(wire::ObjectKind::BLOB);
      list[i].setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(constants[i].second.data()),
                                   constants[i].second.size()));
    }
  }

  std::string objectBytes(Id id) {
    auto data = KJ_ASSERT_NONNULL(store.data(id), "object missing", id);
    KJ_SWITCH_ONEOF(data) {
      KJ_CASE_ONEOF(blob, kj::Own<const Blob>) { return bytesOf(blob->bytes); }
      KJ_CASE_ONEOF(path, kj::String) { return readWholeFile(path); }
    }
    KJ_UNREACHABLE;
  }

  // Runs what is queued on the loop (an update's answer after its call).
  void settle() {
    for (int i = 0; i < 3; i++) kj::evalLast([]() {}).wait(io.waitScope);
  }

  bool sandboxesGone() {
    struct stat st;
    for (int n = 0; n < 100; n++) {
      if (::stat(kj::str(env.tasksDir, "/1-", n).cStr(), &st) == 0) return false;
    }
    return true;
  }
};

TEST_F(GovernorControlTest, ShellCommandWritesAnOutputFile) {
  auto r = runExec({.id = {1, 1}, .args = {"echo hello > out.txt"}, .shell = true,
                    .outputs = {{{1, 2}, "out.txt"}}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.exitStatus, 0);
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].first, (Id{1, 2}));
  EXPECT_EQ(r.outputs[0].second.first, 6u);
  EXPECT_EQ(r.outputs[0].second.second, hashBytes(kj::StringPtr("hello\n").asBytes()));
  EXPECT_GT(r.startTimeUs, 1600000000000000u);
  EXPECT_EQ(objectBytes({1, 2}), "hello\n");
  EXPECT_TRUE(sandboxesGone());
}

TEST_F(GovernorControlTest, StdoutIsCapturedAndEnvIsAdded) {
  auto r = runExec({.id = {1, 1}, .args = {"printf '%s-%s' \"$GREETING\" x"}, .shell = true,
                    .outputs = {{{1, 2}, ""}, {{1, 3}, ""}}, .env = {{"GREETING", "hi"}}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(objectBytes({1, 2}), "hi-x");
  EXPECT_EQ(objectBytes({1, 3}), "hi-x");
}

TEST_F(GovernorControlTest, StdinMappingFeedsAnInput) {
  auto r = runExec({.id = {1, 1}, .args = {"cat"}, .stdinInput = 0,
                    .inputs = {{{1, 5}, "in.txt"}}, .outputs = {{{1, 2}, ""}}},
                   {{{1, 5}, "abc\ndef\n"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(objectBytes({1, 2}), "abc\ndef\n");
}

TEST_F(GovernorControlTest, InputsAreMappedByPathReadOnly) {
  std::string big(3 * CHUNK_SIZE, 'x');  // large: a file in the store, hard-linked
  auto r = runExec({.id = {1, 1},
                    .args = {"stat -c %a data/small.txt data/big.bin > modes; cat data/small.txt > out; "
                             "wc -c < data/big.bin >> out"},
                    .shell = true,
                    .inputs = {{{1, 5}, "data/small.txt"}, {{1, 6}, "data/big.bin"}},
                    .outputs = {{{1, 2}, "modes"}, {{1, 3}, "out"}}},
                   {{{1, 5}, "small\n"}, {{1, 6}, big}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(objectBytes({1, 2}), "444\n444\n");
  EXPECT_EQ(objectBytes({1, 3}), "small\n" + std::to_string(big.size()) + "\n");
}

TEST_F(GovernorControlTest, NonZeroExitFailsWithStatusAndStderrTail) {
  auto r = runExec({.id = {1, 1}, .args = {"echo oops >&2; exit 3"}, .shell = true});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.exitStatus, 3);
  EXPECT_EQ(r.stderrTail, "oops\n");
  EXPECT_NE(r.error.find("program 'echo oops >&2; exit 3' exited with status 3"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("oops"), std::string::npos) << r.error;

  auto f = runExec({.id = {1, 2}, .args = {"false"}});
  EXPECT_FALSE(f.ok);
  EXPECT_EQ(f.exitStatus, 1);
  EXPECT_EQ(f.error, "program 'false' exited with status 1");
}

TEST_F(GovernorControlTest, StderrTailIsBounded) {
  auto r = runExec({.id = {1, 1}, .args = {"head -c 100000 /dev/zero | tr '\\0' a >&2; echo END >&2; exit 1"},
                    .shell = true});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.stderrTail.size(), 4096u);
  EXPECT_EQ(r.stderrTail.substr(r.stderrTail.size() - 4), "END\n");
}

TEST_F(GovernorControlTest, MissingProgramIsReported) {
  auto r = runExec({.id = {1, 1}, .args = {"squall-no-such-program", "x"}});
  EXPECT_FALSE(r.ok);
  // Naming the governor and the PATH it searched (issue 41).
  EXPECT_EQ(r.error.rfind("program 'squall-no-such-program' not found on governor ", 0), 0u) << r.error;
  EXPECT_NE(r.error.find(" in its PATH (" + std::string(getenv("PATH")) + "); the caller's PATH does not travel"),
            std::string::npos)
      << r.error;
  EXPECT_TRUE(sandboxesGone());
}

TEST_F(GovernorControlTest, NotExecutableProgramIsReported) {
  auto script = dir.sub("script.sh");
  writeFile(script, kj::StringPtr("#!/bin/sh\necho hi\n").asBytes(), 0644);
  auto r = runExec({.id = {1, 1}, .args = {script.cStr()}});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("is not executable"), std::string::npos) << r.error;
}

TEST_F(GovernorControlTest, ProgramKilledBySignalIsReported) {
  auto r = runExec({.id = {1, 1}, .args = {"kill -9 $$"}, .shell = true});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.signal, 9);
  EXPECT_EQ(r.exitStatus, -1);
  EXPECT_EQ(r.error, "program 'kill -9 $$' was killed by signal 9 (SIGKILL)");
}

TEST_F(GovernorControlTest, MissingOutputFileFailsTheTask) {
  auto r = runExec({.id = {1, 1}, .args = {"true"}, .outputs = {{{1, 2}, "nothere"}}});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "output file 'nothere' was not created");
  EXPECT_TRUE(store.find({1, 2}) == nullptr);
  EXPECT_TRUE(sandboxesGone());
}

TEST_F(GovernorControlTest, BadInputPathsFailTheTaskNamingThePath) {
  for (auto path : {"../escape", "/etc/passwd", "", "a/../../b"}) {
    static uint64_t n = 10;
    Id id{1, n++};
    auto r = runExec({.id = id, .args = {"true"}, .inputs = {{{1, 5}, path}}}, {{{1, 5}, "data"}});
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find(std::string("input path '") + path + "' is not allowed"), std::string::npos)
        << r.error;
  }
}

TEST_F(GovernorControlTest, ConcatJoinsSmallAndLargeInputsInOrder) {
  auto request = control.assignRequest();
  auto tasks = request.initTasks(2);
  fillCommon(tasks[0], {2, 1}, {{{2, 10}, ""}, {{2, 11}, ""}}, {{2, 2}}, 1);
  tasks[0].getTask().getConfig().setConcat();
  std::string large(2 * CHUNK_SIZE + 17, 'L');
  fillCommon(tasks[1], {2, 3}, {{{2, 10}, ""}, {{2, 12}, ""}, {{2, 11}, ""}}, {{2, 4}}, 1);
  tasks[1].getTask().getConfig().setConcat();
  addConstants(request, {{{2, 10}, "ab"}, {{2, 11}, "cd"}, {{2, 12}, large}});
  waitWithTimeout(io, request.send());
  waitWithTimeout(io, upstream->waitFor(2));
  auto& small = upstream->results.at({2, 1});
  ASSERT_TRUE(small.ok) << small.error;
  EXPECT_EQ(objectBytes({2, 2}), "abcd");
  auto& big = upstream->results.at({2, 3});
  ASSERT_TRUE(big.ok) << big.error;
  std::string expected = "ab" + large + "cd";
  EXPECT_EQ(big.outputs[0].second.first, expected.size());
  EXPECT_EQ(big.outputs[0].second.second,
            hashBytes(kj::arrayPtr(reinterpret_cast<const kj::byte*>(expected.data()), expected.size())));
  EXPECT_EQ(objectBytes({2, 4}), expected);
}

TEST_F(GovernorControlTest, SleepPassesItsInputThrough) {
  auto request = control.assignRequest();
  auto tasks = request.initTasks(1);
  fillCommon(tasks[0], {3, 1}, {{{3, 10}, ""}}, {{3, 2}}, 1);
  tasks[0].getTask().getConfig().initSleep().setMilliseconds(5);
  addConstants(request, {{{3, 10}, "pass"}});
  waitWithTimeout(io, request.send());
  waitWithTimeout(io, upstream->waitFor(1));
  ASSERT_TRUE(upstream->results.at({3, 1}).ok);
  EXPECT_EQ(objectBytes({3, 2}), "pass");
}

TEST_F(GovernorControlTest, TaskNeedingMoreCpusThanTheGovernorHasFailsAtOnce) {
  auto r = runExec({.id = {1, 1}, .args = {"true"}, .cpus = 3});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "task needs 3 cpus but governor gov-test has only 2");
}

TEST_F(GovernorControlTest, InputWithNoSourceFails) {
  auto r = runExec({.id = {1, 1}, .args = {"true"}, .inputs = {{{7, 7}, "x"}}});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "input 7/7 is not held by governor gov-test and no source was given");
}

TEST_F(GovernorControlTest, CancelKillsTheProcessGroupAndDropsQueuedTasks) {
  // The task starts a background sleep in its group and tells us its pid
  // through a FIFO, so we know it runs before cancelling.
  auto fifo = dir.sub("pid.fifo");
  ASSERT_EQ(mkfifo(fifo.cStr(), 0600), 0);
  int fd = ::open(fifo.cStr(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto reader = io.lowLevelProvider->wrapInputFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  // Our own writer end keeps the FIFO from reading as EOF before the task writes.
  kj::AutoCloseFd keepOpen(::open(fifo.cStr(), O_WRONLY | O_NONBLOCK | O_CLOEXEC));
  ASSERT_GE(keepOpen.get(), 0);

  auto request = control.assignRequest();
  auto tasks = request.initTasks(2);
  fillExec(tasks[0], {.id = {4, 1}, .args = {kj::str("sleep 100 & echo $! > ", fifo, "; wait").cStr()},
                      .shell = true, .cpus = 2});
  fillExec(tasks[1], {.id = {4, 2}, .args = {"true"}, .cpus = 1});  // waits for cpus
  waitWithTimeout(io, request.send());

  char buffer[64];
  size_t n = waitWithTimeout(io, reader->tryRead(buffer, 1, sizeof(buffer) - 1));
  buffer[n] = '\0';
  int sleepPid = atoi(buffer);
  ASSERT_GT(sleepPid, 0);
  EXPECT_EQ(queue->runningCount(), 1u);
  EXPECT_EQ(queue->waitingCount(), 1u);

  auto cancel = control.cancelTasksRequest();
  auto ids = cancel.initTasks(2);
  Id{4, 1}.to(ids[0]);
  Id{4, 2}.to(ids[1]);
  waitWithTimeout(io, cancel.send());
  waitWithTimeout(io, upstream->waitFor(2));
  EXPECT_EQ(upstream->results.at({4, 1}).error, "cancelled");
  EXPECT_FALSE(upstream->results.at({4, 1}).ok);
  EXPECT_EQ(upstream->results.at({4, 2}).error, "cancelled");
  EXPECT_TRUE(isGoneOrZombie(sleepPid, 5)) << "background sleep survived cancel: " << sleepPid;
  EXPECT_EQ(queue->freeCpus(), 2u);
  EXPECT_TRUE(sandboxesGone());
}

TEST_F(GovernorControlTest, RetractDropsTasksNotStartedAndLeavesRunningOnes) {
  auto request = control.assignRequest();
  auto tasks = request.initTasks(2);
  fillExec(tasks[0], {.id = {4, 1}, .args = {"sleep", "30"}, .cpus = 2});
  fillExec(tasks[1], {.id = {4, 2}, .args = {"true"}, .cpus = 1});  // waits for cpus
  waitWithTimeout(io, request.send());
  EXPECT_EQ(queue->runningCount(), 1u);
  EXPECT_EQ(queue->waitingCount(), 1u);

  auto retract = control.retractRequest();
  auto ids = retract.initTasks(3);
  Id{4, 1}.to(ids[0]);
  Id{4, 2}.to(ids[1]);
  Id{9, 9}.to(ids[2]);  // unknown
  auto reply = waitWithTimeout(io, retract.send());
  ASSERT_EQ(reply.getRetracted().size(), 1u);
  EXPECT_EQ(Id::from(reply.getRetracted()[0]), (Id{4, 2}));
  EXPECT_EQ(queue->waitingCount(), 0u);
  EXPECT_EQ(queue->runningCount(), 1u);

  // Once the running one ends, the retracted one neither runs nor reports.
  auto cancel = control.cancelTasksRequest();
  Id{4, 1}.to(cancel.initTasks(1)[0]);
  waitWithTimeout(io, cancel.send());
  waitWithTimeout(io, upstream->waitFor(1));
  EXPECT_EQ(queue->runningCount(), 0u);
  EXPECT_EQ(upstream->results.count({4, 2}), 0u);
  EXPECT_EQ(queue->freeCpus(), 2u);
}

TEST_F(GovernorControlTest, TasksBeyondFreeCpusWaitInFifoOrder) {
  auto request = control.assignRequest();
  auto tasks = request.initTasks(4);
  for (uint64_t i = 0; i < 4; i++) {
    fillCommon(tasks[i], {5, i + 1}, {}, {}, 1);
    tasks[i].getTask().getConfig().initSleep().setMilliseconds(20);
  }
  waitWithTimeout(io, request.send());
  EXPECT_EQ(queue->runningCount(), 2u);
  EXPECT_EQ(queue->waitingCount(), 2u);
  waitWithTimeout(io, upstream->waitFor(4));
  for (uint64_t i = 0; i < 4; i++) EXPECT_TRUE(upstream->results.at({5, i + 1}).ok);
  EXPECT_LE(upstream->results.at({5, 1}).startTimeUs, upstream->results.at({5, 3}).startTimeUs);
}

// The server's priority (its b-level) orders the ready tasks. Each needs
// both cpus, so they run one at a time: 1 first (it came first), then 5
// (highest), then 3 and 4, then the rest, equal priorities by arrival.
TEST_F(GovernorControlTest, ReadyTasksStartHighestPriorityFirstThenInArrivalOrder) {
  auto request = control.assignRequest();
  const double priority[7] = {1, 1, 2, 2, 9, 1, 1};
  auto tasks = request.initTasks(7);
  for (uint64_t i = 0; i < 7; i++) {
    fillCommon(tasks[i], {5, i + 1}, {}, {}, 2);
    tasks[i].getTask().getConfig().initSleep().setMilliseconds(20);
    tasks[i].setPriority(priority[i]);
  }
  waitWithTimeout(io, request.send());
  waitWithTimeout(io, upstream->waitFor(7));
  std::vector<std::pair<uint64_t, uint64_t>> starts;
  for (uint64_t i = 0; i < 7; i++) {
    auto& r = upstream->results.at({5, i + 1});
    EXPECT_TRUE(r.ok);
    starts.push_back({r.startTimeUs, i + 1});
  }
  std::sort(starts.begin(), starts.end());
  std::vector<uint64_t> order;
  for (auto& [at, n] : starts) order.push_back(n);
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 5, 3, 4, 2, 6, 7}));
}

TEST_F(GovernorControlTest, ABurstOfTrivialTasksCostsFewUpdates) {
  auto request = control.assignRequest();
  auto tasks = request.initTasks(200);
  for (uint64_t i = 0; i < 200; i++) {
    fillCommon(tasks[i], {6, i + 1}, {}, {}, 0);
    tasks[i].getTask().getConfig().initSleep().setMilliseconds(0);
  }
  waitWithTimeout(io, request.send());
  waitWithTimeout(io, upstream->waitFor(200));
  EXPECT_LE(upstream->updates, 5u);
}

// The server learns when the queue it keeps here ran dry (it may queue more
// here then): a task's end with nothing ready to take its cpu says so,
// an end with a task ready behind it does not.
TEST_F(GovernorControlTest, AnUpdateSaysWhenTheQueueRanDry) {
  auto request = control.assignRequest();
  auto tasks = request.initTasks(3);
  for (uint64_t i = 0; i < 3; i++) {
    fillCommon(tasks[i], {8, i + 1}, {}, {}, 2);  // both cpus: one at a time
    tasks[i].getTask().getConfig().initSleep().setMilliseconds(i == 0 ? 0 : 30);
  }
  waitWithTimeout(io, request.send());
  // The first ends with two behind it: not dry.
  waitWithTimeout(io, upstream->waitForAll({{8, 1}}));
  settle();
  EXPECT_EQ(upstream->dryUpdates, 0u);
  // The last leaves the cpus free with nothing ready.
  waitWithTimeout(io, upstream->waitFor(3));
  settle();
  EXPECT_EQ(upstream->dryUpdates, 1u);
  // Each update says it once.
  auto updates = upstream->updates;
  auto one = control.assignRequest();
  fillCommon(one.initTasks(1)[0], {8, 4}, {}, {}, 1);
  one.getTasks()[0].getTask().getConfig().initSleep().setMilliseconds(0);
  waitWithTimeout(io, one.send());
  waitWithTimeout(io, upstream->waitFor(4));
  settle();
  EXPECT_EQ(upstream->updates, updates + 1);
  EXPECT_EQ(upstream->dryUpdates, 2u);
}

TEST_F(GovernorControlTest, ResultsAreKeptUntilTheServerHasThemInItsLog) {
  upstream->durable = false;
  auto runSleep = [&](Id id) {
    auto request = control.assignRequest();
    fillCommon(request.initTasks(1)[0], id, {}, {}, 0);
    request.getTasks()[0].getTask().getConfig().initSleep().setMilliseconds(0);
    waitWithTimeout(io, request.send());
    waitWithTimeout(io, upstream->waitForAll({id}));
    settle();
  };
  runSleep({7, 1});
  EXPECT_EQ(batcher->undurableCount(), 1u);
  EXPECT_EQ(batcher->unacknowledged(), (std::vector<Id>{Id{7, 1}}));
  auto first = upstream->lastNumber;
  runSleep({7, 2});
  // Confirming the first update forgets its results only.
  auto confirm = control.resultsDurableRequest();
  confirm.setThrough(first);
  waitWithTimeout(io, confirm.send());
  EXPECT_EQ(batcher->unacknowledged(), (std::vector<Id>{Id{7, 2}}));
  // A new server connection (a restarted server) gets the rest again.
  auto fresh = kj::heap<FakeUpstream>();
  auto* second = fresh.get();
  batcher->connected(wire::GovernorUpstream::Client(kj::mv(fresh)));
  waitWithTimeout(io, second->waitForAll({{7, 2}}));
  settle();
  EXPECT_EQ(second->results.size(), 1u);
  // That one says they are durable at once: nothing is kept.
  EXPECT_EQ(batcher->undurableCount(), 0u);
  EXPECT_TRUE(batcher->unacknowledged().empty());
}

TEST_F(GovernorControlTest, RemoveObjectsDropsThemAndIgnoresUnknownIds) {
  auto r = runExec({.id = {1, 1}, .args = {"echo x > o"}, .shell = true, .outputs = {{{1, 2}, "o"}}});
  ASSERT_TRUE(r.ok) << r.error;
  auto remove = control.removeObjectsRequest();
  auto ids = remove.initObjects(2);
  Id{1, 2}.to(ids[0]);
  Id{1, 99}.to(ids[1]);
  waitWithTimeout(io, remove.send());
  EXPECT_TRUE(store.find({1, 2}) == nullptr);
}

TEST_F(GovernorControlTest, InputsAreFetchedFromAnotherGovernor) {
  // A second governor's store and data service on 127.0.0.1.
  ObjectStore remoteStore(bridge, dir.sub("remote"), *logger, 1 << 20);
  DataServiceEnv remoteEnv{remoteStore, *logger, kj::str(""), kj::str("gov-remote")};
  auto receiver = waitWithTimeout(io, listenOn(io.provider->getNetwork(), "127.0.0.1:0"));
  auto address = kj::str("127.0.0.1:", receiver->getPort());
  RpcListener listener(
      kj::mv(receiver),
      [&remoteEnv](kj::Own<PeerGate> gate) -> capnp::Capability::Client {
        return kj::heap<DataBootstrapImpl>(remoteEnv, kj::mv(gate));
      },
      io.provider->getTimer(), *logger);
  auto listening = listener.run().eagerlyEvaluate(nullptr);
  std::string payload(CHUNK_SIZE + 3, 'r');
  waitWithTimeout(io, remoteStore.putBytes({8, 1}, wire::ObjectKind::BLOB,
                                           kj::heapArray(kj::arrayPtr(reinterpret_cast<const kj::byte*>(payload.data()),
                                                                      payload.size()))));

  auto r = runExec({.id = {8, 2}, .args = {"wc -c < in > out"}, .shell = true,
                    .inputs = {{{8, 1}, "in", {address.cStr()}}}, .outputs = {{{8, 3}, "out"}}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(objectBytes({8, 3}), std::to_string(payload.size()) + "\n");
  EXPECT_TRUE(store.find({8, 1}) != nullptr);  // a held copy now

  auto missing = runExec({.id = {8, 4}, .args = {"true"}, .inputs = {{{8, 9}, "in", {address.cStr()}}}});
  EXPECT_FALSE(missing.ok);
  EXPECT_NE(missing.error.find(kj::str("cannot fetch object 8/9 from ", address).cStr()), std::string::npos)
      << missing.error;
  EXPECT_FALSE(missing.inputUnavailable);  // its source answered: the object is not there

  // A source that has gone (nothing listens there): the input is
  // unavailable, not the task's failure (the server places it again).
  auto unreachable = runExec({.id = {8, 5}, .args = {"true"}, .inputs = {{{8, 7}, "in", {"127.0.0.1:1"}}}});
  EXPECT_FALSE(unreachable.ok);
  EXPECT_TRUE(unreachable.inputUnavailable) << unreachable.error;
}

}  // namespace
}  // namespace squall
