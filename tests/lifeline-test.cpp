// A cluster's squall-server and squall-governor processes die with the
// process that started them, however it ends, and the lifeline that tells
// them so reaches no task program.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <poll.h>
#include <sstream>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
extern "C" {  // glibc 2.36 forgot the C linkage markers in this header
#include <sys/pidfd.h>
}

namespace squall {
namespace {

namespace fs = std::filesystem;

// Reads what the starter child wrote until it closes its end or `timeout`.
std::string readAll(int fd, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string text;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return text;
    struct pollfd p = {fd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) return text;
    char buffer[256];
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n <= 0) return text;
    text.append(buffer, n);
    if (text.find('\n') != std::string::npos) return text;
  }
}

TEST(LifelineTest, ServerAndGovernorsDieWhenTheProcessThatStartedThemIsKilled) {
  auto work = fs::temp_directory_path() / ("squall-lifeline-" + std::to_string(getpid()));
  fs::remove_all(work);
  fs::create_directories(work);
  int report[2];
  ASSERT_EQ(pipe2(report, O_CLOEXEC), 0);

  // The starter: a child of ours that starts a cluster, says its pids and
  // waits to be killed.
  pid_t starter = fork();
  ASSERT_GE(starter, 0);
  if (starter == 0) {
    close(report[0]);
    std::string line;
    try {
      ClusterOptions options;
      options.governors = 2;
      options.cpus = 1;
      options.http = "off";
      options.workDir = work.string();
      // Not destroyed: the process is killed with it running.
      auto* cluster = new LocalCluster(options);
      cluster->start();
      line = std::to_string(cluster->server().pid()) + " " + std::to_string(cluster->governor(0).pid()) +
             " " + std::to_string(cluster->governor(1).pid()) + "\n";
    } catch (const std::exception& e) {
      line = std::string("error ") + e.what() + "\n";
    }
    if (write(report[1], line.data(), line.size()) != ssize_t(line.size())) _exit(1);
    for (;;) pause();
  }
  close(report[1]);
  auto line = readAll(report[0], std::chrono::seconds(120));
  close(report[0]);
  std::istringstream words(line);
  std::vector<pid_t> pids;
  pid_t pid;
  while (words >> pid) pids.push_back(pid);
  if (pids.size() != 3) {
    kill(starter, SIGKILL);
    waitpid(starter, nullptr, 0);
    fs::remove_all(work);
    FAIL() << "the starter did not start its cluster: " << line;
  }
  std::vector<int> exits;
  for (auto p : pids) {
    int fd = pidfd_open(p, 0);
    ASSERT_GE(fd, 0) << "process " << p << " is not running";
    exits.push_back(fd);
  }

  ASSERT_EQ(kill(starter, SIGKILL), 0);
  int status;
  ASSERT_EQ(waitpid(starter, &status, 0), starter);
  ASSERT_TRUE(WIFSIGNALED(status));

  // Each pidfd turns readable as its process exits. They shut down as on
  // SIGTERM: the governors kill their tasks, the server flushes its log.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::vector<struct pollfd> waiting;
  for (int fd : exits) waiting.push_back({fd, POLLIN, 0});
  const char* names[] = {"the server", "governor-0", "governor-1"};
  std::string alive;
  for (size_t i = 0; i < waiting.size(); i++) {
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      int rc = ::poll(&waiting[i], 1, static_cast<int>(std::max<int64_t>(0, left.count())));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) alive += std::string(" ") + names[i] + " (pid " + std::to_string(pids[i]) + ")";
      break;
    }
  }
  EXPECT_EQ(alive, "") << "still running 30 s after their starter was killed";
  for (int fd : exits) {
    // Whatever is left goes now, or it would outlive the test.
    syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0);
    close(fd);
  }
  fs::remove_all(work);
}

TEST(LifelineTest, TaskProgramsDoNotInheritIt) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  options.http = "off";
  LocalCluster cluster(options);
  cluster.start();
  struct stat st;
  ASSERT_EQ(fstat(cluster.lifelineFd(), &st), 0);
  auto lifeline = "pipe:[" + std::to_string(st.st_ino) + "]";

  std::string listing;
  {
    Client client(cluster.serverAddress());
    auto session = client.newSession("lifeline");
    // What every descriptor of the task's shell refers to.
    auto task = session.execute(
        Program::shell("for f in /proc/$$/fd/*; do echo \"$f $(readlink $f)\"; done").stdoutOutput());
    task.output().keep();
    session.submit();
    listing = task.output().fetch();
  }
  EXPECT_NE(listing.find("/fd/1 "), std::string::npos) << listing;
  EXPECT_EQ(listing.find(lifeline), std::string::npos) << "the task holds " << lifeline << ":\n" << listing;
  EXPECT_EQ(cluster.stop(), "");
}

// A process started under a wrap (ClusterOptions::serverWrap; `ip netns
// exec` for the multi-host tests, `env` here, as it needs no root) is the
// program itself: the pid the cluster holds is the program's, it holds the
// lifeline under the number it was told, and SIGTERM stops it cleanly.
TEST(LifelineTest, AWrappedProcessIsTheProgramAndHoldsTheLifeline) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  options.http = "off";
  options.serverWrap = {"env", "SQUALL_WRAPPED=1"};
  options.governorWrapEach = {{"env", "SQUALL_WRAPPED=1"}};
  LocalCluster cluster(options);
  cluster.start();
  struct stat st;
  ASSERT_EQ(fstat(cluster.lifelineFd(), &st), 0);
  auto lifeline = "pipe:[" + std::to_string(st.st_ino) + "]";
  std::pair<pid_t, const char*> processes[] = {{cluster.server().pid(), "squall-server"},
                                               {cluster.governor(0).pid(), "squall-governor"}};
  for (auto [pid, program] : processes) {
    auto proc = fs::path("/proc") / std::to_string(pid);
    EXPECT_EQ(fs::read_symlink(proc / "exe").filename(), program);
    EXPECT_EQ(fs::read_symlink(proc / "fd" / std::to_string(cluster.lifelineFd())).string(), lifeline)
        << program;
  }
  Client client(cluster.serverAddress());
  auto session = client.newSession("wrapped");
  auto task = session.execute(Program::shell("echo $SQUALL_WRAPPED").stdoutOutput());
  task.output().keep();
  session.submit();
  EXPECT_EQ(task.output().fetch(), "1\n");
  session.close();
  EXPECT_EQ(cluster.stop(), "");
}

TEST(LifelineTest, ABadDescriptorIsAClearError) {
  // 900: no descriptor of a test process is open under that number.
  std::pair<const char*, const char*> runs[] = {
      {"squall-server", " --log off --listen 127.0.0.1:0 --http off --lifeline-fd 900 2>&1"},
      {"squall-governor", " --server 127.0.0.1:1 --lifeline-fd 900 2>&1"}};
  for (auto [program, args] : runs) {
    FILE* out = popen((findProgram(program) + args).c_str(), "r");
    ASSERT_NE(out, nullptr);
    std::string text;
    char buffer[512];
    while (fgets(buffer, sizeof(buffer), out) != nullptr) text += buffer;
    int status = pclose(out);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << program << ": " << text;
    EXPECT_NE(text.find(std::string(program) + ": bad --lifeline-fd 900: not an open descriptor"),
              std::string::npos)
        << text;
  }
}

}  // namespace
}  // namespace squall
