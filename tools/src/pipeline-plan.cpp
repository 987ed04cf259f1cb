// Plans a parsed Pipeline into tasks (planPipeline: one per step and array
// item, implicit slice and concat tasks added, references resolved,
// placeholders substituted, local files checked), and describes a plan as
// `squall run --dry-run` prints it. See pipeline.h.
#include "pipeline-parser.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

namespace squall {

namespace fs = std::filesystem;

using pipeline_detail::resolveLocal;

namespace {

const char* const PLACEHOLDERS[] = {"item", "index", "name", "stem"};

// A config travels whole in the submit and in one call to the executor:
// as much as an upload may be.
constexpr uintmax_t MAX_CONFIG_BYTES = 48u << 20;

}  // namespace

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
    for (auto& step : pipeline.steps) (step.kind == Step::Kind::ACTOR ? result.actors : result.steps)++;
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
  std::map<std::string, std::string> configFiles;  // config_file path -> its bytes

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
    if (item == nullptr && hasPlaceholder(text) && step.kind == Step::Kind::ACTOR) {
      fail(pos, std::string(what) + " '" + text + "' uses a placeholder, but an actor is one instance, not an array "
                "(write {{item}} for the text itself)");
    }
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

  // Inputs (execute, call) or entries (make_dir) of one instance. A call
  // takes all items of an array step as that many inputs, in item order.
  void planInputs(const Step& step, const ArrayItem* item, size_t index, PlannedTask& task) {
    // A function, a method and a constructor take their inputs by position.
    bool call = step.kind == Step::Kind::CALL || step.kind == Step::Kind::ACTOR;
    // Programs and functions read every stream they are given live.
    bool live = call || step.kind == Step::Kind::EXECUTE;
    std::set<std::string> paths;
    for (auto& input : step.inputs) {
      auto sources = resolve(input.from, step, item, index);
      bool gathering = sources.size() > 1 || (sources.size() == 1 && sources[0].upstreamItem != nullptr);
      if (gathering && !call && !hasPlaceholder(input.path)) {
        fail(input.pos, "'" + input.path + "' takes all " + std::to_string(sources.size()) +
                            " items of array step '" + input.from.step +
                            "': put {index} (or {item}, {name}, {stem}) in the path, e.g. '" +
                            input.path + "/{index}'");
      }
      // Placeholders name the producing item when gathering, else this one.
      auto place = [&](const std::string& text, const Resolved& source, const char* what) {
        return gathering ? substitutePlaceholders(text, source.upstreamItem, source.upstreamIndex)
                         : expand(text, step, item, index, input.pos, what);
      };
      for (auto& source : sources) {
        auto path = call ? "" : place(input.path, source, "path");
        if (!call && !paths.insert(path).second) {
          fail(input.pos, "two inputs of '" + task.name + "' are placed at '" + path + "'");
        }
        auto in = toInput(live && !input.from.stream ? afterEnd(source) : source, path);
        in.label = place(input.label, source, "label");
        in.arg = input.arg;
        in.writable = input.writable;
        in.stream = input.from.stream;
        if (input.from.stream) task.brokenPipeIsError = input.from.brokenPipeIsError;
        task.inputs.push_back(std::move(in));
      }
    }
  }

