// The server's durable session log (issue 5): SQLite in WAL mode holding
// every open session, the graph submitted to it (the submit chunks as they
// arrived, so replay re-applies them through the same validation),
// constants' bytes, and the outcome of every finished task and object.
//
// Threads: the methods are called on the loop thread. A session opening and
// a submit are written there at once, in their own transaction, before the
// caller acknowledges them ("acknowledged only once durable"). The many
// small state changes are queued, encoded (packed capnp, one message per
// session) by commit() and written by the log's writer thread, one
// transaction per commit, while the loop goes on; commits that come while
// one is being written wait and go together (group commit). A mutex keeps
// the two threads off the SQLite handle at the same time. A small submit
// that finds the writer idle is written on the loop thread at once (see
// submitLater). WAL checkpoints, the one slow step of a small write, are
// always the writer thread's: a commit that fills the WAL to ~4 MiB, on
// either thread, hands the checkpoint to it.
// synchronous=NORMAL in WAL mode: a committed transaction survives the
// server process dying (kill -9); only an operating-system crash can lose
// the last transactions.
//
// Compaction: a closed session's rows are deleted when it closes, so the
// log holds open work only, and its pages go back to the file system.
//
// History: what the server keeps of closed sessions (SessionHistory) is in
// a table of its own, which pruning a session leaves alone; it is pruned by
// the history's own bounds. Its rows are queued like state changes and
// written by the same commits, in a transaction of their own after the
// state changes: a history write that fails (a full log) is logged and
// dropped, and never holds back what recovery needs.
//
// Errors (a file that is not a log, a newer schema, corruption, a full
// disk) throw FAILED exceptions naming the file and the problem; a failed
// write leaves the log as it was before that transaction.
#pragma once

#include <atomic>
#include <capnp/message.h>
#include <condition_variable>
#include <deque>
#include <functional>
#include <cstdint>
#include <kj/array.h>
#include <kj/async.h>
#include <kj/common.h>
#include <kj/io.h>
#include <memory>
#include <mutex>
#include <optional>
#include <spdlog/logger.h>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

struct sqlite3;
struct sqlite3_stmt;

namespace squall {

// How a message read back from the log (a submit chunk, outcomes, a history
// record) may be traversed: a budget that grows with what is stored, so a
// tampered row whose pointers point at the same data again and again (an
// amplification) fails at once instead of holding start-up for minutes.
// 512 words a stored byte covers a packed message (a 2-byte run of zeros
// unpacks to up to 256 words) read twice.
inline capnp::ReaderOptions storedMessageReading(size_t storedBytes) {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 512 * static_cast<uint64_t>(storedBytes) + (1 << 16);
  return options;
}

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
    // Kept open by the server only for its named actors (its owner closed
    // it): closes once they have ended.
    bool lingering = false;
    // Submit chunks in the order they were applied; each is a flat
    // capnp message (Submission.AddParams).
    std::vector<std::vector<uint8_t>> chunks;
    // Constants' bytes that arrived through appendData, by object n.
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> constants;
    std::vector<TaskRecord> tasks;
    std::vector<ObjectRecord> objects;
    std::vector<uint64_t> unkept;  // objects no longer kept
    std::string failure;  // non-empty: the session has failed
    // The end of the ids handed out by reserveIds (0: none).
    uint64_t reservedIds = 0;
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
  // Where one submit's rows are, for undoSubmit().
  struct SubmitRows {
    uint64_t session = 0;
    int64_t firstSeq = 0, endSeq = 0;  // its chunks: [firstSeq, endSeq)
    std::vector<uint64_t> constants;   // objects whose appended bytes it wrote
  };
  // submitted(), done on the writer thread: a submit of a gigabyte held the
  // loop thread (every client, governor and page) for seconds of SQLite.
  // A small one (at most SMALL_SUBMIT_BYTES) while the writer has nothing
  // to do is written here at once, and the promise is already resolved:
  // handing it over and back cost two thread wake-ups, about three times
  // the ~45 us of the write itself, on the path of every one-call submit
  // (a sync actor call). Submits are written in the order handed in.
  // Resolves once durable; rejected with the error when it failed (nothing
  // written). Nothing is written for a session whose row has gone
  // meanwhile (it was closed).
  kj::Promise<SubmitRows> submitLater(uint64_t session, std::vector<kj::Array<capnp::word>> chunks,
                                      std::vector<std::pair<uint64_t, std::vector<uint8_t>>> constants);
  // Deletes what submitLater wrote for a submit that was then not applied
  // (its session changed while it was written). Durable on return.
  void undoSubmit(const SubmitRows& rows);
  static constexpr size_t SMALL_SUBMIT_BYTES = 64 << 10;
  // Tests only: runs on the writer thread before each submitLater write;
  // while set, every submit goes to the writer.
  std::function<void()> beforeSubmitWrite;
  // Tests only: runs after each WAL checkpoint (on the writer thread, or
  // on the loop thread for one overdue).
  std::function<void()> afterCheckpoint;
  // Deletes every row of the session (compaction).
  void sessionClosed(uint64_t id);
  // Ids of the session below `end` are promised (reserveIds). Durable on
  // return.
  void idsReserved(uint64_t session, uint64_t end);
  // The session outlives its client from now, until its named actors have
  // ended (it lingers; SessionRecord::lingering). Durable on return.
  void sessionLingering(uint64_t session);

