// `squall run PIPELINE.toml`: plan a pipeline file, submit it as one
// session, follow it, write the collected outputs, and exit 0 only if every
// task that was not allowed to fail finished.
// `squall run -c LINE`: the same for a shell pipe, one streamed task per
// stage, its output on stdout.
#include "commands.h"
#include "pipeline-builder.h"
#include "pipeline-command.h"
#include "pipeline-progress.h"
#include "pipeline.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <squall/client/client.h>
#include <unistd.h>

extern char** environ;

namespace squall {

namespace fs = std::filesystem;

namespace {

// Moves what `from` holds into the directory `into`, entry by entry: a
// file replaces the file of its name, a directory merges into the one of
// its name; what `into` holds besides is left alone. With `check`, moves
// nothing and throws where collectRefusal refuses an entry (so a refused
// merge leaves `into` as it was).
void mergeInto(const fs::path& from, const fs::path& into, bool check) {
  for (auto& entry : fs::directory_iterator(from)) {
    auto target = into / entry.path().filename();
    bool dir = entry.is_directory() && !entry.is_symlink();
    if (auto refused = collectRefusal(target.string(), dir ? ObjectKind::DIR : ObjectKind::BLOB)) {
      throw std::runtime_error(*refused);
    }
    if (dir && fs::is_directory(fs::symlink_status(target))) {
      mergeInto(entry.path(), target, check);
    } else if (!check) {
      fs::rename(entry.path(), target);
    }
  }
}

// Writes a finished output to its local path once its bytes are all here
// (fetched beside it first). Nothing of the user's is deleted: a file
// output replaces only a file (as `>` would), a dir output is merged into a
// directory that is there (docs/pipelines.md, "Collecting results").
void writeCollected(const CollectTarget& target) {
  fs::path path(target.path);
  if (auto refused = collectRefusal(target.path, target.kind)) throw std::runtime_error(*refused);
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  fs::path partial = path.string() + ".squall-partial";
  fs::remove_all(partial);
  bool merge = target.kind == ObjectKind::DIR && fs::is_directory(fs::symlink_status(path));
  if (target.kind == ObjectKind::DIR) {
    target.object.fetchDir(partial.string());
  } else {
    target.object.fetchToFile(partial.string());
  }
  if (!merge) {
    fs::rename(partial, path);
    return;
  }
  try {
    mergeInto(partial, path, true);
    mergeInto(partial, path, false);
  } catch (...) {
    fs::remove_all(partial);
    throw;
  }
  fs::remove_all(partial);
}

std::string indent(const std::string& text, const char* prefix) {
  std::string out = prefix;
  for (size_t i = 0; i < text.size(); i++) {
    out += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) out += prefix;
  }
  if (!out.empty() && out.back() != '\n') out += '\n';
  return out;
}

// Shows nothing: `squall run -c` keeps stdout for the data and, unless
// stderr is a terminal, stderr for the stages' messages.
class SilentProgress final : public ProgressReporter {
 public:
  void start(const std::string&, size_t) override {}
  void finished(const std::string&) override {}
  void failed(const std::string&, const std::string&, bool) override {}
  void end() override {}
};

// Stage 1's --stdin is uploaded as a constant, so it must fit one.
constexpr uintmax_t MAX_STDIN_BYTES = 48u << 20;

// A run's summary counts retried tasks up to this many finished tasks.
constexpr size_t RETRIES_ASKED_MAX = 100000;

// The locale of this shell (LANG, LANGUAGE, LC_*), so that sort, grep and
// friends on the governors behave as they do here.

std::vector<std::pair<std::string, std::string>> localeEnvironment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; *e != nullptr; e++) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    auto name = entry.substr(0, eq);
    if (name == "LANG" || name == "LANGUAGE" || name.rfind("LC_", 0) == 0) {
      env.emplace_back(name, entry.substr(eq + 1));
    }
  }
  std::sort(env.begin(), env.end());
  return env;
}

}  // namespace

