#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <mutex>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <poll.h>
#include <spawn.h>
#include <stdexcept>
extern "C" {  // glibc 2.36 forgot the C linkage markers in this header
#include <sys/pidfd.h>
}
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace squall {

namespace fs = std::filesystem;

namespace {
std::runtime_error systemError(const std::string& what) {
  return std::runtime_error(what + ": " + strerror(errno));
}

int64_t msLeft(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return std::max<int64_t>(0, left.count());
}

// What LocalCluster::stop() found, for uncleanStops(). Any thread.
std::mutex uncleanMutex;
std::vector<std::string> uncleanList;
}  // namespace

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by ") + strsignal(WTERMSIG(status));
  return "stopped";
}

std::vector<std::string> uncleanStops() {
  std::lock_guard<std::mutex> lock(uncleanMutex);
  return uncleanList;
}

std::string resolveExecutor(const std::string& executor) {
  auto eq = executor.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == executor.size()) {
    throw std::invalid_argument("takes NAME=PROGRAM (got '" + executor + "')");
  }
  auto program = executor.substr(eq + 1);
  if (program.find('/') == std::string::npos) return executor;
  return executor.substr(0, eq + 1) + fs::absolute(program).lexically_normal().string();
}

std::string findProgram(const std::string& name) {
  std::vector<fs::path> candidates;
  if (const char* dir = getenv("SQUALL_BIN_DIR"); dir && *dir) candidates.push_back(fs::path(dir) / name);
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto dir = self.parent_path();
    for (auto sub : {".", "../server", "../governor", "../tools", "../python", "../bin", "../../server",
                     "../../governor"}) {
      candidates.push_back(dir / sub / name);
    }
  }
  if (const char* path = getenv("PATH")) {
    std::string p = path;
    size_t start = 0;
    while (start <= p.size()) {
      size_t end = p.find(':', start);
      if (end == std::string::npos) end = p.size();
      if (end > start) candidates.push_back(fs::path(p.substr(start, end - start)) / name);
      start = end + 1;
    }
  }
  for (auto& c : candidates) {
    if (access(c.c_str(), X_OK) == 0 && fs::is_regular_file(c, ec)) {
      return fs::weakly_canonical(c, ec).string();
    }
  }
  throw std::runtime_error("cannot find the program '" + name +
                           "' (looked beside this program and on PATH; set SQUALL_BIN_DIR)");
}

ChildProcess::ChildProcess(const std::string& program, const std::vector<std::string>& args,
                           const std::vector<int>& inheritFds, const std::vector<std::string>& wrap, int stdinFd)
    : name(fs::path(program).filename()) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw systemError("pipe");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (stdinFd >= 0) posix_spawn_file_actions_adddup2(&actions, stdinFd, STDIN_FILENO);
  // dup2 of a descriptor onto itself clears its close-on-exec flag in the
  // child only (glibc >= 2.29; POSIX 2024), so our copy stays close-on-exec
  // and no other program we start gets it.
  for (int fd : inheritFds) posix_spawn_file_actions_adddup2(&actions, fd, fd);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (auto& w : wrap) argv.push_back(const_cast<char*>(w.c_str()));
  argv.push_back(const_cast<char*>(program.c_str()));
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  // posix_spawnp looks a bare name up on PATH; findProgram's paths are
  // absolute and used as they are.
  int rc = posix_spawnp(&childPid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    errno = rc;
    throw systemError("cannot start " + std::string(argv[0]));
  }
  stdoutFd = fds[0];
  pidFd = pidfd_open(childPid, 0);
  if (pidFd < 0) throw systemError("pidfd_open");
}

ChildProcess::~ChildProcess() {
  if (childPid > 0 && !status) stop(std::chrono::seconds(5));
  if (stdoutFd >= 0) close(stdoutFd);
  if (pidFd >= 0) close(pidFd);
}

