// Users' functions as tasks (tasklib) end to end: a real server and two
// governors, each keeping the test executor (tests/executors) warm.
#include "command-output.h"
#include "session-failure.h"
#include "test-executor.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <fstream>
#include <set>
#include <sys/wait.h>
#include <thread>

namespace squall {
namespace {

class TasklibE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.governors = 2;
    options.cpus = 2;
    options.governorArgs = {"--executor", "testfn=" + testExecutor()};
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

// Counts the words of `text` through the function: a call after a failed
// one still runs.
std::string wordcount(Client& client, const std::string& text) {
  auto session = client.newSession("wordcount after");
  auto count = session.call("testfn/wordcount", {session.blob(text)});
  count.output().keep();
  session.submit();
  return count.output().fetch();
}

TEST_F(TasklibE2eTest, AFunctionRunsInAWarmProcessAndItsOutputIsFetched) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("wordcount");
  auto count = session.call("testfn/wordcount", {session.blob("the quick brown fox jumps")});
  count.output().keep();
  session.submit();
  EXPECT_EQ(count.output().fetch(), "5");
  // One after the other on a one-governor path: the same warm process.
  auto first = session.call("testfn/pid");
  first.output().keep();
  session.submit();
  std::set<std::string> pids{first.output().fetch()};
  for (int i = 0; i < 6; i++) {
    auto again = session.call("testfn/pid");
    again.output().keep();
    session.submit();
    pids.insert(again.output().fetch());
  }
  // Two governors, each with its warm process: at most two pids, and no
  // process started per call.
  EXPECT_LE(pids.size(), 2u);
}

TEST_F(TasklibE2eTest, CallsWithLargeConfigsTravelInSeveralMessages) {
  // 24 x 3 MiB: more than one capnp message may hold (64 MiB), so the
  // client must count the configs when it cuts the submit.
  Client client(cluster->serverAddress());
  auto session = client.newSession("large configs");
  std::vector<Task> calls;
  for (int i = 0; i < 24; i++) calls.push_back(session.call("testfn/pid", {}, std::string(3 << 20, 'c')));
  session.submit();
  session.waitAll();
  for (auto& call : calls) EXPECT_EQ(call.info().state, "finished");
}

TEST_F(TasklibE2eTest, NamedOutputsADirOutputAndADirInput) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("outputs");
  auto split = session.call("testfn/split", {session.blob("abcdef")}, "", {ObjectKind::BLOB, ObjectKind::BLOB});
  split.output(0).keep();
  split.output(1).keep();
  auto tree = session.call("testfn/tree", {split.output(1)}, "", {ObjectKind::DIR});
  auto list = session.call("testfn/list", {tree.output()});
  list.output().keep();
  session.submit();
  EXPECT_EQ(split.output(0).fetch(), "abc");
  EXPECT_EQ(split.output(1).fetch(), "def");
  EXPECT_EQ(list.output().fetch(), "copy.txt\n");
}

TEST_F(TasklibE2eTest, GovernorsListTheFunctionsTheyOffer) {
  Client client(cluster->serverAddress());
  auto governors = client.governors();
  ASSERT_EQ(governors.size(), 2u);
  for (auto& g : governors) {
    EXPECT_TRUE(std::is_sorted(g.functions.begin(), g.functions.end()));
    for (auto name : {"testfn/wordcount", "testfn/upper", "testfn/split"}) {
      EXPECT_NE(std::find(g.functions.begin(), g.functions.end(), name), g.functions.end()) << g.name << " " << name;
    }
  }
}

