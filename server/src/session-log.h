// The server's durable session log (issue 5, first part): SQLite in WAL
// mode holding every open session, the graph submitted to it (the submit
// chunks as they arrived, so replay re-applies them through the same
// validation), constants' bytes, and the outcome of every finished task and
// object. Loop thread only.
//
// Writes: a session opening and a submit are written at once, in their own
// transaction, before the caller acknowledges them ("acknowledged only once
// durable"); the many small state changes are queued and written by
// flush(), one transaction per scheduling pass. synchronous=NORMAL in WAL
// mode: a committed transaction survives the server process dying (kill -9);
// only an operating-system crash can lose the last transactions.
//
// Compaction: a closed session's rows are deleted when it closes, so the
// log holds open work only.
//
// Errors (a file that is not a log, a newer schema, corruption, a full
// disk) throw FAILED exceptions naming the file and the problem; a failed
// write leaves the log as it was before that transaction.
#pragma once

#include <cstdint>
#include <kj/array.h>
#include <kj/common.h>
#include <spdlog/logger.h>
#include <string>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace squall {

class SessionLog {
 public:
  // A task's final outcome, as the log keeps it.
  struct TaskRecord {
    uint64_t session;
    uint64_t task;
    int32_t state;  // TaskNode::State
    uint32_t attempt;
    std::string governor;
    uint64_t startTimeUs;
    uint64_t durationUs;
    int32_t exitStatus;
    std::string error;
    std::string stdoutTail;
    std::string stderrTail;
  };
  // A finished (or removed) object and the governors that held it.
  struct ObjectRecord {
    uint64_t session;
    uint64_t object;
    int32_t state;  // ObjectNode::State
    uint64_t size;
    uint64_t hash;
    std::vector<std::string> locations;  // governor names
  };
  struct SessionRecord {
    uint64_t id;
    std::string name;
    bool persistent;
    // Submit chunks in the order they were applied; each is a flat
    // capnp message (Submission.AddParams).
    std::vector<std::vector<uint8_t>> chunks;
    // Constants' bytes that arrived through appendData, by object n.
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> constants;
    std::vector<TaskRecord> tasks;
    std::vector<ObjectRecord> objects;
    std::string failure;  // non-empty: the session has failed
  };

  // Opens the log at `path`, creating it or migrating it to the current
  // schema version.
  SessionLog(const std::string& path, spdlog::logger& logger);
  ~SessionLog() noexcept(false);
  KJ_DISALLOW_COPY(SessionLog);

  // Durable on return.
  void sessionOpened(uint64_t id, const std::string& name, bool persistent);
  // One submit: its chunks and appended constants, in one transaction.
  void submitted(uint64_t session, const std::vector<kj::ArrayPtr<const uint8_t>>& chunks,
                 const std::vector<std::pair<uint64_t, kj::ArrayPtr<const uint8_t>>>& constants);
  // Deletes every row of the session (compaction).
  void sessionClosed(uint64_t id);

  // Queued until flush().
  void sessionFailed(uint64_t id, const std::string& message);
  void taskDone(TaskRecord record);
  void objectChanged(ObjectRecord record);
  // Writes what is queued in one transaction. On failure the queue is kept
  // for the next flush and the error is thrown.
  void flush();
  size_t queued() const {
    return pendingTasks.size() + pendingObjects.size() + pendingFailures.size() +
           pendingGovernors.size();
  }
  // A governor registered / left for good (queued until flush()). Those
  // still listed when the server restarts are waited for.
  void governorSeen(const std::string& name);
  void governorGone(const std::string& name);
  std::vector<std::string> loadGovernors();

  // Everything the log holds, for replay at start.
  std::vector<SessionRecord> load();

  // Caps the log file at `mb` MiB (0: no cap): writes beyond fail as on a
  // full disk, and the server refuses the submit that needed them.
  void limitSize(uint64_t mb);

  // The schema version this build writes (`PRAGMA user_version`).
  static int schemaVersion();
  const std::string& path() const { return file; }

 private:
  std::string file;
  spdlog::logger& logger;
  sqlite3* db = nullptr;
  std::vector<TaskRecord> pendingTasks;
  std::vector<ObjectRecord> pendingObjects;
  std::vector<std::pair<uint64_t, std::string>> pendingFailures;
  std::vector<std::pair<std::string, bool>> pendingGovernors;
  // Order of outcome rows across sessions (read back at open by load()).
  uint64_t nextOutcomeSeq = 0;

  void exec(const char* sql);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back and rethrows.
  template <typename Body>
  void transaction(const char* what, Body&& body);
  [[noreturn]] void fail(const char* what, int code);
  sqlite3_stmt* prepare(const char* sql);
};

}  // namespace squall