std::optional<std::string> ChildProcess::readLine(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    auto nl = buffer.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    if (stdoutFd < 0) return std::nullopt;
    struct pollfd p = {stdoutFd, POLLIN, 0};
    int rc = ::poll(&p, 1, static_cast<int>(msLeft(deadline)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw systemError("poll");
    if (rc == 0) return std::nullopt;
    char chunk[4096];
    ssize_t n = read(stdoutFd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(stdoutFd);
      stdoutFd = -1;
      if (!buffer.empty()) {
        std::string rest = std::move(buffer);
        buffer.clear();
        return rest;
      }
      return std::nullopt;
    }
    buffer.append(chunk, n);
  }
}

std::string ChildProcess::expectLine(const std::string& prefix, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string seen;
  while (true) {
    auto line = readLine(std::chrono::milliseconds(msLeft(deadline)));
    if (!line) break;
    if (line->rfind(prefix, 0) == 0) return *line;
    seen += *line + "\n";
  }
  // Its stdout ended before the deadline: it is exiting (a refused start);
  // once it has, the message can say so.
  waitExit(deadline);
  std::string why = running() ? "did not say '" + prefix + "' in time"
                              : "exited before saying '" + prefix + "'";
  throw std::runtime_error(name + " " + why + (seen.empty() ? "" : "; it printed: " + seen));
}

bool ChildProcess::waitExit(std::chrono::steady_clock::time_point deadline) {
  while (!poll()) {
    int left = static_cast<int>(msLeft(deadline));
    if (left == 0) return false;
    struct pollfd p = {pidFd, POLLIN, 0};
    if (::poll(&p, 1, left) < 0 && errno != EINTR) throw systemError("poll");
  }
  return true;
}

void ChildProcess::signal(int signo) {
  if (childPid > 0 && !status) ::kill(childPid, signo);
}

std::optional<int> ChildProcess::poll() {
  if (status || childPid <= 0) return status;
  int s;
  pid_t r = waitpid(childPid, &s, WNOHANG);
  if (r == childPid) status = s;
  return status;
}

int ChildProcess::stop(std::chrono::milliseconds grace) {
  if (poll()) return *status;
  ::kill(childPid, SIGTERM);
  auto deadline = std::chrono::steady_clock::now() + grace;
  waitExit(deadline);
  if (!poll()) {
    killedByStop = true;
    ::kill(childPid, SIGKILL);
    int s;
    waitpid(childPid, &s, 0);
    status = s;
  }
  return *status;
}

LocalCluster::LocalCluster(ClusterOptions options) : options(std::move(options)) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw systemError("pipe (the cluster's lifeline)");
  lifelineRead = fds[0];
  lifelineWrite = fds[1];
}

LocalCluster::~LocalCluster() {
  auto problems = stop();
  if (!problems.empty()) fprintf(stderr, "squall cluster: %s", problems.c_str());
  close(lifelineRead);
  close(lifelineWrite);
}

void LocalCluster::start() {
  work = options.workDir;
  if (work.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "squall-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw systemError("mkdtemp");
    work = tmpl;
    ownsWorkDir = true;
  }
  // The cluster's state (the session log, governors' objects): ours alone.
  // A directory given that exists keeps its mode.
  if (!fs::exists(work)) {
    fs::create_directories(work);
    fs::permissions(work, fs::perms::owner_all);
  }
  tokenPath = options.tokenFile;
  if (!options.token.empty()) {
    tokenPath = (fs::path(work) / "token").string();
    int fd = open(tokenPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) throw systemError("cannot write " + tokenPath);
    bool ok = write(fd, options.token.data(), options.token.size()) == static_cast<ssize_t>(options.token.size());
    close(fd);
    if (!ok) throw systemError("cannot write " + tokenPath);
  }
  startServer(options.listen);
  for (int i = 0; i < options.governors; i++) addGovernor();
  for (auto& host : options.sshHosts) addSshGovernor(host);
}

