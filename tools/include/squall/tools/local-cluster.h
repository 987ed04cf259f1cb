// Starts a squall server and governors as child processes on this machine
// and stops them again: `squall start`, `squall demo` and the end-to-end
// tests use it. Plain POSIX; one thread; no event loop.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace squall {

// A child process whose stdout we read line by line (to learn its address
// and readiness) and whose stderr goes where ours goes.
class ChildProcess {
 public:
  // `inheritFds`: descriptors of ours the child gets under the same numbers
  // (everything else of ours is close-on-exec and stays here). `wrap`: a
  // command (looked up on PATH) that `program` is run under, which must
  // exec it, e.g. {"ip", "netns", "exec", NAME}: the pid, the signals and
  // the inherited descriptors are then the program's.
  // `stdinFd`: what the child reads as its standard input (default: ours).
  ChildProcess(const std::string& program, const std::vector<std::string>& args,
               const std::vector<int>& inheritFds = {}, const std::vector<std::string>& wrap = {},
               int stdinFd = -1);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return childPid; }
  // Readable (poll) once the child has exited.
  int exitFd() const { return pidFd; }
  // The next line of its stdout, or nullopt at EOF or when `timeout` passes.
  std::optional<std::string> readLine(std::chrono::milliseconds timeout);
  // Waits for the line starting with `prefix`; throws std::runtime_error
  // with what the child printed when it exits or the timeout passes first.
  std::string expectLine(const std::string& prefix, std::chrono::milliseconds timeout);
  void signal(int signo);
  // Reaps the child if it has exited; returns its wait status.
  std::optional<int> poll();
  // Sends SIGTERM, waits up to `grace`, then SIGKILL; returns the status.
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(5));
  bool running() { return !poll().has_value(); }
  // Blocks until the child exits or `deadline`; true if it exited.
  bool waitExit(std::chrono::steady_clock::time_point deadline);
  // stop() had to send SIGKILL: the child ignored SIGTERM for `grace`.
  bool killedAfterGrace() const { return killedByStop; }

 private:
  std::string name;
  pid_t childPid = -1;
  int stdoutFd = -1;
  int pidFd = -1;
  std::string buffer;
  std::optional<int> status;
  bool killedByStop = false;
};

// The exit status the sanitizer builds give a process with a report
// (tools/sanitizer/ctest-env.cmake.in), told apart from squall's own 1 and 2.
constexpr int SANITIZER_EXIT_CODE = 66;

// How a process ended, from its wait status: "exited with status 1", "was
// killed by Killed".
std::string describeStatus(int status);

// Every problem the LocalClusters of this process found when they stopped
// (see LocalCluster::stop()), for a test program to fail on. Any thread.
std::vector<std::string> uncleanStops();

struct ClusterOptions {
  int governors = 1;
  // Where the server listens; port 0 picks a free one.
  std::string listen = "127.0.0.1:0";
  // Where the server serves its status page ("off": nowhere).
  std::string http = "127.0.0.1:0";
  // Each governor gets <workDir>/governor-<i>; empty = a new temp dir.
  std::string workDir;
  // Cpus each governor announces (0: detected).
  uint32_t cpus = 0;
  // The shared secret: each part gets it as a file (<workDir>/token, 0600),
  // never on its command line, which every user sees in ps.
  std::string token;
  // Or a file that holds it, given to each part as it is (`squall start`:
  // the default token file).
  std::string tokenFile;
  // TLS for every part (docs/deploy.md): PEM files, one certificate for all
  // of them (one host); empty: none.
  std::string tlsCert;
  std::string tlsKey;
  std::string tlsCa;
  std::string logLevel = "warn";
  std::vector<std::string> serverArgs;
  std::vector<std::string> governorArgs;
  // More arguments for governor i alone (after governorArgs).
  std::vector<std::vector<std::string>> governorArgsEach;
  // Executors every governor keeps warm (tasklib), as NAME=PROGRAM: each
  // governor gets `--executor NAME=PROGRAM`.
  std::vector<std::string> executors;
  // Many hosts on one machine (tools/netns.sh, tests/multihost-test.cpp):
  // a command each process is started under, which must exec it (see
  // ChildProcess), e.g. {"ip", "netns", "exec", "mh1a2b-0"} to run it in a
  // network namespace; the lifeline survives the exec. Empty: started as
  // it is. `listen` and `http` then name an address of that namespace.
  std::vector<std::string> serverWrap;
  // governorWrapEach[i]: governor i's (none past the end).
  std::vector<std::vector<std::string>> governorWrapEach;
  // governorListenEach[i]: where governor i's data service listens, which
  // is also the address it announces to the server and its peers (its
  // --listen, HOST:PORT; port 0: a free one). Empty or past the end: the
  // governor's default, 127.0.0.1:0.
  std::vector<std::string> governorListenEach;
  // More governors, on other machines, started over ssh after the local
  // ones, one per destination ([user@]HOST): `SSH DEST -- squall-governor
  // ...` with the same program path and token file path as here (the token
  // is copied there first, through ssh's stdin, never a command line), its
  // data service on HOST:0 (the name the others reach it by), and the ssh
  // channel as its lifeline: when the cluster goes, so does it.
  std::vector<std::string> sshHosts;
  // The ssh command, as words; empty: {"ssh", "-o", "BatchMode=yes"}.
  std::vector<std::string> sshCommand;
  std::chrono::milliseconds startTimeout = std::chrono::seconds(30);
  // The programs to start; empty: findProgram("squall-server") and
  // findProgram("squall-governor") (the Python package passes its own).
  std::string serverProgram;
  std::string governorProgram;
};

