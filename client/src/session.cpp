// A session (see client.h): SessionImpl's calls to the server (submit,
// wait, the task and object infos) and the Session class's methods, which
// build objects and tasks for the next submit. Fetching is in fetch.cpp,
// constants and their uploads in constants.cpp, actors' calls in actor.cpp.
// Thread: the one that created the Client.
#include "client-impl.h"

#include <capnp/message.h>
#include <cstdio>
#include <algorithm>
#include <kj/debug.h>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <squall/proto/sandbox-path.h>
#include <filesystem>

#include "tar.h"
#include <map>
#include <sys/stat.h>
#include <xxhash.h>

namespace squall {
namespace client {

namespace {

// Chunks of a submit stay far below capnp's 64 MiB message limit.
constexpr size_t MAX_ITEMS_PER_ADD = 20000;
constexpr size_t MAX_BYTES_PER_ADD = 16 << 20;
constexpr size_t APPEND_CHUNK_BYTES = 8 << 20;

}  // namespace

TaskFailed taskFailed(wire::Failure::Reader f) {
  return TaskFailed(f.getMessage().cStr(), f.getTask(), f.getTaskName().cStr(), f.getExitStatus(),
                    f.getStderrTail().cStr());
}

void setId(wire::Id::Builder b, uint64_t session, uint64_t n) {
  b.setSession(session);
  b.setN(n);
}

void fillTask(wire::TaskSpec::Builder out, const LocalTask& task, uint64_t session, uint64_t parent) {
  setId(out.initId(), session, task.n);
  out.setParent(parent);
  out.setName(task.name);
  auto resources = out.initResources();
  resources.setCpus(task.cpus.value_or(1));
  resources.setCpusAsked(task.cpus.has_value());
  auto requests = resources.initRequests(task.resources.size());
  for (size_t i = 0; i < task.resources.size(); i++) {
    requests[i].setName(task.resources[i].name);
    requests[i].setAmount(task.resources[i].units);
    requests[i].setAll(task.resources[i].all);
  }
  out.setAttributes(task.attributes);
  auto policy = out.initPolicy();
  policy.setRetries(task.retries);
  policy.setAllowFailure(task.allowFailure);
  policy.setWaitForResources(task.waitForResources);
  policy.setTimeLimitMs(task.timeLimitMs);
  policy.setExpectedMs(task.expectedMs);
  auto inputs = out.initInputs(task.inputs.size());
  for (size_t i = 0; i < task.inputs.size(); i++) {
    setId(inputs[i].initObject(), session, task.inputs[i].object);
    inputs[i].setPath(task.inputs[i].path);
    inputs[i].setLabel(task.inputs[i].label);
    inputs[i].setEarlyCloseIsError(task.strictPipes);
    inputs[i].setWritable(task.inputs[i].writable);
  }
  auto outputs = out.initOutputs(task.outputs.size());
  for (size_t i = 0; i < task.outputs.size(); i++) setId(outputs[i], session, task.outputs[i]);
  auto config = out.initConfig();
  switch (task.type) {
    case LocalTask::Type::CONCAT: config.setConcat(); break;
    case LocalTask::Type::SLEEP: config.initSleep().setMilliseconds(task.sleepMs); break;
    case LocalTask::Type::MAKE_DIR: config.setMakeDir(); break;
    case LocalTask::Type::CALL: {
      auto call = config.initCall();
      call.setExecutor(task.executor);
      call.setFunction(task.function);
      call.setConfig(kj::arrayPtr(reinterpret_cast<const kj::byte*>(task.callConfig.data()), task.callConfig.size()));
      break;
    }
    case LocalTask::Type::ACTOR: {
      auto actor = config.initActor();
      actor.setExecutor(task.executor);
      actor.setType(task.function);
      actor.setConfig(kj::arrayPtr(reinterpret_cast<const kj::byte*>(task.callConfig.data()), task.callConfig.size()));
      actor.setMaxRestarts(task.maxRestarts);
      actor.setMaxCallRetries(task.maxCallRetries);
      actor.setName(task.actorName);
      break;
    }
    case LocalTask::Type::ACTOR_CALL: {
      auto call = config.initActorCall();
      setId(call.initActor(), session, task.actor);
      call.setMethod(task.function);
      call.setConfig(kj::arrayPtr(reinterpret_cast<const kj::byte*>(task.callConfig.data()), task.callConfig.size()));
      break;
    }
    case LocalTask::Type::SLICE_DIR: config.setSliceDir(task.path); break;
    case LocalTask::Type::LOAD: config.setLoad(task.path); break;
    case LocalTask::Type::LOAD_DIR: config.setLoadDir(task.path); break;
    case LocalTask::Type::STORE: {
      auto store = config.initStore();
      store.setPath(task.path);
      store.setOverwrite(task.overwrite);
      break;
    }
    case LocalTask::Type::EXECUTE: {
      auto exec = config.initExecute();
      auto args = exec.initArgs(task.args.size());
      for (size_t i = 0; i < task.args.size(); i++) args.set(i, task.args[i]);
      exec.setShell(task.shell);
      exec.setStdinInput(task.stdinIndex);
      auto mappings = exec.initOutputs(task.outputMappings.size());
      for (size_t i = 0; i < task.outputMappings.size(); i++) {
        if (task.outputMappings[i]) {
          mappings[i].setPath(*task.outputMappings[i]);
        } else {
          mappings[i].setStdout();
        }
      }
      auto env = exec.initEnv(task.env.size());
      for (size_t i = 0; i < task.env.size(); i++) {
        env[i].setName(task.env[i].first);
        env[i].setValue(task.env[i].second);
      }
      break;
    }
  }
}

void fillObject(wire::ObjectSpec::Builder out, const LocalObject& o, uint64_t session, bool withData) {
  setId(out.initId(), session, o.n);
  out.setKind(static_cast<wire::ObjectKind>(o.kind));  // same order
  out.setKeep(o.keep);
  out.setLabel(o.label);
  out.setContentType(o.contentType);
  out.setIsConstant(o.constant);
  if (!o.placedOn.empty()) {
    out.setPlacedOn(o.placedOn);
    out.setPlacedSize(o.placedSize);
    out.setPlacedHash(o.placedHash);
    return;
  }
  if (o.constant && withData) out.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(o.data.data()), o.data.size()));
}

