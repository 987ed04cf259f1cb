#include "dispatcher.h"

#include "test-graph.h"

#include <gtest/gtest.h>
#include <kj/async.h>
#include <kj/timer.h>
#include <spdlog/sinks/null_sink.h>

namespace squall {
namespace {

using testing::TestGraph;
using testing::TestTask;

// A dispatcher over a session table and governors the tests add.
struct Harness {
  kj::EventLoop loop;
  kj::WaitScope waitScope{loop};
  kj::TimerImpl timer{kj::origin<kj::TimePoint>()};
  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  SessionTable sessions{*logger};
  GovernorPool governors;
  Scheduler scheduler{SchedulerOptions{}};
  Dispatcher dispatcher{sessions, governors, scheduler, timer, *logger};
};

// A governor whose assign calls all fail (as a message past capnp's limit
// does), counting them.
class RefusingGovernor final : public wire::GovernorControl::Server {
 public:
  explicit RefusingGovernor(int& calls) : calls(calls) {}
  kj::Promise<void> assign(AssignContext) override {
    calls++;
    return KJ_EXCEPTION(FAILED, "message too large");
  }

 private:
  int& calls;
};

// Issue 19 point 3: an assign call that failed was logged at debug level
// and forgotten; its task stayed "running" for good, holding its cpus. Now
// the task fails, naming the governor and the error, its cpus are free,
// and the constant it carried is not counted as being on that governor.
TEST(DispatcherTest, AnAssignCallThatFailsFailsItsTasksNamingTheGovernor) {
  Harness h;
  auto& sessions = h.sessions;
  auto& governors = h.governors;
  auto& waitScope = h.waitScope;
  int calls = 0;
  auto& governor = governors.add("g1", "127.0.0.1:1", 2, kj::heap<RefusingGovernor>(calls));

  auto& session = sessions.open("s", &governors);
  TestGraph graph(session.id);
  graph.constant(1, "abc").output(2, true).task({3, {1}, {2}});
  PendingSubmit pending(session.id, Limits{});
  pending.add(graph.build());
  sessions.submitted(session, pending.commit(session));
  h.dispatcher.kick();
  auto finished = sessions.wait(session, {}, false);
  finished.wait(waitScope);

  EXPECT_EQ(calls, 1);
  EXPECT_EQ(session.state, Session::State::FAILED);
  EXPECT_NE(session.failureMessage.find("could not send the task to governor g1"), std::string::npos)
      << session.failureMessage;
  EXPECT_NE(session.failureMessage.find("message too large"), std::string::npos) << session.failureMessage;
  EXPECT_EQ(governor.load, 0u);
  EXPECT_TRUE(governor.assigned.empty());
  EXPECT_TRUE(session.objects.at(1).locations.empty());
}

// A governor whose assign calls are answered when the test says.
class SlowGovernor final : public wire::GovernorControl::Server {
 public:
  kj::Promise<void> assign(AssignContext) override {
    auto paf = kj::newPromiseAndFulfiller<void>();
    answers.push_back(kj::mv(paf.fulfiller));
    return kj::mv(paf.promise);
  }
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> answers;
};

// An actor's governor holds it once it answered the assignment, not when
// the server sent it: a client told where the actor runs earlier sent a
// call that reached the governor ahead of the actor, was refused there and
// placed through the server behind the calls sent right after it (the
// first of five calls ran last, once in 900 stress rounds).
TEST(DispatcherTest, AnActorIsHeldByItsGovernorOnlyOnceItAnsweredTheAssignment) {
  Harness h;
  auto& sessions = h.sessions;
  auto& governors = h.governors;
  auto& waitScope = h.waitScope;
  auto server = kj::heap<SlowGovernor>();
  auto& slow = *server;
  auto& governor = governors.add("g1", "127.0.0.1:1", 2, kj::mv(server));
  governor.functions["py/Counter"] = {};

  auto& session = sessions.open("s", &governors);
  TestGraph graph(session.id);
  TestTask actor{1, {}, {}};
  actor.actorType = "py/Counter";
  graph.task(actor);
  PendingSubmit pending(session.id, Limits{});
  pending.add(graph.build());
  sessions.submitted(session, pending.commit(session));
  h.dispatcher.kick();
  for (int turns = 0; turns < 1000 && slow.answers.empty(); turns++) waitScope.poll();
  ASSERT_EQ(slow.answers.size(), 1u);
  EXPECT_EQ(session.tasks.at(1).state, TaskNode::State::ASSIGNED);
  EXPECT_EQ(session.tasks.at(1).governor, governor.id);
  waitScope.poll();
  EXPECT_EQ(session.actors.at(1).heldBy, 0u);
  slow.answers[0]->fulfill();
  waitScope.poll();
  EXPECT_EQ(session.actors.at(1).heldBy, governor.id);
}

}  // namespace
}  // namespace squall
