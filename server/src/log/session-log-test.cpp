#include "session-log.h"

#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <thread>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <spdlog/sinks/null_sink.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <squall/proto/errors.h>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

class SessionLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("squall-log-" + std::to_string(getpid()) + "-" +
                                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    path = (dir / "sessions.db").string();
  }
  void TearDown() override { fs::remove_all(dir); }

  // The error text of opening the log at `path`, or "" when it opens.
  std::string openError() {
    try {
      SessionLog log(path, *logger);
      return "";
    } catch (const kj::Exception& e) {
      return userMessage(e).cStr();
    }
  }

  // The error text of opening a log whose schema version was set to
  // `version` behind its back.
  std::string openErrorAtSchemaVersion(int version) {
    { SessionLog log(path, *logger); }
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    auto pragma = "PRAGMA user_version=" + std::to_string(version);
    EXPECT_EQ(sqlite3_exec(db, pragma.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
    return openError();
  }

  static kj::ArrayPtr<const uint8_t> bytes(const std::string& text) {
    return kj::arrayPtr(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  }

  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  fs::path dir;
  std::string path;
};

kj::Array<capnp::word> wordsOf(const std::string& text) {
  auto words = kj::heapArray<capnp::word>((text.size() + 7) / 8);
  memset(words.begin(), 0, words.asBytes().size());
  memcpy(words.begin(), text.data(), text.size());
  return words;
}

// Issue 19 point 8: the loop thread wrote each submit to SQLite itself,
// holding every client and governor for as long as a big one took. Now the
// writer thread does, while the loop goes on; a submit that is then not
// applied is taken back, and one for a session closed meanwhile is not
// written.
TEST_F(SessionLogTest, SubmitsAreWrittenByTheWriterThreadAndCanBeTakenBack) {
  kj::EventLoop loop;
  kj::WaitScope waitScope(loop);
  SessionLog log(path, *logger);
  log.sessionOpened(1, "s", true);
  log.sessionOpened(2, "closing", true);
  std::mutex gate;
  std::unique_lock<std::mutex> held(gate);
  std::thread::id writerId;  // under gate
  log.beforeSubmitWrite = [&]() {
    std::lock_guard<std::mutex> wait(gate);  // until the test lets it write
    writerId = std::this_thread::get_id();
  };
  std::vector<kj::Array<capnp::word>> chunks;
  chunks.push_back(wordsOf("chunk-one"));
  chunks.push_back(wordsOf("chunk-two"));
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> constants{{7, {1, 2, 3}}};
  auto first = log.submitLater(1, kj::mv(chunks), kj::mv(constants));
  EXPECT_FALSE(first.poll(waitScope));  // the writer waits at the gate; this thread goes on
  std::vector<kj::Array<capnp::word>> again;
  again.push_back(wordsOf("chunk-three"));
  auto second = log.submitLater(1, kj::mv(again), {});
  std::vector<kj::Array<capnp::word>> late;
  late.push_back(wordsOf("for a closed session"));
  auto third = log.submitLater(2, kj::mv(late), {});
  log.sessionClosed(2);
  held.unlock();
  auto rows = first.wait(waitScope);
  {
    std::lock_guard<std::mutex> lock(gate);
    EXPECT_NE(writerId, std::this_thread::get_id());
  }
  EXPECT_EQ(rows.firstSeq, 0);
  EXPECT_EQ(rows.endSeq, 2);
  EXPECT_EQ(rows.constants, std::vector<uint64_t>{7});
  auto secondRows = second.wait(waitScope);
  EXPECT_EQ(secondRows.firstSeq, 2);
  auto thirdRows = third.wait(waitScope);
  EXPECT_EQ(thirdRows.endSeq, thirdRows.firstSeq);  // nothing written
  log.undoSubmit(rows);
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 1u);
  ASSERT_EQ(sessions[0].chunks.size(), 1u);  // the second submit only
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sessions[0].chunks[0].data()), 11), "chunk-three");
  EXPECT_TRUE(sessions[0].constants.empty());
}

