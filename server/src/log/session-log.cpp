#include "session-log.h"
#include "private-file.h"

#include <algorithm>
#include <capnp/serialize-packed.h>
#include <capnp/serialize.h>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <kj/debug.h>
#include <kj/io.h>
#include <map>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/random.h>
#include <squall/proto/errors.h>
#include <squall/wire/log.capnp.h>

namespace squall {

namespace {

// Numbered migrations: entry i takes the schema from version i to i + 1.
// Never edit one that has shipped; append.
const char* const MIGRATIONS[] = {
    // 1: sessions, their submits and constants, finished tasks and objects.
    R"sql(
      CREATE TABLE sessions (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        persistent INTEGER NOT NULL,
        failure TEXT NOT NULL DEFAULT ''
      );
      CREATE TABLE chunks (
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        message BLOB NOT NULL,
        PRIMARY KEY (session, seq)
      ) WITHOUT ROWID;
      CREATE TABLE constants (
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        object INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (session, object)
      ) WITHOUT ROWID;
      CREATE TABLE tasks (
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        task INTEGER NOT NULL,
        state INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        governor TEXT NOT NULL,
        start_us INTEGER NOT NULL,
        duration_us INTEGER NOT NULL,
        exit_status INTEGER NOT NULL,
        error TEXT NOT NULL,
        stdout_tail TEXT NOT NULL,
        stderr_tail TEXT NOT NULL,
        PRIMARY KEY (session, task)
      ) WITHOUT ROWID;
      CREATE TABLE objects (
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        object INTEGER NOT NULL,
        state INTEGER NOT NULL,
        size INTEGER NOT NULL,
        hash INTEGER NOT NULL,
        locations TEXT NOT NULL,
        PRIMARY KEY (session, object)
      ) WITHOUT ROWID;
    )sql",
    // 2: the governors the server had, so that a restarted server waits for
    // them to come back before it places work elsewhere.
    R"sql(
      CREATE TABLE governors (name TEXT PRIMARY KEY) WITHOUT ROWID;
    )sql",
    // 3: outcomes in one row per session and scheduling pass (a
    // LoggedOutcomes message), instead of a row per task and per object.
    R"sql(
      DROP TABLE tasks;
      DROP TABLE objects;
      CREATE TABLE outcomes (
        session INTEGER NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        seq INTEGER NOT NULL,
        batch BLOB NOT NULL,
        PRIMARY KEY (session, seq)
      ) WITHOUT ROWID;
    )sql",
    // 4: outcome messages written packed (capnp packing: a third of the
    // bytes); older rows are flat.
    R"sql(
      ALTER TABLE outcomes ADD COLUMN packed INTEGER NOT NULL DEFAULT 0;
    )sql",
    // 5: the history of closed sessions, a record each (see
    // SessionHistory), in the order they closed. Not tied to `sessions`:
    // pruning a closed session leaves its record.
    R"sql(
      CREATE TABLE history (
        session INTEGER PRIMARY KEY,
        seq INTEGER NOT NULL,
        record BLOB NOT NULL
      );
    )sql",
    // 6: the end of the ids a session handed out to its submitters
    // (reserveIds), so that a restarted server never hands them out again.
    R"sql(
      ALTER TABLE sessions ADD COLUMN reserved_ids INTEGER NOT NULL DEFAULT 0;
    )sql",
    // 7: the log's incarnation (one row, written when the log is opened
    // without one: see SessionLog::incarnation()).
    R"sql(
      CREATE TABLE incarnation (id INTEGER NOT NULL);
    )sql",
};
constexpr int VERSION = sizeof(MIGRATIONS) / sizeof(MIGRATIONS[0]);

// A statement from SessionLog::prepare's cache, made ready for its next
// use (reset, bindings cleared: a blob bound SQLITE_STATIC is not held).
struct Statement {
  sqlite3_stmt* stmt;
  ~Statement() {
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
  }
  operator sqlite3_stmt*() const { return stmt; }
};

std::string columnText(sqlite3_stmt* stmt, int i) {
  auto text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, i));
  return text ? std::string(text, sqlite3_column_bytes(stmt, i)) : std::string();
}

std::vector<uint8_t> columnBlob(sqlite3_stmt* stmt, int i) {
  auto data = static_cast<const uint8_t*>(sqlite3_column_blob(stmt, i));
  return std::vector<uint8_t>(data, data + sqlite3_column_bytes(stmt, i));
}

}  // namespace

int SessionLog::schemaVersion() { return VERSION; }

void SessionLog::fail(const char* what, int code) {
  const char* detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(code);
  switch (code) {
    case SQLITE_FULL:
      SQUALL_FAIL("session log ", file, ": ", what, ": the disk is full (", detail, ")");
    case SQLITE_NOTADB:
      SQUALL_FAIL("session log ", file, " is not a squall session log (not an SQLite database)");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      SQUALL_FAIL("session log ", file, " is in use by another squall-server (", detail,
                  "); give each server its own --log");
    case SQLITE_CORRUPT:
      SQUALL_FAIL("session log ", file, " is corrupt: ", what, ": ", detail);
    default:
      SQUALL_FAIL("session log ", file, ": ", what, ": ", detail);
  }
}

