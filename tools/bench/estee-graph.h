// A task graph in ESTEE's serialized task-list form (It4innovations/estee,
// estee/serialization/dask_json.py; docs/benchmarks.md, "Scheduler (ESTEE
// families)"): a JSON list whose item i is task i,
//   {"d": seconds, "e_d": seconds or null, "cpus": n,
//    "outputs": [{"s": MiB, "e_s": MiB or null}, ...],
//    "inputs": [[task, output index], ...]}.
// squall-replay reads it; so do tools/bench/estee/*.py. No threads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace squall::bench {

struct EsteeGraph {
  struct Output {
    double size;  // MiB
    std::optional<double> expectedSize;
  };
  struct Input {
    size_t task;
    size_t output;
  };
  struct Task {
    double duration;  // seconds
    std::optional<double> expectedDuration;
    uint32_t cpus;
    std::vector<Output> outputs;
    std::vector<Input> inputs;
  };

  std::vector<Task> tasks;
  // Every task once, after the producers of its inputs (the list itself
  // need not be in that order: fern's chain reads tasks made after it).
  std::vector<size_t> order;

  // Throws std::runtime_error naming `origin` and the problem (bad JSON, a
  // missing field, an input that does not exist, a cycle).
  static EsteeGraph parse(std::string_view json, const std::string& origin);
  static EsteeGraph load(const std::string& path);

  // The longest chain of durations, in seconds (transfers not counted).
  double criticalPath() const;
  // Sum of duration x cpus, in cpu-seconds.
  double work() const;
  size_t maxOutputs() const;
};

// The makespan no schedule can beat on `cpus` cpus, after scaling the
// durations by `timeScale`: max(critical path, work / cpus).
struct LowerBound {
  double criticalPath;
  double workPerCpu;
  double bound;
};
LowerBound lowerBound(const EsteeGraph& graph, uint32_t cpus, double timeScale);

}  // namespace squall::bench
