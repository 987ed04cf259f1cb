// Tasks that submit tasks, end to end (docs/nested.md): a real server and
// governors keeping the tree executor (tests/executors/nested-executor.cpp)
// whose function submits copies of itself into its own session. A tree
// deeper than the cluster's cpus finishes (a waiting parent gives its cpu
// back); cancelling a parent cancels its children; a server killed midway
// loses and repeats no child; a function calls an actor whose handle it was
// given.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace squall {
namespace {

std::string nestedExecutor() {
  const char* path = getenv("SQUALL_NESTED_EXECUTOR");
  return path != nullptr ? path : "";
}

// A fresh directory for the tree's marker files, removed at the end.
struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "squall-nested-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // Marker files: one per node of the tree that ran.
  size_t markers() const {
    size_t n = 0;
    for (auto& entry : std::filesystem::directory_iterator(path)) {
      auto name = entry.path().filename().string();
      if (name.rfind("r", 0) == 0) n++;
    }
    return n;
  }
  // Nodes that ran more than once ("" when none did).
  std::string again() const {
    std::ifstream in(path + "/again");
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::string path;
};

// Waits up to 60 s for `done` to hold; false if it never does.
template <typename Done>
bool eventually(Done done) {
  for (int i = 0; i < 6000; i++) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// "DEPTH FANOUT DIR r [LEAF_MS] [block]": the root of a tree.
std::string tree(int depth, int fanout, const std::string& dir, int leafMs = 0, bool block = false) {
  return std::to_string(depth) + " " + std::to_string(fanout) + " " + dir + " r " + std::to_string(leafMs) +
         (block ? " block" : "");
}

std::unique_ptr<LocalCluster> startCluster(uint32_t cpus) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = cpus;
  options.governorArgs = {"--executor", "tree=" + nestedExecutor()};
  if (const char* level = getenv("SQUALL_TEST_LOG_LEVEL")) options.logLevel = level;
  auto cluster = std::make_unique<LocalCluster>(options);
  cluster->start();
  return cluster;
}

TEST(NestedTest, ThreeLevelsOfFourOnOneCpuFinishWithoutDeadlock) {
  // 1 + 4 + 16 + 64 tasks on a governor with one cpu: every inner node
  // waits for its children, which could never run if it kept the cpu.
  auto cluster = startCluster(1);
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("nested tree");
  auto root = session.call("tree/node", {}, tree(3, 4, dir.path));
  root.output().keep();
  session.submit();
  EXPECT_EQ(root.output().fetch(), "64");
  session.waitAll();
  EXPECT_EQ(dir.markers(), 85u);
  EXPECT_EQ(dir.again(), "");
  auto state = session.state();
  EXPECT_EQ(state.finished, 85u);
  EXPECT_EQ(state.failed, 0u);
  // The children are the root's, and theirs are theirs.
  auto tasks = session.tasks();
  EXPECT_EQ(tasks.size(), 85u);
}

TEST(NestedTest, CancellingAParentCancelsItsChildrenAndTheSessionGoesOn) {
  auto cluster = startCluster(4);
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("cancel a parent");
  // Depth 2: the root, 2 children, 4 grandchildren that block until
  // released (never, here).
  auto root = session.call("tree/node", {}, tree(2, 2, dir.path, 0, true));
  session.submit();
  ASSERT_TRUE(eventually([&]() { return dir.markers() == 7; })) << dir.markers() << " of 7 nodes started";
  root.cancel();
  // Every one of the 7 ends cancelled, the leaves killed where they ran.
  ASSERT_TRUE(eventually([&]() {
    auto s = session.state();
    return s.running == 0 && s.waiting == 0 && s.ready == 0;
  }));
  size_t cancelled = 0;
  for (auto& task : session.tasks()) {
    EXPECT_EQ(task.state, "cancelled") << "task " << task.id << " (" << task.name << "): " << task.error;
    if (task.state == "cancelled") cancelled++;
  }
  EXPECT_EQ(cancelled, 7u);
  // Not a failure: the session takes more work.
  auto after = session.call("tree/node", {}, tree(1, 2, dir.path + "/.."));
  after.output().keep();
  session.submit();
  EXPECT_EQ(after.output().fetch(), "2");
  EXPECT_TRUE(session.state().open);
}

TEST(NestedTest, AServerKilledMidwayLosesAndRepeatsNoChild) {
  auto cluster = startCluster(2);
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("nested across a crash");
  auto root = session.call("tree/node", {}, tree(3, 4, dir.path, 30));
  root.output().keep();
  session.submit();
  // Killed (SIGKILL) once some of the 85 nodes have run, not all.
  ASSERT_TRUE(eventually([&]() { return dir.markers() >= 30; }));
  cluster->restartServer();
  EXPECT_EQ(root.output().fetch(), "64");
  EXPECT_EQ(dir.markers(), 85u);
  EXPECT_EQ(dir.again(), "") << "nodes run twice";
  auto state = session.state();
  EXPECT_EQ(state.finished, 85u) << "tasks lost or doubled";
}

TEST(NestedTest, AFunctionCallsAnActorWhoseHandleItIsGiven) {
  auto cluster = startCluster(2);
  Client client(cluster->serverAddress());
  auto session = client.newSession("a handle travels");
  auto counter = session.actor("tree/Counter");
  counter.call("add", {}, "10");
  // The handle goes in as data, like any argument.
  auto handle = session.blob(std::to_string(counter.id()));
  auto through = session.call("tree/addThrough", {handle}, "5");
  through.output().keep();
  session.submit();
  EXPECT_EQ(through.output().fetch(), "15");
  auto read = counter.call("read");
  read.output().keep();
  session.submit();
  EXPECT_EQ(read.output().fetch(), "15");
}

TEST(NestedTest, AChildOfATaskTheSessionDoesNotHaveIsRefused) {
  auto cluster = startCluster(1);
  TempDir dir;
  Client client(cluster->serverAddress());
  auto session = client.newSession("orphans");
  session.blob("x");
  session.submit();
  auto child = client.attachChild(session.id(), 999999);
  child.call("tree/node", {}, tree(0, 0, dir.path));
  try {
    child.submit();
    FAIL() << "a child of an unknown task was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("names task 999999 as its parent"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace squall
