// Issue 19: every bound on what a client can make the server hold, seen
// from a client. One server with each limit set low (`--limit`); for each:
// just under passes, just over is refused with an error naming the limit
// and its value, and the session (and the client) goes on working.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <functional>
#include <string>

namespace squall {
namespace {

class LimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.governors = 1;
    options.cpus = 2;
    options.serverArgs = {"--limit", "submit-tasks=5",       "--limit", "submit-objects=20",
                          "--limit", "session-tasks=8",      "--limit", "session-objects=30",
                          "--limit", "constant-bytes=4K",    "--limit", "submit-bytes=32K",
                          "--limit", "task-bytes=4K",        "--limit", "attribute-bytes=100",
                          "--limit", "attribute-depth=3",    "--limit", "path-bytes=64",
                          "--limit", "arg-bytes=50",         "--limit", "wait-ids=3",
                          "--limit", "time-limit-ms=60000"};
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }

  // Builds with `n` in a new session and submits; returns the error ("" if
  // accepted). Then checks that the same session still runs work.
  std::string attempt(const std::function<void(Session&)>& build, bool waitToo = false) {
    Client client(cluster->serverAddress());
    auto session = client.newSession("limits");
    std::string error;
    try {
      build(session);
      session.submit();
      if (waitToo) session.waitAll();
    } catch (const Error& e) {
      error = e.what();
    }
    stillWorks(session);
    return error;
  }

  // A session that hit a limit goes on: a small task runs and is fetched.
  static void stillWorks(Session& session) {
    auto ok = session.concat({session.blob("still fine")});
    ok.output().keep();
    session.submit();
    EXPECT_EQ(ok.output().fetch(), "still fine");
  }

  static void expectRefused(const std::string& error, const std::string& limit) {
    EXPECT_NE(error.find("(limit " + limit), std::string::npos) << "error: " << error;
  }

  static inline LocalCluster* cluster = nullptr;
};

TEST_F(LimitsTest, TasksInOneSubmit) {
  auto build = [](int n) {
    return [n](Session& s) {
      auto seed = s.blob("x");
      for (int i = 0; i < n; i++) s.concat({seed});
    };
  };
  EXPECT_EQ(attempt(build(4)), "");  // 4 and stillWorks' 1: the session holds 5
  expectRefused(attempt(build(6)), "submit-tasks=5");
}

TEST_F(LimitsTest, ObjectsInOneSubmit) {
  auto build = [](int n) {
    return [n](Session& s) {
      for (int i = 0; i < n; i++) s.blob("x");
    };
  };
  EXPECT_EQ(attempt(build(20)), "");
  expectRefused(attempt(build(21)), "submit-objects=20");
}

TEST_F(LimitsTest, TasksAndObjectsInOneSession) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("session-limits");
  auto seed = session.blob("x");
  seed.keep();  // read by later submits
  for (int i = 0; i < 5; i++) session.concat({seed});
  session.submit();
  for (int i = 0; i < 2; i++) session.concat({seed});
  session.submit();  // 7 tasks
  session.concat({seed});
  session.concat({seed});
  try {
    session.submit();  // 9
    ADD_FAILURE() << "a ninth task accepted";
  } catch (const Error& e) {
    expectRefused(e.what(), "session-tasks=8");
  }
  // Objects: 8 so far (a constant, 7 outputs); 22 more make 30.
  for (int i = 0; i < 20; i++) session.blob("y");
  session.submit();
  session.blob("z");
  session.blob("z");
  session.concat({seed});  // the eighth task, with its output the 30th object
  try {
    session.submit();
    ADD_FAILURE() << "a 31st object accepted";
  } catch (const Error& e) {
    expectRefused(e.what(), "session-objects=30");
  }
  session.waitAll();
  auto last = session.concat({seed});  // 8 tasks, 30 objects: the last of both
  last.output().keep();
  session.submit();
  EXPECT_EQ(last.output().fetch(), "x");
}

