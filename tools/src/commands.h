// The `squall` command's subcommands. Each runs on the calling thread and
// returns the process exit status.
#pragma once

#include <squall/tools/local-cluster.h>
#include <string>
#include <vector>

namespace squall {

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
  std::string name;
  bool shell = false;
  std::vector<std::string> command;
  // --call EXECUTOR/FUNCTION: a function of a warm executor (tasklib)
  // instead of a program; --input then takes FILE (in order), --output FILE
  // (FILE/ for a dir output), and the config is --config or --config-file.
  std::string call;
  std::string config;
  std::string configFile;
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

}  // namespace squall
