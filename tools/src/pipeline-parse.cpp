// Parses pipeline files (TOML) into a Pipeline, step by step (a step's
// inputs, edges, store targets, durations and array items are in
// pipeline-parse-edges.cpp, the checks that span steps in
// pipeline-validate.cpp, the planning in pipeline-plan.cpp). See pipeline.h for the two stages and
// docs/pipelines.md for the format.
#include "pipeline-parser.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <glob.h>
#include <set>
#include <squall/proto/resource-amounts.h>
#include <squall/proto/sandbox-path.h>
#include <squall/proto/spec-names.h>
#include <sstream>
#include <toml++/toml.h>

namespace squall {

namespace fs = std::filesystem;

namespace {

size_t editDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); j++) row[j] = j;
  for (size_t i = 1; i <= a.size(); i++) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); j++) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

namespace pipeline_detail {

bool validName(std::string_view name) {
  if (name.empty() || name.size() > 100) return false;
  for (char c : name) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

const char* typeName(toml::node_type type) {
  switch (type) {
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    default: return "a date/time";
  }
}

SourcePos posOf(const toml::source_region& region) {
  return {region.begin.line, region.begin.column};
}

// " (did you mean 'x'?)" when one candidate is close, else "".
std::string suggestion(std::string_view word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t bestDistance = 3;
  for (auto& c : candidates) {
    size_t d = editDistance(word, c);
    if (d < bestDistance) {
      bestDistance = d;
      best = c;
    }
  }
  return best.empty() ? "" : " (did you mean '" + best + "'?)";
}

std::string join(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (auto& p : parts) {
    if (!out.empty()) out += separator;
    out += p;
  }
  return out;
}

std::string resolveLocal(const std::string& dir, const std::string& path) {
  fs::path p(path);
  return (p.is_absolute() ? p : fs::path(dir) / p).lexically_normal().string();
}

[[noreturn]] void PipelineParser::fail(SourcePos pos, const std::string& message) const {
  std::string where = file;
  if (pos.line > 0) where += ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column);
  throw PipelineError(where + ": " + message);
}

std::string PipelineParser::what(const Step& step) {
  if (step.kind == Step::Kind::ACTOR) return "actor '" + step.name + "'";
  return std::string(step.actor.empty() ? "call" : "method") + " step '" + step.name + "'";
}

Pipeline PipelineParser::parse(const std::string& text) {
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& e) {
    fail(posOf(e.source()), std::string(e.description()));
  }
  Pipeline pipeline;
  pipeline.file = file;
  pipeline.dir = dir;
  pipeline.name = fs::path(file).stem().string();
  for (auto&& [key, node] : sortedByPosition(root)) {
    if (key == "name") {
      pipeline.name = string(*node, "name");
      if (pipeline.name.empty()) fail(posOf(node->source()), "'name' must not be empty");
    } else if (key == "env") {
      for (auto&& [var, value] : sortedByPosition(table(*node, "env"))) {
        pipeline.env.emplace_back(var, string(*value, "env." + var));
      }
    } else if (key == "step" || key == "actor") {
      auto* tables = node->as_table();
      if (tables == nullptr) {
        fail(posOf(node->source()), "'" + key + "' must hold one table per " + key + ", written [" + key +
                                        ".NAME] (it is " + std::string(typeName(node->type())) + ")");
      }
      // The headers' positions, before parsing the tables overwrites keyPos
      // (they order steps and actors below).
      auto entries = sortedByPosition(*tables);
      auto headers = keyPos;
      for (auto&& [name, table] : entries) {
        pipeline.steps.push_back(key == "step" ? parseStep(name, headers.at(name), *table)
                                               : parseActor(name, headers.at(name), *table));
      }
    } else {
      fail(keyPos.at(key), "unknown key '" + key + "'" + suggestion(key, {"name", "env", "step", "actor"}) +
                               "; a pipeline has 'name', [env], [step.NAME] and [actor.NAME] tables");
    }
  }
  // Steps and actors in file order (the planner keeps it between equals).
  std::stable_sort(pipeline.steps.begin(), pipeline.steps.end(), [](const Step& a, const Step& b) {
    return a.pos.line != b.pos.line ? a.pos.line < b.pos.line : a.pos.column < b.pos.column;
  });
  std::map<std::string, const Step*> seen;
  for (auto& step : pipeline.steps) {
    auto [it, fresh] = seen.emplace(step.name, &step);
    if (!fresh) {
      fail(step.pos, "'" + step.name + "' names both a step and an actor (line " +
                         std::to_string(it->second->pos.line) + "); steps and actors share one set of names");
    }
  }
  if (std::none_of(pipeline.steps.begin(), pipeline.steps.end(),
                   [](const Step& step) { return step.kind != Step::Kind::ACTOR; })) {
    fail({}, "no steps: add at least one [step.NAME] table");
  }
  checkReferences(pipeline);
  checkCycles(pipeline);
  checkStreams(pipeline);
  return pipeline;
}

