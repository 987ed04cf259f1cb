#include "session-history.h"

#include <algorithm>
#include <capnp/serialize-packed.h>
#include <kj/io.h>
#include <squall/proto/spec-names.h>

namespace squall {

namespace {

capnp::ReaderOptions trusted() {
  // Records are ours and read again and again in place: no traversal
  // budget to run out of.
  capnp::ReaderOptions options;
  options.traversalLimitInWords = UINT64_MAX;
  return options;
}

std::string cut(const std::string& text, size_t limit) {
  return text.size() <= limit ? text : text.substr(0, limit);
}

// Where a page view too big to keep was.
std::string omitted(size_t bytes) {
  return "{\"mode\":\"omitted\",\"bytes\":" + std::to_string(bytes) + "}";
}

}  // namespace

SessionHistory::SessionHistory(HistoryLimits limits, spdlog::logger& logger)
    : limits(limits), logger(logger) {}

void SessionHistory::keep(const Session& session, uint64_t closedAtMs, PageViews views) {
  if (limits.sessions == 0) return;
  capnp::MallocMessageBuilder message;
  auto kept = message.initRoot<wire::KeptSession>();
  kept.setId(session.id);
  kept.setName(session.name);
  kept.setFailed(session.state == Session::State::FAILED);
  kept.setClosedAtMs(closedAtMs);
  kept.setChanges(session.changes);
  kept.setNextId(session.nextId);
  auto counts = kept.initCounts(7);
  for (uint i = 0; i < 7; i++) counts.set(i, session.counts[i]);
  if (session.state == Session::State::FAILED) {
    auto failure = kept.initFailure();
    failure.setMessage(session.failureMessage);
    failure.setTask(session.failedTask);
    failure.setTaskName(session.failedTaskName);
    failure.setExitStatus(session.failedExitStatus);
    failure.setStderrTail(cut(session.failedStderrTail, KEPT_TAIL_BYTES));
  }

  // Every task up to the bound; beyond it the failures first, then the
  // longest-running tasks: what a user comes back for is what failed and
  // what took the time.
  std::vector<const TaskNode*> failures, others;
  for (auto& [n, task] : session.tasks) {
    (task.state == TaskNode::State::FAILED ? failures : others).push_back(&task);
  }
  auto byId = [](const TaskNode* a, const TaskNode* b) { return a->id.n < b->id.n; };
  std::sort(failures.begin(), failures.end(), byId);
  if (failures.size() > KEPT_TASKS) failures.resize(KEPT_TASKS);
  size_t room = KEPT_TASKS - failures.size();
  if (others.size() > room) {
    auto longer = [](const TaskNode* a, const TaskNode* b) {
      return a->durationUs != b->durationUs ? a->durationUs > b->durationUs : a->id.n < b->id.n;
    };
    std::nth_element(others.begin(), others.begin() + static_cast<ptrdiff_t>(room), others.end(), longer);
    others.resize(room);
  }
  std::sort(others.begin(), others.end(), byId);
  auto rows = kept.initTasks(failures.size() + others.size());
  uint i = 0;
  for (auto* list : {&failures, &others}) {
    for (auto* task : *list) {
      bool tails = list == &failures && i < KEPT_TAILS;
      auto row = rows[i++];
      row.setName(cut(task->spec.getName().cStr(), KEPT_NAME_BYTES));
      row.setType(taskTypeName(task->spec));
      auto outcome = row.initOutcome();
      outcome.setTask(task->id.n);
      outcome.setState(static_cast<int32_t>(task->state));
      outcome.setAttempt(task->attempt);
      outcome.setGovernor(task->governorName);
      outcome.setStartTimeUs(task->startTimeUs);
      outcome.setDurationUs(task->durationUs);
      outcome.setExitStatus(task->exitStatus);
      outcome.setError(cut(task->error, tails ? KEPT_TAIL_BYTES : KEPT_ERROR_BYTES));
      if (tails) {
        outcome.setStdoutTail(cut(task->stdoutTail, KEPT_TAIL_BYTES));
        outcome.setStderrTail(cut(task->stderrTail, KEPT_TAIL_BYTES));
      }
    }
  }
  kept.setGraph(views.graph.size() <= KEPT_VIEW_BYTES ? views.graph : omitted(views.graph.size()));
  kept.setTimeline(views.timeline.size() <= KEPT_VIEW_BYTES ? views.timeline
                                                            : omitted(views.timeline.size()));

  if (!add(session.id, capnp::messageToFlatArray(message))) return;
  if (log != nullptr) {
    kj::VectorOutputStream packed(message.sizeInWords() * sizeof(capnp::word) / 2 + 64);
    capnp::writePackedMessage(packed, message);
    log->sessionKept(session.id, kj::heapArray<const kj::byte>(packed.getArray()));
  }
}

void SessionHistory::open(SessionLog& sessionLog) {
  log = &sessionLog;
  for (auto& record : sessionLog.loadKept()) {
    kj::Array<capnp::word> words;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  kj::ArrayInputStream input(kj::arrayPtr(record.record.data(), record.record.size()));
                  // Bounded: the copy below is canonical, read in place later.
                  capnp::PackedMessageReader reader(input, storedMessageReading(record.record.size()));
                  auto root = reader.getRoot<wire::KeptSession>();
                  KJ_REQUIRE(root.getId() == record.id, "a history record names another session");
                  KJ_REQUIRE(root.getCounts().size() == 7, "a history record has no counts");
                  for (auto task : root.getTasks()) {
                    auto state = task.getOutcome().getState();
                    KJ_REQUIRE(state >= 0 && state < 7, "a history record has a bad task state", state);
                  }
                  capnp::MallocMessageBuilder copy;
                  copy.setRoot(root);
                  words = capnp::messageToFlatArray(copy);
                })) {
      logger.warn("event=history-record-dropped path={} session={} error=\"{}\"", sessionLog.path(),
                  record.id, e->getDescription().cStr());
      sessionLog.keptForgotten(record.id);
      continue;
    }
    if (!add(record.id, kj::mv(words))) sessionLog.keptForgotten(record.id);
  }
  logger.info("event=history-loaded sessions={} bytes={}", order.size(), totalBytes);
}

