// `squall slurm run|auto|governor`: squall on a Slurm cluster (docs/deploy.md,
// "Slurm"). Each runs on the calling thread in the foreground; Slurm is
// reached through its commands (sbatch, srun, squeue, scancel) as a user
// would, so no Slurm library or version is linked in.
#include "commands.h"
#include "slurm-autoscaler.h"
#include "slurm.h"

#include <squall/client/client.h>
#include <squall/proto/errors.h>
#include <squall/proto/logging.h>
#include <squall/proto/token.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <spawn.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>
extern "C" {  // glibc 2.36 forgot the C linkage markers in this header
#include <sys/pidfd.h>
}

extern char** environ;

namespace squall {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

// How long an ended srun waits for the job's own stop signal (see runSlurmRun).
constexpr int SRUN_CANCEL_GRACE_MS = 3000;

std::optional<std::string> environment(const char* name) {
  const char* value = getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

std::string thisHost() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

// Starts `args` (args[0] looked up on PATH) with `actions` (nullptr: our
// descriptors as they are) and no signal blocked: this thread blocks
// SIGINT and SIGTERM for its signalfd, and a child would inherit that.
// Returns posix_spawn's error number (0: started; its pid in `pid`).
int spawnUnblocked(const std::vector<std::string>& args, const posix_spawn_file_actions_t* actions, pid_t& pid) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  int rc = posix_spawnp(&pid, argv[0], actions, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  return rc;
}

struct CommandResult {
  int status = -1;     // the exit status; -1: did not exit normally (killed, timed out)
  std::string output;  // stdout and stderr together
};

// Runs `args` (args[0] looked up on PATH) with `input` as its stdin and
// returns what it printed; kills it after `timeout`. For Slurm's commands,
// which answer in well under a second unless slurmctld is unreachable (they
// then retry for MessageTimeout, 10 s by default).
CommandResult runCommand(const std::vector<std::string>& args, const std::string& input = "",
                         std::chrono::milliseconds timeout = 60s) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    throw std::runtime_error(std::string("pipe: ") + strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, out[1], STDERR_FILENO);
  pid_t pid;
  int rc = spawnUnblocked(args, &actions, pid);
  posix_spawn_file_actions_destroy(&actions);
  close(in[0]);
  close(out[1]);
  if (rc != 0) {
    close(in[1]);
    close(out[0]);
    throw std::runtime_error("cannot run " + args[0] + ": " + strerror(rc));
  }
  // The input is a batch script of a few hundred bytes: it fits the pipe.
  bool wrote = write(in[1], input.data(), input.size()) == static_cast<ssize_t>(input.size());
  close(in[1]);
  CommandResult result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    struct pollfd p = {out[0], POLLIN, 0};
    int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      kill(pid, SIGKILL);
      result.output += "\n(killed after " + std::to_string(timeout.count() / 1000) + " s)";
      break;
    }
    char chunk[4096];
    ssize_t n = read(out[0], chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(chunk, n);
  }
  close(out[0]);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && wrote) result.status = WEXITSTATUS(status);
  return result;
}

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// sbatch, squeue and scancel for the autoscaler. Each governor job writes
// its output to logDir/squall-governor-JOBID.log (on a shared file system,
// where this process reads why a job failed).
class SlurmCommands final : public slurm::SlurmJobs {
 public:
  SlurmCommands(std::vector<std::string> sbatchArgs, std::string script, std::string logDir)
      : sbatchArgs(std::move(sbatchArgs)), script(std::move(script)), logDir(std::move(logDir)) {}

  uint64_t submit() override {
    std::vector<std::string> args = {"sbatch", "--parsable"};
    args.insert(args.end(), sbatchArgs.begin(), sbatchArgs.end());
    auto result = runCommand(args, script);
    if (result.status != 0) throw std::runtime_error(trimmed(result.output));
    try {
      return slurm::parseSbatchOutput(result.output);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(e.what());
    }
  }

  std::vector<slurm::JobStatus> status(const std::vector<uint64_t>& ids) override {
    std::string list;
    for (auto id : ids) list += (list.empty() ? "" : ",") + std::to_string(id);
    auto result = runCommand({"squeue", "--noheader", "--states=all", "--jobs=" + list, "--format=%i|%T|%r"});
    // squeue refuses a list of nothing but forgotten jobs: they have all ended.
    if (result.status != 0 && result.output.find("Invalid job id") != std::string::npos) return {};
    if (result.status != 0) throw std::runtime_error("squeue: " + trimmed(result.output));
    return slurm::parseSqueue(result.output);
  }

