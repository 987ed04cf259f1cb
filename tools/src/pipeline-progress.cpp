// Progress output and the completion loop of `squall run`.
#include "pipeline-progress.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

namespace squall {

namespace {

// How often a watch with a stop signal looks at it.
constexpr std::chrono::milliseconds STOP_CHECK{200};

// For files, pipes and CI logs: failures as they happen, and a summary
// line at most once per `interval` (and once at the end) instead of a line
// per task, so 100,000 tasks do not make 100,000 lines. Lines are written
// as tasks end: a run where nothing ends prints nothing meanwhile.
class PlainProgress final : public ProgressReporter {
 public:
  PlainProgress(std::FILE* out, std::chrono::milliseconds interval, std::function<Clock::time_point()> now)
      : out(out), interval(interval), now(std::move(now)), began(this->now()), lastLine(began) {}
  void start(const std::string& pipeline, size_t tasks) override {
    total = tasks;
    fprintf(out, "running %s: %zu tasks\n", pipeline.c_str(), tasks);
    fflush(out);
  }
  void finished(const std::string&) override {
    ok++;
    summarise(false);
  }
  void failed(const std::string& task, const std::string& error, bool skipped) override {
    (skipped ? skippedCount : failedCount)++;
    fprintf(out, "%s %s: %s\n", skipped ? "skipped" : "FAILED", task.c_str(), errorHeadline(error).c_str());
    summarise(false);
  }
  void end() override { summarise(true); }

 private:
  std::FILE* out;
  std::chrono::milliseconds interval;
  std::function<Clock::time_point()> now;
  Clock::time_point began;
  Clock::time_point lastLine;
  size_t total = 0, ok = 0, failedCount = 0, skippedCount = 0;
  // What the last summary line said (ended tasks), so an end with nothing
  // new does not repeat it.
  size_t summarised = 0;

  void summarise(bool last) {
    size_t done = ok + failedCount + skippedCount;
    auto at = now();
    if (done == summarised || (!last && at - lastLine < interval)) {
      fflush(out);
      return;
    }
    fprintf(out, "[%zu/%zu] %zu finished, %zu failed, %zu skipped (%.1fs)\n", done, total, ok, failedCount,
            skippedCount, std::chrono::duration<double>(at - began).count());
    fflush(out);
    summarised = done;
    lastLine = at;
  }
};

// A bar redrawn in place; failures are printed above it as they happen.
class TerminalProgress final : public ProgressReporter {
 public:
  explicit TerminalProgress(std::FILE* out) : out(out), began(std::chrono::steady_clock::now()) {}
  void start(const std::string& pipeline, size_t tasks) override {
    name = pipeline;
    total = tasks;
    draw();
  }
  void finished(const std::string& task) override {
    ok++;
    last = task;
    draw();
  }
  void failed(const std::string& task, const std::string& error, bool skipped) override {
    (skipped ? skippedCount : failedCount)++;
    fprintf(out, "\r\033[K%s %s: %s\n", skipped ? "skipped" : "FAILED", task.c_str(),
            errorHeadline(error).c_str());
    draw();
  }
  void end() override {
    fprintf(out, "\r\033[K");
    fflush(out);
  }

 private:
  std::FILE* out;
  std::chrono::steady_clock::time_point began;
  std::string name;
  std::string last;
  size_t total = 0, ok = 0, failedCount = 0, skippedCount = 0;

