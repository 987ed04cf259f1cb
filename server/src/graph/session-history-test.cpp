#include "session-history.h"

#include "session-table.h"
#include "test-graph.h"

#include <filesystem>
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;
using testing::TestGraph;
using S = TaskNode::State;

class SessionHistoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("squall-history-" + std::to_string(getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    path = (dir / "sessions.db").string();
  }
  void TearDown() override { fs::remove_all(dir); }

  // Closing a session of `table` keeps it in `history` with these views.
  void keepIn(SessionHistory& history, PageViews views = {"{\"mode\":\"tasks\"}", "{\"timed\":0}"}) {
    table.onClose = [&history, views](const Session& session) { history.keep(session, 1234, views); };
  }

  // A session of `count` independent tasks named "step/<i>", ids 1000 + i.
  Session& open(const char* name, size_t count, bool allowFailure = true) {
    auto& session = table.open(name, this);
    TestGraph graph(session.id);
    for (uint64_t i = 0; i < count; i++) {
      graph.output(5000 + i).task(
          {1000 + i, {}, {5000 + i}, {"prog"}, {}, 0, 1, 0, allowFailure, "step/" + std::to_string(i)});
    }
    PendingSubmit pending(session.id, Limits{});
    pending.add(graph.build());
    table.submitted(session, pending.commit(session));
    return session;
  }

  // Task `n` ran on governor 1 ("gov-a") for `durationUs`, and finished or
  // failed saying so on stderr.
  void ran(Session& session, uint64_t n, bool ok, uint64_t durationUs = 1000) {
    table.assigned(session.tasks.at(n), 1);
    capnp::MallocMessageBuilder message;
    auto result = message.initRoot<wire::TaskResult>();
    Id{session.id, n}.to(result.initId());
    result.setOk(ok);
    result.setError(ok ? "" : "program exited with status 3");
    result.setExitStatus(ok ? 0 : 3);
    result.setStderrTail("stderr of " + std::to_string(n) + "\n");
    result.setStdoutTail("stdout of " + std::to_string(n) + "\n");
    result.setStartTimeUs(1000000);
    result.setDurationUs(durationUs);
    if (ok) Id{session.id, 4000 + n}.to(result.initOutputs(1)[0].initId());
    table.taskResult(result.asReader(), 1, "gov-a");
  }

  static std::string text(capnp::Text::Reader t) { return t.cStr(); }

  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  SessionTable table{*logger};
  fs::path dir;
  std::string path;
};

TEST_F(SessionHistoryTest, KeepsAClosedSessionsCountsFailureTasksAndViews) {
  SessionHistory history(HistoryLimits{}, *logger);
  keepIn(history, {"{\"mode\":\"tasks\",\"nodes\":[]}", "{\"mode\":\"tasks\",\"timed\":2}"});
  auto& s = open("pipeline", 3, false);
  auto id = s.id;
  ran(s, 1000, true, 5000);
  ran(s, 1001, false);  // fails the session: 1002 is cancelled
  table.close(id);
  EXPECT_TRUE(table.find(id) == nullptr);

  KJ_IF_MAYBE(kept, history.find(id)) {
    EXPECT_EQ(text(kept->getName()), "pipeline");
    EXPECT_TRUE(kept->getFailed());
    EXPECT_EQ(kept->getClosedAtMs(), 1234u);
    EXPECT_EQ(kept->getCounts()[int(S::FINISHED)], 1u);
    EXPECT_EQ(kept->getCounts()[int(S::FAILED)], 1u);
    EXPECT_EQ(kept->getCounts()[int(S::CANCELLED)], 1u);
    EXPECT_EQ(kept->getFailure().getTask(), 1001u);
    EXPECT_EQ(text(kept->getFailure().getTaskName()), "step/1");
    EXPECT_EQ(text(kept->getFailure().getStderrTail()), "stderr of 1001\n");
    auto tasks = kept->getTasks();
    ASSERT_EQ(tasks.size(), 3u);
    // Failures first, then by id.
    EXPECT_EQ(tasks[0].getOutcome().getTask(), 1001u);
    EXPECT_EQ(text(tasks[0].getOutcome().getStderrTail()), "stderr of 1001\n");
    EXPECT_EQ(text(tasks[0].getOutcome().getError()), "program exited with status 3");
    EXPECT_EQ(tasks[1].getOutcome().getTask(), 1000u);
    EXPECT_EQ(tasks[1].getOutcome().getDurationUs(), 5000u);
    EXPECT_EQ(text(tasks[1].getOutcome().getGovernor()), "gov-a");
    EXPECT_EQ(text(tasks[1].getName()), "step/0");
    EXPECT_EQ(text(tasks[1].getType()), "execute");
    EXPECT_EQ(tasks[2].getOutcome().getState(), int(S::CANCELLED));
    EXPECT_EQ(text(kept->getGraph()), "{\"mode\":\"tasks\",\"nodes\":[]}");
    EXPECT_EQ(text(kept->getTimeline()), "{\"mode\":\"tasks\",\"timed\":2}");
  } else {
    FAIL() << "session " << id << " is not kept";
  }
  EXPECT_EQ(history.findByName("pipeline"), id);
  EXPECT_EQ(history.findByName("other"), 0u);
  EXPECT_EQ(history.lastId(), id);
}

