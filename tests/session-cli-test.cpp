// `squall status|wait|fetch|cancel|logs` against real processes: sessions
// made by this test's own client (finished, failed, running) and a live
// `squall run`, held mid-task by a FIFO gate so nothing waits on timing.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <cerrno>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct CliResult {
  int status;
  std::string out;
  std::string err;
};

class SessionCliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster = startCluster(2, 2);
    client = new Client(cluster->serverAddress());

    // Finished: a task whose stdout/stderr are only logged, a dir output
    // and a constant, both kept.
    done = new Session(client->newSession("done-session"));
    done->execute(Program::shell("echo to-stdout; echo to-stderr >&2").name("talker"));
    auto dirTask = done->execute(
        Program::shell("mkdir d && echo x > d/a.txt").output("d", ObjectKind::DIR).name("dir-maker"));
    dirTask.output().keep();
    dirObject = dirTask.output().id();
    auto constant = done->blob("kept bytes\n");
    constant.keep();
    blobObject = constant.id();
    done->submit();
    done->waitAll();

    failed = new Session(client->newSession("failed-session"));
    failed->execute(Program::shell("echo oops >&2; exit 3").name("breaker"));
    failed->submit();
    try {
      failed->waitAll();
    } catch (const TaskFailed&) {
    }

    bystander = new Session(client->newSession("bystander"));
    auto data = bystander->blob("still here");
    data.keep();
    bystanderObject = data.id();
    bystander->submit();
  }
  static void TearDownTestSuite() {
    delete bystander;
    delete failed;
    delete done;
    delete client;
    delete cluster;
  }
  void SetUp() override {
    dir = fs::temp_directory_path() / ("squall-session-cli-" + std::to_string(getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override {
    EXPECT_TRUE(cluster->server().running());
    EXPECT_EQ(bystander->object(bystanderObject).fetch(), "still here");
    fs::remove_all(dir);
  }

  // `env`: more VAR=value assignments for the command.
  CliResult squall(const std::string& args, const std::string& env = "") {
    std::string command = "cd '" + dir.string() + "' && " + env + " SQUALL_SERVER=" + cluster->serverAddress() +
                          " '" + findProgram("squall") + "' " + args + " >out.txt 2>err.txt";
    int status = std::system(command.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), slurp(dir / "out.txt"),
            slurp(dir / "err.txt")};
  }

  static LocalCluster* cluster;
  static Client* client;
  static Session* done;
  static Session* failed;
  static Session* bystander;
  static uint64_t dirObject, blobObject, bystanderObject;
  fs::path dir;
};
LocalCluster* SessionCliTest::cluster = nullptr;
Client* SessionCliTest::client = nullptr;
Session* SessionCliTest::done = nullptr;
Session* SessionCliTest::failed = nullptr;
Session* SessionCliTest::bystander = nullptr;
uint64_t SessionCliTest::dirObject = 0;
uint64_t SessionCliTest::blobObject = 0;
uint64_t SessionCliTest::bystanderObject = 0;

#define EXPECT_CONTAINS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST_F(SessionCliTest, StatusListsSessionsWithTheirCounts) {
  auto r = squall("status");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "done-session");
  EXPECT_CONTAINS(r.out, "failed-session");
  EXPECT_CONTAINS(r.out, "bystander");
}

TEST_F(SessionCliTest, StatusOfAFinishedSessionByNameAndId) {
  auto r = squall("status done-session");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "(done-session): open");
  EXPECT_CONTAINS(r.out, "0 running, 2 finished, 0 failed");
  auto byId = squall("status " + std::to_string(done->id()));
  EXPECT_EQ(byId.status, 0) << byId.err;
  EXPECT_EQ(byId.out, r.out);
}

TEST_F(SessionCliTest, StatusOfAFailedSessionShowsTheErrorAndStderr) {
  auto r = squall("status failed-session");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "(failed-session): failed");
  EXPECT_CONTAINS(r.out, "breaker");
  EXPECT_CONTAINS(r.out, "exited with status 3");
  EXPECT_CONTAINS(r.out, "| oops");
}

