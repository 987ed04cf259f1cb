#include "scheduler.h"

#include "session-table-fixture.h"

#include <set>

namespace squall {
namespace {

using testing::TestGraph;
using testing::TestTask;

class SchedulerTest : public testing::SessionTableTest {
 protected:
  // The tasks that became READY join the scheduler's queue.
  void enqueue(Scheduler& scheduler) {
    scheduler.enqueue(table.effects().ready, table);
    table.effects().ready.clear();
  }
  TestTask timed(uint64_t n, std::vector<uint64_t> inputs, std::vector<uint64_t> outputs, uint64_t ms) {
    TestTask t{n, std::move(inputs), std::move(outputs)};
    t.expectedMs = ms;
    return t;
  }
};

TEST_F(SchedulerTest, PrefersInputBytesThenLoad) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 2, nullptr);
  auto& b = pool.add("b", "127.0.0.1:2", 2, nullptr);
  TestGraph g(1);
  g.output(1).output(2).output(3).task({10, {}, {1}}).task({11, {1}, {2}}).task({12, {}, {3}});
  auto& s = submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 0});
  enqueue(scheduler);
  scheduler.place(table, pool);
  EXPECT_EQ(scheduler.readyCount(), 0u);
  // Two independent tasks spread over both governors.
  EXPECT_NE(s.tasks.at(10).governor, s.tasks.at(12).governor);
  auto where10 = s.tasks.at(10).governor;
  pool.release(where10, {1, 10});
  report({1, 10}, true, where10, {1});
  enqueue(scheduler);
  scheduler.place(table, pool);
  // The consumer follows its input even though both have room.
  EXPECT_EQ(s.tasks.at(11).governor, where10);
  EXPECT_EQ(a.load + b.load, 2u);
}

TEST_F(SchedulerTest, LeavesTasksThatDoNotFitInOrder) {
  GovernorPool pool;
  pool.add("a", "127.0.0.1:1", 1, nullptr);
  TestGraph g(1);
  testing::TestTask big{10, {}, {1}};
  big.cpus = 4;
  g.output(1).output(2).output(3).task(big).task({11, {}, {2}}).task({12, {}, {3}});
  submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 0});
  enqueue(scheduler);
  scheduler.place(table, pool);
  // 11 runs; 12 waits for the cpu; 10 waits for a governor big enough.
  EXPECT_EQ(scheduler.queued(), (std::vector<Id>{{1, 10}, {1, 12}}));
}

TEST_F(SchedulerTest, StreamGroupsArePlacedWholeOntoFreeCpus) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 2, nullptr);
  auto& b = pool.add("b", "127.0.0.1:2", 2, nullptr);
  TestGraph g(1);
  g.object({1, "", false, false, wire::ObjectKind::STREAM}).output(2).output(3);
  // Each asks for a cpu of its own: the group needs 3.
  testing::TestTask seq{10, {}, {1}, {"seq"}}, cat{11, {1}, {2}, {"cat"}}, wc{12, {1}, {3}, {"wc"}};
  seq.cpus = cat.cpus = wc.cpus = 1;
  g.task(seq).task(cat).task(wc);
  auto& s = submit(g);
  // 1 cpu taken on each governor: the 3-task group must be spread.
  pool.hold(a, {9, 1}, 1);
  pool.hold(b, {9, 2}, 1);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 16});
  enqueue(scheduler);
  scheduler.place(table, pool);
  // Only 2 free cpus for 3 tasks: nothing of the group is placed.
  EXPECT_EQ(scheduler.readyCount(), 1u);
  for (uint64_t n : {10, 11, 12}) EXPECT_EQ(s.tasks.at(n).state, TaskNode::State::READY) << n;
  pool.release(a.id, {9, 1});
  scheduler.place(table, pool);
  EXPECT_EQ(scheduler.readyCount(), 0u);
  for (uint64_t n : {10, 11, 12}) EXPECT_EQ(s.tasks.at(n).state, TaskNode::State::ASSIGNED) << n;
  EXPECT_EQ(a.load, 2u);
  EXPECT_EQ(b.load, 2u);

  // Producer finishes: the unstored stream is finished but held nowhere.
  auto where = s.tasks.at(10).governor;
  pool.release(where, {1, 10});
  report({1, 10}, true, where, {1});
  EXPECT_EQ(s.objects.at(1).state, ObjectNode::State::FINISHED);
  EXPECT_TRUE(s.objects.at(1).locations.empty());
}