  // The bytes of a config_file (an absolute path), read once however many
  // tasks give them.
  const std::string& configBytes(const std::string& path, SourcePos pos) {
    auto it = configFiles.find(path);
    if (it != configFiles.end()) return it->second;
    std::error_code ec;
    if (fs::is_directory(path, ec)) fail(pos, "config_file '" + path + "' is a directory; a config is one file's bytes");
    auto size = fs::file_size(path, ec);
    if (ec) fail(pos, "cannot read config_file '" + path + "': " + ec.message());
    if (size > MAX_CONFIG_BYTES) {
      fail(pos, "config_file '" + path + "' is larger than 48 MiB, the most a config may be (give big data "
                "to the function as an input)");
    }
    std::ifstream in(path, std::ios::binary);
    std::string bytes(size, '\0');
    if (!in.read(bytes.data(), static_cast<std::streamsize>(size))) fail(pos, "cannot read config_file '" + path + "'");
    return configFiles.emplace(path, std::move(bytes)).first->second;
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
      task.resources = step.resources;
      task.allowFailure = step.allowFailure;
      task.timeLimit = step.timeLimit;
      task.expected = step.expected;
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
          // The pipeline's [env], then the step's (a name set twice: the
          // step's value).
          for (auto& var : pipeline.env) {
            bool own = std::any_of(step.env.begin(), step.env.end(), [&](auto& e) { return e.first == var.first; });
            if (!own) task.env.emplace_back(var.first, expand(var.second, step, item, i, step.actionPos, "env value"));
          }
          for (auto& [name, value] : step.env) {
            task.env.emplace_back(name, expand(value, step, item, i, step.actionPos, "env value"));
          }
          planInputs(step, item, i, task);
          if (step.stdinFrom) planStdin(step, item, i, task);
          markInPlace(task);
          break;
        case Step::Kind::CALL:
        case Step::Kind::ACTOR:
          task.kind = step.kind == Step::Kind::ACTOR ? PlannedTask::Kind::ACTOR : PlannedTask::Kind::CALL;
          task.function = step.function;
          task.cpus = step.cpus;
          task.maxRestarts = step.maxRestarts;
          task.maxCallRetries = step.maxCallRetries;
          task.actorName = step.actorName;
          if (!step.actor.empty()) {
            task.actor = stepTasks.at(step.actor).at(0);
            task.method = step.method;
          }
          if (step.configIsFile) {
            task.configFile = resolveLocal(pipeline.dir, expand(step.config, step, item, i, step.configPos,
                                                                "config_file path"));
            task.config = configBytes(task.configFile, step.configPos);
          } else {
            task.config = expand(step.config, step, item, i, step.configPos, "config");
          }
          planInputs(step, item, i, task);
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
    case PlannedTask::Kind::CALL: return "call";
    case PlannedTask::Kind::ACTOR: return "actor";
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

// What collecting into `path` will do with what is there (run-command.cpp,
// writeCollected), for the dry run.
std::string collectNote(const std::string& path, ObjectKind kind) {
  if (path == "-") return "";
  std::error_code ec;
  auto there = fs::symlink_status(path, ec);
  if (ec || !fs::exists(there)) return "";
  if (auto refused = collectRefusal(path, kind)) return " (refused: " + *refused + ")";
  return kind == ObjectKind::DIR ? " (a directory is there: merged into it, nothing of it removed)"
                                 : " (replaces the file there)";
}


// A config as a dry run shows it: short text as it is, else its size.
std::string describeConfig(const std::string& config) {
  bool text = config.size() <= 60 && std::none_of(config.begin(), config.end(), [](char c) {
                return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
              });
  return text ? quoted(config) : std::to_string(config.size()) + " bytes";
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

std::optional<std::string> collectRefusal(const std::string& path, ObjectKind kind) {
  std::error_code ec;
  auto there = fs::symlink_status(path, ec);
  if (ec || !fs::exists(there)) return std::nullopt;
  bool dir = fs::is_directory(there);
  if (kind == ObjectKind::DIR && !dir) return "'" + path + "' is there and is not a directory; it is not replaced";
  if (kind != ObjectKind::DIR && dir) return "'" + path + "' is a directory; it is not replaced by a file";
  return std::nullopt;
}

std::string describePlan(const PipelinePlan& plan) {
  std::ostringstream out;
  out << (plan.fromCommandLine ? "command " : "pipeline ") << plan.name << ": " << plan.steps
      << (plan.fromCommandLine ? " stage" : " step") << (plan.steps == 1 ? ", " : "s, ");
  if (plan.actors > 0) out << plan.actors << (plan.actors == 1 ? " actor, " : " actors, ");
  out << plan.tasks.size() << (plan.tasks.size() == 1 ? " task\n" : " tasks\n");
  auto source = [&](const PlannedInput& in) {
    if (in.task == SIZE_MAX) return std::string(in.localIsDir ? "local dir " : "local file ") + in.localPath;
    auto& producer = plan.tasks[in.task];
    return producer.name + "." + producer.outputs[in.output].name;
  };
  for (auto& task : plan.tasks) {
    out << task.name << " (" << (task.actor != SIZE_MAX ? "method" : kindName(task.kind)) << ")";
    if (task.cpus) out << " cpus=" << *task.cpus;
    for (auto& [name, amount] : task.resources) out << " " << name << "=" << amount;
    if (task.retries) out << " retries=" << task.retries;
    if (task.allowFailure) out << " allow_failure";
    if (task.timeLimit.count()) out << " time_limit=" << formatDuration(task.timeLimit);
    if (task.expected.count()) out << " expected=" << formatDuration(task.expected);
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
    bool call = task.kind == PlannedTask::Kind::CALL || task.kind == PlannedTask::Kind::ACTOR;
    if (task.kind == PlannedTask::Kind::ACTOR) {
      out << "  actor   " << task.function;
      if (!task.actorName.empty()) out << " named " << quoted(task.actorName);
      if (task.maxRestarts) out << " max_restarts=" << task.maxRestarts;
      if (task.maxCallRetries) out << " max_call_retries=" << task.maxCallRetries;
      out << "\n";
    } else if (task.actor != SIZE_MAX) {
      out << "  method  " << plan.tasks[task.actor].name << "." << task.method << "\n";
    } else if (call) {
      out << "  call    " << task.function << "\n";
    }
    if (call) {
      if (!task.configFile.empty()) {
        out << "  config  " << task.config.size() << " bytes from local file " << task.configFile << "\n";
      } else if (!task.config.empty()) {
        out << "  config  " << describeConfig(task.config) << "\n";
      }
    }
    if (!task.path.empty()) out << "  path    " << task.path << (task.overwrite ? " (overwrite)" : "") << "\n";
    for (size_t i = 0; i < task.inputs.size(); i++) {
      auto& in = task.inputs[i];
      out << "  input   ";
      if (in.isStdin) {
        out << "stdin";
      } else if (call) {
        out << i << (in.label.empty() ? "" : " (label " + quoted(in.label) + ")");
      } else if (!in.path.empty()) {
        out << in.path;
      }
      out << (in.isStdin || call || !in.path.empty() ? " <- " : "") << source(in);
      if (in.stream) out << (task.brokenPipeIsError ? " (stream; stopping early fails it)" : " (stream)");
      if (in.writable) out << " (writable)";
      out << "\n";
    }
    for (auto& o : task.outputs) {
      out << "  output  " << o.name
          << (o.kind == ObjectKind::DIR ? " (dir)" : o.kind == ObjectKind::STREAM ? " (stream)" : "");
      if (task.kind == PlannedTask::Kind::EXECUTE) out << " <- " << (o.path.empty() ? "stdout" : o.path);
      if (!o.collect.empty()) {
        out << " => " << (o.collect == "-" ? "standard output" : o.collect) << collectNote(o.collect, o.kind);
      }
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace squall
