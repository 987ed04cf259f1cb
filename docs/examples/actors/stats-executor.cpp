// docs/actors.md: an executor with two actor types, a Counter and a
// ParameterServer, and the function the parameter server's workers run.
// guide:begin
#include <squall/tasklib/tasklib.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

// Numbers as text, "1.5 -2 0.25", and back.
std::vector<double> parseNumbers(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::vector<double> numbers;
  for (double x; in >> x;) numbers.push_back(x);
  return numbers;
}
std::string formatNumbers(const std::vector<double>& numbers) {
  std::ostringstream out;
  out.precision(17);
  for (size_t i = 0; i < numbers.size(); i++) out << (i ? " " : "") << numbers[i];
  return out.str();
}

// Ray's first actor: a number that calls increment, one after another.
class Counter {
 public:
  // The config is where it starts (0 when empty).
  explicit Counter(squall::Call& init) {
    if (!init.config().empty()) value = std::stol(std::string(init.config()));
  }
  // Output 0: the value after this increment.
  void increment(squall::Call& call) { call.output(0).write(std::to_string(++value)); }
  void get(squall::Call& call) { call.output(0).write(std::to_string(value)); }

 private:
  long value = 0;
};

// Holds the weights of a model; workers push gradients to it.
class ParameterServer {
 public:
  // The config: the learning rate, then the starting weights.
  explicit ParameterServer(squall::Call& init) {
    auto numbers = parseNumbers(init.config());
    if (numbers.size() < 2) throw std::invalid_argument("config: a learning rate and at least one weight");
    rate = numbers[0];
    weights.assign(numbers.begin() + 1, numbers.end());
  }
  // Input 0: a gradient, one number per weight. Output 0: the new weights.
  void push(squall::Call& call) {
    auto gradient = parseNumbers(call.input(0).text());
    if (gradient.size() != weights.size()) throw std::invalid_argument("a gradient of the wrong size");
    for (size_t i = 0; i < weights.size(); i++) weights[i] -= rate * gradient[i];
    call.output(0).write(formatNumbers(weights));
  }
  void get(squall::Call& call) { call.output(0).write(formatNumbers(weights)); }

 private:
  double rate = 0;
  std::vector<double> weights;
};

int main(int argc, char** argv) {
  squall::Executor stats("stats");
  stats.actor<Counter>("Counter").method("increment", &Counter::increment).method("get", &Counter::get);
  stats.actor<ParameterServer>("ParameterServer")
      .method("push", &ParameterServer::push)
      .method("get", &ParameterServer::get);
  // A worker: the gradient of the mean squared error of the line
  // y = w0 + w1 * x (input 0: the weights) over its shard of points
  // (input 1: "x y" lines).
  stats.add("gradient", [](squall::Call& call) {
    auto w = parseNumbers(call.input(0).text());
    auto points = parseNumbers(call.input(1).text());
    double g0 = 0, g1 = 0;
    size_t n = points.size() / 2;
    for (size_t i = 0; i < n; i++) {
      double x = points[2 * i], y = points[2 * i + 1];
      double error = w[0] + w[1] * x - y;
      g0 += 2 * error / n;
      g1 += 2 * error * x / n;
    }
    call.output(0).write(formatNumbers({g0, g1}));
  });
  return stats.serve(argc, argv);
}
// guide:end