void SessionLog::exec(const char* sql) {
  char* message = nullptr;
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, &message);
  sqlite3_free(message);
  if (rc != SQLITE_OK) fail(sql, rc);
}

sqlite3_stmt* SessionLog::prepare(const char* sql) {
  auto it = statements.find(sql);
  if (it != statements.end()) return it->second;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) fail("prepare", rc);
  statements.emplace(sql, stmt);
  return stmt;
}

void SessionLog::step(const char* sql, const char* what) {
  Statement stmt{prepare(sql)};
  int rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) fail(what, rc);
}

template <typename Body>
void SessionLog::transaction(const char* what, Body&& body) {
  step("BEGIN IMMEDIATE", what);
  try {
    body();
    step("COMMIT", what);
  } catch (...) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

SessionLog::SessionLog(const std::string& path, spdlog::logger& logger) : file(path), logger(logger) {
  // Sessions' graphs, constants and errors: the server's user's alone.
  preparePrivateDatabase(path);
  {
    auto lockPath = path + "-lock";
    int fd = ::open(lockPath.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) SQUALL_FAIL("session log ", path, ": cannot open ", lockPath, ": ", strerror(errno));
    serverLock = kj::AutoCloseFd(fd);
    SQUALL_REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0, "session log ", path,
                   " is in use by another squall-server (", lockPath,
                   " is locked): one server a log; give this one another --log");
  }
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    db = nullptr;
    SQUALL_FAIL("session log ", path, ": cannot open: ", detail);
  }
  try {
    // Pages of closed sessions go back to the file system (see
    // sessionClosed). Takes effect only on a new file, and only before WAL
    // mode is set; a no-op on an existing one.
    exec("PRAGMA auto_vacuum=INCREMENTAL");
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    // The WAL is checkpointed every ~4 MiB; keep the file near that size.
    exec("PRAGMA journal_size_limit=8388608");
    exec("PRAGMA foreign_keys=ON");
    // Pages of recent submits stay in memory (checkpoints read them back).
    exec("PRAGMA cache_size=-16384");
    // One server per log: the lock is taken by the first write below and
    // held until the log is closed, so a second server fails at once.
    exec("PRAGMA locking_mode=EXCLUSIVE");
    // Checkpoints are the writer thread's (walCommitted), in place of
    // SQLite's own after each commit past 1,000 pages on whichever thread.
    sqlite3_wal_hook(db, &SessionLog::walCommitted, this);
    int version = 0;
    {
      Statement stmt{prepare("PRAGMA user_version")};
      rc = sqlite3_step(stmt);
      if (rc != SQLITE_ROW) fail("reading the schema version", rc);
      version = sqlite3_column_int(stmt, 0);
    }
    SQUALL_REQUIRE(version >= 0, "session log ", path, " has schema version ", version,
                   ", which no squall-server writes: the file is damaged or not a session log");
    SQUALL_REQUIRE(version <= VERSION, "session log ", path, " has schema version ", version,
                   ", newer than this server's ", VERSION, "; run a newer squall-server");
    if (version > 0) {
      // A cheap structural check: a damaged file is refused, not half read.
      Statement stmt{prepare("PRAGMA quick_check")};
      rc = sqlite3_step(stmt);
      if (rc != SQLITE_ROW) fail("checking the file", rc);
      auto verdict = columnText(stmt, 0);
      SQUALL_REQUIRE(verdict == "ok", "session log ", path, " is corrupt: ", verdict.c_str());
    }
    for (int v = version; v < VERSION; v++) {
      transaction("migrating the schema", [&]() {
        exec(MIGRATIONS[v]);
        exec(("PRAGMA user_version=" + std::to_string(v + 1)).c_str());
      });
      logger.info("event=log-migrated path={} version={}", path, v + 1);
    }
    {
      Statement stmt{prepare("SELECT COALESCE(MAX(seq) + 1, 0) FROM outcomes")};
      rc = sqlite3_step(stmt);
      if (rc != SQLITE_ROW) fail("reading task outcomes", rc);
      nextOutcomeSeq = static_cast<uint64_t>(sqlite3_column_int64(stmt, 0));
    }
    {
      Statement stmt{prepare("SELECT COALESCE(MAX(seq) + 1, 0) FROM history")};
      rc = sqlite3_step(stmt);
      if (rc != SQLITE_ROW) fail("reading the history", rc);
      nextKeptSeq = static_cast<uint64_t>(sqlite3_column_int64(stmt, 0));
    }
    readIncarnation();
    narrowPrivateDatabase(path);
  } catch (...) {
    closeDb();
    throw;
  }
}

uint64_t SessionLog::newIncarnation() {
  uint64_t id = 0;
  while (id == 0) {
    ssize_t n;
    KJ_SYSCALL(n = getrandom(&id, sizeof(id), 0));
    KJ_ASSERT(n == sizeof(id), "getrandom: short read", n);
  }
  return id;
}

