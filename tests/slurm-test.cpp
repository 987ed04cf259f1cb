// squall on a real Slurm (issue 17): a single-node Slurm of the test's own
// (tests/slurm-cluster.h) runs `squall slurm run` in a batch job, and
// `squall slurm auto` submits governor jobs to it, backs off from a job
// whose governor cannot start, and lets idle governors go. Skipped, saying
// why, where Slurm's daemons cannot run (not root, not installed).
#include "slurm-cluster.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

namespace squall {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// The next line `process` prints that contains `text`; throws with what it
// printed meanwhile when it ends or `timeout` passes first.
std::string lineContaining(ChildProcess& process, const std::string& text, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string seen;
  while (Clock::now() < deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto line = process.readLine(left);
    if (!line) break;
    if (line->find(text) != std::string::npos) return *line;
    seen += *line + "\n";
  }
  throw std::runtime_error("no line with '" + text + "'; it printed:\n" + seen);
}

// The number after `word` in `line` ("job 12 submitted" -> 12).
uint64_t numberAfter(const std::string& line, const std::string& word) {
  std::smatch match;
  if (!std::regex_search(line, match, std::regex(word + " ([0-9]+)"))) {
    throw std::runtime_error("no number after '" + word + "' in: " + line);
  }
  return std::stoull(match[1]);
}

// The server and the governors on loopback rather than this host's name
// (squall slurm's default, right on a cluster): a fresh root (a chroot
// with no /etc/hosts) may not resolve it, and the tests' traffic stays on
// 127.0.0.1 that way.
constexpr const char* LOOPBACK = "--listen 127.0.0.1:0 --governor-arg=--listen=127.0.0.1:0";

// Processes of this machine running the governor of Slurm job `job`
// (its --name says which job it serves), read from /proc: procps need
// not be installed.
std::vector<std::string> governorsOfJob(uint64_t job) {
  std::vector<std::string> found;
  auto name = "slurm-" + std::to_string(job) + "-";
  std::error_code ec;
  for (auto& entry : fs::directory_iterator("/proc", ec)) {
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), {});
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find("--name " + name) != std::string::npos) found.push_back(cmdline);
  }
  return found;
}

class SlurmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto why = SlurmCluster::unavailable()) GTEST_SKIP() << "no real Slurm here: " << *why;
    slurm = std::make_unique<SlurmCluster>();
  }

  // Waits (bounded) until Slurm says job `id` has ended; its final state.
  std::string waitJobEnd(uint64_t id, std::chrono::seconds timeout = 90s) {
    auto deadline = Clock::now() + timeout;
    std::string state;
    while (Clock::now() < deadline) {
      state = slurm->jobState(id);
      if (state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING") return state;
      std::this_thread::sleep_for(100ms);
    }
    return "still " + state + " after " + std::to_string(timeout.count()) + " s";
  }

  std::unique_ptr<SlurmCluster> slurm;
};

