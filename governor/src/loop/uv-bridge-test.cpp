// Tests of the libuv-in-KJ bridge. Test thread only.
#include "uv-bridge.h"

#include "child-process.h"
#include "file-ops.h"
#include "test-util.h"

#include <fcntl.h>

namespace squall {
namespace {

struct IoMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
};

class UvBridgeTest : public ::testing::Test {
 protected:
  // KJ objects may throw from destructors; gtest fixtures must not.
  std::unique_ptr<IoMembers> members = std::make_unique<IoMembers>();
  kj::AsyncIoContext& io = members->io;
  std::shared_ptr<spdlog::logger> logger = testLogger();
};

kj::Own<ChildProcess> spawnOrDie(UvBridge& bridge, const SpawnOptions& options) {
  auto spawned = ChildProcess::spawn(bridge, options);
  KJ_ASSERT(spawned.is<kj::Own<ChildProcess>>(), "spawn failed");
  return kj::mv(spawned.get<kj::Own<ChildProcess>>());
}

TEST_F(UvBridgeTest, SpawnedChildExitCallbackFires) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  auto devNull = openOrThrow("/dev/null", O_RDWR);
  SpawnOptions options;
  options.file = kj::str("/bin/sh");
  options.args.add(kj::str("sh"));
  options.args.add(kj::str("-c"));
  options.args.add(kj::str("exit 7"));
  options.cwd = kj::str("/");
  options.stdinFd = options.stdoutFd = options.stderrFd = devNull;
  auto spawned = ChildProcess::spawn(bridge, options);
  ASSERT_TRUE(spawned.is<kj::Own<ChildProcess>>());
  auto child = kj::mv(spawned.get<kj::Own<ChildProcess>>());
  auto exit = waitWithTimeout(io, child->onExit());
  EXPECT_EQ(exit.exitStatus, 7);
  EXPECT_EQ(exit.termSignal, 0);
}

TEST_F(UvBridgeTest, MissingProgramIsAnErrorCodeNotAnException) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  auto devNull = openOrThrow("/dev/null", O_RDWR);
  SpawnOptions options;
  options.file = kj::str("squall-no-such-program");
  options.args.add(kj::str("squall-no-such-program"));
  options.cwd = kj::str("/");
  options.stdinFd = options.stdoutFd = options.stderrFd = devNull;
  auto spawned = ChildProcess::spawn(bridge, options);
  ASSERT_TRUE(spawned.is<int>());
  EXPECT_EQ(spawned.get<int>(), UV_ENOENT);
}

TEST_F(UvBridgeTest, KilledChildReportsTheSignal) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  auto devNull = openOrThrow("/dev/null", O_RDWR);
  SpawnOptions options;
  options.file = kj::str("sleep");
  options.args.add(kj::str("sleep"));
  options.args.add(kj::str("100"));
  options.cwd = kj::str("/");
  options.stdinFd = options.stdoutFd = options.stderrFd = devNull;
  auto child = spawnOrDie(bridge, options);
  child->killGroup(SIGKILL);
  auto exit = waitWithTimeout(io, child->onExit());
  EXPECT_EQ(exit.termSignal, SIGKILL);
  EXPECT_EQ(signalName(SIGKILL), "SIGKILL");
}

TEST_F(UvBridgeTest, UvTimerStartedFromKjCodeFires) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  struct TimerBox {
    uv_timer_t timer;
    kj::Own<kj::PromiseFulfiller<void>> fulfiller;
  };
  auto paf = kj::newPromiseAndFulfiller<void>();
  TimerBox box;
  box.fulfiller = kj::mv(paf.fulfiller);
  box.timer.data = &box;
  SQUALL_UV_CHECK(uv_timer_init(bridge.loop(), &box.timer));
  SQUALL_UV_CHECK(uv_timer_start(
      &box.timer,
      [](uv_timer_t* t) { static_cast<TimerBox*>(t->data)->fulfiller->fulfill(); }, 10, 0));
  bridge.wake();
  waitWithTimeout(io, kj::mv(paf.promise), 5);
  // Close before the bridge goes, as every handle owner must.
  auto closed = kj::newPromiseAndFulfiller<void>();
  box.fulfiller = kj::mv(closed.fulfiller);
  uv_close(reinterpret_cast<uv_handle_t*>(&box.timer), [](uv_handle_t* h) {
    static_cast<TimerBox*>(h->data)->fulfiller->fulfill();
  });
  bridge.wake();
  waitWithTimeout(io, kj::mv(closed.promise), 5);
}

TEST_F(UvBridgeTest, PoolJobCompletesWithItsValueOrException) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  auto value = waitWithTimeout(io, bridge.runOnPool<int>([]() { return 6 * 7; }));
  EXPECT_EQ(value, 42);
  waitWithTimeout(io, bridge.runOnPool<void>([]() {}));
  auto failed = bridge.runOnPool<int>([]() -> int { KJ_FAIL_REQUIRE("boom"); })
                    .then([](int) { return kj::str("no error"); },
                          [](kj::Exception&& e) { return kj::str(e.getDescription()); });
  auto text = waitWithTimeout(io, kj::mv(failed));
  EXPECT_NE(std::string(text.cStr()).find("boom"), std::string::npos) << text.cStr();
}

TEST_F(UvBridgeTest, ManyPoolJobsAndTimersInterleaveWithKjTimers) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  kj::Vector<kj::Promise<int>> jobs;
  for (int i = 0; i < 100; i++) jobs.add(bridge.runOnPool<int>([i]() { return i; }));
  auto all = kj::joinPromises(jobs.releaseAsArray());
  auto results = waitWithTimeout(io, kj::mv(all));
  int sum = 0;
  for (int r : results) sum += r;
  EXPECT_EQ(sum, 4950);
  // A KJ timer still fires while the bridge is idle.
  waitWithTimeout(io, io.provider->getTimer().afterDelay(1 * kj::MILLISECONDS), 5);
}

TEST_F(UvBridgeTest, TeardownKillsChildrenStillRunning) {
  int pid;
  {
    UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
    auto devNull = openOrThrow("/dev/null", O_RDWR);
    SpawnOptions options;
    options.file = kj::str("sleep");
    options.args.add(kj::str("sleep"));
    options.args.add(kj::str("100"));
    options.cwd = kj::str("/");
    options.stdinFd = options.stdoutFd = options.stderrFd = devNull;
    auto child = spawnOrDie(bridge, options);
    pid = child->pid();
    // Dropping the owner kills it; the bridge reaps it or closes the handle.
  }
  EXPECT_TRUE(isGoneOrZombie(pid, 5));
}

}  // namespace
}  // namespace squall
