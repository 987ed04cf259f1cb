// Actors end to end (docs/actors.md): a real server and governors keeping
// the actor executor (tests/executors/actor-executor.cpp, "stats"): calls
// in order, actors in parallel, resources held for an actor's life, crashes
// with and without restarts, kill, bad types and methods at submit.
#include "http-get.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <random>
#include <set>
#include <filesystem>
#include <fstream>
#include <signal.h>
#include <sstream>
#include <string>
#include <thread>

namespace squall {
namespace {

std::string actorExecutor() {
  const char* path = getenv("SQUALL_ACTOR_EXECUTOR");
  return path != nullptr ? path : "";
}

// A fresh directory for marker files, removed at the end.
struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "squall-actor-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

// The message of the error `wait` throws ("" when it throws none).
template <typename Wait>
std::string errorOf(Wait wait) {
  try {
    wait();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The TaskFailed `wait` throws (none when it throws none, or another error).
template <typename Wait>
std::optional<TaskFailed> taskFailureOf(Wait wait) {
  try {
    wait();
  } catch (const TaskFailed& e) {
    return e;
  }
  return std::nullopt;
}

// Whether process `pid` is gone, waiting up to 10 s for it to go.
bool processGone(long pid) {
  for (int i = 0; i < 1000; i++) {
    if (kill(static_cast<pid_t>(pid), 0) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A cluster of `governors` governors of `cpus` cpus each, with the test
// actors' executor (logs at $SQUALL_TEST_LOG_LEVEL, if set).
ClusterOptions actorCluster(int governors, uint32_t cpus) {
  ClusterOptions options;
  options.governors = governors;
  options.cpus = cpus;
  options.governorArgs = {"--executor", "stats=" + actorExecutor()};
  if (const char* level = getenv("SQUALL_TEST_LOG_LEVEL")) options.logLevel = level;
  return options;
}

class ActorTest : public ::testing::Test {
 protected:
  // Two governors of 2 cpus each, the second offering one GPU.
  static void SetUpTestSuite() {
    auto options = actorCluster(2, 2);
    options.governorArgsEach = {{}, {"--resource", "gpus=[0]"}};
    if (const char* level = getenv("SQUALL_TEST_LOG_LEVEL")) options.logLevel = level;
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void TearDown() override {
    for (size_t i = 0; i < cluster->governorCount(); i++) {
      EXPECT_TRUE(cluster->governor(i).running()) << "governor " << i;
    }
  }
  static inline LocalCluster* cluster = nullptr;
};

TEST_F(ActorTest, TenThousandCallsOnOneActorRunInTheOrderSubmitted) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("order");
  auto counter = session.actor("stats/Counter");
  // Four submits: the order holds within and across them.
  std::string expected;
  long long total = 0;
  for (int part = 0; part < 4; part++) {
    for (int i = 0; i < 2500; i++) {
      int amount = part * 2500 + i + 1;
      counter.call("add", {}, std::to_string(amount));
      expected += std::to_string(amount) + "\n";
      total += amount;
    }
    session.submit();
  }
  auto log = counter.call("log");
  auto read = counter.call("read");
  log.output().keep();
  read.output().keep();
  session.submit();
  // Waits for the calls, not for the actor, which lives on.
  session.waitAll();
  EXPECT_EQ(read.output().fetch(), std::to_string(total));
  EXPECT_TRUE(log.output().fetch() == expected) << "the calls ran out of order";
  EXPECT_EQ(counter.task().info().state, "running");
}

TEST_F(ActorTest, CallsKeepTheirTurnsWhenTheirInputsArriveInAnotherOrder) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("turns");
  auto counter = session.actor("stats/Counter");
  std::string expected;
  // Call i's input is made by a task that sleeps less the later the call:
  // the inputs are ready last call first.
  for (int i = 0; i < 20; i++) {
    auto made = session.sleep(std::chrono::milliseconds(10 * (20 - i)), session.blob(std::to_string(i + 1)));
    counter.call("addInput", {made.output()});
    expected += std::to_string(i + 1) + "\n";
  }
  auto log = counter.call("log");
  log.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(log.output().fetch(), expected);
}

TEST_F(ActorTest, ACallWaitingForItsTurnSaysWhyAndRunsOnceTheCallBeforeItCan) {
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("turn explained");
  auto counter = session.actor("stats/Counter");
  // The first call's input is made only once `go` exists.
  auto go = dir.path + "/go";
  auto gate = session.execute(
      Program::shell("while [ ! -f '" + go + "' ]; do sleep 0.01; done; printf 5").stdoutOutput());
  auto first = counter.call("addInput", {gate.output()});
  auto second = counter.call("add", {}, "1");
  second.output().keep();
  session.submit();
  auto why = session.explain(second.id());
  EXPECT_NE(why.summary.find("waits for its turn"), std::string::npos) << why.summary;
  EXPECT_NE(why.summary.find("1 call(s) made before it"), std::string::npos) << why.summary;
  ASSERT_FALSE(why.details.empty());
  EXPECT_NE(why.details[0].find("task " + std::to_string(first.id())), std::string::npos) << why.details[0];
  EXPECT_NE(second.info().state, "finished");
  std::ofstream(go) << "go";
  EXPECT_EQ(second.output().fetch(), "6");
}

TEST_F(ActorTest, AMethodsOutputFeedsTasksAndTasksOutputsFeedMethods) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("feeds");
  auto counter = session.actor("stats/Counter", {}, "100");
  auto added = counter.call("add", {}, "5");
  auto doubled = session.call("stats/double", {added.output()});
  auto again = counter.call("addInput", {doubled.output()});
  again.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(again.output().fetch(), std::to_string(105 + 210));
}

TEST_F(ActorTest, ActorsRunInParallel) {
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("parallel");
  auto a = session.actor("stats/Counter");
  auto b = session.actor("stats/Counter");
  // Each waits for the other's file: they finish only if both run at once.
  auto fromA = a.call("meet", {}, dir.path + "/a " + dir.path + "/b");
  auto fromB = b.call("meet", {}, dir.path + "/b " + dir.path + "/a");
  auto pidA = a.call("pid");
  auto pidB = b.call("pid");
  for (auto* t : {&fromA, &fromB, &pidA, &pidB}) t->output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(fromA.output().fetch(), "met");
  EXPECT_EQ(fromB.output().fetch(), "met");
  EXPECT_NE(pidA.output().fetch(), pidB.output().fetch());
}

TEST_F(ActorTest, AnActorHoldsItsGpuForItsLifeUntilKilled) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("gpu");
  auto first = session.actor("stats/Counter").resource("gpus", 1);
  auto device = first.call("env", {}, "CUDA_VISIBLE_DEVICES");
  device.output().keep();
  session.submit();
  device.wait();
  EXPECT_EQ(device.output().fetch(), "0");

  // The only GPU is held by the first actor, idle as it is.
  auto second = session.actor("stats/Counter").resource("gpus", 1);
  auto secondDevice = second.call("env", {}, "CUDA_VISIBLE_DEVICES");
  secondDevice.output().keep();
  session.submit();
  auto explained = session.explain(second.id());
  EXPECT_NE(second.task().info().state, "running") << explained.summary;
  EXPECT_NE(explained.summary.find("gpus"), std::string::npos) << explained.summary;
  EXPECT_NE(secondDevice.info().state, "finished");
  auto call = session.explain(secondDevice.id());
  EXPECT_NE(call.summary.find("waits for its actor"), std::string::npos) << call.summary;

  first.kill();
  secondDevice.wait();
  EXPECT_EQ(secondDevice.output().fetch(), "0");
  EXPECT_EQ(first.task().info().state, "cancelled");
  EXPECT_EQ(second.task().info().state, "running");
}

TEST_F(ActorTest, ACrashWithoutRestartsFailsTheCallAndTheActor) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("crash");
  auto counter = session.actor("stats/Counter");
  counter.call("add", {}, "1");
  counter.call("crash");
  auto after = counter.call("add", {}, "2");
  session.submit();
  auto failure = errorOf([&]() { session.waitAll(); });
  EXPECT_NE(failure.find("died"), std::string::npos) << failure;
  EXPECT_NE(failure.find("SIGABRT"), std::string::npos) << failure;
  EXPECT_NE(after.info().state, "finished");
}

// The crashed process leaves a child holding its sockets to the governor
// open for 10 s: its exit decides the calls' fates (a grace of 2 s later),
// not those sockets.
TEST_F(ActorTest, ACrashLeavingAChildBehindIsSeenWithoutWaitingForTheChild) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("crash with a child");
  auto counter = session.actor("stats/Counter").maxRestarts(1);
  auto before = counter.call("add", {}, "1");
  auto crash = counter.call("crashLeavingAChild");
  crash.allowFailure();
  auto after = counter.call("add", {}, "2");
  before.output().keep();
  after.output().keep();
  auto start = std::chrono::steady_clock::now();
  session.submit();
  session.waitAll();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(7));
  EXPECT_EQ(crash.info().state, "failed");
  EXPECT_NE(crash.info().error.find("died while running the call"), std::string::npos) << crash.info().error;
  EXPECT_EQ(before.output().fetch(), "1");
  // The restarted actor (its constructor started over) ran the call behind.
  EXPECT_EQ(after.output().fetch(), "2");
}

TEST_F(ActorTest, ACrashWithRestartsRunsTheCallAgainOnAFreshActor) {
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("restart");
  auto counter = session.actor("stats/Counter", {}, "10").maxRestarts(1).maxCallRetries(1);
  auto before = counter.call("add", {}, "1");
  auto pidBefore = counter.call("pid");
  auto crash = counter.call("crash", {}, dir.path + "/marker");
  auto after = counter.call("add", {}, "2");
  auto pidAfter = counter.call("pid");
  for (auto* t : {&before, &pidBefore, &crash, &after, &pidAfter}) t->output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(before.output().fetch(), "11");
  // Run again on the restarted actor, whose constructor started over.
  EXPECT_EQ(crash.output().fetch(), "survived");
  EXPECT_EQ(after.output().fetch(), "12");
  EXPECT_NE(pidBefore.output().fetch(), pidAfter.output().fetch());
}

TEST_F(ActorTest, ARestartWithoutCallRetriesFailsOnlyTheCrashedCall) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("restart without retries");
  auto counter = session.actor("stats/Counter", {}, "10").maxRestarts(1);
  auto crash = counter.call("crash");
  crash.allowFailure();
  auto after = counter.call("add", {}, "2");
  after.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(crash.info().state, "failed");
  EXPECT_NE(crash.info().error.find("died while running the call"), std::string::npos) << crash.info().error;
  EXPECT_EQ(after.output().fetch(), "12");
}

