// The pipeline file of `squall run`: a TOML description of steps (programs
// and built-ins) joined by the data they pass each other.
//
// Two stages, both pure (no server, no I/O beyond reading local files to
// expand arrays and check inputs exist), so they are unit-tested alone:
//   parsePipeline()  TOML text -> Pipeline (steps as templates, with the
//                    source position of every value for error messages);
//   planPipeline()   Pipeline -> PipelinePlan (one PlannedTask per step and
//                    array item, implicit slice/concat tasks added, every
//                    reference resolved to a task output, placeholders
//                    substituted, local files checked).
// Every problem is a PipelineError whose message starts with FILE:LINE:COL.
// The format itself is documented in docs/pipelines.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <squall/client/client.h>
#include <string>
#include <vector>

namespace squall {

// A bad pipeline file. The message names the place: "p.toml:12:5: ...".
class PipelineError : public Error {
 public:
  explicit PipelineError(const std::string& message) : Error(message) {}
};

struct SourcePos {
  uint32_t line = 0;  // 1-based; 0 = unknown (the file as a whole)
  uint32_t column = 0;
};

// Where an input's data comes from, as written (placeholders not yet
// substituted).
struct SourceRef {
  // "@step", "@step.output", "@step.output/path/in/dir" or a local path.
  std::string text;
  bool isStep = false;
  std::string step;     // isStep: the step named
  std::string output;   // isStep: empty = the step's only output
  std::string subPath;  // isStep: a path inside a dir output (sliced); '/' at the end = a dir
  std::string local;    // !isStep: a local path, relative to the pipeline file's dir
  SourcePos pos;
  // An edge marked `stream = true` (stdin, a program's or a call's input):
  // read live while the producer runs; the producing output then is a
  // stream.
  bool stream = false;
  SourcePos streamPos;
  // `broken_pipe = "error"`: this reader stopping early fails the producer.
  bool brokenPipeIsError = false;
  bool brokenPipeSet = false;
  SourcePos brokenPipePos;
};

struct StepInput {
  // Sandbox path (execute) or entry path (make_dir); may hold
  // placeholders. Empty for a call's input, which has a position instead.
  std::string path;
  SourceRef from;
  // Call: the label the function reads (`label = "..."`); may hold placeholders.
  std::string label;
  bool arg = false;  // the path is also appended to the program's arguments
  // A private copy the program may change (`writable = true`).
  bool writable = false;
  SourcePos pos;
};

struct StepOutput {
  std::string name;
  std::string path;  // sandbox path; empty = the program's stdout, or not a program's
  ObjectKind kind = ObjectKind::BLOB;
  SourcePos pos;
};

struct CollectRule {
  std::string output;  // output name; empty = the step's only output
  std::string path;    // local path (placeholders allowed), relative to the pipeline file's dir
  SourcePos pos;
};

// One value an array step runs for.
struct ArrayItem {
  std::string item;  // the line, the file path, the number or the value
  std::string name;  // for files: the file name; otherwise = item
  std::string stem;  // name without its last extension
};

// A step, or an actor (`[actor.NAME]`: Kind::ACTOR): steps and actors share
// one namespace, and an actor is ordered before the method steps that call it.
struct Step {
  enum class Kind { EXECUTE, CALL, MAKE_DIR, SLICE, LOAD, STORE, ACTOR };
  std::string name;
  Kind kind = Kind::EXECUTE;
  SourcePos pos;        // the [step.NAME] header
  SourcePos actionPos;  // the command/shell/make_dir/... value

  // execute
  std::vector<std::string> command;  // argv, or {line} when shell
  bool shell = false;
  std::optional<SourceRef> stdinFrom;
  std::vector<std::pair<std::string, std::string>> env;
  // Unset: the default (1), shared with the rest of a pipe of streams
  // (execute and call).
  std::optional<uint32_t> cpus;
  // resources = { NAME = AMOUNT, ... }: the amounts as written ("1", "0.5",
  // "2G", "all"), in order (execute and call).
  std::vector<std::pair<std::string, std::string>> resources;

  // call: "EXECUTOR/FUNCTION", and its config: the text (placeholders
  // allowed) or, with configIsFile, the local path of a file whose bytes
  // it is (placeholders allowed in the path, relative to the pipeline's
  // dir).
  std::string function;
  std::string config;
  bool configIsFile = false;
  SourcePos configPos;

  // A method step (`method = "ACTOR.METHOD"`) is a CALL on the actor the
  // pipeline's `[actor.ACTOR]` makes; `function` is then empty.
  std::string actor;
  std::string method;
  // An actor ([actor.NAME]): `function` is its "EXECUTOR/Type", its inputs
  // and config go to the constructor; it lives for the run, or, named,
  // until killed (docs/actors.md).
  uint32_t maxRestarts = 0;
  uint32_t maxCallRetries = 0;
  std::string actorName;  // `named = "..."`; empty: not named

  // Execute inputs or make_dir entries, in file order; a call's inputs in
  // the function's order.
  std::vector<StepInput> inputs;
  std::vector<StepOutput> outputs;  // in file order
  std::optional<SourceRef> from;    // slice (with subPath) and store
  std::string path;                 // load / store: absolute path on the governor
  bool overwrite = false;           // store