  void cancel(uint64_t id) override {
    auto result = runCommand({"scancel", std::to_string(id)});
    if (result.status != 0) throw std::runtime_error("scancel: " + trimmed(result.output));
  }

  std::string lastWords(uint64_t id) override {
    std::ifstream in(fs::path(logDir) / ("squall-governor-" + std::to_string(id) + ".log"));
    std::string last;
    for (std::string line; std::getline(in, line);) {
      if (!trimmed(line).empty()) last = trimmed(line);
    }
    return last.size() > 500 ? last.substr(0, 500) + "..." : last;
  }

 private:
  std::vector<std::string> sbatchArgs;
  std::string script;
  std::string logDir;
};

slurm::ServerLoad serverLoad(Client& client) {
  slurm::ServerLoad load;
  for (auto& session : client.sessions()) {
    if (session.open) load.readyTasks += session.ready;
  }
  for (auto& governor : client.governors()) {
    load.governors.push_back({governor.name, governor.tasksAssigned, governor.objects});
  }
  return load;
}

// A child whose stdout and stderr are ours (the command `squall slurm run`
// runs for the user); -1 when it cannot be started (said on stderr).
pid_t spawnInherited(const std::vector<std::string>& command) {
  pid_t pid;
  int rc = spawnUnblocked(command, nullptr, pid);
  if (rc != 0) {
    fprintf(stderr, "squall slurm run: cannot run %s: %s\n", command[0].c_str(), strerror(rc));
    return -1;
  }
  return pid;
}

int exitStatusOf(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

int runSlurmGovernor(const std::string& program, const std::vector<std::string>& args) {
  std::vector<std::string> words = {program};
  try {
    auto added = slurm::governorArgsInJob(environment, thisHost());
    // What the caller gave (--flag VALUE or --flag=VALUE) wins:
    // squall-governor takes each flag once.
    for (size_t i = 0; i + 1 < added.size(); i += 2) {
      auto& flag = added[i];
      bool given = std::any_of(args.begin(), args.end(), [&flag](const std::string& arg) {
        return arg == flag || arg.rfind(flag + "=", 0) == 0;
      });
      if (!given) words.insert(words.end(), {flag, added[i + 1]});
    }
  } catch (const std::invalid_argument& e) {
    fprintf(stderr, "squall slurm governor: %s\n", e.what());
    return 2;
  }
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& word : words) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  execv(program.c_str(), argv.data());
  // This line is what `squall slurm auto` shows as the reason a job failed.
  fprintf(stderr, "squall slurm governor: cannot run %s: %s\n", program.c_str(), strerror(errno));
  return 127;
}