// Issue 17's first mode, as a user writes it: an sbatch script whose one
// line is `squall slurm run -- squall run PIPELINE`. The server starts on
// the job's node, a governor per node through srun, the pipeline runs
// there (its tasks see the job's environment), and everything is gone when
// the job ends.
TEST_F(SlurmTest, SlurmRunInABatchJobRunsAPipelineOnTheJobsNodes) {
  auto dir = fs::path(slurm->jobsDir()) / "run";
  fs::create_directories(dir);
  std::ofstream(dir / "pipeline.toml") << "name = \"on-slurm\"\n"
                                          "[step.where]\n"
                                          "shell = 'echo \"job=$SLURM_JOB_ID step=$SLURM_STEP_ID\"'\n"
                                          "stdout = true\n"
                                          "collect = \"out/where.txt\"\n"
                                          "[step.words]\n"
                                          "shell = \"printf 'pear\\\\napple\\\\nfig\\\\n' | sort\"\n"
                                          "stdout = true\n"
                                          "[step.count]\n"
                                          "shell = \"wc -l < words.txt > count.txt\"\n"
                                          "inputs = { \"words.txt\" = \"@words\" }\n"
                                          "outputs = { count = \"count.txt\" }\n"
                                          "collect = \"out/count.txt\"\n";
  auto squall = findProgram("squall");
  std::ofstream(dir / "job.sh") << "#!/bin/sh\nexec " << shellQuote(squall) << " slurm run " << LOOPBACK << " -- "
                                << shellQuote(squall) << " run " << shellQuote((dir / "pipeline.toml").string())
                                << "\n";
  auto [submitted, status] = commandOutput("sbatch --parsable --nodes=1 --time=5 --output='" + (dir / "job.out").string() +
                                           "' '" + (dir / "job.sh").string() + "' 2>&1");
  ASSERT_EQ(status, 0) << submitted;
  uint64_t job = std::stoull(submitted);

  EXPECT_EQ(waitJobEnd(job), "COMPLETED") << slurm->logs();
  std::string output;
  {
    std::ifstream in(dir / "job.out");
    output.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(output.find("squall is running in Slurm job " + std::to_string(job) + ": server="), std::string::npos)
      << output;
  EXPECT_NE(output.find("governors=1 nodes=" + slurm->nodeName()), std::string::npos) << output;
  std::string where, count;
  std::getline(std::ifstream(dir / "out" / "where.txt"), where);
  std::getline(std::ifstream(dir / "out" / "count.txt"), count);
  // The governor ran in the job's first srun step.
  EXPECT_EQ(where, "job=" + std::to_string(job) + " step=0") << output;
  EXPECT_EQ(count, "3") << output;
  // Its governor went with the job: squall slurm run waits for it.
  EXPECT_EQ(governorsOfJob(job), std::vector<std::string>{});
}

// Without a command it serves until the allocation ends: here scancel,
// which is what the end of a time limit sends too (SIGTERM to every
// process of the job). The server and the governor go with it.
TEST_F(SlurmTest, SlurmRunServesUntilItsJobIsCancelled) {
  auto dir = fs::path(slurm->jobsDir()) / "serve";
  fs::create_directories(dir);
  std::ofstream(dir / "job.sh") << "#!/bin/sh\nexec " << shellQuote(findProgram("squall")) << " slurm run "
                                << LOOPBACK << "\n";
  auto output = (dir / "job.out").string();
  auto [submitted, status] =
      commandOutput("sbatch --parsable --time=5 --output='" + output + "' '" + (dir / "job.sh").string() + "' 2>&1");
  ASSERT_EQ(status, 0) << submitted;
  uint64_t job = std::stoull(submitted);
  // Its output file is all it says: look, bounded.
  std::string running;
  auto deadline = Clock::now() + 60s;
  while (running.empty() && Clock::now() < deadline) {
    std::ifstream in(output);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("squall is running in Slurm job", 0) == 0) running = line;
    }
    if (running.empty()) std::this_thread::sleep_for(100ms);
  }
  ASSERT_FALSE(running.empty()) << slurm->jobState(job) << "\n" << slurm->logs();
  auto at = running.find("server=") + 7;
  auto address = running.substr(at, running.find(' ', at) - at);
  {
    // The default token file (test-main's state dir, which the job's
    // environment carries).
    Client client(address);
    auto governors = client.governors();
    ASSERT_EQ(governors.size(), 1u);
    EXPECT_EQ(governors[0].name, "slurm-" + std::to_string(job) + "-" + slurm->nodeName());
    // --governor-arg=--listen=... took the place of the node's name.
    EXPECT_EQ(governors[0].dataAddress.rfind("127.0.0.1:", 0), 0u) << governors[0].dataAddress;
    auto session = client.newSession("served");
    auto task = session.execute(Program({"sh", "-c", "echo $SLURM_JOB_ID"}).stdoutOutput());
    task.output().keep();
    session.submit();
    EXPECT_EQ(task.output().fetch(), std::to_string(job) + "\n");
  }
  EXPECT_EQ(governorsOfJob(job).size(), 1u);
  ASSERT_EQ(commandOutput("scancel " + std::to_string(job)).second, 0);
  EXPECT_EQ(waitJobEnd(job), "CANCELLED");
  // The governor went with it. Polled, bounded: Slurm may call the job
  // ended while a process of it still exits.
  deadline = Clock::now() + 30s;
  while (!governorsOfJob(job).empty() && Clock::now() < deadline) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(governorsOfJob(job), std::vector<std::string>{});
  std::string text;
  {
    std::ifstream in(output);
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  EXPECT_NE(text.find("squall slurm run: stopping (Terminated)"), std::string::npos) << text;
}

// Outside an allocation there is nothing to run on: a clear refusal.
TEST(SlurmCommandTest, SlurmRunOutsideAnAllocationSaysSo) {
  auto [output, status] =
      commandOutput("env -u SLURM_JOB_ID '" + findProgram("squall") + "' slurm run -- true 2>&1");
  EXPECT_EQ(status, 2);
  EXPECT_NE(output.find("not inside a Slurm allocation ($SLURM_JOB_ID is unset)"), std::string::npos) << output;
  std::tie(output, status) = commandOutput("'" + findProgram("squall") +
                                           "' slurm auto --server 127.0.0.1:1 --time-limit 1h 2>&1");
  EXPECT_EQ(status, 2);
  EXPECT_NE(output.find("bad time limit '1h'"), std::string::npos) << output;
  std::tie(output, status) = commandOutput("'" + findProgram("squall") +
                                           "' slurm auto --server 127.0.0.1:1 --idle-timeout soon 2>&1");
  EXPECT_EQ(status, 2);
  EXPECT_NE(output.find("bad duration 'soon'"), std::string::npos) << output;
}

