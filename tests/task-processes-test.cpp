// No process outlives its task (docs/deploy.md, "What a task leaves
// behind"): what a program starts in the background, even in a session of
// its own (setsid) or under a parent that itself left, is killed when the
// task ends, and what a running task left is killed when its governor
// stops. On a governor as it starts by default, on one that gives each task
// a cgroup (where this machine lets it divide its cgroup) and on one with
// the environment mark only.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace squall {
namespace {

namespace fs = std::filesystem;

std::string readText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Whether `pid` is still the `sleep 1000` a task started, or on its way to
// it (`setsid sleep 1000`, `env -i setsid ...` before their exec). A zombie
// has no command line: it does not count, nor a pid reused by another
// program.
bool sleeperRuns(int pid) {
  auto cmdline = readText("/proc/" + std::to_string(pid) + "/cmdline");
  std::string tail("sleep\0" "1000\0", 11);
  return cmdline.size() >= tail.size() && cmdline.compare(cmdline.size() - tail.size(), tail.size(), tail) == 0;
}

// No event tells another process's death: looks every 20 ms, for at most
// `bound`. True once none of `pids` is a sleeper any more.
bool sleepersGone(const std::vector<int>& pids, std::chrono::milliseconds bound = std::chrono::seconds(5)) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  for (;;) {
    bool any = false;
    for (int pid : pids) any = any || sleeperRuns(pid);
    if (!any) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<int> pidsIn(const std::string& text) {
  std::vector<int> pids;
  std::istringstream in(text);
  for (int pid; in >> pid;) pids.push_back(pid);
  return pids;
}

// The move of a task's first process into its cgroup comes a moment after
// it started (docs/deploy.md): a script that means to be in there waits for
// it, for at most 3 s.
const char* const IN_CGROUP =
    "i=0; until grep -q /task- /proc/self/cgroup || [ $i -ge 300 ]; do sleep 0.01; i=$((i+1)); done; ";

// In a cgroup: a way out that only the cgroup catches, the environment (so
// the mark) cleared.
const char* const LEAVE_UNMARKED = "env -i setsid sleep 1000 < /dev/null > /dev/null 2>&1 & echo $!; ";

// Two ways out of the task's process group: setsid straight away, and a
// setsid'd shell that stays, waiting for its own background child (whose
// parent is alive when the task ends).
const char* const LEAVE_TWO_BEHIND =
    "setsid sleep 1000 < /dev/null > /dev/null 2>&1 & echo $!; "
    "setsid sh -c 'sleep 1000 & echo $! > inner; wait' < /dev/null > /dev/null 2>&1 & "
    "until [ -s inner ]; do sleep 0.01; done; cat inner";

class TaskProcessesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/squall-task-processes-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    scratch = pattern;
    ClusterOptions options;
    options.governors = 1;
    options.cpus = 2;
    if (GetParam() == "mark") options.governorArgs = {"--no-task-cgroups"};
    cluster = std::make_unique<LocalCluster>(options);
    cluster->start();
    if (GetParam() == "cgroup") {
      // Where the machine does not let the governor divide its cgroup, it
      // uses the mark: the other instance of these tests covers that.
      Client client(cluster->serverAddress());
      auto session = client.newSession("probe");
      auto probe = session.execute(Program::shell(std::string(IN_CGROUP) + "cat /proc/self/cgroup").stdoutOutput());
      probe.output().keep();
      session.submit();
      auto text = probe.output().fetch();
      if (text.find("/squall-governor-") == std::string::npos) {
        GTEST_SKIP() << "no cgroup of its own per task here: " << text;
      }
    }
  }
  void TearDown() override {
    cluster.reset();
    if (!scratch.empty()) fs::remove_all(scratch);
  }

  // What a task runs to leave processes behind (their pids on stdout),
  // its output sent to `redirect` (a subshell: in a cgroup, made after the
  // move, so that what it starts is in there).
  std::string leaver(const std::string& redirect = "") const {
    std::string leave = GetParam() == "cgroup" ? std::string(LEAVE_UNMARKED) + LEAVE_TWO_BEHIND : LEAVE_TWO_BEHIND;
    if (!redirect.empty()) leave = "(" + leave + ") > " + redirect;
    return GetParam() == "cgroup" ? IN_CGROUP + leave : leave;
  }
  size_t leftBehind() const { return GetParam() == "cgroup" ? 3 : 2; }

  fs::path scratch;
  std::unique_ptr<LocalCluster> cluster;
};

TEST_P(TaskProcessesTest, WhatATaskLeavesRunningIsKilledWhenItEnds) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("leaver");
  auto task = session.execute(Program::shell(leaver()).stdoutOutput());
  task.output().keep();
  session.submit();
  auto text = task.output().fetch();
  auto pids = pidsIn(text);
  ASSERT_EQ(pids.size(), leftBehind()) << text;
  EXPECT_TRUE(sleepersGone(pids)) << "left running after their task: " << text;

  // The governor goes on running tasks as before.
  auto after = session.execute(Program::shell("echo fine").stdoutOutput());
  after.output().keep();
  session.submit();
  EXPECT_EQ(after.output().fetch(), "fine\n");
}

TEST_P(TaskProcessesTest, WhatARunningTaskLeftIsKilledWhenTheGovernorStops) {
  auto pidFile = scratch / "pids";
  Client client(cluster->serverAddress());
  auto session = client.newSession("stopped");
  session.execute(Program::shell(leaver(pidFile.string() + ".tmp") + " && mv " + pidFile.string() +
                                             ".tmp " + pidFile.string() + " && exec sleep 1000"));
  session.submit();
  // The task writes the file while it runs; no event reaches us for that.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(pidFile) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  auto text = readText(pidFile);
  auto pids = pidsIn(text);
  ASSERT_EQ(pids.size(), leftBehind()) << text;
  for (int pid : pids) EXPECT_TRUE(sleeperRuns(pid)) << pid;

  cluster->governor(0).stop();
  EXPECT_TRUE(sleepersGone(pids)) << "left running after the governor: " << text;
}

// "default": as a governor starts with no flag, whichever way the machine
// allows.
INSTANTIATE_TEST_SUITE_P(Ways, TaskProcessesTest, ::testing::Values("default", "cgroup", "mark"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace squall
