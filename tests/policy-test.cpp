// Failure policy and task information through the client library, against
// real processes: retries, allowed failures, time limits, attach by name,
// object and task metadata.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <filesystem>
#include <xxhash.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

class PolicyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster = startCluster(2, 2);
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void SetUp() override {
    scratch = fs::temp_directory_path() /
              ("squall-policy-" + std::to_string(getpid()) + "-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(scratch);
  }
  void TearDown() override { fs::remove_all(scratch); }

  // A shell line that fails until it has run `failures` times, counting in
  // a file outside the sandbox (each attempt gets a fresh sandbox).
  std::string flaky(int failures) {
    auto counter = (scratch / "count").string();
    return "n=$(cat " + counter + " 2>/dev/null || echo 0); echo $((n+1)) > " + counter +
           "; echo attempt $((n+1)) >&2; [ $n -ge " + std::to_string(failures) + " ]";
  }

  static LocalCluster* cluster;
  fs::path scratch;
};
LocalCluster* PolicyTest::cluster = nullptr;

TEST_F(PolicyTest, RetriesRunAFailingTaskAgainAndCountAttempts) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("retries");
  auto task = session.execute(Program::shell(flaky(2) + " && echo done").stdoutOutput().name("flaky"));
  task.retries(2);
  task.output().keep();
  session.submit();
  EXPECT_EQ(task.output().fetch(), "done\n");
  auto info = task.info();
  EXPECT_EQ(info.attempt, 3u);
  EXPECT_EQ(info.state, "finished");
  EXPECT_EQ(info.type, "execute");
  EXPECT_EQ(info.name, "flaky");
  EXPECT_NE(info.governor.find("governor-"), std::string::npos);
  EXPECT_GT(info.startTimeUs, 0u);
}

TEST_F(PolicyTest, RetriesRunOutAndTheLastErrorIsReported) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("retries-exhausted");
  auto task = session.execute(Program::shell(flaky(5)).name("hopeless"));
  task.retries(1);
  session.submit();
  try {
    session.waitAll();
    FAIL() << "should fail";
  } catch (const TaskFailed& f) {
    EXPECT_NE(std::string(f.what()).find("(attempt 2)"), std::string::npos) << f.what();
    EXPECT_NE(f.stderrTail.find("attempt 2"), std::string::npos) << f.stderrTail;
  }
}

TEST_F(PolicyTest, AllowedFailureSkipsDependentsAndTheRestFinishes) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("allowed");
  auto broken = session.execute(
      Program::shell("echo 'cannot parse line 7' >&2; exit 4").stdoutOutput().name("parse/bad"));
  broken.allowFailure();
  auto dependent = session.execute(Program({"cat"}).stdinFrom(broken.output()).stdoutOutput());
  auto fine = session.execute(Program::shell("echo ok").stdoutOutput().name("parse/good"));
  fine.output().keep();
  session.submit();
  session.waitAll();  // the session carries on
  EXPECT_EQ(fine.output().fetch(), "ok\n");
  auto state = session.state();
  EXPECT_TRUE(state.open);
  EXPECT_EQ(state.finished, 1u);
  EXPECT_EQ(state.failed, 1u);
  EXPECT_EQ(state.skipped, 1u);
  // Failures come first, with what a user needs to act on them.
  auto infos = session.tasks();
  ASSERT_EQ(infos.size(), 3u);
  EXPECT_EQ(infos[0].id, broken.id());
  EXPECT_EQ(infos[0].state, "failed");
  EXPECT_EQ(infos[0].exitStatus, 4);
  EXPECT_NE(infos[0].stderrTail.find("cannot parse line 7"), std::string::npos);
  auto skipped = session.tasks({dependent.id()});
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].state, "skipped");
  EXPECT_NE(skipped[0].error.find("failed"), std::string::npos);
  // Waiting for the failed one says why.
  try {
    session.wait({dependent});
    FAIL() << "wait on a skipped task should throw";
  } catch (const TaskFailed& f) {
    EXPECT_NE(std::string(f.what()).find("skipped"), std::string::npos) << f.what();
  }
  auto onlyFailed = session.tasks({}, {"failed"});
  ASSERT_EQ(onlyFailed.size(), 1u);
  EXPECT_THROW(session.tasks({}, {"exploded"}), Error);
}

