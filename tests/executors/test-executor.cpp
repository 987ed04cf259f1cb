// The executor the tasklib end-to-end tests run (tests/tasklib-e2e-test.cpp,
// tests/tasklib-large-test.cpp): functions that count, fail, crash, spin,
// make dirs, pass streams along and read a large input whole, as "testfn";
// and an actor type, Tally, for pipeline files' actors (docs/pipelines.md).
#include <squall/tasklib/tasklib.h>

#include <cstdio>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <thread>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <sys/mman.h>
#include <unistd.h>

namespace {

// A running total of numbers: constructed from input 0's text or the
// config (the start; 0 when neither), each `add` adds the number in input 0
// (or in the config) and writes the total; `log` writes what was added, a
// line each, in the order the calls ran.
class Tally {
 public:
  explicit Tally(squall::Call& init) : total(number(init)) {}
  void add(squall::Call& call) {
    auto amount = number(call);
    total += amount;
    history += std::to_string(amount) + "\n";
    call.output(0).write(std::to_string(total));
  }
  void log(squall::Call& call) { call.output(0).write(history); }

 private:
  static long long number(squall::Call& call) {
    std::string text = call.inputCount() > 0 ? std::string(call.input(0).text()) : std::string(call.config());
    return text.empty() ? 0 : std::stoll(text);
  }
  long long total;
  std::string history;
};

}  // namespace

int main(int argc, char** argv) {
  squall::Executor ex("testfn");
  ex.actor<Tally>("Tally").method("add", &Tally::add).method("log", &Tally::log);
  ex.add("wordcount", [](squall::Call& call) {
    std::istringstream in{std::string(call.input(0).text())};
    size_t words = 0;
    for (std::string word; in >> word;) words++;
    call.output(0).write(std::to_string(words));
  });
  // Streams: input 0 read as it is written, upper-cased down output 0 (a
  // stage of a streamed pipe).
  ex.add("upper", [](squall::Call& call) {
    char buffer[65536];
    auto& out = call.output(0);
    for (size_t n; (n = call.input(0).read(buffer, sizeof buffer)) > 0;) {
      for (size_t i = 0; i < n; i++) buffer[i] = static_cast<char>(toupper(static_cast<unsigned char>(buffer[i])));
      out.write(std::string_view(buffer, n));
    }
  });
  // Writes "line N" for N = 1.. (config: how many; none: until the readers go).
  ex.add("lines", [](squall::Call& call) {
    std::string config(call.config());
    unsigned long count = config.empty() ? 0 : std::stoul(config);
    for (unsigned long n = 1; count == 0 || n <= count; n++) call.output(0).write("line " + std::to_string(n) + "\n");
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
  // Does what its config says, then answers "ok" (or its input, if any):
  // "" nothing, "sleep=MS" sleeps, "abort" crashes ("sleep=MS abort": both),
  // "log=PATH" appends its answer and a newline to PATH (each run leaves a
  // line). One function that is short until asked not to be (the
  // governor's queued calls, tests/tasklib-pipeline-test.cpp).
  ex.add("act", [](squall::Call& call) {
    std::string config(call.config());
    if (config.rfind("sleep=", 0) == 0) std::this_thread::sleep_for(std::chrono::milliseconds(std::stoul(config.substr(6))));
    if (config.find("abort") != std::string::npos) abort();
    std::string answer = call.inputCount() > 0 ? std::string(call.input(0).text()) : std::string("ok");
    auto log = config.find("log=");
    if (log != std::string::npos) {
      std::ofstream(config.substr(log + 4, config.find(' ', log) - log - 4), std::ios::app) << answer + "\n" << std::flush;
    }
    call.output(0).write(answer);
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
  // Reads input 0 whole (tests/tasklib-large-test.cpp): through its
  // mapping, in 16 MiB windows, each given back (MADV_DONTNEED) once read,
  // as a reader of a huge input would. The process's peak resident size
  // then shows a copy of the input, were one made, rather than the page
  // cache behind the mapping. Answers "bytes=N newlines=N sum=N mapped=yes|no
  // pid=N", sum being that of the byte values.
  ex.add("readall", [](squall::Call& call) {
    auto& input = call.input(0);
    auto bytes = input.bytes();
    bool mapped = !input.path().empty();
    const size_t window = 16 << 20;
    if (mapped && reinterpret_cast<uintptr_t>(bytes.data()) % static_cast<uintptr_t>(getpagesize()) != 0) {
      throw std::logic_error("a mapped input that does not start on a page");
    }
    uint64_t newlines = 0;
    uint64_t sum = 0;
    for (size_t at = 0; at < bytes.size(); at += window) {
      auto part = bytes.substr(at, window);
      for (unsigned char c : part) {
        sum += c;
        newlines += c == '\n';
      }
      if (mapped && madvise(const_cast<char*>(part.data()), part.size(), MADV_DONTNEED) != 0) {
        throw std::runtime_error(std::string("madvise: ") + strerror(errno));
      }
    }
    call.output(0).write("bytes=" + std::to_string(bytes.size()) + " newlines=" + std::to_string(newlines) +
                         " sum=" + std::to_string(sum) + " mapped=" + (mapped ? "yes" : "no") +
                         " pid=" + std::to_string(getpid()));
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
  // Prints "out: LINE" for each line of its config (stdout, as printf
  // does), "err: done" (stderr), then "partial" with no newline: what the
  // governor gives its task (docs/ray.md, "Output").
  ex.add("say", [](squall::Call& call) {
    std::string config(call.config());
    size_t at = 0;
    while (at < config.size()) {
      size_t end = config.find('\n', at);
      if (end == std::string::npos) end = config.size();
      printf("out: %s\n", config.substr(at, end - at).c_str());
      at = end + 1;
    }
    fprintf(stderr, "err: done\n");
    printf("partial");
    call.output(0).write("said");
  });
  // Prints the config's number of MiB to stdout, in lines of 64 bytes
  // numbered from 0, as fast as it can.
  ex.add("flood", [](squall::Call& call) {
    size_t lines = std::stoul(std::string(call.config())) * (1 << 20) / 64;
    for (size_t i = 0; i < lines; i++) printf("%063zu\n", i);
    call.output(0).write(std::to_string(lines));
  });
  return ex.serve(argc, argv);
}
