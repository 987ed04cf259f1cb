// The objects and tasks of a session as the client API gives them (see
// client.h): DataObject, Program and Task. Thread: the one that created the
// Client.
#include "client-impl.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <squall/proto/resource-amounts.h>
#include <unistd.h>

#include "tar.h"

namespace squall {

// ------------------------------------------------------------ DataObject

ObjectKind DataObject::kind() const {
  auto it = session->kinds.find(n);
  return it == session->kinds.end() ? ObjectKind::BLOB : it->second;
}

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

void DataObject::fetchDir(const std::string& path) const {
  // The tar goes through a temporary file: dirs may be far larger than memory.
  std::string tmpl = (std::filesystem::temp_directory_path() / "squall-fetch-XXXXXX").string();
  int fd = mkstemp(tmpl.data());
  if (fd < 0) throw Error(std::string("cannot create a temporary file: ") + strerror(errno));
  FILE* file = fdopen(fd, "w+b");
  struct Cleanup {
    std::string path;
    ~Cleanup() { unlink(path.c_str()); }
  } cleanup{tmpl};
  try {
    session->fetch(n, nullptr, file, ObjectKind::DIR);
  } catch (...) {
    fclose(file);
    throw;
  }
  if (fclose(file) != 0) throw Error(std::string("cannot write fetched data: ") + strerror(errno));
  client::untarInto(tmpl, path);
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

Program& Program::input(const DataObject& object, std::string path, InputOptions options) {
  if (options.arg) args.push_back(path);
  inputs.push_back({object.id(), std::move(path), "", options.writable});
  return *this;
}

Program& Program::inputArg(const DataObject& object, std::string path) {
  return input(object, std::move(path), {.arg = true});
}

Program& Program::writableInput(const DataObject& object, std::string path) {
  return input(object, std::move(path), {.writable = true});
}

Program& Program::stdinFrom(const DataObject& object) {
  stdinIndex = static_cast<int>(inputs.size());
  inputs.push_back({object.id(), "", ""});
  return *this;
}

Program& Program::inputSlot(std::string slot, std::string path, InputOptions options) {
  if (options.arg) args.push_back(path);
  inputs.push_back({0, std::move(path), std::move(slot), options.writable});
  return *this;
}

Program& Program::inputArgSlot(std::string slot, std::string path) {
  return inputSlot(std::move(slot), std::move(path), {.arg = true});
}

Program& Program::stdinSlot(std::string slot) {
  stdinIndex = static_cast<int>(inputs.size());
  inputs.push_back({0, "", std::move(slot)});
  return *this;
}

Program& Program::output(std::string path, ObjectKind kind) {
  outputs.emplace_back(std::move(path));
  outputKinds.push_back(kind);
  return *this;
}

Program& Program::stdoutOutput(ObjectKind kind) {
  if (kind == ObjectKind::DIR) throw Error("stdout cannot be a dir output");
  outputs.emplace_back(std::nullopt);
  outputKinds.push_back(kind);
  return *this;
}

Program& Program::brokenPipeIsError(bool isError) {
  strictPipes = isError;
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
  auto it = session->outputsOf.find(n);
  if (it == session->outputsOf.end()) {
    throw Error("task " + std::to_string(n) + " was not built by this client; its outputs are unknown");
  }
  auto& outputs = it->second;
  if (index >= outputs.size()) {
    throw Error("task " + std::to_string(n) + " has " + std::to_string(outputs.size()) +
                " outputs; there is no output " + std::to_string(index));
  }
  return DataObject(session, outputs[index]);
}

size_t Task::outputCount() const {
  auto it = session->outputsOf.find(n);
  return it == session->outputsOf.end() ? 0 : it->second.size();
}

Task& Task::name(std::string name) {
  session->pendingTask(n).name = std::move(name);
  return *this;
}

Task& Task::cpus(uint32_t count) {
  session->pendingTask(n).cpus = count;
  return *this;
}

namespace {
void addResource(client::LocalTask& task, const std::string& name, uint64_t units, bool all) {
  if (!isResourceName(name)) throw Error("resource '" + name + "': " + RESOURCE_NAME_RULE);
  if (name == "cpus") throw Error("resource cpus: use Task::cpus");
  for (auto& r : task.resources) {
    if (r.name == name) throw Error("resource " + name + " is asked for twice");
  }
  if (!all && units == 0) throw Error("resource " + name + ": an amount of 0");
  task.resources.push_back({name, units, all});
}
}  // namespace

Task& Task::resource(const std::string& name, double amount) {
  if (!(amount >= 0) || amount > 1e15) throw Error("resource " + name + ": amount " + std::to_string(amount));
  addResource(session->pendingTask(n), name, static_cast<uint64_t>(std::llround(amount * RESOURCE_UNIT)), false);
  return *this;
}

Task& Task::resource(const std::string& name, const std::string& amount) {
  if (amount == "all") {
    addResource(session->pendingTask(n), name, 0, true);
    return *this;
  }
  uint64_t units;
  try {
    units = parseAmount(amount);
  } catch (const std::invalid_argument& e) {
    throw Error("resource " + name + ": " + e.what());
  }
  addResource(session->pendingTask(n), name, units, false);
  return *this;
}

Task& Task::retries(uint32_t count) {
  session->pendingTask(n).retries = count;
  return *this;
}

Task& Task::allowFailure(bool allow) {
  session->pendingTask(n).allowFailure = allow;
  return *this;
}

Task& Task::waitForResources(bool wait) {
  session->pendingTask(n).waitForResources = wait;
  return *this;
}

Task& Task::expectedDuration(std::chrono::milliseconds expected) {
  session->pendingTask(n).expectedMs = expected.count() > 0 ? expected.count() : 0;
  return *this;
}

Task& Task::timeLimit(std::chrono::milliseconds limit) {
  session->pendingTask(n).timeLimitMs = limit.count() > 0 ? limit.count() : 0;
  return *this;
}

Task& Task::attributes(std::string json) {
  session->pendingTask(n).attributes = std::move(json);
  return *this;
}

Task& Task::inputLabel(size_t index, std::string label) {
  auto& task = session->pendingTask(n);
  if (index >= task.inputs.size()) {
    throw Error("task " + std::to_string(n) + " has " + std::to_string(task.inputs.size()) +
                " inputs; there is no input " + std::to_string(index) + " to label");
  }
  task.inputs[index].label = std::move(label);
  return *this;
}

ObjectInfo DataObject::info() const { return session->objectInfos({n}).at(0); }

TaskInfo Task::info() const {
  auto infos = session->taskInfos({n}, {}, 1);
  if (infos.empty()) throw Error("task " + std::to_string(n) + " is unknown to the server");
  return infos[0];
}

void Task::wait() const { session->wait({n}, false, nullptr); }

void Task::cancel() const { session->cancelTask(n); }

}  // namespace squall
