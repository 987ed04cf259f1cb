// Crash recovery (issue 5) with real processes: the server killed with
// SIGKILL at random points of a run and started again on its session log;
// governors and the client reconnect on their own. Every task's program
// appends its id to a file, so the test counts executions.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

namespace squall {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t MODULUS = 1000003;

ClusterOptions recoveryCluster() {
  ClusterOptions options;
  options.governors = 2;
  options.cpus = 2;
  options.logLevel = getenv("SQUALL_TEST_LOG_LEVEL") ? getenv("SQUALL_TEST_LOG_LEVEL") : "warn";
  return options;
}

// Counts lines per task name in the executions file.
std::map<std::string, int> executions(const fs::path& file) {
  std::map<std::string, int> counts;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) counts[line]++;
  return counts;
}

// A multi-level graph: level 0 task i prints i; level l task i prints
// (v[l-1][i] + v[l-1][i+1 mod width]) mod MODULUS. Each appends its name to
// `log` first. The last level's outputs are kept; returns them with the
// values they must hold.
struct Ladder {
  std::vector<DataObject> last;
  std::vector<uint64_t> expected;
};

Ladder buildLadder(Session& session, int width, int levels, const fs::path& log) {
  std::vector<DataObject> previous;
  std::vector<uint64_t> values(width);
  for (int i = 0; i < width; i++) values[i] = i;
  for (int level = 0; level < levels; level++) {
    std::vector<DataObject> current;
    for (int i = 0; i < width; i++) {
      std::string name = "l" + std::to_string(level) + "/" + std::to_string(i);
      std::string record = "echo " + name + " >> '" + log.string() + "'; ";
      Program program = level == 0
                            ? Program::shell(record + "echo " + std::to_string(i))
                            : Program::shell(record + "read x < a; read y < b; echo $(( (x + y) % " +
                                             std::to_string(MODULUS) + " ))")
                                  .input(previous[i], "a")
                                  .input(previous[(i + 1) % width], "b");
      current.push_back(session.execute(program.stdoutOutput().name(name)).output());
    }
    if (level > 0) {
      std::vector<uint64_t> next(width);
      for (int i = 0; i < width; i++) next[i] = (values[i] + values[(i + 1) % width]) % MODULUS;
      values = next;
    }
    previous = std::move(current);
  }
  for (auto& object : previous) object.keep();
  return {previous, values};
}

// Runs a ladder while another thread kills the server `kills` times at
// random moments (seeded) and starts it again; checks the outputs and that
// every task ran exactly once: the governors kept running what they had,
// the restarted server adopted it, nothing finished was run again.
void runThroughServerCrashes(unsigned seed, int width, int levels, int kills) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  auto log = fs::path(cluster.workDir()) / "executions";
  Client client(cluster.serverAddress());
  auto session = client.newSession("ladder");
  auto ladder = buildLadder(session, width, levels, log);
  auto began = std::chrono::steady_clock::now();

  std::atomic<bool> done{false};
  std::thread killer([&]() {
    std::mt19937 random(seed);
    std::uniform_int_distribution<int> pause(50, 1500);
    for (int k = 0; k < kills && !done; k++) {
      // Fault injection at a random moment, not synchronisation.
      std::this_thread::sleep_for(std::chrono::milliseconds(pause(random)));
      if (done) break;
      cluster.restartServer();
    }
  });
  try {
    session.submit();
    session.waitAll();
  } catch (...) {
    done = true;
    killer.join();
    throw;
  }
  done = true;
  killer.join();
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  ::testing::Test::RecordProperty("seconds_seed_" + std::to_string(seed), std::to_string(seconds));
  fprintf(stderr, "recovery run: seed=%u tasks=%d kills=%d seconds=%.1f\n", seed, width * levels, kills,
          seconds);

  for (size_t i = 0; i < ladder.last.size(); i++) {
    ASSERT_EQ(ladder.last[i].fetch(), std::to_string(ladder.expected[i]) + "\n") << "output " << i;
  }
  auto counts = executions(log);
  EXPECT_EQ(counts.size(), static_cast<size_t>(width * levels));
  int twice = 0;
  for (auto& [name, count] : counts) {
    if (count != 1) {
      if (twice++ < 10) ADD_FAILURE() << name << " ran " << count << " times";
    }
  }
  EXPECT_EQ(twice, 0);

  // No orphans: once the session is closed, the governors' object
  // directories empty (they remove in the background: bounded polling).
  session.close();
  for (size_t g = 0; g < cluster.governorCount(); g++) {
    auto dir = fs::path(cluster.workDir()) / ("governor-" + std::to_string(g)) / "objects";
    size_t files = 0;
    for (int attempt = 0; attempt < 200; attempt++) {
      files = 0;
      if (fs::exists(dir)) {
        for ([[maybe_unused]] auto& entry : fs::directory_iterator(dir)) files++;
      }
      if (files == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(files, 0u) << dir;
  }
}

TEST(RecoveryTest, ServerKilledDuringA10000TaskRunLosesNothingAndRunsNothingTwice) {
  // One full-size run, then smaller ones with other kill moments (CI time).
  runThroughServerCrashes(1, 1000, 10, 3);
  for (unsigned seed : {2u, 3u}) {
    if (HasFailure()) return;
    SCOPED_TRACE("seed " + std::to_string(seed));
    runThroughServerCrashes(seed, 300, 10, 3);
  }
}

TEST(RecoveryTest, WaitingClientSeesItsSessionFinishAcrossARestart) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("across");
  auto marker = fs::path(cluster.workDir()) / "started";
  auto task = session.execute(
      Program::shell("touch '" + marker.string() + "'; sleep 1; echo finished").stdoutOutput());
  task.output().keep();
  session.submit();
  // Restart once the task runs (the file is its first act).
  for (int i = 0; i < 200 && !fs::exists(marker); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(marker));
  cluster.restartServer();
  EXPECT_EQ(task.output().fetch(), "finished\n");
  auto state = session.state();
  EXPECT_EQ(state.finished, 1u);
}

TEST(RecoveryTest, PersistentSessionOutlivesItsClientAndANewClientWaitsForIt) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  uint64_t id = 0;
  uint64_t output = 0;
  {
    Client client(cluster.serverAddress());
    auto session = client.newSession("kept", SessionOptions{.persistent = true});
    auto task = session.execute(Program::shell("sleep 0.5; echo persistent").stdoutOutput());
    task.output().keep();
    session.submit();
    id = session.state().id;
    output = task.output().id();
    session.detach();
  }
  cluster.restartServer();
  Client other(cluster.serverAddress());
  auto session = other.attach(id);
  session.waitAll();
  EXPECT_EQ(session.object(output).fetch(), "persistent\n");
  session.close();
  for (auto& s : other.sessions()) EXPECT_NE(s.id, id);
}

TEST(RecoveryTest, NonPersistentSessionIsClosedWhenItsClientGoes) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  {
    Client client(cluster.serverAddress());
    auto session = client.newSession("short");
    session.execute(Program::shell("true"));
    session.submit();
    session.detach();
  }
  Client other(cluster.serverAddress());
  for (int i = 0; i < 100 && !other.sessions().empty(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(other.sessions().empty());
}

}  // namespace
}  // namespace squall
