// Shows a running pipeline's progress and follows its tasks to the end.
//
// ProgressReporter draws it: a live one-line bar on a terminal, or one plain
// line per finished/failed task when stdout is a file or a pipe (so logs and
// tests read it). watchTasks() drives it from the server's completions
// (waitSome: pushed by the server, no polling).
#pragma once

#include <cstdio>
#include <memory>
#include <optional>
#include <squall/client/client.h>
#include <string>
#include <vector>

namespace squall {

class ProgressReporter {
 public:
  virtual ~ProgressReporter() = default;
  virtual void start(const std::string& pipeline, size_t tasks) = 0;
  virtual void finished(const std::string& task) = 0;
  // `skipped`: not run because something it needs failed.
  virtual void failed(const std::string& task, const std::string& error, bool skipped) = 0;
  // Clears the bar (if any) so a summary can follow.
  virtual void end() = 0;
};

// Writes to `out`; `terminal` picks the live bar.
std::unique_ptr<ProgressReporter> makeProgressReporter(std::FILE* out, bool terminal);

struct WatchedTask {
  Task task;
  std::string name;
};

struct TaskOutcome {
  enum class State { FINISHED, FAILED, SKIPPED, UNFINISHED };
  State state = State::UNFINISHED;
  std::string error;
};

struct WatchResult {
  std::vector<TaskOutcome> outcomes;  // same order as the watched tasks
  // Set when the session failed as a whole (a task not allowed to fail, or
  // a cancel): unfinished tasks were cancelled.
  std::optional<TaskFailed> sessionFailure;
};

// Blocks until every task has finished, failed or been skipped, or the
// session fails; reports each as it ends.
WatchResult watchTasks(Session& session, const std::vector<WatchedTask>& tasks,
                       ProgressReporter& reporter);

}  // namespace squall