int runSlurmRun(SlurmRunOptions options) {
  const char* who = "squall slurm run";
  auto job = environment("SLURM_JOB_ID");
  if (!job || job->empty()) {
    fprintf(stderr, "%s: not inside a Slurm allocation ($SLURM_JOB_ID is unset): run it in an sbatch script "
                    "or under salloc\n", who);
    return 2;
  }
  auto nodesText = environment("SLURM_NNODES").value_or(environment("SLURM_JOB_NUM_NODES").value_or("1"));
  int nodes = atoi(nodesText.c_str());
  if (nodes < 1) {
    fprintf(stderr, "%s: $SLURM_NNODES is '%s', not a number of nodes\n", who, nodesText.c_str());
    return 2;
  }
  auto& cluster = options.cluster;
  cluster.governors = 0;
  if (cluster.listen.empty()) cluster.listen = thisHost() + ":0";
  if (!useDefaultToken(cluster, who)) return 1;
  // The governors start in srun's working directory, which may differ.
  if (!cluster.tokenFile.empty()) cluster.tokenFile = fs::absolute(cluster.tokenFile).string();
  if (!cluster.token.empty() && cluster.tokenFile.empty()) {
    // Governors on other nodes read the token from a file; a token given
    // as text would land in the work dir, which is this node's alone.
    fprintf(stderr, "%s: give the token as a file every node can read (--token-file), not as text\n", who);
    return 2;
  }
  std::string governorProgram, squallProgram;
  try {
    governorProgram = cluster.governorProgram.empty() ? findProgram("squall-governor") : cluster.governorProgram;
    squallProgram = findProgram("squall");
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: %s\n", who, e.what());
    return 2;
  }
  int sfd = stopSignalFd();
  LocalCluster local(cluster);
  try {
    local.start();
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: %s\n", who, e.what());
    return 1;
  }
  // The governors' lifeline: srun hands its stdin to every task
  // (--input=all); when this process closes the write end (or dies), each
  // governor reads end of file on its stdin and stops, killing its tasks.
  int lifeline[2];
  if (pipe2(lifeline, O_CLOEXEC) != 0) {
    perror("squall slurm run: pipe");
    return 1;
  }
  // (--kill-on-bad-exit takes its value only after '='.)
  std::vector<std::string> srunArgs = {"--nodes=" + std::to_string(nodes), "--ntasks=" + std::to_string(nodes),
                                       "--ntasks-per-node=1", "--input=all", "--kill-on-bad-exit=0",
                                       "--job-name=squall-governors",
                                       squallProgram, "slurm", "governor", "--program", governorProgram, "--",
                                       "--server", local.serverAddress(), "--log-level", cluster.logLevel,
                                       "--lifeline-fd", "0"};
  if (!cluster.tokenFile.empty()) srunArgs.insert(srunArgs.end(), {"--token-file", cluster.tokenFile});
  for (auto& executor : cluster.executors) srunArgs.insert(srunArgs.end(), {"--executor", executor});
  srunArgs.insert(srunArgs.end(), cluster.governorArgs.begin(), cluster.governorArgs.end());
  std::unique_ptr<ChildProcess> srun;
  try {
    srun = std::make_unique<ChildProcess>("srun", srunArgs, std::vector<int>{}, std::vector<std::string>{},
                                          lifeline[0]);
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: %s (is Slurm's srun on PATH?)\n", who, e.what());
    return 1;
  }
  close(lifeline[0]);
  auto stopGovernors = [&]() {
    if (lifeline[1] >= 0) close(lifeline[1]);
    lifeline[1] = -1;
    // Governors wait up to 10 s for their tasks to go.
    if (!srun->waitExit(std::chrono::steady_clock::now() + 30s)) srun->stop();
  };
  try {
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(options.startTimeout * 1000));
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int i = 0; i < nodes; i++) {
      srun->expectLine("registered governor=", std::chrono::duration_cast<std::chrono::milliseconds>(
                                                   deadline - std::chrono::steady_clock::now()));
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: the governors did not all start: %s\n", who, e.what());
    stopGovernors();
    return 1;
  }
  printf("squall is running in Slurm job %s: server=%s governors=%d nodes=%s\n", job->c_str(),
         local.serverAddress().c_str(), nodes, environment("SLURM_JOB_NODELIST").value_or("?").c_str());
  if (!local.httpAddress().empty()) printf("status page: http://%s/ (on %s)\n", local.httpAddress().c_str(),
                                           thisHost().c_str());
  if (!cluster.tokenFile.empty()) printf("token: %s\n", cluster.tokenFile.c_str());
  fflush(stdout);

  setenv("SQUALL_SERVER", local.serverAddress().c_str(), 1);
  if (!cluster.tokenFile.empty()) setenv("SQUALL_TOKEN_FILE", cluster.tokenFile.c_str(), 1);
  pid_t commandPid = -1;
  int commandFd = -1;
  int status = 0;
  if (!options.command.empty()) {
    commandPid = spawnInherited(options.command);
    if (commandPid < 0) {
      status = 127;
    } else {
      commandFd = pidfd_open(commandPid, 0);
    }
  }
  if (status == 0) {
    std::vector<struct pollfd> fds = {{sfd, POLLIN, 0},
                                      {local.server().exitFd(), POLLIN, 0},
                                      {srun->exitFd(), POLLIN, 0},
                                      {commandFd, POLLIN, 0}};
    while (true) {
      int rc = poll(fds.data(), commandFd >= 0 ? 4 : 3, -1);
      if (rc < 0 && errno == EINTR) continue;
      if (rc < 0) {
        perror("squall slurm run: poll");
        status = 1;
        break;
      }
      // A cancelled job (scancel, the end of its time limit) signals every
      // step at once: srun may end a moment before this process gets its
      // SIGTERM. That is a stop, not a loss: wait a little for the signal
      // before calling srun's exit unexpected.
      if (!fds[0].revents && fds[2].revents) {
        struct pollfd stop = {sfd, POLLIN, 0};
        while (::poll(&stop, 1, SRUN_CANCEL_GRACE_MS) < 0 && errno == EINTR) {
        }
        fds[0].revents = stop.revents;
      }
      if (fds[0].revents) {
        struct signalfd_siginfo info;
        if (read(sfd, &info, sizeof(info)) > 0) fprintf(stderr, "%s: stopping (%s)\n", who, strsignal(info.ssi_signo));
        if (commandPid > 0) kill(commandPid, SIGTERM);
        status = commandPid > 0 ? 1 : 0;
        break;
      }
      if (fds[1].revents || fds[2].revents) {
        fprintf(stderr, "%s: %s exited unexpectedly; stopping everything\n", who,
                fds[1].revents ? "the server" : "srun (the governors)");
        if (commandPid > 0) kill(commandPid, SIGTERM);
        status = 1;
        break;
      }
      if (commandFd >= 0 && fds[3].revents) {
        int wstatus;
        waitpid(commandPid, &wstatus, 0);
        commandPid = -1;
        status = exitStatusOf(wstatus);
        break;
      }
    }
  }
  if (commandPid > 0) {
    int wstatus;
    waitpid(commandPid, &wstatus, 0);
  }
  if (commandFd >= 0) close(commandFd);
  stopGovernors();
  auto problems = local.stop();
  if (!problems.empty()) fprintf(stderr, "%s: %s", who, problems.c_str());
  close(sfd);
  return status;
}

