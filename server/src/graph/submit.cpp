#include "submit.h"

#include "b-level.h"
#include "json-nesting.h"

#include <algorithm>
#include <cstring>
#include <capnp/serialize.h>
#include <deque>
#include <functional>
#include <kj/debug.h>
#include <kj/function.h>
#include <squall/proto/errors.h>
#include <squall/proto/resource-amounts.h>
#include <squall/proto/sandbox-path.h>
#include <squall/proto/spec-names.h>
#include <set>
#include <unordered_set>
#include <utility>
#include <xxhash.h>

namespace squall {

namespace {

// A call or method call makes as many outputs as its function declares
// (`declared`, by name); FAILED naming them otherwise.
void requireOutputCount(kj::StringPtr label, kj::StringPtr what, kj::StringPtr name,
                        const std::vector<std::string>& declared, size_t outputs) {
  if (declared.size() == outputs) return;
  std::string names;
  for (auto& o : declared) names += (names.empty() ? "" : ", ") + o;
  SQUALL_FAIL(label, ": ", what, " ", name, " makes ", declared.size(), " output(s) (", names.c_str(),
              "); the task has ", outputs);
}


kj::String taskLabel(wire::TaskSpec::Reader spec) {
  if (spec.getName().size() > 0) return kj::str("task ", spec.getId().getN(), " (", spec.getName(), ")");
  return kj::str("task ", spec.getId().getN());
}

// Names starting with this are the governor's (it keeps none in a sandbox
// today; reserved so that it never meets a task's file of the same name).
constexpr const char* RESERVED_PREFIX = ".squall-";

// The sandbox paths of an execute task: each input at its own path, each
// output at its own path, none under a reserved name, and an output at or
// inside an input's path only when that input is writable (the output is
// the input changed in place: of the same kind, or a file inside a dir).
void checkExecutePaths(kj::StringPtr label, wire::TaskSpec::Reader task,
                       kj::FunctionParam<wire::ObjectKind(uint)> inputKind,
                       kj::FunctionParam<wire::ObjectKind(uint)> outputKind) {
  auto config = task.getConfig().getExecute();
  auto inputs = task.getInputs();
  auto outputs = task.getOutputs();
  auto reserved = [&](kj::StringPtr what, const std::string& path) {
    SQUALL_REQUIRE(path.compare(0, strlen(RESERVED_PREFIX), RESERVED_PREFIX) != 0, label, ": ", what,
                   " path '", path, "' is reserved: names starting with '", RESERVED_PREFIX,
                   "' belong to the governor");
  };
  struct Placed {
    std::string path;
    uint index;
  };
  std::vector<Placed> placed;
  for (uint i = 0; i < inputs.size(); i++) {
    uint64_t n = inputs[i].getObject().getN();
    if (static_cast<int32_t>(i) == config.getStdinInput() && inputs[i].getPath().size() == 0) {
      SQUALL_REQUIRE(!inputs[i].getWritable(), label, ": input ", n,
                     " is writable but has no path in the sandbox (it is only fed on stdin)");
      continue;
    }
    KJ_IF_MAYBE(problem, checkSandboxPath(inputs[i].getPath())) {
      SQUALL_FAIL(label, ": input ", i, ": ", *problem);
    }
    auto path = normalisedSandboxPath(inputs[i].getPath().cStr());
    reserved("input", path);
    for (auto& other : placed) {
      SQUALL_REQUIRE(other.path != path, label, ": two inputs at path '", inputs[i].getPath(), "'");
    }
    placed.push_back({path, i});
  }
  auto mappings = config.getOutputs();
  std::vector<std::string> outputPaths;
  for (uint o = 0; o < mappings.size(); o++) {
    if (mappings[o].isStdout()) continue;
    KJ_IF_MAYBE(problem, checkSandboxPath(mappings[o].getPath())) {
      SQUALL_FAIL(label, ": output: ", *problem);
    }
    auto path = normalisedSandboxPath(mappings[o].getPath().cStr());
    reserved("output", path);
    uint64_t out = outputs[o].getN();
    for (auto& other : outputPaths) {
      SQUALL_REQUIRE(other != path, label, ": two outputs at path '", mappings[o].getPath(), "'");
    }
    outputPaths.push_back(path);
    for (auto& in : placed) {
      if (!isAtOrInside(path, in.path)) continue;
      uint64_t n = inputs[in.index].getObject().getN();
      auto kind = inputKind(in.index);
      SQUALL_REQUIRE(kind != wire::ObjectKind::STREAM, label, ": output ", out, " at '", path,
                     "' would change input ", n, " in place, but that input is a stream (a program "
                     "cannot change a stream; read it into a file first)");
      if (path == in.path) {
        SQUALL_REQUIRE(inputs[in.index].getWritable(), label, ": output ", out, " at '", path,
                       "' would change input ", n, " in place, but that input is not writable "
                       "(mark it writable)");
        SQUALL_REQUIRE(outputKind(o) == kind, label, ": output ",
                       out, " at '", path, "' changes input ", n, " in place, so it must be a ",
                       kindName(kind), " like the input, not a ", kindName(outputKind(o)));
      } else {
        SQUALL_REQUIRE(kind == wire::ObjectKind::DIR, label, ": output ", out, " at '", path,
                       "' is inside input ", n, ", which is a ", kindName(kind), ", not a dir");
        SQUALL_REQUIRE(inputs[in.index].getWritable(), label, ": output ", out, " at '", path,
                       "' is inside input ", n, ", which is not writable (mark it writable)");
      }
    }
  }
}

}  // namespace

std::vector<uint32_t> streamGroupCharges(const std::vector<wire::TaskSpec::Reader>& members) {
  std::vector<uint32_t> charges(members.size(), 0);
  bool anyAsked = false;
  for (size_t i = 0; i < members.size(); i++) {
    auto resources = members[i].getResources();
    if (resources.getCpusAsked()) {
      charges[i] = resources.getCpus();
      anyAsked = true;
    }
  }
  if (!anyAsked && !charges.empty()) charges[0] = 1;
  return charges;
}

PendingSubmit::~PendingSubmit() { release(); }

void PendingSubmit::drop() {
  messages.clear();
  appended.clear();
  release();
}

void PendingSubmit::release() {
  if (pendingTotal) *pendingTotal -= std::min(*pendingTotal, bytes);
  pendingTotal.reset();
}

void PendingSubmit::charge(uint64_t more) {
  SQUALL_REQUIRE(bytes + more <= limits.submitBytes, "the submit is larger than ", limits.submitBytes,
                 " bytes ", limits.note(limits.submitBytes));
  if (pendingTotal) {
    SQUALL_REQUIRE(*pendingTotal + more <= limits.pendingBytes, "the server holds ", *pendingTotal,
                   " bytes of open submits and this one would pass its limit (limit ",
                   limits.named(limits.pendingBytes), "); retry once others have committed");
    *pendingTotal += more;
  }
  bytes += more;
}

size_t PendingSubmit::admit(wire::Submission::AddParams::Reader chunk) {
  auto size = chunk.totalSize().wordCount * sizeof(capnp::word);
  SQUALL_REQUIRE(tasks + chunk.getTasks().size() <= limits.submitTasks, "the submit has more than ",
                 limits.submitTasks, " tasks ", limits.note(limits.submitTasks));
  SQUALL_REQUIRE(objects + chunk.getObjects().size() <= limits.submitObjects,
                 "the submit has more than ", limits.submitObjects, " objects ", limits.note(limits.submitObjects));
  for (auto task : chunk.getTasks()) {
    auto taskBytes = task.totalSize().wordCount * sizeof(capnp::word);
    SQUALL_REQUIRE(taskBytes <= limits.taskBytes, taskLabel(task), " is ", taskBytes,
                   " bytes as submitted, more than ", limits.taskBytes, " (limit ",
                   limits.named(limits.taskBytes),
                   "; pass large data as an object, not inside the task)");
  }
  for (auto object : chunk.getObjects()) {
    SQUALL_REQUIRE(object.getData().size() <= limits.constantBytes, "constant ",
                   object.getId().getN(), " is larger than ", limits.constantBytes, " bytes ", limits.note(limits.constantBytes));
  }
  charge(size);
  tasks += chunk.getTasks().size();
  objects += chunk.getObjects().size();
  for (auto object : chunk.getObjects()) {
    if (object.getIsConstant() && !object.hasPlacedOn()) declaredConstants[object.getId().getN()] = true;
    if (object.hasPlacedOn()) placed.emplace_back(object.getId().getN(), object.getPlacedOn().cStr());
  }
  return size;
}

void PendingSubmit::add(wire::Submission::AddParams::Reader chunk) {
  auto size = admit(chunk);
  auto message = std::make_unique<capnp::MallocMessageBuilder>(size / sizeof(capnp::word) + 16);
  message->setRoot(chunk);
  messages.push_back(std::move(message));
}

void PendingSubmit::add(std::unique_ptr<capnp::MallocMessageBuilder> chunk) {
  admit(chunk->getRoot<wire::Submission::AddParams>().asReader());
  messages.push_back(std::move(chunk));
}

std::vector<kj::Array<capnp::word>> PendingSubmit::flatChunks() const {
  std::vector<kj::Array<capnp::word>> chunks;
  for (auto& message : messages) chunks.push_back(capnp::messageToFlatArray(*message));
  return chunks;
}

void PendingSubmit::appendData(uint64_t object, kj::ArrayPtr<const kj::byte> data) {
  SQUALL_REQUIRE(declaredConstants.count(object), "appendData: object ", object,
                 " is not declared as a constant in this submit");
  auto& buffer = appended[object];
  SQUALL_REQUIRE(buffer.size() + data.size() <= limits.constantBytes, "constant ", object,
                 " is larger than ", limits.constantBytes, " bytes ", limits.note(limits.constantBytes));
  charge(data.size());
  buffer.insert(buffer.end(), data.begin(), data.end());
}

void PendingSubmit::checkBounds(kj::StringPtr label, wire::TaskSpec::Reader task) const {
  auto attributes = task.getAttributes();
  SQUALL_REQUIRE(attributes.size() <= limits.attributeBytes, label, ": its attributes are ",
                 attributes.size(), " bytes, more than ", limits.attributeBytes, " ", limits.note(limits.attributeBytes));
  SQUALL_REQUIRE(jsonNesting(attributes.cStr(), limits.attributeDepth) <= limits.attributeDepth, label,
                 ": its attributes nest deeper than ", limits.attributeDepth, " levels ", limits.note(limits.attributeDepth));
  auto limitMs = task.getPolicy().getTimeLimitMs();
  SQUALL_REQUIRE(limitMs <= limits.timeLimitMs, label, ": its time limit of ", limitMs,
                 " ms is longer than ", limits.timeLimitMs, " ms ", limits.note(limits.timeLimitMs));
  if (task.getConfig().isSleep()) {
    auto ms = task.getConfig().getSleep().getMilliseconds();
    SQUALL_REQUIRE(ms <= limits.timeLimitMs, label, ": it sleeps ", ms, " ms, longer than ",
                   limits.timeLimitMs, " ms ", limits.note(limits.timeLimitMs));
  }
  auto path = [&](kj::StringPtr what, kj::StringPtr value) {
    SQUALL_REQUIRE(value.size() <= limits.pathBytes, label, ": ", what, " path is ", value.size(),
                   " bytes, longer than ", limits.pathBytes, " ", limits.note(limits.pathBytes));
  };
  for (auto input : task.getInputs()) path("an input", input.getPath());
  auto config = task.getConfig();
  switch (config.which()) {
    case wire::TaskSpec::Config::SLICE_DIR: path("its slice", config.getSliceDir()); break;
    case wire::TaskSpec::Config::LOAD: path("its load", config.getLoad()); break;
    case wire::TaskSpec::Config::LOAD_DIR: path("its load_dir", config.getLoadDir()); break;
    case wire::TaskSpec::Config::STORE: path("its store", config.getStore().getPath()); break;
    case wire::TaskSpec::Config::EXECUTE: {
      auto execute = config.getExecute();
      for (auto output : execute.getOutputs()) {
        if (output.isPath()) path("an output", output.getPath());
      }
      for (auto arg : execute.getArgs()) {
        SQUALL_REQUIRE(arg.size() <= limits.argBytes, label, ": an argument is ", arg.size(),
                       " bytes, longer than ", limits.argBytes, " ", limits.note(limits.argBytes));
      }
      for (auto env : execute.getEnv()) {
        auto size = env.getName().size() + 1 + env.getValue().size();
        SQUALL_REQUIRE(size <= limits.argBytes, label, ": environment variable ",
                       env.getName().slice(0, std::min<size_t>(env.getName().size(), 64)), " is ", size,
                       " bytes, longer than ", limits.argBytes, " ", limits.note(limits.argBytes));
      }
      break;
    }
    default:
      break;
  }
}

std::vector<ResourceAsk> resourceAsks(wire::TaskSpec::Reader spec) {
  std::vector<ResourceAsk> asks;
  for (auto request : spec.getResources().getRequests()) {
    asks.push_back({request.getName().cStr(), request.getAmount(), request.getAll()});
  }
  return asks;
}

namespace {

// A task's resources besides cpus: well formed, and (when governors are
// known) what one of them could give it, else refused naming the resource.
void checkResources(kj::StringPtr label, wire::TaskSpec::Reader task, const ClusterCapacity& capacity) {
  auto requests = task.getResources().getRequests();
  std::vector<std::string> seen;
  for (auto request : requests) {
    std::string name = request.getName().cStr();
    SQUALL_REQUIRE(isResourceName(name), label, ": resource '", request.getName(), "': ", RESOURCE_NAME_RULE);
    SQUALL_REQUIRE(name != "cpus", label, ": cpus are asked with cpus, not as a resource request");
    SQUALL_REQUIRE(std::find(seen.begin(), seen.end(), name) == seen.end(), label, " asks for ", name, " twice");
    SQUALL_REQUIRE(request.getAll() || request.getAmount() > 0, label, " asks for 0 ", name);
    seen.push_back(name);
  }
  // Checked against the governors connected now, unless the task may wait
  // for a bigger one.
  if (task.getPolicy().getWaitForResources() || capacity.governors == nullptr || capacity.governors->empty()) {
    return;
  }
  constexpr const char* WAIT_HINT = "; to wait for a governor that has it, ask waitForResources "
                                    "(squall run/submit --wait-for-resources)";
  uint32_t cpus = task.getResources().getCpus();
  if (requests.size() == 0) {
    uint32_t best = 0;
    for (auto& [offered, pools] : *capacity.governors) best = std::max(best, offered);
    SQUALL_REQUIRE(cpus <= best, label, ": no governor could ever run it: it asks for ", cpus,
                   " cpus and the best governor has ", best, WAIT_HINT);
    return;
  }
  auto asks = resourceAsks(task);
  std::string closest;
  for (auto& [offered, pools] : *capacity.governors) {
    auto why = neverFits(pools, asks);
    if (!why && offered >= cpus) return;
    if (why && (closest.empty() || closest.rfind("no ", 0) == 0)) closest = *why;
  }
  std::set<std::string> offered;
  for (auto& [cpus, pools] : *capacity.governors) {
    for (auto& [name, pool] : pools) offered.insert(name);
  }
  std::string names;
  for (auto& name : offered) names += (names.empty() ? "" : ", ") + name;
  if (closest.empty()) {
    SQUALL_FAIL(label, ": no governor has its resources and ", cpus, " cpus at once", WAIT_HINT);
  }
  SQUALL_FAIL(label, ": no governor could ever run it: the best has ", closest.c_str(), " (resources offered: ",
              names.empty() ? "none but cpus" : names.c_str(), ")", WAIT_HINT);
}

}  // namespace

std::vector<TaskNode*> PendingSubmit::commit(Session& target, ClusterCapacity capacity, bool apply) {
  SQUALL_REQUIRE(target.state == Session::State::OPEN, "session ", target.id,
                 " is not open: ", target.failureMessage);

  // ---- index and check ids
  std::unordered_map<uint64_t, wire::ObjectSpec::Reader> newObjects;
  std::unordered_map<uint64_t, wire::TaskSpec::Reader> newTasks;
  std::vector<wire::TaskSpec::Reader> taskOrder;
  auto checkId = [&](wire::Id::Reader id, kj::StringPtr what) {
    SQUALL_REQUIRE(id.getSession() == session, what, " id ", id.getN(), " names session ",
                                                   id.getSession(), ", not this session ", session);
    SQUALL_REQUIRE(id.getN() != 0, what, " id 0 is reserved");
    SQUALL_REQUIRE(!newObjects.count(id.getN()) && !newTasks.count(id.getN()), "duplicate id ", id.getN(), " in the submitted graph");
    SQUALL_REQUIRE(!target.objects.count(id.getN()) && !target.tasks.count(id.getN()), "id ", id.getN(), " is already used in this session");
  };
  for (auto& message : messages) {
    auto chunk = message->getRoot<wire::Submission::AddParams>().asReader();
    for (auto object : chunk.getObjects()) {
      checkId(object.getId(), "object");
      SQUALL_REQUIRE(object.getKind() != wire::ObjectKind::STREAM || !object.getIsConstant(),
                     "object ", object.getId().getN(),
                     " is a constant and a stream; a stream is made by a running program");
      if (object.hasPlacedOn()) {
        SQUALL_REQUIRE(object.getIsConstant() && object.getKind() == wire::ObjectKind::BLOB &&
                           object.getData().size() == 0 && !appended.count(object.getId().getN()),
                       "object ", object.getId().getN(),
                       " is placed on a governor: it must be a blob constant whose bytes are not sent");
      }
      newObjects.emplace(object.getId().getN(), object);
    }
    for (auto task : chunk.getTasks()) {
      checkId(task.getId(), "task");
      newTasks.emplace(task.getId().getN(), task);
      taskOrder.push_back(task);
    }
  }

  SQUALL_REQUIRE(target.tasks.size() + newTasks.size() <= limits.sessionTasks, "the session would have more than ",
                 limits.sessionTasks, " tasks ", limits.note(limits.sessionTasks));
  SQUALL_REQUIRE(target.objects.size() + newObjects.size() <= limits.sessionObjects,
                 "the session would have more than ", limits.sessionObjects, " objects ", limits.note(limits.sessionObjects));
  for (auto& [n, object] : newObjects) {
    auto kind = object.getKind();
    SQUALL_REQUIRE(kind == wire::ObjectKind::BLOB || kind == wire::ObjectKind::DIR ||
                       kind == wire::ObjectKind::STREAM,
                   "object ", n, " has an unknown kind (", static_cast<uint16_t>(kind),
                   "); client and server versions differ?");
  }

  // ---- tasks: config, inputs, outputs
  std::unordered_map<uint64_t, uint64_t> producerOf;  // object n -> task n
  auto findObject = [&](wire::TaskSpec::Reader task, wire::Id::Reader id) {
    auto label = taskLabel(task);
    SQUALL_REQUIRE(id.getSession() == session, label, " reads object ", id.getSession(), "/", id.getN(),
                       " from another session; objects cannot be shared between sessions");
    if (newObjects.count(id.getN())) return;
    auto it = target.objects.find(id.getN());
    if (it == target.objects.end()) {
      SQUALL_REQUIRE(!newTasks.count(id.getN()) && !target.tasks.count(id.getN()), label, " names ", id.getN(), " as an input, but that is a task, not an object");
      SQUALL_FAIL(label, " reads unknown object ", id.getN());
    }
    SQUALL_REQUIRE(it->second.state != ObjectNode::State::REMOVED, label, " reads object ", id.getN(),
                       ", which was already removed (mark objects keep to use them in later submits)");
  };
  auto kindOf = [&](uint64_t n) {
    auto it = newObjects.find(n);
    if (it != newObjects.end()) return it->second.getKind();
    return target.objects.at(n).kind;
  };
  // Names of the named actors of this submit.
  std::set<std::string> actorNames;
  for (auto task : taskOrder) {
    auto label = taskLabel(task);
    auto inputs = task.getInputs();
    auto outputs = task.getOutputs();
    // 0 cpus, asked for: a task that waits more than it computes (Ray's
    // num_cpus=0), or an actor that holds none while it lives.
    SQUALL_REQUIRE(task.getResources().getCpusAsked() || task.getResources().getCpus() == 1, label,
                   " has ", task.getResources().getCpus(), " cpus without cpusAsked (the default is 1)");
    SQUALL_REQUIRE(task.getPolicy().getRetries() <= 100, label, ": at most 100 retries");
    checkBounds(label, task);
    checkResources(label, task, capacity);
    for (auto input : inputs) {
      findObject(task, input.getObject());
    }
    for (auto output : outputs) {
      SQUALL_REQUIRE(output.getSession() == session, label, " writes object ", output.getSession(), "/", output.getN(),
                         " of another session");
      auto it = newObjects.find(output.getN());
      SQUALL_REQUIRE(it != newObjects.end(), label, " writes object ", output.getN(),
                         ", which is not declared in this submit");
      SQUALL_REQUIRE(!it->second.getIsConstant(), label, " writes object ", output.getN(), ", which is a constant");
      auto [prev, inserted] = producerOf.emplace(output.getN(), task.getId().getN());
      SQUALL_REQUIRE(inserted, "object ", output.getN(), " has two producers: task ",
                                   prev->second, " and task ", task.getId().getN());
    }
    auto isExecute = task.getConfig().which() == wire::TaskSpec::Config::EXECUTE;
    // Read after its end, a stream is stored bytes: a blob to the reader.
    auto inputKind = [&](uint i) {
      auto kind = kindOf(inputs[i].getObject().getN());
      return kind == wire::ObjectKind::STREAM && !isExecute ? wire::ObjectKind::BLOB : kind;
    };
    auto outputKind = [&](uint i) { return newObjects.at(outputs[i].getN()).getKind(); };
    auto requireKind = [&](kj::StringPtr what, uint64_t n, wire::ObjectKind actual,
                           wire::ObjectKind expected) {
      SQUALL_REQUIRE(actual == expected, label, ": ", what, " ", n, " is a ", kindName(actual),
                     " but must be a ", kindName(expected));
    };
    auto requireCounts = [&](kj::StringPtr type, uint nIn, uint nOut) {
      SQUALL_REQUIRE(inputs.size() == nIn && outputs.size() == nOut, label, ": ", type, " takes ",
                     nIn, " input(s) and ", nOut, " output(s), not ", inputs.size(), " and ",
                     outputs.size());
    };
    auto requireAbsolute = [&](kj::StringPtr type, kj::StringPtr path) {
      SQUALL_REQUIRE(path.size() > 0 && path[0] == '/', label, ": ", type, " path '", path,
                     "' must be absolute (a path on the governor)");
      SQUALL_REQUIRE(path.findFirst('\0') == nullptr, label, ": ", type, " path contains a NUL byte");
    };
    switch (task.getConfig().which()) {
      case wire::TaskSpec::Config::CONCAT:
        SQUALL_REQUIRE(outputs.size() == 1, label, ": concat has exactly one output");
        for (uint i = 0; i < inputs.size(); i++) {
          requireKind("input", inputs[i].getObject().getN(), inputKind(i), wire::ObjectKind::BLOB);
        }
        requireKind("output", outputs[0].getN(), outputKind(0), wire::ObjectKind::BLOB);
        break;
      case wire::TaskSpec::Config::SLEEP:
        SQUALL_REQUIRE(outputs.size() <= 1, label, ": sleep has at most one output");
        if (outputs.size() == 1) {
          requireKind("output", outputs[0].getN(), outputKind(0),
                      inputs.size() > 0 ? inputKind(0) : wire::ObjectKind::BLOB);
        }
        break;
      case wire::TaskSpec::Config::MAKE_DIR: {
        SQUALL_REQUIRE(outputs.size() == 1, label, ": make_dir has exactly one output");
        requireKind("output", outputs[0].getN(), outputKind(0), wire::ObjectKind::DIR);
        std::unordered_set<std::string> paths;
        for (uint i = 0; i < inputs.size(); i++) {
          KJ_IF_MAYBE(problem, checkSandboxPath(inputs[i].getPath())) {
            SQUALL_FAIL(label, ": make_dir input ", i, ": ", *problem);
          }
          SQUALL_REQUIRE(paths.insert(inputs[i].getPath().cStr()).second, label,
                         ": two inputs at path '", inputs[i].getPath(), "'");
        }
        break;
      }
      case wire::TaskSpec::Config::SLICE_DIR: {
        requireCounts("slice_dir", 1, 1);
        requireKind("input", inputs[0].getObject().getN(), inputKind(0), wire::ObjectKind::DIR);
        auto path = task.getConfig().getSliceDir();
        bool wantsDir = path.size() > 0 && path[path.size() - 1] == '/';
        auto bare = kj::str(path.slice(0, wantsDir ? path.size() - 1 : path.size()));
        KJ_IF_MAYBE(problem, checkSandboxPath(bare)) {
          SQUALL_FAIL(label, ": slice_dir: ", *problem);
        }
        requireKind("output", outputs[0].getN(), outputKind(0),
                    wantsDir ? wire::ObjectKind::DIR : wire::ObjectKind::BLOB);
        break;
      }
      case wire::TaskSpec::Config::LOAD:
        requireCounts("load", 0, 1);
        requireAbsolute("load", task.getConfig().getLoad());
        requireKind("output", outputs[0].getN(), outputKind(0), wire::ObjectKind::BLOB);
        break;
      case wire::TaskSpec::Config::LOAD_DIR:
        requireCounts("load_dir", 0, 1);
        requireAbsolute("load_dir", task.getConfig().getLoadDir());
        requireKind("output", outputs[0].getN(), outputKind(0), wire::ObjectKind::DIR);
        break;
      case wire::TaskSpec::Config::STORE:
        requireCounts("store", 1, 0);
        requireAbsolute("store", task.getConfig().getStore().getPath());
        break;
      case wire::TaskSpec::Config::EXECUTE: {
        auto config = task.getConfig().getExecute();
        auto args = config.getArgs();
        SQUALL_REQUIRE(args.size() > 0, label, ": execute needs a program to run");
        SQUALL_REQUIRE(args[0].size() > 0, label, ": execute's program name is empty");
        SQUALL_REQUIRE(!config.getShell() || args.size() == 1, label,
                       ": a shell command is one line (got ", args.size(), " args)");
        SQUALL_REQUIRE(config.getOutputs().size() == outputs.size(), label, ": ", outputs.size(),
                       " outputs but ", config.getOutputs().size(), " output mappings");
        SQUALL_REQUIRE(config.getStdinInput() >= -1 &&
                           config.getStdinInput() < static_cast<int32_t>(inputs.size()),
                       label, ": stdin input ", config.getStdinInput(), " is out of range");
        if (config.getStdinInput() >= 0) {
          auto i = static_cast<uint>(config.getStdinInput());
          SQUALL_REQUIRE(inputKind(i) != wire::ObjectKind::DIR, label, ": stdin input ",
                         inputs[i].getObject().getN(), " is a dir but must be a blob or a stream");
        }
        checkExecutePaths(label, task, inputKind, outputKind);
        uint stdoutCount = 0;
        auto mappings = config.getOutputs();
        for (uint i = 0; i < mappings.size(); i++) {
          if (!mappings[i].isStdout()) continue;
          stdoutCount++;
          SQUALL_REQUIRE(outputKind(i) != wire::ObjectKind::DIR, label, ": stdout output ",
                         outputs[i].getN(), " is a dir but must be a blob or a stream");
        }
        SQUALL_REQUIRE(stdoutCount <= 1, label, ": stdout can be only one output");
        for (auto env : config.getEnv()) {
          SQUALL_REQUIRE(env.getName().size() > 0 && env.getName().findFirst('=') == nullptr, label,
                         ": bad environment variable name '", env.getName(), "'");
        }
        break;
      }
      case wire::TaskSpec::Config::CALL: {
        auto call = task.getConfig().getCall();
        SQUALL_REQUIRE(call.getExecutor().size() > 0 && call.getFunction().size() > 0, label,
                       ": a call names an executor and a function (executor/function)");
        auto function = callName(call);
        if (capacity.actorTypes != nullptr) {
          SQUALL_REQUIRE(capacity.actorTypes->count(function.cStr()) == 0, label, ": ", function,
                         " is an actor type, not a function: make an actor of it (docs/actors.md)");
          SQUALL_REQUIRE(call.getFunction().findFirst('.') == nullptr ||
                             capacity.functions->count(function.cStr()) == 0,
                         label, ": ", function, " is a method of an actor type: call it on an actor (docs/actors.md)");
        }
        if (capacity.functions != nullptr) {
          auto& offered = *capacity.functions;
          auto found = offered.find(function.cStr());
          if (found == offered.end()) {
            std::string names;
            size_t shown = 0;
            for (auto& [name, outs] : offered) {
              if (shown++ == 20) {
                names += ", ...";
                break;
              }
              names += (names.empty() ? "" : ", ") + name;
            }
            SQUALL_FAIL(label, ": no governor offers the function ", function,
                        offered.empty() ? kj::str(" (no governor has executors: start one with --executor "
                                                  "NAME=PROGRAM)")
                                        : kj::str(" (offered: ", names.c_str(), ")"));
          }
          requireOutputCount(label, "function", function, found->second, outputs.size());
        }
        break;
      }
      case wire::TaskSpec::Config::ACTOR: {
        auto actor = task.getConfig().getActor();
        SQUALL_REQUIRE(isPlainName(actor.getExecutor()) && isPlainName(actor.getType()) &&
                           actor.getType().findFirst('.') == nullptr,
                       label, ": an actor names an executor and an actor type (executor/Type)");
        SQUALL_REQUIRE(outputs.size() == 0, label, ": an actor has no outputs (its calls have)");
        SQUALL_REQUIRE(task.getPolicy().getRetries() == 0, label,
                       ": an actor is not retried; it is restarted (max_restarts)");
        SQUALL_REQUIRE(actor.getMaxRestarts() <= 1000 && actor.getMaxCallRetries() <= 1000, label,
                       ": at most 1000 restarts and 1000 call retries");
        if (auto name = actor.getName(); name.size() > 0) {
          SQUALL_REQUIRE(isPlainName(name), label, ": actor name '", name, "': ", PLAIN_NAME_RULE);
          SQUALL_REQUIRE(actorNames.insert(name.cStr()).second, label, ": two actors of this submit are named '",
                         name, "'");
          if (capacity.namedActors != nullptr) {
            auto taken = capacity.namedActors->find(name.cStr());
            SQUALL_REQUIRE(taken == capacity.namedActors->end(), label, ": an actor named '", name,
                           "' lives already (task ", taken == capacity.namedActors->end() ? 0 : taken->second.n,
                           " of session ", taken == capacity.namedActors->end() ? 0 : taken->second.session, ")");
          }
        }
        auto type = actorTypeName(actor);
        if (capacity.actorTypes != nullptr) {
          if (capacity.actorTypes->count(type.cStr()) == 0) {
            std::string names;
            for (auto& name : *capacity.actorTypes) names += (names.empty() ? "" : ", ") + name;
            SQUALL_FAIL(label, ": no governor offers the actor type ", type,
                        capacity.actorTypes->empty() ? kj::str(" (no governor has actor types)")
                                                     : kj::str(" (offered: ", names.c_str(), ")"));
          }
        }
        break;
      }
      case wire::TaskSpec::Config::ACTOR_CALL: {
        auto call = task.getConfig().getActorCall();
        SQUALL_REQUIRE(isPlainName(call.getMethod()) && call.getMethod().findFirst('.') == nullptr, label,
                       ": method name '", call.getMethod(), "': ", PLAIN_NAME_RULE, ", without '.'");
        auto actorId = call.getActor();
        SQUALL_REQUIRE(actorId.getSession() == session, label, " calls actor ", actorId.getSession(), "/",
                       actorId.getN(), " of another session");
        wire::ActorConfig::Reader actor;
        auto fresh = newTasks.find(actorId.getN());
        if (fresh != newTasks.end()) {
          SQUALL_REQUIRE(fresh->second.getConfig().isActor(), label, " calls task ", actorId.getN(),
                         ", which is not an actor");
          actor = fresh->second.getConfig().getActor();
        } else {
          auto it = target.tasks.find(actorId.getN());
          SQUALL_REQUIRE(it != target.tasks.end(), label, " calls unknown actor ", actorId.getN());
          SQUALL_REQUIRE(it->second.isActor, label, " calls task ", actorId.getN(), ", which is not an actor");
          // One allowed to fail ends as the actor's calls did (Ray: an
          // error to whoever reads its result, not a refused submit).
          SQUALL_REQUIRE(endedActorsTaken || task.getPolicy().getAllowFailure() || !it->second.done(), label,
                         " calls actor ", actorId.getN(), ", which has ended",
                         it->second.error.empty() ? kj::str() : kj::str(" (", it->second.error.c_str(), ")"));
          actor = it->second.spec.getConfig().getActor();
        }
        SQUALL_REQUIRE(!task.getResources().getCpusAsked() && task.getResources().getRequests().size() == 0,
                       label, ": a method call runs on its actor's resources and asks for none");
        auto method = kj::str(actorTypeName(actor), ".", call.getMethod());
        for (uint i = 0; i < outputs.size(); i++) {
          SQUALL_REQUIRE(outputKind(i) != wire::ObjectKind::STREAM, label, ": output ", outputs[i].getN(),
                         " is a stream; an actor's methods write blobs and dirs");
        }
        if (capacity.functions != nullptr && capacity.actorTypes != nullptr &&
            capacity.actorTypes->count(actorTypeName(actor).cStr()) != 0) {
          auto found = capacity.functions->find(method.cStr());
          SQUALL_REQUIRE(found != capacity.functions->end(), label, ": actor type ", actorTypeName(actor),
                         " has no method ", call.getMethod());
          requireOutputCount(label, "method", method, found->second, outputs.size());
        }
        break;
      }
      default:
        SQUALL_FAIL(label, " has an unknown task type; client and server versions differ?");
    }
    if (auto parent = task.getParent(); parent != 0) {
      // A running task's child: its parent is a task submitted before (or,
      // as the log replays every submit as one, in the same submit).
      auto it = target.tasks.find(parent);
      if (it == target.tasks.end()) {
        SQUALL_REQUIRE(newTasks.count(parent) != 0 && parent != task.getId().getN(), label, " names task ", parent,
                       " as its parent, which is not a task of this session submitted before");
      } else {
        SQUALL_REQUIRE(!it->second.done(), label, ": its parent task ", parent, " has ended",
                       it->second.error.empty() ? kj::str() : kj::str(" (", it->second.error.c_str(), ")"));
      }
    }
  }
  for (auto& [n, object] : newObjects) {
    auto it = appended.find(n);
    uint64_t constantSize = object.getData().size() + (it == appended.end() ? 0 : it->second.size());
    SQUALL_REQUIRE(constantSize <= limits.constantBytes, "constant ", n, " is larger than ",
                   limits.constantBytes, " bytes ", limits.note(limits.constantBytes));
    if (!object.getIsConstant()) {
      SQUALL_REQUIRE(producerOf.count(n), "object ", n, " has no producer and no data (declare it as a constant or "
                         "as some task's output)");
    } else {
      SQUALL_REQUIRE(!producerOf.count(n), "object ", n, " is a constant and a task output");
    }
  }

  // ---- cycles (only new tasks can form one; old objects are all made);
  // `topological`: the new tasks, producers first
  std::vector<uint64_t> topological;
  {
    std::unordered_map<uint64_t, uint32_t> indegree;
    std::unordered_map<uint64_t, std::vector<uint64_t>> next;
    for (auto task : taskOrder) {
      auto& deg = indegree[task.getId().getN()];
      for (auto input : task.getInputs()) {
        auto it = producerOf.find(input.getObject().getN());
        if (it != producerOf.end()) {
          deg++;
          next[it->second].push_back(task.getId().getN());
        }
      }
    }
    std::deque<uint64_t> queue;
    for (auto& [n, deg] : indegree) {
      if (deg == 0) queue.push_back(n);
    }
    size_t seen = 0;
    while (!queue.empty()) {
      auto n = queue.front();
      queue.pop_front();
      seen++;
      topological.push_back(n);
      for (auto m : next[n]) {
        if (--indegree[m] == 0) queue.push_back(m);
      }
    }
    if (seen != taskOrder.size()) {
      uint64_t example = 0;
      for (auto& [n, deg] : indegree) {
        if (deg > 0 && (example == 0 || n < example)) example = n;
      }
      SQUALL_FAIL("the graph has a cycle (task ", example, " depends on itself)");
    }
  }

  // ---- streams: which inputs are read live, and the groups they form
  // Live: a program or a function reading a stream whose producer has not
  // started.
  // Other reads of a stream wait for its end and need its bytes stored.
  std::unordered_map<uint64_t, std::vector<bool>> liveOf;  // task n -> per input
  std::unordered_map<uint64_t, uint64_t> parent;           // union-find over task n
  // A loop, not recursion: a chain of a million stream stages is a chain
  // of a million parents before compression.
  auto root = [&](uint64_t n) -> uint64_t {
    uint64_t r = n;
    for (auto it = parent.find(r); it != parent.end() && it->second != r; it = parent.find(r)) r = it->second;
    while (n != r) {  // path compression
      auto& up = parent[n];
      n = std::exchange(up, r);
    }
    return r;
  };
  auto join = [&](uint64_t a, uint64_t b) {
    for (auto n : {a, b}) {
      if (parent.count(n)) continue;
      parent[n] = n;
      // An existing task brings its whole existing group.
      auto it = target.tasks.find(n);
      if (it != target.tasks.end() && it->second.group != nullptr) {
        for (auto* member : it->second.group->members) {
          if (!parent.count(member->id.n)) parent[member->id.n] = n;
        }
      }
    }
    parent[root(a)] = root(b);
  };
  for (auto task : taskOrder) {
    auto label = taskLabel(task);
    auto inputs = task.getInputs();
    auto& live = liveOf[task.getId().getN()];
    live.assign(inputs.size(), false);
    std::unordered_set<uint64_t> liveSeen;
    for (uint i = 0; i < inputs.size(); i++) {
      auto n = inputs[i].getObject().getN();
      if (kindOf(n) != wire::ObjectKind::STREAM) continue;
      bool readsLive = task.getConfig().which() == wire::TaskSpec::Config::EXECUTE ||
                       task.getConfig().which() == wire::TaskSpec::Config::CALL;
      auto existing = target.objects.find(n);
      if (existing == target.objects.end()) {
        live[i] = readsLive;
      } else {
        auto& object = existing->second;
        auto* producer = object.producer;
        bool notStarted = producer != nullptr && (producer->state == TaskNode::State::WAITING ||
                                                  producer->state == TaskNode::State::READY);
        if (notStarted) {
          live[i] = readsLive;
        } else if (object.state == ObjectNode::State::FINISHED) {
          SQUALL_REQUIRE(object.persisted, label, " reads stream ", n,
                         ", which has ended and was not kept; its bytes are gone");
        } else if (object.state == ObjectNode::State::UNFINISHED) {
          SQUALL_REQUIRE(object.keep || !object.consumers.empty(), label, " reads stream ", n,
                         ", which is already flowing; a task submitted now can only read it "
                         "after it ends, and only if it is kept");
          SQUALL_REQUIRE(object.persisted, label, " reads stream ", n,
                         ", which is already flowing without being stored; mark it keep before "
                         "its producer starts to read it later");
        }
      }
      if (!live[i]) continue;
      SQUALL_REQUIRE(liveSeen.insert(n).second, label, " reads stream ", n, " twice");
      SQUALL_REQUIRE(!inputs[i].getWritable(), label, " reads stream ", n,
                     " live (as it is written), so that input cannot be writable");
      uint64_t producer = producerOf.count(n) ? producerOf.at(n) : target.objects.at(n).producer->id.n;
      join(task.getId().getN(), producer);
    }
  }
  // Every group must be able to run at once.
  std::unordered_map<uint64_t, std::vector<uint64_t>> groupsByRoot;
  for (auto& [n, p] : parent) groupsByRoot[root(n)].push_back(n);
  auto specOf = [&](uint64_t n) { return newTasks.count(n) ? newTasks.at(n) : target.tasks.at(n).spec; };
  for (auto& [r, members] : groupsByRoot) {
    std::sort(members.begin(), members.end());
    std::vector<wire::TaskSpec::Reader> specs;
    for (auto n : members) specs.push_back(specOf(n));
    auto charges = streamGroupCharges(specs);
    uint64_t cpus = 0;
    std::string names;
    for (size_t i = 0; i < members.size(); i++) {
      auto spec = specs[i];
      auto label = taskLabel(spec);
      uint32_t need = charges[i];
      cpus += need;
      names += (i == 0 ? "" : i + 1 == members.size() ? " and " : ", ") + std::string(label.cStr());
      SQUALL_REQUIRE(spec.getPolicy().getRetries() == 0, label,
                     " writes or reads a stream live; such tasks cannot be retried (a retry "
                     "would need the whole stream again): set retries to 0");
      SQUALL_REQUIRE(capacity.largestCpus == 0 || need <= capacity.largestCpus, label, " needs ",
                     need, " cpus but the largest governor has ", capacity.largestCpus);
    }
    SQUALL_REQUIRE(capacity.totalCpus == 0 || cpus <= capacity.totalCpus, names,
                   " are joined by streams and must run at the same time: together they need ",
                   cpus, " cpus but the governors have ", capacity.totalCpus);
  }

  if (!apply) return {};

  // ---- apply: nothing below may fail on bad input
  for (auto& [n, spec] : newObjects) {
    auto& object = target.objects[n];
    object.id = Id{session, n};
    object.kind = spec.getKind();
    object.keep = spec.getKeep();
    object.label = spec.getLabel().cStr();
    object.contentType = spec.getContentType().cStr();
    if (spec.hasPlacedOn()) {
      // Its bytes skipped the server: held where they were uploaded, like
      // a task's output (the applier gives it that place).
      object.uploadedTo = spec.getPlacedOn().cStr();
      object.state = ObjectNode::State::FINISHED;
      object.size = spec.getPlacedSize();
      object.hash = spec.getPlacedHash();
    } else if (spec.getIsConstant()) {
      object.constant = true;
      object.state = ObjectNode::State::FINISHED;
      auto inlineData = spec.getData();
      object.data.assign(inlineData.begin(), inlineData.end());
      auto it = appended.find(n);
      if (it != appended.end()) {
        object.data.insert(object.data.end(), it->second.begin(), it->second.end());
      }
      object.size = object.data.size();
      object.hash = XXH3_64bits(object.data.data(), object.data.size());
    }
  }
  std::vector<TaskNode*> ready;
  for (auto spec : taskOrder) {
    auto n = spec.getId().getN();
    auto& task = target.tasks[n];
    task.id = Id{session, n};
    task.spec = spec;
    task.cpus = spec.getResources().getCpus();
    task.resources = resourceAsks(spec);
    if (spec.getConfig().isCall()) task.function = callName(spec.getConfig().getCall()).cStr();
    if (spec.getConfig().isActor()) {
      task.function = actorTypeName(spec.getConfig().getActor()).cStr();
      task.isActor = true;
      target.actors[n].task = &task;
    }
    if (spec.getConfig().isActorCall()) {
      // It runs on its actor's resources.
      task.cpus = 0;
      task.resources.clear();
    }
    if (auto parent = spec.getParent(); parent != 0) {
      task.parent = &target.tasks[parent];  // filled in its own turn when in this submit
      task.parent->children.push_back(&task);
    }
    target.counts[static_cast<int>(TaskNode::State::WAITING)]++;
    target.countUndone(task);
    for (auto output : spec.getOutputs()) {
      auto& object = target.objects.at(output.getN());
      object.producer = &task;
      task.outputs.push_back(&object);
    }
  }
  {
    // Method calls take their turns on their actors in the order they
    // were made: by id within a submit (ids grow as the client makes
    // tasks), after every earlier submit's.
    std::vector<TaskNode*> calls;
    for (auto spec : taskOrder) {
      if (spec.getConfig().isActorCall()) calls.push_back(&target.tasks.at(spec.getId().getN()));
    }
    std::sort(calls.begin(), calls.end(), [](TaskNode* a, TaskNode* b) { return a->id.n < b->id.n; });
    endedCalled.clear();
    for (auto* call : calls) {
      auto& actor = target.actors.at(call->spec.getConfig().getActorCall().getActor().getN());
      if (actor.task->done() && (endedCalled.empty() || endedCalled.back() != &actor)) endedCalled.push_back(&actor);
      call->actor = &actor;
      call->turn = actor.nextTurn++;
      actor.calls[call->turn] = call;
    }
  }
  for (auto spec : taskOrder) {
    auto& task = target.tasks.at(spec.getId().getN());
    auto& live = liveOf.at(task.id.n);
    auto inputs = spec.getInputs();
    for (uint i = 0; i < inputs.size(); i++) {
      auto& object = target.objects.at(inputs[i].getObject().getN());
      task.inputs.push_back(&object);
      task.liveInputs.push_back(live[i]);
      object.unfinishedConsumers++;
      if (live[i]) {
        object.liveReaders.push_back(&task);
        continue;
      }
      object.consumers.push_back(&task);
      if (object.state != ObjectNode::State::FINISHED) task.unfinishedInputs++;
    }
  }
  for (auto& [r, members] : groupsByRoot) {
    // Reuse an existing group of one of the members, folding in any other.
    StreamGroup* group = nullptr;
    for (auto n : members) {
      auto* existing = target.tasks.at(n).group;
      if (existing != nullptr && group == nullptr) group = existing;
    }
    if (group == nullptr) {
      target.groups.push_back(std::make_unique<StreamGroup>());
      group = target.groups.back().get();
    }
    group->members.clear();
    group->cpus = 0;
    std::vector<wire::TaskSpec::Reader> specs;
    for (auto n : members) specs.push_back(target.tasks.at(n).spec);
    auto charges = streamGroupCharges(specs);
    for (size_t i = 0; i < members.size(); i++) {
      auto& task = target.tasks.at(members[i]);
      if (task.group != nullptr && task.group != group) task.group->members.clear();
      task.group = group;
      task.cpus = charges[i];
      group->members.push_back(&task);
      group->cpus += task.cpus;
    }
  }
  {
    std::vector<TaskNode*> added;
    added.reserve(topological.size());
    for (auto n : topological) added.push_back(&target.tasks.at(n));
    updateBLevels(added);
  }
  for (auto spec : taskOrder) {
    auto& task = target.tasks.at(spec.getId().getN());
    if (task.unfinishedInputs == 0) {
      target.setTaskState(task, TaskNode::State::READY);
      ready.push_back(&task);
    }
  }
  for (auto& [n, spec] : newObjects) target.nextId = std::max(target.nextId, n + 1);
  for (auto& [n, spec] : newTasks) target.nextId = std::max(target.nextId, n + 1);
  for (auto& message : messages) target.messages.push_back(std::move(message));
  drop();
  return ready;
}

}  // namespace squall