void SessionLog::readIncarnation() {
  {
    Statement stmt{prepare("SELECT id FROM incarnation")};
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW) {
      incarnationId = static_cast<uint64_t>(sqlite3_column_int64(stmt, 0));
      SQUALL_REQUIRE(incarnationId != 0, "session log ", file, " is damaged: its incarnation is 0");
      return;
    }
    if (rc != SQLITE_DONE) fail("reading the incarnation", rc);
  }
  // A new log, or one from before incarnations: its sessions' ids are
  // this incarnation's from now.
  incarnationId = newIncarnation();
  transaction("writing the incarnation", [&]() {
    Statement stmt{prepare("INSERT INTO incarnation (id) VALUES (?)")};
    sqlite3_bind_int64(stmt, 1, static_cast<int64_t>(incarnationId));
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) fail("writing the incarnation", rc);
  });
  logger.info("event=log-incarnation path={} incarnation={:016x}", file, incarnationId);
}

void SessionLog::closeDb() {
  for (auto& [sql, stmt] : statements) sqlite3_finalize(stmt);
  statements.clear();
  if (db != nullptr) sqlite3_close(db);
  db = nullptr;
}

SessionLog::~SessionLog() noexcept(false) {
  {
    std::lock_guard<std::mutex> lock(jobMutex);
    stopping = true;
  }
  jobChanged.notify_all();
  // The writer finishes the commit it has.
  if (writer.joinable()) writer.join();
  closeDb();
}

void SessionLog::limitSize(uint64_t mb) {
  std::lock_guard<std::mutex> lock(dbMutex);
  uint64_t pages = 0;
  {
    Statement stmt{prepare("PRAGMA page_size")};
    if (sqlite3_step(stmt) != SQLITE_ROW) fail("reading the page size", sqlite3_errcode(db));
    uint64_t pageSize = static_cast<uint64_t>(sqlite3_column_int64(stmt, 0));
    pages = mb == 0 ? 4294967294ull : (mb << 20) / pageSize;
  }
  exec(("PRAGMA max_page_count=" + std::to_string(pages)).c_str());
}

void SessionLog::sessionOpened(uint64_t id, const std::string& name, bool persistent) {
  LoopWrite lock(*this);
  transaction("recording a new session", [&]() {
    Statement stmt{prepare("INSERT INTO sessions (id, name, persistent) VALUES (?, ?, ?)")};
    sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(id));
    sqlite3_bind_text(stmt, 2, name.data(), static_cast<int>(name.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int(stmt, 3, persistent ? 1 : 0);
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) fail("recording a new session", rc);
  });
}

void SessionLog::updateSession(uint64_t session, const char* sql, int64_t value, const char* what) {
  LoopWrite lock(*this);
  transaction(what, [&]() {
    Statement stmt{prepare(sql)};
    sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(value));
    sqlite3_bind_int64(stmt, 2, static_cast<sqlite3_int64>(session));
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) fail(what, rc);
  });
}

// sessions.persistent: 0 no, 1 yes, 2 lingering (kept open for its named
// actors; a server that predates it reads it as persistent).
void SessionLog::sessionLingering(uint64_t session) {
  updateSession(session, "UPDATE sessions SET persistent = ? WHERE id = ?", 2, "recording a lingering session");
}

void SessionLog::idsReserved(uint64_t session, uint64_t end) {
  updateSession(session, "UPDATE sessions SET reserved_ids = ? WHERE id = ?", static_cast<int64_t>(end),
                "recording reserved ids");
}

void SessionLog::submitted(uint64_t session, const std::vector<kj::ArrayPtr<const uint8_t>>& chunks,
                           const std::vector<std::pair<uint64_t, kj::ArrayPtr<const uint8_t>>>& constants) {
  LoopWrite lock(*this);
  insertSubmit(session, chunks, constants, false);
}

