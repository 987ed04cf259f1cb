// squall: the command-line tool (start a local cluster, submit programs,
// run pipeline files, look at sessions).
#include "src/commands.h"

#include <CLI/CLI.hpp>
#include <squall/proto/version.h>
#include <sstream>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  CLI::App app{"squall: run graphs of tasks on squall governors"};
  app.set_version_flag("--version", squall::versionText("squall"));
  app.require_subcommand(1);

  squall::ClusterOptions cluster;
  cluster.listen = "127.0.0.1:7210";
  cluster.http = "127.0.0.1:7222";
  auto* start = app.add_subcommand("start", "run a server and local governors in the foreground");
  start->add_option("--governors,-g", cluster.governors, "how many governors")->capture_default_str()
      ->check(CLI::Range(0, 256));
  start->add_option("--listen", cluster.listen, "server address (host:port)")->capture_default_str();
  start->add_option("--http", cluster.http,
                    "status page address (host:port; port 0: any free one; 'off': none)")
      ->capture_default_str();
  start->add_option("--work-dir", cluster.workDir,
                    "the session log and governors' work dirs go under it, kept "
                    "(default: $XDG_STATE_HOME/squall/start)");
  start->add_option("--cpus", cluster.cpus, "cpus each governor offers (default: detected)");
  start->add_option("--token-file", cluster.tokenFile,
                    "file holding the shared secret every part and client presents (default: made if need "
                    "be at $XDG_STATE_HOME/squall/token or ~/.local/state/squall/token, 0600, where clients "
                    "on this machine find it)");
  start->add_option("--ssh", cluster.sshHosts,
                    "[USER@]HOST: one more governor, on HOST, started over ssh with the same program path; the "
                    "token file is copied there, and the governor goes when squall start does. Give --listen an "
                    "address HOST can reach (docs/deploy.md); repeatable")
      ->type_name("DEST");
  std::string sshCommand;
  start->add_option("--ssh-command", sshCommand,
                    "the ssh command, split on spaces (default: ssh -o BatchMode=yes), e.g. 'ssh -F cluster.conf'");
  start->add_option("--token", cluster.token,
                    "the shared secret itself (handed to the parts in a 0600 file; prefer --token-file)");
  start->add_option("--log-level", cluster.logLevel, "server and governor log level")
      ->capture_default_str();
  start->add_option("--executor", cluster.executors,
                    "an executor program (tasklib) every governor keeps warm, whose functions run as call "
                    "tasks (docs/tasklib.md); repeatable")
      ->type_name("NAME=PROGRAM");
  std::vector<std::string> startResources;
  start->add_option("--resource", startResources,
                    "a resource every governor offers besides cpus, as squall-governor --resource takes it: "
                    "NAME=COUNT, NAME=[ID,...] or NAME=sum(AMOUNT); repeatable (docs/resources.md)")
      ->type_name("NAME=VALUE");
  bool startPython = false;
  start->add_flag("--python", startPython,
                  "every governor keeps squall-python-executor warm too, for @squall.remote functions "
                  "(docs/python.md)");

  squall::ClusterOptions demoCluster;
  demoCluster.logLevel = "error";
  auto* demo = app.add_subcommand("demo", "start a server and a governor, run a sample pipeline");
  demo->add_option("--governors,-g", demoCluster.governors, "how many governors")
      ->capture_default_str()->check(CLI::Range(1, 64));
  demo->add_option("--log-level", demoCluster.logLevel)->capture_default_str();
  demo->add_option("--http", demoCluster.http, "status page address (port 0: any free one; 'off')")
      ->capture_default_str();

  squall::SubmitOptions submit;
  auto* sub = app.add_subcommand("submit", "run one program as a task and wait for it");
  sub->add_option("--server", submit.server, "server host:port (default $SQUALL_SERVER or 127.0.0.1:7210)");
  sub->add_option("--token", submit.token, "shared secret (default $SQUALL_TOKEN)");
  sub->add_option("--stdin", submit.stdinFile, "local file fed to the program's stdin");
  sub->add_option("--stdout", submit.stdoutFile, "write the program's stdout here (default: print it)");
  sub->add_option("--input", submit.inputs,
                  "PATH=FILE: local FILE (or directory) placed at PATH in the sandbox, read-only");
  sub->add_option("--input-rw", submit.writableInputs,
                  "PATH=FILE: like --input, but a copy the program may change");
  sub->add_option("--output", submit.outputs,
                  "PATH=FILE: the sandbox file PATH is written to FILE (PATH/=DIR: a directory, "
                  "unpacked into DIR); at an --input's PATH it is that input changed in place");
  sub->add_option("--cpus", submit.cpus, "cpus the task needs")->capture_default_str()->check(CLI::Range(1, 4096));
  sub->add_option("--resource", submit.resources,
                  "NAME=AMOUNT: a resource the task needs besides cpus (gpus=1, gpus=0.5, mem=2G, "
                  "scratch=all); repeatable (docs/resources.md)")
      ->type_name("NAME=AMOUNT");
  sub->add_option("--name", submit.name, "task name");
  sub->add_flag("--shell", submit.shell, "run the command line with /bin/sh -c");
  sub->add_flag("--wait-for-resources", submit.waitForResources,
                "when no governor connected now has the cpus or resources asked, wait for one (a growing "
                "cluster, an autoscaler) instead of refusing the task");
  sub->add_option("--call", submit.call,
                  "run a function of an executor the governors keep warm (docs/tasklib.md) instead of a "
                  "program; then --input FILE (in order), --output FILE (FILE/ for a dir output; none: one "
                  "blob, printed)")
      ->type_name("EXECUTOR/FUNCTION");
  sub->add_option("--actor", submit.actor,
                  "start an actor of this type, named by --name (docs/actors.md): it lives until killed; "
                  "--input FILE, --config, --cpus, --resource are its constructor's and its own")
      ->type_name("EXECUTOR/Type");
  sub->add_option("--max-restarts", submit.maxRestarts, "with --actor: times its process is started again")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--max-call-retries", submit.maxCallRetries,
                  "with --actor: times a call running when its process died runs again")
      ->check(CLI::Range(0, 1000));
  sub->add_option("--method", submit.method,
                  "call a method of the live actor named NAME; its config as with --call, --output FILE "
                  "(none: one blob, printed)")
      ->type_name("NAME.METHOD");
  sub->add_option("--kill-actor", submit.killActor, "end the live actor named NAME")->type_name("NAME");
  sub->add_option("--config", submit.config, "with --call, --actor or --method: the config, as text");
  sub->add_option("--config-file", submit.configFile,
                  "with --call, --actor or --method: a file whose bytes are the config");
  sub->add_option("command", submit.command, "PROGRAM ARGS... (after --)");

  squall::RunOptions run;
  auto* runCommand = app.add_subcommand(
      "run", "run a pipeline file, or with -c a shell pipe, one task per stage (see docs/pipelines.md)");
  runCommand->add_option("--server", run.server, "server host:port (default $SQUALL_SERVER or 127.0.0.1:7210)");
  runCommand->add_option("--token", run.token, "shared secret (default $SQUALL_TOKEN)");
  runCommand->add_option("--name", run.name, "session name (default: the pipeline's name)");
  runCommand->add_flag("--dry-run,-n", run.dryRun, "print the tasks it would run, run nothing");
  runCommand->add_flag("--keep-going,-k", run.keepGoing,
                       "after a failure, run everything that does not depend on it");
  runCommand->add_flag("--wait-for-resources", run.waitForResources,
                       "steps asking more cpus or resources than any governor connected now has wait for one "
                       "(a growing cluster, an autoscaler) instead of being refused");
  auto* pipelineFile = runCommand->add_option("pipeline", run.file, "PIPELINE.toml");
  auto* commandLine = runCommand->add_option(
      "-c,--command", run.command, "LINE: a shell pipe ('a | b | c'); each stage runs as a task, its stdout "
      "streamed to the next; the output is printed. A stage 'call EXECUTOR/FUNCTION [CONFIG...]' calls a "
      "function instead (docs/pipelines.md)");
  auto* stdinFile = runCommand->add_option(
      "--stdin", run.stdinFile, "-c: local file (48 MiB at most; - = this stdin) fed to stage 1");
  auto* outputFile = runCommand->add_option("-o,--output", run.outputFile, "-c: write the output here");
  auto* stageCpus = runCommand->add_option("--cpus", run.cpus,
                                           "-c: cpus each stage holds (default: the stages share one, as "
                                           "a shell's pipe does)")
                        ->check(CLI::Range(1, 4096));
  pipelineFile->excludes(commandLine);
  commandLine->excludes(pipelineFile);
  stdinFile->needs(commandLine);
  outputFile->needs(commandLine);
  stageCpus->needs(commandLine);

  // status / wait / fetch / cancel / logs / explain share their connection flags.
  squall::SessionCommandOptions sessionOptions;
  auto addSessionCommand = [&](const char* name, const char* help, bool sessionRequired) {
    auto* command = app.add_subcommand(name, help);
    command->add_option("--server", sessionOptions.server, "server host:port (default $SQUALL_SERVER)");
    command->add_option("--token", sessionOptions.token, "shared secret (default $SQUALL_TOKEN)");
    auto* session = command->add_option("session", sessionOptions.session, "SESSION: an id or a name");
    if (sessionRequired) session->required();
    return command;
  };
  auto* status = addSessionCommand("status", "list sessions, or show one session's tasks and failures", false);
  auto* waitCommand = addSessionCommand("wait", "wait until a session's tasks are done, across server restarts; exit 1 if it failed", true);
  auto* fetch = addSessionCommand("fetch", "write a kept object of a session to a file (a dir: unpacked)", true);
  fetch->add_option("object", sessionOptions.object, "OBJECT id")->required();
  fetch->add_option("-o,--output", sessionOptions.output, "local path (default: stdout; a dir needs one)");
  auto* cancel = addSessionCommand("cancel", "cancel a session's unfinished tasks (the session fails)", true);
  auto* logs = addSessionCommand("logs", "show a task's error, exit status and stdout/stderr tails", true);
  logs->add_option("task", sessionOptions.task, "TASK: an id or a name")->required();
  auto* explain = addSessionCommand(
      "explain", "say why a task is not running yet (inputs, resources, queue) or how it ended", true);
  explain->add_option("task", sessionOptions.task, "TASK: an id or a name")->required();

  squall::SlurmRunOptions slurmRun;
  slurmRun.cluster.listen = "";  // this node's host name, any port
  auto* slurm = app.add_subcommand("slurm", "squall on a Slurm cluster (docs/deploy.md, \"Slurm\")");
  slurm->require_subcommand(1);
  auto* slurmRunCommand = slurm->add_subcommand(
      "run", "inside an allocation (sbatch, salloc): the server here and a governor on every node of the job "
             "(srun), in the foreground; with -- COMMAND, until COMMAND ends (its exit status), which finds the "
             "server through $SQUALL_SERVER and $SQUALL_TOKEN_FILE");
  slurmRunCommand->add_option("--listen", slurmRun.cluster.listen,
                              "server address (default: this node's host name, any free port)");
  slurmRunCommand->add_option("--http", slurmRun.cluster.http,
                              "status page address (host:port; port 0: any free one; 'off': none)")
      ->capture_default_str();
  slurmRunCommand->add_option("--token-file", slurmRun.cluster.tokenFile,
                              "the token file, at a path every node of the job can read (default: made if need be "
                              "at $XDG_STATE_HOME/squall/token or ~/.local/state/squall/token: a shared home)");
  slurmRunCommand->add_option("--work-dir", slurmRun.cluster.workDir,
                              "the server's session log goes here (default: a temp dir on this node)");
  slurmRunCommand->add_option("--log-level", slurmRun.cluster.logLevel, "server and governor log level")
      ->capture_default_str();
  slurmRunCommand->add_option("--executor", slurmRun.cluster.executors,
                              "an executor program (absolute path, the same on every node) every governor keeps "
                              "warm; repeatable")
      ->type_name("NAME=PROGRAM");
  slurmRunCommand->add_option("--governor-arg", slurmRun.cluster.governorArgs,
                              "one more argument for every squall-governor (--governor-arg=--resource=gpus=2); "
                              "repeatable");
  slurmRunCommand->add_option("--governor-program", slurmRun.cluster.governorProgram,
                              "the squall-governor to run on the nodes (default: the one beside this squall)");
  slurmRunCommand->add_option("--start-timeout", slurmRun.startTimeout,
                              "seconds srun and the governors may take to come up")
      ->capture_default_str()->check(CLI::Range(1.0, 86400.0));
  slurmRunCommand->add_option("command", slurmRun.command, "COMMAND ARGS... (after --)");

  squall::SlurmAutoOptions slurmAuto;
  auto* slurmAutoCommand = slurm->add_subcommand(
      "auto", "submit governor jobs to Slurm while tasks wait for a governor, let them go when idle, and "
              "back off when they fail at start; in the foreground (Ctrl-C cancels its jobs)");
  slurmAutoCommand->add_option("--server", slurmAuto.server,
                               "server host:port, reachable from the nodes (default $SQUALL_SERVER)");
  slurmAutoCommand->add_option("--token-file", slurmAuto.tokenFile,
                               "the token file, at a path every node can read (default $SQUALL_TOKEN_FILE, else "
                               "the default token file)");
  slurmAutoCommand->add_option("--max-jobs", slurmAuto.maxJobs, "governor jobs at most, pending or running")
      ->capture_default_str()->check(CLI::Range(1, 100000));
  slurmAutoCommand->add_option("--time-limit", slurmAuto.timeLimit, "each job's --time, in Slurm's formats")
      ->capture_default_str();
  slurmAutoCommand->add_option("--partition", slurmAuto.partition, "the partition jobs go to (default: Slurm's)");
  slurmAutoCommand->add_option("--cpus-per-job", slurmAuto.cpusPerJob,
                               "cpus each job asks for on its node (default: the whole node, --exclusive)")
      ->check(CLI::Range(1, 1 << 20));
  slurmAutoCommand->add_option("--idle-timeout", slurmAuto.idleTimeout,
                               "a governor with no task and no object for this long is let go (90, 90s, 5m)")
      ->capture_default_str();
  slurmAutoCommand->add_option("--backoff", slurmAuto.backoff,
                               "the wait after a job failed at start; doubled each failure in a row")
      ->capture_default_str();
  slurmAutoCommand->add_option("--backoff-max", slurmAuto.backoffMax, "the longest wait after failures")
      ->capture_default_str();
  slurmAutoCommand->add_option("--min-run", slurmAuto.minRun,
                               "a job that ends by itself sooner after it started failed at start")
      ->capture_default_str();
  slurmAutoCommand->add_option("--poll-interval", slurmAuto.pollInterval,
                               "how often the server and Slurm are looked at")
      ->capture_default_str();
  slurmAutoCommand->add_option("--sbatch-arg", slurmAuto.sbatchArgs,
                               "one more sbatch argument (--sbatch-arg=--account=proj); repeatable");
  slurmAutoCommand->add_option("--governor-arg", slurmAuto.governorArgs,
                               "one more squall-governor argument (--governor-arg=--resource=gpus=2); repeatable");
  slurmAutoCommand->add_option("--executor", slurmAuto.executors,
                               "an executor program (absolute path, the same on every node) every governor keeps "
                               "warm; repeatable")
      ->type_name("NAME=PROGRAM");
  slurmAutoCommand->add_option("--governor-program", slurmAuto.governorProgram,
                               "the squall-governor jobs run (default: the one beside this squall)");
  slurmAutoCommand->add_option("--log-dir", slurmAuto.logDir,
                               "where each job's output goes, squall-governor-JOBID.log (default: slurm/ beside the "
                               "default token file)");
  slurmAutoCommand->add_option("--log-level", slurmAuto.logLevel, "this process's log level")->capture_default_str();
  slurmAutoCommand->add_option("--governor-log-level", slurmAuto.governorLogLevel, "the governors' log level")
      ->capture_default_str();

  std::string slurmGovernorProgram;
  std::vector<std::string> slurmGovernorArgs;
  auto* slurmGovernor = slurm->add_subcommand(
      "governor", "(run by squall slurm run and auto inside a job) squall-governor with the job's cpus, a name "
                  "and this node's address, then ARGS");
  slurmGovernor->add_option("--program", slurmGovernorProgram, "the squall-governor")->required();
  slurmGovernor->add_option("args", slurmGovernorArgs, "squall-governor's arguments (after --)");

  // Everything after the first `--` of submit, slurm run and slurm governor
  // is the program's, whatever came before: CLI11 (2.1) lets a list option
  // such as --input end at `--` and then parses what follows as options
  // again. So the program is cut off here and CLI11 sees only squall's own
  // arguments.
  std::vector<std::string> program;
  int cutFrom = 0;
  if (argc > 1 && std::string(argv[1]) == "submit") cutFrom = 2;
  if (argc > 2 && std::string(argv[1]) == "slurm" &&
      (std::string(argv[2]) == "run" || std::string(argv[2]) == "governor")) {
    cutFrom = 3;
  }
  if (cutFrom > 0) {
    for (int i = cutFrom; i < argc; i++) {
      if (std::string(argv[i]) != "--") continue;
      program.assign(argv + i + 1, argv + argc);
      argc = i;
      break;
    }
  }
  CLI11_PARSE(app, argc, argv);
  run.cpusAsked = stageCpus->count() > 0;
  // `squall submit echo -- -n hi` runs `echo -n hi`, as `--` would in CLI11.
  if (*sub) submit.command.insert(submit.command.end(), program.begin(), program.end());
  if (*runCommand) {
    if (*commandLine) {
      if (run.keepGoing) {
        fprintf(stderr, "squall run: --keep-going is for pipeline files; with -c a failing stage stops the "
                        "stages after it anyway\n");
        return 2;
      }
      return squall::runCommandLine(run);
    }
    if (run.file.empty()) {
      fprintf(stderr, "squall run: give a pipeline file (squall run PIPELINE.toml) or a command line "
                      "(squall run -c 'a | b')\n");
      return 2;
    }
    return squall::runPipeline(run);
  }
  if (*status) return squall::runStatus(sessionOptions);
  if (*waitCommand) return squall::runWait(sessionOptions);
  if (*fetch) return squall::runFetch(sessionOptions);
  if (*cancel) return squall::runCancel(sessionOptions);
  if (*logs) return squall::runLogs(sessionOptions);
  if (*explain) return squall::runExplain(sessionOptions);
  if (*start) {
    std::istringstream words(sshCommand);
    for (std::string word; words >> word;) cluster.sshCommand.push_back(word);
    for (auto& resource : startResources) {
      cluster.governorArgs.insert(cluster.governorArgs.end(), {"--resource", resource});
    }
    if (startPython) {
      try {
        cluster.executors.push_back("python=" + squall::findProgram("squall-python-executor"));
      } catch (const std::exception& e) {
        fprintf(stderr, "squall start: --python: %s\n", e.what());
        return 2;
      }
    }
    return squall::runStart(cluster);
  }
  if (*slurmRunCommand) {
    slurmRun.command.insert(slurmRun.command.end(), program.begin(), program.end());
    return squall::runSlurmRun(slurmRun);
  }
  if (*slurmAutoCommand) return squall::runSlurmAuto(slurmAuto);
  if (*slurmGovernor) {
    slurmGovernorArgs.insert(slurmGovernorArgs.end(), program.begin(), program.end());
    return squall::runSlurmGovernor(slurmGovernorProgram, slurmGovernorArgs);
  }
  if (*demo) return squall::runDemo(demoCluster);
  if (*sub) return squall::runSubmit(submit);
  return 2;
}