TEST_F(SchedulerTest, AWaitingStreamGroupDrainsQueuesInsteadOfStarving) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 2, nullptr);
  TestGraph g(1);
  g.object({1, "", false, false, wire::ObjectKind::STREAM}).output(2).output(3);
  // Each asks for its own cpu: the group needs 2.
  testing::TestTask producer{10, {}, {1}, {"seq"}}, reader{11, {1}, {2}, {"cat"}};
  producer.cpus = 1;
  reader.cpus = 1;
  g.task(producer).task(reader).task({12, {}, {3}});
  submit(g);
  pool.hold(a, {9, 1}, 1);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 16});
  enqueue(scheduler);
  scheduler.place(table, pool);
  // The group (2 cpus) waits for the busy cpu; the plain task 12 may take
  // the free cpu but is not queued beyond it.
  EXPECT_EQ(a.load, 2u);
  EXPECT_EQ(scheduler.queued(), (std::vector<Id>{{1, 10}}));
}


// Prefetching: a merge of three inputs made on two governors. When the
// first is made, its governor becomes the merge's target (it holds the
// most); each input made elsewhere after that is sent there, once.
TEST_F(SchedulerTest, AWaitingMergesFinishedInputsGoAheadToTheGovernorHoldingMost) {
  GovernorPool pool;
  pool.add("a", "127.0.0.1:1", 2, nullptr);
  pool.add("b", "127.0.0.1:2", 2, nullptr);
  TestGraph g(1);
  g.output(1).output(2).output(3).output(4);
  g.task({10, {}, {1}}).task({11, {}, {2}}).task({12, {}, {3}}).task({13, {1, 2, 3}, {4}});
  auto& s = submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 0, .prefetchMinBytes = 0});
  enqueue(scheduler);
  scheduler.place(table, pool);
  auto finish = [&](uint64_t n, uint64_t output) {
    auto where = s.tasks.at(n).governor;
    pool.release(where, {1, n});
    report({1, n}, true, where, {output});
    auto waiting = table.effects().inputFinished;
    table.effects().inputFinished.clear();
    return scheduler.prefetch(waiting, table, pool);
  };
  GovernorId first = s.tasks.at(10).governor;
  // Made where the target is: nothing to send.
  EXPECT_TRUE(finish(10, 1).empty());
  EXPECT_EQ(s.tasks.at(13).prefetchTo, first);
  // 11 and 12: one of them ran on the other governor.
  uint64_t elsewhere = s.tasks.at(11).governor != first ? 11 : 12;
  uint64_t same = elsewhere == 11 ? 12 : 11;
  ASSERT_NE(s.tasks.at(elsewhere).governor, first);
  auto orders = finish(elsewhere, elsewhere - 9);
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].to, first);
  ASSERT_EQ(orders[0].objects.size(), 1u);
  EXPECT_EQ(orders[0].objects[0]->id, (Id{1, elsewhere - 9}));
  EXPECT_EQ(s.objects.at(elsewhere - 9).prefetching, std::vector<GovernorId>{first});
  // Asked once only, even when the merge comes up again.
  EXPECT_TRUE(scheduler.prefetch({{1, 13}}, table, pool).empty());
  // The copy confirmed (the dispatcher's part), the last input made: the
  // merge goes where all its inputs are.
  s.objects.at(elsewhere - 9).locations.push_back(first);
  if (s.tasks.at(same).governor == first) {
    EXPECT_TRUE(finish(same, same - 9).empty());
  } else {
    finish(same, same - 9);
  }
  enqueue(scheduler);
  scheduler.place(table, pool);
  EXPECT_EQ(s.tasks.at(13).governor, first);
}

