#include "b-level.h"

#include <algorithm>

namespace squall {

uint64_t expectedMs(wire::TaskSpec::Reader spec) {
  uint64_t hint = spec.getPolicy().getExpectedMs();
  if (hint > 0) return hint;
  if (spec.getConfig().isSleep()) return std::max<uint64_t>(1, spec.getConfig().getSleep().getMilliseconds());
  return 0;
}

namespace {
// The tasks that read `task`'s outputs, after their end or live.
template <typename Visit>
void forEachSuccessor(const TaskNode& task, Visit&& visit) {
  for (auto* output : task.outputs) {
    for (auto* reader : output->consumers) visit(*reader);
    for (auto* reader : output->liveReaders) visit(*reader);
  }
}
}  // namespace

void updateBLevels(const std::vector<TaskNode*>& added) {
  for (auto* task : added) {
    uint64_t ms = expectedMs(task->spec);
    task->cost = ms > 0 ? double(ms) : 1.0;
  }
  // Consumers first: every successor of a new task is new (the graph only
  // grows downstream), so one reverse sweep settles the new tasks.
  for (auto it = added.rbegin(); it != added.rend(); ++it) {
    double longest = 0;
    forEachSuccessor(**it, [&](const TaskNode& next) { longest = std::max(longest, next.bLevel); });
    (*it)->bLevel = (*it)->cost + longest;
  }
  // Earlier tasks whose outputs the new ones read now lead to longer
  // paths: raise them, and their producers in turn, while that changes
  // anything (finished tasks no longer matter).
  std::vector<TaskNode*> raise;
  for (auto* task : added) {
    for (auto* input : task->inputs) {
      auto* producer = input->producer;
      if (producer == nullptr || producer->done()) continue;
      if (producer->bLevel < producer->cost + task->bLevel) raise.push_back(producer);
    }
  }
  while (!raise.empty()) {
    auto* task = raise.back();
    raise.pop_back();
    double longest = 0;
    forEachSuccessor(*task, [&](const TaskNode& next) { longest = std::max(longest, next.bLevel); });
    if (task->cost + longest <= task->bLevel) continue;
    task->bLevel = task->cost + longest;
    for (auto* input : task->inputs) {
      auto* producer = input->producer;
      if (producer != nullptr && !producer->done() && producer->bLevel < producer->cost + task->bLevel) {
        raise.push_back(producer);
      }
    }
  }
}

}  // namespace squall