  void draw() {
    constexpr size_t WIDTH = 30;
    size_t done = ok + failedCount + skippedCount;
    size_t filled = total == 0 ? WIDTH : done * WIDTH / total;
    std::string bar(filled, '#');
    bar.resize(WIDTH, '.');
    auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    fprintf(out, "\r\033[K%s [%s] %zu/%zu", name.c_str(), bar.c_str(), done, total);
    if (failedCount) fprintf(out, " %zu failed", failedCount);
    if (skippedCount) fprintf(out, " %zu skipped", skippedCount);
    fprintf(out, " %.1fs", seconds);
    if (!last.empty()) fprintf(out, "  %s", last.substr(0, 40).c_str());
    fflush(out);
  }
};

}  // namespace

std::unique_ptr<ProgressReporter> makeProgressReporter(std::FILE* out, bool terminal,
                                                       std::chrono::milliseconds interval,
                                                       std::function<Clock::time_point()> now) {
  if (terminal) return std::make_unique<TerminalProgress>(out);
  return std::make_unique<PlainProgress>(out, interval, std::move(now));
}

std::string errorHeadline(const std::string& error) {
  auto line = error.substr(0, error.find('\n'));
  const std::string stderrMark = "; stderr:";
  if (line.size() >= stderrMark.size() && line.compare(line.size() - stderrMark.size(), stderrMark.size(),
                                                        stderrMark) == 0) {
    line.resize(line.size() - stderrMark.size());
  }
  return line;
}

WatchResult watchTasks(Session& session, const std::vector<WatchedTask>& tasks,
                       ProgressReporter& reporter, int stopFd) {
  WatchResult result;
  result.outcomes.resize(tasks.size());
  std::map<uint64_t, size_t> byId;
  std::vector<Task> remaining;
  for (size_t i = 0; i < tasks.size(); i++) {
    byId.emplace(tasks[i].task.id(), i);
    remaining.push_back(tasks[i].task);
  }
  auto drop = [&](uint64_t id) {
    remaining.erase(std::remove_if(remaining.begin(), remaining.end(),
                                   [id](const Task& t) { return t.id() == id; }),
                    remaining.end());
  };
  // TODO(perf): each round sends every unfinished id; fine for thousands of
  // tasks, a server-side cursor would suit millions.
  while (!remaining.empty()) {
    if (stopFd >= 0) {
      struct pollfd stop = {stopFd, POLLIN, 0};
      struct signalfd_siginfo info;
      if (::poll(&stop, 1, 0) > 0 && ::read(stopFd, &info, sizeof(info)) == sizeof(info)) {
        result.interruptedBy = static_cast<int>(info.ssi_signo);
        break;
      }
    }
    std::vector<uint64_t> finished;
    try {
      // With a stop signal to watch, in rounds short enough to answer it.
      finished = session.waitSome(remaining, stopFd >= 0 ? WaitTimeout(STOP_CHECK) : std::nullopt);
    } catch (const TaskFailed& failure) {
      // waitSome reports the first of our tasks that ended without its
      // outputs: either a failure the session survives (allowed, or skipped
      // because of one) or the one that failed the session.
      auto it = byId.find(failure.task);
      bool open = session.state().open;
      if (!open || it == byId.end()) {
        result.sessionFailure = failure;
        if (it != byId.end()) {
          // The task's own error ("task 7 (a) failed: " is the session's
          // wording around it; the reporter names the task itself).
          auto info = session.tasks({failure.task});
          std::string error = info.empty() || info[0].error.empty() ? failure.what() : info[0].error;
          result.outcomes[it->second] = {TaskOutcome::State::FAILED, error};
          reporter.failed(tasks[it->second].name, error, false);
        }
        break;
      }
      auto info = session.tasks({failure.task});
      bool skipped = !info.empty() && info[0].state == "skipped";
      std::string error = info.empty() || info[0].error.empty() ? failure.what() : info[0].error;
      result.outcomes[it->second] = {skipped ? TaskOutcome::State::SKIPPED : TaskOutcome::State::FAILED,
                                     error};
      reporter.failed(tasks[it->second].name, error, skipped);
      drop(failure.task);
      continue;
    }
    for (auto id : finished) {
      auto it = byId.find(id);
      if (it == byId.end() || result.outcomes[it->second].state != TaskOutcome::State::UNFINISHED) continue;
      result.outcomes[it->second].state = TaskOutcome::State::FINISHED;
      reporter.finished(tasks[it->second].name);
      drop(id);
    }
  }
  reporter.end();
  return result;
}

}  // namespace squall