// A one-call submit (a sync actor call) waited two thread wake-ups for
// the writer, three times the write itself: a small one that finds the
// writer idle is written on this thread, durable when submitLater returns.
TEST_F(SessionLogTest, ASmallSubmitWhileTheWriterIsIdleIsWrittenAtOnce) {
  kj::EventLoop loop;
  kj::WaitScope waitScope(loop);
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "s", true);
    std::vector<kj::Array<capnp::word>> chunks;
    chunks.push_back(wordsOf("small-one"));
    auto first = log.submitLater(1, kj::mv(chunks), {{3, {9, 8}}});
    EXPECT_TRUE(first.poll(waitScope));
    auto rows = first.wait(waitScope);
    EXPECT_EQ(rows.firstSeq, 0);
    EXPECT_EQ(rows.endSeq, 1);
    EXPECT_EQ(rows.constants, std::vector<uint64_t>{3});
    // One for a session that has gone is not written, as on the writer.
    std::vector<kj::Array<capnp::word>> late;
    late.push_back(wordsOf("for no session"));
    auto none = log.submitLater(2, kj::mv(late), {}).wait(waitScope);
    EXPECT_EQ(none.firstSeq, none.endSeq);
    // Next in order after a big one the writer has: it waits its turn.
    std::vector<kj::Array<capnp::word>> big;
    big.push_back(kj::heapArray<capnp::word>(SessionLog::SMALL_SUBMIT_BYTES / sizeof(capnp::word) + 1));
    memset(big[0].asBytes().begin(), 0, big[0].asBytes().size());
    auto bigRows = log.submitLater(1, kj::mv(big), {});
    std::vector<kj::Array<capnp::word>> after;
    after.push_back(wordsOf("small-two"));
    auto afterRows = log.submitLater(1, kj::mv(after), {});
    EXPECT_EQ(bigRows.wait(waitScope).firstSeq, 1);
    EXPECT_EQ(afterRows.wait(waitScope).firstSeq, 2);
  }
  SessionLog log(path, *logger);
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 1u);
  ASSERT_EQ(sessions[0].chunks.size(), 3u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sessions[0].chunks[0].data()), 9), "small-one");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sessions[0].chunks[2].data()), 9), "small-two");
  ASSERT_EQ(sessions[0].constants.size(), 1u);
  EXPECT_EQ(sessions[0].constants[0].second, (std::vector<uint8_t>{9, 8}));
}

// Writes on the loop thread fill the WAL too; its checkpoint (milliseconds,
// with an fsync) is made by the writer thread. Should the loop thread keep
// the connection so busy that the writer cannot get it, the loop thread
// checkpoints at ~6 MiB itself: the WAL stays bounded either way.
TEST_F(SessionLogTest, CheckpointsAreMadeByTheWriterThreadAndKeepTheWalBounded) {
  kj::EventLoop loop;
  kj::WaitScope waitScope(loop);
  // Declared before the log, whose writer thread uses them until it ends.
  std::mutex mutex;
  std::condition_variable checkpointed;
  int checkpoints = 0;                  // under mutex
  bool onThisThread = false;            // under mutex
  auto self = std::this_thread::get_id();
  SessionLog log(path, *logger);
  log.sessionOpened(1, "s", true);
  log.afterCheckpoint = [&]() {
    std::lock_guard<std::mutex> lock(mutex);
    checkpoints++;
    if (std::this_thread::get_id() == self) onThisThread = true;
    checkpointed.notify_all();
  };
  auto wal = path + "-wal";
  uintmax_t largest = 0;
  auto submits = [&](int n) {
    for (int i = 0; i < n; i++) {  // each ~60 KiB, mostly written on this thread
      std::vector<kj::Array<capnp::word>> chunks;
      chunks.push_back(kj::heapArray<capnp::word>(60000 / sizeof(capnp::word)));
      memset(chunks[0].asBytes().begin(), i & 0xff, chunks[0].asBytes().size());
      // (To the writer instead while it holds the connection.)
      log.submitLater(1, kj::mv(chunks), {}).wait(waitScope);
      largest = std::max(largest, fs::file_size(wal));
    }
  };
  // ~4.2 MiB: past the checkpoint mark (1,000 pages), short of the
  // overdue one (1,500).
  submits(70);
  {
    std::unique_lock<std::mutex> lock(mutex);
    // An event, bounded: the writer was woken for it.
    EXPECT_TRUE(checkpointed.wait_for(lock, std::chrono::seconds(60), [&]() { return checkpoints > 0; }));
    EXPECT_FALSE(onThisThread);
  }
  submits(700);  // ~42 MiB more
  EXPECT_LE(largest, 8u << 20);  // journal_size_limit
  EXPECT_EQ(log.load()[0].chunks.size(), 770u);
}