SessionLog::SubmitRows SessionLog::insertSubmit(
    uint64_t session, const std::vector<kj::ArrayPtr<const uint8_t>>& chunks,
    const std::vector<std::pair<uint64_t, kj::ArrayPtr<const uint8_t>>>& constants, bool onlyIfOpen) {
  SubmitRows rows;
  rows.session = session;
  transaction("recording a submit", [&]() {
    if (onlyIfOpen) {
      Statement open{prepare("SELECT 1 FROM sessions WHERE id = ?")};
      sqlite3_bind_int64(open, 1, static_cast<sqlite3_int64>(session));
      int rc = sqlite3_step(open);
      if (rc == SQLITE_DONE) return;  // closed meanwhile: nothing to keep
      if (rc != SQLITE_ROW) fail("recording a submit", rc);
    }
    int64_t seq = 0;
    {
      Statement next{prepare("SELECT COALESCE(MAX(seq) + 1, 0) FROM chunks WHERE session = ?")};
      sqlite3_bind_int64(next, 1, static_cast<sqlite3_int64>(session));
      int rc = sqlite3_step(next);
      if (rc != SQLITE_ROW) fail("recording a submit", rc);
      seq = sqlite3_column_int64(next, 0);
    }
    rows.firstSeq = seq;
    Statement insert{prepare("INSERT INTO chunks (session, seq, message) VALUES (?, ?, ?)")};
    for (auto& chunk : chunks) {
      sqlite3_bind_int64(insert, 1, static_cast<sqlite3_int64>(session));
      sqlite3_bind_int64(insert, 2, seq++);
      sqlite3_bind_blob64(insert, 3, chunk.begin(), chunk.size(), SQLITE_STATIC);
      int rc = sqlite3_step(insert);
      if (rc != SQLITE_DONE) fail("recording a submit", rc);
      sqlite3_reset(insert);
    }
    rows.endSeq = seq;
    Statement constant{prepare("INSERT INTO constants (session, object, data) VALUES (?, ?, ?)")};
    for (auto& [object, data] : constants) {
      sqlite3_bind_int64(constant, 1, static_cast<sqlite3_int64>(session));
      sqlite3_bind_int64(constant, 2, static_cast<sqlite3_int64>(object));
      sqlite3_bind_blob64(constant, 3, data.begin(), data.size(), SQLITE_STATIC);
      int rc = sqlite3_step(constant);
      if (rc != SQLITE_DONE) fail("recording a submit's constants", rc);
      sqlite3_reset(constant);
      rows.constants.push_back(object);
    }
  });
  return rows;
}

SessionLog::SubmitRows SessionLog::insertSubmit(
    uint64_t session, const std::vector<kj::Array<capnp::word>>& chunks,
    const std::vector<std::pair<uint64_t, std::vector<uint8_t>>>& constants) {
  std::vector<kj::ArrayPtr<const uint8_t>> chunkBytes;
  for (auto& chunk : chunks) chunkBytes.push_back(chunk.asBytes());
  std::vector<std::pair<uint64_t, kj::ArrayPtr<const uint8_t>>> constantBytes;
  for (auto& [n, data] : constants) constantBytes.emplace_back(n, kj::arrayPtr(data.data(), data.size()));
  return insertSubmit(session, chunkBytes, constantBytes, true);
}

kj::Promise<SessionLog::SubmitRows> SessionLog::submitLater(
    uint64_t session, std::vector<kj::Array<capnp::word>> chunks,
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> constants) {
  size_t bytes = 0;
  for (auto& chunk : chunks) bytes += chunk.asBytes().size();
  for (auto& [n, data] : constants) bytes += data.size();
  if (bytes <= SMALL_SUBMIT_BYTES && !beforeSubmitWrite) {
    // Only the loop thread queues work, so an idle writer (none queued,
    // none being written) stays idle until this returns, and no submit
    // handed in earlier is unwritten.
    std::unique_lock<std::mutex> jobs(jobMutex);
    std::unique_lock<std::mutex> dbLock(dbMutex, std::defer_lock);
    if (submitJobs.empty() && !writingSubmit && !job && !stopping && dbLock.try_lock()) {
      jobs.unlock();
      SubmitRows rows;
      auto error = kj::runCatchingExceptions([&]() { rows = insertSubmit(session, chunks, constants); });
      dbLock.unlock();
      handOverCheckpoint();
      KJ_IF_MAYBE(e, error) {
        return kj::mv(*e);
      }
      return kj::mv(rows);
    }
  }
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  auto rows = std::make_shared<SubmitHandoff>();
  {
    std::lock_guard<std::mutex> lock(jobMutex);
    if (!writer.joinable()) writer = std::thread([this]() { writerLoop(); });
    submitJobs.push_back(SubmitJob{session, std::move(chunks), std::move(constants), rows, kj::mv(paf.fulfiller)});
  }
  jobChanged.notify_all();
  return paf.promise.then([rows]() {
    std::lock_guard<std::mutex> lock(rows->mutex);
    return std::move(rows->rows);
  });
}

void SessionLog::undoSubmit(const SubmitRows& rows) {
  LoopWrite lock(*this);
  transaction("undoing a submit", [&]() {
    Statement chunks{prepare("DELETE FROM chunks WHERE session = ? AND seq >= ? AND seq < ?")};
    sqlite3_bind_int64(chunks, 1, static_cast<sqlite3_int64>(rows.session));
    sqlite3_bind_int64(chunks, 2, rows.firstSeq);
    sqlite3_bind_int64(chunks, 3, rows.endSeq);
    int rc = sqlite3_step(chunks);
    if (rc != SQLITE_DONE) fail("undoing a submit", rc);
    Statement constant{prepare("DELETE FROM constants WHERE session = ? AND object = ?")};
    for (auto object : rows.constants) {
      sqlite3_bind_int64(constant, 1, static_cast<sqlite3_int64>(rows.session));
      sqlite3_bind_int64(constant, 2, static_cast<sqlite3_int64>(object));
      rc = sqlite3_step(constant);
      if (rc != SQLITE_DONE) fail("undoing a submit", rc);
      sqlite3_reset(constant);
    }
  });
}

