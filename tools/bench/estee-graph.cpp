// See estee-graph.h.
#include "estee-graph.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace squall::bench {

namespace {

std::runtime_error bad(const std::string& origin, const std::string& what) {
  return std::runtime_error(origin + ": " + what);
}

double number(const nlohmann::json& value, const std::string& origin, const std::string& where) {
  if (!value.is_number()) throw bad(origin, where + " is not a number");
  double v = value.get<double>();
  if (!(v >= 0)) throw bad(origin, where + " is negative");
  return v;
}

std::optional<double> optionalNumber(const nlohmann::json& object, const char* key, const std::string& origin,
                                     const std::string& where) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  return number(*it, origin, where);
}

const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& origin,
                            const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) throw bad(origin, where + " has no \"" + key + "\"");
  return *it;
}

}  // namespace

EsteeGraph EsteeGraph::parse(std::string_view text, const std::string& origin) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw bad(origin, std::string("not JSON: ") + e.what());
  }
  if (!json.is_array()) throw bad(origin, "a graph is a JSON list of tasks");
  EsteeGraph graph;
  for (size_t i = 0; i < json.size(); i++) {
    const auto& t = json[i];
    auto where = "task " + std::to_string(i);
    if (!t.is_object()) throw bad(origin, where + " is not an object");
    Task task;
    task.duration = number(field(t, "d", origin, where), origin, where + "'s d");
    task.expectedDuration = optionalNumber(t, "e_d", origin, where + "'s e_d");
    double cpus = number(field(t, "cpus", origin, where), origin, where + "'s cpus");
    if (cpus < 1 || cpus != uint32_t(cpus)) throw bad(origin, where + "'s cpus is not a whole number >= 1");
    task.cpus = uint32_t(cpus);
    const auto& outputs = field(t, "outputs", origin, where);
    if (!outputs.is_array()) throw bad(origin, where + "'s outputs is not a list");
    for (size_t j = 0; j < outputs.size(); j++) {
      auto at = where + "'s output " + std::to_string(j);
      if (!outputs[j].is_object()) throw bad(origin, at + " is not an object");
      task.outputs.push_back({number(field(outputs[j], "s", origin, at), origin, at + "'s s"),
                              optionalNumber(outputs[j], "e_s", origin, at + "'s e_s")});
    }
    const auto& inputs = field(t, "inputs", origin, where);
    if (!inputs.is_array()) throw bad(origin, where + "'s inputs is not a list");
    for (const auto& input : inputs) {
      if (!input.is_array() || input.size() != 2 || !input[0].is_number_unsigned() ||
          !input[1].is_number_unsigned()) {
        throw bad(origin, where + " has an input that is not [task, output]");
      }
      task.inputs.push_back({input[0].get<size_t>(), input[1].get<size_t>()});
    }
    graph.tasks.push_back(std::move(task));
  }

  // Kahn's algorithm; what is left over lies on a cycle.
  size_t n = graph.tasks.size();
  std::vector<size_t> waiting(n, 0);
  std::vector<std::vector<size_t>> readers(n);
  for (size_t i = 0; i < n; i++) {
    for (auto& input : graph.tasks[i].inputs) {
      if (input.task >= n || input.output >= graph.tasks[input.task].outputs.size()) {
        throw bad(origin, "task " + std::to_string(i) + " reads (" + std::to_string(input.task) + ", " +
                              std::to_string(input.output) + "), which does not exist");
      }
      waiting[i]++;
      readers[input.task].push_back(i);
    }
  }
  std::vector<size_t> ready;
  for (size_t i = n; i-- > 0;) {
    if (waiting[i] == 0) ready.push_back(i);
  }
  while (!ready.empty()) {
    size_t i = ready.back();
    ready.pop_back();
    graph.order.push_back(i);
    for (auto r : readers[i]) {
      if (--waiting[r] == 0) ready.push_back(r);
    }
  }
  if (graph.order.size() != n) throw bad(origin, "the graph has a cycle");
  return graph;
}

EsteeGraph EsteeGraph::load(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(path + ": cannot read it");
  std::stringstream text;
  text << file.rdbuf();
  return parse(text.str(), path);
}

double EsteeGraph::criticalPath() const {
  std::vector<double> finish(tasks.size(), 0);
  double longest = 0;
  for (auto i : order) {
    double start = 0;
    for (auto& input : tasks[i].inputs) start = std::max(start, finish[input.task]);
    finish[i] = start + tasks[i].duration;
    longest = std::max(longest, finish[i]);
  }
  return longest;
}

double EsteeGraph::work() const {
  double sum = 0;
  for (auto& t : tasks) sum += t.duration * t.cpus;
  return sum;
}

size_t EsteeGraph::maxOutputs() const {
  size_t most = 0;
  for (auto& t : tasks) most = std::max(most, t.outputs.size());
  return most;
}

LowerBound lowerBound(const EsteeGraph& graph, uint32_t cpus, double timeScale) {
  LowerBound b;
  b.criticalPath = graph.criticalPath() * timeScale;
  b.workPerCpu = cpus == 0 ? 0 : graph.work() * timeScale / cpus;
  b.bound = std::max(b.criticalPath, b.workPerCpu);
  return b;
}

}  // namespace squall::bench