TEST_F(SchedulerTest, NothingGoesAheadForSmallInputsRandomPlacementOrWhenOff) {
  uint64_t next = 1;  // the sessions' ids, as the table gives them
  for (auto options : {SchedulerOptions{.queueDepth = 0},  // 5-byte inputs: under the default minimum
                       SchedulerOptions{.queueDepth = 0, .placement = Placement::RANDOM, .prefetchMinBytes = 0},
                       SchedulerOptions{.queueDepth = 0, .prefetch = false, .prefetchMinBytes = 0}}) {
    GovernorPool pool;
    pool.add("a", "127.0.0.1:1", 1, nullptr);
    pool.add("b", "127.0.0.1:2", 1, nullptr);
    TestGraph g(next++);
    g.output(1).output(2).output(3).output(4);
    g.task({10, {}, {1}}).task({11, {}, {2}}).task({12, {}, {3}}).task({13, {1, 2, 3}, {4}});
    auto& s = submit(g);
    Scheduler scheduler(options);
    enqueue(scheduler);
    scheduler.place(table, pool);
    for (uint64_t n : {10, 11}) {
      auto where = s.tasks.at(n).governor;
      pool.release(where, {s.id, n});
      report({s.id, n}, true, where, {n - 9});
    }
    auto waiting = table.effects().inputFinished;
    table.effects().inputFinished.clear();
    EXPECT_EQ(waiting.size(), 2u);
    EXPECT_TRUE(scheduler.prefetch(waiting, table, pool).empty());
    EXPECT_EQ(s.tasks.at(13).prefetchTo, 0u);
  }
}

// b-level: the longest expected path to the end of the graph goes first,
// though it became ready last.
TEST_F(SchedulerTest, TheLongestPathToTheEndIsPlacedFirst) {
  GovernorPool pool;
  pool.add("a", "127.0.0.1:1", 1, nullptr);
  TestGraph g(1);
  for (uint64_t o = 1; o <= 6; o++) g.output(o);
  // Three short independent tasks, then a chain head whose chain is long.
  g.task(timed(10, {}, {1}, 100)).task(timed(11, {}, {2}, 100)).task(timed(12, {}, {3}, 100));
  g.task(timed(20, {}, {4}, 100)).task(timed(21, {4}, {5}, 100)).task(timed(22, {5}, {6}, 100));
  auto& s = submit(g);
  EXPECT_EQ(s.tasks.at(20).bLevel, 300);
  EXPECT_EQ(s.tasks.at(21).bLevel, 200);
  EXPECT_EQ(s.tasks.at(10).bLevel, 100);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 0});
  enqueue(scheduler);
  EXPECT_EQ(scheduler.queued(), (std::vector<Id>{{1, 20}, {1, 10}, {1, 11}, {1, 12}}));
  scheduler.place(table, pool);
  EXPECT_EQ(s.tasks.at(20).state, TaskNode::State::ASSIGNED);
  EXPECT_EQ(scheduler.queued(), (std::vector<Id>{{1, 10}, {1, 11}, {1, 12}}));
}

// Durations outweigh hops where they are known; without any, hops count.
TEST_F(SchedulerTest, BLevelsCountDurationsWhereKnownAndHopsOtherwise) {
  TestGraph g(1);
  for (uint64_t o = 1; o <= 5; o++) g.output(o);
  // A long single task against a chain of three short ones.
  g.task(timed(10, {}, {1}, 5000)).task(timed(20, {}, {2}, 10)).task(timed(21, {2}, {3}, 10));
  g.task(timed(22, {3}, {4}, 10));
  // No hint: a hop (1 ms), so a hint only ever raises a task.
  g.output(6).task({30, {}, {5}}).task(timed(31, {5}, {6}, 10));
  auto& s = submit(g);
  EXPECT_EQ(s.tasks.at(10).bLevel, 5000);
  EXPECT_EQ(s.tasks.at(20).bLevel, 30);
  EXPECT_EQ(s.tasks.at(30).bLevel, 11);

  TestGraph hops(2);
  hops.output(1).output(2).output(3).task({10, {}, {1}}).task({11, {1}, {2}}).task({12, {}, {3}});
  auto& t = submit(hops);
  EXPECT_EQ(t.tasks.at(10).bLevel, 2);
  EXPECT_EQ(t.tasks.at(12).bLevel, 1);
}