// Calls are sent to the actor's process ahead of their turn (pipelined):
// a crash in one must take no other call's answer with it, or the calls
// before it would run again on the restarted actor.
TEST_F(ActorTest, ACrashAmongPipelinedCallsRunsNoCallTwice) {
  Client client(cluster->serverAddress());
  for (int round = 0; round < 5; round++) {
    auto session = client.newSession("pipelined crash");
    auto counter = session.actor("stats/Counter", {}, "0").maxRestarts(1);
    std::vector<Task> before, after;
    for (int i = 1; i <= 50; i++) before.push_back(counter.call("add", {}, std::to_string(i)));
    auto crash = counter.call("crash");
    crash.allowFailure();
    std::string expected;
    for (int i = 51; i <= 100; i++) {
      after.push_back(counter.call("add", {}, std::to_string(i)));
      expected += std::to_string(i) + "\n";
    }
    auto log = counter.call("log");
    log.output().keep();
    before.back().output().keep();
    after.back().output().keep();
    session.submit();
    session.waitAll();
    EXPECT_EQ(before.back().output().fetch(), std::to_string(50 * 51 / 2));
    EXPECT_EQ(crash.info().state, "failed");
    // The restarted actor ran the calls after the crash, and only those.
    EXPECT_EQ(log.output().fetch(), expected) << "round " << round;
    EXPECT_EQ(after.back().output().fetch(), std::to_string(100 * 101 / 2 - 50 * 51 / 2));
  }
}

