#include "submit.h"
#include "json-nesting.h"

#include "test-graph.h"

#include <gtest/gtest.h>
#include <squall/proto/errors.h>

namespace squall {
namespace {

using testing::TestGraph;

// Submits `graph` to `session`; returns the error text, or "" on success.
std::string trySubmit(Session& session, TestGraph& graph, size_t* ready = nullptr,
                      ClusterCapacity capacity = {}) {
  PendingSubmit pending(session.id, Limits{});
  try {
    pending.add(graph.build());
    auto r = pending.commit(session, capacity);
    if (ready) *ready = r.size();
    return "";
  } catch (const kj::Exception& e) {
    return userMessage(e).cStr();
  }
}

Session newSession() {
  Session s;
  s.id = 7;
  return s;
}

TEST(SubmitTest, HelloWorldGraphIsAppliedWithTheConcatReady) {
  auto session = newSession();
  TestGraph g(7);
  g.constant(1, "hello ").constant(2, "world").output(3, true).task({4, {1, 2}, {3}});
  size_t ready = 0;
  EXPECT_EQ(trySubmit(session, g, &ready), "");
  EXPECT_EQ(ready, 1u);
  EXPECT_EQ(session.tasks.size(), 1u);
  EXPECT_EQ(session.objects.at(1).size, 6u);
  EXPECT_EQ(session.objects.at(3).producer, &session.tasks.at(4));
  EXPECT_EQ(session.objects.at(1).unfinishedConsumers, 1u);
}

TEST(SubmitTest, ChainHasOnlyItsFirstTaskReady) {
  auto session = newSession();
  TestGraph g(7);
  g.constant(1, "x").output(2).output(3).task({10, {1}, {2}}).task({11, {2}, {3}});
  size_t ready = 0;
  EXPECT_EQ(trySubmit(session, g, &ready), "");
  EXPECT_EQ(ready, 1u);
  EXPECT_EQ(session.tasks.at(11).unfinishedInputs, 1u);
}

TEST(SubmitTest, ATaskMayAskForNoCpus) {
  // Ray's num_cpus=0: it holds no cpu while it runs.
  auto session = newSession();
  TestGraph g(7);
  testing::TestTask t{3, {}, {2}};
  t.cpus = 0;
  g.output(2).task(t);
  size_t ready = 0;
  EXPECT_EQ(trySubmit(session, g, &ready), "");
  EXPECT_EQ(ready, 1u);
  EXPECT_EQ(session.tasks.at(3).cpus, 0u);
}

struct BadGraphCase {
  const char* name;
  std::function<void(TestGraph&)> build;
  const char* expected;
};

class BadGraphTest : public ::testing::TestWithParam<BadGraphCase> {};

TEST_P(BadGraphTest, IsRejectedWithAClearErrorAndNothingApplied) {
  auto session = newSession();
  TestGraph g(7);
  GetParam().build(g);
  auto error = trySubmit(session, g);
  EXPECT_NE(error.find(GetParam().expected), std::string::npos) << error;
  EXPECT_TRUE(session.tasks.empty());
  EXPECT_TRUE(session.objects.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadGraphTest,
    ::testing::Values(
        BadGraphCase{"UnknownInput", [](TestGraph& g) { g.output(2).task({3, {99}, {2}}); },
                     "reads unknown object 99"},
        BadGraphCase{"DuplicateId",
                     [](TestGraph& g) { g.constant(1, "a").constant(1, "b"); },
                     "duplicate id 1"},
        BadGraphCase{"TaskAndObjectShareId",
                     [](TestGraph& g) { g.constant(1, "a").output(2).task({1, {}, {2}}); },
                     "duplicate id 1"},
        BadGraphCase{"Cycle",
                     [](TestGraph& g) {
                       g.output(1).output(2).task({3, {2}, {1}}).task({4, {1}, {2}});
                     },
                     "cycle"},
        BadGraphCase{"SelfLoop", [](TestGraph& g) { g.output(1).task({3, {1}, {1}}); }, "cycle"},
        BadGraphCase{"TwoProducers",
                     [](TestGraph& g) { g.output(1).task({2, {}, {1}}).task({3, {}, {1}}); },
                     "two producers"},
        BadGraphCase{"OtherSessionInput",
                     [](TestGraph& g) {
                       testing::TestTask t{3, {1}, {2}};
                       t.inputSession = 8;
                       g.output(2).task(t);
                     },
                     "from another session"},
        BadGraphCase{"OtherSessionObject",
                     [](TestGraph& g) { g.object({1, "x", true, false, wire::ObjectKind::BLOB, 8}); },
                     "not this session"},
        BadGraphCase{"NoProducer", [](TestGraph& g) { g.output(1); }, "no producer"},
        BadGraphCase{"WritesConstant",
                     [](TestGraph& g) { g.constant(1, "x").task({2, {}, {1}}); },
                     "is a constant"},
        BadGraphCase{"UndeclaredOutput", [](TestGraph& g) { g.task({2, {}, {5}}); },
                     "not declared"},
        BadGraphCase{"ZeroId", [](TestGraph& g) { g.constant(0, "x"); }, "reserved"},
        BadGraphCase{"ConcatWithTwoOutputs",
                     [](TestGraph& g) { g.output(1).output(2).task({3, {}, {1, 2}}); },
                     "exactly one output"},
        BadGraphCase{"EscapingInputPath",
                     [](TestGraph& g) {
                       g.constant(1, "x").output(2).task({3, {1}, {2}, {"cat"}, {"../etc/passwd"}});
                     },
                     "escape the sandbox"},
        BadGraphCase{"AbsoluteInputPath",
                     [](TestGraph& g) {
                       g.constant(1, "x").output(2).task({3, {1}, {2}, {"cat"}, {"/etc/passwd"}});
                     },
                     "absolute"},
        BadGraphCase{"ConstantStream",
                     [](TestGraph& g) { g.object({1, "x", true, false, wire::ObjectKind::STREAM}); },
                     "is a constant and a stream"},
        BadGraphCase{"StreamFromABuiltIn",
                     [](TestGraph& g) {
                       g.constant(1, "x").object({2, "", false, false, wire::ObjectKind::STREAM});
                       g.task({3, {1}, {2}});
                     },
                     "output 2 is a stream but must be a blob"},
        BadGraphCase{"StreamReadTwiceByOneTask",
                     [](TestGraph& g) {
                       g.object({1, "", false, false, wire::ObjectKind::STREAM}).output(2);
                       g.task({3, {}, {1}, {"yes"}}).task({4, {1, 1}, {2}, {"cat"}, {"a", "b"}});
                     },
                     "reads stream 1 twice"},
        BadGraphCase{"RetriedStreamProducer",
                     [](TestGraph& g) {
                       g.object({1, "", false, false, wire::ObjectKind::STREAM}).output(2);
                       testing::TestTask producer{3, {}, {1}, {"yes"}};
                       producer.retries = 2;
                       g.task(producer).task({4, {1}, {2}, {"head"}});
                     },
                     "cannot be retried"},
        BadGraphCase{"ConcatOfADir",
                     [](TestGraph& g) {
                       g.object({1, "tar", true, false, wire::ObjectKind::DIR}).output(2).task({3, {1}, {2}});
                     },
                     "input 1 is a dir but must be a blob"},
        BadGraphCase{"OutputAtAReadOnlyInputsPath",
                     [](TestGraph& g) {
                       g.constant(1, "x").output(2).task(testing::executeTask(3, {1}, {2}, {"f"}, {"./f"}));
                     },
                     "output 2 at 'f' would change input 1 in place, but that input is not writable"},
        BadGraphCase{"InPlaceOutputOfAnotherKind",
                     [](TestGraph& g) {
                       g.object({1, "tar", true, false, wire::ObjectKind::DIR}).output(2);
                       g.task(testing::executeTask(3, {1}, {2}, {"d"}, {"d"}, {true}));
                     },
                     "changes input 1 in place, so it must be a dir like the input, not a blob"},
        BadGraphCase{"OutputInsideABlobInput",
                     [](TestGraph& g) {
                       g.constant(1, "x").output(2).task(testing::executeTask(3, {1}, {2}, {"f"}, {"f/g"}, {true}));
                     },
                     "output 2 at 'f/g' is inside input 1, which is a blob, not a dir"},
        BadGraphCase{"OutputInsideAReadOnlyDirInput",
                     [](TestGraph& g) {
                       g.object({1, "tar", true, false, wire::ObjectKind::DIR}).output(2);
                       g.task(testing::executeTask(3, {1}, {2}, {"d"}, {"d/new"}));
                     },
                     "output 2 at 'd/new' is inside input 1, which is not writable"},
        BadGraphCase{"TwoOutputsAtOnePath",
                     [](TestGraph& g) { g.output(1).output(2).task(testing::executeTask(3, {}, {1, 2}, {}, {"o", "./o/"})); },
                     "two outputs at path './o/'"},
        BadGraphCase{"TwoInputsAtOnePath",
                     [](TestGraph& g) {
                       g.constant(1, "x").constant(2, "y").output(3);
                       g.task(testing::executeTask(4, {1, 2}, {3}, {"a", "a/."}, {}));
                     },
                     "two inputs at path 'a/.'"},
        BadGraphCase{"WritableStdinOnlyInput",
                     [](TestGraph& g) {
                       auto t = testing::executeTask(3, {1}, {2}, {""}, {}, {true});
                       t.stdinInput = 0;
                       g.constant(1, "x").output(2).task(t);
                     },
                     "input 1 is writable but has no path in the sandbox (it is only fed on stdin)"},
        BadGraphCase{"WritableLiveStream",
                     [](TestGraph& g) {
                       g.object({1, "", false, false, wire::ObjectKind::STREAM}).output(2);
                       g.task({3, {}, {1}, {"yes"}}).task(testing::executeTask(4, {1}, {2}, {"s"}, {}, {true}));
                     },
                     "reads stream 1 live (as it is written), so that input cannot be writable"},
        BadGraphCase{"ReservedInputPath",
                     [](TestGraph& g) {
                       g.constant(1, "x").output(2).task({3, {1}, {2}, {"cat"}, {".squall-stdout"}});
                     },
                     "input path '.squall-stdout' is reserved: names starting with '.squall-' belong to "
                     "the governor"},
        BadGraphCase{"ReservedOutputPath",
                     [](TestGraph& g) { g.output(1).task(testing::executeTask(3, {}, {1}, {}, {"./.squall-stderr"})); },
                     "output path '.squall-stderr' is reserved"},
        BadGraphCase{"ConcatIntoADir",
                     [](TestGraph& g) {
                       g.object({1, "", false, false, wire::ObjectKind::DIR}).task({3, {}, {1}});
                     },
                     "output 1 is a dir but must be a blob"}),
    [](const ::testing::TestParamInfo<BadGraphCase>& info) { return info.param.name; });

TEST(SubmitTest, LaterSubmitsReuseKeptObjectsButNotRemovedOnes) {
  auto session = newSession();
  TestGraph first(7);
  first.constant(1, "a", true).constant(2, "b");
  ASSERT_EQ(trySubmit(session, first), "");
  session.objects.at(2).state = ObjectNode::State::REMOVED;
  TestGraph second(7);
  second.output(3).task({4, {1}, {3}});
  EXPECT_EQ(trySubmit(session, second), "");
  TestGraph third(7);
  third.output(5).task({6, {2}, {5}});
  EXPECT_NE(trySubmit(session, third).find("already removed"), std::string::npos);
  TestGraph reuse(7);
  reuse.constant(4, "dup");
  EXPECT_NE(trySubmit(session, reuse).find("already used"), std::string::npos);
}

TEST(SubmitTest, ConstantDataArrivesInChunks) {
  auto session = newSession();
  PendingSubmit pending(7, Limits{});
  TestGraph g(7);
  g.object({1, "", true});
  pending.add(g.build());
  std::string part = "0123456789";
  for (int i = 0; i < 3; i++) {
    pending.appendData(1, kj::arrayPtr(reinterpret_cast<const kj::byte*>(part.data()), part.size()));
  }
  EXPECT_ANY_THROW(pending.appendData(2, nullptr));
  pending.commit(session);
  EXPECT_EQ(session.objects.at(1).size, 30u);
}

// Issue 19 point 6: all open submits together are bounded (pending-bytes),
// and what a submit held is given back when it is applied or dropped.
TEST(SubmitTest, OpenSubmitsShareOneBoundOnBytes) {
  Limits limits;
  limits.pendingBytes = 10000;
  auto total = std::make_shared<uint64_t>(0);
  auto session = newSession();
  auto a = std::make_unique<PendingSubmit>(7, limits, total);
  PendingSubmit b(7, limits, total);
  TestGraph g(7);
  g.constant(1, std::string(6000, 'a'));
  a->add(g.build());
  EXPECT_GT(*total, 6000u);
  TestGraph h(7);
  h.constant(2, std::string(6000, 'b'));
  try {
    b.add(h.build());
    ADD_FAILURE() << "two submits of 6000 bytes held under a bound of 10000";
  } catch (const kj::Exception& e) {
    EXPECT_NE(std::string(e.getDescription().cStr()).find("(limit pending-bytes=10000)"), std::string::npos)
        << e.getDescription().cStr();
  }
  a.reset();  // dropped
  EXPECT_EQ(*total, 0u);
  b.add(h.build());
  b.commit(session);
  EXPECT_EQ(*total, 0u);  // applied
  EXPECT_EQ(session.objects.at(2).size, 6000u);
}

TEST(SubmitTest, LimitsAreEnforced) {
  Limits limits;
  limits.submitTasks = 1;
  PendingSubmit pending(7, limits);
  TestGraph g(7);
  g.output(1).output(2).task({3, {}, {1}}).task({4, {}, {2}});
  EXPECT_ANY_THROW(pending.add(g.build()));
}

TEST(SubmitTest, AnOutputMayChangeAWritableInputInPlace) {
  auto session = newSession();
  TestGraph g(7);
  g.constant(1, "x").object({2, "tar", true, false, wire::ObjectKind::DIR});
  g.output(3).output(4).object({5, "", false, false, wire::ObjectKind::DIR});
  // The blob in place, a new file inside the dir, the dir itself in place;
  // a read-only input beside them.
  g.constant(6, "y");
  g.task(testing::executeTask(7, {1, 2, 6}, {3, 4, 5}, {"f", "d", "ro"}, {"./f", "d/new", "d/"},
                             {true, true, false}));
  EXPECT_EQ(trySubmit(session, g), "");
  EXPECT_EQ(session.tasks.size(), 1u);
}

TEST(SubmitTest, StreamReadersJoinTheirProducersGroup) {
  auto session = newSession();
  TestGraph g(7);
  // 3 -> stream 1 -> 4 (live) -> stream 2 -> 5 (live); 6 concats stream 1
  // after its end.
  g.object({1, "", false, false, wire::ObjectKind::STREAM});
  g.object({2, "", false, false, wire::ObjectKind::STREAM}).output(8).output(9);
  g.task({3, {}, {1}, {"seq", "10"}}).task({4, {1}, {2}, {"cat"}}).task({5, {2}, {8}, {"wc"}});
  g.task({6, {1}, {9}});
  size_t ready = 0;
  ASSERT_EQ(trySubmit(session, g, &ready), "");
  EXPECT_EQ(ready, 3u);  // the group's three; 6 waits for the end of 1
  auto& producer = session.tasks.at(3);
  ASSERT_NE(producer.group, nullptr);
  EXPECT_EQ(producer.group->members.size(), 3u);
  // None asked for cpus: the three share one, held by the first.
  EXPECT_EQ(producer.group->cpus, 1u);
  EXPECT_EQ(producer.cpus, 1u);
  EXPECT_EQ(session.tasks.at(4).cpus, 0u);
  EXPECT_EQ(session.tasks.at(5).cpus, 0u);
  EXPECT_EQ(session.tasks.at(5).group, producer.group);
  EXPECT_EQ(session.tasks.at(6).group, nullptr);
  EXPECT_EQ(session.tasks.at(6).unfinishedInputs, 1u);
  EXPECT_EQ(session.tasks.at(4).liveInputs, std::vector<bool>{true});
  EXPECT_EQ(session.objects.at(1).liveReaders.size(), 1u);
  EXPECT_EQ(session.objects.at(1).consumers.size(), 1u);

  // A later reader joins while the producer has not started...
  TestGraph more(7);
  more.output(10).task({11, {1}, {10}, {"tail"}});
  ASSERT_EQ(trySubmit(session, more), "");
  EXPECT_EQ(producer.group->members.size(), 4u);
  // ... but not once it is flowing unstored.
  producer.state = TaskNode::State::ASSIGNED;
  TestGraph late(7);
  late.output(12).task({13, {1}, {12}, {"tail"}});
  EXPECT_NE(trySubmit(session, late).find("already flowing"), std::string::npos);
}

TEST(SubmitTest, AStreamGroupMustFitTheCluster) {
  auto session = newSession();
  TestGraph g(7);
  g.object({1, "", false, false, wire::ObjectKind::STREAM}).output(2);
  testing::TestTask producer{3, {}, {1}, {"yes"}}, reader{4, {1}, {2}, {"cat"}};
  producer.cpus = 1;
  reader.cpus = 3;
  g.task(producer).task(reader);
  EXPECT_NE(trySubmit(session, g, nullptr, ClusterCapacity{4, 2})
                .find("needs 3 cpus but the largest governor has 2"),
            std::string::npos);
  EXPECT_NE(trySubmit(session, g, nullptr, ClusterCapacity{3, 3})
                .find("together they need 4 cpus but the governors have 3"),
            std::string::npos);
  EXPECT_TRUE(session.tasks.empty());
}

// A pipe shares one cpu, as in a shell; those that ask for cpus hold them,
// and the others ride along on them.
TEST(SubmitTest, AStreamGroupIsChargedWhatItsMembersAskForOrOneCpu) {
  auto chain = [](std::vector<std::optional<uint32_t>> asks) {
    TestGraph g(7);
    uint64_t n = 100;
    for (size_t i = 0; i + 1 < asks.size(); i++) g.object({n + i, "", false, false, wire::ObjectKind::STREAM});
    g.output(n + asks.size() - 1);
    for (size_t i = 0; i < asks.size(); i++) {
      testing::TestTask t{1 + i, {}, {n + i}, {"cat"}};
      if (i > 0) t.inputs = {n + i - 1};
      t.cpus = asks[i];
      g.task(t);
    }
    return g;
  };
  {
    auto session = newSession();
    auto g = chain(std::vector<std::optional<uint32_t>>(8));
    ASSERT_EQ(trySubmit(session, g, nullptr, ClusterCapacity{1, 1}), "");
    EXPECT_EQ(session.tasks.at(1).group->cpus, 1u);
    EXPECT_EQ(session.tasks.at(1).group->members.size(), 8u);
  }
  {
    auto session = newSession();
    auto g = chain({std::nullopt, 4, std::nullopt});
    ASSERT_EQ(trySubmit(session, g, nullptr, ClusterCapacity{4, 4}), "");
    EXPECT_EQ(session.tasks.at(1).group->cpus, 4u);
    EXPECT_EQ(session.tasks.at(1).cpus, 0u);
    EXPECT_EQ(session.tasks.at(2).cpus, 4u);
  }
  {
    // Every member asks: each is charged what it asks.
    auto session = newSession();
    auto g = chain({1, 1, 1});
    EXPECT_NE(trySubmit(session, g, nullptr, ClusterCapacity{2, 2})
                  .find("together they need 3 cpus but the governors have 2"),
              std::string::npos);
    ASSERT_EQ(trySubmit(session, g, nullptr, ClusterCapacity{3, 3}), "");
    EXPECT_EQ(session.tasks.at(1).group->cpus, 3u);
  }
}

// A text a recursive parser would overflow its stack on is refused at
// submit, naming the limit; one at the limit passes.
TEST(SubmitTest, AttributesNestingPastTheLimitAreRefused) {
  auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  auto session = newSession();
  TestGraph g(7);
  testing::TestTask deep{2, {}, {1}};
  deep.attributes = nested(100000);
  g.output(1).task(deep);
  EXPECT_NE(trySubmit(session, g).find("task 2: its attributes nest deeper than 64 levels"), std::string::npos);
  EXPECT_TRUE(session.tasks.empty());
  TestGraph ok(7);
  testing::TestTask shallow{2, {}, {1}};
  shallow.attributes = "{\"a\": " + nested(63) + ", \"b\": \"[[[[\"}";
  ok.output(1).task(shallow);
  EXPECT_EQ(trySubmit(session, ok), "");
}

TEST(JsonNestingTest, CountsBracketsOutsideStringsAndStopsPastTheLimit) {
  EXPECT_EQ(jsonNesting("", 64), 0u);
  EXPECT_EQ(jsonNesting("{\"a\": [1, {\"b\": 2}]}", 64), 3u);
  EXPECT_EQ(jsonNesting("\"[[[\\\"[[\"", 64), 0u);  // brackets and an escaped quote in a string
  EXPECT_EQ(jsonNesting(std::string(1000000, '['), 64), 65u);
  EXPECT_EQ(jsonNesting("]]]][", 64), 1u);  // unbalanced: no underflow
}

}  // namespace
}  // namespace squall
