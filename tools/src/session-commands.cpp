// `squall status|wait|fetch|cancel|logs`: look at and steer a session made
// elsewhere (a running `squall run`, a C++ program). They attach to it by id
// or name; attaching never closes it, so the owner carries on. `status` and
// `logs` also show a closed session the server keeps (its counts, failure
// and the tasks kept of it).
#include "commands.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <squall/client/client.h>

namespace squall {

namespace {

bool allDigits(const std::string& text) {
  return !text.empty() && text.size() <= 19 &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

Session attachSession(Client& client, const std::string& ref) {
  if (allDigits(ref)) return client.attach(std::stoull(ref));
  return client.attach(ref);
}

std::string tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  if (pos > 0 && text[pos - 1] == '\n') pos--;
  for (size_t n = 0; n < lines && pos > 0; n++) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos) return text;
  }
  return pos == 0 ? text : text.substr(pos + 1);
}

void printIndented(const std::string& text, const char* prefix) {
  if (text.empty()) return;
  std::string out = prefix;
  for (size_t i = 0; i < text.size(); i++) {
    out += text[i];
    if (text[i] == '\n' && i + 1 < text.size()) out += prefix;
  }
  if (out.back() != '\n') out += '\n';
  fputs(out.c_str(), stdout);
}

std::string stateText(const SessionState& s) {
  if (s.open) return s.waiting + s.ready + s.running > 0 ? "running" : "open";
  if (s.closed) return s.failure.empty() ? "closed" : "failed (closed)";
  return "failed";
}

std::string counts(const SessionState& s) {
  char line[256];
  snprintf(line, sizeof(line), "%llu waiting, %llu ready, %llu running, %llu finished, %llu failed, %llu skipped",
           static_cast<unsigned long long>(s.waiting), static_cast<unsigned long long>(s.ready),
           static_cast<unsigned long long>(s.running), static_cast<unsigned long long>(s.finished),
           static_cast<unsigned long long>(s.failed), static_cast<unsigned long long>(s.skipped));
  return line;
}

std::string seconds(uint64_t us) {
  char text[32];
  snprintf(text, sizeof(text), "%.3fs", static_cast<double>(us) / 1e6);
  return text;
}

void printFailures(Session& session, uint32_t limit) {
  auto failures = session.tasks({}, {"failed"}, limit);
  if (failures.empty()) return;
  printf("failures:\n");
  for (auto& info : failures) {
    printf("  %s (task %llu, attempt %u): %s\n", info.name.c_str(),
           static_cast<unsigned long long>(info.id), info.attempt, info.error.c_str());
    printIndented(tail(info.stderrTail, 10), "    | ");
  }
}

// "7 blob 'label' text/plain 120 B xxh3=... kept on gov-a" (what is known).
std::string describe(const ObjectInfo& o) {
  char hash[32];
  snprintf(hash, sizeof(hash), "%016llx", static_cast<unsigned long long>(o.hash));
  static const char* KINDS[] = {"blob", "dir", "stream"};
  std::string text = std::to_string(o.id) + " " + KINDS[static_cast<int>(o.kind)];
  if (!o.label.empty()) text += " '" + o.label + "'";
  if (!o.contentType.empty()) text += " " + o.contentType;
  text += " " + o.state;
  if (o.state == "finished" || o.state == "removed") {
    text += ", " + std::to_string(o.size) + " bytes, xxh3 " + hash;
  }
  if (o.keep) text += ", kept";
  if (!o.locations.empty()) {
    text += ", on";
    for (auto& where : o.locations) text += " " + where;
  }
  return text;
}

// The tasks `options.task` names: an id, or every task with that name.
std::vector<TaskInfo> findTasks(Session& session, const SessionCommandOptions& options) {
  std::vector<TaskInfo> found;
  if (allDigits(options.task)) {
    found = session.tasks({std::stoull(options.task)});
  } else {
    for (auto& info : session.tasks({}, {}, 1000000)) {
      if (info.name == options.task) found.push_back(info);
    }
  }
  if (found.empty()) throw Error("no task '" + options.task + "' in session " + options.session);
  return found;
}

// Runs `body`, turning client errors into a message and exit status 1.
template <typename Body>
int guarded(const char* command, Body&& body) {
  try {
    return body();
  } catch (const Error& e) {
    fprintf(stderr, "squall %s: %s\n", command, e.what());
    return 1;
  }
}

}  // namespace

int runStatus(const SessionCommandOptions& options) {
  return guarded("status", [&]() {
    Client client(options.server, options.token);
    if (options.session.empty()) {
      auto sessions = client.sessions();
      if (sessions.empty()) {
        printf("no sessions\n");
        return 0;
      }
      printf("%-8s %-24s %-8s %8s %8s %8s %8s %8s %8s\n", "ID", "NAME", "STATE", "WAITING", "READY",
             "RUNNING", "FINISHED", "FAILED", "SKIPPED");
      for (auto& s : sessions) {
        printf("%-8llu %-24s %-8s %8llu %8llu %8llu %8llu %8llu %8llu\n",
               static_cast<unsigned long long>(s.id), s.name.empty() ? "-" : s.name.c_str(),
               stateText(s).c_str(), static_cast<unsigned long long>(s.waiting),
               static_cast<unsigned long long>(s.ready), static_cast<unsigned long long>(s.running),
               static_cast<unsigned long long>(s.finished), static_cast<unsigned long long>(s.failed),
               static_cast<unsigned long long>(s.skipped));
      }
      return 0;
    }
    auto session = attachSession(client, options.session);
    auto state = session.state();
    printf("session %llu (%s): %s\n", static_cast<unsigned long long>(state.id), state.name.c_str(),
           stateText(state).c_str());
    printf("tasks: %s\n", counts(state).c_str());
    if (!state.open && !state.failure.empty()) printf("failure: %s\n", state.failure.c_str());
    auto running = session.tasks({}, {"running"}, 20);
    for (auto& info : running) {
      printf("running: %s (task %llu) on %s, attempt %u\n", info.name.c_str(),
             static_cast<unsigned long long>(info.id), info.governor.c_str(), info.attempt);
    }
    printFailures(session, 20);
    return 0;
  });
}

