// Parses pipeline files (TOML) into a Pipeline and plans it into tasks.
// See pipeline.h for the two stages and docs/pipelines.md for the format.
#include "pipeline.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <glob.h>
#include <set>
#include <squall/proto/sandbox-path.h>
#include <sstream>
#include <toml++/toml.h>

namespace squall {

namespace fs = std::filesystem;

namespace {

constexpr size_t MAX_ITEMS = 1000000;
// time_limit: at most 365 days, whether in seconds or with a unit.
constexpr int64_t MAX_DURATION_SECONDS = 365LL * 24 * 3600;
constexpr double MAX_DURATION_MS = MAX_DURATION_SECONDS * 1000.0;
const char* const PLACEHOLDERS[] = {"item", "index", "name", "stem"};

bool validName(std::string_view name) {
  if (name.empty() || name.size() > 100) return false;
  for (char c : name) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

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

std::string resolveLocal(const std::string& dir, const std::string& path) {
  fs::path p(path);
  return (p.is_absolute() ? p : fs::path(dir) / p).lexically_normal().string();
}

// Reads one pipeline file's TOML into the model. Holds the file name for
// messages; lives for one parse.
class PipelineParser {
 public:
  PipelineParser(std::string file, std::string dir) : file(std::move(file)), dir(std::move(dir)) {}

  [[noreturn]] void fail(SourcePos pos, const std::string& message) const {
    std::string where = file;
    if (pos.line > 0) where += ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column);
    throw PipelineError(where + ": " + message);
  }

  Pipeline parse(const std::string& text) {
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
      } else if (key == "step") {
        auto* steps = node->as_table();
        if (steps == nullptr) {
          fail(posOf(node->source()),
               "'step' must hold one table per step, written [step.NAME] (it is " +
                   std::string(typeName(node->type())) + ")");
        }
        for (auto&& [name, stepNode] : sortedByPosition(*steps)) {
          pipeline.steps.push_back(parseStep(name, keyPos.at(name), *stepNode));
        }
      } else {
        fail(keyPos.at(key), "unknown key '" + key + "'" + suggestion(key, {"name", "step"}) +
                                 "; a pipeline has 'name' and [step.NAME] tables");
      }
    }
    if (pipeline.steps.empty()) fail({}, "no steps: add at least one [step.NAME] table");
    checkReferences(pipeline);
    checkCycles(pipeline);
    checkStreams(pipeline);
    return pipeline;
  }

 private:
  std::string file;
  std::string dir;
  // Key positions of the table last sorted (toml++ keeps keys in a map).
  std::map<std::string, SourcePos> keyPos;