void SessionLog::sessionClosed(uint64_t id) {
  // Its queued changes are moot.
  auto other = [id](const auto& r) { return r.session == id; };
  pendingTasks.erase(std::remove_if(pendingTasks.begin(), pendingTasks.end(), other), pendingTasks.end());
  pendingObjects.erase(std::remove_if(pendingObjects.begin(), pendingObjects.end(), other),
                       pendingObjects.end());
  pendingUnkept.erase(std::remove_if(pendingUnkept.begin(), pendingUnkept.end(),
                                     [id](const auto& u) { return u.first == id; }),
                      pendingUnkept.end());
  pendingFailures.erase(std::remove_if(pendingFailures.begin(), pendingFailures.end(),
                                       [id](const auto& f) { return f.first == id; }),
                        pendingFailures.end());
  // A commit under way may still hold its outcomes: they are not written
  // once the session row is gone (see write()).
  LoopWrite lock(*this);
  transaction("pruning a closed session", [&]() {
    Statement stmt{prepare("DELETE FROM sessions WHERE id = ?")};
    sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(id));
    int rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) fail("pruning a closed session", rc);
  });
  exec("PRAGMA incremental_vacuum");
}

void SessionLog::sessionFailed(uint64_t id, const std::string& message) {
  pendingFailures.emplace_back(id, message);
}

void SessionLog::governorSeen(const std::string& name) {
  pendingGovernors.emplace_back(name, true);
}

void SessionLog::governorGone(const std::string& name) {
  pendingGovernors.emplace_back(name, false);
}

std::vector<std::string> SessionLog::loadGovernors() {
  std::lock_guard<std::mutex> lock(dbMutex);
  std::vector<std::string> names;
  Statement stmt{prepare("SELECT name FROM governors ORDER BY name")};
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) names.push_back(columnText(stmt, 0));
  if (rc != SQLITE_DONE) fail("reading governors", rc);
  return names;
}

void SessionLog::taskDone(TaskRecord record) { pendingTasks.push_back(std::move(record)); }

void SessionLog::objectChanged(ObjectRecord record) { pendingObjects.push_back(std::move(record)); }

void SessionLog::objectUnkept(uint64_t session, uint64_t object) {
  pendingUnkept.emplace_back(session, object);
}

void SessionLog::sessionKept(uint64_t id, kj::Array<const kj::byte> record) {
  pendingKept.push_back({id, nextKeptSeq++, kj::mv(record)});
}

void SessionLog::keptForgotten(uint64_t id) {
  // Not written at all when it is still queued (the delete goes anyway: an
  // earlier commit may have written it).
  pendingKept.erase(std::remove_if(pendingKept.begin(), pendingKept.end(),
                                   [id](const Batch::Kept& k) { return k.session == id; }),
                    pendingKept.end());
  pendingForgotten.push_back(id);
}

std::vector<SessionLog::KeptRecord> SessionLog::loadKept() {
  std::lock_guard<std::mutex> lock(dbMutex);
  std::vector<KeptRecord> records;
  Statement stmt{prepare("SELECT session, record FROM history ORDER BY seq")};
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    records.push_back({static_cast<uint64_t>(sqlite3_column_int64(stmt, 0)), columnBlob(stmt, 1)});
  }
  if (rc != SQLITE_DONE) fail("reading the history", rc);
  return records;
}

SessionLog::Batch SessionLog::take() {
  Batch batch;
  if (retry) {
    batch = std::move(*retry);
    retry.reset();
  }
  retryCount = 0;
  batch.changes += pendingTasks.size() + pendingObjects.size() + pendingUnkept.size() +
                   pendingFailures.size() + pendingGovernors.size() + pendingKept.size() +
                   pendingForgotten.size();
  // One message per session.
  struct Records {
    std::vector<const TaskRecord*> tasks;
    std::vector<const ObjectRecord*> objects;
    std::vector<uint64_t> unkept;
  };
  std::map<uint64_t, Records> bySession;
  for (auto& r : pendingTasks) bySession[r.session].tasks.push_back(&r);
  for (auto& r : pendingObjects) bySession[r.session].objects.push_back(&r);
  for (auto& [session, object] : pendingUnkept) bySession[session].unkept.push_back(object);
  for (auto& [session, records] : bySession) {
    capnp::MallocMessageBuilder message;
    auto outcomes = message.initRoot<wire::LoggedOutcomes>();
    auto tasks = outcomes.initTasks(records.tasks.size());
    for (size_t i = 0; i < records.tasks.size(); i++) {
      auto& r = *records.tasks[i];
      auto out = tasks[i];
      out.setTask(r.task);
      out.setState(r.state);
      out.setAttempt(r.attempt);
      out.setGovernor(r.governor);
      out.setStartTimeUs(r.startTimeUs);
      out.setDurationUs(r.durationUs);
      out.setExitStatus(r.exitStatus);
      out.setError(r.error);
      out.setStdoutTail(r.stdoutTail);
      out.setStderrTail(r.stderrTail);
    }
    auto objects = outcomes.initObjects(records.objects.size());
    for (size_t i = 0; i < records.objects.size(); i++) {
      auto& r = *records.objects[i];
      auto out = objects[i];
      out.setObject(r.object);
      out.setState(r.state);
      out.setSize(r.size);
      out.setHash(r.hash);
      auto locations = out.initLocations(r.locations.size());
      for (size_t l = 0; l < r.locations.size(); l++) locations.set(l, r.locations[l]);
    }
    auto unkept = outcomes.initUnkept(records.unkept.size());
    for (size_t i = 0; i < records.unkept.size(); i++) unkept.set(i, records.unkept[i]);
    kj::VectorOutputStream packed(message.sizeInWords() * sizeof(capnp::word) / 2 + 64);
    capnp::writePackedMessage(packed, message);
    batch.outcomes.emplace_back(session, kj::heapArray<kj::byte>(packed.getArray()));
    batch.outcomeSeqs.push_back(nextOutcomeSeq++);
  }
  for (auto& failure : pendingFailures) batch.failures.push_back(std::move(failure));
  for (auto& governor : pendingGovernors) batch.governors.push_back(std::move(governor));
  for (auto& kept : pendingKept) batch.kept.push_back(std::move(kept));
  batch.forgotten.insert(batch.forgotten.end(), pendingForgotten.begin(), pendingForgotten.end());
  pendingGovernors.clear();
  pendingKept.clear();
  pendingForgotten.clear();
  pendingTasks.clear();
  pendingObjects.clear();
  pendingUnkept.clear();
  pendingFailures.clear();
  return batch;
}