std::vector<std::pair<std::string, const toml::node*>> PipelineParser::sortedByPosition(const toml::table& table) {
  std::vector<std::tuple<SourcePos, std::string, const toml::node*>> entries;
  for (auto&& [key, node] : table) {
    auto pos = posOf(key.source());
    if (pos.line == 0) pos = posOf(node.source());
    entries.emplace_back(pos, std::string(key.str()), &node);
  }
  std::sort(entries.begin(), entries.end(), [](auto& a, auto& b) {
    auto& pa = std::get<0>(a);
    auto& pb = std::get<0>(b);
    return pa.line != pb.line ? pa.line < pb.line : pa.column < pb.column;
  });
  std::vector<std::pair<std::string, const toml::node*>> out;
  for (auto& [pos, key, node] : entries) {
    keyPos[key] = pos;
    out.emplace_back(key, node);
  }
  return out;
}

void PipelineParser::expectType(const toml::node& node, toml::node_type type, const std::string& what) const {
  if (node.type() != type) {
    fail(posOf(node.source()),
         "'" + what + "' must be " + typeName(type) + ", not " + typeName(node.type()));
  }
}

std::string PipelineParser::string(const toml::node& node, const std::string& what) const {
  expectType(node, toml::node_type::string, what);
  return node.as_string()->get();
}

bool PipelineParser::boolean(const toml::node& node, const std::string& what) const {
  expectType(node, toml::node_type::boolean, what);
  return node.as_boolean()->get();
}

int64_t PipelineParser::integer(const toml::node& node, const std::string& what, int64_t min, int64_t max) const {
  expectType(node, toml::node_type::integer, what);
  int64_t value = node.as_integer()->get();
  if (value < min || value > max) {
    fail(posOf(node.source()), "'" + what + "' must be between " + std::to_string(min) + " and " +
                                   std::to_string(max) + " (got " + std::to_string(value) + ")");
  }
  return value;
}

const toml::table& PipelineParser::table(const toml::node& node, const std::string& what) const {
  expectType(node, toml::node_type::table, what);
  return *node.as_table();
}

SourceRef PipelineParser::parseRef(const toml::node& node, const std::string& what) {
  SourceRef ref;
  ref.text = string(node, what);
  ref.pos = posOf(node.source());
  if (ref.text.empty()) fail(ref.pos, "'" + what + "' is empty: give a local path or @STEP");
  if (ref.text[0] != '@') {
    ref.local = ref.text;
    return ref;
  }
  ref.isStep = true;
  auto body = ref.text.substr(1);
  auto slash = body.find('/');
  std::string head = body.substr(0, slash);
  if (slash != std::string::npos) {
    ref.subPath = body.substr(slash + 1);
    if (ref.subPath.empty() || ref.subPath == "/") {
      fail(ref.pos, "'" + ref.text + "': nothing after '/' (write @STEP.OUTPUT/PATH to take a "
                    "file out of a directory output)");
    }
  }
  auto dot = head.find('.');
  ref.step = head.substr(0, dot);
  if (dot != std::string::npos) ref.output = head.substr(dot + 1);
  if (!validName(ref.step) || (dot != std::string::npos && !validName(ref.output))) {
    fail(ref.pos, "'" + ref.text + "' is not a step reference: write @STEP, @STEP.OUTPUT or "
                  "@STEP.OUTPUT/PATH (names are letters, digits, '_' and '-')");
  }
  return ref;
}

