// Tests of ProcessSets: what a task's program leaves running outside its
// process group is killed and reaped once its set ends, not before; the
// processes the loop started are never touched. Test thread only. (This
// test program becomes a child subreaper, as the governor does.)
#include "process-sets.h"

#include "child-process.h"
#include "file-ops.h"
#include "test-util.h"

#include <chrono>
#include <cstdlib>
#include <csignal>
#include <fcntl.h>
#include <sys/wait.h>
#include <thread>

namespace squall {
namespace {

struct IoMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
};

class ProcessSetsTest : public ::testing::TestWithParam<bool> {
 protected:
  std::unique_ptr<IoMembers> members = std::make_unique<IoMembers>();
  kj::AsyncIoContext& io = members->io;
  std::shared_ptr<spdlog::logger> logger = testLogger();
  TempDir dir;

  // Runs `script` under sh with `set`'s mark, waits for its exit and returns
  // the pids it printed.
  kj::Vector<int> runLeaving(UvBridge& bridge, ProcessSet& set, kj::StringPtr script) {
    auto out = openOrThrow(dir.sub("out"), O_RDWR | O_CREAT | O_TRUNC);
    auto devNull = openOrThrow("/dev/null", O_RDWR);
    SpawnOptions options;
    options.file = kj::str("/bin/sh");
    options.args.add(kj::str("sh"));
    options.args.add(kj::str("-c"));
    options.args.add(kj::str(script));
    options.env.add(kj::str("PATH=/usr/local/bin:/usr/bin:/bin"));
    options.env.add(kj::str(set.environmentEntry()));
    options.cwd = kj::str(dir.path());
    options.stdinFd = options.stderrFd = devNull;
    options.stdoutFd = out;
    auto spawned = ChildProcess::spawn(bridge, options);
    KJ_ASSERT(spawned.is<kj::Own<ChildProcess>>(), "spawn failed");
    auto child = kj::mv(spawned.get<kj::Own<ChildProcess>>());
    set.adopt(child->pid());
    waitWithTimeout(io, child->onExit());
    kj::Vector<int> pids;
    auto text = readTail(dir.sub("out"), 4096);
    for (auto* p = text.cStr(); *p != '\0';) {
      char* end;
      long pid = strtol(p, &end, 10);
      if (end == p) break;
      pids.add(static_cast<int>(pid));
      p = end;
    }
    return pids;
  }

  // Whether `pid` is a process (a zombie is one: not reaped yet).
  static bool exists(int pid) { return ::kill(pid, 0) == 0 || errno != ESRCH; }

  // Gives the loop (and its sweeps) time until none of `pids` exists, for
  // at most 5 s: nothing signals another process's death to us.
  bool goneWithin(const kj::Vector<int>& pids) {
    for (int i = 0; i < 250; i++) {
      bool any = false;
      for (int pid : pids) any = any || exists(pid);
      if (!any) return true;
      waitWithTimeout(io, io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS));
    }
    return false;
  }
};

const char* const LEAVE_TWO =
    "setsid sleep 1000 < /dev/null > /dev/null & echo $!; "
    "setsid sh -c 'sleep 1000 & echo $! > inner; wait' < /dev/null > /dev/null & "
    "until [ -s inner ]; do sleep 0.01; done; cat inner";

TEST_P(ProcessSetsTest, LeftoversAreKilledAndReapedOnceTheirSetEnds) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  ProcessSets::Options options;
  options.cgroups = GetParam();
  ProcessSets sets(bridge, io.provider->getTimer(), *logger, options);
  if (GetParam() && !sets.usesCgroups()) GTEST_SKIP() << "no cgroups here: " << sets.describe().cStr();
  auto set = sets.open();
  // In a cgroup, also one that only the cgroup can find (no mark), once
  // the move is done.
  auto script = GetParam() ? kj::str("i=0; until grep -q /task- /proc/self/cgroup || [ $i -ge 300 ]; do sleep 0.01; "
                                     "i=$((i+1)); done; env -i setsid sleep 1000 < /dev/null > /dev/null & echo $!; ",
                                     LEAVE_TWO)
                           : kj::str(LEAVE_TWO);
  auto pids = runLeaving(bridge, *set, script);
  ASSERT_EQ(pids.size(), GetParam() ? 3u : 2u);
  // The set is open: its processes run on, whatever the sweep sees.
  sets.sweep();
  waitWithTimeout(io, io.provider->getTimer().afterDelay(50 * kj::MILLISECONDS));
  for (int pid : pids) EXPECT_TRUE(exists(pid)) << pid;
  set = nullptr;
  EXPECT_TRUE(goneWithin(pids)) << pids[0] << " " << pids[1];
  // Its cgroup goes with it.
  if (GetParam()) {
    for (int i = 0; i < 250 && ::access(kj::str(sets.describe().slice(7), "/task-1").cStr(), F_OK) == 0; i++) {
      waitWithTimeout(io, io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS));
    }
    EXPECT_NE(::access(kj::str(sets.describe().slice(7), "/task-1").cStr(), F_OK), 0);
  }
}