  // Queued until commit() or flush().
  void sessionFailed(uint64_t id, const std::string& message);
  void taskDone(TaskRecord record);
  void objectChanged(ObjectRecord record);
  void objectUnkept(uint64_t session, uint64_t object);
  // Writes what is queued in one transaction on the writer thread; resolves
  // once it is committed. One at a time: the next only after this one
  // settled. On failure the changes are kept for the next commit and the
  // promise is rejected with the error.
  kj::Promise<void> commit();
  // The same, done on this thread (shutdown, tests); throws on failure.
  void flush();
  // Changes not yet handed to a commit (a failed commit's count again).
  size_t queued() const {
    return pendingTasks.size() + pendingObjects.size() + pendingUnkept.size() +
           pendingFailures.size() + pendingGovernors.size() + pendingKept.size() +
           pendingForgotten.size() + retryCount;
  }
  // A closed session's record in the history (opaque bytes, see
  // SessionHistory), newer than every record before it; a record the
  // history no longer keeps. Queued until commit().
  void sessionKept(uint64_t id, kj::Array<const kj::byte> record);
  void keptForgotten(uint64_t id);
  struct KeptRecord {
    uint64_t id;
    std::vector<uint8_t> record;
  };
  // The history's records, oldest first.
  std::vector<KeptRecord> loadKept();
  // A governor registered / left for good (queued until commit()). Those
  // still listed when the server restarts are waited for.
  void governorSeen(const std::string& name);
  void governorGone(const std::string& name);
  std::vector<std::string> loadGovernors();

  // Everything the log holds, for replay at start.
  std::vector<SessionRecord> load();

  // Caps the log file at `mb` MiB (0: no cap): writes beyond fail as on a
  // full disk, and the server refuses the submit that needed them.
  void limitSize(uint64_t mb);

  // The log's incarnation: a random nonzero number written when the log is
  // created (or first opened by a server that knows incarnations) and kept
  // across restarts on it. Session ids are this incarnation's: a server on
  // another log (a new incarnation) numbers its sessions anew, and clients
  // tell the two apart by it (ClientService, `incarnation`).
  uint64_t incarnation() const { return incarnationId; }
  // A random nonzero incarnation (getrandom), for a new log or a server
  // without one.
  static uint64_t newIncarnation();

  // The schema version this build writes (`PRAGMA user_version`).
  static int schemaVersion();
  const std::string& path() const { return file; }

 private:
  // One column of a session's row: `sql` binds the value, then the id.
  // Durable on return.
  void updateSession(uint64_t session, const char* sql, int64_t value, const char* what);

  // What one commit writes, encoded on the loop thread.
  struct Batch {
    std::vector<std::pair<uint64_t, kj::Array<kj::byte>>> outcomes;  // session, packed message
    std::vector<uint64_t> outcomeSeqs;
    std::vector<std::pair<uint64_t, std::string>> failures;
    std::vector<std::pair<std::string, bool>> governors;
    // History rows: (session, seq, record) to write, then sessions to drop.
    struct Kept {
      uint64_t session;
      uint64_t seq;
      kj::Array<const kj::byte> record;
    };
    std::vector<Kept> kept;
    std::vector<uint64_t> forgotten;
    size_t changes = 0;
  };