  // The table's entries in file order (toml++ iterates them sorted by key);
  // records each key's position in keyPos.
  std::vector<std::pair<std::string, const toml::node*>> sortedByPosition(const toml::table& table) {
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

  void expectType(const toml::node& node, toml::node_type type, const std::string& what) const {
    if (node.type() != type) {
      fail(posOf(node.source()),
           "'" + what + "' must be " + typeName(type) + ", not " + typeName(node.type()));
    }
  }
  std::string string(const toml::node& node, const std::string& what) const {
    expectType(node, toml::node_type::string, what);
    return node.as_string()->get();
  }
  bool boolean(const toml::node& node, const std::string& what) const {
    expectType(node, toml::node_type::boolean, what);
    return node.as_boolean()->get();
  }
  int64_t integer(const toml::node& node, const std::string& what, int64_t min, int64_t max) const {
    expectType(node, toml::node_type::integer, what);
    int64_t value = node.as_integer()->get();
    if (value < min || value > max) {
      fail(posOf(node.source()), "'" + what + "' must be between " + std::to_string(min) + " and " +
                                     std::to_string(max) + " (got " + std::to_string(value) + ")");
    }
    return value;
  }
  const toml::table& table(const toml::node& node, const std::string& what) const {
    expectType(node, toml::node_type::table, what);
    return *node.as_table();
  }

  SourceRef parseRef(const toml::node& node, const std::string& what) {
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

  Step parseStep(const std::string& name, SourcePos pos, const toml::node& node) {
    Step step;
    step.name = name;
    step.pos = pos;
    if (!validName(name)) {
      fail(pos, "step name '" + name + "' must be letters, digits, '_' and '-'");
    }
    auto& body = table(node, "step." + name);
    auto entries = sortedByPosition(body);
    std::map<std::string, SourcePos> positions = keyPos;

    static const std::vector<std::string> actions = {"command", "shell", "make_dir", "slice", "load",
                                                     "store"};
    static const std::vector<std::string> arrays = {"lines", "files", "range", "values"};
    static const std::vector<std::string> known = {
        "command", "shell", "make_dir", "slice", "load", "store", "inputs", "stdin", "outputs",
        "stdout", "collect", "env", "cpus", "retries", "allow_failure", "time_limit", "lines",
        "files", "range", "values"};
    std::string action;
    std::string arrayKey;
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
    }
    if (action.empty()) {
      fail(pos, "step '" + name + "' has nothing to do: give it one of command, shell, make_dir, "
                "slice, load or store");
    }
    static const std::map<std::string, Step::Kind> kinds = {
        {"command", Step::Kind::EXECUTE}, {"shell", Step::Kind::EXECUTE},
        {"make_dir", Step::Kind::MAKE_DIR}, {"slice", Step::Kind::SLICE},
        {"load", Step::Kind::LOAD}, {"store", Step::Kind::STORE}};
    step.kind = kinds.at(action);
    static const std::set<std::string> executeOnly = {"inputs", "stdin", "outputs", "stdout", "env",
                                                      "cpus"};
    for (auto& [key, value] : entries) {
      if (step.kind != Step::Kind::EXECUTE && executeOnly.count(key)) {
        fail(positions.at(key), "'" + key + "' does not apply to a " + action +
                                    " step (only to command and shell steps)");
      }
      if (step.kind == Step::Kind::STORE && key == "collect") {
        fail(positions.at(key), "a store step has no output to collect");
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
      } else if (key == "inputs") {
        parseInputs(step, table(*value, where), where, true);
      } else if (key == "stdin") {
        if (value->is_table()) {
          step.stdinFrom =
              parseEdge(*value->as_table(), posOf(value->source()), where, "stdin", nullptr, nullptr, true);
        } else {
          step.stdinFrom = parseRef(*value, where);
        }
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
      } else if (key == "retries") {
        step.retries = static_cast<uint32_t>(integer(*value, where, 0, 100));
      } else if (key == "allow_failure") {
        step.allowFailure = boolean(*value, where);
      } else if (key == "time_limit") {
        step.timeLimit = parseDuration(*value, where);
      } else {  // an array key
        step.isArray = true;
        step.arrayPos = valuePos;
        expandItems(step, key, *value, where);
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

  static ObjectKind sliceKind(const std::string& path) {
    return !path.empty() && path.back() == '/' ? ObjectKind::DIR : ObjectKind::BLOB;
  }

  void requireAbsolute(const std::string& path, SourcePos pos, const char* what) const {
    if (path.empty() || path[0] != '/') {
      fail(pos, std::string(what) + " path '" + path + "' must be absolute: it names a path on the "
                "governor (under one of its --allow-path roots)");
    }
  }

  // The server's rule (proto's checkSandboxPath), checked here so that a
  // bad file is exit 2 before anything is submitted.
  void requireSandboxPath(const std::string& path, SourcePos pos, const std::string& what) const {
    KJ_IF_MAYBE(problem, checkSandboxPath(path)) {
      fail(pos, what + ": " + problem->cStr());
    }
  }

  void parseInputs(Step& step, const toml::table& inputs, const std::string& where, bool execute) {
    for (auto&& [path, value] : sortedByPosition(inputs)) {
      StepInput input;
      input.pos = keyPos.at(path);
      input.path = path;
      if (!input.path.empty() && input.path.back() == '/') input.path.pop_back();
      requireSandboxPath(input.path, input.pos, "input");
      if (value->is_table()) {
        input.from = parseEdge(*value->as_table(), posOf(value->source()), where + "." + path,
                               (execute ? "input '" : "make_dir entry '") + path + "'",
                               execute ? &input.arg : nullptr, execute ? &input.writable : nullptr, execute);
      } else {
        input.from = parseRef(*value, where + "." + path);
      }
      step.inputs.push_back(std::move(input));
    }
  }

  // A source written as a table: { from = SOURCE, arg = ..., writable =
  // ..., stream = ..., broken_pipe = ... }. `arg` and `writable` are null
  // where the edge takes none; `execute` says whether the reader is a
  // program (only those read streams live).
  SourceRef parseEdge(const toml::table& options, SourcePos tablePos, const std::string& where,
                      const std::string& what, bool* arg, bool* writable, bool execute) {
    std::optional<SourceRef> from;
    bool stream = false;
    SourcePos streamPos;
    SourcePos writablePos;
    std::optional<std::string> brokenPipe;
    SourcePos brokenPipePos;
    std::vector<std::string> allowed = {"from"};
    if (arg != nullptr) allowed.push_back("arg");
    if (writable != nullptr) allowed.push_back("writable");
    if (execute) allowed.insert(allowed.end(), {"stream", "broken_pipe"});
    for (auto&& [option, node] : sortedByPosition(options)) {
      auto optionPos = keyPos.at(option);
      if (option == "from") {
        from = parseRef(*node, where + ".from");
      } else if (option == "arg" && arg != nullptr) {
        *arg = boolean(*node, where + ".arg");
      } else if (option == "writable" && writable != nullptr) {
        *writable = boolean(*node, where + ".writable");
        writablePos = posOf(node->source());
      } else if ((option == "stream" || option == "broken_pipe") && !execute) {
        fail(optionPos, "a " + what + " cannot be read as a stream: make_dir is a built-in step, which "
                        "reads its sources once they have ended (drop '" + option + "')");
      } else if (option == "stream") {
        stream = boolean(*node, where + ".stream");
        streamPos = posOf(node->source());
      } else if (option == "broken_pipe") {
        brokenPipe = string(*node, where + ".broken_pipe");
        brokenPipePos = posOf(node->source());
        if (*brokenPipe != "ignore" && *brokenPipe != "error") {
          fail(brokenPipePos, "'" + where + ".broken_pipe' must be \"ignore\" (the default: the producer "
                              "carries on when this reader stops early) or \"error\" (it fails), not \"" +
                              *brokenPipe + "\"");
        }
      } else if (!execute) {
        fail(optionPos, "unknown key '" + option + "' in " + what + " (a make_dir entry is \"PATH\" = SOURCE "
                        "or { from = SOURCE })");
      } else {
        fail(optionPos, "unknown key '" + option + "' in " + what + suggestion(option, allowed) +
                            " (it takes " + join(allowed, ", ") + ")");
      }
    }
    if (!from) fail(tablePos, what + " has no 'from'");
    if (stream && writable != nullptr && *writable) {
      fail(writablePos, "a stream edge cannot be writable: the program reads '" + from->text +
                            "' from a named pipe while it is written (drop stream = true to get a copy "
                            "it may change)");
    }
    if (brokenPipe && !stream) {
      fail(brokenPipePos, "broken_pipe is about a stream edge; add stream = true to read '" + from->text +
                              "' while it is written");
    }
    from->stream = stream;
    from->streamPos = streamPos;
    from->brokenPipeSet = brokenPipe.has_value();
    from->brokenPipeIsError = brokenPipe && *brokenPipe == "error";
    from->brokenPipePos = brokenPipePos;
    return *from;
  }

  void parseStore(Step& step, const toml::table& options, const std::string& where) {
    bool hasFrom = false;
    bool hasPath = false;
    for (auto&& [option, node] : sortedByPosition(options)) {
      if (option == "from") {
        step.from = parseRef(*node, where + ".from");
        hasFrom = true;
      } else if (option == "path") {
        step.path = string(*node, where + ".path");
        requireAbsolute(step.path, posOf(node->source()), "store");
        hasPath = true;
      } else if (option == "overwrite") {
        step.overwrite = boolean(*node, where + ".overwrite");
      } else {
        fail(keyPos.at(option), "unknown key '" + option + "' in store" +
                                    suggestion(option, {"from", "path", "overwrite"}) +
                                    " (it takes from, path and overwrite)");
      }
    }
    if (!hasFrom || !hasPath) {
      fail(step.actionPos, std::string("store needs ") + (hasFrom ? "" : "'from' (what to store)") +
                               (!hasFrom && !hasPath ? " and " : "") +
                               (hasPath ? "" : "'path' (where, on the governor)"));
    }
  }

  std::chrono::milliseconds parseDuration(const toml::node& node, const std::string& where) const {
    auto pos = posOf(node.source());
    if (node.is_integer()) {
      return std::chrono::seconds(integer(node, where, 1, MAX_DURATION_SECONDS));
    }
    auto text = string(node, where);
    size_t used = 0;
    double number = 0;
    try {
      number = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    std::string unit = text.substr(used);
    static const std::map<std::string, double> units = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
    auto it = units.find(unit);
    if (used == 0 || it == units.end() || !(number > 0)) {
      fail(pos, "'" + where + "' must be a duration like \"500ms\", \"30s\", \"5m\", \"2h\" or a "
                "number of seconds (got \"" + text + "\")");
    }
    // The same bound as a number of seconds; checked as a double, before
    // the conversion, which is undefined for what does not fit (found by
    // fuzz-pipeline: "1111...1s"). Under a millisecond is one.
    double ms = number * it->second;
    if (ms > MAX_DURATION_MS) {
      fail(pos, "'" + where + "' must be at most 365 days (got \"" + text + "\")");
    }
    return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(ms)));
  }

  void addItem(Step& step, std::string item, std::string name) {
    if (step.items.size() >= MAX_ITEMS) fail(step.arrayPos, "more than 1000000 items");
    ArrayItem entry;
    entry.item = std::move(item);
    entry.name = std::move(name);
    auto dot = entry.name.rfind('.');
    entry.stem = dot == std::string::npos || dot == 0 ? entry.name : entry.name.substr(0, dot);
    step.items.push_back(std::move(entry));
  }

  void expandItems(Step& step, const std::string& key, const toml::node& node, const std::string& where) {
    auto pos = posOf(node.source());
    if (key == "values") {
      expectType(node, toml::node_type::array, where);
      for (auto& value : *node.as_array()) {
        std::string text;
        if (value.is_string()) {
          text = value.as_string()->get();
        } else if (value.is_integer()) {
          text = std::to_string(value.as_integer()->get());
        } else {
          fail(posOf(value.source()), "'values' holds strings or integers, not " +
                                          std::string(typeName(value.type())));
        }
        addItem(step, text, text);
      }
    } else if (key == "range") {
      auto text = string(node, where);
      unsigned long long first = 0, last = 0;
      char tail = 0;
      if (sscanf(text.c_str(), "%llu-%llu%c", &first, &last, &tail) != 2 || text[0] == '-' || first > last) {
        fail(pos, "'range' must be \"FIRST-LAST\" (both included, FIRST <= LAST), e.g. \"1-10\" "
                  "(got \"" + text + "\")");
      }
      if (last - first >= MAX_ITEMS) fail(pos, "'range' has more than 1000000 items");
      for (auto n = first; n <= last; n++) addItem(step, std::to_string(n), std::to_string(n));
    } else if (key == "lines") {
      auto path = string(node, where);
      auto full = resolveLocal(dir, path);
      std::ifstream in(full);
      if (!in) fail(pos, "cannot read the lines file '" + path + "' (" + full + "): " + strerror(errno));
      std::string line;
      while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) addItem(step, line, line);
      }
    } else {  // files
      auto pattern = string(node, where);
      if (pattern.empty()) fail(pos, "'files' is empty: give a directory or a glob");
      auto full = resolveLocal(dir, pattern);
      if (pattern.find_first_of("*?[") == std::string::npos) {
        std::error_code ec;
        if (!fs::is_directory(full, ec)) {
          fail(pos, "'files' names '" + pattern + "' (" + full + "), which is not a directory "
                    "(give a directory or a glob such as \"data/*.txt\")");
        }
        std::vector<std::string> names;
        for (auto& entry : fs::directory_iterator(full, ec)) {
          auto name = entry.path().filename().string();
          if (name[0] != '.' && entry.is_regular_file(ec)) names.push_back(name);
        }
        if (ec) fail(pos, "cannot list '" + full + "': " + ec.message());
        std::sort(names.begin(), names.end());
        std::string prefix = pattern.back() == '/' ? pattern : pattern + "/";
        for (auto& name : names) addItem(step, prefix + name, name);
      } else {
        glob_t matches;
        int rc = glob(full.c_str(), 0, nullptr, &matches);
        if (rc == 0) {
          for (size_t i = 0; i < matches.gl_pathc; i++) {
            fs::path match(matches.gl_pathv[i]);
            auto item = fs::path(pattern).is_absolute() ? match.string()
                                                        : match.lexically_relative(dir).string();
            addItem(step, item, match.filename().string());
          }
        }
        globfree(&matches);
      }
    }
    if (step.items.empty()) {
      fail(pos, "'" + key + "' gives no items, so step '" + step.name + "' would run nothing");
    }
  }

  // Every @STEP names a step and one of its outputs; slices only cut dirs.
  void checkReferences(const Pipeline& pipeline) const {
    std::vector<std::string> stepNames;
    for (auto& s : pipeline.steps) stepNames.push_back(s.name);
    auto check = [&](const Step& step, const SourceRef& ref) {
      if (!ref.isStep) return;
      auto* producer = pipeline.find(ref.step);
      if (producer == nullptr) {
        fail(ref.pos, "unknown step '" + ref.step + "' in '" + ref.text + "'" +
                          suggestion(ref.step, stepNames));
      }
      if (producer == &step) fail(ref.pos, "step '" + step.name + "' reads its own output");
      std::vector<std::string> outputs;
      for (auto& o : producer->outputs) outputs.push_back(o.name);
      const StepOutput* output = nullptr;
      if (ref.output.empty()) {
        if (producer->outputs.size() != 1) {
          fail(ref.pos, "step '" + producer->name + "' has " + std::to_string(outputs.size()) +
                            " outputs" + (outputs.empty() ? "" : " (" + join(outputs, ", ") + ")") +
                            (outputs.empty() ? "; nothing to read" : ": name one, as @" + producer->name +
                                                                         "." + outputs[0]));
        }
        output = &producer->outputs[0];
      } else {
        for (auto& o : producer->outputs) {
          if (o.name == ref.output) output = &o;
        }
        if (output == nullptr) {
          fail(ref.pos, "step '" + producer->name + "' has no output '" + ref.output + "'" +
                            suggestion(ref.output, outputs) + " (its outputs: " +
                            (outputs.empty() ? "none" : join(outputs, ", ")) + ")");
        }
      }
      if (!ref.subPath.empty() && output->kind != ObjectKind::DIR) {
        fail(ref.pos, "'" + ref.text + "' takes a path inside output '" + producer->name + "." +
                          output->name + "', which is a file, not a directory");
      }
    };
    for (auto& step : pipeline.steps) {
      for (auto& input : step.inputs) check(step, input.from);
      if (step.stdinFrom) check(step, *step.stdinFrom);
      if (step.from) check(step, *step.from);
    }
  }

  void checkCycles(const Pipeline& pipeline) const {
    enum Color { WHITE, GREY, BLACK };
    std::map<std::string, Color> color;
    std::vector<std::string> path;
    std::function<void(const Step&)> visit = [&](const Step& step) {
      color[step.name] = GREY;
      path.push_back(step.name);
      for (auto& dep : step.dependencies()) {
        if (color[dep] == GREY) {
          auto start = std::find(path.begin(), path.end(), dep);
          std::vector<std::string> cycle(start, path.end());
          cycle.push_back(dep);
          // Point at the reference that closes the cycle.
          SourcePos pos = step.pos;
          auto note = [&](const SourceRef& ref) {
            if (ref.isStep && ref.step == dep) pos = ref.pos;
          };
          for (auto& input : step.inputs) note(input.from);
          if (step.stdinFrom) note(*step.stdinFrom);
          if (step.from) note(*step.from);
          fail(pos, "steps form a cycle: " + join(cycle, " -> "));
        }
        if (color[dep] == WHITE) visit(*pipeline.find(dep));
      }
      path.pop_back();
      color[step.name] = BLACK;
    };
    for (auto& step : pipeline.steps) {
      if (color[step.name] == WHITE) visit(step);
    }
  }

  static const char* actionName(Step::Kind kind) {
    switch (kind) {
      case Step::Kind::EXECUTE: return "program";
      case Step::Kind::MAKE_DIR: return "make_dir";
      case Step::Kind::SLICE: return "slice";
      case Step::Kind::LOAD: return "load";
      case Step::Kind::STORE: return "store";
    }
    return "?";
  }

  // Stream edges (stream = true): only a program step's stdout or file
  // output can be streamed, and it then becomes a STREAM; a plain step
  // cannot stream all items of an array step; the stream inputs of one step
  // agree on broken_pipe (the client sets it per program).
  void checkStreams(Pipeline& pipeline) const {
    for (auto& step : pipeline.steps) {
      const SourceRef* first = nullptr;
      auto edge = [&](const SourceRef& ref) {
        if (!ref.stream) return;
        if (!ref.isStep) {
          fail(ref.pos, "'" + ref.text + "' is a local file; stream = true reads another step's output "
                        "while that step runs (drop it to upload the file)");
        }
        Step* producer = nullptr;
        for (auto& s : pipeline.steps) {
          if (s.name == ref.step) producer = &s;
        }
        if (producer->kind != Step::Kind::EXECUTE) {
          fail(ref.pos, "'" + ref.text + "' is made by " + actionName(producer->kind) + " step '" +
                            producer->name + "'; only a program step's stdout or file output can be a "
                            "stream");
        }
        StepOutput* output = &producer->outputs[0];
        for (auto& o : producer->outputs) {
          if (o.name == ref.output) output = &o;
        }
        if (output->kind == ObjectKind::DIR) {
          fail(ref.pos, "'" + ref.text + "' is a directory output; a stream carries bytes (stream "
                        "stdout or a file output)");
        }
        if (producer->isArray && !step.isArray) {
          fail(ref.pos, "'" + ref.text + "' is array step '" + producer->name + "': a plain step cannot "
                        "read all its items as streams (drop stream = true to read them once they have "
                        "ended; an array step streams from an array step item by item)");
        }
        if (first != nullptr && first->brokenPipeIsError != ref.brokenPipeIsError) {
          fail(ref.brokenPipeSet ? ref.brokenPipePos : ref.streamPos,
               "step '" + step.name + "' reads its streams with broken_pipe = \"error\" and with \"ignore\"; "
               "one setting applies to all of a step's stream inputs");
        }
        if (first == nullptr) first = &ref;
        output->kind = ObjectKind::STREAM;
      };
      for (auto& input : step.inputs) edge(input.from);
      if (step.stdinFrom) edge(*step.stdinFrom);
    }
    checkStreamGroups(pipeline);
  }

  // Steps joined by stream edges start together (a group). A step of a
  // group cannot wait for the end of another step of its group, and groups
  // cannot wait for each other's ends in a circle: that would never start.
  void checkStreamGroups(const Pipeline& pipeline) const {
    std::map<std::string, std::string> parent;
    std::function<std::string(const std::string&)> group = [&](const std::string& name) {
      auto it = parent.find(name);
      if (it == parent.end() || it->second == name) return name;
      return it->second = group(it->second);
    };
    std::set<std::string> joined;
    for (auto& step : pipeline.steps) {
      auto unite = [&](const SourceRef& ref) {
        if (!ref.stream) return;
        joined.insert({ref.step, step.name});
        parent[group(ref.step)] = group(step.name);
      };
      for (auto& input : step.inputs) unite(input.from);
      if (step.stdinFrom) unite(*step.stdinFrom);
    }
    if (joined.empty()) return;
    // A retried member would need its streams again from the start, and so
    // would every other reader: the server refuses retries in a group.
    for (auto& step : pipeline.steps) {
      if (step.retries > 0 && joined.count(step.name)) {
        fail(step.pos, "step '" + step.name + "' is joined to other steps by stream edges, so it cannot "
                       "have retries (a retry would need every stream of the group again)");
      }
    }
    // Waits between groups: consumer group -> the producer groups it waits for.
    std::map<std::string, std::vector<std::pair<std::string, SourcePos>>> waits;
    for (auto& step : pipeline.steps) {
      auto wait = [&](const SourceRef& ref) {
        if (ref.stream || !ref.isStep) return;
        auto mine = group(step.name);
        auto theirs = group(ref.step);
        if (mine == theirs) {
          fail(ref.pos, "step '" + step.name + "' runs at the same time as step '" + ref.step +
                            "' (stream edges join them), so it cannot also wait for '" + ref.text +
                            "' to end (read it with stream = true)");
        }
        waits[mine].emplace_back(theirs, ref.pos);
      };
      for (auto& input : step.inputs) wait(input.from);
      if (step.stdinFrom) wait(*step.stdinFrom);
      if (step.from) wait(*step.from);
    }
    auto members = [&](const std::string& g) {
      std::vector<std::string> names;
      for (auto& step : pipeline.steps) {
        if (group(step.name) == g) names.push_back(step.name);
      }
      return join(names, "+");
    };
    enum Color { WHITE, GREY, BLACK };
    std::map<std::string, Color> color;
    std::vector<std::string> path;
    std::function<void(const std::string&)> visit = [&](const std::string& g) {
      color[g] = GREY;
      path.push_back(g);
      for (auto& [other, pos] : waits[g]) {
        if (color[other] == GREY) {
          std::vector<std::string> cycle;
          for (auto it = std::find(path.begin(), path.end(), other); it != path.end(); ++it) {
            cycle.push_back(members(*it));
          }
          cycle.push_back(members(other));
          std::string chain = cycle[0];
          for (size_t k = 1; k < cycle.size(); k++) {
            chain += (k == 1 ? " waits for the end of " : ", which waits for the end of ") + cycle[k];
          }
          fail(pos, "steps joined by stream edges start together, so these would never start: " + chain);
        }
        if (color[other] == WHITE) visit(other);
      }
      path.pop_back();
      color[g] = BLACK;
    };
    for (auto& step : pipeline.steps) {
      if (color[group(step.name)] == WHITE) visit(group(step.name));
    }
  }
};

}  // namespace

