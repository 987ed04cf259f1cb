// The executor the actor end-to-end tests run (tests/actor-test.cpp), as
// "stats": a Counter actor type whose methods add, report, crash (also
// leaving a child behind), spin and
// meet another actor; a Gate type whose calls run concurrently; and a
// Broken type whose constructor throws.
#include <squall/tasklib/tasklib.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

// Waits up to 30 s for `path` to exist; false if it never does.
bool waitForFile(const std::string& path) {
  for (int i = 0; i < 3000; i++) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A running total. Constructed from its config (the start, default 0) or
// from input 0 when it has one (a checkpoint: what `total` wrote).
class Counter {
 public:
  explicit Counter(squall::Call& init) {
    std::string start = init.inputCount() > 0 ? std::string(init.input(0).text()) : std::string(init.config());
    total = start.empty() ? 0 : std::stoll(start);
  }

  // Adds the config's number; output 0: the total after it.
  void add(squall::Call& call) {
    long long amount = std::stoll(std::string(call.config()));
    total += amount;
    history += std::to_string(amount) + "\n";
    call.output(0).write(std::to_string(total));
  }
  // Adds the number in input 0 (made by another task).
  void addInput(squall::Call& call) {
    long long amount = std::stoll(std::string(call.input(0).text()));
    total += amount;
    history += std::to_string(amount) + "\n";
    call.output(0).write(std::to_string(total));
  }
  // Output 0: the total (also a checkpoint a constructor reads back).
  void read(squall::Call& call) { call.output(0).write(std::to_string(total)); }
  // Output 0: the amounts added since construction, one per line, in the
  // order the calls ran.
  void log(squall::Call& call) { call.output(0).write(history); }
  // Output 0: this process's pid, and the variable named by the config.
  void pid(squall::Call& call) { call.output(0).write(std::to_string(getpid())); }
  void env(squall::Call& call) {
    const char* value = getenv(std::string(call.config()).c_str());
    call.output(0).write(value != nullptr ? value : "(unset)");
  }
  // Crashes the process; with a config, only if that marker file does not
  // exist yet (it is made first): it crashes once.
  void crash(squall::Call& call) {
    std::string marker(call.config());
    if (marker.empty() || !std::filesystem::exists(marker)) {
      if (!marker.empty()) std::ofstream(marker) << "crashed";
      abort();
    }
    call.output(0).write("survived");
  }
  // Crashes the process after forking a child that leaves its process
  // group (so the governor's kill of the group misses it) and sleeps on
  // for 10 s with the process's sockets to the governor (not its output:
  // whoever reads that would wait for it too): the governor must not wait
  // for those to close.
  void crashLeavingAChild(squall::Call&) {
    int left[2];
    if (pipe(left) < 0) throw std::runtime_error("no pipe");
    if (fork() == 0) {
      setsid();
      int null = open("/dev/null", O_WRONLY);
      dup2(null, STDOUT_FILENO);
      dup2(null, STDERR_FILENO);
      // Out of the group now: the crash may come.
      if (::write(left[1], "x", 1) != 1) _exit(1);
      sleep(10);
      _exit(0);
    }
    char byte;
    if (::read(left[0], &byte, 1) != 1) throw std::runtime_error("the child did not leave the group");
    abort();
  }
  // Never returns.
  void spin(squall::Call&) {
    volatile unsigned long turns = 0;
    for (;;) turns = turns + 1;
  }
  // "MINE THEIRS": makes the file MINE, then waits for THEIRS: two actors
  // meeting this way must run at the same time.
  void meet(squall::Call& call) {
    std::string config(call.config());
    auto space = config.find(' ');
    std::ofstream(config.substr(0, space)) << "here";
    if (!waitForFile(config.substr(space + 1))) throw std::runtime_error("the other actor never came");
    call.output(0).write("met");
  }
  // Submits "stats/double" of the config's number as a task of its own
  // (docs/nested.md), waits for it: output 0, its result.
  void spawnDouble(squall::Call& call) {
    auto& session = call.session();
    auto twice = session.call("stats/double", {session.blob(std::string(call.config()))});
    twice.output().keep();
    session.submit();
    call.output(0).write(twice.output().fetch());
  }
  // Tries to detach its call, which a Counter may not (it allows no
  // concurrent calls): the call fails saying so.
  void detach(squall::Call& call) { call.detach()->finish(); }
  // Throws, leaving the total as it was.
  void fail(squall::Call& call) { throw std::runtime_error("asked to fail: " + std::string(call.config())); }

 private:
  long long total = 0;
  std::string history;
};

// An actor whose calls may be under way at once (its config: how many),
// each detached to a thread of its own. "hold" waits until its group of
// holds (the config's number, in the order they came) are under way
// together (or 30 s), then ends saying that number; "peak": the most calls ever under way at once; "gate" waits
// until "open" runs; "failLater" fails its call from its thread; "crash"
// ends the process.
class Gate {
 public:
  explicit Gate(squall::Call& init) {
    std::string config(init.config());
    init.allowConcurrentCalls(static_cast<uint32_t>(std::stoul(config.empty() ? "1" : config)));
  }
  ~Gate() {
    for (auto& t : threads) t.join();
  }

  void hold(squall::Call& call) {
    size_t together = std::stoul(std::string(call.config()));
    size_t group;
    {
      std::lock_guard<std::mutex> lock(mutex);
      group = entered++ / together;
    }
    later(call, [this, together, group](squall::Call& c) {
      // Its group is complete once every member entered: they were all
      // under way then, none having ended.
      std::unique_lock<std::mutex> lock(mutex);
      bool met = changed.wait_for(lock, std::chrono::seconds(30), [&]() { return entered >= (group + 1) * together; });
      c.output(0).write(met ? std::to_string(together) : "timed out");
    });
  }
  void peak(squall::Call& call) {
    std::lock_guard<std::mutex> lock(mutex);
    call.output(0).write(std::to_string(most));
  }
  void gate(squall::Call& call) {
    later(call, [this](squall::Call& c) {
      std::unique_lock<std::mutex> lock(mutex);
      bool opened = changed.wait_for(lock, std::chrono::seconds(30), [&]() { return open; });
      c.output(0).write(opened ? "passed" : "never opened");
    });
  }
  void opening(squall::Call& call) {
    std::lock_guard<std::mutex> lock(mutex);
    open = true;
    changed.notify_all();
    call.output(0).write("opened");
  }
  void failLater(squall::Call& call) {
    auto end = call.detach();
    threads.emplace_back([end, why = std::string(call.config())]() { end->fail("failed later: " + why); });
  }
  void crash(squall::Call&) { abort(); }

 private:
  // Runs `work` on a thread of its own, counted as under way meanwhile.
  void later(squall::Call& call, std::function<void(squall::Call&)> work) {
    auto end = call.detach();
    {
      std::lock_guard<std::mutex> lock(mutex);
      active++;
      most = std::max(most, active);
      changed.notify_all();
    }
    threads.emplace_back([this, &call, end, work = std::move(work)]() {
      work(call);
      {
        std::lock_guard<std::mutex> lock(mutex);
        active--;
      }
      end->finish();
    });
  }

  std::mutex mutex;
  std::condition_variable changed;
  size_t active = 0;
  size_t most = 0;
  size_t entered = 0;
  bool open = false;
  std::vector<std::thread> threads;
};

struct Broken {
  explicit Broken(squall::Call& init) { throw std::runtime_error("cannot start: " + std::string(init.config())); }
  void get(squall::Call& call) { call.output(0).write("never"); }
};

}  // namespace

int main(int argc, char** argv) {
  squall::Executor ex("stats");
  ex.actor<Counter>("Counter")
      .method("add", &Counter::add)
      .method("addInput", &Counter::addInput)
      .method("read", &Counter::read)
      .method("log", &Counter::log)
      .method("pid", &Counter::pid)
      .method("env", &Counter::env)
      .method("crash", &Counter::crash)
      .method("crashLeavingAChild", &Counter::crashLeavingAChild)
      .method("spin", &Counter::spin)
      .method("meet", &Counter::meet)
      .method("fail", &Counter::fail)
      .method("detach", &Counter::detach)
      .method("spawnDouble", &Counter::spawnDouble);
  ex.actor<Gate>("Gate")
      .method("hold", &Gate::hold)
      .method("peak", &Gate::peak)
      .method("gate", &Gate::gate)
      .method("open", &Gate::opening)
      .method("failLater", &Gate::failLater)
      .method("crash", &Gate::crash);
  ex.actor<Broken>("Broken").method("get", &Broken::get);
  // A plain function beside the actor types.
  ex.add("double", [](squall::Call& call) {
    call.output(0).write(std::to_string(2 * std::stoll(std::string(call.input(0).text()))));
  });
  return ex.serve(argc, argv);
}
