// Critical-path priorities. A task's b-level is the longest expected path
// from its start to the end of its graph: its own cost plus the largest
// b-level among the tasks that read its outputs. Placing ready tasks by
// b-level, highest first, starts long chains early (ESTEE's HLFET; one of
// the two most competitive schedulers it measured).
//
// A task's cost is its expected run time in milliseconds when known (the
// client's expectedDuration, or a sleep's length); an unknown one counts
// as 1 ms, a hop: a graph without hints is ranked by hops to its end, and
// a hint only ever raises a task's priority (the mean of the known ones
// was tried: one task said to be long then made every unknown one as
// long, and the hinted task lost its place).
#pragma once

#include "graph.h"

#include <vector>

namespace squall {

// Expected milliseconds of a task, 0 when unknown.
uint64_t expectedMs(wire::TaskSpec::Reader spec);

// Gives the tasks of one submit (`added`, producers before consumers)
// their cost and b-level, and raises the b-levels of earlier tasks that
// lead to them.
void updateBLevels(const std::vector<TaskNode*>& added);

}  // namespace squall
