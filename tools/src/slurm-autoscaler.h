// `squall slurm auto`'s decisions: when to submit a governor job to Slurm,
// when to let one go, and how long to wait when jobs fail at start. It is
// driven by tick() with the time and what the server shows, and reaches
// Slurm through SlurmJobs, so the unit tests drive it with a fake clock and
// a fake Slurm. One thread; it never blocks but in SlurmJobs' calls.
//
// The rules (docs/deploy.md, "Slurm"):
// - Submit a job when tasks are ready that no governor has taken, no job of
//   ours is still starting (submitted, its governor not yet registered), no
//   governor on the server sits idle (then the ready tasks do not fit one:
//   another like it would not help), fewer than maxJobs jobs are ours, and
//   no back-off is running. One job starts at a time: never a burst.
// - A job whose governor has had no task and held no object for
//   idleTimeout is cancelled: the server has removed every object nobody
//   needs, so a governor that holds none loses nothing by going. One that
//   holds kept objects stays until they are unkept (or its time limit ends
//   the job; then the server re-runs what made them when they are needed).
// - A job still starting when no task has been ready for idleTimeout is
//   cancelled.
// - A job that ends by itself before its governor registered, or less than
//   minRun after it started, failed at start: the next submission waits
//   (SubmitBackoff: doubling, capped), and the job's last log line says
//   why. An sbatch that fails counts the same.
#pragma once

#include "slurm.h"

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <spdlog/logger.h>
#include <string>
#include <vector>

namespace squall::slurm {

using TimePoint = std::chrono::steady_clock::time_point;

// What the server shows at one moment.
struct ServerLoad {
  // Tasks of open sessions that are ready and placed on no governor.
  uint64_t readyTasks = 0;
  struct Governor {
    std::string name;
    uint32_t tasksAssigned = 0;
    // Objects the server knows it holds.
    uint64_t objects = 0;
  };
  std::vector<Governor> governors;
};

// Slurm, as the autoscaler uses it (sbatch, squeue, scancel).
class SlurmJobs {
 public:
  virtual ~SlurmJobs() = default;
  // Submits one governor job and returns its id; throws std::runtime_error
  // with what sbatch said.
  virtual uint64_t submit() = 0;
  // The jobs among `ids` that Slurm still knows; one it has forgotten
  // (MinJobAge after it ended) is left out. Throws std::runtime_error when
  // Slurm cannot be asked.
  virtual std::vector<JobStatus> status(const std::vector<uint64_t>& ids) = 0;
  // Asks Slurm to end the job (its governor gets SIGTERM). Throws
  // std::runtime_error when Slurm refuses.
  virtual void cancel(uint64_t id) = 0;
  // The last line of the job's output (why its governor did not start), or
  // "" when there is none.
  virtual std::string lastWords(uint64_t id) = 0;
};

struct AutoscalerPolicy {
  uint32_t maxJobs = 4;
  Duration idleTimeout = std::chrono::seconds(60);
  Duration backoff = std::chrono::seconds(10);
  Duration backoffMax = std::chrono::minutes(10);
  Duration minRun = std::chrono::seconds(60);
};

class Autoscaler {
 public:
  // `say` gets one line a notable event for the person watching (stdout);
  // `logger` the same as key=value lines, and more.
  Autoscaler(AutoscalerPolicy policy, SlurmJobs& jobs, spdlog::logger& logger,
             std::function<void(const std::string&)> say);

  // Looks at the jobs and the server's load at `now` and acts.
  void tick(TimePoint now, const ServerLoad& load);
  // Cancels every job of ours that has not ended (on exit); returns them.
  std::vector<uint64_t> cancelAll();
  // Jobs submitted and not yet seen to end.
  size_t jobCount() const { return jobs.size(); }
  // Consecutive failures at start, and when the next submission may be.
  uint32_t failuresInARow() const { return backoff.failures(); }
  std::optional<TimePoint> backoffUntil() const { return notBefore; }

 private:
  struct Job {
    TimePoint submitted;
    std::optional<TimePoint> started;     // first seen running
    std::optional<TimePoint> registered;  // its governor first seen on the server
    std::optional<TimePoint> idleSince;   // registered, and no task nor object since
    bool cancelled = false;               // by us: its end is no failure
  };

  AutoscalerPolicy policy;
  SlurmJobs& slurm;
  spdlog::logger& logger;
  std::function<void(const std::string&)> say;
  SubmitBackoff backoff;
  std::map<uint64_t, Job> jobs;
  std::optional<TimePoint> notBefore;
  // When a task was last seen ready (or the autoscaler started).
  std::optional<TimePoint> lastWork;

  void followJobs(TimePoint now, const ServerLoad& load);
  void ended(TimePoint now, uint64_t id, const Job& job, const std::string& state, const std::string& reason);
  void releaseIdle(TimePoint now, const ServerLoad& load);
  void maybeSubmit(TimePoint now, const ServerLoad& load);
  void cancel(uint64_t id, Job& job, const std::string& why);
  void failedAtStart(TimePoint now, const std::string& what);
};

}  // namespace squall::slurm
