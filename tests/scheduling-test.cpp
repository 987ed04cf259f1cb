// The scheduler end to end (docs/scheduling.md): critical path first, and
// work stealing taking queued tasks to a governor that has room, against a
// server with stealing off as the control.
#include "command-output.h"
#include "http-get.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace squall {
namespace {

namespace fs = std::filesystem;

// An empty directory of this test process's own, for `what`.
fs::path freshDir(const std::string& what) {
  auto dir = fs::temp_directory_path() / ("squall-" + what + "-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

struct Gated {
  fs::path dir;
  fs::path gate() const { return dir / "gate"; }
  // A shell line that marks that task `name` started, then waits for the
  // gate to open.
  std::string line(const std::string& name) const {
    return "touch '" + (dir / ("started-" + name)).string() + "'; while [ ! -e '" + gate().string() +
           "' ]; do sleep 0.02; done";
  }
  size_t started() const {
    size_t n = 0;
    for (auto& entry : fs::directory_iterator(dir)) {
      n += entry.path().filename().string().rfind("started-", 0) == 0;
    }
    return n;
  }
};

// One governor of one cpu takes six gated tasks (one runs, five wait in its
// queue); a second governor joins. Returns, per task, the governor that
// ran it.
std::vector<std::string> runGatedThenAddGovernor(bool steal) {
  auto dir = freshDir(std::string("steal-") + (steal ? "on" : "off"));
  Gated gated{dir};
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  if (!steal) options.serverArgs = {"--no-steal"};
  LocalCluster cluster(options);
  cluster.start();
  std::vector<std::string> where;
  {
    Client client(cluster.serverAddress());
    auto session = client.newSession("steal");
    std::vector<Task> tasks;
    for (int i = 0; i < 6; i++) {
      tasks.push_back(session.execute(Program::shell(gated.line(std::to_string(i)))));
    }
    session.submit();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    // The first one runs on governor-0 (its start proves all six went there:
    // they were placed in one pass).
    while (gated.started() < 1 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(gated.started(), 1u);
    cluster.addGovernor();
    if (steal) {
      // Stealing: governor-1 takes one of the queued tasks and starts it.
      while (gated.started() < 2 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      EXPECT_EQ(gated.started(), 2u) << "no task went to the governor that joined";
    }
    std::ofstream(gated.gate()).put('\n');
    session.waitAll();
    for (auto& info : session.tasks()) where.push_back(info.governor);
    auto metrics = httpGet(cluster.httpAddress(), "/metrics").body;
    auto stolen = metrics.find("\nsquall_tasks_stolen_total ");
    EXPECT_NE(stolen, std::string::npos);
    bool none = metrics.compare(stolen + 27, 2, "0\n") == 0;
    EXPECT_EQ(none, !steal) << metrics.substr(stolen, 40);
  }  // the client goes before the cluster (else it would try to reconnect)
  EXPECT_EQ(cluster.stop(), "");
  fs::remove_all(dir);
  return where;
}

TEST(SchedulingE2eTest, AGovernorThatJoinsTakesQueuedTasksFromALoadedOne) {
  auto where = runGatedThenAddGovernor(true);
  ASSERT_EQ(where.size(), 6u);
  auto onSecond = std::count(where.begin(), where.end(), "governor-1");
  EXPECT_GE(onSecond, 1) << "every task ran on governor-0";
  EXPECT_GE(std::count(where.begin(), where.end(), "governor-0"), 1);
}

TEST(SchedulingE2eTest, WithoutStealingQueuedTasksStayWhereTheyWerePlaced) {
  auto where = runGatedThenAddGovernor(false);
  ASSERT_EQ(where.size(), 6u);
  EXPECT_EQ(std::count(where.begin(), where.end(), "governor-0"), 6);
}

// Four independent tasks submitted before a chain of three: on one cpu the
// chain's head runs first (the longest path to the end of the graph), with
// no hints (hops) and with durations that say the independent ones are
// short.
TEST(SchedulingE2eTest, TheHeadOfTheLongestChainRunsFirst) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  LocalCluster cluster(options);
  cluster.start();
  auto dir = freshDir("blevel");
  auto order = (dir / "order").string();
  {
    Client client(cluster.serverAddress());
    for (bool hints : {false, true}) {
      fs::remove(order);
      auto session = client.newSession(hints ? "blevel-hints" : "blevel-hops");
      auto step = [&](const std::string& name, std::vector<DataObject> inputs) {
        auto program = Program::shell("echo " + name + " >> '" + order + "'").stdoutOutput();
        for (size_t i = 0; i < inputs.size(); i++) program.input(inputs[i], "in" + std::to_string(i));
        auto task = session.execute(program);
        task.name(name);
        if (hints) task.expectedDuration(std::chrono::milliseconds(name.rfind("chain", 0) == 0 ? 2000 : 10));
        return task;
      };
      for (int i = 0; i < 4; i++) step("single" + std::to_string(i), {});
      auto head = step("chain0", {});
      auto middle = step("chain1", {head.output()});
      step("chain2", {middle.output()});
      session.submit();
      session.waitAll();
      std::ifstream in(order);
      std::string first;
      std::getline(in, first);
      EXPECT_EQ(first, "chain0") << (hints ? "with hints" : "by hops");
    }
  }
  EXPECT_EQ(cluster.stop(), "");
  fs::remove_all(dir);
}

// A counter of the server's /metrics.
uint64_t metric(const LocalCluster& cluster, const std::string& name) {
  auto body = httpGet(cluster.httpAddress(), "/metrics").body;
  auto at = body.find("\n" + name + " ");
  if (at == std::string::npos) throw std::runtime_error("no metric " + name + " in /metrics");
  return std::stoull(body.substr(at + name.size() + 2));
}

// Prefetching (docs/scheduling.md): a merge of three 1 MiB inputs, two made
// on governor-0 (pool on_a) and one on governor-1 (on_b). The first made
// makes governor-0 the merge's target; governor-1's input goes there while
// the last one is still being made (gated), so when the merge runs there
// nothing is fetched. With --no-prefetch, the control, it is fetched when
// the merge runs. Either way the merge reads the right bytes.
void runMergeOfInputsMadeOnTwoGovernors(bool prefetch) {
  auto dir = freshDir(std::string("prefetch-") + (prefetch ? "on" : "off"));
  Gated gated{dir};
  ClusterOptions options;
  options.governors = 2;
  options.cpus = 2;
  options.governorArgsEach = {{"--resource", "on_a=1"}, {"--resource", "on_b=1"}};
  if (!prefetch) options.serverArgs = {"--no-prefetch"};
  LocalCluster cluster(options);
  cluster.start();
  constexpr uint64_t MIB = 1 << 20;
  {
    Client client(cluster.serverAddress());
    auto session = client.newSession("prefetch");
    auto make = [&](const std::string& pool, char byte, const std::string& before) {
      auto program = Program::shell(before + "head -c " + std::to_string(MIB) + " /dev/zero | tr '\\0' '" +
                                    byte + "'")
                         .stdoutOutput();
      auto task = session.execute(program);
      task.resource(pool, 1);
      return task;
    };
    auto first = make("on_a", 'a', "");
    // Made after `first`, so that governor-0 is the target.
    auto goSecond = (dir / "go-second").string();
    auto second = make("on_b", 'b', "while [ ! -e '" + goSecond + "' ]; do sleep 0.02; done; ");
    // Waits for on_a (held by `first`), then for the gate.
    auto last = make("on_a", 'c', gated.line("last") + "; ");
    auto merge = session.execute(Program::shell("cat in0 in1 in2 | md5sum | cut -c1-32")
                                     .input(first.output(), "in0")
                                     .input(second.output(), "in1")
                                     .input(last.output(), "in2")
                                     .stdoutOutput());
    merge.output().keep();
    session.submit();
    first.wait();
    std::ofstream(goSecond) << "";
    second.wait();
    if (prefetch) {
      // The copy is confirmed (an event the server counts), or the test
      // fails after a bound.
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (metric(cluster, "squall_bytes_moved_total{kind=\"prefetched\"}") < MIB &&
             std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    std::ofstream(gated.gate()) << "";
    session.waitAll();
    auto expected = commandOutput("(head -c " + std::to_string(MIB) + " /dev/zero | tr '\\0' a; head -c " +
                                  std::to_string(MIB) + " /dev/zero | tr '\\0' b; head -c " + std::to_string(MIB) +
                                  " /dev/zero | tr '\\0' c) | md5sum | cut -c1-32");
    EXPECT_EQ(merge.output().fetch(), expected.first);
    EXPECT_EQ(merge.output().info().locations, std::vector<std::string>{"governor-0"});
    uint64_t prefetched = metric(cluster, "squall_bytes_moved_total{kind=\"prefetched\"}");
    uint64_t fetched = metric(cluster, "squall_bytes_moved_total{kind=\"fetched\"}");
    if (prefetch) {
      EXPECT_EQ(prefetched, MIB);
      EXPECT_EQ(fetched, 0u);
    } else {
      EXPECT_EQ(prefetched, 0u);
      EXPECT_EQ(fetched, MIB);
    }
  }
  EXPECT_EQ(cluster.stop(), "");
  fs::remove_all(dir);
}

TEST(SchedulingE2eTest, AMergesInputsGoAheadToWhereItWillRunWhileItWaits) { runMergeOfInputsMadeOnTwoGovernors(true); }

TEST(SchedulingE2eTest, WithoutPrefetchAMergeFetchesItsInputsWhenItRuns) { runMergeOfInputsMadeOnTwoGovernors(false); }

}  // namespace
}  // namespace squall