// submitAndWait: a call made and waited for in one call to the server
// (submitGraph's waitFor); a failed call throws TaskFailed as wait() does,
// a refused graph throws the submit's Error with nothing applied, and a
// graph too big for one message is submitted and waited for the long way.
TEST_F(ActorTest, SubmitAndWaitRunsACallAndWaitsForItInOneGo) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("submit and wait");
  auto counter = session.actor("stats/Counter", {}, "10");
  auto first = counter.call("add", {}, "5");
  first.output().keep();
  session.submitAndWait({first});
  // Finished when it returns: no wait was needed.
  EXPECT_EQ(first.info().state, "finished");
  EXPECT_EQ(first.output().fetch(), "15");
  // The session's next calls, made one after another as a sync caller would.
  for (int i = 1; i <= 20; i++) {
    auto call = counter.call("add", {}, "1");
    call.output().keep();
    session.submitAndWait({call});
    ASSERT_EQ(call.info().state, "finished") << "call " << i;
    ASSERT_EQ(call.output().fetch(), std::to_string(15 + i));
  }
  // A failing method: TaskFailed naming the call, as wait() throws.
  auto failing = counter.call("fail", {}, "on purpose");
  auto failure = taskFailureOf([&]() { session.submitAndWait({failing}); });
  EXPECT_TRUE(failure) << "a failed call did not throw";
  std::string message = failure ? failure->what() : "";
  EXPECT_NE(message.find("asked to fail: on purpose"), std::string::npos) << message;
  EXPECT_EQ(failing.info().state, "failed");
}

TEST_F(ActorTest, SubmitAndWaitRefusesABadGraphAndWaitsTheLongWayForABigOne) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("submit and wait: refused and big");
  auto counter = session.actor("stats/Counter");
  session.submit();
  auto unknown = counter.call("noSuchMethod");
  std::string refused;
  try {
    session.submitAndWait({unknown});
    ADD_FAILURE() << "an unknown method was not refused";
  } catch (const TaskFailed& e) {
    ADD_FAILURE() << "refused as a failed task: " << e.what();
  } catch (const Error& e) {
    refused = e.what();
  }
  EXPECT_NE(refused.find("noSuchMethod"), std::string::npos) << refused;
  // Nothing of it was applied: the actor's next call is its first.
  auto read = counter.call("add", {}, "2");
  read.output().keep();
  session.submitAndWait({read});
  EXPECT_EQ(read.output().fetch(), "2");
  // A constant over the inline limit needs more than one message.
  auto big = session.blob(std::string(3 << 20, 'x'));
  auto copied = session.concat({big, session.blob("y")});
  copied.output().keep();
  session.submitAndWait({copied});
  EXPECT_EQ(copied.info().state, "finished");
  EXPECT_EQ(copied.output().fetch().size(), (3u << 20) + 1);
  // Nothing to wait for: a plain submit.
  auto later = counter.call("add", {}, "1");
  later.output().keep();
  session.submitAndWait({});
  EXPECT_EQ(later.output().fetch(), "3");
}

