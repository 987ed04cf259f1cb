// Calls queued on a busy executor process (governor/src/exec/executor-pool.h,
// docs/tasklib.md): a governor with no cpu free lets calls of a short
// function wait behind the running call of a warm process. Real server and
// governor processes; each governor's log (debug) goes to a file the tests
// read, since what is queued where is the governor's own business.
#include "session-failure.h"
#include "test-executor.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>
#include <stdlib.h>
#include <sstream>
#include <thread>

namespace squall {
namespace {

// One governor with `cpus` cpus keeping testfn warm, its stderr in a file.
struct PipelineCluster {
  PipelineCluster(uint32_t cpus, std::vector<std::string> governorArgs = {}) {
    ClusterOptions options;
    options.governors = 1;
    options.cpus = cpus;
    options.logLevel = "debug";
    options.governorArgs = {"--executor", "testfn=" + testExecutor()};
    for (auto& arg : governorArgs) options.governorArgs.push_back(arg);
    std::string tmpl = (std::filesystem::temp_directory_path() / "squall-pipeline-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    log = dir + "/governor.log";
    // The wrapper execs the governor with its stderr appended to the file.
    options.governorWrapEach = {{"sh", "-c", "exec \"$@\" 2>>'" + log + "'", "sh"}};
    options.workDir = dir + "/cluster";
    std::filesystem::create_directory(options.workDir);
    cluster = std::make_unique<LocalCluster>(options);
    cluster->start();
  }
  ~PipelineCluster() {
    cluster.reset();
    std::error_code ec;
    if (!getenv("KEEPLOG")) std::filesystem::remove_all(dir, ec);
  }

  // Lines of the governor's log holding `event`.
  size_t count(const std::string& event) const {
    std::ifstream in(log);
    std::string line;
    size_t n = 0;
    while (std::getline(in, line)) n += line.find(event) != std::string::npos ? 1 : 0;
    return n;
  }

  std::string dir;
  std::unique_ptr<LocalCluster> cluster;
  std::string log;
};

// Runs rounds of 50 calls of testfn/act with config "" until the governor
// has queued some behind others, so that its calls count as short (a
// process started for the first calls makes them look long for a while).
void warmUp(Client& client, const PipelineCluster& pc) {
  for (int round = 0; round < 40 && pc.count("event=call-queued") == 0; round++) {
    auto session = client.newSession("warm up");
    std::vector<Task> calls;
    for (int i = 0; i < 50; i++) calls.push_back(session.call("testfn/act"));
    calls.back().output().keep();
    session.submit();
    session.waitAll();
    ASSERT_EQ(calls.back().output().fetch(), "ok");
  }
  ASSERT_GT(pc.count("event=call-queued"), 0u);
}

// `n` calls of testfn/act echoing their inputs, "<prefix><i>", kept.
std::vector<Task> echoCalls(Session& session, const std::string& prefix, int n) {
  std::vector<Task> calls;
  for (int i = 0; i < n; i++) {
    calls.push_back(session.call("testfn/act", {session.blob(prefix + std::to_string(i))}));
    calls.back().output().keep();
  }
  return calls;
}

// Each answer must be its own call's.
void expectEchoes(std::vector<Task>& calls, const std::string& prefix) {
  for (size_t i = 0; i < calls.size(); i++) EXPECT_EQ(calls[i].output().fetch(), prefix + std::to_string(i));
}

void runEchoes(Client& client, int n) {
  auto session = client.newSession("echoes");
  auto calls = echoCalls(session, "call ", n);
  session.submit();
  session.waitAll();
  expectEchoes(calls, "call ");
}

TEST(TasklibPipelineTest, ShortCallsWaitBehindTheRunningOneAndEachGetsItsOwnAnswer) {
  PipelineCluster queued(1);
  {
    Client client(queued.cluster->serverAddress());
    runEchoes(client, 400);
  }
  // The server sends a governor more tasks than it has cpus: with one cpu,
  // most calls waited in the process behind another.
  EXPECT_GT(queued.count("event=call-queued"), 0u);
  EXPECT_EQ(queued.count("event=executor-call-overran"), 0u);

  // Control: one call per process at a time.
  PipelineCluster single(1, {"--executor-pipeline", "1"});
  {
    Client client(single.cluster->serverAddress());
    runEchoes(client, 400);
  }
  EXPECT_EQ(single.count("event=call-queued"), 0u);
}

TEST(TasklibPipelineTest, CallsQueuedBehindOneThatOverrunsAreGivenBackAndRunElsewhere) {
  PipelineCluster pc(2);
  Client client(pc.cluster->serverAddress());
  warmUp(client, pc);
  size_t queuedBefore = pc.count("event=call-queued");
  auto session = client.newSession("overrun");
  // Both cpus taken first (their hints put them first), by calls of the
  // same short function that turn out long; the others queue behind them.
  auto slow = session.call("testfn/act", {}, "sleep=6000");
  slow.expectedDuration(std::chrono::hours(1));
  auto brief = session.call("testfn/act", {}, "sleep=300");
  brief.expectedDuration(std::chrono::minutes(30));
  auto quick = echoCalls(session, "q", 8);
  session.submit();
  session.wait(quick);
  expectEchoes(quick, "q");
  // Those behind the slow call did not wait for its six seconds: after
  // STUCK_AFTER (1 s) they went back and ran on the other cpu.
  EXPECT_EQ(slow.info().state, "running");
  EXPECT_GT(pc.count("event=call-queued"), queuedBefore);
  EXPECT_EQ(pc.count("event=executor-call-overran"), 1u);
  session.cancel();
}

// The calls given back do not also run in the process they were queued
// on once its long call ends (that process reads nothing from the
// governor while the call runs: executor.capnp, callStates).
TEST(TasklibPipelineTest, ACallGivenBackRunsOnlyWhereItWentBackTo) {
  PipelineCluster pc(2);
  Client client(pc.cluster->serverAddress());
  warmUp(client, pc);
  auto log = std::filesystem::path(pc.cluster->workDir()) / "runs.log";
  auto session = client.newSession("given back once");
  auto slow = session.call("testfn/act", {}, "sleep=2500");
  slow.expectedDuration(std::chrono::hours(1));
  auto brief = session.call("testfn/act", {}, "sleep=300");
  brief.expectedDuration(std::chrono::minutes(30));
  std::vector<Task> quick;
  for (int i = 0; i < 8; i++) quick.push_back(session.call("testfn/act", {session.blob("q" + std::to_string(i))}, "log=" + log.string()));
  session.submit();
  session.waitAll();  // the slow call too: its process had the time to run what it held
  // (The brief call may overrun too on a starved machine: at least one.)
  ASSERT_GE(pc.count("event=executor-call-overran"), 1u);
  std::ifstream in(log);
  std::multiset<std::string> runs;
  for (std::string line; std::getline(in, line);) runs.insert(line);
  for (int i = 0; i < 8; i++) EXPECT_EQ(runs.count("q" + std::to_string(i)), 1u) << "q" << i;
  EXPECT_EQ(runs.size(), 8u);
}

TEST(TasklibPipelineTest, ACrashWithCallsQueuedBehindFailsOnlyTheCallThatRan) {
  PipelineCluster pc(1);
  Client client(pc.cluster->serverAddress());
  warmUp(client, pc);
  size_t queuedBefore = pc.count("event=call-queued");
  // The crash in a session of its own (a failed task fails its session);
  // the others, in another, reach the governor while it sleeps and queue
  // behind it.
  auto session = client.newSession("crash");
  session.call("testfn/act", {}, "sleep=300 abort");
  session.submit();
  auto others = client.newSession("behind the crash");
  auto calls = echoCalls(others, "o", 10);
  others.submit();
  auto message = failureOf(session);
  EXPECT_NE(message.find("was killed by SIGABRT while running testfn/act"), std::string::npos) << message;
  // The calls waiting behind it never ran there: queued again, they ran in
  // a fresh process, once.
  others.waitAll();
  expectEchoes(calls, "o");
  for (auto& c : calls) EXPECT_EQ(c.info().attempt, 1u);
  EXPECT_GT(pc.count("event=call-queued"), queuedBefore);
  EXPECT_GT(pc.count("event=task-given-back"), 0u);
}

TEST(TasklibPipelineTest, CancellingASessionEndsItsRunningAndQueuedCalls) {
  PipelineCluster pc(1);
  Client client(pc.cluster->serverAddress());
  warmUp(client, pc);
  size_t queuedBefore = pc.count("event=call-queued");
  auto session = client.newSession("cancel");
  auto slow = session.call("testfn/act", {}, "sleep=60000");
  slow.expectedDuration(std::chrono::hours(1));
  std::vector<Task> queued;
  for (int i = 0; i < 10; i++) queued.push_back(session.call("testfn/act"));
  session.submit();
  for (int i = 0; i < 500 && slow.info().state != "running"; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(slow.info().state, "running");
  session.cancel();
  auto message = failureOf(session);
  EXPECT_FALSE(message.empty());
  for (auto& t : queued) EXPECT_NE(t.info().state, "finished");
  EXPECT_GT(pc.count("event=call-queued"), queuedBefore);
  // The governor goes on: a new call answers.
  auto again = client.newSession("after");
  auto echo = again.call("testfn/act", {again.blob("still here")});
  echo.output().keep();
  again.submit();
  EXPECT_EQ(echo.output().fetch(), "still here");
}

}  // namespace
}  // namespace squall
