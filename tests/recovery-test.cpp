// Crash recovery (issue 5) with real processes: the server killed with
// SIGKILL at random points of a run and started again on its session log;
// governors and the client reconnect on their own. Every task's program
// appends its id to a file, so the test counts executions.
#include "command-output.h"
#include "sanitizers.h"
#include "store-files.h"

#include <gtest/gtest.h>
#include <optional>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sys/wait.h>
#include <unistd.h>
#include <thread>

namespace squall {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t MODULUS = 1000003;
// The ladders' widths (10 levels each): 10,000 tasks in the plain tree,
// 3,000 under a sanitizer (each program start there costs several times
// more, and the paths are the same).
constexpr int FULL_WIDTH = plainOrSanitized(1000, 300);
constexpr int SMALL_WIDTH = plainOrSanitized(300, 100);

ClusterOptions recoveryCluster() {
  ClusterOptions options;
  options.governors = 2;
  options.cpus = 2;
  options.logLevel = getenv("SQUALL_TEST_LOG_LEVEL") ? getenv("SQUALL_TEST_LOG_LEVEL") : "warn";
  return options;
}

// Kills the server and starts it again on a log of its own (another
// incarnation), at the same address.
void restartOnAFreshLog(LocalCluster& cluster) {
  cluster.killServer();
  auto log = fs::path(cluster.workDir()) / "server.sqlite";
  for (auto suffix : {"", "-wal", "-shm"}) fs::remove(log.string() + suffix);
  cluster.restartServer();
}

// One start of a task's program: the governor (index in the cluster) and
// its place among all starts (the line of the shared file).
struct Run {
  int governor;
  size_t order;
};

// Per task name, its runs, in order.
std::map<std::string, std::vector<Run>> executions(const fs::path& file) {
  std::map<std::string, std::vector<Run>> runs;
  std::ifstream in(file);
  std::string name, where;
  size_t order = 0;
  while (in >> name >> where) {
    auto at = where.find("/governor-");
    int governor = at == std::string::npos ? -1 : std::atoi(where.c_str() + at + 10);
    runs[name].push_back({governor, order++});
  }
  return runs;
}

// Waits (bounded) until the governor's object directory is empty; returns
// how many entries are left. Governors remove in the background.
// Entries left in governor `g`'s store (on disk and in its memory tier),
// waiting up to 10 s for removals on its pool.
size_t objectsLeft(LocalCluster& cluster, size_t g) {
  size_t entries = 0;
  for (int attempt = 0; attempt < 200; attempt++) {
    entries = storeEntries(cluster, g).size();
    if (entries == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return entries;
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
      // The sandbox is under the governor's work dir: the line says where.
      std::string record = "echo " + name + " $PWD >> '" + log.string() + "'; ";
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

// Runs a ladder on a new cluster while another thread calls `fault` `kills`
// times at random moments (seeded); checks every output and that the
// session's data leaves the governors `keep(g)` says to look at once it is
// closed. Returns who ran each task.
std::map<std::string, std::vector<Run>> runLadderThroughFaults(
    unsigned seed, int width, int levels, int kills, const std::function<void(LocalCluster&)>& fault,
    const std::function<bool(size_t)>& checkGovernor = [](size_t) { return true; }) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  auto log = fs::path(cluster.workDir()) / "executions";
  Client client(cluster.serverAddress());
  auto session = client.newSession("ladder");
  auto ladder = buildLadder(session, width, levels, log);
  auto began = std::chrono::steady_clock::now();

  std::atomic<bool> done{false};
  std::thread injector([&]() {
    std::mt19937 random(seed);
    std::uniform_int_distribution<int> pause(50, 1500);
    for (int k = 0; k < kills && !done; k++) {
      // Fault injection at a random moment, not synchronisation.
      std::this_thread::sleep_for(std::chrono::milliseconds(pause(random)));
      if (!done) fault(cluster);
    }
  });
  try {
    session.submit();
    session.waitAll();
  } catch (...) {
    done = true;
    injector.join();
    throw;
  }
  done = true;
  injector.join();
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  fprintf(stderr, "recovery run: seed=%u tasks=%d faults=%d seconds=%.1f\n", seed, width * levels,
          kills, seconds);

  for (size_t i = 0; i < ladder.last.size(); i++) {
    EXPECT_EQ(ladder.last[i].fetch(), std::to_string(ladder.expected[i]) + "\n") << "output " << i;
  }
  auto runs = executions(log);
  EXPECT_EQ(runs.size(), static_cast<size_t>(width * levels));
  // No orphans: once the session is closed, the governors' object
  // directories empty.
  session.close();
  for (size_t g = 0; g < cluster.governorCount(); g++) {
    if (!checkGovernor(g)) continue;
    EXPECT_EQ(objectsLeft(cluster, g), 0u) << "governor " << g;
  }
  return runs;
}

// The server killed (SIGKILL) and started again: the governors kept
// running what they had, the restarted server adopted it, nothing finished
// was run again: every task ran exactly once.
void runThroughServerCrashes(unsigned seed, int width, int levels, int kills) {
  auto runs = runLadderThroughFaults(seed, width, levels, kills,
                                     [](LocalCluster& cluster) { cluster.restartServer(); });
  int twice = 0;
  for (auto& [name, starts] : runs) {
    if (starts.size() != 1 && twice++ < 10) {
      ADD_FAILURE() << name << " ran " << starts.size() << " times";
    }
  }
  EXPECT_EQ(twice, 0);
}

// The ladder's tasks that read the output of level `level` task `i`: the
// next level's i and i - 1.
std::vector<std::string> readersOf(int level, int i, int width, int levels) {
  if (level + 1 >= levels) return {};
  auto name = [&](int at) { return "l" + std::to_string(level + 1) + "/" + std::to_string(at); };
  return {name(i), name((i + width - 1) % width)};
}

// Governors killed (SIGKILL), fresh ones joining. Work on a dead governor
// is run again elsewhere, and so is whatever it alone held that is still
// needed; a task that ran on a governor that lived is never run again.
void runThroughGovernorCrashes(unsigned seed, int width, int levels, int kills) {
  std::vector<bool> killed(2 + kills, false);
  auto runs = runLadderThroughFaults(
      seed, width, levels, kills,
      [&killed](LocalCluster& cluster) {
        // The oldest governor still alive goes; a new one takes its place.
        size_t victim = 0;
        while (killed[victim]) victim++;
        killed[victim] = true;
        cluster.governor(victim).signal(SIGKILL);
        cluster.addGovernor();
      },
      [&killed](size_t g) { return !killed[g]; });
  // A task runs again after a run on a governor that lived only when its
  // output was needed again: it had been removed once every reader had
  // finished (it is not kept), and then a reader ran again because what the
  // reader made was lost with a killed governor. So the rule: every run but
  // the last was on a killed governor, or a reader of the task ran again
  // after the task's next run (the re-run that needed it).
  int bad = 0, remade = 0;
  for (auto& [name, starts] : runs) {
    int level = 0, index = 0;
    ASSERT_EQ(sscanf(name.c_str(), "l%d/%d", &level, &index), 2) << name;
    for (size_t r = 0; r + 1 < starts.size(); r++) {
      int g = starts[r].governor;
      if (g >= 0 && killed[g]) continue;
      bool neededAgain = false;
      for (auto& reader : readersOf(level, index, width, levels)) {
        auto it = runs.find(reader);
        if (it == runs.end() || it->second.size() < 2) continue;
        for (auto& start : it->second) neededAgain |= start.order > starts[r + 1].order;
      }
      if (neededAgain) {
        remade++;
      } else if (bad++ < 10) {
        ADD_FAILURE() << name << " ran again after it ran on governor-" << g
                      << ", which lived, and no reader of it ran again after that";
      }
    }
  }
  EXPECT_EQ(bad, 0);
  fprintf(stderr, "recovery run: seed=%u tasks run again only because a re-run reader needed their removed "
                  "output: %d\n", seed, remade);
}

TEST(RecoveryTest, ServerKilledDuringA10000TaskRunLosesNothingAndRunsNothingTwice) {
  // One full-size run, then smaller ones with other kill moments (CI time;
  // smaller again under the sanitizers, which run it twice more).
  runThroughServerCrashes(1, FULL_WIDTH, 10, 3);
  for (unsigned seed : {2u, 3u}) {
    if (HasFailure()) return;
    SCOPED_TRACE("seed " + std::to_string(seed));
    runThroughServerCrashes(seed, SMALL_WIDTH, 10, 3);
  }
}

TEST(RecoveryTest, GovernorsKilledDuringA10000TaskRunLoseNothingAndRedoOnlyWhatWasLost) {
  runThroughGovernorCrashes(1, FULL_WIDTH, 10, 2);
  for (unsigned seed : {2u, 3u}) {
    if (HasFailure()) return;
    SCOPED_TRACE("seed " + std::to_string(seed));
    runThroughGovernorCrashes(seed, SMALL_WIDTH, 10, 2);
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

TEST(RecoveryTest, SquallWaitCarriesOnAcrossAServerRestart) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("waited", SessionOptions{.persistent = true});
  auto marker = fs::path(cluster.workDir()) / "started";
  session.execute(Program::shell("touch '" + marker.string() + "'; sleep 1"));
  session.submit();
  auto id = session.state().id;
  ChildProcess wait(findProgram("squall"),
                    {"wait", std::to_string(id), "--server", cluster.serverAddress()});
  for (int i = 0; i < 200 && !fs::exists(marker); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(marker));
  cluster.restartServer();
  ASSERT_TRUE(wait.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  auto status = *wait.poll();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(session.state().finished, 1u);
  session.close();
}

TEST(RecoveryTest, AnObjectNoLongerKeptIsNotKeptAgainAfterARestart) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("unkept", SessionOptions{.persistent = true});
  auto dropped = session.execute(Program::shell("echo dropped").stdoutOutput()).output();
  auto kept = session.execute(Program::shell("echo kept").stdoutOutput()).output();
  dropped.keep();
  kept.keep();
  session.submit();
  session.waitAll();
  session.unkeep({dropped});
  cluster.restartServer();
  EXPECT_EQ(kept.fetch(), "kept\n");
  try {
    dropped.fetch();
    ADD_FAILURE() << "an object no longer kept came back kept";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not kept"), std::string::npos) << e.what();
  }
  session.close();
}

// A governor that stops answering (SIGSTOP: its connection stays up, as in
// a network cut that sends no reset) is given up after --governor-timeout:
// its task runs elsewhere. Woken, it finds itself given up and registers
// again.
TEST(RecoveryTest, AGovernorThatStopsAnsweringIsGivenUpAndItsWorkDoneElsewhere) {
  auto options = recoveryCluster();
  options.cpus = 1;
  options.serverArgs = {"--governor-timeout", "1"};
  options.governorArgs = {"--server-timeout", "1"};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("frozen");
  auto runs = fs::path(cluster.workDir()) / "runs";
  auto task = session.execute(
      Program::shell("echo \"$PWD\" >> '" + runs.string() + "'; sleep 1; echo done").stdoutOutput());
  task.output().keep();
  session.submit();
  auto governorsOf = [&]() {
    std::vector<int> where;
    std::ifstream in(runs);
    std::string line;
    while (std::getline(in, line)) {
      auto at = line.find("/governor-");
      where.push_back(at == std::string::npos ? -1 : std::atoi(line.c_str() + at + 10));
    }
    return where;
  };
  for (int i = 0; i < 500 && governorsOf().empty(); i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(governorsOf().size(), 1u);
  int frozen = governorsOf()[0];
  ASSERT_GE(frozen, 0);
  cluster.governor(frozen).signal(SIGSTOP);
  EXPECT_EQ(task.output().fetch(), "done\n");
  auto where = governorsOf();
  ASSERT_EQ(where.size(), 2u);
  EXPECT_NE(where[1], frozen);
  EXPECT_EQ(client.governors().size(), 1u);
  cluster.governor(frozen).signal(SIGCONT);
  // Bounded: its next heartbeat is refused, and it registers again.
  size_t back = 0;
  for (int i = 0; i < 500 && back < 2; i++) {
    back = client.governors().size();
    if (back < 2) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(back, 2u);
  session.close();
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

// Issue 40 item 11: the server killed and started again on a fresh log (the
// old one lost, or another --log) numbers its sessions from 1 again. A
// client of the one before, owning or attached to its session 1, must hear
// that its session is gone: before incarnations it re-adopted "session 1"
// by its bare id, took B's session of that id for its own and closed it (and
// B saw "session 1 was closed", its tasks not run).
TEST(RecoveryTest, AClientOfAServerStartedOnAnotherLogCannotReachTheNewSessionOfItsId) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  auto a = std::make_unique<Client>(cluster.serverAddress());
  // (Session handles go before their clients.)
  std::optional<Session> mine(a->newSession("a-pipeline"));
  auto id = mine->state().id;
  // As `squall status ID` or another program attaches: by the bare id.
  auto watcher = std::make_unique<Client>(cluster.serverAddress());
  std::optional<Session> attached(watcher->attach(id));
  attached->state();

  restartOnAFreshLog(cluster);
  Client b(cluster.serverAddress());
  auto theirs = b.newSession("b-run");
  ASSERT_EQ(theirs.state().id, id) << "the new server did not give the id out again: nothing to confuse";
  auto task = theirs.execute(Program::shell("echo b").stdoutOutput());
  task.output().keep();
  theirs.submit();

  auto gone = [&](const std::function<void()>& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " of the old session " << id << " reached the new one";
    } catch (const Error& e) {
      std::string message = e.what();
      EXPECT_NE(message.find("session " + std::to_string(id) + " is gone"), std::string::npos) << message;
      EXPECT_NE(message.find("another session log"), std::string::npos) << message;
    }
  };
  // Each first call reconnects (A re-adopts its session then: refused).
  gone([&]() { mine->state(); }, "state");
  gone([&]() { mine->close(); }, "close");
  gone([&]() { attached->state(); }, "an attached handle's state");
  gone([&]() { attached->cancel(); }, "an attached handle's cancel");
  // Neither client owns B's session: it outlives them.
  mine.reset();
  attached.reset();
  a.reset();
  watcher.reset();
  EXPECT_EQ(task.output().fetch(), "b\n");
  auto state = theirs.state();
  EXPECT_TRUE(state.open) << state.failure;
  EXPECT_EQ(state.finished, 1u);
  theirs.close();
}

// The same for a governor: it ran and held work of the server before,
// registers again with the server started on another log, where a new
// session has the same id and tasks of the same ids. It starts over: none
// of its old runs is taken for the new session's task, none of its results
// reaches it.
TEST(RecoveryTest, AGovernorBackFromAServerOnAnotherLogStartsOverAndNoneOfItsWorkReachesTheNewSessions) {
  auto options = recoveryCluster();
  options.governors = 1;
  options.cpus = 1;
  LocalCluster cluster(options);
  cluster.start();
  auto started = fs::path(cluster.workDir()) / "a-started";
  auto a = std::make_unique<Client>(cluster.serverAddress());
  // (A session handle goes before its client.)
  std::optional<Session> mine(a->newSession("a-run"));
  auto id = mine->state().id;
  auto slow = mine->execute(Program::shell("touch '" + started.string() + "'; sleep 3; echo a").stdoutOutput());
  slow.output().keep();
  mine->submit();
  // No event reaches the test when a program starts: a bounded poll.
  for (int i = 0; i < 200 && !fs::exists(started); i++) usleep(25 * 1000);
  ASSERT_TRUE(fs::exists(started));

  // The governor sleeps through the server's crash and the new start, so
  // that the new session and its task are there when it comes back.
  cluster.governor(0).signal(SIGSTOP);
  restartOnAFreshLog(cluster);
  Client b(cluster.serverAddress());
  auto theirs = b.newSession("b-run");
  ASSERT_EQ(theirs.state().id, id) << "the new server did not give the id out again: nothing to confuse";
  auto task = theirs.execute(Program::shell("echo b").stdoutOutput());
  ASSERT_EQ(task.id(), slow.id());
  task.output().keep();
  theirs.submit();
  cluster.governor(0).signal(SIGCONT);

  EXPECT_EQ(task.output().fetch(), "b\n");
  auto state = theirs.state();
  EXPECT_TRUE(state.open) << state.failure;
  EXPECT_EQ(state.finished, 1u);
  // (A's client, whose server is gone, goes before the cluster.)
  mine.reset();
  a.reset();
  theirs.close();
  EXPECT_EQ(cluster.stop(), "");
}

// ... while a restart on the same log keeps its incarnation: the client
// re-adopts its session and an attached one carries on, as before; new
// sessions get ids of their own.
TEST(RecoveryTest, ARestartOnTheSameLogKeepsTheSessionsTheirClientsHold) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  Client a(cluster.serverAddress());
  auto mine = a.newSession("kept-across");
  auto id = mine.state().id;
  Client watcher(cluster.serverAddress());
  auto attached = watcher.attach(id);
  auto task = mine.execute(Program::shell("echo a").stdoutOutput());
  task.output().keep();
  mine.submit();
  mine.waitAll();

  cluster.restartServer();
  EXPECT_EQ(task.output().fetch(), "a\n");
  EXPECT_EQ(attached.state().finished, 1u);
  auto more = mine.execute(Program::shell("echo more").stdoutOutput());
  more.output().keep();
  mine.submit();
  EXPECT_EQ(more.output().fetch(), "more\n");
  Client b(cluster.serverAddress());
  EXPECT_NE(b.newSession("b-run").state().id, id);
  mine.close();
  for (auto& s : b.sessions()) EXPECT_NE(s.id, id);
}

// Runs the server on `log` (and nothing else) and returns what it printed
// and its exit status: a server that cannot use its log stops at once.
std::pair<std::string, int> serverOn(const fs::path& log) {
  return commandOutput(findProgram("squall-server") + " --listen 127.0.0.1:0 --http off --log '" + log.string() +
                       "' 2>&1");
}

TEST(RecoveryTest, ALogThatIsNotALogStopsTheServerWithAClearErrorAndIsLeftAlone) {
  auto dir = fs::temp_directory_path() / ("squall-badlog-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto log = dir / "server.sqlite";
  std::ofstream(log) << std::string(4096, 'x');
  auto [output, status] = serverOn(log);
  EXPECT_EQ(status, 1) << output;
  EXPECT_NE(output.find(log.string()), std::string::npos) << output;
  EXPECT_NE(output.find("is not a squall session log"), std::string::npos) << output;
  EXPECT_EQ(fs::file_size(log), 4096u);
  fs::remove_all(dir);
}

// One server a log: a second one on a log in use would write the same
// sessions (it opened and served it before the log was locked).
TEST(RecoveryTest, ASecondServerOnALogInUseStopsWithAClearErrorAndTheFirstGoesOn) {
  LocalCluster cluster(recoveryCluster());
  cluster.start();
  auto log = fs::path(cluster.workDir()) / "server.sqlite";
  auto [output, status] = serverOn(log);
  EXPECT_EQ(status, 1) << output;
  EXPECT_NE(output.find("session log " + log.string() + " is in use by another squall-server"), std::string::npos)
      << output;
  Client client(cluster.serverAddress());
  auto session = client.newSession("still served");
  auto task = session.execute(Program::shell("echo fine").stdoutOutput());
  task.output().keep();
  session.submit();
  EXPECT_EQ(task.output().fetch(), "fine\n");
  // Free again once the first one has gone (a SIGKILL too: the kernel
  // drops the lock with the process).
  cluster.killServer();
  cluster.restartServer();
  EXPECT_EQ(task.output().fetch(), "fine\n");
}

TEST(RecoveryTest, AFullLogRefusesTheSubmitClearlyAndTheServerCarriesOn) {
  ClusterOptions options = recoveryCluster();
  options.serverArgs = {"--log-max-mb", "1"};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("full");
  // 4 MiB of small constants (those travel with the submit; bigger ones
  // go to a governor, and only their place is logged) cannot be recorded
  // in a 1 MiB log.
  std::vector<DataObject> parts;
  for (int i = 0; i < 8; i++) parts.push_back(session.blob(std::string(512 << 10, char('a' + i))));
  session.concat(parts);
  try {
    session.submit();
    ADD_FAILURE() << "a submit the log cannot hold was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the disk is full"), std::string::npos) << e.what();
  }
  // Nothing of it was applied; a small one goes through.
  EXPECT_EQ(session.state().waiting + session.state().ready + session.state().running +
                session.state().finished,
            0u);
  auto task = session.concat({session.blob("still "), session.blob("here")});
  task.output().keep();
  session.submit();
  EXPECT_EQ(task.output().fetch(), "still here");
}

TEST(RecoveryTest, WithoutALogEverythingRunsAndNothingIsKeptAcrossARestart) {
  ClusterOptions options = recoveryCluster();
  options.serverArgs = {"--log", "off"};
  LocalCluster cluster(options);
  cluster.start();
  {
    Client client(cluster.serverAddress());
    auto session = client.newSession("unlogged", SessionOptions{.persistent = true});
    auto current = session.blob("a");
    for (int i = 0; i < 50; i++) current = session.concat({current, session.blob("b")}).output();
    current.keep();
    session.submit();
    EXPECT_EQ(current.fetch(), "a" + std::string(50, 'b'));
    session.detach();
  }
  cluster.restartServer();
  Client client(cluster.serverAddress());
  EXPECT_TRUE(client.sessions().empty());
}

}  // namespace
}  // namespace squall