int runPipeline(const RunOptions& options) {
  PipelinePlan plan;
  try {
    plan = planPipeline(parsePipelineFile(options.file));
  } catch (const PipelineError& e) {
    fprintf(stderr, "squall run: %s\n", e.what());
    return 2;
  }
  if (!options.name.empty()) plan.name = options.name;
  if (options.dryRun) {
    fputs(describePlan(plan).c_str(), stdout);
    return 0;
  }

  auto began = std::chrono::steady_clock::now();
  try {
    Client client(options.server, options.token);
    auto session = client.newSession(plan.name);
    PipelineBuilder builder(session, options.keepGoing, options.waitForResources);
    auto built = builder.build(plan);
    session.submit();

    // Actors are not watched: they live until the run ends (the session's
    // close ends them, unless named); their calls are.
    std::vector<WatchedTask> watched;
    std::vector<size_t> watchedTask;  // watched -> index in plan.tasks
    for (size_t i = 0; i < plan.tasks.size(); i++) {
      if (plan.tasks[i].kind == PlannedTask::Kind::ACTOR) continue;
      watched.push_back({built.tasks[i], plan.tasks[i].name});
      watchedTask.push_back(i);
    }
    auto reporter = makeProgressReporter(stdout, isatty(STDOUT_FILENO));
    reporter->start(plan.name + " (session " + std::to_string(session.id()) + ")", watched.size());
    // Ctrl-C, a kill or a hung-up terminal: what finished is still collected.
    struct StopFd {
      int fd = stopSignalFd();
      ~StopFd() { ::close(fd); }
    } stop;
    auto result = watchTasks(session, watched, *reporter, stop.fd);

    int status = 0;
    size_t finished = 0, failed = 0, skipped = 0;
    std::vector<uint64_t> failedIds, finishedIds;
    std::vector<TaskOutcome::State> states(plan.tasks.size(), TaskOutcome::State::FINISHED);
    for (size_t w = 0; w < result.outcomes.size(); w++) {
      auto i = watchedTask[w];
      auto state = states[i] = result.outcomes[w].state;
      finished += state == TaskOutcome::State::FINISHED;
      failed += state == TaskOutcome::State::FAILED;
      skipped += state == TaskOutcome::State::SKIPPED;
      if (state == TaskOutcome::State::FAILED) failedIds.push_back(built.tasks[i].id());
      if (state == TaskOutcome::State::FINISHED) finishedIds.push_back(built.tasks[i].id());
      if (state != TaskOutcome::State::FINISHED && !plan.tasks[i].allowFailure) status = 1;
    }

    // The failures in full: error, then the tail of stderr.
    // Once each: the error's first line, then the program's stderr tail.
    if (result.sessionFailure) {
      auto& f = *result.sessionFailure;
      fprintf(stderr, "squall run: %s\n", errorHeadline(f.what()).c_str());
      if (!f.stderrTail.empty()) fputs(indent(f.stderrTail, "  | ").c_str(), stderr);
    } else if (!failedIds.empty()) {
      for (auto& info : session.tasks(failedIds)) {
        fprintf(stderr, "squall run: task %s failed%s: %s\n", info.name.c_str(),
                info.attempt > 1 ? (" (attempt " + std::to_string(info.attempt) + ")").c_str() : "",
                errorHeadline(info.error).c_str());
        if (!info.stderrTail.empty()) fputs(indent(info.stderrTail, "  | ").c_str(), stderr);
      }
    }

    for (auto& target : built.collect) {
      if (states[target.task] != TaskOutcome::State::FINISHED) continue;
      try {
        writeCollected(target);
        printf("collected %s -> %s\n", plan.tasks[target.task].name.c_str(), target.path.c_str());
      } catch (const std::exception& e) {
        fprintf(stderr, "squall run: cannot collect %s into %s: %s\n",
                plan.tasks[target.task].name.c_str(), target.path.c_str(), e.what());
        status = 1;
      }
    }

    auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    if (result.interruptedBy != 0) {
      // Closing the session cancels what is left (it is not persistent).
      printf("INTERRUPTED %s (%s): %zu finished and collected, %zu failed, %zu skipped, %zu cancelled (%.1fs)\n",
             plan.name.c_str(), strsignal(result.interruptedBy), finished, failed, skipped,
             watched.size() - finished - failed - skipped, seconds);
      fflush(stdout);
      session.close();
      return 128 + result.interruptedBy;
    }
    // Retries, which a summary of outcomes alone hides (issue 41): asked
    // of the server for runs small enough to ask in one call.
    std::string retried;
    if (!finishedIds.empty() && finishedIds.size() <= RETRIES_ASKED_MAX) {
      size_t n = 0;
      for (auto& info : session.tasks(finishedIds)) n += info.attempt > 1;
      if (n > 0) retried = " (" + std::to_string(n) + " after a retry)";
    }
    printf("%s %s: %zu finished%s, %zu failed, %zu skipped, %zu not run (%.1fs)\n",
           status == 0 ? "done" : "FAILED", plan.name.c_str(), finished, retried.c_str(), failed, skipped,
           watched.size() - finished - failed - skipped, seconds);
    fflush(stdout);
    session.close();
    return status;
  } catch (const Error& e) {
    fprintf(stderr, "squall run: %s\n", e.what());
    return 1;
  }
}

