// `squall explain`: why a task is where it is. For a task not running yet,
// what it waits for: inputs (and the tasks making them), a governor with
// its function or resources (and which tasks hold those), room in the
// governors' queues (and how many tasks are ahead of it), its stream group;
// for one that ended, how. Read-only; loop thread only.
#pragma once

#include "governor-pool.h"
#include "scheduler.h"

#include <string>
#include <vector>

namespace squall {

struct Explanation {
  // One line: the main reason.
  std::string summary;
  // The facts behind it, one per line (each governor's answer, the inputs
  // not made yet, ...).
  std::vector<std::string> details;
};

// `held`: placement waits for governors to return after a restart.
Explanation explainTask(const Session& session, const TaskNode& task, const Scheduler& scheduler,
                        GovernorPool& governors, bool held);

}  // namespace squall