TEST_F(ActorTest, AMethodThatThrowsFailsItsCallAndTheActorKeepsItsState) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("throw");
  auto counter = session.actor("stats/Counter");
  counter.call("add", {}, "3");
  auto failing = counter.call("fail", {}, "on purpose");
  failing.allowFailure();
  auto after = counter.call("add", {}, "4");
  after.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_NE(failing.info().error.find("asked to fail: on purpose"), std::string::npos) << failing.info().error;
  EXPECT_EQ(after.output().fetch(), "7");
}

TEST_F(ActorTest, ATimeLimitStopsAMethodAndTheActorRestarts) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("time limit");
  auto counter = session.actor("stats/Counter", {}, "1").maxRestarts(1);
  auto spin = counter.call("spin");
  spin.timeLimit(std::chrono::milliseconds(300)).allowFailure();
  auto after = counter.call("read");
  after.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(spin.info().state, "failed");
  EXPECT_NE(spin.info().error.find("time limit"), std::string::npos) << spin.info().error;
  EXPECT_EQ(after.output().fetch(), "1");
}

TEST_F(ActorTest, AKilledActorsProcessGoesAndItsWaitingCallsAreCancelled) {
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("kill");
  auto counter = session.actor("stats/Counter");
  auto pid = counter.call("pid");
  pid.output().keep();
  session.submit();
  pid.wait();
  long processId = std::stol(pid.output().fetch());
  // A call that never ends, and calls behind it.
  counter.call("meet", {}, dir.path + "/mine " + dir.path + "/never");
  auto behind = counter.call("add", {}, "1");
  auto reader = session.call("stats/double", {behind.output()});
  session.submit();
  counter.kill();
  session.waitAll();
  EXPECT_EQ(counter.task().info().state, "cancelled");
  EXPECT_EQ(behind.info().state, "cancelled");
  EXPECT_EQ(reader.info().state, "skipped");
  EXPECT_TRUE(session.state().open) << "a kill fails no session";
  EXPECT_TRUE(processGone(processId));
  // Killing it again does nothing; calls on an actor that has ended are
  // refused; an actor not yet submitted cannot be killed.
  counter.kill();
  auto unsent = session.actor("stats/Counter");
  EXPECT_THROW(unsent.kill(), Error);
  counter.call("add", {}, "1");
  try {
    session.submit();
    FAIL() << "a call on a killed actor was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has ended"), std::string::npos) << e.what();
  }
  // One allowed to fail is taken, and ends as the actor's calls did: the
  // rest of its submit runs, and fetching its output says why.
  auto allowed = counter.call("add", {}, "1");
  allowed.allowFailure().output().keep();
  auto other = session.concat({session.blob("still runs")});
  other.output().keep();
  session.submit();
  EXPECT_EQ(other.output().fetch(), "still runs");
  try {
    allowed.output().fetch();
    FAIL() << "fetched the output of a call on a killed actor";
  } catch (const TaskFailed& e) {
    EXPECT_EQ(e.task, allowed.id());
    EXPECT_NE(std::string(e.what()).find("was killed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(allowed.info().state, "cancelled");
  EXPECT_TRUE(session.state().open);
}

TEST_F(ActorTest, ClosingTheSessionEndsItsActors) {
  Client client(cluster->serverAddress());
  long processId = 0;
  {
    auto session = client.newSession("close");
    auto counter = session.actor("stats/Counter");
    auto pid = counter.call("pid");
    pid.output().keep();
    session.submit();
    processId = std::stol(pid.output().fetch());
    session.close();
  }
  EXPECT_TRUE(processGone(processId));
}

TEST_F(ActorTest, UnknownTypesAndMethodsAreRefusedAtSubmitByName) {
  Client client(cluster->serverAddress());
  auto refused = [&](auto build, const std::string& words) {
    auto session = client.newSession("refused");
    build(session);
    try {
      session.submit();
      ADD_FAILURE() << "accepted; expected: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused([](Session& s) { s.actor("stats/Nope"); }, "no governor offers the actor type stats/Nope");
  refused([](Session& s) { s.actor("stats/Counter").call("nope"); }, "has no method nope");
  refused([](Session& s) { s.actor("stats/Counter").call("add", {}, "1", {ObjectKind::BLOB, ObjectKind::BLOB}); },
          "makes 1 output(s)");
  refused([](Session& s) { s.call("stats/Counter"); }, "is an actor type, not a function");
  refused([](Session& s) { s.call("stats/Counter.add"); }, "is a method of an actor type");
  refused([](Session& s) { s.actorHandle(s.concat({}).id()).call("add"); }, "which is not an actor");
}

TEST_F(ActorTest, AConstructorThatThrowsFailsTheActorWithItsMessage) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("broken");
  auto broken = session.actor("stats/Broken", {}, "no disk");
  auto call = broken.call("get");
  session.submit();
  auto failure = errorOf([&]() { call.wait(); });
  EXPECT_NE(failure.find("its constructor failed"), std::string::npos) << failure;
  EXPECT_NE(failure.find("cannot start: no disk"), std::string::npos) << failure;
}

TEST_F(ActorTest, AConstructorReadsACheckpointAMethodWrote) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("checkpoint");
  auto first = session.actor("stats/Counter", {}, "40");
  auto checkpoint = first.call("add", {}, "2");
  checkpoint.output().keep();
  session.submit();
  checkpoint.wait();
  first.kill();
  // A new actor made from the checkpoint carries on where the first was.
  auto second = session.actor("stats/Counter", {checkpoint.output()});
  auto read = second.call("read");
  read.output().keep();
  session.submit();
  EXPECT_EQ(read.output().fetch(), "42");
}

TEST_F(ActorTest, TheStatusApiAndMetricsShowActorsAndTheirCalls) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("status");
  auto counter = session.actor("stats/Counter");
  for (int i = 0; i < 3; i++) counter.call("add", {}, "1");
  session.submit();
  session.waitAll();
  auto summary = getJson(cluster->httpAddress(), "/api/sessions/" + std::to_string(session.id()));
  ASSERT_TRUE(summary.contains("actors")) << summary.dump();
  ASSERT_EQ(summary["actors"].size(), 1u);
  auto& actor = summary["actors"][0];
  EXPECT_EQ(actor["id"], counter.id());
  EXPECT_EQ(actor["type"], "stats/Counter");
  EXPECT_EQ(actor["state"], "running");
  EXPECT_EQ(actor["callsDone"], 3);
  EXPECT_EQ(actor["callsQueued"], 0);
  EXPECT_TRUE(actor["governor"].get<std::string>().rfind("governor-", 0) == 0) << actor.dump();
  auto metrics = httpGet(cluster->httpAddress(), "/metrics").body;
  EXPECT_NE(metrics.find("squall_actors{state=\"running\"} "), std::string::npos);
  EXPECT_NE(metrics.find("squall_actor_calls_finished_total "), std::string::npos);
  counter.kill();
}

// The server crashes while an actor lives and calls wait for their turns:
// after its restart (the session log replayed, the governor reporting what
// it runs) the same actor process carries on, and every call runs once, in
// order.
TEST_F(ActorTest, ANamedActorIsReachedFromASecondSessionAndOutlivesItsOwn) {
  const std::string name = "shared-counter";
  uint64_t ownerSession = 0;
  {
    Client owner(cluster->serverAddress());
    auto session = owner.newSession("owner of a named actor");
    ownerSession = session.id();
    auto counter = session.actor("stats/Counter", {}, "10").named(name);
    auto added = counter.call("add", {}, "1");
    added.output().keep();
    session.submit();
    EXPECT_EQ(added.output().fetch(), "11");
    // Names are unique among live actors.
    session.actor("stats/Counter").named(name);
    auto refused = errorOf([&]() { session.submit(); });
    EXPECT_NE(refused.find("an actor named 'shared-counter' lives already (task " + std::to_string(counter.id()) +
                           " of session " + std::to_string(ownerSession) + ")"),
              std::string::npos)
        << refused;
    // The owner closes its session and goes: the actor stays.
  }
  Client caller(cluster->serverAddress());
  auto session = caller.newSession("caller");
  auto counter = session.getActor(name);
  auto added = counter.call("add", {}, "5");
  added.output().keep();
  session.submit();
  EXPECT_EQ(added.output().fetch(), "16") << "the named actor lost its state";
  session.wait({added});
  auto stillOpen = [&]() {
    for (auto& s : caller.sessions()) {
      if (s.id == ownerSession && s.open) return true;
    }
    return false;
  };
  EXPECT_TRUE(stillOpen()) << "the owner's session closed under its named actor";
  // Objects of this session are not the actor's session's.
  auto mine = session.blob("7");
  EXPECT_NE(errorOf([&]() { counter.call("addInput", {mine}); }).find("is of another session than actor"),
            std::string::npos);
  // Killed from here, it ends, and the session it lingered in closes.
  counter.kill();
  bool closed = false;
  for (int i = 0; i < 1000 && !closed; i++) {
    closed = !stillOpen();
    if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(closed) << "the lingering session did not close after its named actor ended";
  EXPECT_NE(errorOf([&]() { session.getActor(name); }).find("no live actor is named 'shared-counter'"),
            std::string::npos);
}

// The value of the counter `name` on the server's /metrics.
uint64_t metric(const std::string& http, const std::string& name) {
  auto body = httpGet(http, "/metrics").body;
  auto at = body.find("\n" + name + " ");
  if (at == std::string::npos) throw std::runtime_error("no metric " + name);
  return std::stoull(body.substr(at + name.size() + 2));
}

// An actor placed and warm: its calls may go to its governor directly.
Actor placedCounter(Session& session, const std::string& config = "") {
  auto counter = session.actor("stats/Counter", {}, config);
  counter.call("add", {}, "0");
  session.submit();
  session.waitAll();
  return counter;
}

// A call made and waited for goes to the actor's governor and back, not
// through the server (docs/actors.md, "Calls that skip the server"); the
// server still records every one, once, from the governor's report or
// when the client names it (here: fetches and the task list).
TEST_F(ActorTest, CallsMadeAndWaitedForGoToTheActorsGovernorDirectlyAndAreRecordedOnce) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("direct calls");
  auto counter = placedCounter(session);
  auto before = metric(cluster->httpAddress(), "squall_actor_calls_direct_total");
  std::vector<Task> calls;
  for (int i = 1; i <= 200; i++) {
    auto call = counter.call("add", {}, "1");
    call.output().keep();
    session.submitAndWait({call});
    calls.push_back(call);
  }
  for (size_t i = 0; i < calls.size(); i += 37) EXPECT_EQ(calls[i].output().fetch(), std::to_string(i + 1));
  EXPECT_EQ(metric(cluster->httpAddress(), "squall_actor_calls_direct_total") - before, 200u);
  std::set<uint64_t> seen;
  size_t finished = 0;
  for (auto& info : session.tasks()) {
    EXPECT_TRUE(seen.insert(info.id).second) << "task " << info.id << " listed twice";
    finished += info.state == "finished" && info.type == "actor_call";
  }
  EXPECT_EQ(finished, 201u);
  // Their outputs are the session's objects like any task's.
  auto sum = session.concat({calls[0].output(), calls[199].output()});
  sum.output().keep();
  session.submit();
  EXPECT_EQ(sum.output().fetch(), "1200");
}

// With $SQUALL_DIRECT_CALLS=0 (clients that cannot reach governors), every
// call goes through the server.
TEST_F(ActorTest, WithDirectCallsTurnedOffEveryCallGoesThroughTheServer) {
  Client client(cluster->serverAddress());
  setenv("SQUALL_DIRECT_CALLS", "0", 1);
  auto session = client.newSession("no direct calls");
  unsetenv("SQUALL_DIRECT_CALLS");
  auto counter = placedCounter(session);
  auto before = metric(cluster->httpAddress(), "squall_actor_calls_direct_total");
  for (int i = 1; i <= 20; i++) {
    auto call = counter.call("add", {}, "1");
    session.submitAndWait({call});
  }
  auto read = counter.call("read");
  read.output().keep();
  session.submit();
  EXPECT_EQ(read.output().fetch(), "20");
  EXPECT_EQ(metric(cluster->httpAddress(), "squall_actor_calls_direct_total"), before);
}

// Calls sent directly, in batches through the server, and reading other
// tasks' outputs (through the server), mixed at random: the actor runs
// them in the order they were made, each once.
TEST_F(ActorTest, CallsGoingDirectlyAndThroughTheServerRunInTheOrderTheyWereMade) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("mixed ways");
  auto counter = placedCounter(session);
  auto before = metric(cluster->httpAddress(), "squall_actor_calls_direct_total");
  std::mt19937 random(21);
  std::string expected = "0\n";
  int amount = 0;
  size_t calls = 0;
  for (int step = 0; step < 400; step++) {
    auto kind = random() % 10;
    if (kind < 6) {
      // Alone: directly, unless calls through the server are not seen to
      // have ended.
      amount++;
      counter.call("add", {}, std::to_string(amount));
      expected += std::to_string(amount) + "\n";
      calls++;
    } else if (kind < 8) {
      // A batch: through the server.
      for (int i = 0; i < 12; i++) {
        amount++;
        counter.call("add", {}, std::to_string(amount));
        expected += std::to_string(amount) + "\n";
        calls++;
      }
    } else if (kind == 8) {
      // Reading another task's output: through the server, after a while.
      amount++;
      auto late = session.sleep(std::chrono::milliseconds(3), session.blob(std::to_string(amount)));
      counter.call("addInput", {late.output()});
      expected += std::to_string(amount) + "\n";
      calls++;
    } else {
      // What went through the server is seen to end: directly again.
      session.submit();
      session.waitAll();
      continue;
    }
    session.submit();
  }
  auto log = counter.call("log");
  log.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_TRUE(log.output().fetch() == expected) << "calls lost, repeated or out of order";
  auto direct = metric(cluster->httpAddress(), "squall_actor_calls_direct_total") - before;
  EXPECT_GT(direct, 0u) << "no call went directly";
  EXPECT_LT(direct, calls) << "every call went directly";
}

