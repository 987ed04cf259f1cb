// Implementation of the client API (see client.h). Thread: the one that
// created the Client; a thread-local KJ event loop is shared by all Clients
// of that thread.
#include <squall/client/client.h>

#include <capnp/message.h>
#include <cstdio>
#include <cstdlib>
#include <kj/async-io.h>
#include <kj/debug.h>
#include <map>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <squall/proto/token.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>
#include <unordered_map>

namespace squall {
namespace client {

namespace {

// One KJ event loop per thread, shared by that thread's Clients.
struct Loop {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  int users = 0;
};
thread_local Loop* threadLoop = nullptr;

Loop& acquireLoop() {
  if (threadLoop == nullptr) threadLoop = new Loop;
  threadLoop->users++;
  return *threadLoop;
}

void releaseLoop() {
  if (--threadLoop->users == 0) {
    delete threadLoop;
    threadLoop = nullptr;
  }
}

// Chunks of a submit stay far below capnp's 64 MiB message limit.
constexpr size_t MAX_ITEMS_PER_ADD = 20000;
constexpr size_t MAX_BYTES_PER_ADD = 16 << 20;
constexpr size_t INLINE_CONSTANT_BYTES = 1 << 20;
constexpr size_t APPEND_CHUNK_BYTES = 8 << 20;

// Receives fetched bytes into a string or a file.
class SinkImpl final : public wire::ByteSink::Server {
 public:
  SinkImpl(std::string* text, FILE* file, uint64_t& received)
      : text(text), file(file), received(received) {}

  kj::Promise<void> write(WriteContext context) override {
    auto params = context.getParams();
    auto chunk = params.getChunk();
    kj::Array<kj::byte> decoded;
    kj::ArrayPtr<const kj::byte> bytes = chunk;
    if (params.getRawSize() != 0) {
      decoded = decompressChunk(chunk, params.getRawSize());
      bytes = decoded;
    }
    received += bytes.size();
    if (text != nullptr) text->append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    if (file != nullptr) {
      SQUALL_REQUIRE(fwrite(bytes.begin(), 1, bytes.size(), file) == bytes.size(),
                     "cannot write fetched data: ", strerror(errno));
    }
    return kj::READY_NOW;
  }

  // Writes are handled synchronously above, so all have landed by now.
  kj::Promise<void> done(DoneContext) override { return kj::READY_NOW; }

 private:
  std::string* text;
  FILE* file;
  uint64_t& received;
};

}  // namespace

struct ClientImpl {
  Loop& loop;
  std::string address;
  std::string token;
  kj::Own<RpcClient> connection;
  kj::Maybe<wire::ClientService::Client> service;
  std::map<std::string, std::pair<kj::Own<RpcClient>, wire::DataService::Client>> dataServices;

  ClientImpl() : loop(acquireLoop()) {}
  ~ClientImpl() {
    dataServices.clear();
    service = nullptr;
    connection = nullptr;
    releaseLoop();
  }

  kj::WaitScope& waitScope() { return loop.io.waitScope; }

  wire::ClientService::Client& svc() {
    KJ_IF_MAYBE(s, service) { return *s; }
    throw Error("not connected");
  }

  // Runs `body` and turns KJ exceptions into squall::Error.
  template <typename Body>
  auto guard(Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const kj::Exception& e) {
      std::string message = userMessage(e).cStr();
      if (e.getType() == kj::Exception::Type::DISCONNECTED) {
        message = "connection to the squall server at " + address + " lost: " + message;
      }
      throw Error(message);
    }
  }

