// squall-replay: replays task graphs in ESTEE's task-list form (estee-graph.h)
// on squall and reports each one's makespan against its lower bound
// (docs/benchmarks.md, "Scheduler (ESTEE families)"). Every task becomes a
// call of bench/estee-N (bench-executor.cpp) that reads its inputs, sleeps
// its duration x --time-scale and writes its outputs of size x --size-scale.
//
//   squall-replay graphs/*.json                  # a local cluster, 4 x 4 cpus
//   squall-replay --server HOST:PORT graphs/*.json
//
// Prints `<prefix>_estee_<family>_makespan_s X` and `..._over_bound X` (the
// peers' result lines, the median of --reps runs) on stdout, details as
// `# ...` lines on stderr. One thread; the client's event loop.
#include "estee-graph.h"
#include "estee-task.h"

#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Options {
  double timeScale = 0.01;
  double sizeScale = 0.002;
  std::string prefix = "squall";
  bool expectedDurations = true;
  bool check = false;
  // Where --trace writes each run's tasks (empty: nowhere); implies check.
  std::string traceDir;
};

uint64_t bytesOf(double mib, double sizeScale) { return uint64_t(std::llround(mib * 1048576.0 * sizeScale)); }

// "graphs/merge_neighbours.json" -> "merge_neighbours"
std::string familyOf(const std::string& path) { return fs::path(path).stem().string(); }

// What one run of a graph did.
struct Run {
  double makespan = 0;
  // From the tasks' infos (--check): bytes fetched from another governor
  // (each object once per governor that read it), and tasks per governor.
  double movedMiB = 0;
  std::map<std::string, size_t> tasksPerGovernor;
  std::vector<std::string> problems;
  // With --trace: "task,governor,start_s,end_s" lines, times from submit.
  std::string trace;
};