void SessionLog::write(const Batch& batch) {
  transaction("writing state changes", [&]() {
    // Outcomes of a session closed meanwhile are dropped.
    Statement insert{prepare(
        "INSERT INTO outcomes (session, seq, batch, packed) SELECT ?1, ?2, ?3, 1 WHERE EXISTS "
        "(SELECT 1 FROM sessions WHERE id = ?1)")};
    for (size_t i = 0; i < batch.outcomes.size(); i++) {
      auto& [session, bytes] = batch.outcomes[i];
      sqlite3_bind_int64(insert, 1, static_cast<sqlite3_int64>(session));
      sqlite3_bind_int64(insert, 2, static_cast<sqlite3_int64>(batch.outcomeSeqs[i]));
      sqlite3_bind_blob64(insert, 3, bytes.begin(), bytes.size(), SQLITE_STATIC);
      int rc = sqlite3_step(insert);
      if (rc != SQLITE_DONE) fail("writing task outcomes", rc);
      sqlite3_reset(insert);
    }
    Statement failure{prepare("UPDATE sessions SET failure = ? WHERE id = ?")};
    for (auto& [id, message] : batch.failures) {
      sqlite3_bind_text(failure, 1, message.data(), static_cast<int>(message.size()), SQLITE_STATIC);
      sqlite3_bind_int64(failure, 2, static_cast<sqlite3_int64>(id));
      int rc = sqlite3_step(failure);
      if (rc != SQLITE_DONE) fail("writing session failures", rc);
      sqlite3_reset(failure);
    }
    Statement seen{prepare("INSERT OR IGNORE INTO governors (name) VALUES (?)")};
    Statement gone{prepare("DELETE FROM governors WHERE name = ?")};
    for (auto& [name, present] : batch.governors) {
      sqlite3_stmt* stmt = present ? seen : gone;
      sqlite3_bind_text(stmt, 1, name.data(), static_cast<int>(name.size()), SQLITE_STATIC);
      int rc = sqlite3_step(stmt);
      if (rc != SQLITE_DONE) fail("writing governors", rc);
      sqlite3_reset(stmt);
    }
  });
  writeHistory(batch);
}

void SessionLog::writeHistory(const Batch& batch) {
  if (batch.kept.empty() && batch.forgotten.empty()) return;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                transaction("writing the history", [&]() {
                  Statement insert{prepare(
                      "INSERT OR REPLACE INTO history (session, seq, record) VALUES (?, ?, ?)")};
                  for (auto& kept : batch.kept) {
                    sqlite3_bind_int64(insert, 1, static_cast<sqlite3_int64>(kept.session));
                    sqlite3_bind_int64(insert, 2, static_cast<sqlite3_int64>(kept.seq));
                    sqlite3_bind_blob64(insert, 3, kept.record.begin(), kept.record.size(), SQLITE_STATIC);
                    int rc = sqlite3_step(insert);
                    if (rc != SQLITE_DONE) fail("writing the history", rc);
                    sqlite3_reset(insert);
                  }
                  Statement drop{prepare("DELETE FROM history WHERE session = ?")};
                  for (auto id : batch.forgotten) {
                    sqlite3_bind_int64(drop, 1, static_cast<sqlite3_int64>(id));
                    int rc = sqlite3_step(drop);
                    if (rc != SQLITE_DONE) fail("pruning the history", rc);
                    sqlite3_reset(drop);
                  }
                });
              })) {
    // The records stay in memory; after a restart the page shows fewer
    // closed sessions. Nothing else depends on them.
    logger.warn("event=history-not-written path={} kept={} forgotten={} error=\"{}\"", file,
                batch.kept.size(), batch.forgotten.size(), e->getDescription().cStr());
  }
}