Step PipelineParser::parseStep(const std::string& name, SourcePos pos, const toml::node& node) {
  Step step;
  step.name = name;
  step.pos = pos;
  if (!validName(name)) {
    fail(pos, "step name '" + name + "' must be letters, digits, '_' and '-'");
  }
  auto& body = table(node, "step." + name);
  auto entries = sortedByPosition(body);
  std::map<std::string, SourcePos> positions = keyPos;

  static const std::vector<std::string> actions = {"command", "shell", "call", "method", "make_dir", "slice",
                                                   "load", "store"};
  static const std::vector<std::string> arrays = {"lines", "files", "range", "values"};
  static const std::vector<std::string> known = {
      "command", "shell", "call", "method", "make_dir", "slice", "load", "store", "inputs", "stdin", "outputs",
      "stdout", "config", "config_file", "collect", "env", "cpus", "resources", "retries", "allow_failure",
      "time_limit", "expected", "lines", "files", "range", "values"};
  std::string action;
  std::string arrayKey;
  std::string configKey;
  for (auto& [key, value] : entries) {
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      fail(positions.at(key), "unknown key '" + key + "' in step '" + name + "'" +
                                  suggestion(key, known));
    }
    if (std::find(actions.begin(), actions.end(), key) != actions.end()) {
      if (!action.empty()) {
        fail(positions.at(key), "step '" + name + "' has both '" + action + "' and '" + key +
                                    "'; a step does one thing");
      }
      action = key;
    }
    if (std::find(arrays.begin(), arrays.end(), key) != arrays.end()) {
      if (!arrayKey.empty()) {
        fail(positions.at(key), "step '" + name + "' has both '" + arrayKey + "' and '" + key +
                                    "'; an array step runs over one list");
      }
      arrayKey = key;
    }
    if (key == "config" || key == "config_file") {
      if (!configKey.empty()) {
        fail(positions.at(key), "step '" + name + "' has both '" + configKey + "' and '" + key +
                                    "'; give its config one way");
      }
      configKey = key;
    }
  }
  if (action.empty()) {
    fail(pos, "step '" + name + "' has nothing to do: give it one of command, shell, call, method, make_dir, "
              "slice, load or store");
  }
  static const std::map<std::string, Step::Kind> kinds = {
      {"command", Step::Kind::EXECUTE}, {"shell", Step::Kind::EXECUTE}, {"call", Step::Kind::CALL},
      {"method", Step::Kind::CALL},
      {"make_dir", Step::Kind::MAKE_DIR}, {"slice", Step::Kind::SLICE},
      {"load", Step::Kind::LOAD}, {"store", Step::Kind::STORE}};
  step.kind = kinds.at(action);
  // What a call step has instead of a program's key.
  static const std::map<std::string, std::string> programOnly = {
      {"stdin", "; a function takes its inputs as inputs = [SOURCE, ...]"},
      {"stdout", "; a function names its outputs as outputs = [\"NAME\", ...]"},
      {"env", "; a function runs in its executor's process, which the governor started"}};
  static const std::set<std::string> programOrCall = {"inputs", "outputs", "cpus", "resources"};
  static const std::set<std::string> callOnly = {"config", "config_file"};
  bool program = step.kind == Step::Kind::EXECUTE;
  bool call = step.kind == Step::Kind::CALL;
  for (auto& [key, value] : entries) {
    if (!program && programOnly.count(key)) {
      fail(positions.at(key), "'" + key + "' does not apply to a " + action +
                                  " step (only to command and shell steps)" + (call ? programOnly.at(key) : ""));
    }
    if (!program && !call && programOrCall.count(key)) {
      fail(positions.at(key), "'" + key + "' does not apply to a " + action +
                                  " step (only to command, shell and call steps)");
    }
    if (!call && callOnly.count(key)) {
      fail(positions.at(key), "'" + key + "' does not apply to a " + action + " step (only to call steps)");
    }
    if (step.kind == Step::Kind::STORE && key == "collect") {
      fail(positions.at(key), "a store step has no output to collect");
    }
    if (action == "method") {
      static const std::map<std::string, std::string> actorsOwn = {
          {"cpus", "; a method runs on what its actor holds (give cpus to the actor)"},
          {"resources", "; a method runs on what its actor holds (give resources to the actor)"},
          {"retries", "; a call running when its actor's process died is retried by the actor's "
                      "max_call_retries"},
          {"time_limit", "; an actor's calls run one after another in its process"},
      };
      auto it = actorsOwn.find(key);
      if (it != actorsOwn.end()) {
        fail(positions.at(key), "'" + key + "' does not apply to a method step" + it->second);
      }
    }
  }

  for (auto& [key, value] : entries) {
    auto where = "step." + name + "." + key;
    auto valuePos = posOf(value->source());
    if (key == "command") {
      step.actionPos = valuePos;
      expectType(*value, toml::node_type::array, where);
      for (auto& arg : *value->as_array()) step.command.push_back(string(arg, where));
      if (step.command.empty()) fail(valuePos, "'command' is empty: give the program and its arguments");
      if (step.command[0].empty()) fail(valuePos, "'command' starts with an empty program name");
    } else if (key == "shell") {
      step.actionPos = valuePos;
      step.shell = true;
      step.command = {string(*value, where)};
      if (step.command[0].empty()) fail(valuePos, "'shell' is an empty command line");
    } else if (key == "call") {
      step.actionPos = valuePos;
      step.function = string(*value, where);
      if (auto problem = callNameProblem(step.function)) fail(valuePos, "step '" + name + "': " + *problem);
    } else if (key == "method") {
      step.actionPos = valuePos;
      parseMethod(step, string(*value, where), valuePos);
    } else if (key == "config" || key == "config_file") {
      parseConfig(step, key, *value, where);
    } else if (key == "make_dir") {
      step.actionPos = valuePos;
      parseInputs(step, table(*value, where), where, false);
      step.outputs.push_back({"dir", "", ObjectKind::DIR, valuePos});
    } else if (key == "slice") {
      step.actionPos = valuePos;
      step.from = parseRef(*value, where);
      if (!step.from->isStep || step.from->subPath.empty()) {
        fail(valuePos, "'slice' takes @STEP.OUTPUT/PATH: the file (or, ending in '/', the "
                       "directory) PATH inside a directory another step made");
      }
      step.outputs.push_back({"out", "", sliceKind(step.from->subPath), valuePos});
    } else if (key == "load") {
      step.actionPos = valuePos;
      step.path = string(*value, where);
      requireAbsolute(step.path, valuePos, "load");
      step.outputs.push_back({"out", "", sliceKind(step.path), valuePos});
    } else if (key == "store") {
      step.actionPos = valuePos;
      parseStore(step, table(*value, where), where);
    } else if (key == "inputs" && call) {
      parseCallInputs(step, *value, where);
    } else if (key == "inputs") {
      parseInputs(step, table(*value, where), where, true);
    } else if (key == "stdin") {
      if (value->is_table()) {
        step.stdinFrom = parseEdge(*value->as_table(), posOf(value->source()), where, "stdin",
                                   {.stream = true, .brokenPipe = true});
      } else {
        step.stdinFrom = parseRef(*value, where);
      }
    } else if (key == "outputs" && call) {
      parseCallOutputs(step, *value, where);
    } else if (key == "outputs") {
      for (auto&& [out, pathNode] : sortedByPosition(table(*value, where))) {
        auto outPos = keyPos.at(out);
        auto path = string(*pathNode, where + "." + out);
        if (!validName(out)) fail(outPos, "output name '" + out + "' must be letters, digits, '_' and '-'");
        if (out == "stdout") fail(outPos, "the output name 'stdout' is for `stdout = true`");
        if (path.empty() || path == "/") fail(posOf(pathNode->source()), "output '" + out + "' has no path");
        bool isDir = path.back() == '/';
        if (isDir) path.pop_back();
        requireSandboxPath(path, posOf(pathNode->source()), "output '" + out + "'");
        step.outputs.push_back({out, path, isDir ? ObjectKind::DIR : ObjectKind::BLOB, outPos});
      }
    } else if (key == "stdout") {
      if (boolean(*value, where)) step.outputs.push_back({"stdout", "", ObjectKind::BLOB, valuePos});
    } else if (key == "collect") {
      if (value->is_string()) {
        step.collect.push_back({"", value->as_string()->get(), valuePos});
      } else if (value->is_table()) {
        for (auto&& [out, pathNode] : sortedByPosition(*value->as_table())) {
          step.collect.push_back({out, string(*pathNode, where + "." + out), keyPos.at(out)});
        }
      } else {
        fail(valuePos, "'collect' must be a local path (the step's only output) or a table "
                       "OUTPUT = \"local path\", not " + std::string(typeName(value->type())));
      }
      for (auto& rule : step.collect) {
        if (rule.path.empty()) fail(rule.pos, "collect path is empty");
      }
    } else if (key == "env") {
      for (auto&& [var, valueNode] : sortedByPosition(table(*value, where))) {
        step.env.emplace_back(var, string(*valueNode, where + "." + var));
      }
    } else if (key == "cpus") {
      step.cpus = static_cast<uint32_t>(integer(*value, where, 1, 4096));
    } else if (key == "resources") {
      parseResources(step, *value, where);
    } else if (key == "retries") {
      step.retries = static_cast<uint32_t>(integer(*value, where, 0, 100));
    } else if (key == "allow_failure") {
      step.allowFailure = boolean(*value, where);
    } else if (key == "time_limit") {
      step.timeLimit = parseDuration(*value, where);
    } else if (key == "expected") {
      step.expected = parseDuration(*value, where);
    } else {  // an array key
      step.isArray = true;
      step.arrayPos = valuePos;
      expandItems(step, key, *value, where);
    }
  }
  // A function makes one output unless told otherwise.
  bool outputsGiven = std::any_of(entries.begin(), entries.end(), [](auto& e) { return e.first == "outputs"; });
  if (call && !outputsGiven) step.outputs.push_back({"out", "", ObjectKind::BLOB, step.actionPos});
  if (!step.actor.empty()) {
    for (auto& input : step.inputs) {
      if (input.from.stream) {
        fail(input.from.streamPos, "step '" + name + "': a method reads its inputs once they have ended "
                                   "(drop stream = true)");
      }
    }
  }
  // Output names are unique within a step.
  std::set<std::string> names;
  for (auto& out : step.outputs) {
    if (!names.insert(out.name).second) fail(out.pos, "step '" + name + "' has two outputs named '" + out.name + "'");
  }
  for (auto& rule : step.collect) {
    if (!rule.output.empty() && !names.count(rule.output)) {
      std::vector<std::string> candidates(names.begin(), names.end());
      fail(rule.pos, "step '" + name + "' has no output '" + rule.output + "' to collect" +
                         suggestion(rule.output, candidates) + " (its outputs: " +
                         join(candidates, ", ") + ")");
    }
    if (rule.output.empty() && step.outputs.size() != 1) {
      fail(rule.pos, "step '" + name + "' has " + std::to_string(step.outputs.size()) +
                         " outputs: collect = { OUTPUT = \"path\" } names which");
    }
  }
  return step;
}

