// The squall command line against real processes.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>
#include <squall/proto/version.h>
#include <squall/wire/common.capnp.h>

#include "command-output.h"
#include "isolation-probe.h"
#include "test-executor.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cluster = startCluster(2, 2);
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void SetUp() override {
    dir = fs::temp_directory_path() / ("squall-cli-" + std::to_string(getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }

  // Runs `squall ARGS` through sh (stdout/stderr into files); returns the
  // exit status.
  int squall(const std::string& args) {
    std::string command = "cd '" + dir.string() + "' && SQUALL_SERVER=" + cluster->serverAddress() +
                          " '" + findProgram("squall") + "' " + args + " >stdout.txt 2>stderr.txt";
    int status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  static LocalCluster* cluster;
  fs::path dir;
};
LocalCluster* CliTest::cluster = nullptr;

TEST_F(CliTest, SubmitWritesStdoutToAFile) {
  EXPECT_EQ(squall("submit --stdout out.txt -- sh -c 'echo hello'"), 0) << slurp(dir / "stderr.txt");
  EXPECT_EQ(slurp(dir / "out.txt"), "hello\n");
}

TEST_F(CliTest, SubmitPrintsStdoutAndMapsInputsAndOutputs) {
  std::ofstream(dir / "words.txt") << "b\na\n";
  std::ofstream(dir / "extra.txt") << "c\n";
  EXPECT_EQ(squall("submit --stdin words.txt --input more/extra.txt=extra.txt "
                   "--output sorted.txt=result.txt --shell -- "
                   "'cat - more/extra.txt | sort > sorted.txt; echo done'"),
            0)
      << slurp(dir / "stderr.txt");
  EXPECT_EQ(slurp(dir / "stdout.txt"), "done\n");
  EXPECT_EQ(slurp(dir / "result.txt"), "a\nb\nc\n");
}

TEST_F(CliTest, SubmitChangesInputsInPlaceOrInWritableCopies) {
  std::ofstream(dir / "notes.txt") << "colour\n";
  fs::create_directories(dir / "book");
  std::ofstream(dir / "book" / "ch1.txt") << "one\n";
  std::ofstream(dir / "book" / "ch2.txt") << "two\n";
  // An --output at an --input's path: that input changed in place.
  EXPECT_EQ(squall("submit --input notes.txt=notes.txt --output notes.txt=fixed.txt "
                   "--input book=book --output book/=bound "
                   "--input-rw scratch=notes.txt --shell -- "
                   "'sed -i s/colour/color/ notes.txt && cat book/*.txt > book/all.txt && rm book/ch2.txt "
                   "&& echo more >> scratch && wc -l < scratch'"),
            0)
      << slurp(dir / "stderr.txt");
  EXPECT_EQ(slurp(dir / "stdout.txt"), "2\n");
  EXPECT_EQ(slurp(dir / "fixed.txt"), "color\n");
  EXPECT_EQ(slurp(dir / "bound" / "all.txt"), "one\ntwo\n");
  EXPECT_EQ(slurp(dir / "bound" / "ch1.txt"), "one\n");
  EXPECT_FALSE(fs::exists(dir / "bound" / "ch2.txt"));
  // The local files are what they were.
  EXPECT_EQ(slurp(dir / "notes.txt"), "colour\n");
  EXPECT_TRUE(fs::exists(dir / "book" / "ch2.txt"));
  // A read-only input stays read-only: writing to it fails the program
  // (mount mode; where the governor copies inputs, root may write its copy).
  if (!mountIsolationProblem().empty()) {
    GTEST_SKIP() << "no mount mode here, so root writes its copy: " << mountIsolationProblem();
  }
  EXPECT_NE(squall("submit --input notes.txt=notes.txt --shell -- 'echo more >> notes.txt'"), 0);
  EXPECT_NE(slurp(dir / "stderr.txt").find("notes.txt"), std::string::npos) << slurp(dir / "stderr.txt");
}

TEST_F(CliTest, FailingProgramGivesItsStatusAndAClearMessage) {
  EXPECT_EQ(squall("submit -- false"), 1);
  auto err = slurp(dir / "stderr.txt");
  EXPECT_NE(err.find("exited with status 1"), std::string::npos) << err;
  EXPECT_EQ(squall("submit --shell -- 'echo broken >&2; exit 7'"), 7);
  err = slurp(dir / "stderr.txt");
  EXPECT_NE(err.find("broken"), std::string::npos) << err;
}

TEST_F(CliTest, BadArgumentsAreClearErrors) {
  EXPECT_NE(squall("submit --input nonsense -- true"), 0);
  EXPECT_NE(slurp(dir / "stderr.txt").find("PATH=FILE"), std::string::npos);
  EXPECT_NE(squall("submit --input-rw nonsense -- true"), 0);
  EXPECT_NE(slurp(dir / "stderr.txt").find("--input-rw takes PATH=FILE"), std::string::npos);
  std::ofstream(dir / "d.txt") << "x\n";
  EXPECT_NE(squall("submit --input d=d.txt --output d/=out -- true"), 0);
  EXPECT_NE(slurp(dir / "stderr.txt").find("so it must be a blob like the input, not a dir"), std::string::npos)
      << slurp(dir / "stderr.txt");
  EXPECT_NE(squall("submit --stdin /no/such/file -- cat"), 0);
  EXPECT_NE(slurp(dir / "stderr.txt").find("/no/such/file"), std::string::npos);
  EXPECT_NE(squall("submit --server 127.0.0.1:1 -- true"), 0);
  EXPECT_NE(slurp(dir / "stderr.txt").find("cannot connect"), std::string::npos);
  EXPECT_NE(squall("submit --server nonsense -- true"), 0);
  EXPECT_NE(slurp(dir / "stderr.txt").find("host:port"), std::string::npos);
}

// Everything after `--` is the program's, whatever option came before it
// (a list option such as --input used to swallow the `--`).
TEST_F(CliTest, EveryOptionBeforeDashDashLeavesTheProgramItsDashArguments) {
  std::ofstream(dir / "in.txt") << "x\n";
  const std::string program = " -- sh -c 'touch o; printf \"%s,\" \"$@\"' sh -l --dash -- -n";
  const std::string expected = "-l,--dash,--,-n,";
  std::vector<std::pair<std::string, std::string>> options = {
      {"--server", cluster->serverAddress()}, {"--stdin", "in.txt"}, {"--input", "a=in.txt"},
      {"--input", "a=in.txt --input b=in.txt"}, {"--output", "o=result.txt"},
      {"--cpus", "1"},  {"--name", "dashes"}, {"--stdout", "out.txt"}};
  for (auto& [option, value] : options) {
    SCOPED_TRACE(option + " " + value);
    fs::remove(dir / "out.txt");
    ASSERT_EQ(squall("submit " + option + " " + value + program), 0) << slurp(dir / "stderr.txt");
    EXPECT_EQ(slurp(dir / (option == "--stdout" ? "out.txt" : "stdout.txt")), expected);
  }
  EXPECT_TRUE(fs::exists(dir / "result.txt"));
  // A flag, and arguments before `--` as well as after it.
  ASSERT_EQ(squall("submit --shell -- 'printf \"%s,\" -x --y'"), 0)
      << slurp(dir / "stderr.txt");
  EXPECT_EQ(slurp(dir / "stdout.txt"), "-x,--y,");
  ASSERT_EQ(squall("submit --name n echo -- -n hi"), 0) << slurp(dir / "stderr.txt");
  EXPECT_EQ(slurp(dir / "stdout.txt"), "hi");
  // No program at all is a clear error.
  EXPECT_EQ(squall("submit --input a=in.txt --"), 1);
  EXPECT_NE(slurp(dir / "stderr.txt").find("no program given"), std::string::npos);
}

// Holds a listening socket on 127.0.0.1:PORT if the port is free; if it is
// not, something else listens there already, which is what the caller wants.
class PortHolder {
 public:
  explicit PortHolder(uint16_t port) {
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      ::listen(fd, 1);
    }
  }
  ~PortHolder() {
    if (fd >= 0) ::close(fd);
  }

 private:
  int fd;
};

// Issue 41 point 11: every program says its release and the protocol it
// speaks (the flag was "unexpected").
TEST(CliVersionTest, EveryProgramPrintsItsReleaseAndProtocol) {
  for (const char* program : {"squall", "squall-server", "squall-governor"}) {
    auto [out, status] = commandOutput("'" + findProgram(program) + "' --version 2>&1");
    EXPECT_EQ(status, 0) << program << ": " << out;
    EXPECT_EQ(out, versionText(program) + "\n");
    EXPECT_NE(out.find("(protocol " + std::to_string(wire::PROTOCOL_VERSION) + ")"), std::string::npos) << out;
  }
}

TEST(CliStartTest, StartRunsAClusterAndCtrlCStopsEverything) {
  // The defaults (7210, 7222) are taken, as when the user runs a squall of
  // their own: the test asks for free ports and does not care.
  PortHolder server(7210), page(7222);
  ChildProcess start(findProgram("squall"), {"start", "--governors", "2", "--listen", "127.0.0.1:0",
                                             "--http", "127.0.0.1:0", "--cpus", "1"});
  auto line = start.expectLine("squall is running: server=", std::chrono::seconds(30));
  auto address = line.substr(line.find('=') + 1, line.find(' ', line.find('=')) - line.find('=') - 1);
  std::string command = "SQUALL_SERVER=" + address + " '" + findProgram("squall") +
                        "' submit -- sh -c 'echo hi' >/dev/null";
  EXPECT_EQ(std::system(command.c_str()), 0);
  start.signal(SIGINT);
  EXPECT_TRUE(start.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  auto status = start.poll();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);
  // Nothing is left listening: the server went with it.
  EXPECT_NE(std::system(command.c_str()), 0);
}

// Every governor of `squall start` keeps the executors it is given: two
// calls that never end, on two governors of one cpu each, run at once only
// if both governors offer the function.
TEST(CliStartTest, StartGivesEveryGovernorItsExecutors) {
  // A relative program path works, though governors start executors in
  // their own work dirs.
  auto program = fs::relative(testExecutor(), fs::current_path()).string();
  if (program.find('/') == std::string::npos) program = "./" + program;
  ChildProcess start(findProgram("squall"), {"start", "--governors", "2", "--listen", "127.0.0.1:0", "--http",
                                             "off", "--cpus", "1", "--executor", "testfn=" + program});
  auto line = start.expectLine("squall is running: server=", std::chrono::seconds(30));
  auto address = line.substr(line.find('=') + 1, line.find(' ', line.find('=')) - line.find('=') - 1);
  {
    Client client(address);
    auto session = client.newSession("spin on both");
    auto first = session.call("testfn/spin");
    auto second = session.call("testfn/spin");
    session.submit();
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (session.state().running < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the server, not waiting for a guess
    }
    EXPECT_EQ(session.state().running, 2u);
    EXPECT_NE(first.info().governor, second.info().governor);
    session.cancel();
  }
  start.signal(SIGINT);
  EXPECT_TRUE(start.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  auto status = start.poll();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0);

  // What is not NAME=PROGRAM starts nothing; what the governors refuse
  // stops it, saying why.
  auto squall = "'" + findProgram("squall") + "' start --listen 127.0.0.1:0 --http off ";
  auto [bad, badStatus] = commandOutput(squall + "--executor testfn 2>&1");
  EXPECT_EQ(badStatus, 2);
  EXPECT_EQ(bad, "squall start: --executor takes NAME=PROGRAM (got 'testfn')\n");
  auto [misnamed, misnamedStatus] = commandOutput(squall + "--executor other=" + testExecutor() + " 2>&1");
  EXPECT_EQ(misnamedStatus, 1);
  EXPECT_NE(misnamed.find("calls itself 'testfn'"), std::string::npos) << misnamed;
  EXPECT_NE(misnamed.find("squall start: squall-governor exited before saying 'registered governor='"),
            std::string::npos)
      << misnamed;
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// The child of `parent` running `program` whose command line holds `word`
// (read from /proc); -1 when there is none.
pid_t childRunning(pid_t parent, const std::string& program, const std::string& word) {
  for (auto& entry : fs::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    std::getline(stat, line);
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid != parent) continue;
    std::ifstream in(entry.path() / "cmdline");
    std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(program) != std::string::npos && cmdline.find(word) != std::string::npos) {
      return std::stoi(name);
    }
  }
  return -1;
}