namespace {

// Each id once, sorted: the server bounds the ids of one wait (wait-ids).
std::vector<uint64_t> eachOnce(std::vector<uint64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace

bool SessionImpl::submit(const std::vector<uint64_t>* waitFor) {
  checkOpen();
  // Sent or refused, what was built is done with: a refused graph was not
  // applied and is not sent again by the next submit.
  KJ_DEFER({
    objects.clear();
    tasks.clear();
    objectIndex.clear();
    taskIndex.clear();
  });
  // Actor calls straight to their actors' governors when they may
  // (direct.cpp); the wait is then theirs too.
  if (client.retrying([&]() { return sendDirect(); })) {
    if (waitFor == nullptr) return false;
    wait(*waitFor, false, nullptr);
    return true;
  }
  beforeServerSubmit();
  // After a lost connection: was the graph applied before it went? The
  // server records a submit before it acknowledges it, so it has the first
  // id or none of them.
  auto applied = [&]() {
    try {
      if (!tasks.empty()) {
        auto req = client.svc().getTasksRequest();
        name(req);
        req.initIds(1).set(0, tasks.front().n);
        req.send().wait(client.waitScope());
      } else if (!objects.empty()) {
        auto req = client.svc().getObjectsRequest();
        name(req);
        req.initIds(1).set(0, objects.front().n);
        req.send().wait(client.waitScope());
      }
      return true;
    } catch (const kj::Exception& e) {
      if (e.getType() == kj::Exception::Type::DISCONNECTED) throw;
      return false;
    }
  };
  // The slice of objects and tasks from (nextObject, nextTask) that fits
  // one message; constants too big to go inline are left to appendData.
  auto slice = [&](size_t nextObject, size_t nextTask) {
    size_t objectEnd = nextObject, taskEnd = nextTask, bytes = 0;
    while (objectEnd < objects.size() && objectEnd - nextObject < MAX_ITEMS_PER_ADD &&
           bytes < MAX_BYTES_PER_ADD) {
      auto& o = objects[objectEnd++];
      bytes += 64 + o.label.size() + (o.data.size() <= INLINE_CONSTANT_BYTES ? o.data.size() : 0);
    }
    while (taskEnd < tasks.size() && taskEnd - nextTask < MAX_ITEMS_PER_ADD && bytes < MAX_BYTES_PER_ADD) {
      auto& t = tasks[taskEnd++];
      bytes += 128 + t.name.size() + t.attributes.size() + t.callConfig.size() + t.path.size() +
               48 * (t.inputs.size() + t.outputs.size());
      for (auto& in : t.inputs) bytes += in.path.size() + in.label.size();
      for (auto& a : t.args) bytes += a.size() + 8;
      for (auto& r : t.resources) bytes += r.name.size() + 32;
      for (auto& [name, value] : t.env) bytes += name.size() + value.size() + 16;
    }
    return std::make_pair(objectEnd, taskEnd);
  };
  // Fills one message's lists with objects [nextObject, objectEnd) and
  // tasks [nextTask, taskEnd); big constants go to `bigConstants`.
  auto fill = [&](auto& message, size_t nextObject, size_t objectEnd, size_t nextTask, size_t taskEnd,
                  std::vector<const LocalObject*>& bigConstants) {
    auto objectList = message.initObjects(objectEnd - nextObject);
    for (size_t i = nextObject; i < objectEnd; i++) {
      auto& o = objects[i];
      bool big = o.constant && o.placedOn.empty() && o.data.size() > INLINE_CONSTANT_BYTES;
      fillObject(objectList[i - nextObject], o, id, !big);
      if (big) bigConstants.push_back(&o);
    }
    auto taskList = message.initTasks(taskEnd - nextTask);
    for (size_t i = nextTask; i < taskEnd; i++) fillTask(taskList[i - nextTask], tasks[i], id, parent);
  };
  auto waitIds = waitFor != nullptr ? eachOnce(*waitFor) : std::vector<uint64_t>{};
  bool waited = false;
  std::optional<TaskFailed> failed;
  bool resent = false;
  // A refused submit (or a failed upload) leaves no upload behind.
  try {
  uploadConstants();
  client.retrying([&]() {
    if (resent && applied()) return;
    resent = true;
    auto& ws = client.waitScope();
    auto cut = slice(0, 0);
    bool oneMessage = cut.first == objects.size() && cut.second == tasks.size() &&
                      std::none_of(objects.begin(), objects.end(), [](const LocalObject& o) {
                        return o.constant && o.placedOn.empty() && o.data.size() > INLINE_CONSTANT_BYTES;
                      });
    if (oneMessage) {
      // One call (ClientService.submitGraph) instead of three.
      auto req = client.svc().submitGraphRequest();
      name(req);
      std::vector<const LocalObject*> none;
      fill(req, 0, objects.size(), 0, tasks.size(), none);
      if (waitIds.empty()) {
        req.send().wait(ws);
        return;
      }
      auto list = req.initWaitFor(waitIds.size());
      for (size_t i = 0; i < waitIds.size(); i++) list.set(i, waitIds[i]);
      // It waits, as wait() does: a function gives its cpus back meanwhile.
      if (client.aroundWait) client.aroundWait(true);
      KJ_DEFER(if (client.aroundWait) client.aroundWait(false));
      auto response = client.block(req.send());
      if (response.hasWaited()) {
        waited = true;
        // Thrown once the submit's own bookkeeping is done: it was applied.
        if (response.getWaited().isFailed()) failed = taskFailed(response.getWaited().getFailed());
      }
      return;
    }
    auto req = client.svc().submitRequest();
    name(req);
    auto submission = req.send().getSubmission();
    size_t nextObject = 0;
    size_t nextTask = 0;
    std::vector<const LocalObject*> bigConstants;
    do {
      auto add = submission.addRequest();
      fill(add, nextObject, cut.first, nextTask, cut.second, bigConstants);
      add.send().wait(ws);
      nextObject = cut.first;
      nextTask = cut.second;
      cut = slice(nextObject, nextTask);
    } while (nextObject < objects.size() || nextTask < tasks.size());
    for (auto* o : bigConstants) {
      for (size_t offset = 0; offset < o->data.size(); offset += APPEND_CHUNK_BYTES) {
        auto append = submission.appendDataRequest();
        append.setObject(o->n);
        size_t len = std::min(APPEND_CHUNK_BYTES, o->data.size() - offset);
        append.setData(
            kj::arrayPtr(reinterpret_cast<const kj::byte*>(o->data.data()) + offset, len));
        append.send().wait(ws);
      }
    }
    submission.commitRequest().send().wait(ws);
  });
  } catch (...) {
    discardUploads();
    throw;
  }
  madeViaServer(tasks);
  if (parent != 0) {
    for (auto& t : tasks) {
      if (t.type != LocalTask::Type::ACTOR) submittedTasks.push_back(t.n);  // actors never finish by themselves
    }
  }
  if (failed) throw *failed;
  return waited;
}

void SessionImpl::wait(const std::vector<uint64_t>& named, bool any, std::vector<uint64_t>* finished) {
  checkOpen();
  auto ids = eachOnce(named);
  // A function waiting for its children gives its cpus back meanwhile
  // (also while a lost server is reached again).
  if (client.aroundWait) client.aroundWait(true);
  KJ_DEFER(if (client.aroundWait) client.aroundWait(false));
  // Direct actor calls are waited for here; the rest at the server. A wait
  // for any that a direct call's answer ends first looks again.
  bool all = ids.empty();
  for (;;) {
    bool done = false;
    kj::Maybe<kj::Promise<void>> race;
    auto rest = client.retrying([&]() { return waitDirect(ids, any, finished, done, race); });
    if (done) return;
    bool answeredHere = false;
    // What the server says has ended (for a wait for any: those finished).
    std::vector<uint64_t> ended = rest;
    client.retrying([&]() {
      auto fill = [&](auto req) {
        name(req);
        auto list = req.initIds(rest.size());
        for (size_t i = 0; i < rest.size(); i++) list.set(i, rest[i]);
        return req;
      };
      auto check = [](wire::WaitResult::Reader result) {
        if (result.isFailed()) throw taskFailed(result.getFailed());
      };
      if (any) {
        kj::Maybe<capnp::Response<wire::ClientService::WaitSomeResults>> answer;
        auto server = fill(client.svc().waitSomeRequest()).send().then(
            [&](capnp::Response<wire::ClientService::WaitSomeResults>&& response) { answer = kj::mv(response); });
        KJ_IF_MAYBE(first, race) {
          server = server.exclusiveJoin(kj::mv(*first));
          race = nullptr;
        }
        client.block(kj::mv(server));
        KJ_IF_MAYBE(response, answer) {
          check(response->getResult());
          ended.clear();
          for (auto n : response->getFinished()) ended.push_back(n);
          if (finished) finished->insert(finished->end(), ended.begin(), ended.end());
        } else {
          answeredHere = true;
        }
      } else {
        auto response = client.block(fill(client.svc().waitRequest()).send());
        check(response.getResult());
      }
    });
    if (answeredHere) continue;
    sawEnd(ended, all && !any);
    return;
  }
}

std::vector<TaskInfo> SessionImpl::taskInfos(const std::vector<uint64_t>& ids,
                                             const std::vector<std::string>& states,
                                             uint32_t limit) {
  checkOpen();
  // Direct calls the server may not know yet are told to it first; those
  // it would not record (their actor had ended) are described from here.
  recordNamed(ids, ids.empty());
  std::vector<TaskInfo> unrecorded;
  std::vector<uint64_t> asked;
  for (auto n : ids) {
    auto it = direct.find(n);
    if (it == direct.end() || it->second.recordError.empty()) {
      asked.push_back(n);
      continue;
    }
    auto& call = it->second;
    unrecorded.push_back(TaskInfo{n, call.name, "actor_call", call.answered && call.ok ? "finished" : "failed", "", 0,
                                  0, call.exitStatus,
                                  call.error + " (not recorded by the server: " + call.recordError + ")", "",
                                  call.stderrTail, 1, "", {}, {}});
  }
  if (!ids.empty() && asked.empty()) return unrecorded;
  static const char* NAMES[] = {"waiting", "ready", "running", "finished",
                                "failed", "cancelled", "skipped"};
  return client.retrying([&]() {
    auto req = client.svc().getTasksRequest();
    name(req);
    auto idList = req.initIds(asked.size());
    for (size_t i = 0; i < asked.size(); i++) idList.set(i, asked[i]);
    auto stateList = req.initStates(states.size());
    for (size_t i = 0; i < states.size(); i++) {
      bool known = false;
      for (int k = 0; k < 7; k++) {
        if (states[i] == NAMES[k]) {
          stateList.set(i, static_cast<wire::TaskInfo::State>(k));
          known = true;
        }
      }
      if (!known) throw Error("unknown task state '" + states[i] + "'");
    }
    req.setLimit(limit);
    auto response = req.send().wait(client.waitScope());
    std::vector<TaskInfo> result;
    for (auto t : response.getTasks()) {
      auto state = static_cast<int>(t.getState());
      TaskInfo info{t.getId(), t.getName().cStr(), t.getType().cStr(),
                    state < 7 ? NAMES[state] : "unknown", t.getGovernor().cStr(),
                    t.getStartTimeUs(), t.getDurationUs(), t.getExitStatus(),
                    t.getError().cStr(), t.getStdoutTail().cStr(),
                    t.getStderrTail().cStr(), t.getAttempt(), t.getAttributes().cStr(), {}, {}};
      for (auto input : t.getInputs()) info.inputs.push_back(input);
      for (auto output : t.getOutputs()) info.outputs.push_back(objectInfo(output));
      result.push_back(std::move(info));
    }
    result.insert(result.end(), unrecorded.begin(), unrecorded.end());
    return result;
  });
}

ObjectInfo SessionImpl::objectInfo(wire::ObjectStatus::Reader o) {
  static const char* NAMES[] = {"unfinished", "finished", "removed", "failed"};
  auto state = static_cast<int>(o.getState());
  ObjectInfo info{o.getId(), static_cast<ObjectKind>(o.getKind()),
                  o.getLabel().cStr(), o.getContentType().cStr(), o.getKeep(),
                  state < 4 ? NAMES[state] : "unknown", o.getSize(), o.getHash(), o.getProducer(),
                  {}};
  for (auto where : o.getLocations()) info.locations.push_back(where.cStr());
  kinds[info.id] = info.kind;
  return info;
}

std::vector<ObjectInfo> SessionImpl::objectInfos(const std::vector<uint64_t>& ids) {
  checkOpen();
  recordNamed(ids);
  return client.retrying([&]() {
    auto req = client.svc().getObjectsRequest();
    name(req);
    auto idList = req.initIds(ids.size());
    for (size_t i = 0; i < ids.size(); i++) idList.set(i, ids[i]);
    auto response = req.send().wait(client.waitScope());
    std::vector<ObjectInfo> result;
    for (auto o : response.getObjects()) result.push_back(objectInfo(o));
    return result;
  });
}

}  // namespace client

// ------------------------------------------------------------ Session


Session::Session(std::unique_ptr<client::SessionImpl> impl) : impl(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Session::~Session() {
  if (impl && !impl->closed && impl->owned) {
    try {
      close();
    } catch (const Error&) {
      // The server or connection is gone; nothing left to release.
    }
  }
}

uint64_t Session::id() const { return impl->id; }

Task Session::concat(const std::vector<DataObject>& inputs) {
  for (auto& input : inputs) impl->checkInput(input, input.session);
  auto& task = impl->newTask(client::LocalTask::Type::CONCAT, {ObjectKind::BLOB});
  for (auto& input : inputs) task.inputs.push_back({input.id(), "", ""});
  return Task(impl.get(), task.n);
}

namespace {
// Where `name` ("executor/function", "executor/Type") splits: one '/',
// neither side empty; else an Error saying `what` (call, actor) wants `form`.
size_t executorSlash(const std::string& name, const char* what, const char* form) {
  auto slash = name.find('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == name.size() ||
      name.find('/', slash + 1) != std::string::npos) {
    throw Error(std::string(what) + ": '" + name + "' is not " + form);
  }
  return slash;
}
}  // namespace

Task Session::call(const std::string& function, const std::vector<DataObject>& inputs, std::string config,
                   const std::vector<ObjectKind>& outputs) {
  auto slash = executorSlash(function, "call", "executor/function");
  for (auto& input : inputs) impl->checkInput(input, input.session);
  auto& task = impl->newTask(client::LocalTask::Type::CALL, outputs);
  task.executor = function.substr(0, slash);
  task.function = function.substr(slash + 1);
  task.callConfig = std::move(config);
  task.name = function;
  for (auto& input : inputs) task.inputs.push_back({input.id(), "", ""});
  return Task(impl.get(), task.n);
}

Actor Session::actor(const std::string& type, const std::vector<DataObject>& inputs, std::string config) {
  auto slash = executorSlash(type, "actor", "executor/Type");
  if (type.find('.', slash) != std::string::npos) throw Error("actor: '" + type + "' is not executor/Type");
  for (auto& input : inputs) impl->checkInput(input, input.session);
  auto& task = impl->newTask(client::LocalTask::Type::ACTOR, {});
  task.executor = type.substr(0, slash);
  task.function = type.substr(slash + 1);
  task.callConfig = std::move(config);
  task.name = type;
  impl->actorTypes[task.n] = type;
  for (auto& input : inputs) task.inputs.push_back({input.id(), "", ""});
  return Actor(impl.get(), task.n);
}

Actor Session::actorHandle(uint64_t actorTask) { return Actor(impl.get(), actorTask); }

Task Session::sleep(std::chrono::milliseconds duration, std::optional<DataObject> input) {
  if (input) impl->checkInput(*input, input->session);
  auto& task = impl->newTask(client::LocalTask::Type::SLEEP,
                             {input ? input->kind() : ObjectKind::BLOB});
  task.sleepMs = duration.count();
  if (input) task.inputs.push_back({input->id(), "", ""});
  return Task(impl.get(), task.n);
}

Task Session::execute(const Program& program) { return execute(program, {}); }

Task Session::execute(const Program& program,
                      const std::vector<std::pair<std::string, DataObject>>& slots) {
  std::vector<Program::Input> inputs = program.inputs;
  std::vector<bool> used(slots.size());
  for (auto& input : inputs) {
    if (input.slot.empty()) continue;
    bool bound = false;
    for (size_t i = 0; i < slots.size(); i++) {
      if (slots[i].first == input.slot) {
        impl->checkInput(slots[i].second, slots[i].second.session);
        input.object = slots[i].second.id();
        used[i] = bound = true;
      }
    }
    if (!bound) throw Error("program slot '" + input.slot + "' is not bound");
  }
  for (size_t i = 0; i < slots.size(); i++) {
    if (!used[i]) throw Error("the program has no slot '" + slots[i].first + "'");
  }
  // An output at an input's path, or inside it, changes that input in
  // place: the input must be writable.
  for (auto& input : inputs) {
    if (input.path.empty()) continue;
    auto in = normalisedSandboxPath(input.path);
    for (auto& output : program.outputs) {
      if (!output) continue;
      auto out = normalisedSandboxPath(*output);
      if (isAtOrInside(out, in)) input.writable = true;
    }
  }
  auto& task = impl->newTask(client::LocalTask::Type::EXECUTE, program.outputKinds);
  task.name = program.taskName;
  task.cpus = program.cpuCount;
  task.inputs = std::move(inputs);
  task.args = program.args;
  task.shell = program.isShell;
  task.stdinIndex = program.stdinIndex;
  task.outputMappings = program.outputs;
  task.env = program.envVars;
  task.strictPipes = program.strictPipes;
  return Task(impl.get(), task.n);
}

Task Session::makeDir(const std::vector<std::pair<std::string, DataObject>>& entries) {
  for (auto& [path, object] : entries) impl->checkInput(object, object.session);
  auto& task = impl->newTask(client::LocalTask::Type::MAKE_DIR, {ObjectKind::DIR});
  for (auto& [path, object] : entries) task.inputs.push_back({object.id(), path, ""});
  return Task(impl.get(), task.n);
}

Task Session::sliceDir(const DataObject& dir, const std::string& path) {
  impl->checkInput(dir, dir.session);
  bool wantsDir = !path.empty() && path.back() == '/';
  auto& task = impl->newTask(client::LocalTask::Type::SLICE_DIR,
                             {wantsDir ? ObjectKind::DIR : ObjectKind::BLOB});
  task.inputs.push_back({dir.id(), "", ""});
  task.path = path;
  return Task(impl.get(), task.n);
}

Task Session::load(const std::string& path) {
  auto& task = impl->newTask(client::LocalTask::Type::LOAD, {ObjectKind::BLOB});
  task.path = path;
  return Task(impl.get(), task.n);
}

Task Session::loadDir(const std::string& path) {
  auto& task = impl->newTask(client::LocalTask::Type::LOAD_DIR, {ObjectKind::DIR});
  task.path = path;
  return Task(impl.get(), task.n);
}

Task Session::store(const DataObject& object, const std::string& path, bool overwrite) {
  impl->checkInput(object, object.session);
  auto& task = impl->newTask(client::LocalTask::Type::STORE, {});
  task.inputs.push_back({object.id(), "", ""});
  task.path = path;
  task.overwrite = overwrite;
  return Task(impl.get(), task.n);
}

namespace {

// Calls on named actors of other sessions are submitted first (they read
// nothing of this session).
void submitForeign(client::SessionImpl& impl) {
  for (auto& entry : impl.foreign) {
    // (A named pointer: clang 14 cannot capture a structured binding.)
    auto* handle = entry.second.get();
    if (!handle->tasks.empty() || !handle->objects.empty()) handle->whileOpen([handle]() { handle->submit(); });
  }
}

}  // namespace

void Session::submit() {
  submitForeign(*impl);
  impl->whileOpen([&]() { impl->submit(); });
}

void Session::submitAndWait(const std::vector<Task>& tasks) {
  // By session, as wait(). Other sessions' parts go unwaited, as submit()
  // sends them, so that this one's tasks do not wait behind them; theirs
  // are waited for after.
  std::map<client::SessionImpl*, std::vector<uint64_t>> ids;
  for (auto& t : tasks) ids[t.session].push_back(t.id());
  submitForeign(*impl);
  auto own = ids.find(impl.get());
  bool waited = impl->whileOpen([&]() { return impl->submit(own != ids.end() ? &own->second : nullptr); });
  for (auto& [owner, list] : ids) {
    if (owner == impl.get() && waited) continue;
    owner->wait(list, false, nullptr);
  }
}

void Session::wait(const std::vector<Task>& tasks, WaitTimeout timeout) {
  client::DeadlineScope scope(impl->client, timeout);
  // By session: calls on a named actor of another session are its tasks.
  std::map<client::SessionImpl*, std::vector<uint64_t>> ids;
  for (auto& t : tasks) ids[t.session].push_back(t.id());
  for (auto& [owner, list] : ids) owner->wait(list, false, nullptr);
}

void Session::wait(const std::vector<DataObject>& objects, WaitTimeout timeout) {
  if (objects.empty()) return;
  client::DeadlineScope scope(impl->client, timeout);
  // By session, as tasks: outputs of calls on another session's actor.
  std::map<client::SessionImpl*, std::vector<uint64_t>> ids;
  for (auto& o : objects) ids[o.session].push_back(o.id());
  for (auto& [owner, list] : ids) owner->wait(list, false, nullptr);
}

void Session::waitAll() {
  // A function's session: every task it submitted (the session's all
  // would include the function's own task).
  if (impl->parent != 0) {
    impl->wait(impl->submittedTasks, false, nullptr);
    return;
  }
  impl->wait({}, false, nullptr);
}

namespace {

// The ids of `ids` finished at once or within `timeout` (none if it ran
// out first).
std::vector<uint64_t> waitForSome(client::SessionImpl& impl, const std::vector<uint64_t>& ids, WaitTimeout timeout) {
  std::vector<uint64_t> finished;
  client::DeadlineScope scope(impl.client, timeout);
  try {
    impl.wait(ids, true, &finished);
  } catch (const Timeout&) {
    return {};
  }
  return finished;
}

}  // namespace

std::vector<uint64_t> Session::waitSome(const std::vector<Task>& tasks, WaitTimeout timeout) {
  std::vector<uint64_t> ids;
  for (auto& t : tasks) ids.push_back(t.id());
  return waitForSome(*impl, ids, timeout);
}

std::vector<uint64_t> Session::waitSome(const std::vector<DataObject>& objects, WaitTimeout timeout) {
  std::vector<uint64_t> ids;
  auto* owner = objects.empty() ? impl.get() : objects.front().session;
  for (auto& o : objects) {
    if (o.session != owner) throw Error("waitSome: objects of more than one session (wait for each's apart)");
    ids.push_back(o.id());
  }
  return waitForSome(*owner, ids, timeout);
}

void Session::unkeep(const std::vector<DataObject>& objects) {
  impl->checkOpen();
  std::vector<uint64_t> ids;
  for (auto& o : objects) ids.push_back(o.id());
  impl->recordNamed(ids);
  for (auto id : ids) {
    if (auto* call = impl->directOf(id)) call->bytes.erase(id);
  }
  impl->whileOpen([&]() {
    impl->client.retrying([&]() {
      auto req = impl->client.svc().unkeepRequest();
      impl->name(req);
      auto list = req.initObjects(objects.size());
      for (size_t i = 0; i < objects.size(); i++) list.set(i, objects[i].id());
      req.send().wait(impl->client.waitScope());
    });
  });
}

uint64_t client::SessionImpl::takeId() {
  if (nextN >= blockEnd) {
    uint64_t first = client.retrying([&]() {
      auto req = client.svc().reserveIdsRequest();
      name(req);
      req.setCount(ID_BLOCK);
      return req.send().wait(client.waitScope()).getFirst();
    });
    nextN = first;
    blockEnd = first + ID_BLOCK;
  }
  return nextN++;
}

void client::SessionImpl::cancelTask(uint64_t n) {
  checkOpen();
  recordNamed({n});
  client.retrying([&]() {
    auto req = client.svc().cancelTaskRequest();
    name(req);
    req.setTask(n);
    req.send().wait(client.waitScope());
  });
}

void Session::cancel() {
  impl->checkOpen();
  impl->recordNamed({}, true);
  impl->client.retrying([&]() {
    auto req = impl->client.svc().cancelRequest();
    impl->name(req);
    req.send().wait(impl->client.waitScope());
  });
}

namespace client {
SessionState toState(wire::SessionState::Reader s) {
  return SessionState{s.getId(),
                      s.getName().cStr(),
                      s.getState() == wire::SessionState::State::OPEN,
                      s.getFailure().getMessage().cStr(),
                      s.getTasksWaiting(),
                      s.getTasksReady(),
                      s.getTasksRunning(),
                      s.getTasksFinished(),
                      s.getTasksFailed(),
                      s.getTasksSkipped(),
                      s.getClosed()};
}
}  // namespace client

SessionState Session::state() {
  impl->checkOpen();
  return impl->client.retrying([&]() {
    auto req = impl->client.svc().getStateRequest();
    impl->name(req);
    return client::toState(req.send().wait(impl->client.waitScope()).getState());
  });
}

std::vector<TaskInfo> Session::tasks(const std::vector<uint64_t>& ids,
                                     const std::vector<std::string>& states, uint32_t limit) {
  return impl->taskInfos(ids, states, limit);
}

TaskExplanation Session::explain(uint64_t task) {
  TaskExplanation out;
  impl->recordNamed({task});
  impl->client.retrying([&]() {
    auto req = impl->client.svc().explainRequest();
    impl->name(req);
    req.setTask(task);
    auto reply = req.send().wait(impl->client.waitScope());
    out.summary = reply.getSummary();
    out.details.clear();
    for (auto line : reply.getDetails()) out.details.emplace_back(line);
  });
  return out;
}

void Session::close() {
  if (impl->closed) return;
  impl->closed = true;
  impl->client.ownedSessions.erase(impl->id);
  impl->client.retrying([&]() {
    auto req = impl->client.svc().closeSessionRequest();
    impl->name(req);
    req.send().wait(impl->client.waitScope());
  });
}

void Session::detach() {
  impl->owned = false;
  impl->client.ownedSessions.erase(impl->id);
}

DataObject Session::object(uint64_t id) {
  if (impl->kinds.count(id) == 0) impl->objectInfos({id});
  return DataObject(impl.get(), id);
}

std::vector<ObjectInfo> Session::objects(const std::vector<uint64_t>& ids) {
  return impl->objectInfos(ids);
}

}  // namespace squall