std::string shellQuote(const std::string& text) {
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

void LocalCluster::addSshGovernor(const std::string& destination) {
  size_t index = governorProcesses.size();
  auto ssh = options.sshCommand.empty() ? std::vector<std::string>{"ssh", "-o", "BatchMode=yes"}
                                        : options.sshCommand;
  auto host = destination.substr(destination.find('@') == std::string::npos ? 0 : destination.find('@') + 1);
  auto run = [&](const std::string& line, int stdinFd) {
    auto words = ssh;
    words.insert(words.end(), {destination, "--", line});
    return std::make_unique<ChildProcess>(words[0], std::vector<std::string>(words.begin() + 1, words.end()),
                                          std::vector<int>{}, std::vector<std::string>{}, stdinFd);
  };
  if (!tokenPath.empty()) {
    // The token, at the same path there, through ssh's stdin.
    std::string token;
    {
      std::ifstream in(tokenPath);
      std::getline(in, token);
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw systemError("pipe");
    auto dir = fs::path(tokenPath).parent_path().string();
    auto copy = run("umask 077 && mkdir -p " + shellQuote(dir) + " && cat > " + shellQuote(tokenPath), fds[0]);
    close(fds[0]);
    bool wrote = write(fds[1], (token + "\n").data(), token.size() + 1) == static_cast<ssize_t>(token.size() + 1);
    close(fds[1]);
    bool ended = copy->waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30));
    int status = ended ? copy->poll().value_or(-1) : copy->stop();
    if (!wrote || !ended || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      throw std::runtime_error("cannot copy the token to " + destination + " over ssh (" + describeStatus(status) +
                               ")");
    }
  }
  auto args = governorArgs(index, 0);
  args.insert(args.begin(), governorProgram());
  args.insert(args.end(), {"--listen", host + ":0"});
  std::string line = "exec";
  for (auto& arg : args) line += " " + shellQuote(arg);
  stopped = false;
  // Its stdin is the lifeline's read end: ssh carries its end of file there.
  governorProcesses.push_back(run(line, lifelineRead));
  overSsh.push_back(true);
  governorProcesses.back()->expectLine("registered governor=", options.startTimeout);
}

std::vector<std::string> LocalCluster::governorArgs(size_t index, int lifelineFd) const {
  auto dir = fs::path(work) / ("governor-" + std::to_string(index));
  std::vector<std::string> args = {"--server", address, "--work-dir", dir.string(),
                                   "--log-level", options.logLevel,
                                   "--name", "governor-" + std::to_string(index),
                                   "--lifeline-fd", std::to_string(lifelineFd)};
  if (options.cpus > 0) args.insert(args.end(), {"--cpus", std::to_string(options.cpus)});
  if (!tokenPath.empty()) args.insert(args.end(), {"--token-file", tokenPath});
  appendTls(args);
  for (auto& executor : options.executors) args.insert(args.end(), {"--executor", executor});
  args.insert(args.end(), options.governorArgs.begin(), options.governorArgs.end());
  return args;
}

std::string LocalCluster::governorProgram() const {
  return options.governorProgram.empty() ? findProgram("squall-governor") : options.governorProgram;
}

void LocalCluster::appendTls(std::vector<std::string>& args) const {
  if (!options.tlsCert.empty()) args.insert(args.end(), {"--tls-cert", options.tlsCert});
  if (!options.tlsKey.empty()) args.insert(args.end(), {"--tls-key", options.tlsKey});
  if (!options.tlsCa.empty()) args.insert(args.end(), {"--tls-ca", options.tlsCa});
}

void LocalCluster::startServer(const std::string& listen) {
  std::vector<std::string> args = {"--listen", listen, "--http", options.http,
                                   "--log-level", options.logLevel,
                                   "--lifeline-fd", std::to_string(lifelineRead)};
  if (!tokenPath.empty()) args.insert(args.end(), {"--token-file", tokenPath});
  appendTls(args);
  // The session log lives with the rest of the cluster's state.
  if (std::find(options.serverArgs.begin(), options.serverArgs.end(), "--log") == options.serverArgs.end()) {
    args.insert(args.end(), {"--log", (fs::path(work) / "server.sqlite").string()});
  }
  args.insert(args.end(), options.serverArgs.begin(), options.serverArgs.end());
  stopped = false;
  auto program = options.serverProgram.empty() ? findProgram("squall-server") : options.serverProgram;
  serverProcess = std::make_unique<ChildProcess>(program, args,
                                                 std::vector<int>{lifelineRead}, options.serverWrap);
  auto line = serverProcess->expectLine("listening address=", options.startTimeout);
  address = line.substr(std::string("listening address=").size());
  if (options.http != "off") {
    // The server prints it right after the RPC address.
    line = serverProcess->expectLine("http address=", options.startTimeout);
    httpAddr = line.substr(std::string("http address=").size());
  }
}

