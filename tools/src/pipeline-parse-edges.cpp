// Parses the parts of a pipeline step that name data (docs/pipelines.md):
// its inputs and a call's outputs, the edges between steps, store targets,
// durations, and the items of an array step. The rest of a step is in
// pipeline-parse.cpp.
#include "pipeline-parser.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <glob.h>
#include <set>
#include <squall/proto/sandbox-path.h>
#include <squall/proto/spec-names.h>
#include <toml++/toml.h>

namespace squall {

namespace fs = std::filesystem;

namespace {

constexpr size_t MAX_ITEMS = 1000000;
// time_limit: at most 365 days, whether in seconds or with a unit.
constexpr int64_t MAX_DURATION_SECONDS = 365LL * 24 * 3600;
constexpr double MAX_DURATION_MS = MAX_DURATION_SECONDS * 1000.0;

}  // namespace

namespace pipeline_detail {

ObjectKind PipelineParser::sliceKind(const std::string& path) {
  return !path.empty() && path.back() == '/' ? ObjectKind::DIR : ObjectKind::BLOB;
}

void PipelineParser::requireAbsolute(const std::string& path, SourcePos pos, const char* what) const {
  if (path.empty() || path[0] != '/') {
    fail(pos, std::string(what) + " path '" + path + "' must be absolute: it names a path on the "
              "governor (under one of its --allow-path roots)");
  }
}

void PipelineParser::requireSandboxPath(const std::string& path, SourcePos pos, const std::string& what) const {
  KJ_IF_MAYBE(problem, checkSandboxPath(path)) {
    fail(pos, what + ": " + problem->cStr());
  }
}

void PipelineParser::parseInputs(Step& step, const toml::table& inputs, const std::string& where, bool execute) {
  for (auto&& [path, value] : sortedByPosition(inputs)) {
    StepInput input;
    input.pos = keyPos.at(path);
    input.path = path;
    if (!input.path.empty() && input.path.back() == '/') input.path.pop_back();
    requireSandboxPath(input.path, input.pos, "input");
    if (value->is_table()) {
      EdgeKeys keys;
      if (execute) keys = {.arg = &input.arg, .writable = &input.writable, .stream = true, .brokenPipe = true};
      input.from = parseEdge(*value->as_table(), posOf(value->source()), where + "." + path,
                             (execute ? "input '" : "make_dir entry '") + path + "'", keys);
    } else {
      input.from = parseRef(*value, where + "." + path);
    }
    step.inputs.push_back(std::move(input));
  }
}

void PipelineParser::parseCallInputs(Step& step, const toml::node& node, const std::string& where) {
  if (!node.is_array()) {
    fail(posOf(node.source()), "'inputs' of " + what(step) + " must be a list [SOURCE, ...], "
                               "not " + typeName(node.type()) + ": a function takes its inputs by position");
  }
  auto& list = *node.as_array();
  for (size_t i = 0; i < list.size(); i++) {
    auto& value = list[i];
    StepInput input;
    input.pos = posOf(value.source());
    auto what = where + "[" + std::to_string(i) + "]";
    if (value.is_table()) {
      input.from = parseEdge(*value.as_table(), input.pos, what, "input " + std::to_string(i),
                             {.label = &input.label, .stream = true});
    } else {
      input.from = parseRef(value, what);
    }
    step.inputs.push_back(std::move(input));
  }
}

void PipelineParser::parseCallOutputs(Step& step, const toml::node& node, const std::string& where) {
  if (!node.is_array()) {
    fail(posOf(node.source()), "'outputs' of " + what(step) + " must be a list of names [\"NAME\", "
                               "...] in the function's order (a name ending in '/' is a dir output), not " +
                               typeName(node.type()));
  }
  auto& list = *node.as_array();
  for (size_t i = 0; i < list.size(); i++) {
    auto outPos = posOf(list[i].source());
    auto name = string(list[i], where + "[" + std::to_string(i) + "]");
    bool isDir = !name.empty() && name.back() == '/';
    if (isDir) name.pop_back();
    if (!validName(name)) {
      fail(outPos, "output name '" + name + "' must be letters, digits, '_' and '-' (ending in '/' for a dir "
                   "output)");
    }
    step.outputs.push_back({name, "", isDir ? ObjectKind::DIR : ObjectKind::BLOB, outPos});
  }
}

SourceRef PipelineParser::parseEdge(const toml::table& options, SourcePos tablePos, const std::string& where,
                                    const std::string& what, EdgeKeys keys) {
  std::optional<SourceRef> from;
  bool stream = false;
  SourcePos streamPos;
  SourcePos writablePos;
  std::optional<std::string> brokenPipe;
  SourcePos brokenPipePos;
  std::vector<std::string> allowed = {"from"};
  if (keys.arg != nullptr) allowed.push_back("arg");
  if (keys.writable != nullptr) allowed.push_back("writable");
  if (keys.label != nullptr) allowed.push_back("label");
  if (keys.stream) allowed.push_back("stream");
  if (keys.brokenPipe) allowed.push_back("broken_pipe");
  for (auto&& [option, node] : sortedByPosition(options)) {
    auto optionPos = keyPos.at(option);
    if (option == "from") {
      from = parseRef(*node, where + ".from");
    } else if (option == "arg" && keys.arg != nullptr) {
      *keys.arg = boolean(*node, where + ".arg");
    } else if (option == "writable" && keys.writable != nullptr) {
      *keys.writable = boolean(*node, where + ".writable");
      writablePos = posOf(node->source());
    } else if (option == "label" && keys.label != nullptr) {
      *keys.label = string(*node, where + ".label");
    } else if ((option == "stream" || option == "broken_pipe") && !keys.stream) {
      fail(optionPos, "a " + what + " cannot be read as a stream: make_dir is a built-in step, which "
                      "reads its sources once they have ended (drop '" + option + "')");
    } else if (option == "stream") {
      stream = boolean(*node, where + ".stream");
      streamPos = posOf(node->source());
    } else if (option == "broken_pipe" && keys.brokenPipe) {
      brokenPipe = string(*node, where + ".broken_pipe");
      brokenPipePos = posOf(node->source());
      if (*brokenPipe != "ignore" && *brokenPipe != "error") {
        fail(brokenPipePos, "'" + where + ".broken_pipe' must be \"ignore\" (the default: the producer "
                            "carries on when this reader stops early) or \"error\" (it fails), not \"" +
                            *brokenPipe + "\"");
      }
    } else if (!keys.stream) {
      fail(optionPos, "unknown key '" + option + "' in " + what + " (a make_dir entry is \"PATH\" = SOURCE "
                      "or { from = SOURCE })");
    } else {
      fail(optionPos, "unknown key '" + option + "' in " + what + suggestion(option, allowed) +
                          " (it takes " + join(allowed, ", ") + ")");
    }
  }
  if (!from) fail(tablePos, what + " has no 'from'");
  if (stream && keys.writable != nullptr && *keys.writable) {
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

void PipelineParser::parseStore(Step& step, const toml::table& options, const std::string& where) {
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

std::chrono::milliseconds PipelineParser::parseDuration(const toml::node& node, const std::string& where) const {
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

void PipelineParser::addItem(Step& step, std::string item, std::string name) {
  if (step.items.size() >= MAX_ITEMS) fail(step.arrayPos, "more than 1000000 items");
  ArrayItem entry;
  entry.item = std::move(item);
  entry.name = std::move(name);
  auto dot = entry.name.rfind('.');
  entry.stem = dot == std::string::npos || dot == 0 ? entry.name : entry.name.substr(0, dot);
  step.items.push_back(std::move(entry));
}

void PipelineParser::expandItems(Step& step, const std::string& key, const toml::node& node, const std::string& where) {
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

}  // namespace pipeline_detail
}  // namespace squall
