#include "status-view.h"
#include "json-nesting.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>
#include <squall/proto/resource-amounts.h>
#include <squall/proto/spec-names.h>
#include <unordered_map>

namespace squall {

namespace {

using S = TaskNode::State;

constexpr auto& STATE_NAMES = TASK_STATE_NAMES;
constexpr S ALL_STATES[7] = {S::WAITING, S::READY,     S::ASSIGNED, S::FINISHED,
                             S::FAILED,  S::CANCELLED, S::SKIPPED};

Json countsJson(const uint64_t* counts) {
  Json out = Json::object();
  for (int i = 0; i < 7; i++) out[STATE_NAMES[i]] = counts[i];
  return out;
}

uint64_t total(const uint64_t* counts) {
  uint64_t sum = 0;
  for (int i = 0; i < 7; i++) sum += counts[i];
  return sum;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// At most `limit` bytes, cut at a line end when one is near.
std::string clip(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  return std::string(text.substr(0, limit)) + "…";
}

const char* objectStateName(ObjectNode::State state) {
  switch (state) {
    case ObjectNode::State::UNFINISHED: return "unfinished";
    case ObjectNode::State::FINISHED: return "finished";
    case ObjectNode::State::REMOVED: return "removed";
    case ObjectNode::State::FAILED: return "failed";
  }
  return "unknown";
}

Json configJson(wire::TaskSpec::Reader spec) {
  auto config = spec.getConfig();
  Json out = Json::object();
  switch (config.which()) {
    case wire::TaskSpec::Config::CONCAT:
    case wire::TaskSpec::Config::MAKE_DIR:
      break;
    case wire::TaskSpec::Config::SLEEP:
      out["milliseconds"] = config.getSleep().getMilliseconds();
      break;
    case wire::TaskSpec::Config::EXECUTE: {
      auto e = config.getExecute();
      Json args = Json::array();
      for (auto a : e.getArgs()) args.push_back(a.cStr());
      out["args"] = args;
      out["shell"] = e.getShell();
      out["stdinInput"] = e.getStdinInput();
      Json outputs = Json::array();
      for (auto o : e.getOutputs()) {
        if (o.isStdout()) {
          outputs.push_back({{"stdout", true}});
        } else {
          outputs.push_back({{"path", o.getPath().cStr()}});
        }
      }
      out["outputs"] = outputs;
      Json env = Json::array();
      for (auto v : e.getEnv()) env.push_back({{"name", v.getName().cStr()}, {"value", v.getValue().cStr()}});
      out["env"] = env;
      break;
    }
    case wire::TaskSpec::Config::SLICE_DIR:
      out["path"] = config.getSliceDir().cStr();
      break;
    case wire::TaskSpec::Config::LOAD:
      out["path"] = config.getLoad().cStr();
      break;
    case wire::TaskSpec::Config::LOAD_DIR:
      out["path"] = config.getLoadDir().cStr();
      break;
    case wire::TaskSpec::Config::STORE:
      out["path"] = config.getStore().getPath().cStr();
      out["overwrite"] = config.getStore().getOverwrite();
      break;
    case wire::TaskSpec::Config::CALL:
      out["executor"] = config.getCall().getExecutor().cStr();
      out["function"] = config.getCall().getFunction().cStr();
      out["configBytes"] = config.getCall().getConfig().size();
      break;
    case wire::TaskSpec::Config::ACTOR: {
      auto actor = config.getActor();
      out["executor"] = actor.getExecutor().cStr();
      out["actorType"] = actor.getType().cStr();
      out["configBytes"] = actor.getConfig().size();
      out["maxRestarts"] = actor.getMaxRestarts();
      out["maxCallRetries"] = actor.getMaxCallRetries();
      break;
    }
    case wire::TaskSpec::Config::ACTOR_CALL: {
      auto call = config.getActorCall();
      out["actor"] = call.getActor().getN();
      out["method"] = call.getMethod().cStr();
      out["configBytes"] = call.getConfig().size();
      break;
    }
  }
  return out;
}

// What a governor's store held at its last heartbeat; null before one.
Json storeJson(const GovernorStore& store) {
  if (!store.known) return nullptr;
  return {{"objects", store.objects},
          {"memoryBytes", store.memoryBytes},
          {"memoryCapacity", store.memoryCapacity},
          {"memoryObjects", store.memoryObjects},
          {"spilledBytes", store.spilledBytes},
          {"spilledObjects", store.spilledObjects},
          {"warmBytes", store.warmBytes}};
}

// A page view kept as JSON text (see SessionHistory).
Json keptView(capnp::Text::Reader text) {
  auto json = Json::parse(text.begin(), text.end(), nullptr, false);
  if (json.is_discarded()) return {{"mode", "omitted"}, {"bytes", text.size()}};
  return json;
}

std::string hex(uint64_t value) {
  char buffer[17];
  snprintf(buffer, sizeof(buffer), "%016" PRIx64, value);
  return buffer;
}

}  // namespace

const char* taskStateName(TaskNode::State state) { return STATE_NAMES[static_cast<int>(state)]; }

const TaskNode::State* parseTaskState(std::string_view name) {
  for (int i = 0; i < 7; i++) {
    if (name == STATE_NAMES[i]) return &ALL_STATES[i];
  }
  return nullptr;
}

std::string taskGroup(std::string_view name) {
  if (name.empty()) return "(unnamed)";
  auto cut = name.find_first_of("/[");
  if (cut != std::string_view::npos && cut > 0) return std::string(name.substr(0, cut));
  size_t end = name.size();
  while (end > 0 && (std::isdigit(static_cast<unsigned char>(name[end - 1])) ||
                     name[end - 1] == '-' || name[end - 1] == '_' || name[end - 1] == '.' ||
                     name[end - 1] == ' ')) {
    end--;
  }
  if (end == 0) return "(numbered)";
  return std::string(name.substr(0, end));
}

std::string jsonText(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

StatusView::StatusView(SessionTable& sessions, GovernorPool& governors,
                       const SessionHistory& history, std::string version, uint64_t startedAtMs)
    : sessions(sessions), governors(governors), history(history), version(std::move(version)),
      startedAtMs(startedAtMs) {}

void StatusView::tick(uint64_t nowMs) {
  auto& stats = sessions.stats();
  samples.push_back({nowMs, stats.tasksFinished, stats.tasksFailed});
  while (samples.size() > THROUGHPUT_SAMPLES + 1) samples.pop_front();
}

double StatusView::throughput(size_t seconds) const {
  if (samples.size() < 2) return 0;
  auto& last = samples.back();
  size_t back = std::min(seconds, samples.size() - 1);
  auto& first = samples[samples.size() - 1 - back];
  if (last.atMs <= first.atMs) return 0;
  double done = double(last.finished + last.failed - first.finished - first.failed);
  return done * 1000.0 / double(last.atMs - first.atMs);
}

PageViews StatusView::sessionClosed(const Session& session) {
  PageViews views{jsonText(graph(session.id)), jsonText(timeline(session.id))};
  derived.erase(session.id);
  return views;
}

kj::Maybe<const Session&> StatusView::findOpen(uint64_t id) {
  auto& all = sessions.all();
  auto it = all.find(id);
  if (it == all.end()) return nullptr;
  return it->second;
}

std::string StatusView::governorName(GovernorId id) {
  KJ_IF_MAYBE(g, governors.find(id)) { return g->name; }
  return "governor " + std::to_string(id);
}

Json StatusView::governorsJson() {
  auto& all = governors.all();
  // Objects and bytes held per governor: a pass over every object, so it
  // is redone only when something moved (state changes, submits, closes).
  uint64_t fingerprint = all.size() * 1000003ull + sessions.all().size();
  for (auto& [id, session] : sessions.all()) fingerprint += session.changes + session.objects.size();
  if (fingerprint != heldFingerprint) {
    held.clear();
    for (auto& [sid, session] : sessions.all()) {
      for (auto& [n, object] : session.objects) {
        for (auto g : object.locations) {
          auto& h = held[g];
          h.first++;
          h.second += object.size;
        }
      }
    }
    heldFingerprint = fingerprint;
  }
  Json out = Json::array();
  for (auto& [id, g] : all) {
    auto h = held.count(id) ? held[id] : std::pair<uint64_t, uint64_t>{0, 0};
    Json functions = Json::array();
    for (auto& [name, outputs] : g.functions) functions.push_back(name);
    // Pools besides cpus: capacity and what assigned tasks hold, in items
    // (indexed) or units (sum: bytes of mem).
    Json resources = Json::object();
    for (auto& [name, pool] : g.pools) {
      resources[name] = {{"indexed", pool.indexed},
                         {"capacity", double(pool.capacity) / double(RESOURCE_UNIT)},
                         {"used", double(pool.used) / double(RESOURCE_UNIT)}};
    }
    out.push_back({{"id", id},
                   {"name", g.name},
                   {"dataAddress", g.dataAddress},
                   {"cpus", g.cpus},
                   {"cpusUsed", std::min(g.load, g.cpus)},
                   {"cpusQueued", g.load > g.cpus ? g.load - g.cpus : 0},
                   {"tasks", g.assigned.size()},
                   {"objects", h.first},
                   {"bytesHeld", h.second},
                   {"functions", std::move(functions)},
                   {"resources", std::move(resources)},
                   {"store", storeJson(g.store)}});
  }
  return out;
}

Json StatusView::sessionSummary(const Session& session) {
  Json out = {{"id", session.id},
              {"name", session.name},
              {"state", session.state == Session::State::FAILED ? "failed" : "open"},
              {"closed", false},
              {"tasks", total(session.counts)},
              {"counts", countsJson(session.counts)},
              {"changes", session.changes}};
  if (session.state == Session::State::FAILED) {
    out["failure"] = {{"message", session.failureMessage},
                      {"task", session.failedTask},
                      {"taskName", session.failedTaskName},
                      {"exitStatus", session.failedExitStatus},
                      {"stderrTail", session.failedStderrTail}};
  }
  if (!session.actors.empty()) {
    // Its actors (docs/actors.md): type, where, state, calls waiting for
    // their turn and calls finished.
    Json actors = Json::array();
    std::vector<const ActorNode*> sorted;
    for (auto& [n, actor] : session.actors) sorted.push_back(&actor);
    std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->task->id.n < b->task->id.n; });
    for (auto* actor : sorted) {
      auto& task = *actor->task;
      uint64_t queued = 0;
      for (auto& [turn, call] : actor->calls) queued += call->done() ? 0 : 1;
      std::string governor = task.governorName;
      KJ_IF_MAYBE(g, governors.find(task.governor)) { governor = g->name; }
      actors.push_back({{"id", task.id.n},
                        {"type", task.function},
                        {"state", taskStateName(task.state)},
                        {"governor", governor},
                        {"callsQueued", queued},
                        {"callsDone", actor->callsDone},
                        {"killed", actor->killed}});
    }
    out["actors"] = actors;
  }
  return out;
}

Json StatusView::keptSummary(wire::KeptSession::Reader kept) {
  uint64_t counts[7];
  for (uint i = 0; i < 7; i++) counts[i] = kept.getCounts()[i];
  Json out = {{"id", kept.getId()},
              {"name", kept.getName().cStr()},
              {"state", kept.getFailed() ? "failed" : "closed"},
              {"closed", true},
              {"closedAtMs", kept.getClosedAtMs()},
              {"tasks", total(counts)},
              {"tasksKept", kept.getTasks().size()},
              {"counts", countsJson(counts)},
              {"changes", kept.getChanges()}};
  if (kept.getFailed()) {
    auto failure = kept.getFailure();
    out["failure"] = {{"message", failure.getMessage().cStr()},
                      {"task", failure.getTask()},
                      {"taskName", failure.getTaskName().cStr()},
                      {"exitStatus", failure.getExitStatus()},
                      {"stderrTail", failure.getStderrTail().cStr()}};
  }
  return out;
}

Json StatusView::sessionsJson() {
  Json out = Json::array();
  // Newest first: open sessions, then the last closed ones kept.
  auto& all = sessions.all();
  for (auto it = all.rbegin(); it != all.rend(); ++it) out.push_back(sessionSummary(it->second));
  for (auto kept : history.newest(MAX_CLOSED)) out.push_back(keptSummary(kept));
  return out;
}

Json StatusView::overview() {
  auto& stats = sessions.stats();
  uint64_t counts[7] = {};
  for (auto& [id, session] : sessions.all()) {
    for (int i = 0; i < 7; i++) counts[i] += session.counts[i];
  }
  Json history = Json::array();
  for (size_t i = 1; i < samples.size(); i++) {
    history.push_back(samples[i].finished + samples[i].failed - samples[i - 1].finished -
                      samples[i - 1].failed);
  }
  return {{"server", {{"version", version}, {"startedAtMs", startedAtMs}}},
          {"governors", governorsJson()},
          {"sessions", sessionsJson()},
          {"tasks", countsJson(counts)},
          {"throughput",
           {{"tasksPerSecond", throughput(10)},
            {"finished", stats.tasksFinished},
            {"failed", stats.tasksFailed},
            {"retries", stats.taskRetries},
            {"history", history}}},
          {"bytes",
           {{"produced", stats.bytesProduced},
            {"fetched", stats.bytesFetched},
            {"prefetched", stats.bytesPrefetched},
            {"constants", stats.bytesConstants}}},
          {"scheduling",
           {{"passes", stats.passes},
            {"lastMs", stats.passMicrosLast / 1000.0},
            {"maxMs", stats.passMicrosMax / 1000.0},
            {"meanMs", stats.passes ? stats.passMicrosTotal / 1000.0 / stats.passes : 0.0}}}};
}

StatusView::Derived& StatusView::derive(const Session& session) {
  auto& slot = derived[session.id];
  if (!slot) slot = std::make_unique<Derived>();
  auto& d = *slot;
  if (d.taskCount != session.tasks.size() || d.byId.empty() != session.tasks.empty()) {
    buildStructure(session, d);
    d.changes = UINT64_MAX;
  }
  if (d.changes != session.changes) {
    for (auto& g : d.groups) std::fill(std::begin(g.counts), std::end(g.counts), 0);
    for (size_t i = 0; i < d.byId.size(); i++) {
      d.groups[d.groupOf[i]].counts[static_cast<int>(d.byId[i]->state)]++;
    }
    d.changes = session.changes;
    d.timelineBuilt = false;
  }
  return d;
}

void StatusView::buildStructure(const Session& session, Derived& d) {
  d.taskCount = session.tasks.size();
  d.byId.clear();
  d.byId.reserve(session.tasks.size());
  for (auto& [n, task] : session.tasks) d.byId.push_back(&task);
  std::sort(d.byId.begin(), d.byId.end(),
            [](const TaskNode* a, const TaskNode* b) { return a->id.n < b->id.n; });

  // Group names, the biggest MAX_GROUPS - 1 kept, the rest merged.
  std::vector<std::string> names(d.byId.size());
  std::unordered_map<std::string, uint64_t> sizes;
  for (size_t i = 0; i < d.byId.size(); i++) {
    names[i] = taskGroup(d.byId[i]->spec.getName().cStr());
    sizes[names[i]]++;
  }
  std::vector<std::pair<std::string, uint64_t>> order(sizes.begin(), sizes.end());
  std::sort(order.begin(), order.end(), [](auto& a, auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  bool merged = order.size() > MAX_GROUPS;
  if (merged) order.resize(MAX_GROUPS - 1);
  std::unordered_map<std::string, uint32_t> index;
  d.groups.clear();
  for (auto& [name, size] : order) {
    index[name] = d.groups.size();
    d.groups.push_back({name, 0, {}});
  }
  uint32_t other = d.groups.size();
  if (merged) d.groups.push_back({"(other groups)", 0, {}});
  d.groupOf.assign(d.byId.size(), 0);
  std::unordered_map<const TaskNode*, uint32_t> position;
  position.reserve(d.byId.size());
  for (size_t i = 0; i < d.byId.size(); i++) {
    auto it = index.find(names[i]);
    d.groupOf[i] = it == index.end() ? other : it->second;
    d.groups[d.groupOf[i]].tasks++;
    position[d.byId[i]] = i;
  }
  d.groupEdges.clear();
  for (size_t i = 0; i < d.byId.size(); i++) {
    for (auto* input : d.byId[i]->inputs) {
      if (input->producer == nullptr) continue;
      auto p = position.find(input->producer);
      if (p == position.end()) continue;
      auto from = d.groupOf[p->second], to = d.groupOf[i];
      if (from != to) d.groupEdges[{from, to}]++;
    }
  }
}

Json StatusView::taskRow(const Session& session, const TaskNode& task) {
  (void)session;
  Json row = {{"id", task.id.n},
              {"name", task.spec.getName().cStr()},
              {"type", taskTypeName(task.spec).cStr()},
              {"state", taskStateName(task.state)},
              {"attempt", task.attempt},
              {"governor", task.state == S::ASSIGNED ? governorName(task.governor) : task.governorName},
              {"startTimeUs", task.startTimeUs},
              {"durationUs", task.durationUs},
              {"exitStatus", task.exitStatus}};
  if (!task.error.empty()) row["error"] = clip(task.error, 300);
  return row;
}

Json StatusView::session(uint64_t id) {
  KJ_IF_MAYBE(s, findOpen(id)) {
    auto out = sessionSummary(*s);
    out["smallGraph"] = s->tasks.size() <= SMALL_GRAPH;
    return out;
  }
  KJ_IF_MAYBE(kept, history.find(id)) {
    auto out = keptSummary(*kept);
    out["smallGraph"] = out["tasks"].get<uint64_t>() <= SMALL_GRAPH;
    return out;
  }
  return nullptr;
}

Json StatusView::keptRow(wire::KeptTask::Reader task, bool details) {
  auto outcome = task.getOutcome();
  Json row = {{"id", outcome.getTask()},
              {"name", task.getName().cStr()},
              {"type", task.getType().cStr()},
              {"state", STATE_NAMES[outcome.getState()]},
              {"attempt", outcome.getAttempt()},
              {"governor", outcome.getGovernor().cStr()},
              {"startTimeUs", outcome.getStartTimeUs()},
              {"durationUs", outcome.getDurationUs()},
              {"exitStatus", outcome.getExitStatus()}};
  if (details) {
    row["group"] = taskGroup(task.getName().cStr());
    row["error"] = outcome.getError().cStr();
    row["stdoutTail"] = outcome.getStdoutTail().cStr();
    row["stderrTail"] = outcome.getStderrTail().cStr();
  } else if (outcome.getError().size() > 0) {
    row["error"] = clip(outcome.getError().cStr(), 300);
  }
  return row;
}

Json StatusView::sessionUpdate(uint64_t id) {
  KJ_IF_MAYBE(s, findOpen(id)) {
    Json out = {{"session", sessionSummary(*s)}, {"throughput", throughput(10)}};
    if (s->tasks.size() > SMALL_GRAPH) {
      auto& d = derive(*s);
      Json groups = Json::array();
      for (auto& g : d.groups) {
        Json row = Json::array();
        for (int i = 0; i < 7; i++) row.push_back(g.counts[i]);
        groups.push_back(std::move(row));
      }
      out["groups"] = std::move(groups);
    }
    return out;
  }
  auto summary = session(id);
  if (summary.is_null()) return nullptr;
  return {{"session", summary}, {"throughput", 0}};
}

Json StatusView::tasks(uint64_t id, const TaskQuery& query) {
  bool wanted[7] = {};
  for (auto s : query.states) wanted[static_cast<int>(s)] = true;
  bool anyState = query.states.empty();
  auto needle = lower(query.name);
  auto nameMatches = [&](std::string_view name) {
    return needle.empty() || lower(name).find(needle) != std::string::npos;
  };
  Json rows = Json::array();
  size_t matched = 0;
  auto consider = [&](auto&& makeRow) {
    if (matched >= query.offset && matched < query.offset + query.limit) rows.push_back(makeRow());
    matched++;
  };
  KJ_IF_MAYBE(s, findOpen(id)) {
    auto& d = derive(*s);
    // Failures first, then what runs, then the rest, each in id order.
    auto rank = [](S state) { return state == S::FAILED ? 0 : state == S::ASSIGNED ? 1 : 2; };
    for (int pass = 0; pass < 3; pass++) {
      for (auto* task : d.byId) {
        if (rank(task->state) != pass) continue;
        if (!anyState && !wanted[static_cast<int>(task->state)]) continue;
        if (!nameMatches(task->spec.getName().cStr())) continue;
        consider([&]() { return taskRow(*s, *task); });
      }
    }
  } else KJ_IF_MAYBE(kept, history.find(id)) {
    // Kept in the table's order already.
    for (auto task : kept->getTasks()) {
      if (!anyState && !wanted[task.getOutcome().getState()]) continue;
      if (!nameMatches(task.getName().cStr())) continue;
      consider([&]() { return keptRow(task, false); });
    }
  } else {
    return nullptr;
  }
  return {{"total", matched}, {"offset", query.offset}, {"limit", query.limit}, {"tasks", rows}};
}

Json StatusView::objectJson(const Session& session, const ObjectNode& object) {
  (void)session;
  Json locations = Json::array();
  for (auto g : object.locations) locations.push_back(governorName(g));
  Json out = {{"id", object.id.n},
              {"label", object.label},
              {"kind", kindName(object.kind).cStr()},
              {"contentType", object.contentType},
              {"keep", object.keep},
              {"constant", object.constant},
              {"state", objectStateName(object.state)},
              {"size", object.size},
              {"locations", locations},
              {"consumers", object.consumers.size()}};
  if (object.hash != 0) out["hash"] = hex(object.hash);
  if (object.producer != nullptr) {
    out["producer"] = {{"id", object.producer->id.n},
                       {"name", object.producer->spec.getName().cStr()},
                       {"state", taskStateName(object.producer->state)}};
  } else {
    out["producer"] = nullptr;
  }
  return out;
}

Json StatusView::task(uint64_t id, uint64_t n) {
  KJ_IF_MAYBE(s, findOpen(id)) {
    auto it = s->tasks.find(n);
    if (it == s->tasks.end()) return nullptr;
    auto& task = it->second;
    auto out = taskRow(*s, task);
    out["session"] = id;
    out["group"] = taskGroup(task.spec.getName().cStr());
    out["error"] = task.error;
    out["stdoutTail"] = task.stdoutTail;
    out["stderrTail"] = task.stderrTail;
    auto spec = task.spec;
    auto attributes = spec.getAttributes();
    if (attributes.size() > 0) {
      // Parsed (recursively) only when it nests shallowly: else shown as text.
      bool shallow = jsonNesting(attributes.cStr(), MAX_ATTRIBUTE_NESTING) <= MAX_ATTRIBUTE_NESTING;
      auto parsed = shallow ? Json::parse(attributes.cStr(), nullptr, false) : Json(Json::value_t::discarded);
      out["attributes"] = parsed.is_discarded() ? Json(attributes.cStr()) : parsed;
    } else {
      out["attributes"] = nullptr;
    }
    // What it asked for besides cpus, as written: "2", "0.5", "2G", "all".
    auto resources = spec.getResources();
    Json requests = Json::array();
    for (auto r : resources.getRequests()) {
      requests.push_back({{"name", r.getName().cStr()}, {"amount", r.getAll() ? "all" : formatAmount(r.getAmount())}});
    }
    out["resources"] = {{"cpus", resources.getCpus()}, {"requests", std::move(requests)}};
    auto policy = spec.getPolicy();
    out["policy"] = {{"retries", policy.getRetries()},
                     {"allowFailure", policy.getAllowFailure()},
                     {"timeLimitMs", policy.getTimeLimitMs()},
                     {"expectedMs", policy.getExpectedMs()}};
    out["config"] = configJson(spec);
    Json inputs = Json::array();
    auto specInputs = spec.getInputs();
    for (size_t i = 0; i < task.inputs.size(); i++) {
      auto object = objectJson(*s, *task.inputs[i]);
      if (i < specInputs.size()) {
        object["inputLabel"] = specInputs[i].getLabel().cStr();
        object["path"] = specInputs[i].getPath().cStr();
      }
      inputs.push_back(std::move(object));
    }
    out["inputs"] = inputs;
    Json outputs = Json::array();
    for (auto* object : task.outputs) outputs.push_back(objectJson(*s, *object));
    out["outputs"] = outputs;
    // Tasks that submit tasks (docs/nested.md): who submitted it, and the
    // first MAX_CHILDREN_SHOWN of those it submitted.
    auto brief = [](const TaskNode& other) {
      return Json{{"id", other.id.n}, {"name", other.spec.getName().cStr()}, {"state", taskStateName(other.state)}};
    };
    out["parent"] = task.parent != nullptr ? brief(*task.parent) : Json(nullptr);
    Json children = Json::array();
    for (size_t i = 0; i < task.children.size() && i < MAX_CHILDREN_SHOWN; i++) children.push_back(brief(*task.children[i]));
    out["children"] = std::move(children);
    out["childrenCount"] = task.children.size();
    out["closed"] = false;
    return out;
  }
  KJ_IF_MAYBE(kept, history.find(id)) {
    for (auto task : kept->getTasks()) {
      if (task.getOutcome().getTask() != n) continue;
      auto out = keptRow(task, true);
      out["session"] = id;
      out["closed"] = true;
      return out;
    }
  }
  return nullptr;
}

Json StatusView::graph(uint64_t id) {
  KJ_IF_MAYBE(s, findOpen(id)) {
    if (s->tasks.size() <= SMALL_GRAPH) {
      Json nodes = Json::array();
      std::set<std::pair<uint64_t, uint64_t>> edges;
      std::vector<const TaskNode*> byId;
      for (auto& [n, task] : s->tasks) byId.push_back(&task);
      std::sort(byId.begin(), byId.end(),
                [](const TaskNode* a, const TaskNode* b) { return a->id.n < b->id.n; });
      for (auto* task : byId) {
        nodes.push_back({{"id", task->id.n},
                         {"name", task->spec.getName().cStr()},
                         {"state", taskStateName(task->state)}});
        for (auto* input : task->inputs) {
          if (input->producer != nullptr) edges.insert({input->producer->id.n, task->id.n});
        }
      }
      Json edgeList = Json::array();
      for (auto& [from, to] : edges) edgeList.push_back({from, to});
      return {{"mode", "tasks"}, {"tasks", s->tasks.size()}, {"nodes", nodes}, {"edges", edgeList}};
    }
    auto& d = derive(*s);
    Json nodes = Json::array();
    for (size_t i = 0; i < d.groups.size(); i++) {
      auto& g = d.groups[i];
      nodes.push_back({{"id", i}, {"name", g.name}, {"tasks", g.tasks}, {"counts", countsJson(g.counts)}});
    }
    Json edges = Json::array();
    for (auto& [key, count] : d.groupEdges) edges.push_back({key.first, key.second, count});
    return {{"mode", "groups"}, {"tasks", s->tasks.size()}, {"nodes", nodes}, {"edges", edges}};
  }
  KJ_IF_MAYBE(kept, history.find(id)) { return keptView(kept->getGraph()); }
  return nullptr;
}

Json StatusView::timeline(uint64_t id) {
  KJ_IF_MAYBE(s, findOpen(id)) {
    auto& d = derive(*s);
    if (d.timelineBuilt) return d.timeline;
    // Lanes: governors that ran tasks of this session, plus those running
    // some now.
    std::map<std::string, std::vector<const TaskNode*>> lanes;
    std::map<std::string, uint64_t> running;
    uint64_t t0 = UINT64_MAX, t1 = 0, timed = 0;
    for (auto* task : d.byId) {
      if (task->state == S::ASSIGNED) {
        running[governorName(task->governor)]++;
        continue;
      }
      if (task->startTimeUs == 0) continue;
      lanes[task->governorName].push_back(task);
      t0 = std::min(t0, task->startTimeUs);
      t1 = std::max(t1, task->startTimeUs + task->durationUs);
      timed++;
    }
    for (auto& [name, count] : running) lanes[name];
    Json out = {{"startUs", t0 == UINT64_MAX ? 0 : t0}, {"endUs", t1}, {"timed", timed}};
    Json laneList = Json::array();
    bool bars = timed <= TIMELINE_BARS;
    out["mode"] = bars ? "tasks" : "buckets";
    double span = t1 > t0 && t0 != UINT64_MAX ? double(t1 - t0) : 1.0;
    double bucketUs = span / TIMELINE_BUCKETS;
    if (!bars) out["bucketUs"] = bucketUs;
    for (auto& [name, tasks] : lanes) {
      Json lane = {{"governor", name}, {"running", running.count(name) ? running[name] : 0}};
      if (bars) {
        Json list = Json::array();
        for (auto* t : tasks) {
          list.push_back({t->id.n, t->startTimeUs - t0, t->durationUs, static_cast<int>(t->state)});
        }
        lane["bars"] = list;
      } else {
        std::vector<double> busy(TIMELINE_BUCKETS, 0.0);
        std::vector<uint64_t> failed(TIMELINE_BUCKETS, 0);
        for (auto* t : tasks) {
          double a = double(t->startTimeUs - t0), b = a + double(t->durationUs);
          size_t first = std::min<size_t>(TIMELINE_BUCKETS - 1, size_t(a / bucketUs));
          size_t last = std::min<size_t>(TIMELINE_BUCKETS - 1, size_t(b / bucketUs));
          for (size_t k = first; k <= last; k++) {
            double lo = std::max(a, k * bucketUs), hi = std::min(b, (k + 1) * bucketUs);
            if (hi > lo) busy[k] += (hi - lo) / bucketUs;
          }
          if (t->state == S::FAILED) failed[last]++;
        }
        Json rounded = Json::array();
        for (auto v : busy) rounded.push_back(std::round(v * 100) / 100);
        lane["busy"] = rounded;
        lane["failed"] = failed;
      }
      laneList.push_back(std::move(lane));
    }
    out["lanes"] = laneList;
    d.timeline = out;
    d.timelineBuilt = true;
    return out;
  }
  KJ_IF_MAYBE(kept, history.find(id)) { return keptView(kept->getTimeline()); }
  return nullptr;
}

}  // namespace squall