// Issue 17's second mode: a server with no governor, `squall slurm auto`
// beside it. First with a governor program that does not exist: every job
// fails at start, the autoscaler says why and waits longer each time
// (never a stream of jobs). Then with the right one: one job, its governor
// runs the session's tasks, and once the session is closed and the
// governor idle, the job is let go and ends.
TEST_F(SlurmTest, SlurmAutoBacksOffFromFailingJobsThenRunsTheWorkAndLetsTheIdleGovernorGo) {
  ClusterOptions options;
  options.governors = 0;
  options.http = "off";
  options.token = "slurm-test-" + std::to_string(getpid());
  LocalCluster server(options);
  server.start();
  auto tokenFile = (fs::path(server.workDir()) / "token").string();
  auto logDir = (fs::path(slurm->jobsDir()) / "auto").string();
  auto autoArgs = [&](const std::vector<std::string>& more) {
    std::vector<std::string> args = {"slurm", "auto", "--server", server.serverAddress(), "--token-file", tokenFile,
                                     "--max-jobs", "2", "--time-limit", "5", "--cpus-per-job", "1",
                                     "--idle-timeout", "2s", "--poll-interval", "0.2", "--backoff", "1s",
                                     "--backoff-max", "2s", "--log-dir", logDir,
                                     "--governor-arg=--listen=127.0.0.1:0"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };

  Client client(server.serverAddress(), options.token);
  auto session = client.newSession("through slurm auto");
  std::vector<Task> tasks;
  for (int i = 0; i < 3; i++) {
    tasks.push_back(session.execute(Program::shell("echo \"$SLURM_JOB_ID\"").stdoutOutput()));
    tasks.back().output().keep();
  }
  session.submit();

  auto started = Clock::now();
  {
    ChildProcess broken(findProgram("squall"), autoArgs({"--governor-program", "/nonexistent/squall-governor"}));
    auto first = lineContaining(broken, "failed at start", 60s);
    EXPECT_NE(first.find("its governor never registered): squall slurm governor: cannot run "
                         "/nonexistent/squall-governor: No such file or directory; next governor job in 1.0 s "
                         "(1 failure)"),
              std::string::npos)
        << first;
    auto second = lineContaining(broken, "failed at start", 60s);
    EXPECT_NE(second.find("next governor job in 2.0 s (2 failures in a row)"), std::string::npos) << second;
    auto third = lineContaining(broken, "failed at start", 60s);
    EXPECT_NE(third.find("next governor job in 2.0 s (3 failures in a row)"), std::string::npos) << third;
    // Three jobs, and at least 1 + 2 s of waiting between them.
    EXPECT_GE(Clock::now() - started, 3s);
    broken.signal(SIGINT);
    EXPECT_TRUE(broken.waitExit(Clock::now() + 30s));
    EXPECT_EQ(broken.poll().value_or(-1), 0);
    auto state = session.state();
    EXPECT_EQ(state.finished, 0u);
    EXPECT_EQ(state.ready, 3u);
  }

  ChildProcess working(findProgram("squall"), autoArgs({}));
  auto submittedLine = lineContaining(working, " submitted (3 tasks ready", 60s);
  uint64_t job = numberAfter(submittedLine, "job");
  lineContaining(working, "job " + std::to_string(job) + ": its governor is up", 60s);
  auto deadline = Clock::now() + 60s;
  while (session.state().finished < 3 && Clock::now() < deadline) std::this_thread::sleep_for(50ms);
  ASSERT_EQ(session.state().finished, 3u);
  for (auto& task : tasks) {
    EXPECT_EQ(task.output().fetch(), std::to_string(job) + "\n");
    EXPECT_EQ(task.info().governor, "slurm-" + std::to_string(job) + "-" + slurm->nodeName());
  }
  // It holds the kept outputs: past its idle timeout (2 s) it stays, and
  // the autoscaler has nothing to say.
  auto early = working.readLine(3500ms);
  EXPECT_FALSE(early.has_value()) << *early;
  EXPECT_EQ(slurm->jobState(job), "RUNNING");
  EXPECT_EQ(tasks[0].output().fetch(), std::to_string(job) + "\n");
  // Once the session goes, so do its objects: the governor is idle.
  session.close();
  lineContaining(working, "job " + std::to_string(job) + " released: its governor was idle", 60s);
  lineContaining(working, "job " + std::to_string(job) + " ended (", 60s);
  EXPECT_EQ(waitJobEnd(job), "CANCELLED");
  deadline = Clock::now() + 30s;
  while ((!client.governors().empty() || !governorsOfJob(job).empty()) && Clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(client.governors().empty());
  EXPECT_EQ(governorsOfJob(job), std::vector<std::string>{});
  working.signal(SIGINT);
  EXPECT_TRUE(working.waitExit(Clock::now() + 30s));
  EXPECT_EQ(working.poll().value_or(-1), 0);
}

}  // namespace
}  // namespace squall