  wire::DataService::Client& dataService(const std::string& where) {
    auto it = dataServices.find(where);
    if (it != dataServices.end()) return it->second.second;
    auto conn = connectTo(loop.io.provider->getNetwork(), where).wait(waitScope());
    auto req = conn->bootstrap<wire::DataBootstrap>().openRequest();
    req.setVersion(wire::PROTOCOL_VERSION);
    req.setToken(token);
    auto data = req.send().getService();
    auto inserted = dataServices.emplace(where, std::make_pair(kj::mv(conn), kj::mv(data)));
    return inserted.first->second.second;
  }
};

struct LocalObject {
  uint64_t n = 0;
  bool keep = false;
  bool constant = false;
  std::string label;
  std::string contentType;
  std::string data;
};

struct LocalTask {
  uint64_t n = 0;
  enum class Type { CONCAT, SLEEP, EXECUTE } type = Type::CONCAT;
  std::string name;
  uint32_t cpus = 1;
  std::vector<Program::Input> inputs;
  std::vector<uint64_t> outputs;
  uint64_t sleepMs = 0;
  std::vector<std::string> args;
  bool shell = false;
  int stdinIndex = -1;
  std::vector<std::optional<std::string>> outputMappings;
  std::vector<std::pair<std::string, std::string>> env;
};

struct SessionImpl {
  ClientImpl& client;
  uint64_t id;
  bool closed = false;
  uint64_t nextN = 1;
  // Built since the last submit.
  std::vector<LocalObject> objects;
  std::vector<LocalTask> tasks;
  std::unordered_map<uint64_t, size_t> objectIndex;
  std::unordered_map<uint64_t, size_t> taskIndex;
  // Outputs of every task built in this session.
  std::unordered_map<uint64_t, std::vector<uint64_t>> outputsOf;

  SessionImpl(ClientImpl& client, uint64_t id) : client(client), id(id) {}

  LocalObject& pendingObject(uint64_t n) {
    auto it = objectIndex.find(n);
    if (it == objectIndex.end()) {
      throw Error("object " + std::to_string(n) + " was already submitted; set it up before submit");
    }
    return objects[it->second];
  }

  LocalTask& pendingTask(uint64_t n) {
    auto it = taskIndex.find(n);
    if (it == taskIndex.end()) {
      throw Error("task " + std::to_string(n) + " was already submitted; set it up before submit");
    }
    return tasks[it->second];
  }

  LocalObject& newObject() {
    objectIndex[nextN] = objects.size();
    LocalObject object;
    object.n = nextN++;
    objects.push_back(std::move(object));
    return objects.back();
  }

  LocalTask& newTask(LocalTask::Type type, size_t outputs) {
    checkOpen();
    LocalTask task;
    task.n = nextN++;
    task.type = type;
    for (size_t i = 0; i < outputs; i++) task.outputs.push_back(newObject().n);
    outputsOf[task.n] = task.outputs;
    taskIndex[task.n] = tasks.size();
    tasks.push_back(std::move(task));
    return tasks.back();
  }

  void checkOpen() {
    if (closed) throw Error("session " + std::to_string(id) + " is closed");
  }

  void checkInput(const DataObject& object, SessionImpl* owner) {
    if (owner != this) {
      throw Error("object " + std::to_string(object.id()) + " belongs to another session");
    }
  }