TEST_F(SessionCliTest, WaitExitsZeroWhenFinishedAndOneWithTheFailure) {
  auto r = squall("wait done-session");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "2 tasks finished");
  r = squall("wait failed-session");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.err, "breaker");
  EXPECT_CONTAINS(r.err, "oops");
}

TEST_F(SessionCliTest, FetchWritesBlobsAndUnpacksDirs) {
  auto r = squall("fetch done-session " + std::to_string(blobObject) + " -o blob.txt");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(slurp(dir / "blob.txt"), "kept bytes\n");
  r = squall("fetch done-session " + std::to_string(blobObject));
  EXPECT_EQ(r.out, "kept bytes\n");
  r = squall("fetch " + std::to_string(done->id()) + " " + std::to_string(dirObject) + " -o unpacked");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(slurp(dir / "unpacked" / "a.txt"), "x\n");
  // Without -o a dir comes as a tar archive on stdout.
  r = squall("fetch done-session " + std::to_string(dirObject) + " | tar tf -");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "a.txt");
  r = squall("fetch done-session nonsense -o x");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.err, "object id");
}

TEST_F(SessionCliTest, LogsShowATasksOutputTailsAndStatus) {
  auto r = squall("logs done-session talker");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "talker (execute): finished");
  EXPECT_CONTAINS(r.out, "exit status: 0");
  EXPECT_CONTAINS(r.out, "governor: ");
  EXPECT_CONTAINS(r.out, "duration: ");
  EXPECT_CONTAINS(r.out, "--- stdout (tail) ---\nto-stdout\n");
  EXPECT_CONTAINS(r.out, "--- stderr (tail) ---\nto-stderr\n");
  r = squall("logs failed-session breaker");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "exit status: 3");
  EXPECT_CONTAINS(r.out, "error: ");
  EXPECT_CONTAINS(r.out, "oops");
  r = squall("logs done-session dir-maker");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "output: " + std::to_string(dirObject) + " dir finished, 2 bytes, xxh3 ");
  EXPECT_CONTAINS(r.out, ", kept, on ");
  r = squall("logs done-session no-such-task");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.err, "no task 'no-such-task'");
}

TEST_F(SessionCliTest, UnknownSessionIsAClearError) {
  for (auto command : {"status", "wait", "cancel"}) {
    auto r = squall(std::string(command) + " no-such-session");
    EXPECT_EQ(r.status, 1) << command;
    EXPECT_CONTAINS(r.err, "no-such-session");
  }
  auto r = squall("status --server 127.0.0.1:1");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.err, "cannot connect");
  // `wait` tries a server that is not up for the reconnect timeout, then
  // says how long it tried.
  r = squall("wait 1 --server 127.0.0.1:1", "SQUALL_RECONNECT_TIMEOUT=0.5");
  EXPECT_EQ(r.status, 1);
  EXPECT_CONTAINS(r.err, "cannot connect to the squall server at 127.0.0.1:1");
  EXPECT_CONTAINS(r.err, "(tried for 0.5 s)");
}

TEST_F(SessionCliTest, CancelFailsThatSessionOnly) {
  Session busy = client->newSession("busy-session");
  busy.execute(Program({"sleep", "600"}).name("sleeper"));
  busy.submit();
  auto r = squall("cancel busy-session");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "cancelled session " + std::to_string(busy.id()));
  EXPECT_THROW(busy.waitAll(), TaskFailed);
  r = squall("wait " + std::to_string(busy.id()));
  EXPECT_EQ(r.status, 1);
  // The finished session is untouched.
  EXPECT_EQ(squall("wait done-session").status, 0);
}