// A later submit that reads an earlier task's output lengthens its path.
TEST_F(SchedulerTest, ALaterSubmitRaisesTheBLevelsOfWhatItReads) {
  TestGraph first(1);
  first.output(1).output(2).task(timed(10, {}, {1}, 100)).task(timed(11, {1}, {2}, 100));
  auto& s = submit(first);
  EXPECT_EQ(s.tasks.at(10).bLevel, 200);
  TestGraph more(1);
  more.output(3).output(4).task(timed(12, {2}, {3}, 100)).task(timed(13, {3}, {4}, 100));
  submit(more, &s);
  EXPECT_EQ(s.tasks.at(11).bLevel, 300);
  EXPECT_EQ(s.tasks.at(10).bLevel, 400);
}

// Greedy transfer: among governors that can start the task now, the one
// with its input; a busy governor holding the input is not waited for.
TEST_F(SchedulerTest, ATaskStartsWhereItCanNowRatherThanQueueBesideItsInput) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 1, nullptr);
  auto& b = pool.add("b", "127.0.0.1:2", 1, nullptr);
  auto& c = pool.add("c", "127.0.0.1:3", 1, nullptr);
  TestGraph g(1);
  g.output(1).output(2).output(3).task({10, {}, {1}}).task({11, {1}, {2}}).task({12, {1}, {3}});
  auto& s = submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 4});
  enqueue(scheduler);
  scheduler.place(table, pool);
  auto where = s.tasks.at(10).governor;
  pool.release(where, {1, 10});
  report({1, 10}, true, where, {1});
  // Its governor is busy again (another session's task) when the readers
  // become ready: one of them takes the other free governor, not a queue
  // slot behind the busy one.
  pool.hold(pool.all().at(where), {9, 1}, 1);
  enqueue(scheduler);
  scheduler.place(table, pool);
  auto w11 = s.tasks.at(11).governor, w12 = s.tasks.at(12).governor;
  EXPECT_NE(w11, where);
  EXPECT_NE(w12, where);
  EXPECT_NE(w11, w12);
  EXPECT_EQ(a.load + b.load + c.load, 3u);
}

// Queue depth: a governor whose queue ran dry while tasks waited here gets
// a deeper one, doubling up to the cap; with nothing waiting, it is not
// deepened, and once nothing waits every depth is the base again.
TEST_F(SchedulerTest, AGovernorThatRanDryWhileTasksWaitedGetsADeeperQueue) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 1, nullptr);
  auto& b = pool.add("b", "127.0.0.1:2", 1, nullptr);
  TestGraph g(1);
  for (uint64_t n = 0; n < 40; n++) g.output(n + 1).task({100 + n, {}, {n + 1}});
  submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 2});
  enqueue(scheduler);
  scheduler.place(table, pool);
  EXPECT_EQ(a.load, 3u);  // 1 running, 2 queued
  EXPECT_EQ(b.load, 3u);
  EXPECT_EQ(scheduler.readyCount(), 34u);

  scheduler.ranDry(a);
  EXPECT_EQ(a.deepQueue, 4u);
  scheduler.place(table, pool);
  EXPECT_EQ(a.load, 5u);  // 1 running, 4 queued
  EXPECT_EQ(b.load, 3u);  // b did not run dry: its depth is the base
  scheduler.ranDry(a);
  scheduler.ranDry(a);
  EXPECT_EQ(a.deepQueue, 16u);
  scheduler.place(table, pool);
  EXPECT_EQ(a.load, 17u);
  EXPECT_EQ(scheduler.readyCount(), 40u - 17u - 3u);
  for (int i = 0; i < 20; i++) scheduler.ranDry(a);
  EXPECT_EQ(a.deepQueue, Scheduler::MAX_QUEUE_DEPTH);

  // Everything placed: nothing waits, depths go back to the base, and a
  // governor running dry now has simply finished.
  scheduler.place(table, pool);
  EXPECT_EQ(scheduler.readyCount(), 0u);
  EXPECT_EQ(a.deepQueue, 0u);
  scheduler.ranDry(b);
  EXPECT_EQ(b.deepQueue, 0u);
}