  void submit();
  void wait(const std::vector<uint64_t>& ids, bool any, std::vector<uint64_t>* finished);
  void fetch(uint64_t n, std::string* text, FILE* file);
};

namespace {

void setId(wire::Id::Builder b, uint64_t session, uint64_t n) {
  b.setSession(session);
  b.setN(n);
}

void fillTask(wire::TaskSpec::Builder out, const LocalTask& task, uint64_t session) {
  setId(out.initId(), session, task.n);
  out.setName(task.name);
  out.initResources().setCpus(task.cpus);
  auto inputs = out.initInputs(task.inputs.size());
  for (size_t i = 0; i < task.inputs.size(); i++) {
    setId(inputs[i].initObject(), session, task.inputs[i].object);
    inputs[i].setPath(task.inputs[i].path);
  }
  auto outputs = out.initOutputs(task.outputs.size());
  for (size_t i = 0; i < task.outputs.size(); i++) setId(outputs[i], session, task.outputs[i]);
  auto config = out.initConfig();
  switch (task.type) {
    case LocalTask::Type::CONCAT: config.setConcat(); break;
    case LocalTask::Type::SLEEP: config.initSleep().setMilliseconds(task.sleepMs); break;
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

}  // namespace

void SessionImpl::submit() {
  checkOpen();
  client.guard([&]() {
    auto& ws = client.waitScope();
    auto req = client.svc().submitRequest();
    req.setSession(id);
    auto submission = req.send().getSubmission();
    size_t nextObject = 0;
    size_t nextTask = 0;
    std::vector<const LocalObject*> bigConstants;
    do {
      // Pick a slice that fits one message.
      size_t objectEnd = nextObject, taskEnd = nextTask, bytes = 0;
      while (objectEnd < objects.size() && objectEnd - nextObject < MAX_ITEMS_PER_ADD &&
             bytes < MAX_BYTES_PER_ADD) {
        auto& o = objects[objectEnd++];
        bytes += 64 + o.label.size() + (o.data.size() <= INLINE_CONSTANT_BYTES ? o.data.size() : 0);
      }
      while (taskEnd < tasks.size() && taskEnd - nextTask < MAX_ITEMS_PER_ADD &&
             bytes < MAX_BYTES_PER_ADD) {
        auto& t = tasks[taskEnd++];
        bytes += 128 + t.name.size() + 48 * (t.inputs.size() + t.outputs.size());
        for (auto& a : t.args) bytes += a.size() + 8;
      }
      auto add = submission.addRequest();
      auto objectList = add.initObjects(objectEnd - nextObject);
      for (size_t i = nextObject; i < objectEnd; i++) {
        auto& o = objects[i];
        auto out = objectList[i - nextObject];
        setId(out.initId(), id, o.n);
        out.setKind(wire::ObjectKind::BLOB);
        out.setKeep(o.keep);
        out.setLabel(o.label);
        out.setContentType(o.contentType);
        out.setIsConstant(o.constant);
        if (o.constant) {
          if (o.data.size() <= INLINE_CONSTANT_BYTES) {
            out.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(o.data.data()), o.data.size()));
          } else {
            bigConstants.push_back(&o);
          }
        }
      }
      auto taskList = add.initTasks(taskEnd - nextTask);
      for (size_t i = nextTask; i < taskEnd; i++) fillTask(taskList[i - nextTask], tasks[i], id);
      add.send().wait(ws);
      nextObject = objectEnd;
      nextTask = taskEnd;
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
  objects.clear();
  tasks.clear();
  objectIndex.clear();
  taskIndex.clear();
}

void SessionImpl::wait(const std::vector<uint64_t>& ids, bool any, std::vector<uint64_t>* finished) {
  checkOpen();
  client.guard([&]() {
    auto fill = [&](auto req) {
      req.setSession(id);
      auto list = req.initIds(ids.size());
      for (size_t i = 0; i < ids.size(); i++) list.set(i, ids[i]);
      return req;
    };
    auto check = [](wire::WaitResult::Reader result) {
      if (result.isFailed()) {
        auto f = result.getFailed();
        throw TaskFailed(f.getMessage().cStr(), f.getTask(), f.getTaskName().cStr(),
                         f.getExitStatus(), f.getStderrTail().cStr());
      }
    };
    if (any) {
      auto response = fill(client.svc().waitSomeRequest()).send().wait(client.waitScope());
      check(response.getResult());
      if (finished) {
        for (auto n : response.getFinished()) finished->push_back(n);
      }
    } else {
      auto response = fill(client.svc().waitRequest()).send().wait(client.waitScope());
      check(response.getResult());
    }
  });
}

void SessionImpl::fetch(uint64_t n, std::string* text, FILE* file) {
  checkOpen();
  client.guard([&]() {
    auto& ws = client.waitScope();
    auto req = client.svc().fetchRequest();
    req.setSession(id);
    req.setObject(n);
    auto response = req.send().wait(ws);
    auto location = response.getLocation();
    if (location.isData()) {
      auto data = location.getData();
      if (text) text->assign(reinterpret_cast<const char*>(data.begin()), data.size());
      if (file) {
        SQUALL_REQUIRE(fwrite(data.begin(), 1, data.size(), file) == data.size(),
                       "cannot write fetched data: ", strerror(errno));
      }
      return;
    }
    std::string where = location.getGovernor().cStr();
    uint64_t received = 0;
    auto read = client.dataService(where).readRequest();
    read.setId(location.getId());
    read.setOffset(0);
    read.setCompress(false);
    read.setSink(kj::heap<SinkImpl>(text, file, received));
    auto result = read.send().wait(ws);
    SQUALL_REQUIRE(received == result.getSize(), "fetch of object ", n, " from governor ", where,
                   " was cut short: ", received, " of ", result.getSize(), " bytes");
  });
}

}  // namespace client

// ------------------------------------------------------------ DataObject

DataObject& DataObject::keep(bool keep) {
  session->pendingObject(n).keep = keep;
  return *this;
}

DataObject& DataObject::label(std::string label) {
  session->pendingObject(n).label = std::move(label);
  return *this;
}

DataObject& DataObject::contentType(std::string type) {
  session->pendingObject(n).contentType = std::move(type);
  return *this;
}

std::string DataObject::fetch() const {
  std::string text;
  session->fetch(n, &text, nullptr);
  return text;
}

void DataObject::fetchToFile(const std::string& path) const {
  FILE* file = fopen(path.c_str(), "wb");
  if (file == nullptr) throw Error("cannot open " + path + " for writing: " + strerror(errno));
  try {
    session->fetch(n, nullptr, file);
  } catch (...) {
    fclose(file);
    throw;
  }
  if (fclose(file) != 0) throw Error("cannot write " + path + ": " + strerror(errno));
}

void DataObject::fetchTo(std::FILE* file) const {
  session->fetch(n, nullptr, file);
  if (fflush(file) != 0) throw Error(std::string("cannot write fetched data: ") + strerror(errno));
}

void DataObject::wait() const { session->wait({n}, false, nullptr); }

// ------------------------------------------------------------ Program

Program Program::shell(std::string line) {
  Program program({std::move(line)});
  program.isShell = true;
  return program;
}

Program& Program::arg(std::string value) {
  args.push_back(std::move(value));
  return *this;
}

Program& Program::input(const DataObject& object, std::string path) {
  inputs.push_back({object.id(), std::move(path)});
  return *this;
}

Program& Program::inputArg(const DataObject& object, std::string path) {
  args.push_back(path);
  return input(object, std::move(path));
}

Program& Program::stdinFrom(const DataObject& object) {
  stdinIndex = static_cast<int>(inputs.size());
  inputs.push_back({object.id(), ""});
  return *this;
}

Program& Program::output(std::string path) {
  outputs.emplace_back(std::move(path));
  return *this;
}

Program& Program::stdoutOutput() {
  outputs.emplace_back(std::nullopt);
  return *this;
}

Program& Program::env(std::string name, std::string value) {
  envVars.emplace_back(std::move(name), std::move(value));
  return *this;
}

Program& Program::cpus(uint32_t n) {
  cpuCount = n;
  return *this;
}

Program& Program::name(std::string name) {
  taskName = std::move(name);
  return *this;
}

// ------------------------------------------------------------ Task

DataObject Task::output(size_t index) const {
  auto& outputs = session->outputsOf.at(n);
  if (index >= outputs.size()) {
    throw Error("task " + std::to_string(n) + " has " + std::to_string(outputs.size()) +
                " outputs; there is no output " + std::to_string(index));
  }
  return DataObject(session, outputs[index]);
}

size_t Task::outputCount() const { return session->outputsOf.at(n).size(); }

Task& Task::name(std::string name) {
  session->pendingTask(n).name = std::move(name);
  return *this;
}

Task& Task::cpus(uint32_t count) {
  session->pendingTask(n).cpus = count;
  return *this;
}

void Task::wait() const { session->wait({n}, false, nullptr); }

// ------------------------------------------------------------ Session

Session::Session(std::unique_ptr<client::SessionImpl> impl) : impl(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;

Session::~Session() {
  if (impl && !impl->closed) {
    try {
      close();
    } catch (const Error&) {
      // The server or connection is gone; nothing left to release.
    }
  }
}

uint64_t Session::id() const { return impl->id; }

DataObject Session::blob(std::string data, std::string label) {
  impl->checkOpen();
  auto& object = impl->newObject();
  object.constant = true;
  object.data = std::move(data);
  object.label = std::move(label);
  return DataObject(impl.get(), object.n);
}

Task Session::concat(const std::vector<DataObject>& inputs) {
  for (auto& input : inputs) impl->checkInput(input, input.session);
  auto& task = impl->newTask(client::LocalTask::Type::CONCAT, 1);
  for (auto& input : inputs) task.inputs.push_back({input.id(), ""});
  return Task(impl.get(), task.n);
}

Task Session::sleep(std::chrono::milliseconds duration, std::optional<DataObject> input) {
  if (input) impl->checkInput(*input, input->session);
  auto& task = impl->newTask(client::LocalTask::Type::SLEEP, 1);
  task.sleepMs = duration.count();
  if (input) task.inputs.push_back({input->id(), ""});
  return Task(impl.get(), task.n);
}

Task Session::execute(const Program& program) {
  auto& task = impl->newTask(client::LocalTask::Type::EXECUTE, program.outputs.size());
  task.name = program.taskName;
  task.cpus = program.cpuCount;
  task.inputs = program.inputs;
  task.args = program.args;
  task.shell = program.isShell;
  task.stdinIndex = program.stdinIndex;
  task.outputMappings = program.outputs;
  task.env = program.envVars;
  return Task(impl.get(), task.n);
}

void Session::submit() { impl->submit(); }

void Session::wait(const std::vector<Task>& tasks) {
  std::vector<uint64_t> ids;
  for (auto& t : tasks) ids.push_back(t.id());
  if (ids.empty()) return;
  impl->wait(ids, false, nullptr);
}

void Session::wait(const std::vector<DataObject>& objects) {
  std::vector<uint64_t> ids;
  for (auto& o : objects) ids.push_back(o.id());
  if (ids.empty()) return;
  impl->wait(ids, false, nullptr);
}

void Session::waitAll() { impl->wait({}, false, nullptr); }

std::vector<uint64_t> Session::waitSome(const std::vector<Task>& tasks) {
  std::vector<uint64_t> ids, finished;
  for (auto& t : tasks) ids.push_back(t.id());
  impl->wait(ids, true, &finished);
  return finished;
}

void Session::unkeep(const std::vector<DataObject>& objects) {
  impl->checkOpen();
  impl->client.guard([&]() {
    auto req = impl->client.svc().unkeepRequest();
    req.setSession(impl->id);
    auto list = req.initObjects(objects.size());
    for (size_t i = 0; i < objects.size(); i++) list.set(i, objects[i].id());
    req.send().wait(impl->client.waitScope());
  });
}

void Session::cancel() {
  impl->checkOpen();
  impl->client.guard([&]() {
    auto req = impl->client.svc().cancelRequest();
    req.setSession(impl->id);
    req.send().wait(impl->client.waitScope());
  });
}

SessionState Session::state() {
  impl->checkOpen();
  return impl->client.guard([&]() {
    auto req = impl->client.svc().getStateRequest();
    req.setSession(impl->id);
    auto response = req.send().wait(impl->client.waitScope());
    auto s = response.getState();
    return SessionState{s.getId(),
                        s.getName().cStr(),
                        s.getState() == wire::SessionState::State::OPEN,
                        s.getFailure().getMessage().cStr(),
                        s.getTasksWaiting(),
                        s.getTasksReady(),
                        s.getTasksRunning(),
                        s.getTasksFinished(),
                        s.getTasksFailed()};
  });
}

void Session::close() {
  if (impl->closed) return;
  impl->closed = true;
  impl->client.guard([&]() {
    auto req = impl->client.svc().closeSessionRequest();
    req.setSession(impl->id);
    req.send().wait(impl->client.waitScope());
  });
}

// ------------------------------------------------------------ Client

Client::Client(const std::string& address, const std::string& token)
    : impl(std::make_unique<client::ClientImpl>()) {
  impl->address = address;
  if (impl->address.empty()) {
    const char* env = getenv("SQUALL_SERVER");
    impl->address = env && *env ? env : "127.0.0.1:" + std::to_string(SERVER_PORT);
  }
  impl->guard([&]() { impl->token = resolveToken(token, ""); });
  impl->guard([&]() {
    auto& ws = impl->waitScope();
    try {
      impl->connection = connectTo(impl->loop.io.provider->getNetwork(), impl->address).wait(ws);
    } catch (const kj::Exception& e) {
      throw Error("cannot connect to the squall server at " + impl->address + ": " +
                  userMessage(e).cStr());
    }
    auto req = impl->connection->bootstrap<wire::Bootstrap>().registerClientRequest();
    req.setVersion(wire::PROTOCOL_VERSION);
    req.setToken(impl->token);
    auto response = req.send().wait(ws);
    impl->service = response.getService();
  });
}

Client::~Client() = default;

const std::string& Client::address() const { return impl->address; }

Session Client::newSession(const std::string& name) {
  return impl->guard([&]() {
    auto req = impl->svc().newSessionRequest();
    req.setName(name);
    auto response = req.send().wait(impl->waitScope());
    return Session(std::make_unique<client::SessionImpl>(*impl, response.getSession()));
  });
}

std::vector<GovernorInfo> Client::governors() {
  return impl->guard([&]() {
    auto response = impl->svc().listGovernorsRequest().send().wait(impl->waitScope());
    std::vector<GovernorInfo> result;
    for (auto g : response.getGovernors()) {
      result.push_back(GovernorInfo{g.getId(), g.getName().cStr(), g.getDataAddress().cStr(),
                                    g.getCpus(), g.getCpusUsed(), g.getTasksAssigned(),
                                    g.getObjects()});
    }
    return result;
  });
}

}  // namespace squall