std::vector<std::string> Step::dependencies() const {
  std::vector<std::string> out;
  auto add = [&](const SourceRef& ref) {
    if (ref.isStep && std::find(out.begin(), out.end(), ref.step) == out.end()) out.push_back(ref.step);
  };
  for (auto& input : inputs) add(input.from);
  if (stdinFrom) add(*stdinFrom);
  if (from) add(*from);
  return out;
}

const Step* Pipeline::find(const std::string& stepName) const {
  for (auto& step : steps) {
    if (step.name == stepName) return &step;
  }
  return nullptr;
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

bool hasPlaceholder(const std::string& text) {
  for (auto name : PLACEHOLDERS) {
    if (text.find("{" + std::string(name) + "}") != std::string::npos) return true;
  }
  return false;
}

std::string substitutePlaceholders(const std::string& text, const ArrayItem* item, size_t index) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    bool matched = false;
    if (text[i] == '{') {
      for (auto name : PLACEHOLDERS) {
        std::string plain = "{" + std::string(name) + "}";
        std::string escaped = "{" + plain + "}";
        if (text.compare(i, escaped.size(), escaped) == 0) {
          out += plain;
          i += escaped.size();
          matched = true;
          break;
        }
        if (item != nullptr && text.compare(i, plain.size(), plain) == 0) {
          std::string_view n = name;
          out += n == "item" ? item->item
                 : n == "index" ? std::to_string(index)
                 : n == "name" ? item->name
                               : item->stem;
          i += plain.size();
          matched = true;
          break;
        }
      }
    }
    if (!matched) out += text[i++];
  }
  return out;
}

