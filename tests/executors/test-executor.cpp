// The executor the tasklib end-to-end tests run (tests/tasklib-e2e-test.cpp):
// functions that count, fail, crash, spin and make dirs, as "testfn".
#include <squall/tasklib/tasklib.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

int main(int argc, char** argv) {
  squall::Executor ex("testfn");
  ex.add("wordcount", [](squall::Call& call) {
    std::istringstream in{std::string(call.input(0).text())};
    size_t words = 0;
    for (std::string word; in >> word;) words++;
    call.output(0).write(std::to_string(words));
  });
  // The process's pid: two calls that get the same one ran in one warm process.
  ex.add("pid", [](squall::Call& call) { call.output(0).write(std::to_string(getpid())); });
  ex.add("fail", [](squall::Call& call) { throw std::runtime_error("asked to fail: " + std::string(call.config())); });
  // Crashes the first time (the config names a marker file it leaves).
  ex.add("crash-once", [](squall::Call& call) {
    std::string marker(call.config());
    if (!std::filesystem::exists(marker)) {
      std::ofstream(marker) << "crashed once";
      abort();
    }
    call.output(0).write("second try");
  });
  // Never returns (a cancel or a time limit must kill it).
  ex.add("spin", [](squall::Call&) {
    std::atomic<unsigned long> spins{0};
    for (;;) spins.fetch_add(1, std::memory_order_relaxed);
  });
  ex.add(
      "split",
      [](squall::Call& call) {
        auto text = call.input(0).text();
        call.output("head").write(text.substr(0, text.size() / 2));
        call.output("tail").write(text.substr(text.size() / 2));
      },
      std::vector<std::string>{"head", "tail"});
  // A dir holding input 0 as copy.txt.
  ex.add("tree", [](squall::Call& call) {
    std::ofstream(std::filesystem::path(call.output(0).dir()) / "copy.txt") << call.input(0).text();
  });
  // The names in a dir input, one per line.
  ex.add("list", [](squall::Call& call) {
    std::string names;
    for (auto& entry : std::filesystem::directory_iterator(call.input(0).path())) {
      names += entry.path().filename().string() + "\n";
    }
    call.output(0).write(names);
  });
  // Each input, in order, as "LABEL=TEXT" a line, then the config: what a
  // task gave the function and in which order.
  ex.add("echo", [](squall::Call& call) {
    std::string text;
    for (size_t i = 0; i < call.inputCount(); i++) {
      text += call.input(i).label() + "=" + std::string(call.input(i).text()) + "\n";
    }
    call.output(0).write(text + std::string(call.config()));
  });
  return ex.serve(argc, argv);
}
