// Shows a running pipeline's progress and follows its tasks to the end.
//
// ProgressReporter draws it: a live one-line bar on a terminal; when stdout
// is a file or a pipe, each failure and a summary line every few seconds. watchTasks() drives it from the server's completions
// (waitSome: pushed by the server, no polling).
#pragma once

#include <chrono>
#include <cstdio>
#include <functional>
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

using Clock = std::chrono::steady_clock;

// A task's error without the stderr a failed program's error carries
// ("...; stderr:\n..."): its first line, for one line a failure.
std::string errorHeadline(const std::string& error);

// Writes to `out`; `terminal` picks the live bar. Otherwise a summary line
// at most every `interval` (`now` is injected for tests).
std::unique_ptr<ProgressReporter> makeProgressReporter(
    std::FILE* out, bool terminal, std::chrono::milliseconds interval = std::chrono::seconds(5),
    std::function<Clock::time_point()> now = [] { return Clock::now(); });

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
  // The stop signal (SIGINT, SIGTERM, SIGHUP) that ended the watch early;
  // 0 when none did.
  int interruptedBy = 0;
};

// Blocks until every task has finished, failed or been skipped, or the
// session fails, or a signal arrives on `stopFd` (a signalfd; -1: none);
// reports each as it ends.
WatchResult watchTasks(Session& session, const std::vector<WatchedTask>& tasks,
                       ProgressReporter& reporter, int stopFd = -1);

}  // namespace squall