// ---- planning ----

namespace {

// Turns a parsed Pipeline into tasks; lives for one planPipeline() call.
class PipelinePlanner {
 public:
  explicit PipelinePlanner(const Pipeline& pipeline) : pipeline(pipeline) {}

  PipelinePlan plan() {
    result.name = pipeline.name;
    result.steps = pipeline.steps.size();
    for (auto* step : topologicalOrder()) planStep(*step);
    return std::move(result);
  }

 private:
  const Pipeline& pipeline;
  PipelinePlan result;
  std::map<std::string, std::vector<size_t>> stepTasks;  // step -> its task per item
  std::map<std::tuple<size_t, size_t, std::string>, size_t> slices;
  std::map<std::pair<size_t, size_t>, size_t> storedCopies;
  std::set<std::string> collectPaths;

  [[noreturn]] void fail(SourcePos pos, const std::string& message) const {
    std::string where = pipeline.file;
    if (pos.line > 0) where += ":" + std::to_string(pos.line) + ":" + std::to_string(pos.column);
    throw PipelineError(where + ": " + message);
  }

  // Steps so that producers come first; ties keep file order.
  std::vector<const Step*> topologicalOrder() const {
    std::vector<const Step*> order;
    std::set<std::string> placed;
    while (order.size() < pipeline.steps.size()) {
      for (auto& step : pipeline.steps) {
        if (placed.count(step.name)) continue;
        auto deps = step.dependencies();
        if (std::all_of(deps.begin(), deps.end(), [&](auto& d) { return placed.count(d) > 0; })) {
          order.push_back(&step);
          placed.insert(step.name);
          break;
        }
      }
    }
    return order;
  }

