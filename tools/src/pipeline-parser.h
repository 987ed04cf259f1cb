// The parser of pipeline files (pipeline.h: parsePipeline), whose code two
// files share: pipeline-parse.cpp reads the TOML into the model step by
// step, pipeline-validate.cpp checks what spans steps once all are read.
// Also the helpers they and the planner (pipeline-plan.cpp) share.
#pragma once

#include "pipeline.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <toml++/toml.h>
#include <utility>
#include <vector>

namespace squall {
namespace pipeline_detail {

// A step's, output's or variable's name: letters, digits, '_' and '-'.
bool validName(std::string_view name);
// "a table", "a string", ... (for messages).
const char* typeName(toml::node_type type);
SourcePos posOf(const toml::source_region& region);
// " (did you mean 'x'?)" when one candidate is close, else "".
std::string suggestion(std::string_view word, const std::vector<std::string>& candidates);
std::string join(const std::vector<std::string>& parts, const char* separator);
// `path` as it is if absolute, else relative to `dir`; normalised.
std::string resolveLocal(const std::string& dir, const std::string& path);

// Reads one pipeline file's TOML into the model. Holds the file name for
// messages; lives for one parse.
class PipelineParser {
 public:
  PipelineParser(std::string file, std::string dir) : file(std::move(file)), dir(std::move(dir)) {}

  [[noreturn]] void fail(SourcePos pos, const std::string& message) const;

  Pipeline parse(const std::string& text);

 private:
  std::string file;
  std::string dir;
  // Key positions of the table last sorted (toml++ keeps keys in a map).
  std::map<std::string, SourcePos> keyPos;

  // pipeline-parse.cpp: one step at a time.

  // The table's entries in file order (toml++ iterates them sorted by key);
  // records each key's position in keyPos.
  std::vector<std::pair<std::string, const toml::node*>> sortedByPosition(const toml::table& table);

  void expectType(const toml::node& node, toml::node_type type, const std::string& what) const;
  std::string string(const toml::node& node, const std::string& what) const;
  bool boolean(const toml::node& node, const std::string& what) const;
  int64_t integer(const toml::node& node, const std::string& what, int64_t min, int64_t max) const;
  const toml::table& table(const toml::node& node, const std::string& what) const;
  SourceRef parseRef(const toml::node& node, const std::string& what);
  Step parseStep(const std::string& name, SourcePos pos, const toml::node& node);
  // [actor.NAME]: a Step of Kind::ACTOR.
  Step parseActor(const std::string& name, SourcePos pos, const toml::node& node);
  // `method = "ACTOR.METHOD"` into step.actor and step.method.
  void parseMethod(Step& step, const std::string& text, SourcePos pos) const;
  // `config` (text) or `config_file` (a local path).
  void parseConfig(Step& step, const std::string& key, const toml::node& value, const std::string& where);
  // resources = { NAME = AMOUNT, ... }
  void parseResources(Step& step, const toml::node& value, const std::string& where);
  // "call step 'x'", "method step 'x'" or "actor 'x'", for messages.
  static std::string what(const Step& step);

  // pipeline-parse-edges.cpp: what names data, durations, array items.

  static ObjectKind sliceKind(const std::string& path);
  void requireAbsolute(const std::string& path, SourcePos pos, const char* what) const;

  // The server's rule (proto's checkSandboxPath), checked here so that a
  // bad file is exit 2 before anything is submitted.
  void requireSandboxPath(const std::string& path, SourcePos pos, const std::string& what) const;

  void parseInputs(Step& step, const toml::table& inputs, const std::string& where, bool execute);
  // A call's `inputs = [SOURCE, ...]` and `outputs = ["NAME", "DIR/", ...]`.
  void parseCallInputs(Step& step, const toml::node& node, const std::string& where);
  void parseCallOutputs(Step& step, const toml::node& node, const std::string& where);

  // The keys a source written as a table takes besides `from`: where to
  // put `arg`, `writable` and `label` (null: not taken), and whether the
  // reader reads streams live (programs and calls; not make_dir) and can
  // stop reading early on purpose (programs: `broken_pipe`).
  struct EdgeKeys {
    bool* arg = nullptr;
    bool* writable = nullptr;
    std::string* label = nullptr;
    bool stream = false;
    bool brokenPipe = false;
  };
  // A source written as a table: { from = SOURCE, ... } with `keys`.
  SourceRef parseEdge(const toml::table& options, SourcePos tablePos, const std::string& where,
                      const std::string& what, EdgeKeys keys);

  void parseStore(Step& step, const toml::table& options, const std::string& where);
  std::chrono::milliseconds parseDuration(const toml::node& node, const std::string& where) const;
  void addItem(Step& step, std::string item, std::string name);
  void expandItems(Step& step, const std::string& key, const toml::node& node, const std::string& where);

  // pipeline-validate.cpp: what spans steps, once all are read.

  // Every @STEP names a step and one of its outputs; slices only cut dirs.
  void checkReferences(const Pipeline& pipeline) const;

  void checkCycles(const Pipeline& pipeline) const;
  static const char* actionName(Step::Kind kind);

  // Stream edges (stream = true): only a program step's stdout or file
  // output, or a call step's blob output, can be streamed, and it then
  // becomes a STREAM; a plain step
  // cannot stream all items of an array step; the stream inputs of one step
  // agree on broken_pipe (the client sets it per program).
  void checkStreams(Pipeline& pipeline) const;

  // Steps joined by stream edges start together (a group). A step of a
  // group cannot wait for the end of another step of its group, and groups
  // cannot wait for each other's ends in a circle: that would never start.
  void checkStreamGroups(const Pipeline& pipeline) const;
};

}  // namespace pipeline_detail
}  // namespace squall