TEST_F(SessionLogTest, WhatIsWrittenComesBackAfterReopening) {
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "first", true);
    log.sessionOpened(2, "second", false);
    log.submitted(1, {bytes("chunk-a"), bytes("chunk-b")}, {{5, bytes("constant five")}});
    log.submitted(1, {bytes("chunk-c")}, {});
    log.taskDone({1, 10, 3, 2, "gov-a", 100, 50, 0, "", "out", "err"});
    log.objectChanged({1, 11, 1, 42, 0xfeedu, {"gov-a", "gov-b"}});
    log.sessionFailed(2, "task 3 failed");
    log.objectUnkept(1, 12);
    EXPECT_EQ(log.queued(), 4u);
    log.flush();
    EXPECT_EQ(log.queued(), 0u);
  }
  SessionLog log(path, *logger);
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 2u);
  auto& first = sessions[0];
  EXPECT_EQ(first.name, "first");
  EXPECT_TRUE(first.persistent);
  ASSERT_EQ(first.chunks.size(), 3u);
  EXPECT_EQ(std::string(first.chunks[0].begin(), first.chunks[0].end()), "chunk-a");
  EXPECT_EQ(std::string(first.chunks[2].begin(), first.chunks[2].end()), "chunk-c");
  ASSERT_EQ(first.constants.size(), 1u);
  EXPECT_EQ(first.constants[0].first, 5u);
  ASSERT_EQ(first.tasks.size(), 1u);
  EXPECT_EQ(first.tasks[0].attempt, 2u);
  EXPECT_EQ(first.tasks[0].governor, "gov-a");
  EXPECT_EQ(first.tasks[0].stderrTail, "err");
  ASSERT_EQ(first.objects.size(), 1u);
  EXPECT_EQ(first.objects[0].hash, 0xfeedu);
  EXPECT_EQ(first.objects[0].locations, (std::vector<std::string>{"gov-a", "gov-b"}));
  EXPECT_EQ(first.unkept, std::vector<uint64_t>{12});
  EXPECT_EQ(sessions[1].failure, "task 3 failed");
  EXPECT_FALSE(sessions[1].persistent);
}

TEST_F(SessionLogTest, ClosedSessionsArePrunedAndTheirQueuedChangesDropped) {
  SessionLog log(path, *logger);
  std::string chunk(64 << 10, 'x');
  for (uint64_t id = 1; id <= 200; id++) {
    log.sessionOpened(id, "s", false);
    log.submitted(id, {bytes(chunk)}, {});
    log.taskDone({id, 1, 3, 1, "g", 0, 0, 0, "", "", ""});
    log.sessionClosed(id);
  }
  EXPECT_EQ(log.queued(), 0u);
  log.flush();
  EXPECT_TRUE(log.load().empty());
  // 12.5 MiB went through; the file holds open work only (pages are
  // reused), and the write-ahead log is bounded by its checkpoints.
  EXPECT_LT(fs::file_size(path), 1u << 20);
  EXPECT_LE(fs::file_size(path + "-wal"), 8u << 20);
}

TEST_F(SessionLogTest, ALargeClosedSessionGivesItsSpaceBack) {
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "big", false);
    std::string chunk(1 << 20, 'q');
    for (int i = 0; i < 16; i++) log.submitted(1, {bytes(chunk)}, {});
    log.sessionClosed(1);
  }  // closing checkpoints the WAL into the file
  EXPECT_LT(fs::file_size(path), 1u << 20);
}

TEST_F(SessionLogTest, ALaterOutcomeOfATaskReplacesTheEarlierOne) {
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "remade", false);
    log.taskDone({1, 7, 3, 1, "gov-a", 0, 0, 0, "", "", ""});
    log.objectChanged({1, 8, 1, 5, 1, {"gov-a"}});
    log.flush();
    // gov-a was lost; the task ran again on gov-b.
    log.taskDone({1, 7, 3, 1, "gov-b", 0, 0, 0, "", "", ""});
    log.objectChanged({1, 8, 1, 5, 1, {"gov-b"}});
    log.flush();
  }
  SessionLog log(path, *logger);
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 1u);
  ASSERT_EQ(sessions[0].tasks.size(), 1u);
  EXPECT_EQ(sessions[0].tasks[0].governor, "gov-b");
  ASSERT_EQ(sessions[0].objects.size(), 1u);
  EXPECT_EQ(sessions[0].objects[0].locations, std::vector<std::string>{"gov-b"});
}

