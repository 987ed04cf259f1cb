// Actors end to end, continued (actor-test.cpp): calls that skip the
// server (docs/actors.md, "Calls that skip the server"), an actor whose
// governor is lost, and actors across a server restart.
#include "actor-suite.h"
#include "http-get.h"

#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace squall {
namespace {

// The direct-call tests' own cluster, as ActorTest's.
class ActorDirectTest : public ActorTest {};

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
// when the client names it (here: the task list; the fetches are answered
// from the calls' answers, which carried the small outputs).
TEST_F(ActorDirectTest, CallsMadeAndWaitedForGoToTheActorsGovernorDirectlyAndAreRecordedOnce) {
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
  // The task list records those the governor's reports have not yet (as
  // running there, until their reports come: a wait at the server).
  EXPECT_EQ(session.tasks().size(), 202u);
  session.waitAll();
  std::set<uint64_t> seen;
  size_t finished = 0;
  for (auto& info : session.tasks()) {
    EXPECT_TRUE(seen.insert(info.id).second) << "task " << info.id << " listed twice";
    finished += info.state == "finished" && info.type == "actor_call";
  }
  EXPECT_EQ(finished, 201u);
  EXPECT_EQ(metric(cluster->httpAddress(), "squall_actor_calls_direct_total") - before, 200u);
  // Their outputs are the session's objects like any task's.
  auto sum = session.concat({calls[0].output(), calls[199].output()});
  sum.output().keep();
  session.submit();
  EXPECT_EQ(sum.output().fetch(), "1200");
}

// With $SQUALL_DIRECT_CALLS=0 (clients that cannot reach governors), every
// call goes through the server.
TEST_F(ActorDirectTest, WithDirectCallsTurnedOffEveryCallGoesThroughTheServer) {
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
TEST_F(ActorDirectTest, CallsGoingDirectlyAndThroughTheServerRunInTheOrderTheyWereMade) {
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
TEST_F(ActorDirectTest, ADirectCallThatThrowsFailsItsWaitAndItsSessionWithTheMessage) {
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
TEST_F(ActorDirectTest, KillingAnActorCancelsTheDirectCallsQueuedOnIt) {
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
  // (Answered from the call's answer: the governor may not be back with
  // the server yet.)
  EXPECT_TRUE(log.output().fetch() == expected) << "calls lost, repeated or out of order";
  // A task reading that output runs once the governor is back with the
  // restarted server, which then has every call.
  auto copy = session.concat({log.output()});
  copy.output().keep();
  session.submitAndWait({copy});
  EXPECT_TRUE(copy.output().fetch() == expected);
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
