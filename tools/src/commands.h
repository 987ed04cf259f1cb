// The `squall` command's subcommands. Each runs on the calling thread and
// returns the process exit status.
#pragma once

#include <squall/tools/local-cluster.h>
#include <string>
#include <vector>

namespace squall {

// Blocks SIGINT/SIGTERM/SIGHUP for this thread and returns a signalfd for them, so
// that Ctrl-C (or Slurm's SIGTERM) is an event a foreground command polls
// for beside its children's exits.
int stopSignalFd();

// With no token and no token file in `options`: a token by default, made
// once, in the default file (defaultTokenFile()), where every part and
// every client of this user finds it. False, after saying why on stderr
// (prefixed by `command`), when it cannot be made.
bool useDefaultToken(ClusterOptions& options, const char* command);

// Runs a server and governors in the foreground until SIGINT/SIGTERM (or
// until one of them dies), then stops them all.
int runStart(ClusterOptions options);

struct SubmitOptions {
  std::string server;
  std::string token;
  std::string stdinFile;
  std::string stdoutFile;   // empty: the program's stdout is printed
  std::vector<std::string> inputs;          // PATH=FILE (FILE may be a directory)
  std::vector<std::string> writableInputs;  // PATH=FILE, a copy the program may change
  std::vector<std::string> outputs;         // PATH=FILE; PATH/=DIR for a directory
  uint32_t cpus = 1;
  // NAME=AMOUNT (or NAME=all): resources besides cpus (docs/resources.md).
  std::vector<std::string> resources;
  // Wait for a governor that has them rather than be refused at submit.
  bool waitForResources = false;
  std::string name;
  bool shell = false;
  std::vector<std::string> command;
  // --call EXECUTOR/FUNCTION: a function of a warm executor (tasklib)
  // instead of a program; --input then takes FILE (in order), --output FILE
  // (FILE/ for a dir output), and the config is --config or --config-file.
  std::string call;
  std::string config;
  std::string configFile;
  // Actors (docs/actors.md), named so that later commands reach them:
  // --actor EXECUTOR/Type --name NAME starts one (--input FILE, --config,
  // --cpus, --resource and --max-restarts / --max-call-retries for it) and
  // returns; --method NAME.METHOD calls a method of a live named actor
  // (its config, its outputs as with --call); --kill-actor NAME ends one.
  std::string actor;
  std::string method;
  std::string killActor;
  uint32_t maxRestarts = 0;
  uint32_t maxCallRetries = 0;
};

// Runs one program as a task, waits, writes its outputs to local files and
// returns the program's exit status.
int runSubmit(const SubmitOptions& options);

struct RunOptions {
  std::string server;
  std::string token;
  std::string file;
  std::string name;  // session name; empty = the pipeline's ("command" for -c)
  bool dryRun = false;
  bool keepGoing = false;
  // Tasks wait for a governor that has what they ask (Task::waitForResources).
  bool waitForResources = false;
  // -c LINE: a shell pipe run as one streamed task per stage.
  std::string command;
  std::string stdinFile;   // -c: stage 1's stdin ("-" = squall's); empty = /dev/null
  std::string outputFile;  // -c: the output goes here; empty = squall's stdout
  uint32_t cpus = 1;       // -c: each stage's, when cpusAsked
  bool cpusAsked = false;  // -c: --cpus given; else the stages share one cpu
};

// `squall run`: runs a pipeline file (docs/pipelines.md). Exit status 0 if
// every task not allowed to fail finished, 1 if not (or the server could not
// be used), 2 for a bad pipeline file.
int runPipeline(const RunOptions& options);

// `squall run -c LINE`: the output of the pipe on stdout (or in
// outputFile), each stage's stderr on stderr. Exit status 0 if every stage
// succeeded; else the exit status of the first (leftmost) stage that failed
// (1 if it did not exit by itself, or the server could not be used); 2 for
// a line it cannot run (nothing was submitted).
int runCommandLine(const RunOptions& options);

// The session commands: SESSION is an id or a name (the newest open session
// with that name, else the last closed one the server keeps).
struct SessionCommandOptions {
  std::string server;
  std::string token;
  std::string session;
  std::string task;    // logs: an id or a name
  std::string object;  // fetch: an object id
  std::string output;  // fetch: local path; empty or "-" = stdout
};
int runStatus(const SessionCommandOptions& options);
int runWait(const SessionCommandOptions& options);
int runFetch(const SessionCommandOptions& options);
int runCancel(const SessionCommandOptions& options);
int runLogs(const SessionCommandOptions& options);
// Why a task is not running yet (or how it ended).
int runExplain(const SessionCommandOptions& options);

// Starts a server with one governor, runs a small sample pipeline, prints
// what it made, and stops.
int runDemo(ClusterOptions options);

// `squall slurm run` (docs/deploy.md, "Slurm"): inside an allocation, a
// server here and one governor on every node of the job (srun), in the
// foreground until SIGINT/SIGTERM (the end of the allocation) or, given a
// command, until it ends; the command's exit status then.
struct SlurmRunOptions {
  // listen (default: this node's host name, any port), http, tokenFile,
  // token, logLevel, executors, governorArgs, serverArgs, workDir.
  ClusterOptions cluster;
  // Run with $SQUALL_SERVER and $SQUALL_TOKEN_FILE set, after every
  // governor registered; empty: none.
  std::vector<std::string> command;
  // How long srun and the governors may take to come up, in seconds.
  double startTimeout = 300;
};
int runSlurmRun(SlurmRunOptions options);

// `squall slurm auto`: submits governor jobs while tasks wait, lets them go
// when idle, backs off when they fail at start (slurm-autoscaler.h).
struct SlurmAutoOptions {
  std::string server;
  std::string tokenFile;
  uint32_t maxJobs = 4;
  std::string timeLimit = "1:00:00";
  std::string partition;
  // Cpus a job asks for on its node; 0: the whole node (--exclusive).
  uint32_t cpusPerJob = 0;
  std::string idleTimeout = "60s";
  std::string backoff = "10s";
  std::string backoffMax = "10m";
  std::string minRun = "60s";
  std::string pollInterval = "2s";
  std::vector<std::string> sbatchArgs;
  std::vector<std::string> governorArgs;
  std::vector<std::string> executors;
  // empty: findProgram("squall-governor")
  std::string governorProgram;
  // Where the jobs' output goes (squall-governor-JOBID.log); empty: the
  // directory of the default token file, slurm/ under it.
  std::string logDir;
  std::string logLevel = "info";
  std::string governorLogLevel = "warn";
};
int runSlurmAuto(const SlurmAutoOptions& options);

// `squall slurm governor --program P -- ARGS`: inside a job (step), replaces
// itself with squall-governor ARGS plus the job's cpus, a name Slurm-mode
// tools recognise, and this node's address (slurm::governorArgsInJob).
int runSlurmGovernor(const std::string& program, const std::vector<std::string>& args);

}  // namespace squall