void PipelineParser::parseResources(Step& step, const toml::node& value, const std::string& where) {
  // { gpus = 1, gpus = 0.5, mem = "2G", scratch = "all" }
  for (auto&& [resource, amountNode] : sortedByPosition(table(value, where))) {
    std::string name = resource;
    auto what = where + "." + name;
    auto pos = posOf(amountNode->source());
    if (!isResourceName(name)) fail(pos, "'" + what + "': " + RESOURCE_NAME_RULE);
    if (name == "cpus") fail(pos, "'" + what + "': cpus are asked with cpus = N");
    std::string amount;
    if (auto* n = amountNode->as_integer()) {
      amount = std::to_string(n->get());
    } else if (auto* f = amountNode->as_floating_point()) {
      std::ostringstream text;
      text.precision(12);
      text << f->get();
      amount = text.str();
    } else {
      amount = string(*amountNode, what);
    }
    if (amount != "all") {
      try {
        if (parseAmount(amount) == 0) fail(pos, "'" + what + "' is 0");
      } catch (const std::invalid_argument& e) {
        fail(pos, "'" + what + "': " + e.what() + ", or \"all\"");
      }
    }
    step.resources.emplace_back(name, amount);
  }
}

void PipelineParser::parseConfig(Step& step, const std::string& key, const toml::node& value,
                                 const std::string& where) {
  step.config = string(value, where);
  step.configIsFile = key == "config_file";
  step.configPos = posOf(value.source());
  if (step.configIsFile && step.config.empty()) fail(step.configPos, "'config_file' is empty: give a local file");
}