  // failure policy
  uint32_t retries = 0;
  bool allowFailure = false;
  std::chrono::milliseconds timeLimit{0};
  // The scheduler's hint: how long a task is expected to run (0: unknown).
  std::chrono::milliseconds expected{0};

  // An array step has items (possibly after expansion from a file, a
  // directory, a glob or a range); a plain step has none.
  bool isArray = false;
  std::vector<ArrayItem> items;
  SourcePos arrayPos;

  std::vector<CollectRule> collect;

  // The steps this one reads from (for ordering and cycle checks).
  std::vector<std::string> dependencies() const;
};

struct Pipeline {
  std::string file;  // as given, for messages
  std::string dir;   // the directory local paths are relative to
  std::string name;  // session name
  // [env]: NAME = VALUE for every program step (a step's own env wins).
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<Step> steps;  // in file order
  const Step* find(const std::string& name) const;
};

// Parses TOML text; `file` names it in messages and sets Pipeline::dir.
Pipeline parsePipeline(const std::string& text, const std::string& file);
Pipeline parsePipelineFile(const std::string& file);

// What is wrong with `function` as a call's "EXECUTOR/FUNCTION" (both names
// by proto's rule, isPlainName), as a message saying `call "FUNCTION" ...`;
// nullopt when nothing is.
std::optional<std::string> callNameProblem(const std::string& function);

// ---- the plan ----

struct PlannedInput {
  std::string path;  // sandbox / entry path; empty for stdin and a call's inputs
  bool arg = false;
  bool isStdin = false;
  // The data: a local file or dir to upload, or a planned task's output.
  std::string localPath;  // non-empty: upload this
  bool localIsDir = false;
  size_t task = SIZE_MAX;  // index in PipelinePlan::tasks
  size_t output = 0;
  bool stream = false;  // read live from a running producer (its output is a stream)
  // Execute: a private copy the program may change (asked for, or because
  // an output of the task is at or inside its path: in place).
  bool writable = false;
  std::string label;  // call: the label the function reads
};

struct PlannedOutput {
  std::string name;
  std::string path;  // sandbox path (execute); empty = stdout, or not a program's
  ObjectKind kind = ObjectKind::BLOB;
  // Local path to write it to when done; empty = not collected; "-" =
  // squall's standard output (squall run -c).
  std::string collect;
};

struct PlannedTask {
  enum class Kind { EXECUTE, CALL, MAKE_DIR, SLICE, LOAD, STORE, CONCAT, ACTOR };
  Kind kind = Kind::EXECUTE;
  std::string step;  // the step it comes from ("" for none)
  std::string name;  // "count[3]", "split.parts/part-00" for an implicit slice
  std::vector<std::string> args;
  bool shell = false;
  std::vector<std::pair<std::string, std::string>> env;
  std::optional<uint32_t> cpus;  // unset: the default, see Step::cpus
  std::vector<std::pair<std::string, std::string>> resources;  // see Step::resources
  // call: "EXECUTOR/FUNCTION", its config bytes, and the local file they
  // were read from ("" for config text), for describePlan.
  std::string function;
  std::string config;
  std::string configFile;
  // A method call: the index of its actor's task (Kind::ACTOR) in
  // PipelinePlan::tasks, and the method; SIZE_MAX for any other task.
  size_t actor = SIZE_MAX;
  std::string method;
  // An actor (Kind::ACTOR; `function` is its type): see Step.
  uint32_t maxRestarts = 0;
  uint32_t maxCallRetries = 0;
  std::string actorName;
  // Its stream inputs: stopping early fails the producer (broken_pipe = "error").
  bool brokenPipeIsError = false;
  std::vector<PlannedInput> inputs;
  std::vector<PlannedOutput> outputs;
  std::string path;  // slice: path inside input 0; load/store: path on the governor
  bool overwrite = false;
  uint32_t retries = 0;
  bool allowFailure = false;
  std::chrono::milliseconds timeLimit{0};
  // The scheduler's hint: how long a task is expected to run (0: unknown).
  std::chrono::milliseconds expected{0};
};

struct PipelinePlan {
  std::string name;
  size_t steps = 0;        // or stages, for a command line
  size_t actors = 0;       // [actor.NAME] tables (each also a task)
  bool fromCommandLine = false;  // squall run -c
  // Topologically ordered: every input's task comes before its consumer.
  std::vector<PlannedTask> tasks;
};

PipelinePlan planPipeline(const Pipeline& pipeline);

// The plan as `squall run --dry-run` prints it.
std::string describePlan(const PipelinePlan& plan);

// Why collecting an output of `kind` into `path` is refused, or nullopt:
// nothing of the user's is replaced but a file by a file output (a
// directory output merges into a directory; docs/pipelines.md).
std::optional<std::string> collectRefusal(const std::string& path, ObjectKind kind);

// Replaces {item}, {index}, {name} and {stem} (and `{{item}}` by a literal
// `{item}`); other braces are left alone so shell and awk code need no
// escaping. Exposed for tests.
std::string substitutePlaceholders(const std::string& text, const ArrayItem* item, size_t index);
// True if `text` holds one of the placeholders.
bool hasPlaceholder(const std::string& text);

}  // namespace squall