void LocalCluster::killServer() {
  serverProcess->signal(SIGKILL);
  serverProcess->waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30));
}

void LocalCluster::restartServer() {
  if (serverProcess && serverProcess->running()) killServer();
  // Same address, so governors and clients find it again; same log.
  startServer(address);
}

size_t LocalCluster::addGovernor() {
  size_t index = governorProcesses.size();
  governorProcesses.push_back(launchGovernor(index));
  overSsh.push_back(false);
  return index;
}

void LocalCluster::restartGovernor(size_t i) {
  auto& old = governorProcesses.at(i);
  if (overSsh.at(i)) throw std::logic_error("governor-" + std::to_string(i) + " runs over ssh: not restarted here");
  if (old->running()) old->stop();
  old = launchGovernor(i);
}

std::unique_ptr<ChildProcess> LocalCluster::launchGovernor(size_t index) {
  auto args = governorArgs(index, lifelineRead);
  if (index < options.governorListenEach.size() && !options.governorListenEach[index].empty()) {
    args.insert(args.end(), {"--listen", options.governorListenEach[index]});
  }
  if (index < options.governorArgsEach.size()) {
    args.insert(args.end(), options.governorArgsEach[index].begin(), options.governorArgsEach[index].end());
  }
  std::vector<std::string> wrap;
  if (index < options.governorWrapEach.size()) wrap = options.governorWrapEach[index];
  stopped = false;
  auto process = std::make_unique<ChildProcess>(governorProgram(), args, std::vector<int>{lifelineRead}, wrap);
  process->expectLine("registered governor=", options.startTimeout);
  return process;
}

namespace {
// Stops `process` and says what was wrong with how it ended, if anything.
std::string stopChecked(ChildProcess& process, const std::string& what) {
  bool wasRunning = process.running();
  // Governors wait up to 10 s for their tasks to go; sanitized builds are
  // slower still. Past this the process hangs and is killed.
  int status = process.stop(std::chrono::seconds(20));
  auto says = what + " (pid " + std::to_string(process.pid()) + ") ";
  if (WIFEXITED(status) && WEXITSTATUS(status) == SANITIZER_EXIT_CODE) {
    return says + describeStatus(status) + ": a sanitizer report (see its stderr above)\n";
  }
  if (!wasRunning) return "";  // ended before (on purpose, or the test saw it)
  if (process.killedAfterGrace()) return says + "did not stop within 20 s of SIGTERM and was killed\n";
  // Another exit status is no sign: the process may have been exiting on
  // its own (a refused start the test expects) as SIGTERM came. Nor is
  // SIGTERM (sent before its handler was set) or SIGKILL (the test's own,
  // racing with this stop()).
  if (WIFSIGNALED(status) && WTERMSIG(status) != SIGTERM && WTERMSIG(status) != SIGKILL) {
    return says + describeStatus(status) + " as it stopped\n";
  }
  return "";
}
}  // namespace

std::string LocalCluster::stop() {
  std::string problems;
  if (stopped) return problems;
  for (size_t i = 0; i < governorProcesses.size(); i++) {
    problems += stopChecked(*governorProcesses[i], "governor-" + std::to_string(i));
  }
  if (serverProcess) problems += stopChecked(*serverProcess, "the server");
  stopped = true;
  if (!problems.empty()) {
    std::lock_guard<std::mutex> lock(uncleanMutex);
    uncleanList.push_back(problems);
  }
  if (ownsWorkDir && !work.empty()) {
    std::error_code ec;
    fs::remove_all(work, ec);
    ownsWorkDir = false;
  }
  return problems;
}

LocalCluster* startCluster(int governors, uint32_t cpus) {
  ClusterOptions options;
  options.governors = governors;
  options.cpus = cpus;
  auto cluster = std::make_unique<LocalCluster>(options);
  cluster->start();
  return cluster.release();
}

}  // namespace squall