  // `text` for one instance: substituted with the item of an array step;
  // placeholders elsewhere are a mistake worth naming.
  std::string expand(const std::string& text, const Step& step, const ArrayItem* item, size_t index,
                     SourcePos pos, const char* what) const {
    if (item == nullptr && hasPlaceholder(text)) {
      fail(pos, std::string(what) + " '" + text + "' uses a placeholder, but step '" + step.name +
                    "' is not an array step (give it lines, files, range or values)");
    }
    return substitutePlaceholders(text, item, index);
  }

  struct Resolved {
    std::string localPath;
    bool localIsDir = false;
    size_t task = SIZE_MAX;
    size_t output = 0;
    const ArrayItem* upstreamItem = nullptr;  // set when gathering an array step
    size_t upstreamIndex = 0;
  };

  size_t outputIndex(const Step& producer, const std::string& name) const {
    for (size_t i = 0; i < producer.outputs.size(); i++) {
      if (producer.outputs[i].name == name) return i;
    }
    return 0;  // checked by the parser; empty name = the only output
  }

  // The object(s) a reference reads for instance `index` of `consumer`.
  std::vector<Resolved> resolve(const SourceRef& ref, const Step& consumer, const ArrayItem* item,
                                size_t index) {
    if (!ref.isStep) {
      auto path = resolveLocal(pipeline.dir, expand(ref.local, consumer, item, index, ref.pos, "path"));
      std::error_code ec;
      auto status = fs::status(path, ec);
      if (ec || !fs::exists(status)) {
        fail(ref.pos, "no such local file or directory '" + path + "'" +
                          (ref.text.find("@") != std::string::npos ? "" : " (step outputs are written @STEP)"));
      }
      Resolved r;
      r.localPath = path;
      r.localIsDir = fs::is_directory(status);
      return {r};
    }
    auto& producer = *pipeline.find(ref.step);
    auto& tasks = stepTasks.at(ref.step);
    size_t output = outputIndex(producer, ref.output);
    std::vector<Resolved> out;
    auto take = [&](size_t taskIndex, const ArrayItem* subItem, size_t subIndex, const ArrayItem* upstream) {
      Resolved r;
      r.task = taskIndex;
      r.output = output;
      r.upstreamItem = upstream;
      r.upstreamIndex = subIndex;
      if (!ref.subPath.empty()) {
        auto sub = expand(ref.subPath, consumer, subItem, subIndex, ref.pos, "path");
        r.task = sliceOf(taskIndex, output, sub);
        r.output = 0;
      }
      out.push_back(r);
    };
    if (!producer.isArray) {
      take(tasks[0], item, index, nullptr);
    } else if (consumer.isArray) {
      if (producer.items.size() != consumer.items.size()) {
        fail(ref.pos, "step '" + consumer.name + "' has " + std::to_string(consumer.items.size()) +
                          " items but reads array step '" + producer.name + "', which has " +
                          std::to_string(producer.items.size()) +
                          " (an array step reading an array step takes the item with its own index)");
      }
      take(tasks[index], item, index, nullptr);
    } else {
      for (size_t j = 0; j < tasks.size(); j++) take(tasks[j], &producer.items[j], j, &producer.items[j]);
    }
    return out;
  }