TEST_F(SchedulerTest, NoQueueDepthStaysNone) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 1, nullptr);
  TestGraph g(1);
  for (uint64_t n = 0; n < 4; n++) g.output(n + 1).task({100 + n, {}, {n + 1}});
  submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 0});
  enqueue(scheduler);
  scheduler.place(table, pool);
  scheduler.ranDry(a);
  scheduler.place(table, pool);
  EXPECT_EQ(a.load, 1u);  // --queue-depth 0: one at a time, as asked
  EXPECT_EQ(a.deepQueue, 0u);
}

// An actor is placed only onto free cpus: queued behind a running actor it
// would wait for ever, even once another governor frees up.
TEST_F(SchedulerTest, AnActorIsNotQueuedBehindBusyCpus) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 1, nullptr);
  auto& b = pool.add("b", "127.0.0.1:2", 1, nullptr);
  TestGraph g(1);
  g.output(1).output(2).output(3).task({10, {}, {1}}).task({11, {}, {2}}).task({12, {}, {3}});
  auto& s = submit(g);
  s.tasks.at(10).isActor = true;
  s.tasks.at(12).isActor = true;
  Scheduler scheduler(SchedulerOptions{.queueDepth = 16});
  enqueue(scheduler);
  scheduler.place(table, pool);
  // The first actor and the task take both cpus; the second actor waits
  // here rather than in a queue behind either.
  EXPECT_NE(s.tasks.at(10).governor, s.tasks.at(11).governor);
  EXPECT_EQ(s.tasks.at(12).state, TaskNode::State::READY);
  EXPECT_EQ(scheduler.queued(), (std::vector<Id>{{1, 12}}));
  // The task ends: the actor takes its cpu.
  auto where = s.tasks.at(11).governor;
  pool.release(where, {1, 11});
  report({1, 11}, true, where, {2});
  scheduler.place(table, pool);
  EXPECT_EQ(s.tasks.at(12).governor, where);
  EXPECT_EQ(a.load + b.load, 2u);
}

TEST_F(SchedulerTest, ActorsOfNoCpusNeedOneFreeToBePlacedAndHoldNone) {
  // Ray's default: three such actors start on two cpus, none while every
  // cpu is busy.
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 2, nullptr);
  TestGraph g(1);
  for (uint64_t n = 10; n < 13; n++) {
    TestTask actor{n, {}, {n - 9}};
    actor.cpus = 0;
    g.output(n - 9).task(actor);
  }
  auto& s = submit(g);
  for (uint64_t n = 10; n < 13; n++) s.tasks.at(n).isActor = true;
  Scheduler scheduler(SchedulerOptions{.queueDepth = 16});
  enqueue(scheduler);
  scheduler.place(table, pool);
  EXPECT_EQ(scheduler.readyCount(), 0u);
  EXPECT_EQ(a.load, 0u);
  // Both cpus busy: a fourth waits for one.
  TestGraph more(1);
  TestTask busy{20, {}, {30}}, busier{21, {}, {31}}, actor{22, {}, {32}};
  busy.cpus = 1;
  busier.cpus = 1;
  actor.cpus = 0;
  more.output(30).output(31).output(32).task(busy).task(busier).task(actor);
  submit(more, &s);
  s.tasks.at(22).isActor = true;
  enqueue(scheduler);
  scheduler.place(table, pool);
  EXPECT_EQ(a.load, 2u);
  EXPECT_EQ(scheduler.queued(), (std::vector<Id>{{1, 22}}));
}