// Issue 40 item 11: session ids are the log's incarnation's. Reopening
// the log (a restart on it) keeps the incarnation, so clients re-attach;
// another log (a fresh one after the old was lost) has another, so a client
// of the first cannot take the second's session 1 for its own.
TEST_F(SessionLogTest, ALogKeepsItsIncarnationAcrossReopeningAndAnotherLogHasAnother) {
  uint64_t first = 0;
  {
    SessionLog log(path, *logger);
    first = log.incarnation();
    log.sessionOpened(1, "a", false);
  }
  EXPECT_NE(first, 0u);
  {
    SessionLog log(path, *logger);
    EXPECT_EQ(log.incarnation(), first);
  }
  for (auto suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix);
  SessionLog fresh(path, *logger);
  EXPECT_NE(fresh.incarnation(), 0u);
  EXPECT_NE(fresh.incarnation(), first);
}

// A log written before incarnations (schema 6) gets one as it is
// migrated, and keeps it from then on.
TEST_F(SessionLogTest, ALogFromBeforeIncarnationsGetsOneWhenMigrated) {
  { SessionLog log(path, *logger); }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE incarnation; PRAGMA user_version=6", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  uint64_t migrated = 0;
  {
    SessionLog log(path, *logger);
    migrated = log.incarnation();
  }
  EXPECT_NE(migrated, 0u);
  SessionLog log(path, *logger);
  EXPECT_EQ(log.incarnation(), migrated);
}

// The permission bits of `file`.
static unsigned modeOf(const fs::path& file) {
  struct stat st;
  EXPECT_EQ(::stat(file.c_str(), &st), 0) << file;
  return st.st_mode & 07777;
}

// The log holds sessions' graphs, constants and errors: only the server's
// user reads it. Directories it makes are 0700, the file and its WAL 0600.
TEST_F(SessionLogTest, TheLogIsPrivate) {
  auto nested = dir / "state" / "squall";
  auto file = (nested / "sessions.db").string();
  {
    SessionLog log(file, *logger);
    log.sessionOpened(1, "private", true);
    log.submitted(1, {bytes("graph")}, {});
    EXPECT_EQ(modeOf(dir / "state"), 0700u);
    EXPECT_EQ(modeOf(nested), 0700u);
    EXPECT_EQ(modeOf(file), 0600u);
    ASSERT_TRUE(fs::exists(file + "-wal"));
    EXPECT_EQ(modeOf(file + "-wal"), 0600u);
    if (fs::exists(file + "-shm")) {
      EXPECT_EQ(modeOf(file + "-shm"), 0600u);
    }
  }
  // An earlier server's files (0644, in a directory someone made 0755)
  // are narrowed; the directory is the operator's and stays.
  fs::permissions(nested, fs::perms(0755));
  fs::permissions(file, fs::perms(0644));
  SessionLog again(file, *logger);
  again.sessionOpened(2, "again", true);
  EXPECT_EQ(modeOf(file), 0600u);
  if (fs::exists(file + "-wal")) {
    EXPECT_EQ(modeOf(file + "-wal"), 0600u);
  }
  EXPECT_EQ(modeOf(nested), 0755u);
}

TEST_F(SessionLogTest, ASecondServerOnTheSameLogIsRefused) {
  SessionLog first(path, *logger);
  first.sessionOpened(1, "mine", false);
  auto error = openError();
  EXPECT_NE(error.find("is in use by another squall-server"), std::string::npos) << error;
}

TEST_F(SessionLogTest, AFileThatIsNotALogIsRefusedByName) {
  std::ofstream(path) << std::string(8192, 'z');
  auto error = openError();
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("is not a squall session log"), std::string::npos) << error;
}

TEST_F(SessionLogTest, ALogFromANewerServerIsRefused) {
  auto error = openErrorAtSchemaVersion(99);
  EXPECT_NE(error.find("schema version 99, newer than this server's"), std::string::npos) << error;
}

// Found by fuzz-session-log: a negative user_version indexed the migrations
// before the start of their array (UBSan: out of bounds).
TEST_F(SessionLogTest, ALogWithANegativeSchemaVersionIsRefused) {
  auto error = openErrorAtSchemaVersion(-83820033);
  EXPECT_NE(error.find("schema version -83820033, which no squall-server writes"), std::string::npos)
      << error;
}

