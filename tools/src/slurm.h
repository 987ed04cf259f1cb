// `squall slurm`: the parts that are plain logic, no processes (so unit
// tests reach them): Slurm's time formats, the back-off between governor
// jobs that fail at start, the batch script a governor job runs, what
// squeue and sbatch print, and a governor's arguments inside a job. No
// threading rules: values and pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace squall::slurm {

using Duration = std::chrono::milliseconds;

// Slurm's time limit formats (sbatch --time): MINUTES, MINUTES:SECONDS,
// HOURS:MINUTES:SECONDS, DAYS-HOURS, DAYS-HOURS:MINUTES and
// DAYS-HOURS:MINUTES:SECONDS; nullopt for UNLIMITED / INFINITE (any case).
// Throws std::invalid_argument naming the text for anything else (a limit
// of 0 among them: Slurm reads it as no limit, which a user who typed it
// hardly meant).
std::optional<std::chrono::seconds> parseTimeLimit(const std::string& text);

// Our own durations (--idle-timeout and friends): a number of seconds
// ("90", "0.5") or one with a unit ("500ms", "90s", "5m", "2h"). Throws
// std::invalid_argument naming the text for anything else or a negative.
Duration parseDuration(const std::string& text);
// "0.3 s", "12 s", "5 min": for messages.
std::string describeDuration(Duration duration);

// How long to wait before the next governor job after jobs failed at start
// one after another: `initial` after the first, doubled after each further
// one, never more than `max`. A job whose governor registers clears it.
// This is what keeps a broken configuration (a wrong path, a node that
// cannot start the governor) from becoming a stream of jobs.
class SubmitBackoff {
 public:
  SubmitBackoff(Duration initial, Duration max);
  // Records one more failure in a row; returns the wait before the next
  // submission.
  Duration failed();
  void succeeded() { failuresInARow = 0; }
  uint32_t failures() const { return failuresInARow; }

 private:
  Duration initial;
  Duration max;
  uint32_t failuresInARow = 0;
};

// What a governor job runs: `squall slurm governor` (found at the same
// path on every node: a shared install), which starts squall-governor with
// the job's cpus and node (governorArgsInJob). Every argument is quoted
// for the shell.
struct GovernorJob {
  std::string squallProgram;
  std::string governorProgram;
  // Handed to squall-governor as they are: --server, --token-file, ...
  std::vector<std::string> governorArgs;
};
std::string governorJobScript(const GovernorJob& job);

// The job id in what `sbatch --parsable` printed ("ID" or "ID;CLUSTER").
// Throws std::invalid_argument quoting the output for anything else.
uint64_t parseSbatchOutput(const std::string& output);

// A job as `squeue -h -t all -o '%i|%T|%r'` lists it.
struct JobStatus {
  uint64_t id = 0;
  std::string state;   // PENDING, RUNNING, COMPLETED, FAILED, ...
  std::string reason;  // squeue's %r: why it waits, or how it ended
};
// One JobStatus a line; lines of another shape (a job array's "12_3") are
// passed over.
std::vector<JobStatus> parseSqueue(const std::string& output);
// Whether a job in `state` has finished running (its governor has gone):
// COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, ... and COMPLETING
// (its processes are gone; Slurm is cleaning up).
bool jobEnded(const std::string& state);

// The arguments `squall slurm governor` adds for squall-governor inside a
// job or job step, from the job's environment (`env` looks a variable up;
// nullopt when unset) and this node's host name:
//   --cpus $SLURM_CPUS_ON_NODE     the cpus the job has here (the governor
//                                  would otherwise count the whole node's)
//   --name slurm-$SLURM_JOB_ID-$SLURMD_NODENAME   (what `squall slurm auto`
//                                  recognises its governors by)
//   --listen HOST:0                 reached by peers on other nodes
// Throws std::invalid_argument when $SLURM_JOB_ID is unset (not in a job).
std::vector<std::string> governorArgsInJob(const std::function<std::optional<std::string>(const char*)>& env,
                                           const std::string& hostName);
// The name governorArgsInJob gives job `jobId`'s governors: they start
// with this prefix.
std::string governorNamePrefix(uint64_t jobId);

}  // namespace squall::slurm
