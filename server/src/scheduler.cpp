#include "scheduler.h"

namespace squall {

void Scheduler::place(std::deque<Id>& ready, SessionTable& sessions, GovernorPool& governors) {
  std::deque<Id> waiting;
  auto& all = governors.all();
  auto anyRoom = [&]() {
    for (auto& [gid, g] : all) {
      if (g.load < g.cpus + options.queueDepth) return true;
    }
    return false;
  };
  bool room = anyRoom();
  while (!ready.empty() && room) {
    Id id = ready.front();
    ready.pop_front();
    KJ_IF_MAYBE(session, sessions.find(id.session)) {
      auto it = session->tasks.find(id.n);
      if (it == session->tasks.end() || it->second.state != TaskNode::State::READY) continue;
      auto& task = it->second;
      GovernorState* best = nullptr;
      uint64_t bestLocal = 0;
      double bestLoad = 0;
      for (auto& [gid, g] : all) {
        if (!hasRoom(g, task.cpus)) continue;
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
      governors.hold(*best, id, task.cpus);
      sessions.assigned(task, best->id);
      if (best->load >= best->cpus + options.queueDepth) room = anyRoom();
    }
  }
  // Unplaced tasks go back in front, in their order.
  ready.insert(ready.begin(), waiting.begin(), waiting.end());
}

}  // namespace squall
