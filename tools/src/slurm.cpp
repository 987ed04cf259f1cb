#include "slurm.h"

#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace squall::slurm {

namespace {

// Digits only, at most `most` of them (so that stoll cannot overflow).
bool isDigits(const std::string& text, size_t most = 9) {
  return !text.empty() && text.size() <= most &&
         std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return parts;
    start = end + 1;
  }
}

std::string lower(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

}  // namespace

std::optional<std::chrono::seconds> parseTimeLimit(const std::string& text) {
  auto bad = [&text](const char* why) {
    return std::invalid_argument("bad time limit '" + text + "' (" + why +
                                 "): use MINUTES, MINUTES:SECONDS, HOURS:MINUTES:SECONDS, DAYS-HOURS, "
                                 "DAYS-HOURS:MINUTES, DAYS-HOURS:MINUTES:SECONDS or UNLIMITED");
  };
  auto name = lower(text);
  if (name == "unlimited" || name == "infinite") return std::nullopt;
  int64_t days = 0;
  std::string clock = text;
  if (auto dash = text.find('-'); dash != std::string::npos) {
    auto dayText = text.substr(0, dash);
    if (!isDigits(dayText)) throw bad("days must be a number");
    days = std::stoll(dayText);
    clock = text.substr(dash + 1);
  }
  auto fields = split(clock, ':');
  if (fields.size() > 3) throw bad("too many ':'");
  for (auto& field : fields) {
    if (!isDigits(field)) throw bad("every field must be a number");
  }
  std::vector<int64_t> n;
  for (auto& field : fields) n.push_back(std::stoll(field));
  int64_t seconds = 0;
  bool withDays = text.find('-') != std::string::npos;
  if (withDays) {
    // DAYS-HOURS[:MINUTES[:SECONDS]]
    seconds = days * 86400 + n[0] * 3600 + (n.size() > 1 ? n[1] * 60 : 0) + (n.size() > 2 ? n[2] : 0);
  } else if (n.size() == 1) {
    seconds = n[0] * 60;
  } else if (n.size() == 2) {
    seconds = n[0] * 60 + n[1];
  } else {
    seconds = n[0] * 3600 + n[1] * 60 + n[2];
  }
  if (seconds == 0) throw bad("0 would mean no limit at all; say UNLIMITED for that");
  return std::chrono::seconds(seconds);
}

Duration parseDuration(const std::string& text) {
  auto bad = [&text]() {
    return std::invalid_argument("bad duration '" + text + "': use seconds (90, 0.5) or a unit: 500ms, 90s, 5m, 2h");
  };
  size_t unitAt = text.find_first_not_of("0123456789.");
  auto number = text.substr(0, unitAt);
  auto unit = unitAt == std::string::npos ? std::string("s") : text.substr(unitAt);
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1 || number == ".") throw bad();
  double value = std::stod(number);
  double ms = 0;
  if (unit == "ms") {
    ms = value;
  } else if (unit == "s") {
    ms = value * 1000;
  } else if (unit == "m" || unit == "min") {
    ms = value * 60000;
  } else if (unit == "h") {
    ms = value * 3600000;
  } else {
    throw bad();
  }
  if (!std::isfinite(ms) || ms > 1e12) throw bad();
  return Duration(static_cast<int64_t>(std::llround(ms)));
}

std::string describeDuration(Duration duration) {
  char text[64];
  auto ms = duration.count();
  if (ms < 10000) {
    snprintf(text, sizeof(text), "%.1f s", ms / 1000.0);
  } else if (ms < 120000) {
    snprintf(text, sizeof(text), "%lld s", static_cast<long long>((ms + 500) / 1000));
  } else {
    snprintf(text, sizeof(text), "%lld min", static_cast<long long>((ms + 30000) / 60000));
  }
  return text;
}

SubmitBackoff::SubmitBackoff(Duration initial, Duration max) : initial(initial), max(std::max(initial, max)) {}

Duration SubmitBackoff::failed() {
  failuresInARow++;
  Duration delay = initial;
  for (uint32_t i = 1; i < failuresInARow && delay < max; i++) delay *= 2;
  return std::min(delay, max);
}

std::string governorJobScript(const GovernorJob& job) {
  std::string script =
      "#!/bin/sh\n"
      "# A squall governor for as long as this job runs (squall slurm auto).\n"
      "exec " +
      shellQuote(job.squallProgram) + " slurm governor --program " + shellQuote(job.governorProgram) + " --";
  for (auto& arg : job.governorArgs) script += " " + shellQuote(arg);
  return script + "\n";
}

uint64_t parseSbatchOutput(const std::string& output) {
  auto line = output.substr(0, output.find('\n'));
  auto id = line.substr(0, line.find(';'));
  if (!isDigits(id, 19)) {
    throw std::invalid_argument("sbatch printed no job id: '" + output + "'");
  }
  return std::stoull(id);
}

std::vector<JobStatus> parseSqueue(const std::string& output) {
  std::vector<JobStatus> jobs;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    auto fields = split(line, '|');
    if (fields.size() < 2) continue;
    auto& id = fields[0];
    if (!isDigits(id, 19)) continue;
    jobs.push_back({std::stoull(id), fields[1], fields.size() > 2 ? fields[2] : ""});
  }
  return jobs;
}

bool jobEnded(const std::string& state) {
  // Slurm's job states that are not over: waiting, running, paused or
  // coming back.
  static const char* const ACTIVE[] = {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED",
                                       "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SIGNALING", "STAGE_OUT",
                                       "RESV_DEL_HOLD", "STOPPED"};
  return std::none_of(std::begin(ACTIVE), std::end(ACTIVE), [&state](const char* s) { return state == s; });
}

std::vector<std::string> governorArgsInJob(const std::function<std::optional<std::string>(const char*)>& env,
                                           const std::string& hostName) {
  auto job = env("SLURM_JOB_ID");
  if (!job || job->empty()) {
    throw std::invalid_argument("not inside a Slurm job ($SLURM_JOB_ID is unset): run by sbatch or srun");
  }
  std::vector<std::string> args;
  if (auto cpus = env("SLURM_CPUS_ON_NODE"); cpus && isDigits(*cpus) && std::stoll(*cpus) > 0) {
    args.insert(args.end(), {"--cpus", *cpus});
  }
  auto node = env("SLURMD_NODENAME");
  args.insert(args.end(), {"--name", "slurm-" + *job + "-" + (node && !node->empty() ? *node : hostName),
                           "--listen", hostName + ":0"});
  return args;
}

std::string governorNamePrefix(uint64_t jobId) { return "slurm-" + std::to_string(jobId) + "-"; }

}  // namespace squall::slurm