int runWait(const SessionCommandOptions& options) {
  return guarded("wait", [&]() {
    // Waiting outlasts a server restart, also one under way as it starts.
    Client client(ClientOptions{.address = options.server, .token = options.token, .waitForServer = true});
    auto session = attachSession(client, options.session);
    try {
      session.waitAll();
    } catch (const TaskFailed& failure) {
      fprintf(stderr, "squall wait: %s\n", failure.what());
      if (!failure.stderrTail.empty() &&
          std::string(failure.what()).find(failure.stderrTail) == std::string::npos) {
        fputs(failure.stderrTail.c_str(), stderr);
      }
      return 1;
    }
    auto state = session.state();
    printf("session %llu (%s): %llu tasks finished", static_cast<unsigned long long>(state.id),
           state.name.c_str(), static_cast<unsigned long long>(state.finished));
    if (state.failed || state.skipped) {
      // The session survived these: the tasks were allowed to fail.
      printf(", %llu failed and %llu skipped (allowed)", static_cast<unsigned long long>(state.failed),
             static_cast<unsigned long long>(state.skipped));
    }
    printf("\n");
    return 0;
  });
}

int runFetch(const SessionCommandOptions& options) {
  return guarded("fetch", [&]() {
    Client client(options.server, options.token);
    auto session = attachSession(client, options.session);
    if (!allDigits(options.object)) {
      throw Error("OBJECT must be an object id (a number), got '" + options.object + "'");
    }
    auto object = session.object(std::stoull(options.object));
    if (options.output.empty() || options.output == "-") {
      // A dir comes as a tar archive here (`squall fetch S 5 | tar x`).
      object.fetchTo(stdout);
      return 0;
    }
    if (object.kind() == ObjectKind::DIR) {
      object.fetchDir(options.output);
    } else {
      object.fetchToFile(options.output);
    }
    return 0;
  });
}

int runCancel(const SessionCommandOptions& options) {
  return guarded("cancel", [&]() {
    Client client(options.server, options.token);
    auto session = attachSession(client, options.session);
    session.cancel();
    printf("cancelled session %llu\n", static_cast<unsigned long long>(session.id()));
    return 0;
  });
}

int runLogs(const SessionCommandOptions& options) {
  return guarded("logs", [&]() {
    Client client(options.server, options.token);
    auto session = attachSession(client, options.session);
    for (auto& info : findTasks(session, options)) {
      printf("task %llu %s (%s): %s\n", static_cast<unsigned long long>(info.id), info.name.c_str(),
             info.type.c_str(), info.state.c_str());
      if (!info.governor.empty()) printf("governor: %s\n", info.governor.c_str());
      printf("attempt: %u\n", info.attempt);
      if (info.startTimeUs) printf("duration: %s\n", seconds(info.durationUs).c_str());
      if (info.exitStatus >= 0) printf("exit status: %d\n", info.exitStatus);
      if (!info.error.empty()) printf("error: %s\n", info.error.c_str());
      if (!info.attributes.empty()) printf("attributes: %s\n", info.attributes.c_str());
      if (!info.inputs.empty()) {
        std::string ids;
        for (auto id : info.inputs) ids += (ids.empty() ? "" : " ") + std::to_string(id);
        printf("inputs: %s\n", ids.c_str());
      }
      for (auto& out : info.outputs) printf("output: %s\n", describe(out).c_str());
      if (!info.stdoutTail.empty()) {
        printf("--- stdout (tail) ---\n");
        printIndented(info.stdoutTail, "");
      }
      if (!info.stderrTail.empty()) {
        printf("--- stderr (tail) ---\n");
        printIndented(info.stderrTail, "");
      }
    }
    return 0;
  });
}

int runExplain(const SessionCommandOptions& options) {
  return guarded("explain", [&]() {
    Client client(options.server, options.token);
    auto session = attachSession(client, options.session);
    auto found = findTasks(session, options);
    // An array step's name: its first tasks only.
    constexpr size_t MAX_EXPLAINED = 20;
    for (size_t i = 0; i < found.size() && i < MAX_EXPLAINED; i++) {
      auto why = session.explain(found[i].id);
      printf("task %llu %s (%s): %s\n", static_cast<unsigned long long>(found[i].id), found[i].name.c_str(),
             found[i].state.c_str(), why.summary.c_str());
      for (auto& line : why.details) printf("  %s\n", line.c_str());
    }
    if (found.size() > MAX_EXPLAINED) {
      printf("(%zu more tasks named '%s')\n", found.size() - MAX_EXPLAINED, options.task.c_str());
    }
    return 0;
  });
}

}  // namespace squall
