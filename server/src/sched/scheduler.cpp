#include "scheduler.h"

#include <algorithm>

namespace squall {

namespace {
// Whether `g` can run `task` now: a call needs its function there, and
// resources besides cpus must be free there (they are not queued for:
// tasks wait on the server for them, not in one governor's queue).
bool offers(const GovernorState& g, const TaskNode& task) {
  return (task.function.empty() || g.functions.count(task.function) != 0) && fitsNow(g.pools, task.resources);
}

int64_t countOf(const std::map<GovernorId, int64_t>& counts, GovernorId id) {
  auto it = counts.find(id);
  return it == counts.end() ? 0 : it->second;
}

uint32_t freeCpus(const GovernorState& g) { return g.load >= g.cpus ? 0u : g.cpus - g.load; }

// Room for `cpus` more within its cpus plus `depth` queued.
bool hasRoom(const GovernorState& g, uint32_t cpus, uint32_t depth) {
  return cpus <= g.cpus && g.load + cpus <= g.cpus + depth;
}

// The task's input bytes already on `g` (each input counts 1 more, so
// that empty inputs count too): the more, the fewer to move.
uint64_t localBytes(const TaskNode& task, GovernorId g) {
  uint64_t local = 0;
  for (auto* input : task.inputs) {
    for (auto where : input->locations) {
      if (where == g) local += input->size + 1;
    }
  }
  return local;
}
}  // namespace

void Scheduler::enqueue(const std::vector<Id>& ids, SessionTable& sessions) {
  for (auto& id : ids) {
    KJ_IF_MAYBE(task, sessions.findTask(id)) {
      if (task->actor != nullptr) {
        // A method call waits for its turn on its actor, not here (a call
        // run again after a loss takes its old turn back).
        task->actor->calls[task->turn] = task;
        actorsToPlace.push_back(task->actor->task->id);
        continue;
      }
      ready.push(id, task->bLevel);
    }
  }
}

void Scheduler::placeCalls(SessionTable& sessions, GovernorPool& governors) {
  if (actorsToPlace.empty()) return;
  auto ids = kj::mv(actorsToPlace);
  actorsToPlace.clear();
  std::sort(ids.begin(), ids.end(), [](Id a, Id b) { return a.session != b.session ? a.session < b.session : a.n < b.n; });
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (auto id : ids) {
    KJ_IF_MAYBE(session, sessions.find(id.session)) {
      auto it = session->actors.find(id.n);
      if (it == session->actors.end()) continue;
      auto& actor = it->second;
      if (actor.task->done()) {
        sessions.actorEnded(*session, actor);
        continue;
      }
      if (actor.task->state != TaskNode::State::ASSIGNED) continue;
      GovernorState* governor = nullptr;
      KJ_IF_MAYBE(g, governors.find(actor.task->governor)) { governor = g; }
      if (governor == nullptr) continue;
      for (auto call = actor.calls.begin(); call != actor.calls.end();) {
        auto* task = call->second;
        if (task->done()) {
          call = actor.calls.erase(call);
          continue;
        }
        // Not ready: the calls behind it wait for it.
        if (task->state == TaskNode::State::WAITING) break;
        if (task->state == TaskNode::State::READY) assign(*task, *governor, sessions, governors);
        ++call;
      }
    }
  }
}

std::vector<Id> Scheduler::queued() const {
  std::vector<Id> ids;
  for (auto& entry : ready.inOrder()) ids.push_back(entry.id);
  return ids;
}

void Scheduler::assign(TaskNode& task, GovernorState& governor, SessionTable& sessions, GovernorPool& governors) {
  governors.hold(governor, task.id, task.cpus, task.resources);
  sessions.assigned(task, governor.id);
  task.assignedAt = passes;
  // Its calls may follow it now.
  if (task.isActor) actorsToPlace.push_back(task.id);
}

bool Scheduler::placeGroup(StreamGroup& group, SessionTable& sessions, GovernorPool& governors) {
  for (auto* member : group.members) {
    if (member->state != TaskNode::State::READY) return false;
  }
  auto& all = governors.all();
  // One governor with room for all: the least loaded of those.
  GovernorState* single = nullptr;
  for (auto& [gid, g] : all) {
    bool offersAll = true;
    for (auto* member : group.members) offersAll = offersAll && offers(g, *member);
    if (offersAll && freeCpus(g) >= group.cpus && (single == nullptr || freeCpus(g) > freeCpus(*single))) {
      single = &g;
    }
  }
  std::vector<std::pair<TaskNode*, GovernorState*>> plan;
  if (single != nullptr) {
    for (auto* member : group.members) plan.emplace_back(member, single);
  } else {
    // Spread: biggest tasks first, each where most cpus are free.
    std::map<GovernorId, uint32_t> left;
    for (auto& [gid, g] : all) left[gid] = freeCpus(g);
    std::vector<TaskNode*> members = group.members;
    std::stable_sort(members.begin(), members.end(),
                     [](const TaskNode* a, const TaskNode* b) { return a->cpus > b->cpus; });
    for (auto* member : members) {
      GovernorState* best = nullptr;
      for (auto& [gid, g] : all) {
        if (offers(g, *member) && left[gid] >= member->cpus && (best == nullptr || left[gid] > left[best->id])) {
          best = &g;
        }
      }
      if (best == nullptr) return false;
      left[best->id] -= member->cpus;
      plan.emplace_back(member, best);
    }
  }
  for (auto& [member, governor] : plan) assign(*member, *governor, sessions, governors);
  return true;
}

GovernorState* Scheduler::choose(const TaskNode& task, GovernorPool& governors, bool shallow) {
  auto& all = governors.all();
  // An actor holding no cpus still needs one free to be placed (Ray's
  // default: docs/actors.md), so actors do not pile onto busy governors.
  uint32_t need = task.isActor ? std::max<uint32_t>(task.cpus, 1) : task.cpus;
  if (options.placement == Placement::RANDOM) {
    std::vector<GovernorState*> fit;
    for (auto& [gid, g] : all) {
      if (hasRoom(g, need, depthOf(g, shallow)) && offers(g, task)) fit.push_back(&g);
    }
    if (fit.empty()) return nullptr;
    return fit[std::uniform_int_distribution<size_t>(0, fit.size() - 1)(random)];
  }
  // Where it starts now beats where it would queue; then fewest bytes to
  // move; then least loaded.
  GovernorState* best = nullptr;
  bool bestNow = false;
  uint64_t bestLocal = 0;
  double bestLoad = 0;
  for (auto& [gid, g] : all) {
    if (!hasRoom(g, need, depthOf(g, shallow)) || !offers(g, task)) continue;
    bool now = freeCpus(g) >= need;
    uint64_t local = localBytes(task, gid);
    double load = double(g.load) / double(g.cpus);
    bool better = best == nullptr || (now && !bestNow) ||
                  (now == bestNow && (local > bestLocal || (local == bestLocal && load < bestLoad)));
    if (better) {
      best = &g;
      bestNow = now;
      bestLocal = local;
      bestLoad = load;
    }
  }
  return best;
}

std::vector<PrefetchOrder> Scheduler::prefetch(const std::vector<Id>& waiting, SessionTable& sessions,
                                               GovernorPool& governors) {
  std::vector<PrefetchOrder> orders;
  if (!options.prefetch || options.placement != Placement::BLEVEL) return orders;
  std::map<GovernorId, size_t> orderOf;
  for (auto& id : waiting) {
    KJ_IF_MAYBE(task, sessions.findTask(id)) {
      // A method call runs where its actor lives.
      if (task->state != TaskNode::State::WAITING || task->actor != nullptr) continue;
      // What could go ahead: finished inputs big enough to matter.
      std::vector<ObjectNode*> worth;
      for (size_t i = 0; i < task->inputs.size(); i++) {
        auto* input = task->inputs[i];
        if (!task->liveInputs[i] && !input->constant && input->state == ObjectNode::State::FINISHED &&
            input->size >= options.prefetchMinBytes && !input->locations.empty()) {
          worth.push_back(input);
        }
      }
      if (worth.empty()) continue;
      GovernorState* target = nullptr;
      if (task->prefetchTo != 0) {
        KJ_IF_MAYBE(g, governors.find(task->prefetchTo)) { target = g; }
      }
      if (target == nullptr) {
        // The governor holding most of its finished input bytes, among
        // those that offer what it needs; the least loaded among equals.
        double bestLoad = 0;
        uint64_t bestLocal = 0;
        for (auto& [gid, g] : governors.all()) {
          if (!offers(g, *task) || g.cpus < task->cpus) continue;
          uint64_t local = localBytes(*task, gid);
          double load = double(g.load) / double(g.cpus);
          if (target == nullptr || local > bestLocal || (local == bestLocal && load < bestLoad)) {
            target = &g;
            bestLocal = local;
            bestLoad = load;
          }
        }
        if (target == nullptr) continue;
        task->prefetchTo = target->id;
      }
      for (auto* input : worth) {
        auto has = [&](const std::vector<GovernorId>& list) {
          return std::find(list.begin(), list.end(), target->id) != list.end();
        };
        if (has(input->locations) || has(input->prefetching)) continue;
        input->prefetching.push_back(target->id);
        auto at = orderOf.find(target->id);
        if (at == orderOf.end()) {
          at = orderOf.emplace(target->id, orders.size()).first;
          orders.push_back(PrefetchOrder{target->id, {}});
        }
        orders[at->second].objects.push_back(input);
      }
    }
  }
  return orders;
}

void Scheduler::place(SessionTable& sessions, GovernorPool& governors) {
  passes++;
  std::vector<ReadyQueue::Entry> waiting;
  auto& all = governors.all();
  // No queue depth while a stream group waits for room (see the header).
  bool shallow = false;
  auto anyRoom = [&]() {
    for (auto& [gid, g] : all) {
      if (g.load < g.cpus + depthOf(g, shallow)) return true;
    }
    return false;
  };
  bool room = anyRoom();
  // Groups found not to fit in this pass: their other members' entries are
  // dropped (the first stays queued and brings the group back).
  std::vector<const StreamGroup*> tried;
  while (!ready.empty() && room) {
    auto entry = ready.pop();
    KJ_IF_MAYBE(task, sessions.findTask(entry.id)) {
      if (task->state != TaskNode::State::READY) continue;
      if (task->group != nullptr) {
        bool allReady = true;
        for (auto* member : task->group->members) {
          allReady = allReady && member->state == TaskNode::State::READY;
        }
        // The last member to become READY brings the group here again.
        if (!allReady) continue;
        if (std::find(tried.begin(), tried.end(), task->group) != tried.end()) continue;
        if (!placeGroup(*task->group, sessions, governors)) {
          tried.push_back(task->group);
          waiting.push_back(entry);
          shallow = true;
        }
        room = anyRoom();
        continue;
      }
      // An actor goes only where it starts now: it holds its cpus for its
      // whole life, so queued behind another actor it could wait for ever
      // while another governor frees up (and it is never stolen back).
      GovernorState* best = choose(*task, governors, shallow || task->isActor);
      if (best == nullptr) {
        waiting.push_back(entry);
        continue;
      }
      assign(*task, *best, sessions, governors);
      if (best->load >= best->cpus + depthOf(*best, shallow)) room = anyRoom();
    }
  }
  // Unplaced tasks keep their place in the queue.
  for (auto& entry : waiting) ready.putBack(entry);
  // Nothing waits: every depth is the base again (deep queues are for
  // floods of tiny tasks; long ones balance better on short queues).
  if (ready.empty()) {
    for (auto& [gid, g] : all) g.deepQueue = 0;
  }
}

void Scheduler::ranDry(GovernorState& governor) {
  // With nothing waiting here, it simply finished (the end of a burst).
  if (ready.empty() || options.queueDepth == 0) return;
  uint32_t now = std::max(options.queueDepth, governor.deepQueue);
  governor.deepQueue = std::min(MAX_QUEUE_DEPTH, now * 2);
}

std::vector<Retraction> Scheduler::steal(SessionTable& sessions, GovernorPool& governors) {
  std::vector<Retraction> out;
  if (options.placement != Placement::BLEVEL || !options.steal) return out;
  auto& all = governors.all();
  auto room = [&](const GovernorState& g) { return int64_t(freeCpus(g)) - countOf(incoming, g.id); };
  // Mostly every governor is busy: nothing to do, and nothing looked at.
  if (std::none_of(all.begin(), all.end(), [&](auto& entry) { return room(entry.second) > 0; })) return out;
  // What each governor holds queued beyond its cpus and is not already
  // giving back.
  std::map<GovernorId, int64_t> surplus;
  for (auto& [gid, g] : all) surplus[gid] = int64_t(g.load) - int64_t(g.cpus) - countOf(outgoing, gid);
  std::map<std::pair<GovernorId, GovernorId>, size_t> retractionOf;
  for (auto& [tid, thief] : all) {
    int64_t left = room(thief);
    while (left > 0) {
      // The governor with the most queued.
      GovernorState* victim = nullptr;
      for (auto& [vid, g] : all) {
        if (vid != tid && surplus[vid] > 0 && (victim == nullptr || surplus[vid] > surplus[victim->id])) {
          victim = &g;
        }
      }
      if (victim == nullptr) break;
      // Its tasks the thief could run, assigned latest first; not those
      // still in its outbox (never sent) nor stream group members.
      std::vector<TaskNode*> candidates;
      for (auto& [id, cpus] : victim->assigned) {
        KJ_IF_MAYBE(task, sessions.findTask(id)) {
          // An actor and its calls stay where the actor lives.
          if (task->retracting || task->group != nullptr || task->isActor || task->state != TaskNode::State::ASSIGNED ||
              task->cpus == 0 || task->cpus > left || !offers(thief, *task)) {
            continue;
          }
          candidates.push_back(task);
        }
      }
      for (auto& id : victim->toAssign) {
        KJ_IF_MAYBE(task, sessions.findTask(id)) {
          candidates.erase(std::remove(candidates.begin(), candidates.end(), task), candidates.end());
        }
      }
      if (candidates.empty()) {
        surplus[victim->id] = 0;  // nothing of it for this thief
        continue;
      }
      std::sort(candidates.begin(), candidates.end(), [](const TaskNode* a, const TaskNode* b) {
        if (a->assignedAt != b->assignedAt) return a->assignedAt > b->assignedAt;
        return a->bLevel < b->bLevel;
      });
      auto [it, fresh] = retractionOf.emplace(std::make_pair(victim->id, tid), out.size());
      if (fresh) out.push_back(Retraction{victim->id, tid, {}, 0});
      auto& retraction = out[it->second];
      for (auto* task : candidates) {
        if (left <= 0 || surplus[victim->id] <= 0) break;
        if (task->cpus > left) continue;
        task->retracting = true;
        left -= task->cpus;
        surplus[victim->id] -= task->cpus;
        retraction.tasks.push_back(task->id);
        retraction.cpus += task->cpus;
        incoming[tid] += task->cpus;
        outgoing[victim->id] += task->cpus;
      }
    }
  }
  // Surpluses of victims a thief could not use were zeroed above; the
  // empty retractions they left are dropped.
  out.erase(std::remove_if(out.begin(), out.end(), [](const Retraction& r) { return r.tasks.empty(); }),
            out.end());
  return out;
}

void Scheduler::retractionSettled(const Retraction& retraction) {
  auto settle = [&](std::map<GovernorId, int64_t>& counts, GovernorId id) {
    auto it = counts.find(id);
    if (it == counts.end()) return;
    it->second -= retraction.cpus;
    if (it->second <= 0) counts.erase(it);
  };
  settle(incoming, retraction.to);
  settle(outgoing, retraction.from);
}

}  // namespace squall