int runCommandLine(const RunOptions& options) {
  CommandOptions command;
  command.name = options.name.empty() ? "command" : options.name;
  if (options.cpusAsked) command.cpus = options.cpus;
  command.env = localeEnvironment();
  std::vector<PipeStage> stages;
  PipelinePlan plan;
  try {
    stages = splitShellPipe(options.command);
    if (!options.stdinFile.empty() && options.stdinFile != "-") {
      auto path = fs::absolute(options.stdinFile).lexically_normal();
      std::error_code ec;
      if (!fs::is_regular_file(path, ec)) {
        throw PipelineError("--stdin: '" + options.stdinFile + "' is not a readable file");
      }
      if (fs::file_size(path, ec) > MAX_STDIN_BYTES) {
        throw PipelineError("--stdin: '" + options.stdinFile + "' is larger than 48 MiB, the most squall "
                            "uploads; put it where the governors can read it and name it by absolute "
                            "path in the first stage (e.g. 'zcat /data/big.gz | ...')");
      }
      command.stdinFile = path.string();
    } else {
      command.stdinFile = options.stdinFile;
    }
    if (!options.outputFile.empty()) command.outputFile = fs::absolute(options.outputFile).lexically_normal();
    plan = planCommand(stages, command);
  } catch (const PipelineError& e) {
    fprintf(stderr, "squall run: %s\n", e.what());
    return 2;
  }
  for (auto& name : relativeLocalPaths(stages, fs::current_path().string())) {
    fprintf(stderr, "squall run: warning: %s is a file here, but each stage runs in a sandbox on a "
                    "governor, where relative paths are relative to the sandbox: name it by absolute "
                    "path\n", name.c_str());
  }
  if (options.dryRun) {
    fputs(describePlan(plan).c_str(), stdout);
    return 0;
  }

  try {
    Client client(options.server, options.token);
    auto session = client.newSession(plan.name);
    PipelineBuilder builder(session, false);
    auto built = builder.build(plan);
    session.submit();

    std::vector<WatchedTask> watched;
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < plan.tasks.size(); i++) {
      watched.push_back({built.tasks[i], plan.tasks[i].name});
      ids.push_back(built.tasks[i].id());
    }
    std::unique_ptr<ProgressReporter> reporter = std::make_unique<SilentProgress>();
    if (isatty(STDERR_FILENO)) reporter = makeProgressReporter(stderr, true);
    reporter->start(plan.name + " (session " + std::to_string(session.id()) + ")", watched.size());
    auto result = watchTasks(session, watched, *reporter);
    bool succeeded = !result.sessionFailure;
    for (auto& outcome : result.outcomes) succeeded = succeeded && outcome.state == TaskOutcome::State::FINISHED;

    auto infos = session.tasks(ids);
    int status = 0;
    if (succeeded) {
      // What the stages said on stderr, as a shell would have shown it.
      for (auto& info : infos) fputs(info.stderrTail.c_str(), stderr);
      fflush(stderr);
      auto& target = built.collect.at(0);
      try {
        if (target.path == "-") {
          target.object.fetchTo(stdout);
          fflush(stdout);
        } else {
          writeCollected(target);
        }
      } catch (const Error& e) {
        fprintf(stderr, "squall run: cannot write the output%s: %s\n",
                target.path == "-" ? "" : (" to " + target.path).c_str(), e.what());
        status = 1;
      }
    } else {
      // The failed stages, left to right: the first is the cause, the ones
      // after it read from it.
      status = 1;
      bool first = true;
      for (size_t i = 0; i < infos.size(); i++) {
        auto& info = infos[i];
        if (info.state != "failed") continue;
        fprintf(stderr, "squall run: stage %zu (%s) failed: %s\n", i + 1, info.name.c_str(), info.error.c_str());
        if (!info.stderrTail.empty()) fputs(indent(info.stderrTail, "  | ").c_str(), stderr);
        if (first && info.exitStatus > 0 && info.exitStatus < 256) status = info.exitStatus;
        first = false;
      }
      if (first && result.sessionFailure) fprintf(stderr, "squall run: %s\n", result.sessionFailure->what());
    }
    session.close();
    return status;
  } catch (const Error& e) {
    fprintf(stderr, "squall run: %s\n", e.what());
    return 1;
  }
}

}  // namespace squall