void SessionLog::flush() {
  std::unique_lock<std::mutex> lock(jobMutex);
  jobChanged.wait(lock, [this]() { return !job; });
  auto batch = take();
  if (batch.changes == 0) return;
  try {
    std::lock_guard<std::mutex> dbLock(dbMutex);
    write(batch);
  } catch (...) {
    retryCount = batch.changes;
    retry = std::move(batch);
    lock.unlock();
    handOverCheckpoint();
    throw;
  }
  lock.unlock();
  handOverCheckpoint();
}

kj::Promise<void> SessionLog::commit() {
  std::unique_lock<std::mutex> lock(jobMutex);
  KJ_REQUIRE(!job, "a session-log commit is already under way");
  auto batch = take();
  if (batch.changes == 0) return kj::READY_NOW;
  if (!writer.joinable()) writer = std::thread([this]() { writerLoop(); });
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  job = std::move(batch);
  jobDone = kj::mv(paf.fulfiller);
  lock.unlock();
  jobChanged.notify_all();
  return paf.promise.catch_([this](kj::Exception&& e) {
    std::lock_guard<std::mutex> lock(jobMutex);
    retryCount = retry ? retry->changes : 0;
    kj::throwFatalException(kj::mv(e));
  });
}

int SessionLog::walCommitted(void* self, sqlite3*, const char*, int pages) {
  auto* log = static_cast<SessionLog*>(self);
  log->walPages.store(pages);
  if (pages >= CHECKPOINT_PAGES) log->checkpointDue.store(true);
  return SQLITE_OK;
}

void SessionLog::handOverCheckpoint() {
  if (!checkpointDue.load()) return;
  if (walPages.load() >= OVERDUE_CHECKPOINT_PAGES) {
    // The writer has not got the connection in time (the loop thread
    // writing back to back holds it): a bounded WAL comes first.
    checkpoint();
    return;
  }
  {
    // Under jobMutex, so that the writer cannot miss it between its test
    // and its wait.
    std::lock_guard<std::mutex> lock(jobMutex);
    if (stopping) return;  // the connection's close checkpoints
    if (!writer.joinable()) writer = std::thread([this]() { writerLoop(); });
  }
  jobChanged.notify_all();
}

void SessionLog::checkpoint() {
  checkpointDue.store(false);
  std::lock_guard<std::mutex> dbLock(dbMutex);
  int pages = 0, copied = 0;
  int rc = sqlite3_wal_checkpoint_v2(db, nullptr, SQLITE_CHECKPOINT_PASSIVE, &pages, &copied);
  // Nothing is lost when it fails: the WAL keeps the frames, and the next
  // commit past the mark tries again.
  if (rc != SQLITE_OK) {
    logger.warn("event=log-checkpoint-failed path={} error=\"{}\"", file, sqlite3_errmsg(db));
  } else {
    logger.debug("event=log-checkpoint path={} pages={} copied={}", file, pages, copied);
  }
  if (afterCheckpoint) afterCheckpoint();
}

void SessionLog::writerLoop() {
  for (;;) {
    std::unique_lock<std::mutex> lock(jobMutex);
    jobChanged.wait(lock, [this]() { return job || !submitJobs.empty() || stopping || checkpointDue.load(); });
    if (checkpointDue.load() && !stopping) {
      // First, so that a steady stream of submits cannot starve it.
      lock.unlock();
      checkpoint();
      continue;
    }
    if (!submitJobs.empty()) {
      auto submit = std::move(submitJobs.front());
      submitJobs.pop_front();
      writingSubmit = true;
      if (stopping) {
        // The server is going down: its client hears nothing back, so
        // nothing of it may be replayed either.
        writingSubmit = false;
        lock.unlock();
        submit.done->reject(KJ_EXCEPTION(DISCONNECTED, "the server is stopping"));
        continue;
      }
      lock.unlock();
      if (beforeSubmitWrite) beforeSubmitWrite();
      auto error = kj::runCatchingExceptions([&]() {
        std::lock_guard<std::mutex> dbLock(dbMutex);
        auto written = insertSubmit(submit.session, submit.chunks, submit.constants);
        std::lock_guard<std::mutex> handoff(submit.rows->mutex);
        submit.rows->rows = std::move(written);
      });
      lock.lock();
      writingSubmit = false;
      lock.unlock();
      KJ_IF_MAYBE(e, error) {
        submit.done->reject(kj::mv(*e));
      } else {
        submit.done->fulfill();
      }
      continue;
    }
    if (!job) return;
    auto done = kj::mv(jobDone);
    lock.unlock();
    auto error = kj::runCatchingExceptions([this]() {
      std::lock_guard<std::mutex> dbLock(dbMutex);
      write(*job);
    });
    lock.lock();
    if (error != nullptr) retry = std::move(*job);
    job.reset();
    lock.unlock();
    jobChanged.notify_all();
    KJ_IF_MAYBE(e, error) {
      done->reject(kj::mv(*e));
    } else {
      done->fulfill();
    }
  }
}