  size_t sliceOf(size_t task, size_t output, const std::string& path) {
    auto key = std::make_tuple(task, output, path);
    auto it = slices.find(key);
    if (it != slices.end()) return it->second;
    auto& source = result.tasks[task];
    PlannedTask slice;
    slice.kind = PlannedTask::Kind::SLICE;
    slice.name = source.name + "." + source.outputs[output].name + "/" + path;
    slice.path = path;
    slice.inputs.push_back({"", false, false, "", false, task, output});
    slice.outputs.push_back({"out", "", path.back() == '/' ? ObjectKind::DIR : ObjectKind::BLOB, ""});
    result.tasks.push_back(std::move(slice));
    slices[key] = result.tasks.size() - 1;
    return result.tasks.size() - 1;
  }

  // A program reads every stream it is given live, so one that reads a
  // stream without stream = true gets its bytes once it has ended: a concat
  // of the stream alone (a built-in, which waits for the end) makes them a
  // blob. One per stream, shared by its readers.
  Resolved afterEnd(Resolved r) {
    if (r.task == SIZE_MAX || kindOf(r) != ObjectKind::STREAM) return r;
    auto key = std::make_pair(r.task, r.output);
    auto it = storedCopies.find(key);
    if (it == storedCopies.end()) {
      auto& source = result.tasks[r.task];
      PlannedTask copy;
      copy.kind = PlannedTask::Kind::CONCAT;
      copy.name = source.name + "." + source.outputs[r.output].name + ".stored";
      copy.inputs.push_back({"", false, false, "", false, r.task, r.output});
      copy.outputs.push_back({"out", "", ObjectKind::BLOB, ""});
      result.tasks.push_back(std::move(copy));
      it = storedCopies.emplace(key, result.tasks.size() - 1).first;
    }
    r.task = it->second;
    r.output = 0;
    return r;
  }