bool SessionHistory::add(uint64_t id, kj::Array<capnp::word> words) {
  uint64_t size = words.size() * sizeof(capnp::word);
  uint64_t budget = limits.megabytes << 20;
  if (limits.sessions == 0) return false;
  if (size > budget) {
    logger.warn("event=history-skipped session={} bytes={} limit_bytes={}", id, size, budget);
    return false;
  }
  if (entries.count(id)) forget(id);
  auto& entry = entries[id];
  entry.words = kj::mv(words);
  entry.reader = kj::heap<capnp::FlatArrayMessageReader>(entry.words, trusted());
  entry.root = entry.reader->getRoot<wire::KeptSession>();
  order.push_back(id);
  totalBytes += size;
  while (order.size() > limits.sessions || totalBytes > budget) {
    auto oldest = order.front();
    forget(oldest);
    if (log != nullptr) log->keptForgotten(oldest);
  }
  return true;
}

void SessionHistory::forget(uint64_t id) {
  auto it = entries.find(id);
  if (it == entries.end()) return;
  totalBytes -= it->second.words.size() * sizeof(capnp::word);
  entries.erase(it);
  order.erase(std::find(order.begin(), order.end(), id));
}

kj::Maybe<wire::KeptSession::Reader> SessionHistory::find(uint64_t id) const {
  auto it = entries.find(id);
  if (it == entries.end()) return nullptr;
  return it->second.root;
}

std::vector<wire::KeptSession::Reader> SessionHistory::newest(size_t limit) const {
  std::vector<wire::KeptSession::Reader> out;
  for (auto it = order.rbegin(); it != order.rend() && out.size() < limit; ++it) {
    out.push_back(entries.at(*it).root);
  }
  return out;
}

uint64_t SessionHistory::findByName(std::string_view name) const {
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    auto kept = entries.at(*it).root;
    if (std::string_view(kept.getName().begin(), kept.getName().size()) == name) return *it;
  }
  return 0;
}

}  // namespace squall
