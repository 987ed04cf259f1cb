// `squall run PIPELINE.toml`: plan a pipeline file, submit it as one
// session, follow it, write the collected outputs, and exit 0 only if every
// task that was not allowed to fail finished.
#include "commands.h"
#include "pipeline-builder.h"
#include "pipeline-progress.h"
#include "pipeline.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <squall/client/client.h>
#include <unistd.h>

namespace squall {

namespace fs = std::filesystem;

namespace {

// Writes a finished output to its local path, replacing what was there only
// once the new bytes are all here (fetched beside it, then renamed).
void writeCollected(const CollectTarget& target) {
  fs::path path(target.path);
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  fs::path partial = path.string() + ".squall-partial";
  fs::remove_all(partial);
  if (target.kind == ObjectKind::DIR) {
    target.object.fetchDir(partial.string());
  } else {
    target.object.fetchToFile(partial.string());
  }
  std::error_code ec;
  if (fs::is_directory(fs::symlink_status(path, ec))) fs::remove_all(path);
  fs::rename(partial, path);
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
    PipelineBuilder builder(session, options.keepGoing);
    auto built = builder.build(plan);
    session.submit();

    std::vector<WatchedTask> watched;
    for (size_t i = 0; i < plan.tasks.size(); i++) watched.push_back({built.tasks[i], plan.tasks[i].name});
    auto reporter = makeProgressReporter(stdout, isatty(STDOUT_FILENO));
    reporter->start(plan.name + " (session " + std::to_string(session.id()) + ")", watched.size());
    auto result = watchTasks(session, watched, *reporter);

    int status = 0;
    size_t finished = 0, failed = 0, skipped = 0;
    std::vector<uint64_t> failedIds;
    for (size_t i = 0; i < result.outcomes.size(); i++) {
      auto state = result.outcomes[i].state;
      finished += state == TaskOutcome::State::FINISHED;
      failed += state == TaskOutcome::State::FAILED;
      skipped += state == TaskOutcome::State::SKIPPED;
      if (state == TaskOutcome::State::FAILED) failedIds.push_back(built.tasks[i].id());
      if (state != TaskOutcome::State::FINISHED && !plan.tasks[i].allowFailure) status = 1;
    }

    // The failures in full: error, then the tail of stderr.
    if (result.sessionFailure) {
      auto& f = *result.sessionFailure;
      fprintf(stderr, "squall run: %s\n", f.what());
      if (!f.stderrTail.empty() && std::string(f.what()).find(f.stderrTail) == std::string::npos) {
        fputs(indent(f.stderrTail, "  | ").c_str(), stderr);
      }
    } else if (!failedIds.empty()) {
      for (auto& info : session.tasks(failedIds)) {
        fprintf(stderr, "squall run: task %s failed%s: %s\n", info.name.c_str(),
                info.attempt > 1 ? (" (attempt " + std::to_string(info.attempt) + ")").c_str() : "",
                info.error.c_str());
        if (!info.stderrTail.empty()) fputs(indent(info.stderrTail, "  | ").c_str(), stderr);
      }
    }

    for (auto& target : built.collect) {
      if (result.outcomes[target.task].state != TaskOutcome::State::FINISHED) continue;
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
    printf("%s %s: %zu finished, %zu failed, %zu skipped, %zu not run (%.1fs)\n",
           status == 0 ? "done" : "FAILED", plan.name.c_str(), finished, failed, skipped,
           plan.tasks.size() - finished - failed - skipped, seconds);
    fflush(stdout);
    session.close();
    return status;
  } catch (const Error& e) {
    fprintf(stderr, "squall run: %s\n", e.what());
    return 1;
  }
}

}  // namespace squall