TEST_F(TasklibE2eTest, AFunctionNoGovernorOffersIsRefusedAtSubmitNamingIt) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("unknown");
  session.call("testfn/wordcont", {session.blob("x")});
  try {
    session.submit();
    FAIL() << "the submit should be refused";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find("no governor offers the function testfn/wordcont"), std::string::npos) << message;
    EXPECT_NE(message.find("testfn/wordcount"), std::string::npos) << message;  // what is offered
  }
  auto other = client.newSession("wrong count");
  other.call("testfn/split", {other.blob("x")});
  try {
    other.submit();
    FAIL() << "the submit should be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("function testfn/split makes 2 output(s) (head, tail); the task has 1"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(TasklibE2eTest, AThrowingFunctionFailsItsTaskWithTheMessageAndTheProcessGoesOn) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("throws");
  session.call("testfn/fail", {}, "bad input");
  auto message = failureOf(session);
  EXPECT_NE(message.find("function testfn/fail failed: asked to fail: bad input"), std::string::npos) << message;
  EXPECT_EQ(wordcount(client, "one two"), "2");
}

TEST_F(TasklibE2eTest, AnExecutorThatCrashesFailsOnlyItsTaskWhichIsRetried) {
  auto marker = std::filesystem::path(cluster->workDir()) / "crash-marker";
  Client client(cluster->serverAddress());
  auto session = client.newSession("crash");
  auto task = session.call("testfn/crash-once", {}, marker.string());
  task.retries(1);
  task.output().keep();
  session.submit();
  EXPECT_EQ(task.output().fetch(), "second try");
  EXPECT_TRUE(std::filesystem::exists(marker));  // it did crash once
  auto info = task.info();
  EXPECT_EQ(info.attempt, 2u);
  // Without a retry the task fails saying how the process ended.
  std::filesystem::remove(marker);
  auto other = client.newSession("crash, no retry");
  other.call("testfn/crash-once", {}, marker.string());
  auto message = failureOf(other);
  EXPECT_NE(message.find("was killed by SIGABRT while running testfn/crash-once"), std::string::npos) << message;
}

TEST_F(TasklibE2eTest, ATimeLimitKillsAnEndlessFunctionAndTheNextCallRuns) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("spin");
  auto spin = session.call("testfn/spin");
  spin.timeLimit(std::chrono::milliseconds(300));
  auto message = failureOf(session);
  EXPECT_NE(message.find("time limit of 0.3 s exceeded"), std::string::npos) << message;
  EXPECT_EQ(wordcount(client, "a b c"), "3");
}

TEST_F(TasklibE2eTest, CancellingASessionKillsItsRunningFunction) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("cancel");
  session.call("testfn/spin");
  session.submit();
  // Running once the governor has it; then cancelled.
  for (int i = 0; i < 200 && session.state().running == 0; i++) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  session.cancel();
  auto message = failureOf(session);
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(wordcount(client, "x"), "1");
}

// `yes hello | head -n 100000 | testfn/upper | sort | uniq -c`: the function
// reads its stream as it is written and writes its own, between programs.
TEST_F(TasklibE2eTest, AStreamFunctionIsAStageOfAStreamedPipe) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("stream stage");
  auto yes = session.execute(
      Program::shell("yes hello | head -n 100000").stdoutOutput(ObjectKind::STREAM).name("yes"));
  auto upper = session.call("testfn/upper", {yes.output()}, "", {ObjectKind::STREAM});
  auto count = session.execute(Program::shell("sort | uniq -c | awk '{print $1, $2}'")
                                   .stdinFrom(upper.output())
                                   .stdoutOutput()
                                   .name("count"));
  count.output().keep();
  session.submit();
  EXPECT_EQ(count.output().fetch(), "100000 HELLO\n");
  auto info = upper.output().info();
  EXPECT_EQ(info.kind, ObjectKind::STREAM);
  EXPECT_EQ(info.size, 600000u);
  EXPECT_EQ(upper.info().state, "finished");
}

