// The executor the actor end-to-end tests run (tests/actor-test.cpp), as
// "stats": a Counter actor type whose methods add, report, crash (also
// leaving a child behind), spin and
// meet another actor, and a Broken type whose constructor throws.
#include <squall/tasklib/tasklib.h>

#include <chrono>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>

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
  // Throws, leaving the total as it was.
  void fail(squall::Call& call) { throw std::runtime_error("asked to fail: " + std::string(call.config())); }

 private:
  long long total = 0;
  std::string history;
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
      .method("fail", &Counter::fail);
  ex.actor<Broken>("Broken").method("get", &Broken::get);
  // A plain function beside the actor types.
  ex.add("double", [](squall::Call& call) {
    call.output(0).write(std::to_string(2 * std::stoll(std::string(call.input(0).text()))));
  });
  return ex.serve(argc, argv);
}