// The security review's hang: an outcome row whose list claims 2^28
// elements of no size (capnp's amplification case) held start-up for
// minutes under an unlimited traversal budget. Now refused at once, named.
TEST_F(SessionLogTest, ATamperedOutcomeRecordIsRefusedNotReplayedForMinutes) {
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "s", true);
  }
  // A flat message: the segment table (one segment of 5 words), the root
  // (3 pointers), `tasks` as an inline-composite list whose tag claims 2^28
  // zero-word elements, two null pointers, the tag.
  uint64_t words[6] = {
      uint64_t(5) << 32,                           // 1 segment, 5 words
      uint64_t(3) << 48,                           // root struct: 0 data words, 3 pointers
      1 | (uint64_t(2) << 2) | (uint64_t(7) << 32),  // list at word 4, inline composite, 0 words
      0, 0,
      uint64_t(1) << 30,                           // tag: 2^28 elements of 0 words
  };
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "INSERT INTO outcomes (session, seq, batch, packed) VALUES (1, 0, ?, 0)", -1,
                               &stmt, nullptr),
            SQLITE_OK);
  sqlite3_bind_blob(stmt, 1, words, sizeof(words), SQLITE_STATIC);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_DONE);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  std::string error;
  try {
    SessionLog log(path, *logger);
    log.load();
  } catch (const kj::Exception& e) {
    error = e.getDescription().cStr();
  }
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("an outcome record of session 1 is damaged"), std::string::npos) << error;
}

TEST_F(SessionLogTest, ATruncatedLogIsRefusedNotHalfRead) {
  {
    SessionLog log(path, *logger);
    std::string chunk(32 << 10, 'y');
    for (uint64_t id = 1; id <= 20; id++) {
      log.sessionOpened(id, "s", true);
      log.submitted(id, {bytes(chunk)}, {});
    }
  }  // closing checkpoints the WAL into the file
  ASSERT_FALSE(fs::exists(path + "-wal") && fs::file_size(path + "-wal") > 0);
  fs::resize_file(path, fs::file_size(path) / 2);
  auto error = openError();
  EXPECT_NE(error.find(path), std::string::npos) << error;
  EXPECT_NE(error.find("corrupt"), std::string::npos) << error;
}

TEST_F(SessionLogTest, AFullDiskRefusesTheWriteAndKeepsWhatWasThere) {
  SessionLog log(path, *logger);
  log.sessionOpened(1, "kept", true);
  log.submitted(1, {bytes("small")}, {});
  log.limitSize(1);
  std::string big(2 << 20, 'b');
  try {
    log.submitted(1, {bytes(big)}, {});
    ADD_FAILURE() << "a 2 MiB write fitted a 1 MiB log";
  } catch (const kj::Exception& e) {
    EXPECT_NE(std::string(userMessage(e).cStr()).find("the disk is full"), std::string::npos)
        << userMessage(e).cStr();
  }
  // Nothing of the refused submit is there; the log still works.
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].chunks.size(), 1u);
  log.limitSize(0);
  log.submitted(1, {bytes(big)}, {});
  EXPECT_EQ(log.load()[0].chunks.size(), 2u);
}

TEST_F(SessionLogTest, HistoryRowsOutlivePruningTheirSession) {
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "closing", false);
    log.sessionKept(1, kj::heapArray<const kj::byte>(bytes("record of 1")));
    log.flush();
    log.sessionClosed(1);
  }
  SessionLog log(path, *logger);
  EXPECT_TRUE(log.load().empty());
  auto kept = log.loadKept();
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_EQ(kept[0].id, 1u);
  EXPECT_EQ(std::string(kept[0].record.begin(), kept[0].record.end()), "record of 1");
}

TEST_F(SessionLogTest, AHistoryWriteThatFailsIsDroppedAndTheStateChangesStillCommit) {
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "busy", true);
    log.limitSize(1);
    // 2 MiB of history cannot fit a 1 MiB log; the task's outcome can.
    std::string big(2 << 20, 'h');
    log.sessionKept(9, kj::heapArray<const kj::byte>(bytes(big)));
    log.taskDone({1, 10, 3, 1, "gov-a", 100, 50, 0, "", "", ""});
    log.flush();
    EXPECT_EQ(log.queued(), 0u);
  }
  SessionLog log(path, *logger);
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 1u);
  ASSERT_EQ(sessions[0].tasks.size(), 1u);
  EXPECT_EQ(sessions[0].tasks[0].task, 10u);
  EXPECT_TRUE(log.loadKept().empty());
}