// Issue 41: one part's death stopped `squall start` whole, and without
// --work-dir its session log went with its temp dir. Now a governor or the
// server that dies is started again, and the log is kept in the state dir,
// so the restarted server carries the sessions on.
TEST(CliStartTest, AGovernorOrTheServerThatDiesIsStartedAgainOnTheKeptLog) {
  ChildProcess start("/bin/sh", {"-c", "exec '" + findProgram("squall") +
                                           "' start --governors 2 --cpus 1 --listen 127.0.0.1:0 --http off "
                                           "--resource widgets=3 2>&1"});
  auto line = start.expectLine("squall is running: server=", std::chrono::seconds(30));
  auto address = line.substr(line.find('=') + 1, line.find(' ', line.find('=')) - line.find('=') - 1);
  auto workDir = line.substr(line.find("work-dir=") + 9);
  auto state = getenv("XDG_STATE_HOME");
  ASSERT_NE(state, nullptr);
  EXPECT_EQ(workDir, std::string(state) + "/squall/start");
  EXPECT_EQ(start.expectLine("session log: ", std::chrono::seconds(5)),
            "session log: " + workDir + "/server.sqlite (kept: squall start with this work dir carries on its "
            "sessions)");
  // A second squall start of this user would wipe the first's governors:
  // it is refused (the work dir is locked), and the first goes on.
  auto [second, secondStatus] = commandOutput("'" + findProgram("squall") +
                                              "' start --listen 127.0.0.1:0 --http off 2>&1");
  EXPECT_EQ(secondStatus, 1) << second;
  EXPECT_EQ(second, "squall start: another squall start uses " + workDir +
                        "; give this one a --work-dir of its own\n");
  Client client(address);
  auto session = client.newSession("through restarts");
  auto before = session.execute(Program::shell("echo before").stdoutOutput());
  before.output().keep();
  session.submit();
  EXPECT_EQ(before.output().fetch(), "before\n");

  pid_t governor = childRunning(start.pid(), "squall-governor", "--name governor-0");
  ASSERT_GT(governor, 0);
  ::kill(governor, SIGKILL);
  EXPECT_NO_THROW(start.expectLine("squall start: governor-0 was killed by Killed; starting it again",
                                   std::chrono::seconds(30)));
  EXPECT_NO_THROW(start.expectLine("squall start: governor-0 is running again", std::chrono::seconds(30)));
  auto governors = client.governors();
  ASSERT_EQ(governors.size(), 2u);
  // --resource reached both, the one started again too.
  for (auto& g : governors) EXPECT_EQ(g.resources["widgets"].first, 3) << g.name;

  pid_t server = childRunning(start.pid(), "squall-server", "--listen");
  ASSERT_GT(server, 0);
  ::kill(server, SIGKILL);
  EXPECT_NO_THROW(start.expectLine("squall start: the server was killed by Killed; starting it again",
                                   std::chrono::seconds(30)));
  EXPECT_NO_THROW(start.expectLine("squall start: the server is running again", std::chrono::seconds(30)));
  // The session goes on from the log: what it made before, and new work.
  EXPECT_EQ(before.output().fetch(), "before\n");
  auto after = session.execute(Program::shell("echo after").stdoutOutput());
  after.output().keep();
  session.submit();
  EXPECT_EQ(after.output().fetch(), "after\n");
  session.close();

  start.signal(SIGINT);
  EXPECT_TRUE(start.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  auto status = start.poll();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << describeStatus(*status);
  EXPECT_TRUE(fs::exists(workDir + "/server.sqlite"));
}

}  // namespace
}  // namespace squall