Run replay(squall::Client& client, const squall::bench::EsteeGraph& graph, const std::string& family,
           const Options& options) {
  auto session = client.newSession("estee-" + family);
  // outputs[i][j]: output j of graph task i, once made.
  std::vector<std::vector<squall::DataObject>> outputs(graph.tasks.size());
  std::vector<uint64_t> ids(graph.tasks.size());
  for (auto i : graph.order) {
    const auto& t = graph.tasks[i];
    squall::bench::EsteeTask spec;
    spec.duration = std::chrono::microseconds(std::llround(t.duration * options.timeScale * 1e6));
    std::vector<squall::DataObject> inputs;
    for (auto& input : t.inputs) {
      inputs.push_back(outputs[input.task].at(input.output));
      spec.inputSizes.push_back(bytesOf(graph.tasks[input.task].outputs[input.output].size, options.sizeScale));
    }
    for (auto& output : t.outputs) spec.outputSizes.push_back(bytesOf(output.size, options.sizeScale));
    auto task = session.call("bench/" + squall::bench::esteeFunction(t.outputs.size()), inputs, spec.config(),
                             std::vector<squall::ObjectKind>(t.outputs.size(), squall::ObjectKind::BLOB));
    task.cpus(t.cpus).name("t" + std::to_string(i));
    if (options.expectedDurations && t.expectedDuration) {
      task.expectedDuration(std::chrono::milliseconds(std::llround(*t.expectedDuration * options.timeScale * 1e3)));
    }
    for (size_t j = 0; j < t.outputs.size(); j++) outputs[i].push_back(task.output(j));
    ids[i] = task.id();
  }
  Run run;
  auto start = Clock::now();
  double submitted = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  session.submit();
  session.waitAll();
  run.makespan = std::chrono::duration<double>(Clock::now() - start).count();

  if (options.check) {
    // Where every task ran and what it made, from the server.
    std::map<uint64_t, squall::TaskInfo> infos;
    for (size_t at = 0; at < ids.size(); at += 500) {
      std::vector<uint64_t> some(ids.begin() + at, ids.begin() + std::min(ids.size(), at + 500));
      for (auto& info : session.tasks(some, {}, uint32_t(some.size()))) infos.emplace(info.id, std::move(info));
    }
    std::map<uint64_t, std::string> madeOn;
    std::map<uint64_t, uint64_t> sizeOf;
    std::set<std::pair<uint64_t, std::string>> fetched;
    for (auto& [id, info] : infos) {
      for (auto& o : info.outputs) {
        madeOn[o.id] = info.governor;
        sizeOf[o.id] = o.size;
      }
    }
    for (size_t i = 0; i < graph.tasks.size(); i++) {
      auto it = infos.find(ids[i]);
      if (it == infos.end()) {
        run.problems.push_back("task " + std::to_string(i) + ": the server does not list it");
        continue;
      }
      const auto& info = it->second;
      if (info.state != "finished") {
        run.problems.push_back("task " + std::to_string(i) + " is " + info.state + ": " + info.error);
      }
      run.tasksPerGovernor[info.governor]++;
      if (!options.traceDir.empty()) {
        char line[256];
        double begin = info.startTimeUs / 1e6 - submitted;
        snprintf(line, sizeof line, "%zu,%s,%.6f,%.6f\n", i, info.governor.c_str(), begin,
                 begin + info.durationUs / 1e6);
        run.trace += line;
      }
      const auto& t = graph.tasks[i];
      if (info.outputs.size() != t.outputs.size()) {
        run.problems.push_back("task " + std::to_string(i) + " made " + std::to_string(info.outputs.size()) +
                               " outputs, not " + std::to_string(t.outputs.size()));
        continue;
      }
      for (size_t j = 0; j < t.outputs.size(); j++) {
        auto want = bytesOf(t.outputs[j].size, options.sizeScale);
        if (info.outputs[j].size != want) {
          run.problems.push_back("task " + std::to_string(i) + "'s output " + std::to_string(j) + " has " +
                                 std::to_string(info.outputs[j].size) + " bytes, not " + std::to_string(want));
        }
      }
      for (auto object : info.inputs) {
        // Counted once per governor that fetched it (it keeps the copy).
        if (madeOn.count(object) && madeOn[object] != info.governor && fetched.emplace(object, info.governor).second) {
          run.movedMiB += sizeOf[object] / 1048576.0;
        }
      }
    }
  }
  session.close();
  return run;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Replays ESTEE task graphs (JSON task lists) on squall: makespan against the lower bound "
               "(docs/benchmarks.md, \"Scheduler (ESTEE families)\")"};
  std::vector<std::string> graphs;
  std::string server;
  std::string token;
  int governors = 4;
  uint32_t cpus = 4;
  int reps = 1;
  std::vector<std::string> serverArgs;
  std::vector<std::string> governorArgs;
  Options options;
  bool noExpected = false;
  app.add_option("graphs", graphs, "graph files (ESTEE's task-list JSON); the family is the file's name")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--server", server,
                 "a running server whose governors keep the bench executor warm "
                 "(--executor bench=squall-bench-executor); default: start a local cluster");
  app.add_option("--token", token, "the server's shared secret (default $SQUALL_TOKEN)");
  app.add_option("--governors", governors, "governors of the local cluster")->check(CLI::Range(1, 64));
  app.add_option("--cpus", cpus, "cpus of each governor of the local cluster")->check(CLI::Range(1u, 256u));
  // One word each, so that the graphs after them stay graphs.
  app.add_option("--server-arg", serverArgs, "a word of the local cluster's server's flags (repeatable), "
                                             "e.g. --server-arg=--scheduler --server-arg=random")
      ->allow_extra_args(false);
  app.add_option("--governor-arg", governorArgs, "a word of the local cluster's governors' flags (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--time-scale", options.timeScale, "durations x this (ESTEE's are seconds)")
      ->check(CLI::PositiveNumber);
  app.add_option("--size-scale", options.sizeScale, "sizes (MiB) x this")->check(CLI::NonNegativeNumber);
  app.add_option("--prefix", options.prefix, "metric names start <prefix>_estee_");
  app.add_option("--reps", reps, "runs of each graph; the median is printed")->check(CLI::Range(1, 100));
  app.add_flag("--check", options.check,
               "check that every task finished and made outputs of the right sizes (exit 1 if not); "
               "also report bytes moved between governors");
  app.add_option("--trace", options.traceDir,
                 "write DIR/<family>-<run>.csv: per task (its index in the graph) the governor, start and end "
                 "in seconds from submit (implies --check)");
  app.add_flag("--no-expected-durations", noExpected, "do not tell the scheduler the tasks' expected durations");
  CLI11_PARSE(app, argc, argv);
  options.expectedDurations = !noExpected;
  if (!options.traceDir.empty()) {
    options.check = true;
    fs::create_directories(options.traceDir);
  }

  try {
    std::vector<squall::bench::EsteeGraph> loaded;
    size_t mostOutputs = 0;
    for (auto& path : graphs) {
      loaded.push_back(squall::bench::EsteeGraph::load(path));
      mostOutputs = std::max(mostOutputs, loaded.back().maxOutputs());
    }

    std::unique_ptr<squall::LocalCluster> cluster;
    if (server.empty()) {
      // The executor registers a function for each count of outputs up to
      // this (bench-executor.cpp); its governors inherit our environment.
      setenv("SQUALL_BENCH_ESTEE_MAX_OUTPUTS", std::to_string(mostOutputs).c_str(), 1);
      squall::ClusterOptions clusterOptions;
      clusterOptions.governors = governors;
      clusterOptions.cpus = cpus;
      clusterOptions.serverArgs = serverArgs;
      clusterOptions.governorArgs = governorArgs;
      clusterOptions.executors.push_back(
          "bench=" + (fs::canonical("/proc/self/exe").parent_path() / "squall-bench-executor").string());
      cluster = std::make_unique<squall::LocalCluster>(clusterOptions);
      cluster->start();
      server = cluster->serverAddress();
      fprintf(stderr, "# local cluster: %d governors x %u cpus, server %s, status page http://%s/\n", governors,
              cpus, server.c_str(), cluster->httpAddress().c_str());
    }
    squall::Client client(server, token);

    // The lower bound's cpus, and the functions the graphs need.
    uint32_t totalCpus = 0;
    std::set<std::string> offered;
    for (auto& g : client.governors()) {
      totalCpus += g.cpus;
      offered.insert(g.functions.begin(), g.functions.end());
    }
    for (size_t n = 0; n <= mostOutputs; n++) {
      auto function = "bench/" + squall::bench::esteeFunction(n);
      if (!offered.count(function)) {
        throw std::runtime_error("no governor offers " + function + ": give the governors --executor bench=" +
                                 "squall-bench-executor with SQUALL_BENCH_ESTEE_MAX_OUTPUTS=" +
                                 std::to_string(mostOutputs) + " in their environment");
      }
    }
    fprintf(stderr, "# %u cpus, time scale %g, size scale %g\n", totalCpus, options.timeScale, options.sizeScale);

    bool failed = false;
    for (size_t g = 0; g < graphs.size(); g++) {
      auto family = familyOf(graphs[g]);
      auto bound = squall::bench::lowerBound(loaded[g], totalCpus, options.timeScale);
      std::vector<double> makespans;
      std::string details;
      for (int r = 0; r < reps; r++) {
        auto run = replay(client, loaded[g], family, options);
        makespans.push_back(run.makespan);
        char line[160];
        snprintf(line, sizeof line, " run%d=%.3fs", r + 1, run.makespan);
        details += line;
        if (options.check) {
          snprintf(line, sizeof line, " moved_MiB=%.1f tasks_per_governor=", run.movedMiB);
          details += line;
          std::string sep;
          for (auto& [name, count] : run.tasksPerGovernor) {
            details += sep + std::to_string(count);
            sep = ",";
          }
        }
        if (!options.traceDir.empty()) {
          auto path = fs::path(options.traceDir) / (family + "-" + std::to_string(r + 1) + ".csv");
          FILE* file = fopen(path.c_str(), "w");
          if (file == nullptr) throw std::runtime_error("cannot write " + path.string());
          fprintf(file, "task,governor,start_s,end_s\n%s", run.trace.c_str());
          fclose(file);
        }
        for (auto& problem : run.problems) {
          fprintf(stderr, "# %s: %s\n", family.c_str(), problem.c_str());
          failed = true;
        }
      }
      double makespan = median(makespans);
      fprintf(stderr, "# %s tasks=%zu bound_s=%.3f (critical path %.3f, work/cpus %.3f)%s\n", family.c_str(),
              loaded[g].tasks.size(), bound.bound, bound.criticalPath, bound.workPerCpu, details.c_str());
      printf("%s_estee_%s_makespan_s %.3f\n", options.prefix.c_str(), family.c_str(), makespan);
      printf("%s_estee_%s_over_bound %.3f\n", options.prefix.c_str(), family.c_str(),
             bound.bound > 0 ? makespan / bound.bound : 0.0);
      fflush(stdout);
    }
    if (cluster) {
      auto problems = cluster->stop();
      if (!problems.empty()) {
        fprintf(stderr, "squall-replay: %s", problems.c_str());
        failed = true;
      }
    }
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    fprintf(stderr, "squall-replay: %s\n", e.what());
    return 1;
  }
}
