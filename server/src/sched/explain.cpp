#include "explain.h"

#include <squall/proto/resource-amounts.h>

#include <algorithm>

namespace squall {

namespace {

constexpr size_t MAX_LISTED = 10;

std::string label(const TaskNode& task) {
  std::string name = task.spec.getName();
  return name.empty() ? "task " + std::to_string(task.id.n) : "task " + std::to_string(task.id.n) + " '" + name + "'";
}

std::string governorName(GovernorPool& governors, GovernorId id) {
  KJ_IF_MAYBE(g, governors.find(id)) { return g->name; }
  return "governor " + std::to_string(id) + " (gone)";
}

std::string seconds(double ms) {
  char text[32];
  snprintf(text, sizeof(text), "%.3g s", ms / 1000.0);
  return text;
}

// The tasks of `session` that hold part of pool `pool` on `g`.
std::vector<std::string> holdersOf(const GovernorState& g, const std::string& pool, const Session& session) {
  std::vector<std::string> out;
  for (auto& [id, asks] : g.holding) {
    bool holds = std::any_of(asks.begin(), asks.end(), [&](const ResourceAsk& a) { return a.name == pool; });
    if (!holds) continue;
    std::string who = "task " + std::to_string(id.n);
    if (id.session != session.id) {
      who += " of session " + std::to_string(id.session);
    } else {
      auto it = session.tasks.find(id.n);
      if (it != session.tasks.end()) who = label(it->second);
    }
    out.push_back(who);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < MAX_LISTED; i++) out += (i ? ", " : "") + items[i];
  if (items.size() > MAX_LISTED) out += " and " + std::to_string(items.size() - MAX_LISTED) + " more";
  return out;
}

// Why `g` cannot take `task` now, or "" when it can (`depth`: the queue
// allowed beyond its cpus). `resource` is set to the first resource that
// is not free there.
std::string refusal(const GovernorState& g, const TaskNode& task, uint32_t depth, const Session& session,
                    std::string& resource) {
  if (!task.function.empty() && g.functions.count(task.function) == 0) {
    return "does not offer the function " + task.function;
  }
  if (task.cpus > g.cpus) {
    return "has " + std::to_string(g.cpus) + " cpus, the task needs " + std::to_string(task.cpus);
  }
  for (auto& ask : task.resources) {
    auto pool = g.pools.find(ask.name);
    if (pool == g.pools.end()) return "offers no '" + ask.name + "'";
    auto& state = pool->second;
    uint64_t want = unitsOf(ask, state);
    uint64_t free = state.capacity - std::min(state.capacity, state.used);
    if (want > state.capacity) {
      return "has " + formatAmount(state.capacity) + " " + ask.name + " in all, the task asks " + formatAmount(want);
    }
    if (!fitsNow(g.pools, {ask})) {
      if (resource.empty()) resource = ask.name;
      auto holders = holdersOf(g, ask.name, session);
      return ask.name + ": " + formatAmount(free) + " of " + formatAmount(state.capacity) +
             " free, the task asks " + (ask.all ? "all" : formatAmount(want)) +
             (holders.empty() ? "" : "; held by " + joined(holders));
    }
  }
  if (g.load + task.cpus > g.cpus + depth) {
    return "is full: " + std::to_string(g.load) + " cpus' worth of tasks assigned for " + std::to_string(g.cpus) +
           " cpus and a queue of " + std::to_string(depth);
  }
  return "";
}

void explainWaiting(const TaskNode& task, GovernorPool& governors, Explanation& out) {
  std::vector<std::string> missing;
  for (size_t i = 0; i < task.inputs.size(); i++) {
    auto* object = task.inputs[i];
    if (task.liveInputs[i] || object->state == ObjectNode::State::FINISHED) continue;
    std::string line = "object " + std::to_string(object->id.n);
    if (!object->label.empty()) line += " '" + object->label + "'";
    if (auto* producer = object->producer) {
      line += ", made by " + label(*producer) + ", which is ";
      switch (producer->state) {
        case TaskNode::State::WAITING: line += "waiting for its own inputs"; break;
        case TaskNode::State::READY: line += "ready, not placed yet"; break;
        case TaskNode::State::ASSIGNED:
          line += "assigned to " + governorName(governors, producer->governor);
          break;
        default: line += "done"; break;
      }
    }
    missing.push_back(line);
  }
  out.summary = "waiting for " + std::to_string(missing.size()) + " input" + (missing.size() == 1 ? "" : "s") +
                " not made yet";
  for (size_t i = 0; i < missing.size() && i < MAX_LISTED; i++) out.details.push_back("input " + missing[i]);
  if (missing.size() > MAX_LISTED) {
    out.details.push_back("and " + std::to_string(missing.size() - MAX_LISTED) + " more inputs");
  }
}

void explainReady(const Session& session, const TaskNode& task, const Scheduler& scheduler,
                  GovernorPool& governors, bool held, Explanation& out) {
  auto& all = governors.all();
  uint32_t depth = scheduler.settings().queueDepth;
  if (task.group != nullptr) {
    std::vector<std::string> notReady;
    for (auto* member : task.group->members) {
      if (member->state != TaskNode::State::READY) notReady.push_back(label(*member));
    }
    out.details.push_back("it reads or writes a stream live: its group of " +
                          std::to_string(task.group->members.size()) + " tasks needs " +
                          std::to_string(task.group->cpus) + " free cpus at once");
    if (!notReady.empty()) {
      out.summary = "waiting for the rest of its stream group: " + joined(notReady);
      return;
    }
    depth = 0;
  }
  if (held) {
    out.summary = "placement is held after the server restarted, until the governors it knew return";
    return;
  }
  if (all.empty()) {
    out.summary = "no governor is connected";
    return;
  }
  std::vector<std::string> resources;
  bool full = false, anyCould = false;
  for (auto& [gid, g] : all) {
    std::string resource;
    auto why = refusal(g, task, depth, session, resource);
    if (why.empty()) {
      anyCould = true;
      out.details.push_back(g.name + ": could take it now");
      continue;
    }
    if (!resource.empty()) resources.push_back(resource);
    full = full || why.rfind("is full", 0) == 0;
    out.details.push_back(g.name + ": " + why);
  }
  // Its place in the queue: those placed before it.
  size_t ahead = 0;
  bool queued = false;
  for (auto& id : scheduler.queued()) {
    if (id == task.id) {
      queued = true;
      break;
    }
    ahead++;
  }
  if (queued) {
    char level[32];
    snprintf(level, sizeof(level), "%.0f", task.bLevel);
    out.details.push_back(std::to_string(ahead) + " tasks are ahead of it in the queue (its b-level is " + level +
                          ": the longest expected path to the end of its graph in ms, 1 a task without a hint)");
  }
  if (anyCould) {
    out.summary = "a governor has room: it is placed in the next scheduling pass";
  } else if (!resources.empty()) {
    std::sort(resources.begin(), resources.end());
    resources.erase(std::unique(resources.begin(), resources.end()), resources.end());
    out.summary = "waiting for resources to be free: " + joined(resources);
  } else if (full) {
    out.summary = "every governor that could run it is full; " + std::to_string(ahead) +
                  " tasks are ahead of it in the queue";
  } else {
    out.summary = "no connected governor can run it (see each governor below)";
  }
}

}  // namespace

namespace {

// A method call waiting for its turn on its actor (docs/actors.md), or
// for the actor to be placed.
bool explainCall(const TaskNode& task, GovernorPool& governors, Explanation& out) {
  if (task.actor == nullptr || (task.state != TaskNode::State::READY && task.state != TaskNode::State::WAITING)) {
    return false;
  }
  auto& actor = *task.actor;
  auto actorLabel = label(*actor.task);
  if (task.state == TaskNode::State::WAITING) return false;
  if (actor.task->state != TaskNode::State::ASSIGNED) {
    out.summary = "waits for its actor, " + actorLabel + ", to be placed";
    out.details.push_back("a method call runs where its actor lives; `squall explain` of the actor says why it "
                          "waits");
    return true;
  }
  size_t before = 0;
  const TaskNode* holding = nullptr;
  for (auto& [turn, call] : actor.calls) {
    if (turn >= task.turn) break;
    if (call->done()) continue;
    before++;
    if (holding == nullptr && call->state == TaskNode::State::WAITING) holding = call;
  }
  out.summary = "waits for its turn on its actor, " + actorLabel + " on " +
                governorName(governors, actor.task->governor) + ": " + std::to_string(before) +
                " call(s) made before it have not finished";
  if (holding != nullptr) {
    out.details.push_back(label(*holding) + ", made before it, waits for its inputs; the calls after it wait too");
  }
  return true;
}

}  // namespace

Explanation explainTask(const Session& session, const TaskNode& task, const Scheduler& scheduler,
                        GovernorPool& governors, bool held) {
  Explanation out;
  if (explainCall(task, governors, out)) return out;
  switch (task.state) {
    case TaskNode::State::WAITING: explainWaiting(task, governors, out); break;
    case TaskNode::State::READY: explainReady(session, task, scheduler, governors, held, out); break;
    case TaskNode::State::ASSIGNED: {
      auto where = governorName(governors, task.governor);
      out.summary = "assigned to " + where;
      KJ_IF_MAYBE(g, governors.find(task.governor)) {
        if (g->load <= g->cpus) {
          out.details.push_back(where + " has cpus for all it holds: the task runs there");
        } else {
          out.details.push_back(where + " holds " + std::to_string(g->load) + " cpus' worth of tasks for " +
                                std::to_string(g->cpus) + " cpus: the task runs, or waits in its queue");
        }
      }
      if (task.retracting) out.details.push_back("being taken back for a governor with free cpus (work stealing)");
      break;
    }
    case TaskNode::State::FINISHED:
      out.summary = "finished on " + task.governorName + " in " + seconds(double(task.durationUs) / 1000.0);
      break;
    case TaskNode::State::FAILED:
      out.summary = "failed" + (task.governorName.empty() ? "" : " on " + task.governorName) + ": " + task.error;
      break;
    case TaskNode::State::CANCELLED: out.summary = "cancelled"; break;
    case TaskNode::State::SKIPPED:
      out.summary = "skipped: an input's producer failed (allowed to), so it could never run";
      break;
  }
  if (task.attempt > 1) out.details.push_back("attempt " + std::to_string(task.attempt));
  return out;
}

}  // namespace squall
