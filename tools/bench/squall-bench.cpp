// squall-bench: squall's throughput and latency on standard shapes, against a
// local cluster it starts itself. Prints `<metric> <value>` lines (the peer
// scripts' format) on stdout, details on stderr.
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <squall/proto/rpc.h>
#include <kj/async-io.h>
#include <squall/wire/executor.capnp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// N independent trivial tasks (concat of nothing) in one submit.
double trivialTasksPerSecond(squall::Client& client, int n) {
  auto session = client.newSession("bench-trivial");
  auto start = Clock::now();
  for (int i = 0; i < n; i++) session.concat({});
  session.submit();
  session.waitAll();
  return n / seconds(start);
}

// What building one trivial task costs the client: N concat tasks made in
// a session, not submitted; nanoseconds a task (the Python benchmark sets
// its own against this, tools/bench/python/bench.py).
double buildNanosPerTask(squall::Client& client, int n) {
  auto session = client.newSession("bench-build");
  auto start = Clock::now();
  for (int i = 0; i < n; i++) session.concat({});
  return seconds(start) * 1e9 / n;
}

// Rain's FFT-like graph: `layers` layers of 2^layers concat tasks; task j of
// layer i+1 reads tasks j and j^(2^i) of layer i.
double fftTasksPerSecond(squall::Client& client, int layers) {
  auto session = client.newSession("bench-fft");
  size_t width = size_t(1) << layers;
  auto start = Clock::now();
  std::vector<squall::DataObject> current;
  for (size_t j = 0; j < width; j++) current.push_back(session.blob("x"));
  for (int i = 0; i < layers; i++) {
    std::vector<squall::DataObject> next;
    for (size_t j = 0; j < width; j++) {
      next.push_back(session.concat({current[j], current[j ^ (size_t(1) << i)]}).output());
    }
    current = std::move(next);
  }
  session.submit();
  session.waitAll();
  return double(width * layers) / seconds(start);
}

// Median time of submit + wait of one trivial task.
double roundTripMicros(squall::Client& client, int n) {
  auto session = client.newSession("bench-latency");
  std::vector<double> samples;
  for (int i = 0; i < n; i++) {
    auto start = Clock::now();
    auto t = session.concat({});
    session.submit();
    t.wait();
    samples.push_back(seconds(start) * 1e6);
  }
  return median(samples);
}

// N calls of a function that does nothing (bench/noop, kept warm by the
// governors: tools/bench/bench-executor.cpp) in one submit.
double functionTasksPerSecond(squall::Client& client, int n) {
  auto session = client.newSession("bench-functions");
  auto start = Clock::now();
  for (int i = 0; i < n; i++) session.call("bench/noop");
  session.submit();
  session.waitAll();
  return n / seconds(start);
}

// Actor calls (docs/actors.md), the shapes of ../shared/peers/dask_actors.py
// and Ray's published figures: `n` calls of increment on one actor, each
// submitted and waited for before the next (sync: the round trip; with
// `combined`, each in one call to the server, Session::submitAndWait,
// instead of submit() and wait()); `n`
// calls on one actor submitted at once (async: pipelined through the
// server and governor); `n` calls spread over 2 actors on 2 governors, at
// once. The actors are made, and warm, before the clock starts.
double actorCallsPerSecond(squall::Client& client, int n, int actors, bool sync, bool combined = false) {
  auto session = client.newSession("bench-actors");
  std::vector<squall::Actor> counters;
  for (int a = 0; a < actors; a++) {
    counters.push_back(session.actor("bench/Counter"));
    counters.back().call("increment");
  }
  session.submit();
  session.waitAll();
  auto start = Clock::now();
  if (sync) {
    for (int i = 0; i < n; i++) {
      if (combined) {
        session.submitAndWait({counters[0].call("increment")});
      } else {
        auto call = counters[0].call("increment");
        session.submit();
        call.wait();
      }
    }
  } else {
    for (int i = 0; i < n; i++) counters[i % actors].call("increment");
    session.submit();
    session.waitAll();
  }
  double rate = n / seconds(start);
  session.close();
  return rate;
}