// Work stealing: tasks queued on a loaded governor go to one that idles.
TEST_F(SchedulerTest, AnIdleGovernorTakesTheLastQueuedTasksOfALoadedOne) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 2, nullptr);
  TestGraph g(1);
  for (uint64_t n = 0; n < 6; n++) g.output(n + 1).task({10 + n, {}, {n + 1}});
  auto& s = submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 16});
  enqueue(scheduler);
  scheduler.place(table, pool);
  EXPECT_EQ(a.load, 6u);  // 2 running, 4 queued there
  a.toAssign.clear();     // sent (the Dispatcher's flush)
  auto& b = pool.add("b", "127.0.0.1:2", 2, nullptr);
  scheduler.place(table, pool);
  auto stolen = scheduler.steal(table, pool);
  ASSERT_EQ(stolen.size(), 1u);
  EXPECT_EQ(stolen[0].from, a.id);
  EXPECT_EQ(stolen[0].to, b.id);
  EXPECT_EQ(stolen[0].tasks.size(), 2u);  // b's free cpus
  for (auto& id : stolen[0].tasks) EXPECT_TRUE(s.tasks.at(id.n).retracting);
  // Asked again before the answer: nothing more is taken for b.
  EXPECT_TRUE(scheduler.steal(table, pool).empty());

  // a gave one back (the other had started): it goes to b.
  Id back = stolen[0].tasks[0];
  s.tasks.at(back.n).retracting = false;
  s.tasks.at(stolen[0].tasks[1].n).retracting = false;
  pool.release(a.id, back);
  table.retracted(s.tasks.at(back.n));
  scheduler.retractionSettled(stolen[0]);
  EXPECT_EQ(s.tasks.at(back.n).state, TaskNode::State::READY);
  enqueue(scheduler);
  scheduler.place(table, pool);
  EXPECT_EQ(s.tasks.at(back.n).governor, b.id);
  EXPECT_EQ(a.load, 5u);
  EXPECT_EQ(b.load, 1u);
  // b still has a free cpu and a still queues: the next one goes too.
  auto again = scheduler.steal(table, pool);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].tasks.size(), 1u);
}

TEST_F(SchedulerTest, NothingIsStolenWhenNoGovernorQueuesOrStealingIsOff) {
  GovernorPool pool;
  auto& a = pool.add("a", "127.0.0.1:1", 2, nullptr);
  pool.add("b", "127.0.0.1:2", 2, nullptr);
  TestGraph g(1);
  for (uint64_t n = 0; n < 3; n++) g.output(n + 1).task({10 + n, {}, {n + 1}});
  submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 16});
  enqueue(scheduler);
  scheduler.place(table, pool);
  a.toAssign.clear();  // sent (the Dispatcher's flush)
  EXPECT_TRUE(scheduler.steal(table, pool).empty());  // none queues beyond its cpus
  // Another session's task makes a queue on a: stealing is possible, but
  // not when it is off.
  pool.hold(a, {9, 1}, 2);
  Scheduler off(SchedulerOptions{.queueDepth = 16, .steal = false});
  EXPECT_TRUE(off.steal(table, pool).empty());
  EXPECT_FALSE(scheduler.steal(table, pool).empty());
}

// Random placement is seeded: the same seed places the same way.
TEST_F(SchedulerTest, RandomPlacementIsDeterministicForASeed) {
  auto placeAll = [&](uint64_t seed) {
    GovernorPool pool;
    for (int i = 0; i < 4; i++) pool.add("g" + std::to_string(i), "127.0.0.1:1", 4, nullptr);
    auto& s = table.open("random", this);
    TestGraph g(s.id);
    for (uint64_t n = 0; n < 40; n++) g.output(n + 1).task({100 + n, {}, {n + 1}});
    submit(g, &s);
    Scheduler scheduler(SchedulerOptions{.queueDepth = 16, .placement = Placement::RANDOM, .seed = seed});
    enqueue(scheduler);
    scheduler.place(table, pool);
    std::vector<GovernorId> where;
    for (uint64_t n = 0; n < 40; n++) where.push_back(s.tasks.at(100 + n).governor);
    table.close(s.id);
    return where;
  };
  auto first = placeAll(7);
  EXPECT_EQ(placeAll(7), first);
  EXPECT_NE(placeAll(8), first);
  EXPECT_EQ(std::set<GovernorId>(first.begin(), first.end()).size(), 4u);
}

}  // namespace
}  // namespace squall