  ObjectKind kindOf(const Resolved& r) const {
    if (r.task == SIZE_MAX) return r.localIsDir ? ObjectKind::DIR : ObjectKind::BLOB;
    return result.tasks[r.task].outputs[r.output].kind;
  }

  PlannedInput toInput(const Resolved& r, std::string path) const {
    PlannedInput in;
    in.path = std::move(path);
    in.localPath = r.localPath;
    in.localIsDir = r.localIsDir;
    in.task = r.task;
    in.output = r.output;
    return in;
  }

  // Inputs (execute) or entries (make_dir) of one instance.
  void planInputs(const Step& step, const ArrayItem* item, size_t index, PlannedTask& task) {
    std::set<std::string> paths;
    for (auto& input : step.inputs) {
      auto sources = resolve(input.from, step, item, index);
      bool gathering = sources.size() > 1 || (sources.size() == 1 && sources[0].upstreamItem != nullptr);
      if (gathering && !hasPlaceholder(input.path)) {
        fail(input.pos, "'" + input.path + "' takes all " + std::to_string(sources.size()) +
                            " items of array step '" + input.from.step +
                            "': put {index} (or {item}, {name}, {stem}) in the path, e.g. '" +
                            input.path + "/{index}'");
      }
      for (auto& source : sources) {
        auto path = gathering ? substitutePlaceholders(input.path, source.upstreamItem, source.upstreamIndex)
                              : expand(input.path, step, item, index, input.pos, "path");
        if (!paths.insert(path).second) {
          fail(input.pos, "two inputs of '" + task.name + "' are placed at '" + path + "'");
        }
        bool program = step.kind == Step::Kind::EXECUTE;
        auto in = toInput(program && !input.from.stream ? afterEnd(source) : source, path);
        in.arg = input.arg;
        in.writable = input.writable;
        in.stream = input.from.stream;
        if (input.from.stream) task.brokenPipeIsError = input.from.brokenPipeIsError;
        task.inputs.push_back(std::move(in));
      }
    }
  }

  // An output at or inside an input's path changes that input in place: it
  // is writable (as the client library would make it anyway; marked here
  // so that a dry run shows it).
  static void markInPlace(PlannedTask& task) {
    for (auto& in : task.inputs) {
      if (in.isStdin || in.path.empty()) continue;
      for (auto& out : task.outputs) {
        if (out.path == in.path || out.path.rfind(in.path + "/", 0) == 0) in.writable = true;
      }
    }
  }

  void planStdin(const Step& step, const ArrayItem* item, size_t index, PlannedTask& task) {
    auto& ref = *step.stdinFrom;
    auto sources = resolve(ref, step, item, index);
    for (auto& source : sources) {
      if (kindOf(source) == ObjectKind::DIR) {
        fail(ref.pos, "stdin '" + ref.text + "' is a directory; stdin takes a file");
      }
    }
    PlannedInput in;
    if (sources.size() == 1 && sources[0].upstreamItem == nullptr) {
      in = toInput(ref.stream ? sources[0] : afterEnd(sources[0]), "");
      in.stream = ref.stream;
      if (ref.stream) task.brokenPipeIsError = ref.brokenPipeIsError;
    } else {
      // All items of an array step, in order, on one stdin: concatenated
      // on a governor first.
      PlannedTask concat;
      concat.kind = PlannedTask::Kind::CONCAT;
      concat.name = task.name + ".stdin";
      for (auto& source : sources) concat.inputs.push_back(toInput(source, ""));
      concat.outputs.push_back({"out", "", ObjectKind::BLOB, ""});
      result.tasks.push_back(std::move(concat));
      in.task = result.tasks.size() - 1;
    }
    in.isStdin = true;
    task.inputs.push_back(std::move(in));
  }

  void planCollect(const Step& step, const ArrayItem* item, size_t index, PlannedTask& task) {
    for (auto& rule : step.collect) {
      if (step.isArray && !hasPlaceholder(rule.path)) {
        fail(rule.pos, "step '" + step.name + "' has " + std::to_string(step.items.size()) +
                           " items; put {index} (or {item}, {name}, {stem}) in its collect path "
                           "so each has its own");
      }
      auto path = resolveLocal(pipeline.dir, expand(rule.path, step, item, index, rule.pos, "collect path"));
      while (path.size() > 1 && path.back() == '/') path.pop_back();
      auto dirPath = fs::path(pipeline.dir).lexically_normal();
      auto rel = dirPath.lexically_relative(path);
      if (path == "/" || (!rel.empty() && *rel.begin() != "..")) {
        fail(rule.pos, "collect path '" + path + "' holds the pipeline itself; collected outputs "
                       "replace what is at their path");
      }
      if (!collectPaths.insert(path).second) {
        fail(rule.pos, "two outputs are collected to '" + path + "'");
      }
      size_t output = rule.output.empty() ? 0 : outputIndex(step, rule.output);
      task.outputs[output].collect = path;
    }
  }