// A function's stream read by another function written for blobs: input
// bytes() reads the stream to its end.
TEST_F(TasklibE2eTest, AFunctionsStreamFeedsAnotherFunction) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("function to function");
  auto lines = session.call("testfn/lines", {}, "5000", {ObjectKind::STREAM});
  auto upper = session.call("testfn/upper", {lines.output()}, "", {ObjectKind::STREAM});
  auto words = session.call("testfn/wordcount", {upper.output()});
  words.output().keep();
  session.submit();
  EXPECT_EQ(words.output().fetch(), "10000");
}

// `testfn/lines` (endless) into `head -n 3`: once its reader has gone the
// function's next write ends the call, without error, as a pipe stage ends.
TEST_F(TasklibE2eTest, AStreamFunctionWhoseReadersLeaveEndsWithoutError) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("readers leave");
  auto lines = session.call("testfn/lines", {}, "", {ObjectKind::STREAM});
  auto head = session.execute(Program({"head", "-n", "3"}).stdinFrom(lines.output()).stdoutOutput().name("head"));
  head.output().keep();
  session.submit();
  EXPECT_EQ(head.output().fetch(), "line 1\nline 2\nline 3\n");
  session.waitAll();
  EXPECT_EQ(lines.info().state, "finished");
  EXPECT_EQ(wordcount(client, "still warm"), "2");
}

// A function reading a stream whose producer fails, fails saying so, even
// though it read to the end of what came; so does the program after it.
TEST_F(TasklibE2eTest, AStreamFunctionFailsWithItsFailingProducer) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("producer fails");
  // Allowed to fail (and the function too), so that the session fails
  // because of the last reader, the others having ended first.
  auto producer = session.execute(
      Program::shell("echo partial; exit 3").stdoutOutput(ObjectKind::STREAM).name("producer"));
  producer.allowFailure();
  auto upper = session.call("testfn/upper", {producer.output()}, "", {ObjectKind::STREAM});
  upper.allowFailure();
  auto reader = session.execute(Program({"cat"}).stdinFrom(upper.output()).stdoutOutput().name("reader"));
  session.submit();
  try {
    session.waitAll();
    FAIL() << "the reader should fail";
  } catch (const TaskFailed& failure) {
    EXPECT_EQ(failure.task, reader.id());
    EXPECT_NE(std::string(failure.what()).find("testfn/upper"), std::string::npos) << failure.what();
  }
  auto info = upper.info();
  EXPECT_EQ(info.state, "failed");
  EXPECT_NE(info.error.find("producer"), std::string::npos) << info.error;
  EXPECT_NE(info.error.find("exited with status 3"), std::string::npos) << info.error;
  EXPECT_EQ(wordcount(client, "and on"), "2");
}

TEST_F(TasklibE2eTest, SquallSubmitCallsAFunctionAndWritesItsOutputs) {
  auto dir = std::filesystem::path(cluster->workDir()) / "submit-call";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "words.txt") << "one two three";
  auto squall = findProgram("squall") + " submit --server " + cluster->serverAddress() + " ";
  auto [printed, status] =
      commandOutput(squall + "--call testfn/wordcount --input " + (dir / "words.txt").string() + " 2>&1");
  EXPECT_EQ(status, 0) << printed;
  EXPECT_EQ(printed, "3");
  auto [quiet, splitStatus] =
      commandOutput(squall + "--call testfn/split --input " + (dir / "words.txt").string() + " --output " +
                    (dir / "head.txt").string() + " --output " + (dir / "tail.txt").string() + " 2>&1");
  EXPECT_EQ(splitStatus, 0) << quiet;
  std::ifstream head(dir / "head.txt"), tail(dir / "tail.txt");
  std::string headText((std::istreambuf_iterator<char>(head)), {}), tailText((std::istreambuf_iterator<char>(tail)), {});
  EXPECT_EQ(headText + "|" + tailText, "one tw|o three");  // halves of 13 bytes
  auto [failed, failedStatus] = commandOutput(squall + "--call testfn/fail --config oops 2>&1");
  EXPECT_EQ(failedStatus, 1);
  EXPECT_NE(failed.find("function testfn/fail failed: asked to fail: oops"), std::string::npos) << failed;
  auto [unknown, unknownStatus] = commandOutput(squall + "--call testfn/nosuch 2>&1");
  EXPECT_EQ(unknownStatus, 1);
  EXPECT_NE(unknown.find("no governor offers the function testfn/nosuch"), std::string::npos) << unknown;
  auto [mixed, mixedStatus] = commandOutput(squall + "--call testfn/wordcount -- echo hi 2>&1");
  EXPECT_EQ(mixedStatus, 1);
  EXPECT_NE(mixed.find("--call runs no program: give none"), std::string::npos) << mixed;
}

