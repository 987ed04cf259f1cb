#include "slurm-autoscaler.h"

#include <algorithm>
#include <stdexcept>

namespace squall::slurm {

namespace {

Duration since(TimePoint then, TimePoint now) { return std::chrono::duration_cast<Duration>(now - then); }

// The server's governors that job `id` started.
std::vector<const ServerLoad::Governor*> governorsOf(uint64_t id, const ServerLoad& load) {
  std::vector<const ServerLoad::Governor*> found;
  auto prefix = governorNamePrefix(id);
  for (auto& governor : load.governors) {
    if (governor.name.rfind(prefix, 0) == 0) found.push_back(&governor);
  }
  return found;
}

}  // namespace

Autoscaler::Autoscaler(AutoscalerPolicy policy, SlurmJobs& jobs, spdlog::logger& logger,
                       std::function<void(const std::string&)> say)
    : policy(policy), slurm(jobs), logger(logger), say(std::move(say)), backoff(policy.backoff, policy.backoffMax) {}

void Autoscaler::tick(TimePoint now, const ServerLoad& load) {
  if (!lastWork || load.readyTasks > 0) lastWork = now;
  followJobs(now, load);
  releaseIdle(now, load);
  maybeSubmit(now, load);
}

void Autoscaler::followJobs(TimePoint now, const ServerLoad& load) {
  if (jobs.empty()) return;
  std::vector<uint64_t> ids;
  for (auto& [id, job] : jobs) ids.push_back(id);
  std::vector<JobStatus> known;
  try {
    known = slurm.status(ids);
  } catch (const std::exception& e) {
    // Nothing is decided on what cannot be seen; the next tick asks again.
    logger.warn("event=slurm-status-failed error=\"{}\"", e.what());
    return;
  }
  for (auto it = jobs.begin(); it != jobs.end();) {
    auto& [id, job] = *it;
    auto status = std::find_if(known.begin(), known.end(), [id = id](const JobStatus& s) { return s.id == id; });
    if (!job.registered && !governorsOf(id, load).empty()) {
      job.registered = now;
      backoff.succeeded();
      notBefore.reset();
      logger.info("event=slurm-governor-up job={} after={}ms", id, since(job.submitted, now).count());
      say("job " + std::to_string(id) + ": its governor is up (" + describeDuration(since(job.submitted, now)) +
          " after submission)");
    }
    std::string state = status == known.end() ? "ENDED" : status->state;
    if (!jobEnded(state)) {
      if (state == "RUNNING" && !job.started) job.started = now;
      ++it;
      continue;
    }
    ended(now, id, job, state, status == known.end() ? "" : status->reason);
    it = jobs.erase(it);
  }
}

void Autoscaler::ended(TimePoint now, uint64_t id, const Job& job, const std::string& state,
                       const std::string& reason) {
  Duration ran = job.started ? since(*job.started, now) : Duration(0);
  if (job.cancelled || (job.registered && ran >= policy.minRun)) {
    logger.info("event=slurm-job-ended job={} state={} reason=\"{}\"", id, state, reason);
    say("job " + std::to_string(id) + " ended (" + state + ")");
    return;
  }
  auto words = slurm.lastWords(id);
  std::string what = "job " + std::to_string(id) + " failed at start (" + state +
                     (reason.empty() || reason == "None" ? "" : ", " + reason) +
                     (job.registered ? ", " + describeDuration(ran) + " after its governor registered"
                                     : ", its governor never registered") +
                     ")" + (words.empty() ? "" : ": " + words);
  logger.warn("event=slurm-job-failed job={} state={} reason=\"{}\" registered={} ran={}ms log=\"{}\"", id, state,
              reason, job.registered.has_value(), ran.count(), words);
  failedAtStart(now, what);
}

void Autoscaler::failedAtStart(TimePoint now, const std::string& what) {
  auto delay = backoff.failed();
  notBefore = now + delay;
  logger.warn("event=slurm-backoff failures={} delay={}ms", backoff.failures(), delay.count());
  say(what + "; next governor job in " + describeDuration(delay) + " (" + std::to_string(backoff.failures()) +
      (backoff.failures() == 1 ? " failure" : " failures in a row") + ")");
}

void Autoscaler::releaseIdle(TimePoint now, const ServerLoad& load) {
  for (auto& [id, job] : jobs) {
    if (job.cancelled) continue;
    if (!job.registered) {
      if (since(*lastWork, now) >= policy.idleTimeout) cancel(id, job, "no task has waited for it");
      continue;
    }
    auto governors = governorsOf(id, load);
    // A governor gone from the server (lost it for good) is as idle as one
    // with nothing to do.
    bool idle = std::all_of(governors.begin(), governors.end(), [](const ServerLoad::Governor* g) {
      return g->tasksAssigned == 0 && g->objects == 0;
    });
    if (!idle) {
      job.idleSince.reset();
      continue;
    }
    if (!job.idleSince) job.idleSince = now;
    if (since(*job.idleSince, now) >= policy.idleTimeout) {
      cancel(id, job, "its governor was idle for " + describeDuration(since(*job.idleSince, now)));
    }
  }
}

void Autoscaler::cancel(uint64_t id, Job& job, const std::string& why) {
  try {
    slurm.cancel(id);
  } catch (const std::exception& e) {
    logger.warn("event=slurm-cancel-failed job={} error=\"{}\"", id, e.what());
    return;  // tried again next tick
  }
  job.cancelled = true;
  logger.info("event=slurm-release job={} why=\"{}\"", id, why);
  say("job " + std::to_string(id) + " released: " + why);
}

void Autoscaler::maybeSubmit(TimePoint now, const ServerLoad& load) {
  if (load.readyTasks == 0) return;
  if (notBefore && now < *notBefore) return;
  if (jobs.size() >= policy.maxJobs) return;
  bool starting = std::any_of(jobs.begin(), jobs.end(),
                              [](const auto& entry) { return !entry.second.registered && !entry.second.cancelled; });
  if (starting) return;
  bool someoneIdle = std::any_of(load.governors.begin(), load.governors.end(),
                                 [](const ServerLoad::Governor& g) { return g.tasksAssigned == 0; });
  if (someoneIdle) return;
  uint64_t id;
  try {
    id = slurm.submit();
  } catch (const std::exception& e) {
    logger.warn("event=slurm-submit-failed error=\"{}\"", e.what());
    failedAtStart(now, std::string("sbatch failed: ") + e.what());
    return;
  }
  notBefore.reset();
  jobs[id] = Job{now, std::nullopt, std::nullopt, std::nullopt, false};
  logger.info("event=slurm-submit job={} ready={} jobs={}", id, load.readyTasks, jobs.size());
  say("job " + std::to_string(id) + " submitted (" + std::to_string(load.readyTasks) +
      (load.readyTasks == 1 ? " task ready, " : " tasks ready, ") +
      std::to_string(jobs.size()) + " of at most " + std::to_string(policy.maxJobs) + " jobs)");
}

std::vector<uint64_t> Autoscaler::cancelAll() {
  std::vector<uint64_t> cancelled;
  for (auto& [id, job] : jobs) {
    try {
      slurm.cancel(id);
      job.cancelled = true;
      cancelled.push_back(id);
    } catch (const std::exception& e) {
      logger.error("event=slurm-cancel-failed job={} error=\"{}\"", id, e.what());
    }
  }
  if (!cancelled.empty()) logger.info("event=slurm-cancel-all jobs={}", cancelled.size());
  return cancelled;
}

}  // namespace squall::slurm