// The bench executor, which lives beside this program.
std::string benchExecutor() {
  return (std::filesystem::canonical("/proc/self/exe").parent_path() / "squall-bench-executor").string();
}

// The floor under a call task: N calls of bench/noop made one after another
// straight to an executor process over its socket, as a governor makes
// them, with no server, governor or task around them. What a call task
// costs beyond this is squall's.
double executorRoundTripsPerSecond(const std::string& executor, int n) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) throw std::runtime_error("socketpair failed");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 0);
    execl(executor.c_str(), executor.c_str(), "--squall-executor-fd", "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  double perSecond = 0;
  // A thread of its own: this one has the client's event loop.
  std::thread([&]() {
    auto io = kj::setupAsyncIo();
    squall::RpcClient rpc(io.lowLevelProvider->wrapUnixSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP),
                          1);
    auto cap = rpc.bootstrap<squall::wire::Executor>();
    auto call = [&]() {
      auto request = cap.callRequest();
      request.setFunction("noop");
      request.initOutputKinds(1).set(0, squall::wire::ObjectKind::BLOB);
      request.setOutputDir("/nonexistent");
      request.send().wait(io.waitScope);
    };
    call();  // the process is up
    auto start = Clock::now();
    for (int i = 0; i < n; i++) call();
    perSecond = n / seconds(start);
  }).join();
  // The socket closed: the executor's serve() returns.
  waitpid(pid, nullptr, 0);
  return perSecond;
}

// N `true` programs through execute.
double programsPerSecond(squall::Client& client, int n) {
  auto session = client.newSession("bench-programs");
  auto start = Clock::now();
  for (int i = 0; i < n; i++) session.execute(squall::Program({"true"}));
  session.submit();
  session.waitAll();
  return n / seconds(start);
}

// N `true` programs that each get the same two inputs placed in their
// sandbox: a 1 MiB blob (a file in the governor's store) at `a` and a dir of
// 16 small files at `d`. Against programsPerSecond, what placing inputs
// costs per task (docs/guide.md, "Inputs are read-only").
double programsWithInputsPerSecond(squall::Client& client, int n) {
  auto session = client.newSession("bench-programs-inputs");
  char pattern[] = "/tmp/squall-bench-dir-XXXXXX";
  if (mkdtemp(pattern) == nullptr) throw std::runtime_error("cannot make a temp dir");
  std::string dir = pattern;
  for (int i = 0; i < 16; i++) {
    auto path = dir + "/f" + std::to_string(i);
    FILE* file = fopen(path.c_str(), "w");
    if (file == nullptr) throw std::runtime_error("cannot write " + path);
    fprintf(file, "file %d\n", i);
    fclose(file);
  }
  auto tree = session.directory(dir);
  std::filesystem::remove_all(dir);
  auto big = session.blob(std::string(1 << 20, 'x'));
  // Kept, so that they outlive this first submit.
  tree.keep();
  big.keep();
  session.submit();
  session.wait({big, tree});
  auto start = Clock::now();
  for (int i = 0; i < n; i++) session.execute(squall::Program({"true"}).input(big, "a").input(tree, "d"));
  session.submit();
  session.waitAll();
  return n / seconds(start);
}

double wallNowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string producerCommand(int mib) {
  return "dd if=/dev/zero bs=1M count=" + std::to_string(mib) + " status=none";
}
const char* CONSUMER_COMMAND = "dd of=/dev/null bs=1M status=none";

// MB/s (1e6 bytes) of `mib` MiB through producer | consumer as a plain pipe.
double localPipeMBps(int mib) {
  auto line = producerCommand(mib) + " | " + CONSUMER_COMMAND;
  auto start = Clock::now();
  if (std::system(line.c_str()) != 0) throw std::runtime_error("'" + line + "' failed");
  return mib * 1048576.0 / 1e6 / seconds(start);
}

