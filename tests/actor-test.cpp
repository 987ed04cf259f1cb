// Actors end to end (docs/actors.md): a real server and governors keeping
// the actor executor (tests/executors/actor-executor.cpp, "stats"): calls
// in order, actors in parallel, resources held for an actor's life, crashes
// with and without restarts, kill, bad types and methods at submit.
#include "actor-suite.h"
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

}  // namespace
}  // namespace squall
