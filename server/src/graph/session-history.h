// What the server keeps of closed sessions (issue 13): for each one, its
// counts by state, its failure, its task graph and timeline as the status
// page drew them when it closed, and its tasks (all of them up to a bound,
// else the failures and the longest-running ones). The status page and
// `squall status SESSION` show a closed session from here, since
// SessionTable forgets a session when it closes.
//
// Bounded twice. The newest closed sessions are kept, up to HistoryLimits:
// a number of sessions and a total size, whichever is met first; older ones
// are forgotten. Each record is bounded too (the KEPT_* constants): about
// 1,000 task rows, 100 failures with their output tails, the graph and the
// timeline as the page bounds them (400 tasks or 150 groups; 2,000 bars or
// 160 slices per governor), each view at most 1 MiB. A session of 100,000
// tasks keeps a few hundred KiB; no record exceeds about 4 MiB.
//
// Durable with a session log: a record is queued when its session closes
// and written by the log's writer thread with the next commit (never on the
// loop thread); at start the records come back from the log. Without a log
// (--log off) they live in memory only, bounded the same.
//
// Loop thread only. Each record is a wire::KeptSession message
// (proto/log.capnp) held flat in memory and read in place.
#pragma once

#include "graph.h"
#include "session-log.h"

#include <capnp/serialize.h>
#include <cstdint>
#include <deque>
#include <kj/common.h>
#include <map>
#include <spdlog/logger.h>
#include <squall/wire/log.capnp.h>
#include <string>
#include <string_view>
#include <vector>

namespace squall {

// The defaults of squall-server's --history-sessions and --history-mb.
struct HistoryLimits {
  size_t sessions = 100;
  uint64_t megabytes = 32;
};

// The status page's views of a session, JSON text exactly as
// /api/sessions/N/graph and /api/sessions/N/timeline answer.
struct PageViews {
  std::string graph;
  std::string timeline;
};

class SessionHistory {
 public:
  // Task rows kept per session.
  static constexpr size_t KEPT_TASKS = 1000;
  // Failures (the first by id) kept with their stdout and stderr tails and
  // their whole error, each at most KEPT_TAIL_BYTES.
  static constexpr size_t KEPT_TAILS = 100;
  static constexpr size_t KEPT_TAIL_BYTES = 4096;
  // Other rows' errors and every row's name are cut to these.
  static constexpr size_t KEPT_ERROR_BYTES = 300;
  static constexpr size_t KEPT_NAME_BYTES = 256;
  // A page view bigger than this is not kept (its place says so).
  static constexpr size_t KEPT_VIEW_BYTES = 1 << 20;

  SessionHistory(HistoryLimits limits, spdlog::logger& logger);
  KJ_DISALLOW_COPY(SessionHistory);

  // Brings back what `sessionLog` keeps (at start) and writes through it
  // from now on (never called: memory only). Not owned. Records beyond the
  // limits (they may have been lowered) are forgotten and pruned from the
  // log; a record that cannot be read is reported and pruned too.
  void open(SessionLog& sessionLog);
  // Writes nothing from now on (shutdown, before the log goes); what was
  // queued is the log's to flush.
  void detachLog() { log = nullptr; }
  // Keeps `session` as it is now, just before it closes, with the page's
  // views of it. The oldest records go beyond the limits.
  void keep(const Session& session, uint64_t closedAtMs, PageViews views);

  // Valid until the next keep().
  kj::Maybe<wire::KeptSession::Reader> find(uint64_t id) const;
  // The last closed first, at most `limit`.
  std::vector<wire::KeptSession::Reader> newest(size_t limit) const;
  // The last closed one with this name; 0 when none.
  uint64_t findByName(std::string_view name) const;
  size_t size() const { return order.size(); }
  uint64_t bytes() const { return totalBytes; }
  // The highest id kept (0: none): new sessions' ids go beyond it, so that
  // after a restart an id never names two sessions.
  uint64_t lastId() const { return entries.empty() ? 0 : entries.rbegin()->first; }

 private:
  struct Entry {
    kj::Array<capnp::word> words;
    kj::Own<capnp::FlatArrayMessageReader> reader;
    wire::KeptSession::Reader root;  // into `words`
  };

  HistoryLimits limits;
  spdlog::logger& logger;
  SessionLog* log = nullptr;
  std::map<uint64_t, Entry> entries;
  // Ids in the order their sessions closed, oldest first.
  std::deque<uint64_t> order;
  uint64_t totalBytes = 0;

  // Adds a record, then forgets the oldest beyond the limits (in the log
  // too). False when the record alone is over the size limit: not kept.
  bool add(uint64_t id, kj::Array<capnp::word> words);
  void forget(uint64_t id);
};

}  // namespace squall