  void planStep(const Step& step) {
    size_t count = step.isArray ? step.items.size() : 1;
    auto& mine = stepTasks[step.name];
    for (size_t i = 0; i < count; i++) {
      const ArrayItem* item = step.isArray ? &step.items[i] : nullptr;
      PlannedTask task;
      task.step = step.name;
      task.name = step.isArray ? step.name + "[" + std::to_string(i) + "]" : step.name;
      task.retries = step.retries;
      task.allowFailure = step.allowFailure;
      task.timeLimit = step.timeLimit;
      for (auto& out : step.outputs) {
        task.outputs.push_back({out.name, expand(out.path, step, item, i, out.pos, "output path"),
                                out.kind, ""});
      }
      switch (step.kind) {
        case Step::Kind::EXECUTE:
          task.kind = PlannedTask::Kind::EXECUTE;
          task.shell = step.shell;
          task.cpus = step.cpus;
          for (auto& arg : step.command) {
            task.args.push_back(expand(arg, step, item, i, step.actionPos, step.shell ? "shell line" : "argument"));
          }
          for (auto& [name, value] : step.env) {
            task.env.emplace_back(name, expand(value, step, item, i, step.actionPos, "env value"));
          }
          planInputs(step, item, i, task);
          if (step.stdinFrom) planStdin(step, item, i, task);
          markInPlace(task);
          break;
        case Step::Kind::MAKE_DIR:
          task.kind = PlannedTask::Kind::MAKE_DIR;
          planInputs(step, item, i, task);
          break;
        case Step::Kind::SLICE: {
          task.kind = PlannedTask::Kind::SLICE;
          SourceRef whole = *step.from;
          whole.subPath.clear();
          auto source = resolve(whole, step, item, i);
          if (source.size() != 1) {
            fail(step.from->pos, "slice reads one directory, but '" + step.from->text +
                                     "' names all items of an array step");
          }
          task.path = expand(step.from->subPath, step, item, i, step.from->pos, "slice path");
          task.inputs.push_back(toInput(source[0], ""));
          break;
        }
        case Step::Kind::LOAD:
          task.kind = PlannedTask::Kind::LOAD;
          task.path = expand(step.path, step, item, i, step.actionPos, "load path");
          break;
        case Step::Kind::STORE: {
          task.kind = PlannedTask::Kind::STORE;
          task.path = expand(step.path, step, item, i, step.actionPos, "store path");
          task.overwrite = step.overwrite;
          auto sources = resolve(*step.from, step, item, i);
          if (sources.size() != 1) {
            fail(step.from->pos, "store writes one object, but '" + step.from->text +
                                     "' names all items of an array step (make a store array step, "
                                     "or make_dir them first)");
          }
          task.inputs.push_back(toInput(sources[0], ""));
          break;
        }
      }
      planCollect(step, item, i, task);
      result.tasks.push_back(std::move(task));
      mine.push_back(result.tasks.size() - 1);
    }
  }
};

const char* kindName(PlannedTask::Kind kind) {
  switch (kind) {
    case PlannedTask::Kind::EXECUTE: return "execute";
    case PlannedTask::Kind::MAKE_DIR: return "make_dir";
    case PlannedTask::Kind::SLICE: return "slice";
    case PlannedTask::Kind::LOAD: return "load";
    case PlannedTask::Kind::STORE: return "store";
    case PlannedTask::Kind::CONCAT: return "concat";
  }
  return "?";
}

std::string quoted(const std::string& arg) {
  if (!arg.empty() && arg.find_first_of(" \t\n'\"\\$`|&;<>(){}*?[]#~") == std::string::npos) return arg;
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string formatDuration(std::chrono::milliseconds limit) {
  auto ms = limit.count();
  if (ms % 3600000 == 0) return std::to_string(ms / 3600000) + "h";
  if (ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

}  // namespace

PipelinePlan planPipeline(const Pipeline& pipeline) { return PipelinePlanner(pipeline).plan(); }

std::string describePlan(const PipelinePlan& plan) {
  std::ostringstream out;
  out << (plan.fromCommandLine ? "command " : "pipeline ") << plan.name << ": " << plan.steps
      << (plan.fromCommandLine ? " stage" : " step") << (plan.steps == 1 ? ", " : "s, ") << plan.tasks.size()
      << (plan.tasks.size() == 1 ? " task\n" : " tasks\n");
  auto source = [&](const PlannedInput& in) {
    if (in.task == SIZE_MAX) return std::string(in.localIsDir ? "local dir " : "local file ") + in.localPath;
    auto& producer = plan.tasks[in.task];
    return producer.name + "." + producer.outputs[in.output].name;
  };
  for (auto& task : plan.tasks) {
    out << task.name << " (" << kindName(task.kind) << ")";
    if (task.cpus) out << " cpus=" << *task.cpus;
    if (task.retries) out << " retries=" << task.retries;
    if (task.allowFailure) out << " allow_failure";
    if (task.timeLimit.count()) out << " time_limit=" << formatDuration(task.timeLimit);
    out << "\n";
    if (task.kind == PlannedTask::Kind::EXECUTE) {
      out << "  run    ";
      if (task.shell) {
        out << " sh -c " << quoted(task.args[0]);
      } else {
        for (auto& arg : task.args) out << " " << quoted(arg);
      }
      for (auto& in : task.inputs) {
        if (in.arg) out << " " << quoted(in.path);
      }
      out << "\n";
      for (auto& [name, value] : task.env) out << "  env     " << name << "=" << quoted(value) << "\n";
    }
    if (!task.path.empty()) out << "  path    " << task.path << (task.overwrite ? " (overwrite)" : "") << "\n";
    for (auto& in : task.inputs) {
      out << "  input   ";
      if (in.isStdin) {
        out << "stdin";
      } else if (!in.path.empty()) {
        out << in.path;
      }
      out << (in.isStdin || !in.path.empty() ? " <- " : "") << source(in);
      if (in.stream) out << (task.brokenPipeIsError ? " (stream; stopping early fails it)" : " (stream)");
      if (in.writable) out << " (writable)";
      out << "\n";
    }
    for (auto& o : task.outputs) {
      out << "  output  " << o.name
          << (o.kind == ObjectKind::DIR ? " (dir)" : o.kind == ObjectKind::STREAM ? " (stream)" : "");
      if (task.kind == PlannedTask::Kind::EXECUTE) out << " <- " << (o.path.empty() ? "stdout" : o.path);
      if (!o.collect.empty()) out << " => " << (o.collect == "-" ? "standard output" : o.collect);
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace squall