TEST_F(PolicyTest, FetchOfWhatAnAllowedFailureDidNotMakeSaysWhy) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("allowed fetch");
  auto broken = session.execute(Program::shell("echo 'no input' >&2; exit 3").stdoutOutput().name("bad"));
  broken.allowFailure().output().keep();
  auto dependent = session.execute(Program({"cat"}).stdinFrom(broken.output()).stdoutOutput());
  dependent.output().keep();
  session.submit();
  // The same TaskFailed as a wait for it, whether it failed or was skipped.
  try {
    broken.output().fetch();
    FAIL() << "fetched an output that was never made";
  } catch (const TaskFailed& f) {
    EXPECT_EQ(f.task, broken.id());
    EXPECT_EQ(f.exitStatus, 3);
    EXPECT_NE(f.stderrTail.find("no input"), std::string::npos) << f.stderrTail;
  }
  try {
    dependent.output().fetch();
    FAIL() << "fetched an output that was never made";
  } catch (const TaskFailed& f) {
    EXPECT_EQ(f.task, dependent.id());
    EXPECT_NE(std::string(f.what()).find("skipped"), std::string::npos) << f.what();
  }
  EXPECT_TRUE(session.state().open);
}

TEST_F(PolicyTest, AnotherClientAttachesByNameAndSeesTheSameSession) {
  Client owner(cluster->serverAddress());
  auto session = owner.newSession("attach-me");
  auto task = session.execute(Program::shell("echo shared").stdoutOutput().name("share"));
  task.output().keep();
  session.submit();
  session.waitAll();

  Client other(cluster->serverAddress());
  {
    auto attached = other.attach("attach-me");
    EXPECT_EQ(attached.id(), session.id());
    EXPECT_EQ(attached.object(task.output().id()).fetch(), "shared\n");
    // New work from the attached client does not collide with existing ids.
    auto more = attached.concat({attached.blob("more")});
    more.output().keep();
    attached.submit();
    EXPECT_EQ(more.output().fetch(), "more");
    EXPECT_EQ(attached.state().finished, 2u);
  }
  // Dropping the attached handle did not close the session.
  EXPECT_TRUE(session.state().open);
  bool listed = false;
  for (auto& s : other.sessions()) listed |= s.name == "attach-me";
  EXPECT_TRUE(listed);
  EXPECT_THROW(other.attach("no-such-session"), Error);
}

TEST_F(PolicyTest, ObjectsAndTasksCarryTheirMetadataAndFinishInfo) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("metadata");
  auto text = session.blob("b\na\n");
  text.label("letters").contentType("text/plain");
  auto sorted = session.execute(Program({"sort"}).stdinFrom(text).stdoutOutput().name("tidy/sort"));
  sorted.attributes(R"({"owner":"qa"})");
  sorted.output().keep().label("sorted").contentType("text/plain");
  auto tree = session.makeDir({{"x/letters.txt", sorted.output()}});
  tree.output().keep();
  session.submit();
  session.waitAll();

  auto info = sorted.info();
  EXPECT_EQ(info.name, "tidy/sort");
  EXPECT_EQ(info.attributes, R"({"owner":"qa"})");
  ASSERT_EQ(info.inputs.size(), 1u);
  EXPECT_EQ(info.inputs[0], text.id());
  ASSERT_EQ(info.outputs.size(), 1u);
  auto out = info.outputs[0];
  EXPECT_EQ(out.id, sorted.output().id());
  EXPECT_EQ(out.label, "sorted");
  EXPECT_EQ(out.contentType, "text/plain");
  EXPECT_EQ(out.state, "finished");
  EXPECT_TRUE(out.keep);
  EXPECT_EQ(out.size, 4u);
  EXPECT_EQ(out.hash, XXH3_64bits("a\nb\n", 4));
  ASSERT_EQ(out.locations.size(), 1u);
  EXPECT_EQ(out.locations[0], info.governor);
  EXPECT_EQ(out.producer, sorted.id());

  // The constant is removed once its only reader finished; its label stays.
  auto constant = text.info();
  EXPECT_EQ(constant.label, "letters");
  EXPECT_EQ(constant.producer, 0u);
  EXPECT_EQ(constant.state, "removed");

  // Another client learns kinds from the server, so a dir fetches as one.
  Client other(cluster->serverAddress());
  auto attached = other.attach("metadata");
  auto dir = attached.object(tree.output().id());
  EXPECT_EQ(dir.kind(), ObjectKind::DIR);
  EXPECT_EQ(dir.info().size, 4u);
  dir.fetchDir((scratch / "tree").string());
  EXPECT_TRUE(fs::is_regular_file(scratch / "tree" / "x" / "letters.txt"));
  EXPECT_THROW(attached.object(999999), Error);
}

