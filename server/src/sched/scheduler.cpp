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
}  // namespace

bool Scheduler::placeGroup(StreamGroup& group, SessionTable& sessions, GovernorPool& governors) {
  for (auto* member : group.members) {
    if (member->state != TaskNode::State::READY) return false;
  }
  auto& all = governors.all();
  auto freeCpus = [](const GovernorState& g) { return g.load >= g.cpus ? 0u : g.cpus - g.load; };
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
  for (auto& [member, governor] : plan) {
    governors.hold(*governor, member->id, member->cpus, member->resources);
    sessions.assigned(*member, governor->id);
  }
  return true;
}

void Scheduler::place(std::deque<Id>& ready, SessionTable& sessions, GovernorPool& governors) {
  std::deque<Id> waiting;
  auto& all = governors.all();
  uint32_t depth = options.queueDepth;
  auto anyRoom = [&]() {
    for (auto& [gid, g] : all) {
      if (g.load < g.cpus + depth) return true;
    }
    return false;
  };
  bool room = anyRoom();
  // Groups found not to fit in this pass: their other members' entries are
  // dropped (the first stays queued and brings the group back).
  std::vector<const StreamGroup*> tried;
  while (!ready.empty() && room) {
    Id id = ready.front();
    ready.pop_front();
    KJ_IF_MAYBE(session, sessions.find(id.session)) {
      auto it = session->tasks.find(id.n);
      if (it == session->tasks.end() || it->second.state != TaskNode::State::READY) continue;
      auto& task = it->second;
      if (task.group != nullptr) {
        bool allReady = true;
        for (auto* member : task.group->members) {
          allReady = allReady && member->state == TaskNode::State::READY;
        }
        // The last member to become READY brings the group here again.
        if (!allReady) continue;
        if (std::find(tried.begin(), tried.end(), task.group) != tried.end()) continue;
        if (!placeGroup(*task.group, sessions, governors)) {
          tried.push_back(task.group);
          waiting.push_back(id);
          depth = 0;
        }
        room = anyRoom();
        continue;
      }
      GovernorState* best = nullptr;
      uint64_t bestLocal = 0;
      double bestLoad = 0;
      for (auto& [gid, g] : all) {
        if (!hasRoom(g, task.cpus, depth)) continue;
        if (!offers(g, task)) continue;
        uint64_t local = 0;
        for (auto* input : task.inputs) {
          for (auto where : input->locations) {
            if (where == gid) local += input->size + 1;
          }
        }
        double load = double(g.load) / double(g.cpus);
        if (best == nullptr || local > bestLocal || (local == bestLocal && load < bestLoad)) {
          best = &g;
          bestLocal = local;
          bestLoad = load;
        }
      }
      if (best == nullptr) {
        waiting.push_back(id);
        continue;
      }
      governors.hold(*best, id, task.cpus, task.resources);
      sessions.assigned(task, best->id);
      if (best->load >= best->cpus + depth) room = anyRoom();
    }
  }
  // Unplaced tasks go back in front, in their order.
  ready.insert(ready.begin(), waiting.begin(), waiting.end());
}

}  // namespace squall