TEST_P(ProcessSetsTest, TheLoopsOwnChildrenAndUnmarkedOnesAreLeftUntilExit) {
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  ProcessSets::Options options;
  options.cgroups = GetParam();
  options.sweepInterval = 10 * kj::MILLISECONDS;
  kj::Vector<int> unmarked;
  {
    ProcessSets sets(bridge, io.provider->getTimer(), *logger, options);
    // A child the loop started (as an executor is), with an unmarked
    // background process that leaves it.
    auto devNull = openOrThrow("/dev/null", O_RDWR);
    auto out = openOrThrow(dir.sub("own"), O_RDWR | O_CREAT | O_TRUNC);
    SpawnOptions spawn;
    spawn.file = kj::str("/bin/sh");
    spawn.args.add(kj::str("sh"));
    spawn.args.add(kj::str("-c"));
    spawn.args.add(kj::str("setsid sleep 1000 < /dev/null > /dev/null & echo $!; exec sleep 1000"));
    spawn.env.add(kj::str("PATH=/usr/local/bin:/usr/bin:/bin"));
    spawn.cwd = kj::str(dir.path());
    spawn.stdinFd = spawn.stderrFd = devNull;
    spawn.stdoutFd = out;
    auto spawned = ChildProcess::spawn(bridge, spawn);
    ASSERT_TRUE(spawned.is<kj::Own<ChildProcess>>());
    auto own = kj::mv(spawned.get<kj::Own<ChildProcess>>());
    // A marked set ends meanwhile, so sweeps run.
    auto set = sets.open();
    auto pids = runLeaving(bridge, *set, "setsid sleep 1000 < /dev/null > /dev/null & echo $!");
    ASSERT_EQ(pids.size(), 1u);
    set = nullptr;
    EXPECT_TRUE(goneWithin(pids));
    for (int i = 0; i < 500 && readTail(dir.sub("own"), 64).size() == 0; i++) {
      waitWithTimeout(io, io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS));
    }
    int leftover = atoi(readTail(dir.sub("own"), 64).cStr());
    ASSERT_GT(leftover, 0);
    unmarked.add(leftover);
    waitWithTimeout(io, io.provider->getTimer().afterDelay(100 * kj::MILLISECONDS));
    EXPECT_TRUE(exists(own->pid()));
    EXPECT_FALSE(own->hasExited());
    EXPECT_TRUE(exists(leftover));
  }
  // At exit: the loop's children are killed by the bridge's teardown (here,
  // the ChildProcess going); what is left is killAdoptedAtExit's.
  EXPECT_TRUE(exists(unmarked[0]));
  EXPECT_GE(ProcessSets::killAdoptedAtExit(*logger), 1u);
  EXPECT_FALSE(exists(unmarked[0]));
}

// This process in a cgroup of its own under `parent` for the object's life,
// so that no governor another test starts meanwhile in `parent` clears what
// this test leaves there (it would: that is what it is for).
class OwnCgroup {
 public:
  explicit OwnCgroup(kj::StringPtr parent)
      : parent(kj::heapString(parent)), dir(kj::str(parent, "/squall-test-", ::getpid())) {
    KJ_SYSCALL(::mkdir(dir.cStr(), 0755));
    move(dir);
  }
  ~OwnCgroup() noexcept(false) {
    move(parent);
    ::rmdir(dir.cStr());
  }
  kj::StringPtr path() const { return dir; }

 private:
  static void move(kj::StringPtr to) {
    auto procs = openOrThrow(kj::str(to, "/cgroup.procs"), O_WRONLY);
    auto pid = kj::str(::getpid());
    KJ_SYSCALL(::write(procs, pid.cStr(), pid.size()));
  }
  kj::String parent;
  kj::String dir;
};

// A governor killed with SIGKILL leaves its cgroups and what its tasks
// left in them; the next one to start in the same cgroup kills and removes
// them (only where no process has the dead governor's pid).
TEST(ProcessSetsStaleTest, AKilledGovernorsCgroupsAreClearedAtTheNextStart) {
  auto members = std::make_unique<IoMembers>();
  auto& io = members->io;
  auto logger = testLogger();
  UvBridge bridge(io.unixEventPort, io.provider->getTimer(), *logger);
  kj::String ours;
  {
    ProcessSets probe(bridge, io.provider->getTimer(), *logger, {});
    if (!probe.usesCgroups()) GTEST_SKIP() << "no cgroups here: " << probe.describe().cStr();
    auto base = probe.describe().slice(7);
    ours = kj::heapString(base.slice(0, KJ_ASSERT_NONNULL(base.findLast('/'))));
  }
  OwnCgroup own(ours);
  auto parent = own.path();
  // A pid no process has now: a child's, reaped.
  pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  auto stale = kj::str(parent, "/squall-governor-", gone);
  auto task = kj::str(stale, "/task-7");
  KJ_SYSCALL(::mkdir(stale.cStr(), 0755));
  KJ_SYSCALL(::mkdir(task.cStr(), 0755));
  pid_t leftover = ::fork();
  if (leftover == 0) {
    ::execl("/bin/sleep", "sleep", "1000", static_cast<char*>(nullptr));
    _exit(127);
  }
  auto procs = openOrThrow(kj::str(task, "/cgroup.procs"), O_WRONLY);
  auto pidText = kj::str(leftover);
  KJ_SYSCALL(::write(procs, pidText.cStr(), pidText.size()));
  procs = nullptr;
  {
    ProcessSets sets(bridge, io.provider->getTimer(), *logger, {});
    EXPECT_NE(::access(stale.cStr(), F_OK), 0) << stale.cStr();
  }
  int status = 0;
  ASSERT_EQ(::waitpid(leftover, &status, 0), leftover);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Ways, ProcessSetsTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "cgroup" : "mark");
                         });

}  // namespace
}  // namespace squall