int runSlurmAuto(const SlurmAutoOptions& options) {
  const char* who = "squall slurm auto";
  slurm::AutoscalerPolicy policy;
  slurm::Duration poll;
  try {
    slurm::parseTimeLimit(options.timeLimit);
    policy.maxJobs = options.maxJobs;
    policy.idleTimeout = slurm::parseDuration(options.idleTimeout);
    policy.backoff = slurm::parseDuration(options.backoff);
    policy.backoffMax = slurm::parseDuration(options.backoffMax);
    policy.minRun = slurm::parseDuration(options.minRun);
    poll = std::max(slurm::parseDuration(options.pollInterval), slurm::Duration(50));
    if (policy.backoff.count() == 0) throw std::invalid_argument("--backoff must be more than 0");
  } catch (const std::invalid_argument& e) {
    fprintf(stderr, "%s: %s\n", who, e.what());
    return 2;
  }
  std::shared_ptr<spdlog::logger> logger;
  try {
    logger = makeLogger("slurm-auto", options.logLevel);
  } catch (const kj::Exception& e) {
    fprintf(stderr, "%s: --log-level: %s\n", who, userMessage(e).cStr());
    return 2;
  }
  // Governor jobs read the token from a file (on a shared file system):
  // the one given, else $SQUALL_TOKEN_FILE, else the default one if it
  // exists. A token only in $SQUALL_TOKEN would reach every job's
  // environment, so it is refused.
  auto tokenFile = options.tokenFile;
  if (tokenFile.empty()) tokenFile = environment("SQUALL_TOKEN_FILE").value_or("");
  if (tokenFile.empty() && !defaultTokenFile().empty() && fs::exists(defaultTokenFile())) {
    tokenFile = defaultTokenFile();
  }
  if (tokenFile.empty() && environment("SQUALL_TOKEN")) {
    fprintf(stderr, "%s: give the token as a file the governor jobs can read (--token-file), not $SQUALL_TOKEN\n",
            who);
    return 2;
  }
  std::string token;
  try {
    token = tokenFile.empty() ? "" : resolveToken("", tokenFile);
  } catch (const kj::Exception& e) {
    fprintf(stderr, "%s: %s\n", who, userMessage(e).cStr());
    return 2;
  }
  std::string governorProgram = options.governorProgram, squallProgram;
  try {
    if (governorProgram.empty()) governorProgram = findProgram("squall-governor");
    squallProgram = findProgram("squall");
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: %s\n", who, e.what());
    return 2;
  }
  auto logDir = options.logDir;
  if (logDir.empty()) {
    auto base = defaultTokenFile();
    logDir = base.empty() ? (fs::current_path() / "squall-slurm").string()
                          : (fs::path(base).parent_path() / "slurm").string();
  }
  std::error_code ec;
  fs::create_directories(logDir, ec);
  if (ec) {
    fprintf(stderr, "%s: cannot make the job log directory %s: %s\n", who, logDir.c_str(), ec.message().c_str());
    return 2;
  }
  logDir = fs::absolute(logDir).string();

  std::unique_ptr<Client> client;
  try {
    ClientOptions clientOptions;
    clientOptions.address = options.server;
    clientOptions.token = token;
    client = std::make_unique<Client>(clientOptions);
  } catch (const std::exception& e) {
    fprintf(stderr, "%s: cannot reach the server: %s\n", who, e.what());
    return 1;
  }

  slurm::GovernorJob governorJob{squallProgram, governorProgram,
                                 {"--server", client->address(), "--log-level", options.governorLogLevel}};
  if (!tokenFile.empty()) {
    governorJob.governorArgs.insert(governorJob.governorArgs.end(), {"--token-file", fs::absolute(tokenFile).string()});
  }
  for (auto& executor : options.executors) governorJob.governorArgs.insert(governorJob.governorArgs.end(), {"--executor", executor});
  governorJob.governorArgs.insert(governorJob.governorArgs.end(), options.governorArgs.begin(),
                                  options.governorArgs.end());
  std::vector<std::string> sbatchArgs = {"--job-name", "squall-governor", "--nodes", "1", "--time",
                                         options.timeLimit, "--output",
                                         (fs::path(logDir) / "squall-governor-%j.log").string()};
  if (options.cpusPerJob > 0) {
    sbatchArgs.insert(sbatchArgs.end(), {"--ntasks", "1", "--cpus-per-task", std::to_string(options.cpusPerJob)});
  } else {
    sbatchArgs.push_back("--exclusive");
  }
  if (!options.partition.empty()) sbatchArgs.insert(sbatchArgs.end(), {"--partition", options.partition});
  sbatchArgs.insert(sbatchArgs.end(), options.sbatchArgs.begin(), options.sbatchArgs.end());
  SlurmCommands slurmJobs(sbatchArgs, slurm::governorJobScript(governorJob), logDir);
  slurm::Autoscaler scaler(policy, slurmJobs, *logger, [](const std::string& line) {
    printf("%s\n", line.c_str());
    fflush(stdout);
  });

  if (isLoopbackAddress(client->address())) {
    // Right on a one-node cluster (the tests'); elsewhere every job fails
    // at start, and the back-off shows why.
    logger->warn("event=loopback-server server={} msg=\"governors on other nodes cannot reach a loopback address; "
                 "give --server a name the nodes resolve\"",
                 client->address());
  }
  int sfd = stopSignalFd();
  printf("squall slurm auto: server=%s max-jobs=%u time-limit=%s idle-timeout=%s job-logs=%s (Ctrl-C stops and "
         "cancels its jobs)\n",
         client->address().c_str(), policy.maxJobs, options.timeLimit.c_str(),
         slurm::describeDuration(policy.idleTimeout).c_str(), logDir.c_str());
  fflush(stdout);
  logger->info("event=start server={} max_jobs={} time_limit={} idle_timeout={}ms backoff={}ms backoff_max={}ms",
               client->address(), policy.maxJobs, options.timeLimit, policy.idleTimeout.count(),
               policy.backoff.count(), policy.backoffMax.count());
  bool serverLost = false;
  while (true) {
    struct pollfd p = {sfd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(poll.count()));
    if (rc < 0 && errno == EINTR) continue;
    if (rc > 0) {
      struct signalfd_siginfo info;
      if (read(sfd, &info, sizeof(info)) > 0) {
        fprintf(stderr, "%s: stopping (%s)\n", who, strsignal(info.ssi_signo));
      }
      break;
    }
    slurm::ServerLoad load;
    try {
      load = serverLoad(*client);
    } catch (const std::exception& e) {
      // Nothing is decided blind; governors keep running meanwhile.
      if (!serverLost) logger->warn("event=server-unreachable error=\"{}\"", e.what());
      serverLost = true;
      continue;
    }
    if (serverLost) logger->info("event=server-reachable");
    serverLost = false;
    scaler.tick(std::chrono::steady_clock::now(), load);
  }
  auto cancelled = scaler.cancelAll();
  if (!cancelled.empty()) {
    std::string ids;
    for (auto id : cancelled) ids += " " + std::to_string(id);
    printf("cancelled governor jobs:%s\n", ids.c_str());
  }
  close(sfd);
  return 0;
}

}  // namespace squall
