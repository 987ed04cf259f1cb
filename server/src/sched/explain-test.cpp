#include "explain.h"

#include "session-table-fixture.h"

namespace squall {
namespace {

using testing::SessionTableTest;
using testing::TestGraph;

using ExplainTest = SessionTableTest;

bool has(const Explanation& why, const std::string& line) {
  return std::find(why.details.begin(), why.details.end(), line) != why.details.end();
}

TEST_F(ExplainTest, AReadyTaskNamesWhatKeepsEachGovernorFromTakingIt) {
  GovernorPool pool;
  TestGraph g(1);
  for (uint64_t n = 0; n < 4; n++) g.output(n + 1).task({10 + n, {}, {n + 1}});
  auto& s = submit(g);
  Scheduler scheduler(SchedulerOptions{.queueDepth = 1});
  scheduler.enqueue(table.effects().ready, table);
  table.effects().ready.clear();
  auto why = explainTask(s, s.tasks.at(13), scheduler, pool, false);
  EXPECT_EQ(why.summary, "no governor is connected");
  EXPECT_EQ(explainTask(s, s.tasks.at(13), scheduler, pool, true).summary,
            "placement is held after the server restarted, until the governors it knew return");

  pool.add("a", "127.0.0.1:1", 2, nullptr);
  why = explainTask(s, s.tasks.at(13), scheduler, pool, false);
  EXPECT_EQ(why.summary, "a governor has room: it is placed in the next scheduling pass");
  EXPECT_TRUE(has(why, "a: could take it now"));
  EXPECT_TRUE(has(why, "3 tasks are ahead of it in the queue (its b-level is 1: the longest expected path to "
                       "the end of its graph in ms, 1 a task without a hint)"));

  scheduler.place(table, pool);  // 2 cpus + a queue of 1: one stays
  ASSERT_EQ(scheduler.queued(), (std::vector<Id>{{1, 13}}));
  why = explainTask(s, s.tasks.at(13), scheduler, pool, false);
  EXPECT_EQ(why.summary, "every governor that could run it is full; 0 tasks are ahead of it in the queue");
  EXPECT_TRUE(has(why, "a: is full: 3 cpus' worth of tasks assigned for 2 cpus and a queue of 1"));
  why = explainTask(s, s.tasks.at(12), scheduler, pool, false);
  EXPECT_EQ(why.summary, "assigned to a");
  EXPECT_TRUE(has(why, "a holds 3 cpus' worth of tasks for 2 cpus: the task runs, or waits in its queue"));
}

}  // namespace
}  // namespace squall