  std::string file;
  spdlog::logger& logger;
  // The SQLite handle, used under dbMutex (loop and writer thread).
  std::mutex dbMutex;
  sqlite3* db = nullptr;
  // `<log>-lock`, flock()ed for the log's life: one server a log. (SQLite's
  // EXCLUSIVE locking mode did not keep a second server out: with WAL it
  // opened and served the same log.) Closed last, after the database.
  kj::AutoCloseFd serverLock;
  // The writer thread and its one job; `retry`: a batch whose write failed,
  // written again first by the next commit. Guarded by jobMutex.
  std::mutex jobMutex;
  std::condition_variable jobChanged;
  std::optional<Batch> job;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> jobDone;
  std::optional<Batch> retry;
  // One submit's rows as the writer hands them back: written under `mutex`
  // before the job's fulfiller fires, read under it after. The fulfiller
  // orders the two as well, but inside KJ's uninstrumented futexes, which
  // ThreadSanitizer cannot see (tools/sanitizer/tsan.supp).
  struct SubmitHandoff {
    std::mutex mutex;
    SubmitRows rows;
  };
  struct SubmitJob {
    uint64_t session;
    std::vector<kj::Array<capnp::word>> chunks;
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> constants;
    // The writer fills `rows` before it fulfils `done` (a fulfiller of
    // a struct holding a vector trips gcc's -Wmaybe-uninitialized inside
    // KJ's cross-thread code).
    std::shared_ptr<SubmitHandoff> rows;
    kj::Own<kj::CrossThreadPromiseFulfiller<void>> done;
  };
  std::deque<SubmitJob> submitJobs;
  bool writingSubmit = false;  // the writer took one and has not written it yet
  size_t retryCount = 0;  // loop thread's copy of retry->changes
  bool stopping = false;
  // A commit left the WAL at CHECKPOINT_PAGES or more (set by walCommitted
  // under dbMutex on either thread); the writer checkpoints it.
  std::atomic<bool> checkpointDue{false};
  std::atomic<int> walPages{0};  // after the last commit
  static constexpr int CHECKPOINT_PAGES = 1000;
  // Past this, a loop-thread write checkpoints itself (~6 MiB, under
  // journal_size_limit).
  static constexpr int OVERDUE_CHECKPOINT_PAGES = 1500;
  static int walCommitted(void* self, sqlite3* db, const char* name, int pages);
  // The writer is woken (started if need be) when a checkpoint is due;
  // call it without dbMutex held (flush() holds jobMutex, then dbMutex).
  void handOverCheckpoint();
  void checkpoint();
  // dbMutex held by a write on the loop thread; on release, a checkpoint
  // that write made due goes to the writer.
  class LoopWrite {
   public:
    explicit LoopWrite(SessionLog& log) : log(log), lock(log.dbMutex) {}
    ~LoopWrite() {
      lock.unlock();
      log.handOverCheckpoint();
    }
    KJ_DISALLOW_COPY(LoopWrite);

   private:
    SessionLog& log;
    std::unique_lock<std::mutex> lock;
  };
  std::thread writer;
  std::vector<TaskRecord> pendingTasks;
  std::vector<ObjectRecord> pendingObjects;
  std::vector<std::pair<uint64_t, uint64_t>> pendingUnkept;  // session, object
  std::vector<std::pair<uint64_t, std::string>> pendingFailures;
  std::vector<std::pair<std::string, bool>> pendingGovernors;
  std::vector<Batch::Kept> pendingKept;
  std::vector<uint64_t> pendingForgotten;
  // Order of outcome rows across sessions (read back at open by load()),
  // and of history rows.
  uint64_t nextOutcomeSeq = 0;
  uint64_t nextKeptSeq = 0;
  // incarnation(); read (or made and written) by readIncarnation() at open.
  uint64_t incarnationId = 0;
  void readIncarnation();

  // One submit's rows in one transaction (none when `onlyIfOpen` and the
  // session's row is gone); caller holds dbMutex.
  SubmitRows insertSubmit(uint64_t session, const std::vector<kj::ArrayPtr<const uint8_t>>& chunks,
                          const std::vector<std::pair<uint64_t, kj::ArrayPtr<const uint8_t>>>& constants,
                          bool onlyIfOpen);
  // The same for submitLater's owned chunks and constants, only if the
  // session is still open.
  SubmitRows insertSubmit(uint64_t session, const std::vector<kj::Array<capnp::word>>& chunks,
                          const std::vector<std::pair<uint64_t, std::vector<uint8_t>>>& constants);
  // The queue (after a failed batch) as one batch; empties the queue.
  Batch take();
  // One transaction, then one for the history; caller holds dbMutex.
  void write(const Batch& batch);
  void writeHistory(const Batch& batch);
  void writerLoop();
  void exec(const char* sql);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back and rethrows.
  template <typename Body>
  void transaction(const char* what, Body&& body);
  [[noreturn]] void fail(const char* what, int code);
  // The statement of `sql`, prepared on its first use and kept until the
  // log closes (the hot paths run the same few statements for every
  // submit and commit; parsing them was a tenth of the writer's time). Use
  // it through a Statement, which resets it. Under dbMutex, like every use
  // of the connection; never two Statements of one `sql` at once.
  sqlite3_stmt* prepare(const char* sql);
  std::unordered_map<std::string, sqlite3_stmt*> statements;
  // Runs the cached statement `sql`, which returns no rows.
  void step(const char* sql, const char* what);
  // Finalizes the statements, then closes the connection.
  void closeDb();
};

}  // namespace squall