TEST_F(LimitsTest, BytesOfOneConstant) {
  EXPECT_EQ(attempt([](Session& s) { s.blob(std::string(4096, 'c')); }), "");
  expectRefused(attempt([](Session& s) { s.blob(std::string(4097, 'c')); }), "constant-bytes=4096");
}

TEST_F(LimitsTest, BytesOfOneSubmit) {
  // Message overhead counts too, so a margin either side of 32 KiB.
  auto build = [](int n) {
    return [n](Session& s) {
      for (int i = 0; i < n; i++) s.blob(std::string(4000, 'b'));
    };
  };
  EXPECT_EQ(attempt(build(7)), "");
  expectRefused(attempt(build(9)), "submit-bytes=32768");
}

TEST_F(LimitsTest, BytesOfOneTask) {
  // Arguments of 50 bytes (arg-bytes) until the task passes 4 KiB.
  auto build = [](int n) {
    return [n](Session& s) {
      Program program({"true"});
      for (int i = 0; i < n; i++) program.arg(std::string(50, 'a'));
      s.execute(program);
    };
  };
  EXPECT_EQ(attempt(build(50), true), "");
  expectRefused(attempt(build(80)), "task-bytes=4096");
}

TEST_F(LimitsTest, AttributesSizeAndDepth) {
  auto withAttributes = [](std::string json) {
    return [json](Session& s) { s.concat({s.blob("a")}).attributes(json); };
  };
  std::string fits = "\"" + std::string(98, 'v') + "\"";
  EXPECT_EQ(attempt(withAttributes(fits)), "");
  expectRefused(attempt(withAttributes("\"" + std::string(99, 'v') + "\"")), "attribute-bytes=100");
  EXPECT_EQ(attempt(withAttributes("[[[1]]]")), "");
  expectRefused(attempt(withAttributes("[[[[1]]]]")), "attribute-depth=3");
}

TEST_F(LimitsTest, PathAndArgumentLengths) {
  auto atPath = [](size_t length) {
    return [length](Session& s) {
      s.execute(Program({"test", "-f", std::string(length, 'p')}).input(s.blob("x"), std::string(length, 'p')));
    };
  };
  EXPECT_EQ(attempt(atPath(50), true), "");  // its argument is 50 bytes too
  expectRefused(attempt(atPath(65)), "path-bytes=64");
  auto withArg = [](size_t length) {
    return [length](Session& s) { s.execute(Program({"true", std::string(length, 'a')})); };
  };
  EXPECT_EQ(attempt(withArg(50), true), "");
  expectRefused(attempt(withArg(51)), "arg-bytes=50");
  auto withEnv = [](size_t length) {  // NAME=VALUE counts whole
    return [length](Session& s) { s.execute(Program({"true"}).env("V", std::string(length - 2, 'e'))); };
  };
  EXPECT_EQ(attempt(withEnv(50), true), "");
  expectRefused(attempt(withEnv(51)), "arg-bytes=50");
}

TEST_F(LimitsTest, TimeLimit) {
  auto within = [](int64_t ms) {
    return [ms](Session& s) { s.concat({s.blob("t")}).timeLimit(std::chrono::milliseconds(ms)); };
  };
  EXPECT_EQ(attempt(within(60000), true), "");
  expectRefused(attempt(within(60001)), "time-limit-ms=60000");
}

TEST_F(LimitsTest, IdsInOneWait) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("wait-ids");
  auto seed = session.blob("w");
  std::vector<Task> tasks;
  for (int i = 0; i < 4; i++) tasks.push_back(session.concat({seed}));
  session.submit();
  session.wait({tasks[0], tasks[1], tasks[2]});
  // The same id many times counts once (the client sends it once; the
  // server holds it once: SessionTableTest).
  session.wait({tasks[3], tasks[3], tasks[3], tasks[3], tasks[3]});
  try {
    session.wait(tasks);
    ADD_FAILURE() << "a wait on 4 ids accepted";
  } catch (const Error& e) {
    expectRefused(e.what(), "wait-ids=3");
  }
  session.waitAll();
}

}  // namespace
}  // namespace squall