std::vector<SessionLog::SessionRecord> SessionLog::load() {
  std::lock_guard<std::mutex> lock(dbMutex);
  std::vector<SessionRecord> sessions;
  std::map<uint64_t, size_t> index;
  int rc;
  {
    Statement stmt{prepare("SELECT id, name, persistent, failure, reserved_ids FROM sessions ORDER BY id")};
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      SessionRecord record;
      record.id = static_cast<uint64_t>(sqlite3_column_int64(stmt, 0));
      record.name = columnText(stmt, 1);
      record.persistent = sqlite3_column_int(stmt, 2) != 0;
      record.lingering = sqlite3_column_int(stmt, 2) == 2;
      record.failure = columnText(stmt, 3);
      record.reservedIds = static_cast<uint64_t>(sqlite3_column_int64(stmt, 4));
      index[record.id] = sessions.size();
      sessions.push_back(std::move(record));
    }
    if (rc != SQLITE_DONE) fail("reading sessions", rc);
  }
  auto sessionOf = [&](sqlite3_stmt* stmt) -> SessionRecord& {
    return sessions[index.at(static_cast<uint64_t>(sqlite3_column_int64(stmt, 0)))];
  };
  {
    Statement stmt{prepare("SELECT session, message FROM chunks ORDER BY session, seq")};
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) sessionOf(stmt).chunks.push_back(columnBlob(stmt, 1));
    if (rc != SQLITE_DONE) fail("reading submits", rc);
  }
  {
    Statement stmt{prepare("SELECT session, object, data FROM constants ORDER BY session, object")};
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      sessionOf(stmt).constants.emplace_back(static_cast<uint64_t>(sqlite3_column_int64(stmt, 1)),
                                             columnBlob(stmt, 2));
    }
    if (rc != SQLITE_DONE) fail("reading constants", rc);
  }
  {
    // Later passes override earlier ones (a task made again after a loss).
    Statement stmt{prepare("SELECT session, batch, packed FROM outcomes ORDER BY seq")};
    std::map<std::pair<uint64_t, uint64_t>, size_t> taskAt, objectAt;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      auto& session = sessionOf(stmt);
      auto size = static_cast<size_t>(sqlite3_column_bytes(stmt, 1));
      auto options = storedMessageReading(size);
      auto data = static_cast<const kj::byte*>(sqlite3_column_blob(stmt, 1));
      kj::Own<capnp::MessageReader> reader;
      kj::ArrayInputStream input(kj::arrayPtr(data, size));
      kj::Array<capnp::word> words;
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                    if (sqlite3_column_int(stmt, 2) != 0) {
                      reader = kj::heap<capnp::PackedMessageReader>(input, options);
                    } else {
                      KJ_REQUIRE(size % sizeof(capnp::word) == 0);
                      words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
                      memcpy(words.begin(), data, size);
                      reader = kj::heap<capnp::FlatArrayMessageReader>(words, options);
                    }
                  })) {
        SQUALL_FAIL("session log ", file, " is corrupt: an outcome record of session ", session.id,
                    " is truncated");
      }
      // A damaged or tampered record (see storedMessageReading) stops
      // start-up with an error naming it, not with a hang.
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
        auto batch = reader->getRoot<wire::LoggedOutcomes>();
        for (auto t : batch.getTasks()) {
          TaskRecord record{session.id,        t.getTask(),      t.getState(),
                            t.getAttempt(),    t.getGovernor(),  t.getStartTimeUs(),
                            t.getDurationUs(), t.getExitStatus(), t.getError(),
                            t.getStdoutTail(), t.getStderrTail()};
          auto [it, fresh] = taskAt.emplace(std::make_pair(session.id, record.task), session.tasks.size());
          if (fresh) {
            session.tasks.push_back(std::move(record));
          } else {
            session.tasks[it->second] = std::move(record);
          }
        }
        for (auto n : batch.getUnkept()) session.unkept.push_back(n);
        for (auto o : batch.getObjects()) {
          ObjectRecord record{session.id, o.getObject(), o.getState(), o.getSize(), o.getHash(), {}};
          for (auto name : o.getLocations()) record.locations.push_back(name);
          auto [it, fresh] = objectAt.emplace(std::make_pair(session.id, record.object), session.objects.size());
          if (fresh) {
            session.objects.push_back(std::move(record));
          } else {
            session.objects[it->second] = std::move(record);
          }
        }
      })) {
        SQUALL_FAIL("session log ", file, " is corrupt: an outcome record of session ", session.id,
                    " is damaged (", e->getDescription(), ")");
      }
    }
    if (rc != SQLITE_DONE) fail("reading task outcomes", rc);
  }
  return sessions;
}

}  // namespace squall
