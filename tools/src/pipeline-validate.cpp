// The checks of a parsed pipeline that span steps, made once every step is
// read (PipelineParser::parse, pipeline-parse.cpp): each reference names a
// step and one of its outputs, the steps form no cycle, and stream edges
// join steps that can run together. Also the model's queries they and the
// planner use (Step::dependencies, Pipeline::find).
#include "pipeline-parser.h"

#include <algorithm>
#include <functional>
#include <set>

namespace squall {

std::vector<std::string> Step::dependencies() const {
  std::vector<std::string> out;
  auto add = [&](const SourceRef& ref) {
    if (ref.isStep && std::find(out.begin(), out.end(), ref.step) == out.end()) out.push_back(ref.step);
  };
  for (auto& input : inputs) add(input.from);
  if (stdinFrom) add(*stdinFrom);
  if (from) add(*from);
  if (!actor.empty() && std::find(out.begin(), out.end(), actor) == out.end()) out.push_back(actor);
  return out;
}

const Step* Pipeline::find(const std::string& stepName) const {
  for (auto& step : steps) {
    if (step.name == stepName) return &step;
  }
  return nullptr;
}

namespace pipeline_detail {

void PipelineParser::checkReferences(const Pipeline& pipeline) const {
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
    if (producer->kind == Step::Kind::ACTOR) {
      fail(ref.pos, "'" + ref.text + "' names actor '" + producer->name + "', which has no outputs: read a "
                    "method step's (method = \"" + producer->name + ".METHOD\")");
    }
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
  std::vector<std::string> actorNames;
  for (auto& s : pipeline.steps) {
    if (s.kind == Step::Kind::ACTOR) actorNames.push_back(s.name);
  }
  for (auto& step : pipeline.steps) {
    for (auto& input : step.inputs) check(step, input.from);
    if (step.stdinFrom) check(step, *step.stdinFrom);
    if (step.from) check(step, *step.from);
    if (step.actor.empty()) continue;
    auto* actor = pipeline.find(step.actor);
    if (actor == nullptr || actor->kind != Step::Kind::ACTOR) {
      fail(step.actionPos, "step '" + step.name + "' calls a method of '" + step.actor + "', which is " +
                               (actor == nullptr ? "no actor of this file" : "a step, not an actor") +
                               suggestion(step.actor, actorNames) + " (declare it as [actor." + step.actor + "])");
    }
  }
}

void PipelineParser::checkCycles(const Pipeline& pipeline) const {
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

const char* PipelineParser::actionName(Step::Kind kind) {
  switch (kind) {
    case Step::Kind::EXECUTE: return "program";
    case Step::Kind::CALL: return "call";
    case Step::Kind::MAKE_DIR: return "make_dir";
    case Step::Kind::SLICE: return "slice";
    case Step::Kind::LOAD: return "load";
    case Step::Kind::STORE: return "store";
    case Step::Kind::ACTOR: return "actor";
  }
  return "?";
}

void PipelineParser::checkStreams(Pipeline& pipeline) const {
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
      if (!producer->actor.empty()) {
        fail(ref.pos, "'" + ref.text + "' is made by method step '" + producer->name + "'; an actor's methods "
                      "write blobs and dirs, not streams (drop stream = true to read it once it has ended)");
      }
      if (producer->kind != Step::Kind::EXECUTE && producer->kind != Step::Kind::CALL) {
        fail(ref.pos, "'" + ref.text + "' is made by " + actionName(producer->kind) + " step '" +
                          producer->name + "'; only a program step's stdout or file output, or a call "
                          "step's output, can be a stream");
      }
      StepOutput* output = &producer->outputs[0];
      for (auto& o : producer->outputs) {
        if (o.name == ref.output) output = &o;
      }
      if (output->kind == ObjectKind::DIR) {
        fail(ref.pos, "'" + ref.text + "' is a directory output; a stream carries bytes (stream "
                      "stdout, a file output or a function's blob output)");
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

void PipelineParser::checkStreamGroups(const Pipeline& pipeline) const {
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

}  // namespace pipeline_detail
}  // namespace squall
