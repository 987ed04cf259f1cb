#include "status-test-fixture.h"

namespace squall {
namespace {

using testing::TestGraph;
using StatusViewTest = testing::StatusFixture;

TEST(TaskGroupTest, GroupsByPrefixBracketOrTrailingNumber) {
  EXPECT_EQ(taskGroup("align/chr1"), "align");
  EXPECT_EQ(taskGroup("count[3]"), "count");
  EXPECT_EQ(taskGroup("part-12"), "part");
  EXPECT_EQ(taskGroup("sort"), "sort");
  EXPECT_EQ(taskGroup(""), "(unnamed)");
  EXPECT_EQ(taskGroup("123"), "(numbered)");
}

TEST_F(StatusViewTest, OverviewListsGovernorsSessionsAndCounters) {
  auto& g = governor("gov-a", 4);
  TestGraph graph(1);
  graph.constant(1, "x").output(2).output(3).task({10, {1}, {2}, {"true"}}).task({11, {2}, {3}, {"cat"}});
  auto& s = submit(graph, "pipeline");
  run(s, 10, g);
  auto json = view.overview();
  ASSERT_EQ(json["governors"].size(), 1u);
  EXPECT_EQ(json["governors"][0]["name"], "gov-a");
  EXPECT_EQ(json["governors"][0]["cpus"], 4);
  EXPECT_EQ(json["governors"][0]["cpusUsed"], 1);
  EXPECT_EQ(json["governors"][0]["tasks"], 1);
  ASSERT_EQ(json["sessions"].size(), 1u);
  EXPECT_EQ(json["sessions"][0]["name"], "pipeline");
  EXPECT_EQ(json["sessions"][0]["counts"]["running"], 1);
  EXPECT_EQ(json["sessions"][0]["counts"]["waiting"], 1);
  EXPECT_EQ(json["tasks"]["running"], 1);
  report(s, 10, true, g);
  view.tick(1000);
  view.tick(2000);
  json = view.overview();
  EXPECT_EQ(json["throughput"]["finished"], 1);
  EXPECT_EQ(json["bytes"]["produced"], 100);
  EXPECT_EQ(json["governors"][0]["objects"], 1);  // output 2, waiting for its reader
  EXPECT_EQ(json["governors"][0]["bytesHeld"], 100);
}

TEST_F(StatusViewTest, TasksPageFailuresFirstThenRunningFilteredAndPaged) {
  auto& g = governor("gov", 8);
  TestGraph graph(1);
  for (uint64_t i = 0; i < 10; i++) {
    graph.output(100 + i).task({10 + i, {}, {100 + i}, {"prog"}, {}, 0, 1, 0, true});
  }
  auto& s = submit(graph);
  for (uint64_t i = 0; i < 10; i++) run(s, 10 + i, g);
  report(s, 17, false, g, "boom\n");
  report(s, 11, true, g);
  auto page = view.tasks(s.id, {{}, "", 0, 3});
  EXPECT_EQ(page["total"], 10);
  ASSERT_EQ(page["tasks"].size(), 3u);
  EXPECT_EQ(page["tasks"][0]["id"], 17);
  EXPECT_EQ(page["tasks"][0]["state"], "failed");
  EXPECT_EQ(page["tasks"][1]["id"], 10);
  EXPECT_EQ(page["tasks"][1]["state"], "running");
  auto next = view.tasks(s.id, {{}, "", 9, 3});
  ASSERT_EQ(next["tasks"].size(), 1u);
  EXPECT_EQ(next["tasks"][0]["id"], 11);  // the finished one comes last
  auto finished = view.tasks(s.id, {{TaskNode::State::FINISHED}, "", 0, 50});
  EXPECT_EQ(finished["total"], 1);
  EXPECT_TRUE(view.tasks(99, {}).is_null());
}

TEST_F(StatusViewTest, TaskDetailsHaveSpecInputsOutputsAndTails) {
  auto& g = governor("gov", 2);
  TestGraph graph(1);
  graph.constant(1, "hello").output(2, true).task({10, {1}, {2}, {"sh", "-c", "exit 3"}, {"in.txt"}});
  auto& s = submit(graph);
  run(s, 10, g);
  report(s, 10, false, g, "cannot open input.csv\n");
  auto task = view.task(s.id, 10);
  EXPECT_EQ(task["type"], "execute");
  EXPECT_EQ(task["state"], "failed");
  EXPECT_EQ(task["exitStatus"], 3);
  EXPECT_EQ(task["governor"], "gov");
  EXPECT_EQ(task["stderrTail"], "cannot open input.csv\n");
  EXPECT_EQ(task["config"]["args"][2], "exit 3");
  ASSERT_EQ(task["inputs"].size(), 1u);
  EXPECT_EQ(task["inputs"][0]["path"], "in.txt");
  EXPECT_EQ(task["inputs"][0]["constant"], true);
  ASSERT_EQ(task["outputs"].size(), 1u);
  EXPECT_EQ(task["outputs"][0]["keep"], true);
  EXPECT_TRUE(view.task(s.id, 999).is_null());
}

// A task that submitted tasks (docs/nested.md) lists them, and each names
// it as its parent.
TEST_F(StatusViewTest, TaskDetailsNameTheParentAndTheChildren) {
  auto& g = governor("gov", 2);
  TestGraph first(1);
  testing::TestTask parentTask{10, {}, {2}, {"parent-program"}};
  parentTask.name = "parent";
  first.output(2).task(parentTask);
  auto& s = submit(first);
  run(s, 10, g);
  TestGraph children(s.id);
  for (uint64_t n : {20, 21, 22}) {
    children.output(n + 100);
    testing::TestTask child{n, {}, {n + 100}, {"child-program"}};
    child.parent = 10;
    child.name = "child " + std::to_string(n);
    children.task(child);
  }
  submitMore(s, children);
  auto parent = view.task(s.id, 10);
  EXPECT_TRUE(parent["parent"].is_null());
  EXPECT_EQ(parent["childrenCount"], 3);
  ASSERT_EQ(parent["children"].size(), 3u);
  EXPECT_EQ(parent["children"][1]["id"], 21);
  EXPECT_EQ(parent["children"][1]["name"], "child 21");
  auto child = view.task(s.id, 22);
  EXPECT_EQ(child["parent"]["id"], 10);
  EXPECT_EQ(child["parent"]["name"], "parent");
  EXPECT_EQ(child["parent"]["state"], "running");
  EXPECT_EQ(child["childrenCount"], 0);
}

TEST_F(StatusViewTest, SmallGraphIsTasksBigGraphIsGroups) {
  TestGraph small(1);
  small.output(2).output(3).task({10, {}, {2}, {"a"}}).task({11, {2}, {3}, {"b"}});
  auto& s1 = submit(small);
  auto graph = view.graph(s1.id);
  EXPECT_EQ(graph["mode"], "tasks");
  EXPECT_EQ(graph["nodes"].size(), 2u);
  ASSERT_EQ(graph["edges"].size(), 1u);
  EXPECT_EQ(graph["edges"][0][0], 10);
  EXPECT_EQ(graph["edges"][0][1], 11);

  // Map-reduce wider than SMALL_GRAPH: 500 maps into one reduce.
  TestGraph big(2);
  std::vector<uint64_t> parts;
  for (uint64_t i = 0; i < 500; i++) {
    big.output(1000 + i).task({2000 + i, {}, {1000 + i}, {"map"}});
    parts.push_back(1000 + i);
  }
  big.output(5).task({6, parts, {5}, {"reduce"}});
  auto& s2 = submit(big);
  // Names: TestGraph leaves them empty, so all fall in one group; the
  // edge map still holds no self edges.
  graph = view.graph(s2.id);
  EXPECT_EQ(graph["mode"], "groups");
  EXPECT_EQ(graph["tasks"], 501);
  ASSERT_EQ(graph["nodes"].size(), 1u);
  EXPECT_EQ(graph["nodes"][0]["tasks"], 501);
  EXPECT_EQ(graph["nodes"][0]["counts"]["ready"], 500);
  auto update = view.sessionUpdate(s2.id);
  ASSERT_TRUE(update.contains("groups"));
  EXPECT_EQ(update["groups"][0][1], 500);  // ready
}

TEST_F(StatusViewTest, GroupCountsFollowStateChanges) {
  auto& g = governor("gov", 1000);
  TestGraph big(1);
  for (uint64_t i = 0; i < 450; i++) big.output(1000 + i).task({2000 + i, {}, {1000 + i}, {"x"}});
  auto& s = submit(big);
  EXPECT_EQ(view.sessionUpdate(s.id)["groups"][0][1], 450);
  run(s, 2000, g);
  report(s, 2000, true, g);
  auto groups = view.sessionUpdate(s.id)["groups"][0];
  EXPECT_EQ(groups[1], 449);  // ready
  EXPECT_EQ(groups[3], 1);    // finished
}

TEST_F(StatusViewTest, TimelineBarsPerGovernor) {
  auto& a = governor("a", 2);
  auto& b = governor("b", 2);
  TestGraph graph(1);
  graph.output(2).output(3).output(4).task({10, {}, {2}, {"x"}}).task({11, {}, {3}, {"x"}, {}, 0, 1, 0, true}).task({12, {}, {4}, {"x"}});
  auto& s = submit(graph);
  run(s, 10, a);
  run(s, 11, b);
  run(s, 12, b);
  report(s, 10, true, a, "", 1000000, 2000);
  report(s, 11, false, b, "", 1001000, 3000);
  auto timeline = view.timeline(s.id);
  EXPECT_EQ(timeline["mode"], "tasks");
  EXPECT_EQ(timeline["timed"], 2);
  EXPECT_EQ(timeline["startUs"], 1000000);
  EXPECT_EQ(timeline["endUs"], 1004000);
  ASSERT_EQ(timeline["lanes"].size(), 2u);
  EXPECT_EQ(timeline["lanes"][0]["governor"], "a");
  EXPECT_EQ(timeline["lanes"][1]["governor"], "b");
  EXPECT_EQ(timeline["lanes"][1]["running"], 1);
  EXPECT_EQ(timeline["lanes"][1]["bars"][0][1], 1000);
}

TEST_F(StatusViewTest, AClosedSessionHasOneStateAndKeepsItsGraphTimelineAndFailures) {
  auto& g = governor("gov", 2);
  TestGraph graph(1);
  graph.output(2).output(3).task({10, {}, {2}, {"false"}}).task({11, {2}, {3}, {"cat"}});
  auto& s = submit(graph, "doomed");
  run(s, 10, g);
  report(s, 10, false, g, "it broke\n", 1000000, 4000);
  auto id = s.id;
  auto open = view.session(id);
  EXPECT_EQ(open["state"], "failed");
  EXPECT_EQ(open["closed"], false);
  auto openGraph = view.graph(id);
  auto openTimeline = view.timeline(id);
  table.close(id);

  auto summary = view.session(id);
  ASSERT_FALSE(summary.is_null());
  EXPECT_EQ(summary["closed"], true);
  EXPECT_EQ(summary["state"], "failed");  // one state: it failed (and is closed)
  EXPECT_EQ(summary["failure"]["stderrTail"], "it broke\n");
  EXPECT_EQ(summary["counts"]["failed"], 1);
  EXPECT_EQ(summary["counts"]["cancelled"], 1);
  EXPECT_EQ(summary["tasksKept"], 2);
  EXPECT_EQ(view.sessionsJson()[0]["state"], "failed");
  EXPECT_EQ(view.sessionsJson()[0]["closed"], true);
  // The graph and the timeline as they were drawn when it closed.
  auto kept = view.graph(id);
  EXPECT_EQ(kept["mode"], "tasks");
  EXPECT_EQ(kept["edges"], openGraph["edges"]);
  ASSERT_EQ(kept["nodes"].size(), 2u);
  EXPECT_EQ(kept["nodes"][1]["state"], "cancelled");
  auto timeline = view.timeline(id);
  EXPECT_EQ(timeline, openTimeline);
  EXPECT_EQ(timeline["lanes"][0]["bars"][0][2], 4000);
  auto tasks = view.tasks(id, {});
  ASSERT_EQ(tasks["tasks"].size(), 2u);
  EXPECT_EQ(tasks["tasks"][0]["id"], 10);
  EXPECT_EQ(tasks["tasks"][0]["state"], "failed");
  EXPECT_EQ(tasks["tasks"][0]["governor"], "gov");
  EXPECT_FALSE(tasks["tasks"][0].contains("stderrTail"));
  EXPECT_EQ(view.tasks(id, {{TaskNode::State::CANCELLED}, "", 0, 50})["total"], 1);
  auto task = view.task(id, 10);
  EXPECT_EQ(task["stderrTail"], "it broke\n");
  EXPECT_EQ(task["closed"], true);
  EXPECT_EQ(task["durationUs"], 4000);
  EXPECT_TRUE(view.task(id, 99).is_null());
  EXPECT_EQ(view.sessionUpdate(id)["session"]["state"], "failed");
}

TEST_F(StatusViewTest, AClosedSessionThatDidNotFailSaysClosed) {
  auto& g = governor("gov", 2);
  TestGraph graph(1);
  graph.output(2).task({10, {}, {2}, {"true"}});
  auto& s = submit(graph, "fine");
  EXPECT_EQ(view.session(s.id)["state"], "open");
  run(s, 10, g);
  report(s, 10, true, g);
  auto id = s.id;
  table.close(id);
  auto summary = view.session(id);
  EXPECT_EQ(summary["state"], "closed");
  EXPECT_EQ(summary["closed"], true);
  EXPECT_FALSE(summary.contains("failure"));
  EXPECT_EQ(view.sessionsJson()[0]["state"], "closed");
  EXPECT_EQ(view.graph(id)["nodes"][0]["state"], "finished");
}

TEST_F(StatusViewTest, MetricsInPrometheusText) {
  auto& g = governor("gov \"one\"", 2);
  TestGraph graph(1);
  graph.output(2).task({10, {}, {2}, {"x"}});
  auto& s = submit(graph);
  run(s, 10, g);
  table.stats().recordPass(300);
  table.stats().recordPass(20000);
  auto text = view.metrics(3);
  EXPECT_NE(text.find("# TYPE squall_tasks gauge\n"), std::string::npos);
  EXPECT_NE(text.find("squall_tasks{state=\"running\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("squall_governors 1\n"), std::string::npos);
  EXPECT_NE(text.find("squall_governor_cpus{governor=\"gov \\\"one\\\"\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("squall_bytes_moved_total{kind=\"fetched\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("squall_scheduling_pass_seconds_bucket{le=\"0.0005\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("squall_scheduling_pass_seconds_bucket{le=\"0.05\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("squall_scheduling_pass_seconds_bucket{le=\"+Inf\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("squall_scheduling_pass_seconds_count 2\n"), std::string::npos);
  EXPECT_NE(text.find("squall_status_event_clients 3\n"), std::string::npos);
  // A governor's store appears once a heartbeat said what it holds.
  EXPECT_EQ(text.find("squall_governor_store_memory_bytes{"), std::string::npos);
  EXPECT_TRUE(view.governorsJson()[0]["store"].is_null());
  g.store = GovernorStore{true, 5, 3 << 20, 8 << 20, 2, 7 << 20, 4};
  text = view.metrics(3);
  EXPECT_NE(text.find("squall_governor_store_objects{governor=\"gov \\\"one\\\"\"} 5\n"), std::string::npos);
  EXPECT_NE(text.find("squall_governor_store_memory_bytes{governor=\"gov \\\"one\\\"\"} 3145728\n"),
            std::string::npos);
  EXPECT_NE(text.find("squall_governor_store_memory_capacity_bytes{governor=\"gov \\\"one\\\"\"} 8388608\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE squall_governor_store_spilled_bytes_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("squall_governor_store_spilled_bytes_total{governor=\"gov \\\"one\\\"\"} 7340032\n"),
            std::string::npos);
  EXPECT_NE(text.find("squall_governor_store_spilled_objects_total{governor=\"gov \\\"one\\\"\"} 4\n"),
            std::string::npos);
  auto store = view.governorsJson()[0]["store"];
  EXPECT_EQ(store["memoryObjects"], 2);
  EXPECT_EQ(store["spilledBytes"], 7 << 20);
  // Every line is a comment or "name{labels} value".
  size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    auto line = text.substr(start, end - start);
    EXPECT_TRUE(line.rfind("# ", 0) == 0 || line.find(' ') != std::string::npos) << line;
    start = end + 1;
  }
}

TEST_F(StatusViewTest, InvalidUtf8InTailsStillMakesJson) {
  auto& g = governor("gov", 2);
  TestGraph graph(1);
  graph.output(2).task({10, {}, {2}, {"x"}});
  auto& s = submit(graph);
  run(s, 10, g);
  report(s, 10, false, g, std::string("bad \xff\xfe bytes"));
  auto text = jsonText(view.task(s.id, 10));
  EXPECT_NE(text.find("bad "), std::string::npos);
}

}  // namespace
}  // namespace squall