// Runs a governor that must stop at once; its output and exit status.
std::pair<std::string, int> governorOutput(const std::string& args) {
  return commandOutput(findProgram("squall-governor") + " --server 127.0.0.1:9 --connect-timeout 1 " + args +
                       " 2>&1");
}

TEST(TasklibGovernorTest, AnExecutorThatCannotServeStopsTheGovernorSayingWhy) {
  auto [notOne, status] = governorOutput("--executor notone=/bin/true");
  EXPECT_EQ(status, 1);
  EXPECT_NE(notOne.find("executor notone (/bin/true) exited with status 0 instead of describing itself"),
            std::string::npos)
      << notOne;
  auto [missing, missingStatus] = governorOutput("--executor gone=/no/such/program");
  EXPECT_EQ(missingStatus, 1);
  EXPECT_NE(missing.find("cannot start executor gone (/no/such/program): No such file or directory"),
            std::string::npos)
      << missing;
  auto [misnamed, misnamedStatus] = governorOutput("--executor other=" + testExecutor());
  EXPECT_EQ(misnamedStatus, 1);
  EXPECT_NE(misnamed.find("calls itself 'testfn': use --executor testfn="), std::string::npos) << misnamed;
  auto [bad, badStatus] = governorOutput("--executor 'no-equals-sign'");
  EXPECT_EQ(badStatus, 1);
  EXPECT_NE(bad.find("bad --executor: 'no-equals-sign' is not NAME=PROGRAM"), std::string::npos) << bad;
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// What each task printed, joined in the order it came, by stream.
struct Printed {
  std::map<uint64_t, std::string> out, err;
  std::map<uint64_t, std::string> label;
  std::set<std::string> governors;
};

// What a function prints reaches its session's watcher, each line its own
// task's (the calls ran back to back on the same warm processes), and its
// result's tails; another session's watcher sees none of it.
TEST_F(TasklibE2eTest, WhatAFunctionPrintsReachesItsSessionsWatcherAndItsTails) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("printing");
  auto other = client.newSession("not printing");
  Printed printed;
  size_t otherChunks = 0;
  session.watchOutput([&printed](const std::vector<TaskOutput>& chunks) {
    for (auto& c : chunks) {
      (c.isStderr ? printed.err : printed.out)[c.task] += c.text;
      printed.label[c.task] = c.label;
      printed.governors.insert(c.governor);
    }
  });
  other.watchOutput([&otherChunks](const std::vector<TaskOutput>& chunks) { otherChunks += chunks.size(); });
  std::vector<Task> calls;
  for (int i = 0; i < 12; i++) {
    calls.push_back(session.call("testfn/say", {}, "line " + std::to_string(i) + "\nagain " + std::to_string(i)));
    calls.back().name("say-" + std::to_string(i));
  }
  session.submit();
  session.waitAll();
  session.drainOutput();
  other.drainOutput();
  for (int i = 0; i < 12; i++) {
    uint64_t id = calls[i].id();
    auto n = std::to_string(i);
    EXPECT_EQ(printed.out[id], "out: line " + n + "\nout: again " + n + "\npartial") << "task " << i;
    EXPECT_EQ(printed.err[id], "err: done\n") << "task " << i;
    EXPECT_EQ(printed.label[id].rfind("say-" + n + " pid=", 0), 0u) << printed.label[id];
    auto info = session.tasks({id}).at(0);
    EXPECT_EQ(info.stdoutTail, printed.out[id]);
    EXPECT_EQ(info.stderrTail, "err: done\n");
  }
  EXPECT_FALSE(printed.governors.empty());
  EXPECT_EQ(printed.governors.count(""), 0u);
  EXPECT_EQ(otherChunks, 0u);
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// A function that prints far more than anyone keeps: it is not held back
// (the governor reads on), its tail is the last 4 KiB, a watcher gets what
// it keeps up with (never more than was printed), and the governor lives
// on.
TEST_F(TasklibE2eTest, AFloodOfOutputIsReadOnAndKeptBounded) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("flood");
  size_t received = 0;
  session.watchOutput([&received](const std::vector<TaskOutput>& chunks) {
    for (auto& c : chunks) received += c.text.size();
  });
  auto flood = session.call("testfn/flood", {}, "32");
  flood.output().keep();
  session.submit();
  size_t lines = 32u * (1 << 20) / 64;
  EXPECT_EQ(flood.output().fetch(), std::to_string(lines));
  session.drainOutput();
  auto info = session.tasks({flood.id()}).at(0);
  ASSERT_EQ(info.stdoutTail.size(), 4096u);
  char last[65];
  snprintf(last, sizeof last, "%063zu\n", lines - 1);
  EXPECT_EQ(info.stdoutTail.substr(4096 - 64), last);
  EXPECT_GT(received, 0u);
  EXPECT_LE(received, 32u << 20);
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// Many short calls at once: they queue behind each other on the warm
// processes (pipelined, docs/tasklib.md), and still each line is its own
// task's, in its result's tails and at the watcher.
TEST_F(TasklibE2eTest, PipelinedCallsEachKeepTheirOwnOutput) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("printing at once");
  std::map<uint64_t, std::string> out;
  session.watchOutput([&out](const std::vector<TaskOutput>& chunks) {
    for (auto& c : chunks) {
      if (!c.isStderr) out[c.task] += c.text;
    }
  });
  for (int round = 0; round < 3; round++) {
    std::vector<Task> calls;
    for (int i = 0; i < 150; i++) {
      calls.push_back(session.call("testfn/say", {}, std::to_string(round) + "-" + std::to_string(i)));
    }
    session.submit();
    session.waitAll();
    session.drainOutput();
    for (int i = 0; i < 150; i++) {
      auto expected = "out: " + std::to_string(round) + "-" + std::to_string(i) + "\npartial";
      EXPECT_EQ(out[calls[i].id()], expected) << "round " << round << " call " << i;
      EXPECT_EQ(session.tasks({calls[i].id()}).at(0).stdoutTail, expected) << "round " << round << " call " << i;
    }
  }
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// The server keeps no output across a restart, but a watcher goes on: its
// watch starts again with its next call, and what tasks print after the
// restart reaches it.
TEST(TaskOutputRecoveryTest, AWatcherGetsWhatIsPrintedAfterAServerRestart) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  options.governorArgs = {"--executor", "testfn=" + testExecutor()};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("printing across a restart");
  std::string out;
  session.watchOutput([&out](const std::vector<TaskOutput>& chunks) {
    for (auto& c : chunks) {
      if (!c.isStderr) out += c.text;
    }
  });
  auto say = [&session](const std::string& what) {
    auto call = session.call("testfn/say", {}, what);
    call.output().keep();
    session.submit();
    EXPECT_EQ(call.output().fetch(), "said");
    session.drainOutput();
  };
  say("before");
  EXPECT_EQ(out, "out: before\npartial");
  cluster.restartServer();
  say("after");
  EXPECT_EQ(out, "out: before\npartialout: after\npartial");
}

}  // namespace
}  // namespace squall