TEST_F(PolicyTest, FetchAllReadsEveryObjectInOrderOrThrowsTheFirstFailure) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("fetch all");
  auto constant = session.blob("inline");
  constant.keep();
  std::vector<DataObject> objects{constant};
  for (int i = 0; i < 40; i++) {
    auto task = session.execute(Program::shell("echo " + std::to_string(i)).stdoutOutput());
    task.output().keep();
    objects.push_back(task.output());
  }
  session.submit();
  auto values = session.fetchAll(objects);
  ASSERT_EQ(values.size(), objects.size());
  EXPECT_EQ(values[0], "inline");
  for (int i = 0; i < 40; i++) EXPECT_EQ(values[i + 1], std::to_string(i) + "\n");
  EXPECT_TRUE(session.fetchAll({}).empty());
  // Never made: the first in order says why, as its fetch would.
  auto bad = session.execute(Program::shell("exit 5").stdoutOutput());
  auto worse = session.execute(Program::shell("exit 6").stdoutOutput());
  bad.allowFailure().output().keep();
  worse.allowFailure().output().keep();
  session.submit();
  try {
    session.fetchAll({constant, worse.output(), bad.output()});
    FAIL() << "fetched outputs that were never made";
  } catch (const TaskFailed& f) {
    EXPECT_EQ(f.task, worse.id());
    EXPECT_EQ(f.exitStatus, 6);
  }
}

TEST_F(PolicyTest, AWaitGivenATimeoutEndsWithTimeoutAndChangesNothing) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("timeouts");
  auto slow = session.sleep(std::chrono::minutes(10));
  auto fast = session.concat({session.blob("quick")});
  slow.output().keep();
  fast.output().keep();
  session.submit();
  auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(session.wait(std::vector<Task>{slow}, std::chrono::milliseconds(50)), Timeout);
  EXPECT_THROW(session.wait(std::vector<DataObject>{slow.output()}, std::chrono::milliseconds(0)), Timeout);
  EXPECT_TRUE(session.waitSome(std::vector<DataObject>{slow.output()}, std::chrono::milliseconds(20)).empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
  // The first that ends, the slow one still going.
  auto done = session.waitSome(std::vector<DataObject>{slow.output(), fast.output()}, std::chrono::minutes(1));
  EXPECT_EQ(done, std::vector<uint64_t>{fast.output().id()});
  EXPECT_EQ(fast.output().fetch(), "quick");
  EXPECT_NE(slow.info().state, "finished");
  // Without a timeout, waits as before.
  slow.cancel();
  session.waitSome(std::vector<Task>{slow});
  EXPECT_EQ(slow.info().state, "cancelled");
  EXPECT_TRUE(session.state().open);
}

}  // namespace
}  // namespace squall
