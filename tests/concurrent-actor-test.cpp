// Actors whose calls run concurrently (docs/actors.md, "Concurrent calls"):
// the test executor's Gate type (tests/executors/actor-executor.cpp)
// allows as many calls under way as its config says, each detached to a
// thread of its own (tasklib's Call::detach). A real server and governor.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <cstdlib>
#include <string>

namespace squall {
namespace {

class ConcurrentActorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.governors = 1;
    options.cpus = 2;
    const char* executor = getenv("SQUALL_ACTOR_EXECUTOR");
    options.governorArgs = {"--executor", std::string("stats=") + (executor != nullptr ? executor : "")};
    if (const char* level = getenv("SQUALL_TEST_LOG_LEVEL")) options.logLevel = level;
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void TearDown() override { EXPECT_TRUE(cluster->governor(0).running()); }
  static inline LocalCluster* cluster = nullptr;
};

// A call that waits for a later one ends once the later one has run: one
// after another, the first would wait for ever (here: its 30 s, then say
// "never opened").
TEST_F(ConcurrentActorTest, ACallWaitingForALaterOneEndsOnceTheLaterOneRan) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("gate");
  auto gate = session.actor("stats/Gate", {}, "4");
  auto first = gate.call("gate");
  auto second = gate.call("gate");
  auto opening = gate.call("open");
  for (auto* t : {&first, &second, &opening}) t->output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(opening.output().fetch(), "opened");
  EXPECT_EQ(first.output().fetch(), "passed");
  EXPECT_EQ(second.output().fetch(), "passed");
  EXPECT_EQ(gate.task().info().state, "running");
}

// At most the actor's number of calls are under way at once, and that many
// are: holds of two meet in pairs, never three together.
TEST_F(ConcurrentActorTest, AsManyCallsAsTheActorAllowsAreUnderWayAndNoMore) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("holds");
  auto gate = session.actor("stats/Gate", {}, "2");
  std::vector<Task> holds;
  for (int i = 0; i < 6; i++) {
    holds.push_back(gate.call("hold", {}, "2"));
    holds.back().output().keep();
  }
  auto peak = gate.call("peak");
  peak.output().keep();
  session.submit();
  session.waitAll();
  for (auto& hold : holds) EXPECT_EQ(hold.output().fetch(), "2");
  EXPECT_EQ(peak.output().fetch(), "2");
}

TEST_F(ConcurrentActorTest, ACallFailedFromItsOwnThreadFailsAloneWithItsError) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("fail later");
  auto gate = session.actor("stats/Gate", {}, "3");
  auto failing = gate.call("failLater", {}, "on purpose");
  failing.allowFailure();
  auto after = gate.call("open");
  after.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(failing.info().state, "failed");
  EXPECT_NE(failing.info().error.find("failed later: on purpose"), std::string::npos) << failing.info().error;
  EXPECT_EQ(after.output().fetch(), "opened");
}

// Every call under way when the process dies may have been running: each
// fails (no call retries here), and the restarted actor takes the next.
TEST_F(ConcurrentActorTest, ACrashFailsEveryCallUnderWayAndTheRestartedActorGoesOn) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("crash under way");
  auto gate = session.actor("stats/Gate", {}, "4").maxRestarts(1);
  auto first = gate.call("gate");
  auto second = gate.call("gate");
  auto crash = gate.call("crash");
  for (auto* t : {&first, &second, &crash}) t->allowFailure();
  session.submit();
  for (auto* t : {&first, &second, &crash}) {
    try {
      t->wait();
    } catch (const Error&) {
    }
    EXPECT_EQ(t->info().state, "failed");
    EXPECT_NE(t->info().error.find("died while running the call"), std::string::npos) << t->info().error;
  }
  auto after = gate.call("peak");
  after.output().keep();
  session.submit();
  after.wait();
  EXPECT_EQ(after.output().fetch(), "0");
}

// detach() belongs to actors that allowed concurrent calls.
TEST_F(ConcurrentActorTest, AMethodOfAnActorOfOneCallAtATimeCannotDetach) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("no detach");
  auto counter = session.actor("stats/Counter");
  auto detach = counter.call("detach");
  detach.allowFailure();
  auto after = counter.call("add", {}, "5");
  after.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(detach.info().state, "failed");
  EXPECT_NE(detach.info().error.find("allowConcurrentCalls"), std::string::npos) << detach.info().error;
  EXPECT_EQ(after.output().fetch(), "5");
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// A method that submits tasks of its own, called directly (made and waited
// for: the call skips the server, docs/actors.md): the governor has the
// server record the call first, so its children are taken.
TEST_F(ConcurrentActorTest, AMethodCalledDirectlySubmitsTasksOfItsOwn) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("direct spawn");
  auto counter = session.actor("stats/Counter");
  auto first = counter.call("add", {}, "0");
  session.submit();
  first.wait();
  for (int i = 1; i <= 3; i++) {
    auto call = counter.call("spawnDouble", {}, std::to_string(i));
    call.output().keep();
    session.submitAndWait({call});
    EXPECT_EQ(call.output().fetch(), std::to_string(2 * i));
    EXPECT_EQ(session.tasks({call.id()}).at(0).state, "finished");
  }
}

}  // namespace
}  // namespace squall