// Opens a FIFO without blocking: for reading (no writer yet), or read-write
// (Linux: never blocks, and keeps written bytes until a reader comes).
int openFifo(const fs::path& path, int flags) {
  if (mkfifo(path.c_str(), 0600) != 0) return -1;
  return open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC);
}

TEST_F(SessionCliTest, SessionCommandsFollowALiveRun) {
  auto started = dir / "started";
  auto gate = dir / "gate";
  int startedFd = openFifo(started, O_RDONLY);
  ASSERT_GE(startedFd, 0) << strerror(errno);
  int gateFd = openFifo(gate, O_RDWR);
  ASSERT_GE(gateFd, 0) << strerror(errno);
  std::ofstream(dir / "live.toml")
      << "name = \"live-run\"\n"
         "[step.held]\n"
         "shell = \"echo started > " << started.string() << "; read line < " << gate.string()
      << "; echo through $line\"\n"
         "stdout = true\n"
         "[step.after]\n"
         "command = [\"cat\"]\n"
         "stdin = \"@held\"\n"
         "stdout = true\n"
         "collect = \"after.txt\"\n";
  ChildProcess run(findProgram("squall"),
                   {"run", "--server", cluster->serverAddress(), (dir / "live.toml").string()});

  // The held task has started once it writes to `started`.
  struct pollfd fd = {startedFd, POLLIN, 0};
  ASSERT_EQ(poll(&fd, 1, 60000), 1) << "the held task never started";

  auto r = squall("status");
  EXPECT_CONTAINS(r.out, "live-run");
  r = squall("status live-run");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "(live-run): running");
  EXPECT_CONTAINS(r.out, "1 waiting, 0 ready, 1 running, 0 finished");
  EXPECT_CONTAINS(r.out, "running: held (task ");
  r = squall("logs live-run held");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "held (execute): running");

  // Open the gate; the run finishes, collects and exits 0.
  ASSERT_EQ(write(gateFd, "go\n", 3), 3);
  ASSERT_TRUE(run.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(60)));
  auto status = run.poll();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  EXPECT_EQ(slurp(dir / "after.txt"), "through go\n");
  close(startedFd);
  close(gateFd);
  // Its session closed with it; status still says how it went.
  r = squall("status live-run");
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "(live-run): closed\n");
  EXPECT_CONTAINS(r.out, "0 waiting, 0 ready, 0 running, 2 finished, 0 failed");
  r = squall("logs live-run held");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "held (execute): finished");
}

TEST_F(SessionCliTest, AClosedSessionShowsItsFailuresAndRefusesWhatNeedsItOpen) {
  uint64_t id = 0;
  {
    Session doomed = client->newSession("closed-failed");
    doomed.execute(Program::shell("echo gone-wrong >&2; exit 4").name("crasher"));
    doomed.execute(Program({"sleep", "600"}).name("sleeper"));
    doomed.submit();
    EXPECT_THROW(doomed.waitAll(), TaskFailed);
    id = doomed.id();
    doomed.close();
  }
  auto r = squall("status " + std::to_string(id));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_CONTAINS(r.out, "(closed-failed): failed (closed)");
  EXPECT_CONTAINS(r.out, "failure: task ");
  EXPECT_CONTAINS(r.out, "crasher (task ");
  EXPECT_CONTAINS(r.out, "| gone-wrong");
  EXPECT_EQ(r.out.find("running:"), std::string::npos) << r.out;
  // What needs the session open says it is closed.
  for (auto command : {"wait", "cancel"}) {
    r = squall(std::string(command) + " " + std::to_string(id));
    EXPECT_EQ(r.status, 1) << command;
    EXPECT_CONTAINS(r.err, "session " + std::to_string(id) + " is closed");
  }
  // The list shows open sessions only.
  EXPECT_EQ(squall("status").out.find("closed-failed"), std::string::npos);
  // Closing it again (a client retrying after a reconnect) is no error.
  EXPECT_NO_THROW(client->attach(id).close());
}

}  // namespace
}  // namespace squall