// commit(): the writer thread writes while the loop goes on; the promise
// settles on the loop.
TEST_F(SessionLogTest, CommitsWriteOnTheWriterThreadAndComeBackAfterReopening) {
  auto io = kj::setupAsyncIo();
  {
    SessionLog log(path, *logger);
    log.sessionOpened(1, "committed", true);
    for (uint64_t round = 0; round < 50; round++) {
      for (uint64_t t = 0; t < 20; t++) {
        uint64_t n = round * 20 + t;
        log.taskDone({1, n, 3, 1, "gov-a", n, 1, 0, "", "out " + std::to_string(n), ""});
        log.objectChanged({1, 100000 + n, 1, n, n * 7, {"gov-a"}});
      }
      EXPECT_EQ(log.queued(), round == 0 ? 40u : 41u);
      auto done = log.commit();
      // Queued while the commit is under way: the next commit's.
      log.taskDone({1, 5000 + round, 3, 1, "gov-b", 0, 0, 0, "", "", ""});
      EXPECT_EQ(log.queued(), 1u);
      done.wait(io.waitScope);
    }
    log.commit().wait(io.waitScope);
    EXPECT_EQ(log.queued(), 0u);
    // Nothing queued: settled at once.
    log.commit().wait(io.waitScope);
  }
  SessionLog log(path, *logger);
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 1u);
  ASSERT_EQ(sessions[0].tasks.size(), 1050u);
  ASSERT_EQ(sessions[0].objects.size(), 1000u);
  for (auto& task : sessions[0].tasks) {
    if (task.task < 5000) {
      EXPECT_EQ(task.stdoutTail, "out " + std::to_string(task.task));
    }
  }
  for (auto& object : sessions[0].objects) EXPECT_EQ(object.hash, (object.object - 100000) * 7);
}

TEST_F(SessionLogTest, AFailedCommitIsRejectedAndItsChangesGoWithTheNext) {
  auto io = kj::setupAsyncIo();
  SessionLog log(path, *logger);
  log.sessionOpened(1, "full", true);
  log.limitSize(1);
  std::string tail(3 << 20, 'e');
  log.taskDone({1, 1, 4, 1, "gov-a", 0, 0, 1, "failed", "", tail});
  try {
    log.commit().wait(io.waitScope);
    ADD_FAILURE() << "a 3 MiB outcome fitted a 1 MiB log";
  } catch (const kj::Exception& e) {
    EXPECT_NE(std::string(userMessage(e).cStr()).find("the disk is full"), std::string::npos)
        << userMessage(e).cStr();
  }
  EXPECT_EQ(log.queued(), 1u);
  log.taskDone({1, 2, 3, 1, "gov-a", 0, 0, 0, "", "", ""});
  log.limitSize(0);
  log.commit().wait(io.waitScope);
  EXPECT_EQ(log.queued(), 0u);
  auto sessions = log.load();
  ASSERT_EQ(sessions[0].tasks.size(), 2u);
  EXPECT_EQ(sessions[0].tasks[0].stderrTail.size(), tail.size());
}

TEST_F(SessionLogTest, OutcomesOfASessionClosedDuringTheirCommitAreDropped) {
  auto io = kj::setupAsyncIo();
  SessionLog log(path, *logger);
  log.sessionOpened(1, "closing", false);
  log.sessionOpened(2, "staying", false);
  for (uint64_t n = 0; n < 2000; n++) {
    log.taskDone({1, n, 3, 1, "gov-a", 0, 0, 0, "", "", std::string(100, 'x')});
    log.taskDone({2, n, 3, 1, "gov-a", 0, 0, 0, "", "", ""});
  }
  auto done = log.commit();
  log.sessionClosed(1);  // before, during or after the write: never half there
  done.wait(io.waitScope);
  auto sessions = log.load();
  ASSERT_EQ(sessions.size(), 1u);
  EXPECT_EQ(sessions[0].id, 2u);
  EXPECT_EQ(sessions[0].tasks.size(), 2000u);
}

}  // namespace
}  // namespace squall