// The same through squall: the producer's stdout a stream, the consumer
// reading it on stdin; submit to finish.
double streamMBps(squall::Client& client, int mib) {
  auto session = client.newSession("bench-stream");
  auto start = Clock::now();
  auto producer = session.execute(
      squall::Program::shell(producerCommand(mib)).stdoutOutput(squall::ObjectKind::STREAM).cpus(1));
  // A cpu each (a pipe would share one): on two 1-cpu governors they split.
  session.execute(squall::Program::shell(CONSUMER_COMMAND).stdinFrom(producer.output()).cpus(1));
  session.submit();
  session.waitAll();
  return mib * 1048576.0 / 1e6 / seconds(start);
}

// Milliseconds from submit until the reader has the producer's first byte
// (the reader stamps the wall clock as it gets it).
double streamFirstByteMs(squall::Client& client) {
  auto session = client.newSession("bench-first-byte");
  double start = wallNowSeconds();
  auto producer = session.execute(
      squall::Program::shell("printf x; exec sleep 0").stdoutOutput(squall::ObjectKind::STREAM));
  auto reader = session.execute(squall::Program::shell("head -c 1 > /dev/null && date +%s.%N")
                                    .stdinFrom(producer.output())
                                    .stdoutOutput());
  reader.output().keep();
  session.submit();
  return (std::stod(reader.output().fetch()) - start) * 1000;
}

// The same for a local `printf x | ...` pipe started with system().
double localFirstByteMs() {
  double start = wallNowSeconds();
  FILE* pipe = popen("printf x | (head -c 1 > /dev/null && date +%s.%N)", "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed");
  char line[64] = {};
  if (fgets(line, sizeof(line), pipe) == nullptr) line[0] = 0;
  pclose(pipe);
  return (std::stod(line) - start) * 1000;
}

// A cluster of its own for one benchmark.
std::unique_ptr<squall::LocalCluster> startCluster(int governors, int cpus,
                                                   std::vector<std::string> serverArgs = {}) {
  squall::ClusterOptions options;
  options.governors = governors;
  options.cpus = cpus;
  options.serverArgs = std::move(serverArgs);
  auto cluster = std::make_unique<squall::LocalCluster>(options);
  cluster->start();
  return cluster;
}

