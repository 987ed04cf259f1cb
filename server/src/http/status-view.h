// What the status page and its JSON API show: read-only views of the
// server's state (sessions, governors, counters) as JSON, and /metrics as
// Prometheus text. Owned by main(); loop thread only, like the state it
// reads. Never changes that state.
//
// A closed session is shown from what SessionHistory keeps of it, with the
// same JSON shapes as an open one (its graph and timeline are the views
// this class rendered as it closed).
//
// Big sessions are shown aggregated: whatever needs a pass over every task
// (task groups, the ordered task list, the timeline) is computed at most
// once per change of the session (Session::changes) and cached, so the
// per-second updates cost O(sessions + governors), not O(tasks).
#pragma once

#include "governor-pool.h"
#include "session-history.h"
#include "session-table.h"
#include "stats.h"

#include <deque>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace squall {

// Task states as the page and /metrics name them, in TaskNode::State order.
inline constexpr const char* TASK_STATE_NAMES[7] = {"waiting", "ready",     "running", "finished",
                                                    "failed",  "cancelled", "skipped"};


using Json = nlohmann::json;

// The JSON name of a task state ("running" for ASSIGNED).
const char* taskStateName(TaskNode::State state);
// Parses a JSON state name; nullptr when it is not one.
const TaskNode::State* parseTaskState(std::string_view name);
// The group a task's name belongs to: the part before the first '/' or
// '[' ("align/chr1" and "count[3]" give "align" and "count"), else the name
// with trailing digits and separators dropped ("part-12" gives "part").
std::string taskGroup(std::string_view name);
// Text safe to put in JSON: invalid UTF-8 replaced.
std::string jsonText(const Json& json);

struct TaskQuery {
  // Wanted states; empty: all.
  std::vector<TaskNode::State> states;
  // Substring of the task name (case-insensitive); empty: any.
  std::string name;
  size_t offset = 0;
  size_t limit = 50;
};

class StatusView {
 public:
  static constexpr size_t SMALL_GRAPH = 400;  // tasks drawn one by one up to this
  static constexpr size_t MAX_GROUPS = 150;   // groups drawn; the rest are merged
  static constexpr size_t MAX_CHILDREN_SHOWN = 100;  // of a task that submitted tasks
  static constexpr size_t TIMELINE_BARS = 2000;
  static constexpr size_t TIMELINE_BUCKETS = 160;
  // Closed sessions listed in /api/sessions and on the overview (each kept
  // one is shown at /sessions/N).
  static constexpr size_t MAX_CLOSED = 32;
  static constexpr size_t THROUGHPUT_SAMPLES = 120;

  StatusView(SessionTable& sessions, GovernorPool& governors, const SessionHistory& history,
             std::string version, uint64_t startedAtMs);

  // Called once a second by the status server: samples the counters for
  // throughput.
  void tick(uint64_t nowMs);
  // The session's graph and timeline as the page gets them, for the
  // history, as it closes (from SessionTable::onClose); forgets what was
  // cached of it.
  PageViews sessionClosed(const Session& session);

  // No clock in it: unchanged state gives the same text (events send only
  // what changed).
  Json overview();
  Json governorsJson();
  Json sessionsJson();
  // nullptr-like Json (is_null) when the session is unknown (neither open
  // nor kept in the history).
  Json session(uint64_t id);
  Json tasks(uint64_t session, const TaskQuery& query);
  Json task(uint64_t session, uint64_t task);
  Json graph(uint64_t session);
  Json timeline(uint64_t session);
  // The small summary pushed to a session page on each change.
  Json sessionUpdate(uint64_t id);
  std::string metrics(size_t eventClients);

  // Tasks per second over the last `seconds` of samples.
  double throughput(size_t seconds = 10) const;

 private:
  SessionTable& sessions;
  GovernorPool& governors;
  const SessionHistory& history;
  std::string version;
  uint64_t startedAtMs;

  struct Sample {
    uint64_t atMs;
    uint64_t finished;
    uint64_t failed;
  };
  std::deque<Sample> samples;

  // Derived from one session's tasks; rebuilt when Session::changes moves.
  struct Derived {
    uint64_t changes = UINT64_MAX;
    size_t taskCount = 0;
    // Tasks by id.
    std::vector<const TaskNode*> byId;
    // Groups: name, task count, counts by state; `groupOf` parallel to byId.
    struct Group {
      std::string name;
      uint64_t tasks = 0;
      uint64_t counts[7] = {};
    };
    std::vector<Group> groups;
    std::vector<uint32_t> groupOf;
    // Edges between groups (or tasks in a small graph) with their counts.
    std::map<std::pair<uint32_t, uint32_t>, uint64_t> groupEdges;
    Json timeline;
    bool timelineBuilt = false;
  };
  std::map<uint64_t, std::unique_ptr<Derived>> derived;
  // Objects and bytes each governor holds, and what they were counted at.
  std::map<GovernorId, std::pair<uint64_t, uint64_t>> held;
  uint64_t heldFingerprint = UINT64_MAX;

  Derived& derive(const Session& session);
  void buildStructure(const Session& session, Derived& d);
  Json sessionSummary(const Session& session);
  Json keptSummary(wire::KeptSession::Reader kept);
  // A kept task's table row; `details`: with its error, tails and group, as
  // the task page shows it.
  Json keptRow(wire::KeptTask::Reader task, bool details);
  Json taskRow(const Session& session, const TaskNode& task);
  Json objectJson(const Session& session, const ObjectNode& object);
  kj::Maybe<const Session&> findOpen(uint64_t id);
  std::string governorName(GovernorId id);
};

}  // namespace squall