TEST_F(SessionHistoryTest, UnfinishedTasksOfASessionClosedMidwayAreKeptCancelled) {
  SessionHistory history(HistoryLimits{}, *logger);
  keepIn(history);
  auto& s = open("interrupted", 3);
  auto id = s.id;
  table.assigned(s.tasks.at(1000), 1);
  table.close(id);
  ASSERT_EQ(table.effects().cancel.size(), 1u);  // the running one, on its governor
  KJ_IF_MAYBE(kept, history.find(id)) {
    EXPECT_FALSE(kept->getFailed());
    EXPECT_EQ(kept->getCounts()[int(S::CANCELLED)], 3u);
    EXPECT_EQ(kept->getCounts()[int(S::ASSIGNED)], 0u);
    EXPECT_EQ(kept->getCounts()[int(S::READY)], 0u);
  } else {
    FAIL() << "not kept";
  }
}

TEST_F(SessionHistoryTest, ABigSessionKeepsItsFailuresAndLongestTasksWithinTheBound) {
  SessionHistory history(HistoryLimits{}, *logger);
  keepIn(history);
  auto& s = open("big", 1500);
  auto id = s.id;
  // 150 failures (allowed), then tasks lasting longer the higher their id.
  for (uint64_t i = 0; i < 1500; i++) ran(s, 1000 + i, i >= 150, 10 + i);
  table.close(id);
  KJ_IF_MAYBE(kept, history.find(id)) {
    uint64_t total = 0;
    for (auto c : kept->getCounts()) total += c;
    EXPECT_EQ(total, 1500u);
    auto tasks = kept->getTasks();
    ASSERT_EQ(tasks.size(), SessionHistory::KEPT_TASKS);
    for (uint i = 0; i < 150; i++) {
      ASSERT_EQ(tasks[i].getOutcome().getTask(), 1000 + i);
      ASSERT_EQ(tasks[i].getOutcome().getState(), int(S::FAILED));
    }
    // Tails for the first KEPT_TAILS failures only.
    EXPECT_EQ(text(tasks[SessionHistory::KEPT_TAILS - 1].getOutcome().getStderrTail()), "stderr of 1099\n");
    EXPECT_EQ(text(tasks[SessionHistory::KEPT_TAILS].getOutcome().getStderrTail()), "");
    // The 850 longest of the finished ones, by id: 1650 ... 2499.
    EXPECT_EQ(tasks[150].getOutcome().getTask(), 1650u);
    EXPECT_EQ(tasks[tasks.size() - 1].getOutcome().getTask(), 2499u);
    EXPECT_EQ(text(tasks[150].getOutcome().getStdoutTail()), "");
  } else {
    FAIL() << "not kept";
  }
}

TEST_F(SessionHistoryTest, KeepsTheLastClosedWithinTheSessionLimit) {
  SessionHistory history(HistoryLimits{2, 32}, *logger);
  keepIn(history);
  uint64_t a = open("a", 1).id, b = open("b", 1).id, c = open("c", 1).id;
  // Closed out of id order: the limit keeps the last closed.
  table.close(b);
  table.close(a);
  table.close(c);
  EXPECT_EQ(history.size(), 2u);
  EXPECT_TRUE(history.find(b) == nullptr);
  auto newest = history.newest(10);
  ASSERT_EQ(newest.size(), 2u);
  EXPECT_EQ(newest[0].getId(), c);
  EXPECT_EQ(newest[1].getId(), a);
  EXPECT_EQ(history.newest(1).size(), 1u);
  EXPECT_EQ(history.findByName("b"), 0u);
}

TEST_F(SessionHistoryTest, KeepsWithinTheSizeLimitAndNeverARecordBiggerThanIt) {
  SessionHistory history(HistoryLimits{100, 1}, *logger);
  std::string quarter(400 << 10, 'g');
  keepIn(history, {quarter, "{}"});
  uint64_t a = open("a", 1).id, b = open("b", 1).id, c = open("c", 1).id;
  table.close(a);
  table.close(b);
  EXPECT_EQ(history.size(), 2u);
  table.close(c);  // 1.2 MiB with a: a goes
  EXPECT_TRUE(history.find(a) == nullptr);
  EXPECT_EQ(history.size(), 2u);
  EXPECT_LE(history.bytes(), 1u << 20);

  // Two views of almost 1 MiB: over the whole limit, not kept; the others
  // stay.
  std::string big(1000000, 'x');
  keepIn(history, {big, big});
  auto d = open("d", 1).id;
  table.close(d);
  EXPECT_TRUE(history.find(d) == nullptr);
  EXPECT_TRUE(history.find(b) != nullptr);
  EXPECT_TRUE(history.find(c) != nullptr);
}

