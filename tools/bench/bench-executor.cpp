// The executor squall's benchmarks keep warm:
// - "bench/noop" (squall-bench --functions-only): does nothing and makes one
//   empty blob, to measure what a call task costs against a built-in task
//   and a `true` program.
// - "bench/Counter", an actor type (squall-bench --actors-only): increment
//   adds one and makes the count as its output, as Ray's and Dask's actor
//   benchmarks do.
// - "bench/estee-N" (squall-replay, tools/bench/estee/): a task of an ESTEE
//   graph replayed, with N outputs. Its config (estee-task.h) says how long
//   it sleeps and the sizes of its inputs and outputs: it reads every input
//   (a byte of every page of the mapping), checks each input's size, sleeps,
//   and writes each output, incompressible, of its size. A function declares
//   its number of outputs, so there is one per count: 0..4, or up to
//   $SQUALL_BENCH_ESTEE_MAX_OUTPUTS when that is more (squall-replay sets it
//   for the cluster it starts; ESTEE's size_stairs has 190).
#include "estee-task.h"

#include <squall/tasklib/tasklib.h>

#include <fcntl.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

// 1 MiB of random bytes, written over and over: more than LZ4's 64 KiB
// window, so compression between governors gains nothing, as it would not on
// real data of this kind.
const std::string& noise() {
  static const std::string bytes = [] {
    std::string b(1 << 20, '\0');
    std::mt19937_64 rng(15);
    for (size_t i = 0; i < b.size(); i += 8) {
      uint64_t v = rng();
      std::memcpy(&b[i], &v, 8);
    }
    return b;
  }();
  return bytes;
}

void writeOutput(squall::Output& out, uint64_t size) {
  const auto& src = noise();
  if (size <= squall::Executor::INLINE_LIMIT) {
    out.write(std::string_view(src).substr(0, size));
    return;
  }
  int fd = open(out.file().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + out.file() + ": " + strerror(errno));
  for (uint64_t done = 0; done < size;) {
    ssize_t n = write(fd, src.data(), std::min<uint64_t>(src.size(), size - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int error = errno;
      close(fd);
      throw std::runtime_error("cannot write " + out.file() + ": " + strerror(error));
    }
    done += n;
  }
  close(fd);
}

// Where the inputs' bytes are summed to, so that the reads stay.
volatile unsigned readSink;

void esteeTask(squall::Call& call) {
  auto task = squall::bench::EsteeTask::parse(call.config());
  if (call.outputCount() != task.outputSizes.size()) {
    throw std::runtime_error("the config names " + std::to_string(task.outputSizes.size()) +
                             " outputs, the function makes " + std::to_string(call.outputCount()));
  }
  if (call.inputCount() != task.inputSizes.size()) {
    throw std::runtime_error("the config names " + std::to_string(task.inputSizes.size()) + " inputs, the call has " +
                             std::to_string(call.inputCount()));
  }
  unsigned sum = 0;
  for (size_t i = 0; i < call.inputCount(); i++) {
    auto bytes = call.input(i).bytes();
    if (bytes.size() != task.inputSizes[i]) {
      throw std::runtime_error("input " + std::to_string(i) + " has " + std::to_string(bytes.size()) +
                               " bytes, its producer should have written " + std::to_string(task.inputSizes[i]));
    }
    for (size_t at = 0; at < bytes.size(); at += 4096) sum += static_cast<unsigned char>(bytes[at]);
  }
  readSink = sum;
  std::this_thread::sleep_for(task.duration);
  for (size_t i = 0; i < call.outputCount(); i++) writeOutput(call.output(i), task.outputSizes[i]);
}

// The actor of the actor benchmark.
class Counter {
 public:
  explicit Counter(squall::Call&) {}
  void increment(squall::Call& call) { call.output(0).write(std::to_string(++count)); }

 private:
  uint64_t count = 0;
};

}  // namespace

int main(int argc, char** argv) {
  squall::Executor ex("bench");
  ex.add("noop", [](squall::Call&) {});
  ex.actor<Counter>("Counter").method("increment", &Counter::increment);
  size_t outputs = 4;
  if (const char* max = getenv("SQUALL_BENCH_ESTEE_MAX_OUTPUTS"); max != nullptr && *max != '\0') {
    outputs = std::max<size_t>(outputs, std::strtoul(max, nullptr, 10));
  }
  for (size_t n = 0; n <= outputs; n++) ex.add(squall::bench::esteeFunction(n), esteeTask, n);
  return ex.serve(argc, argv);
}