// The server and governors die with the process that made the cluster,
// however it ends (SIGKILL, a crash): they hold the read end of a lifeline
// pipe whose write end only this object holds (see squall/proto/lifeline.h).
class LocalCluster {
 public:
  explicit LocalCluster(ClusterOptions options);
  ~LocalCluster();
  LocalCluster(const LocalCluster&) = delete;
  LocalCluster& operator=(const LocalCluster&) = delete;

  // Starts the server, then the governors, and returns once all of them
  // are registered. Throws std::runtime_error naming what failed.
  void start();
  // Kills the server with SIGKILL (as a crash would) and reaps it.
  void killServer();
  // Starts the server again (killing it first if it runs) on the same
  // address with the same session log; returns once it listens.
  void restartServer();
  // Starts one more governor; returns its index.
  size_t addGovernor();
  // Starts governor `i` again once it ended (reaped first): the same index,
  // work dir and arguments; returns once it registered. Throws
  // std::runtime_error naming what failed; a governor started over ssh is
  // not started again (std::logic_error).
  void restartGovernor(size_t i);
  const std::string& serverAddress() const { return address; }
  // host:port of the status page; empty when it is off.
  const std::string& httpAddress() const { return httpAddr; }
  const std::string& workDir() const { return work; }
  ChildProcess& server() { return *serverProcess; }
  ChildProcess& governor(size_t i) { return *governorProcesses.at(i); }
  size_t governorCount() const { return governorProcesses.size(); }
  // The read end of the lifeline the server and governors inherit.
  int lifelineFd() const { return lifelineRead; }
  // Stops everything (governors first) with SIGTERM; safe to call twice.
  // Returns what went wrong, one line a process, empty when all went well:
  // an exit with SANITIZER_EXIT_CODE (a sanitizer report, at any time), a
  // crash as it stopped, or a hang ended by SIGKILL after 20 s.
  std::string stop();

 private:
  ClusterOptions options;
  std::string address;
  std::string httpAddr;
  std::string work;
  // The token file every part is given ("" for none).
  std::string tokenPath;
  bool ownsWorkDir = false;
  std::unique_ptr<ChildProcess> serverProcess;
  std::vector<std::unique_ptr<ChildProcess>> governorProcesses;
  // Per governor: started over ssh (not restartGovernor's).
  std::vector<bool> overSsh;
  // Both close-on-exec; the children get the read end by --lifeline-fd.
  int lifelineRead = -1;
  int lifelineWrite = -1;
  // stop() ran since the last process started: a second one finds nothing.
  bool stopped = false;

  void startServer(const std::string& listen);
  // Starts local governor `index` and waits for it to register.
  std::unique_ptr<ChildProcess> launchGovernor(size_t index);
  // A governor on `destination` over ssh (ClusterOptions::sshHosts).
  void addSshGovernor(const std::string& destination);
  // What every governor is started with (governor `index`, its lifeline
  // at descriptor `lifelineFd`), and its program.
  std::vector<std::string> governorArgs(size_t index, int lifelineFd) const;
  std::string governorProgram() const;
  // The TLS flags every part gets.
  void appendTls(std::vector<std::string>& args) const;
};

// Where a squall program lives: $SQUALL_BIN_DIR, beside the running
// program, in the build tree's server/, governor/ or python/, or on $PATH.
std::string findProgram(const std::string& name);

// An executor given as NAME=PROGRAM, with a PROGRAM given as a relative
// path made absolute: the governors start executors in their own work
// dirs. The governors check the rest (the name, the program itself) and
// refuse to start, saying why. Throws std::invalid_argument ("takes
// NAME=PROGRAM (got '...')") for another shape.
std::string resolveExecutor(const std::string& executor);

// `text` as one word for a POSIX shell (ssh hands the remote side a line;
// a Slurm batch script is one).
std::string shellQuote(const std::string& text);

// A new, started cluster of `governors` governors offering `cpus` cpus each
// (the end-to-end tests keep one per suite). Throws as start() does.
LocalCluster* startCluster(int governors, uint32_t cpus);

}  // namespace squall