void PipelineParser::parseMethod(Step& step, const std::string& text, SourcePos pos) const {
  auto dot = text.find('.');
  step.actor = text.substr(0, dot);
  if (dot != std::string::npos) step.method = text.substr(dot + 1);
  if (dot == std::string::npos || !validName(step.actor)) {
    fail(pos, "step '" + step.name + "': method \"" + text + "\" does not name an actor's method: write "
              "ACTOR.METHOD, ACTOR an [actor.NAME] of this file");
  }
  if (step.method.find('.') != std::string::npos || !isPlainName(kj::StringPtr(step.method.c_str(), step.method.size()))) {
    fail(pos, "step '" + step.name + "': method \"" + text + "\" has a bad method name '" + step.method +
              "': use 1 to 128 letters, digits, '-' and '_'");
  }
}

Step PipelineParser::parseActor(const std::string& name, SourcePos pos, const toml::node& node) {
  Step step;
  step.name = name;
  step.pos = pos;
  step.kind = Step::Kind::ACTOR;
  if (!validName(name)) fail(pos, "actor name '" + name + "' must be letters, digits, '_' and '-'");
  static const std::vector<std::string> known = {"type", "inputs", "config", "config_file", "cpus", "resources",
                                                 "max_restarts", "max_call_retries", "named", "allow_failure"};
  bool typed = false;
  std::string configKey;
  for (auto& [key, value] : sortedByPosition(table(node, "actor." + name))) {
    auto where = "actor." + name + "." + key;
    auto valuePos = posOf(value->source());
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      fail(keyPos.at(key), "unknown key '" + key + "' in actor '" + name + "'" + suggestion(key, known) +
                               " (an actor takes " + join(known, ", ") + "; its methods are steps: "
                               "method = \"" + name + ".METHOD\")");
    }
    if (key == "type") {
      typed = true;
      step.actionPos = valuePos;
      step.function = string(*value, where);
      auto slash = step.function.find('/');
      auto type = slash == std::string::npos ? std::string() : step.function.substr(slash + 1);
      if (type.find('.') != std::string::npos || callNameProblem(step.function)) {
        fail(valuePos, "actor '" + name + "': type \"" + step.function + "\" does not name an actor type: write "
                       "EXECUTOR/Type, each 1 to 128 letters, digits, '-' and '_' ('.' too in the executor's)");
      }
    } else if (key == "inputs") {
      parseCallInputs(step, *value, where);
      for (auto& input : step.inputs) {
        if (input.from.stream) {
          fail(input.from.streamPos, "actor '" + name + "': a constructor reads its inputs once they have "
                                     "ended (drop stream = true)");
        }
      }
    } else if (key == "config" || key == "config_file") {
      if (!configKey.empty()) {
        fail(valuePos, "actor '" + name + "' has both '" + configKey + "' and '" + key + "'; give its config one way");
      }
      configKey = key;
      parseConfig(step, key, *value, where);
    } else if (key == "cpus") {
      step.cpus = static_cast<uint32_t>(integer(*value, where, 1, 4096));
    } else if (key == "resources") {
      parseResources(step, *value, where);
    } else if (key == "max_restarts") {
      step.maxRestarts = static_cast<uint32_t>(integer(*value, where, 0, 1000));
    } else if (key == "max_call_retries") {
      step.maxCallRetries = static_cast<uint32_t>(integer(*value, where, 0, 1000));
    } else if (key == "named") {
      step.actorName = string(*value, where);
      if (!isPlainName(kj::StringPtr(step.actorName.c_str(), step.actorName.size()))) {
        fail(valuePos, "actor '" + name + "': named \"" + step.actorName + "\": " + PLAIN_NAME_RULE);
      }
    } else if (key == "allow_failure") {
      step.allowFailure = boolean(*value, where);
    }
  }
  if (!typed) fail(pos, "actor '" + name + "' has no type: give it type = \"EXECUTOR/Type\"");
  return step;
}

}  // namespace pipeline_detail

using pipeline_detail::PipelineParser;

std::optional<std::string> callNameProblem(const std::string& function) {
  auto said = "call \"" + function + "\" ";
  auto slash = function.find('/');
  if (function.empty() || slash == std::string::npos) {
    return said + "does not name a function: write EXECUTOR/FUNCTION, e.g. \"text/wordcount\"";
  }
  auto executor = function.substr(0, slash);
  auto name = function.substr(slash + 1);
  for (auto& [what, part] : {std::pair{"executor", executor}, std::pair{"function", name}}) {
    if (!isPlainName(kj::StringPtr(part.c_str(), part.size()))) {
      return said + "has a bad " + what + " name '" + part + "': " + PLAIN_NAME_RULE;
    }
  }
  return std::nullopt;
}

Pipeline parsePipeline(const std::string& text, const std::string& file) {
  auto dir = fs::absolute(fs::path(file)).parent_path().lexically_normal().string();
  return PipelineParser(file, dir).parse(text);
}

Pipeline parsePipelineFile(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw PipelineError(file + ": cannot read: " + strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  return parsePipeline(text.str(), file);
}

}  // namespace squall