// A method that throws in a call sent directly fails it as one sent
// through the server would: the wait throws TaskFailed with its message,
// and the session fails (the server has recorded it).
TEST_F(ActorTest, ADirectCallThatThrowsFailsItsWaitAndItsSessionWithTheMessage) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("direct failure");
  auto counter = placedCounter(session);
  auto failing = counter.call("fail", {}, "on purpose");
  auto failure = taskFailureOf([&]() { session.submitAndWait({failing}); });
  EXPECT_TRUE(failure) << "the failed call was not reported";
  EXPECT_EQ(failure ? failure->task : 0, failing.id());
  std::string message = failure ? failure->what() : "";
  EXPECT_NE(message.find("asked to fail: on purpose"), std::string::npos) << message;
  auto state = session.state();
  EXPECT_FALSE(state.open);
  EXPECT_NE(state.failure.find("asked to fail: on purpose"), std::string::npos) << state.failure;
}

// Killing an actor with calls sent directly still queued behind a running
// one ends them as it ends the calls the server placed: cancelled, saying
// it was killed, failing no session; nothing waits for ever.
TEST_F(ActorTest, KillingAnActorCancelsTheDirectCallsQueuedOnIt) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("kill with direct calls");
  auto counter = placedCounter(session);
  auto spinning = counter.call("spin");
  session.submit();
  std::vector<Task> queued;
  for (int i = 0; i < 3; i++) {
    queued.push_back(counter.call("add", {}, "1"));
    session.submit();
  }
  counter.kill();
  session.wait(queued);
  session.waitAll();
  queued.push_back(spinning);
  for (auto& call : queued) {
    auto info = call.info();
    EXPECT_EQ(info.state, "cancelled") << "call " << call.id();
    EXPECT_NE(info.error.find("was killed"), std::string::npos) << "call " << call.id() << ": " << info.error;
  }
  EXPECT_TRUE(session.state().open) << "a killed actor's calls failed the session";
}

