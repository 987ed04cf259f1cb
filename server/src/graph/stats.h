// Counters of what the server has done since it started, for the status
// page and /metrics. Bumped by SessionTable and the Dispatcher where the
// events happen; read by the HTTP status service. Loop thread only.
#pragma once

#include <cstdint>

namespace squall {

struct ServerStats {
  // Tasks that finished ok / failed for good (after their retries).
  uint64_t tasksFinished = 0;
  uint64_t tasksFailed = 0;
  // Failed attempts that were retried.
  uint64_t taskRetries = 0;
  // Queued tasks governors gave back for idle ones (work stealing).
  uint64_t tasksStolen = 0;
  // Method calls on actors that finished ok (docs/actors.md).
  uint64_t actorCallsFinished = 0;
  // Of all method calls, those their clients sent to the actor's governor
  // directly (recorded from its report or the client's recordDirect).
  uint64_t actorCallsDirect = 0;
  // Sizes of the objects tasks made.
  uint64_t bytesProduced = 0;
  // Input bytes a governor fetched from another governor to run a task
  // (seen when the task finishes on a governor that did not hold them).
  uint64_t bytesFetched = 0;
  // Input bytes sent ahead to where a waiting task will probably run
  // (Scheduler::prefetch), as the governors confirmed them.
  uint64_t bytesPrefetched = 0;
  // Constant bytes the server sent to governors with assignments.
  uint64_t bytesConstants = 0;

  // Scheduling passes and their wall time.
  static constexpr int PASS_BUCKETS = 8;
  // Upper bounds of the pass-time histogram buckets, microseconds.
  static constexpr uint64_t PASS_BOUNDS_US[PASS_BUCKETS] = {100,   500,    1000,   5000,
                                                            10000, 50000, 100000, 1000000};
  uint64_t passes = 0;
  uint64_t passMicrosTotal = 0;
  uint64_t passMicrosLast = 0;
  uint64_t passMicrosMax = 0;
  // Passes with time <= PASS_BOUNDS_US[i] and > the bound before (the last
  // slot past the end counts the slower ones).
  uint64_t passBuckets[PASS_BUCKETS + 1] = {};

  void recordPass(uint64_t micros) {
    passes++;
    passMicrosTotal += micros;
    passMicrosLast = micros;
    if (micros > passMicrosMax) passMicrosMax = micros;
    int i = 0;
    while (i < PASS_BUCKETS && micros > PASS_BOUNDS_US[i]) i++;
    passBuckets[i]++;
  }
};

}  // namespace squall