TEST_F(SessionHistoryTest, AViewOverItsBoundIsReplacedBySayingSo) {
  SessionHistory history(HistoryLimits{}, *logger);
  keepIn(history, {std::string(SessionHistory::KEPT_VIEW_BYTES + 1, 'x'), "{\"timed\":0}"});
  auto id = open("wide", 1).id;
  table.close(id);
  KJ_IF_MAYBE(kept, history.find(id)) {
    EXPECT_EQ(text(kept->getGraph()), "{\"mode\":\"omitted\",\"bytes\":1048577}");
    EXPECT_EQ(text(kept->getTimeline()), "{\"timed\":0}");
  } else {
    FAIL() << "not kept";
  }
}

TEST_F(SessionHistoryTest, ComesBackFromTheLogAfterARestartAndPruningTheSessionLeavesIt) {
  uint64_t id = 0;
  {
    SessionLog log(path, *logger);
    SessionHistory history(HistoryLimits{}, *logger);
    history.open(log);
    table.useLog(&log);
    keepIn(history);
    auto& s = open("persisted", 2, false);
    id = s.id;
    ran(s, 1000, true, 7000);
    ran(s, 1001, false);
    table.close(id);  // deletes the session's rows at once; the record goes with the commit
    EXPECT_GT(log.queued(), 0u);
    log.flush();
    table.useLog(nullptr);
  }
  SessionLog log(path, *logger);
  EXPECT_TRUE(log.load().empty());  // the session itself was pruned
  SessionHistory history(HistoryLimits{}, *logger);
  history.open(log);
  KJ_IF_MAYBE(kept, history.find(id)) {
    EXPECT_EQ(text(kept->getName()), "persisted");
    EXPECT_TRUE(kept->getFailed());
    ASSERT_EQ(kept->getTasks().size(), 2u);
    EXPECT_EQ(text(kept->getTasks()[0].getOutcome().getStderrTail()), "stderr of 1001\n");
    EXPECT_EQ(kept->getTasks()[1].getOutcome().getDurationUs(), 7000u);
    EXPECT_EQ(text(kept->getGraph()), "{\"mode\":\"tasks\"}");
  } else {
    FAIL() << "session " << id << " did not come back";
  }
  // A new server's sessions get ids after the kept ones.
  SessionTable next(*logger);
  next.reserveIds(history.lastId());
  EXPECT_EQ(next.open("after", this).id, id + 1);
}

TEST_F(SessionHistoryTest, ForgottenRecordsArePrunedFromTheLogAndLowerLimitsApplyAtStart) {
  std::vector<uint64_t> ids;
  {
    SessionLog log(path, *logger);
    SessionHistory history(HistoryLimits{2, 32}, *logger);
    history.open(log);
    keepIn(history);
    for (auto name : {"a", "b", "c"}) {
      ids.push_back(open(name, 1).id);
      table.close(ids.back());
      log.flush();
    }
    // d is kept and forgotten before a commit.
    for (auto name : {"d", "e", "f"}) {
      ids.push_back(open(name, 1).id);
      table.close(ids.back());
    }
    log.flush();
  }
  {
    SessionLog log(path, *logger);
    auto kept = log.loadKept();
    ASSERT_EQ(kept.size(), 2u);
    EXPECT_EQ(kept[0].id, ids[4]);
    EXPECT_EQ(kept[1].id, ids[5]);
    SessionHistory history(HistoryLimits{1, 32}, *logger);
    history.open(log);
    EXPECT_EQ(history.size(), 1u);
    EXPECT_TRUE(history.find(ids[5]) != nullptr);
    log.flush();
  }
  SessionLog log(path, *logger);
  auto kept = log.loadKept();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].id, ids[5]);
}

TEST_F(SessionHistoryTest, AnUnreadableRecordIsDroppedAtStartAndTheOthersKept) {
  uint64_t good = 0;
  {
    SessionLog log(path, *logger);
    SessionHistory history(HistoryLimits{}, *logger);
    history.open(log);
    keepIn(history);
    good = open("good", 1).id;
    table.close(good);
    const char garbage[] = "not a capnp message at all";
    log.sessionKept(99, kj::heapArray<const kj::byte>(reinterpret_cast<const kj::byte*>(garbage),
                                                      sizeof(garbage)));
    log.flush();
  }
  {
    SessionLog log(path, *logger);
    SessionHistory history(HistoryLimits{}, *logger);
    history.open(log);
    EXPECT_TRUE(history.find(99) == nullptr);
    EXPECT_TRUE(history.find(good) != nullptr);
    log.flush();
  }
  SessionLog log(path, *logger);
  auto kept = log.loadKept();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].id, good);
}

TEST_F(SessionHistoryTest, NoneAreKeptWithALimitOfZeroSessions) {
  SessionHistory history(HistoryLimits{0, 32}, *logger);
  keepIn(history);
  auto id = open("gone", 1).id;
  table.close(id);
  EXPECT_EQ(history.size(), 0u);
  EXPECT_TRUE(history.find(id) == nullptr);
}

}  // namespace
}  // namespace squall