// Milliseconds from starting the server on a session log that holds one
// open session of `n` finished trivial tasks (each with its output) until it
// listens again: replaying the log. The server is killed (SIGKILL) first.
double recoveryMs(int n) {
  auto cluster = startCluster(1, 4);
  squall::Client client(cluster->serverAddress());
  auto session = client.newSession("bench-recovery", squall::SessionOptions{.persistent = true});
  for (int i = 0; i < n; i++) session.concat({});
  session.submit();
  session.waitAll();
  session.detach();
  cluster->killServer();
  auto start = Clock::now();
  cluster->restartServer();
  return seconds(start) * 1000;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"squall-bench: squall's task throughput and latency"};
  int governors = 2, cpus = 1, n = 20000, layers = 10, latencyN = 500, programs = 2000, reps = 3;
  int streamMib = 2048;
  bool streamsOnly = false, recoveryOnly = false, inputsOnly = false, functionsOnly = false, buildOnly = false;
  bool callsOnly = false, actorsOnly = false;
  std::vector<std::string> governorArgs;
  std::string actorPhase = "all";
  int recoveryTasks = 100000;
  std::string server;
  app.add_option("--governors", governors)->capture_default_str();
  app.add_option("--cpus", cpus, "cpus per governor")->capture_default_str();
  app.add_option("--trivial", n, "tasks in the trivial benchmark")->capture_default_str();
  app.add_option("--layers", layers, "layers (and log2 width) of the FFT graph")->capture_default_str();
  app.add_option("--latency", latencyN, "round trips measured")->capture_default_str();
  app.add_option("--programs", programs, "`true` programs")->capture_default_str();
  app.add_option("--reps", reps, "repetitions (the median is printed)")->capture_default_str();
  app.add_option("--server", server, "use a running server instead of starting one");
  app.add_option("--stream-mib", streamMib, "MiB sent through each stream benchmark (0: none)")
      ->capture_default_str();
  app.add_flag("--streams-only", streamsOnly, "run only the stream benchmarks");
  app.add_flag("--inputs-only", inputsOnly,
               "run only the program benchmarks without and with inputs (the cost of placing "
               "inputs)");
  app.add_flag("--build-only", buildOnly,
               "run only the client's building cost: --trivial tasks made in a session and not submitted, "
               "as squall_cpp_build_ns_per_task");
  app.add_flag("--functions-only", functionsOnly,
               "run only the tasklib benchmark: trivial built-in tasks, calls of a function that does "
               "nothing in warm executors, and `true` programs, in one run (docs/benchmarks.md)");
  app.add_flag("--calls-only", callsOnly,
               "run only the calls of --functions-only (with --server: its governors must have the bench "
               "executor), e.g. to count the processes' cpu time per call");
  app.add_flag("--actors-only", actorsOnly,
               "run only the actor benchmark: calls on one actor one after another and at once, and over "
               "two actors at once (--trivial of them; docs/benchmarks.md)");
  app.add_option("--actor-phase", actorPhase,
                 "with --actors-only: only one of its phases (sync, sync-combined, async, 2actors), e.g. to "
                 "profile it")
      ->check(CLI::IsMember({"all", "sync", "sync-combined", "async", "2actors"}))
      ->capture_default_str();
  app.add_option("--governor-arg", governorArgs,
                 "an argument for every governor started (e.g. --governor-arg=--input-isolation=copy)");
  app.add_flag("--recovery-only", recoveryOnly,
               "run only the session-log benchmarks (trivial tasks with and without the log, "
               "replay of a large log)");
  app.add_option("--recovery-tasks", recoveryTasks, "tasks in the log the recovery benchmark replays")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<squall::LocalCluster> cluster;
  try {
    if (server.empty() && !recoveryOnly) {
      squall::ClusterOptions options;
      options.governors = governors;
      options.cpus = cpus;
      options.governorArgs = governorArgs;
      if (functionsOnly || callsOnly || actorsOnly) {
        options.governorArgs.push_back("--executor");
        options.governorArgs.push_back("bench=" + benchExecutor());
      }
      cluster = std::make_unique<squall::LocalCluster>(options);
      cluster->start();
      server = cluster->serverAddress();
    }
    auto run = [&](const char* metric, auto&& body) {
      std::vector<double> values;
      for (int r = 0; r < reps; r++) {
        values.push_back(body());
        fprintf(stderr, "# %s run %d: %.1f\n", metric, r + 1, values.back());
      }
      printf("%s %.1f\n", metric, median(values));
      fflush(stdout);
    };
    if (recoveryOnly) {
      // The session log's cost: the trivial benchmark on a server without
      // it, and with it (the default), in the same run.
      for (bool log : {false, true}) {
        auto own = startCluster(governors, cpus, log ? std::vector<std::string>{}
                                                     : std::vector<std::string>{"--log", "off"});
        squall::Client ownClient(own->serverAddress());
        run(log ? "squall_trivial_tasks_per_s_with_log" : "squall_trivial_tasks_per_s_without_log",
            [&]() { return trivialTasksPerSecond(ownClient, n); });
      }
      run("squall_recovery_ms", [&]() { return recoveryMs(recoveryTasks); });
      return 0;
    }
    squall::Client client(server);
    if (buildOnly) {
      run("squall_cpp_build_ns_per_task", [&]() { return buildNanosPerTask(client, n); });
      return 0;
    }
    if (actorsOnly) {
      fprintf(stderr, "# actors: %d governors x %d cpus; N=%d calls\n", governors, cpus, n);
      auto phase = [&](const char* name) { return actorPhase == "all" || actorPhase == name; };
      if (phase("sync"))
        run("squall_actor_calls_sync_per_s", [&]() { return actorCallsPerSecond(client, n, 1, true); });
      if (phase("sync-combined")) {
        run("squall_actor_calls_sync_combined_per_s",
            [&]() { return actorCallsPerSecond(client, n, 1, true, true); });
      }
      if (phase("async"))
        run("squall_actor_calls_async_per_s", [&]() { return actorCallsPerSecond(client, n, 1, false); });
      if (phase("2actors")) {
        // Each actor holds a cpu for its life: with fewer than two the
        // second would wait for ever.
        uint32_t clusterCpus = 0;
        for (auto& governor : client.governors()) clusterCpus += governor.cpus;
        if (clusterCpus < 2) {
          fprintf(stderr, "# squall_actor_calls_2actors_per_s skipped: two actors hold a cpu each, the cluster has %u\n",
                  clusterCpus);
        } else {
          run("squall_actor_calls_2actors_per_s", [&]() { return actorCallsPerSecond(client, n, 2, false); });
        }
      }
      return 0;
    }
    if (callsOnly) {
      run("squall_function_tasks_per_s", [&]() { return functionTasksPerSecond(client, n); });
      return 0;
    }
    if (functionsOnly) {
      fprintf(stderr, "# tasklib: %d governors x %d cpus; N=%d built-in and function tasks, %d programs\n",
              governors, cpus, n, programs);
      run("squall_trivial_tasks_per_s", [&]() { return trivialTasksPerSecond(client, n); });
      run("squall_function_tasks_per_s", [&]() { return functionTasksPerSecond(client, n); });
      run("squall_shell_cmds_per_s", [&]() { return programsPerSecond(client, programs); });
      run("squall_executor_round_trips_per_s", [&]() { return executorRoundTripsPerSecond(benchExecutor(), n); });
      return 0;
    }
    if (inputsOnly) {
      run("squall_shell_cmds_per_s", [&]() { return programsPerSecond(client, programs); });
      run("squall_shell_cmds_with_inputs_per_s", [&]() { return programsWithInputsPerSecond(client, programs); });
      return 0;
    }
    if (!streamsOnly) {
      fprintf(stderr, "# squall: %d governors x %d cpus; trivial N=%d, fft %d layers, latency N=%d, "
                      "programs N=%d\n", governors, cpus, n, layers, latencyN, programs);
      run("squall_trivial_tasks_per_s", [&]() { return trivialTasksPerSecond(client, n); });
      run("squall_tree_tasks_per_s", [&]() { return fftTasksPerSecond(client, layers); });
      run("squall_roundtrip_latency_us", [&]() { return roundTripMicros(client, latencyN); });
      run("squall_shell_cmds_per_s", [&]() { return programsPerSecond(client, programs); });
      run("squall_shell_cmds_with_inputs_per_s", [&]() { return programsWithInputsPerSecond(client, programs); });
    }
    if (streamMib > 0) {
      // One governor with 2 cpus holds producer and reader; two governors
      // with one cpu each must split them.
      fprintf(stderr, "# streams: %d MiB, `%s` | `%s`\n", streamMib, producerCommand(streamMib).c_str(),
              CONSUMER_COMMAND);
      run("pipe_local_MBps", [&]() { return localPipeMBps(streamMib); });
      {
        auto one = startCluster(1, 2);
        squall::Client oneClient(one->serverAddress());
        run("squall_stream_one_governor_MBps", [&]() { return streamMBps(oneClient, streamMib); });
        run("squall_stream_first_byte_ms", [&]() { return streamFirstByteMs(oneClient); });
      }
      {
        auto two = startCluster(2, 1);
        squall::Client twoClient(two->serverAddress());
        run("squall_stream_two_governors_MBps", [&]() { return streamMBps(twoClient, streamMib); });
      }
      run("pipe_local_first_byte_ms", [&]() { return localFirstByteMs(); });
    }
  } catch (const std::exception& e) {
    fprintf(stderr, "squall-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