TEST(ActorGovernorLossTest, AnActorWhoseGovernorIsLostRestartsElsewhereOrFailsSayingWhy) {
  auto options = actorCluster(3, 1);
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("governors lost");
  auto restarting = session.actor("stats/Counter", {}, "10").maxRestarts(1);
  auto once = session.actor("stats/Counter", {}, "20");
  once.task().allowFailure();
  auto first = restarting.call("add", {}, "1");
  auto other = once.call("add", {}, "1");
  first.output().keep();
  other.output().keep();
  session.submit();
  EXPECT_EQ(first.output().fetch(), "11");
  EXPECT_EQ(other.output().fetch(), "21");
  auto indexOf = [](const std::string& governor) { return static_cast<size_t>(std::stoul(governor.substr(9))); };
  auto where = restarting.task().info().governor;
  ASSERT_EQ(where.rfind("governor-", 0), 0u) << where;
  ASSERT_NE(where, once.task().info().governor);
  // Its governor goes: the actor starts again (its constructor on the
  // same config) on the governor left with room.
  cluster.governor(indexOf(where)).signal(SIGKILL);
  ASSERT_TRUE(cluster.governor(indexOf(where)).waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  auto again = restarting.call("add", {}, "1");
  again.output().keep();
  session.submit();
  EXPECT_EQ(again.output().fetch(), "11") << "not constructed anew";
  auto now = restarting.task().info().governor;
  EXPECT_NE(now, where);
  // Without restarts it ends, failed, saying why.
  cluster.governor(indexOf(once.task().info().governor)).signal(SIGKILL);
  // (A wait on a task that failed throws; its end is read from its info.)
  TaskInfo info;
  for (int i = 0; i < 3000; i++) {
    info = once.task().info();
    if (info.state != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(info.state, "failed");
  EXPECT_TRUE(session.state().open) << "an actor allowed to fail failed its session";
  EXPECT_NE(info.error.find("was lost (max_restarts 0 used up)"), std::string::npos) << info.error;
}

// Calls sent directly to a governor that is lost before they are
// answered are handed to the server, which runs them on the restarted
// actor as it does the calls it placed there itself: every wait ends.
TEST(ActorGovernorLossTest, DirectCallsCutOffWithTheirGovernorRunOnTheRestartedActor) {
  auto options = actorCluster(2, 1);
  LocalCluster cluster(options);
  cluster.start();
  TempDir dir;
  Client client(cluster.serverAddress());
  auto session = client.newSession("direct calls cut off");
  auto counter = session.actor("stats/Counter", {}, "10").maxRestarts(1);
  counter.call("add", {}, "0");
  session.submit();
  session.waitAll();
  auto where = counter.task().info().governor;
  // One call holds the actor until a file appears; three queue behind it.
  auto mine = dir.path + "/mine";
  auto theirs = dir.path + "/theirs";
  auto held = counter.call("meet", {}, mine + " " + theirs);
  held.output().keep();
  session.submit();
  std::vector<Task> queued;
  for (int i = 0; i < 3; i++) {
    queued.push_back(counter.call("add", {}, "1"));
    queued.back().output().keep();
    session.submit();
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(mine) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(std::filesystem::exists(mine)) << "the held call never started";
  auto index = static_cast<size_t>(std::stoul(where.substr(9)));
  cluster.governor(index).signal(SIGKILL);
  ASSERT_TRUE(cluster.governor(index).waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  std::ofstream(theirs) << "here";
  session.wait(queued);
  EXPECT_EQ(held.output().fetch(), "met");
  // Constructed anew from "10", the calls ran on it in their order.
  EXPECT_EQ(queued[0].output().fetch(), "11");
  EXPECT_EQ(queued[2].output().fetch(), "13");
  EXPECT_NE(counter.task().info().governor, where);
}

TEST(ActorRecoveryTest, AServerRestartKeepsTheActorItsStateAndTheOrderOfItsCalls) {
  auto options = actorCluster(1, 2);
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("across a restart");
  auto counter = session.actor("stats/Counter");
  std::string expected;
  for (int i = 1; i <= 300; i++) {
    counter.call("add", {}, std::to_string(i));
    expected += std::to_string(i) + "\n";
  }
  auto pidBefore = counter.call("pid");
  pidBefore.output().keep();
  session.submit();
  cluster.restartServer();
  for (int i = 301; i <= 600; i++) {
    counter.call("add", {}, std::to_string(i));
    expected += std::to_string(i) + "\n";
  }
  auto log = counter.call("log");
  auto pidAfter = counter.call("pid");
  log.output().keep();
  pidAfter.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_TRUE(log.output().fetch() == expected) << "calls lost, repeated or out of order";
  EXPECT_EQ(pidBefore.output().fetch(), pidAfter.output().fetch());
  EXPECT_EQ(counter.task().info().state, "running");
}

// Calls sent directly need no server: they go on while it restarts, and
// once it is back every one is recorded, once (the governor reports what
// the old server had not logged; the client names the rest).
TEST(ActorRecoveryTest, DirectCallsGoOnAcrossAServerRestartAndEachIsRecordedOnce) {
  auto options = actorCluster(1, 2);
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("direct across a restart");
  auto counter = placedCounter(session);
  std::string expected = "0\n";
  auto call = [&](int i) {
    session.submitAndWait({counter.call("add", {}, std::to_string(i))});
    expected += std::to_string(i) + "\n";
  };
  for (int i = 1; i <= 150; i++) call(i);
  auto before = metric(cluster.httpAddress(), "squall_actor_calls_direct_total");
  EXPECT_GT(before, 0u);
  cluster.restartServer();
  for (int i = 151; i <= 300; i++) call(i);
  auto log = counter.call("log");
  log.output().keep();
  session.submitAndWait({log});
  EXPECT_TRUE(log.output().fetch() == expected) << "calls lost, repeated or out of order";
  std::set<uint64_t> seen;
  size_t finished = 0;
  for (auto& info : session.tasks({}, {}, 1000)) {
    EXPECT_TRUE(seen.insert(info.id).second) << "task " << info.id << " listed twice";
    finished += info.type == "actor_call" && info.state == "finished";
  }
  EXPECT_EQ(finished, 302u);
  EXPECT_EQ(counter.task().info().state, "running");
}

TEST(ActorRecoveryTest, ANamedActorWhoseOwnerWentSurvivesAServerRestartByName) {
  auto options = actorCluster(1, 2);
  LocalCluster cluster(options);
  cluster.start();
  {
    Client owner(cluster.serverAddress());
    auto session = owner.newSession("owner");
    auto counter = session.actor("stats/Counter", {}, "100").named("survivor");
    counter.call("add", {}, "1");
    session.submit();
    session.waitAll();
  }
  cluster.restartServer();
  Client caller(cluster.serverAddress(), "");
  auto session = caller.newSession("after the restart");
  auto counter = session.getActor("survivor");
  auto added = counter.call("add", {}, "2");
  added.output().keep();
  session.submit();
  EXPECT_EQ(added.output().fetch(), "103");
  // The owner's session lingered for its named actor across the restart;
  // with the actor gone, it closes (the server lists open sessions only:
  // polled, as no event tells another client).
  auto ownerOpen = [&]() {
    for (auto& state : caller.sessions()) {
      if (state.name == "owner" && state.open) return true;
    }
    return false;
  };
  EXPECT_TRUE(ownerOpen());
  counter.kill();
  for (int i = 0; i < 3000 && ownerOpen(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(ownerOpen()) << "the owner's session outlived its named actor";
}

}  // namespace
}  // namespace squall
