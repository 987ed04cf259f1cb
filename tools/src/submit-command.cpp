// `squall submit`: one program (or, with --call, one function of a warm
// executor) as a task, its outputs written locally.
#include "commands.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <squall/client/client.h>
#include <stdexcept>
#include <sys/wait.h>

namespace squall {

namespace {

// --resource NAME=AMOUNT, each.
void askResources(Task& task, const std::vector<std::string>& resources) {
  for (auto& resource : resources) {
    auto eq = resource.find('=');
    if (eq == std::string::npos || eq == 0) throw Error("--resource '" + resource + "' is not NAME=AMOUNT");
    task.resource(resource.substr(0, eq), resource.substr(eq + 1));
  }
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read '" + path + "': " + strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::pair<std::string, std::string> splitMapping(const std::string& text, const char* flag) {
  auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw Error(std::string(flag) + " takes PATH=FILE (got '" + text + "')");
  }
  return {text.substr(0, eq), text.substr(eq + 1)};
}

// The printed failure of a task; the exit status squall submit ends with.
int reportFailure(const TaskFailed& failure) {
  fprintf(stderr, "squall: %s\n", failure.what());
  if (!failure.stderrTail.empty() && std::string(failure.what()).find(failure.stderrTail) == std::string::npos) {
    fprintf(stderr, "--- stderr (tail) ---\n%s", failure.stderrTail.c_str());
  }
  if (failure.exitStatus > 0 && failure.exitStatus < 256) return failure.exitStatus;
  return 1;
}

// Keeps the task's outputs, submits and waits: the exit status to end with
// when the task failed, else nothing.
std::optional<int> submitAndWait(Session& session, Task& task) {
  for (size_t i = 0; i < task.outputCount(); i++) task.output(i).keep();
  try {
    // This task, not the session's all: a call on another session's actor
    // is a task of that session. One round trip when the graph fits one
    // message; a refused submit throws Error, not TaskFailed.
    session.submitAndWait({task});
  } catch (const TaskFailed& failure) {
    return reportFailure(failure);
  }
  return std::nullopt;
}

// A local file, or a directory (uploaded as a tree).
DataObject upload(Session& session, const std::string& file) {
  std::error_code error;
  if (std::filesystem::is_directory(file, error)) return session.directory(file);
  // Any size: a big file is read at the submit, in pieces, straight to a
  // governor.
  return session.fileBlob(file, file);
}

// What --call, --actor and --method share: no program's options, one
// config. `what` is the flag, for messages.
void refuseProgramOptions(const SubmitOptions& options, const std::string& what) {
  if (!options.command.empty()) throw Error(what + " runs no program: give none");
  if (options.shell || !options.stdinFile.empty() || !options.stdoutFile.empty() || !options.writableInputs.empty()) {
    throw Error(what + " runs no program: --shell, --stdin, --stdout and --input-rw are for programs");
  }
  if (!options.config.empty() && !options.configFile.empty()) throw Error("give --config or --config-file, not both");
}

std::string configOf(const SubmitOptions& options) {
  return options.configFile.empty() ? options.config : readFile(options.configFile);
}

// The kinds of a function's or a method's outputs, from --output FILE
// (FILE/ for a dir); none given: one blob, printed.
std::vector<ObjectKind> outputKinds(const SubmitOptions& options) {
  std::vector<ObjectKind> kinds;
  for (auto& file : options.outputs) {
    kinds.push_back(file.size() > 1 && file.back() == '/' ? ObjectKind::DIR : ObjectKind::BLOB);
  }
  if (kinds.empty()) kinds.push_back(ObjectKind::BLOB);
  return kinds;
}

// Submits `task` (a call of `kinds` outputs), waits for it, writes its
// outputs where --output says (or prints its one output) and closes the
// session.
int finishCall(const SubmitOptions& options, Session& session, Task& task, const std::vector<ObjectKind>& kinds) {
  if (auto failed = submitAndWait(session, task)) return *failed;
  if (options.outputs.empty()) {
    task.output(0).fetchTo(stdout);
  } else {
    for (size_t i = 0; i < options.outputs.size(); i++) {
      if (kinds[i] == ObjectKind::DIR) {
        task.output(i).fetchDir(options.outputs[i]);
      } else {
        task.output(i).fetchToFile(options.outputs[i]);
      }
    }
  }
  session.close();
  return 0;
}

// squall submit --call EXECUTOR/FUNCTION.
int runCall(const SubmitOptions& options) {
  refuseProgramOptions(options, "--call");
  Client client(options.server, options.token);
  auto session = client.newSession(options.name.empty() ? "call " + options.call : options.name);
  std::vector<DataObject> inputs;
  for (auto& file : options.inputs) inputs.push_back(upload(session, file));
  auto kinds = outputKinds(options);
  auto task = session.call(options.call, inputs, configOf(options), kinds);
  task.cpus(options.cpus);
  askResources(task, options.resources);
  task.waitForResources(options.waitForResources);
  if (!options.name.empty()) task.name(options.name);
  return finishCall(options, session, task, kinds);
}

// squall submit --actor EXECUTOR/Type --name NAME: submitted, then the
// session is closed; being named, the actor outlives it (until killed).
int runActor(const SubmitOptions& options) {
  refuseProgramOptions(options, "--actor");
  if (options.name.empty()) {
    throw Error("--actor needs --name NAME: an actor started from the command line is named, so that "
                "--method NAME.METHOD and --kill-actor NAME reach it");
  }
  if (!options.outputs.empty()) throw Error("--actor: an actor has no outputs (its methods have): no --output");
  Client client(options.server, options.token);
  auto session = client.newSession("actor " + options.name);
  std::vector<DataObject> inputs;
  for (auto& file : options.inputs) inputs.push_back(upload(session, file));
  auto actor = session.actor(options.actor, inputs, configOf(options));
  actor.named(options.name).cpus(options.cpus).maxRestarts(options.maxRestarts).maxCallRetries(options.maxCallRetries);
  auto task = actor.task();
  askResources(task, options.resources);
  task.name(options.name);
  session.submit();
  // Its constructor runs on a governor from now on; one that fails shows in
  // the answer to the next --method NAME.METHOD.
  printf("actor %s (%s) submitted: task %llu of session %llu\n", options.name.c_str(), options.actor.c_str(),
         static_cast<unsigned long long>(actor.id()), static_cast<unsigned long long>(session.id()));
  session.close();
  return 0;
}

// squall submit --method NAME.METHOD: a call on a live named actor.
int runMethod(const SubmitOptions& options) {
  refuseProgramOptions(options, "--method");
  // An actor's name may hold dots, a method's not.
  auto dot = options.method.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == options.method.size()) {
    throw Error("--method '" + options.method + "' is not NAME.METHOD (an actor's name, a dot, its method)");
  }
  if (!options.inputs.empty()) {
    throw Error("--method: a named actor's method reads no files from here (its calls read objects of the "
                "actor's own session): pass the data as --config or --config-file");
  }
  if (options.cpus != 1 || !options.resources.empty()) {
    throw Error("--method: a method runs on what its actor holds; give --cpus and --resource to --actor");
  }
  Client client(options.server, options.token);
  auto session = client.newSession("method " + options.method);
  auto actor = session.getActor(options.method.substr(0, dot));
  auto kinds = outputKinds(options);
  auto task = actor.call(options.method.substr(dot + 1), {}, configOf(options), kinds);
  if (!options.name.empty()) task.name(options.name);
  return finishCall(options, session, task, kinds);
}

// squall submit --kill-actor NAME.
int runKillActor(const SubmitOptions& options) {
  refuseProgramOptions(options, "--kill-actor");
  if (!options.inputs.empty() || !options.outputs.empty() || !options.config.empty() || !options.configFile.empty() ||
      options.cpus != 1 || !options.resources.empty()) {
    throw Error("--kill-actor NAME takes no other task options");
  }
  Client client(options.server, options.token);
  auto session = client.newSession("kill " + options.killActor);
  session.getActor(options.killActor).kill();
  printf("actor %s killed\n", options.killActor.c_str());
  session.close();
  return 0;
}

}  // namespace

int runSubmit(const SubmitOptions& options) {
  try {
    int modes = !options.call.empty() + !options.actor.empty() + !options.method.empty() + !options.killActor.empty();
    if (modes > 1) throw Error("give one of --call, --actor, --method and --kill-actor");
    if (options.actor.empty() && (options.maxRestarts || options.maxCallRetries)) {
      throw Error("--max-restarts and --max-call-retries are for --actor");
    }
    if (!options.call.empty()) return runCall(options);
    if (!options.actor.empty()) return runActor(options);
    if (!options.method.empty()) return runMethod(options);
    if (!options.killActor.empty()) return runKillActor(options);
    if (!options.config.empty() || !options.configFile.empty()) throw Error("--config is for --call, --actor and --method");
    if (options.command.empty()) throw Error("no program given (squall submit -- PROGRAM ARGS...)");
    if (options.shell && options.command.size() != 1) {
      throw Error("--shell takes one command line (quote it)");
    }
    Client client(options.server, options.token);
    auto session = client.newSession(options.name.empty() ? "submit " + options.command[0]
                                                          : options.name);
    Program program = options.shell ? Program::shell(options.command[0]) : Program(options.command);
    program.cpus(options.cpus).name(options.name.empty() ? options.command[0] : options.name);
    for (auto& mapping : options.inputs) {
      auto [path, file] = splitMapping(mapping, "--input");
      program.input(upload(session, file), path);
    }
    for (auto& mapping : options.writableInputs) {
      auto [path, file] = splitMapping(mapping, "--input-rw");
      program.writableInput(upload(session, file), path);
    }
    if (!options.stdinFile.empty()) program.stdinFrom(session.blob(readFile(options.stdinFile)));
    // Where each output goes; a directory output is unpacked there. An
    // output at an input's path is that input changed in place (the
    // client library makes the input writable).
    std::vector<std::pair<std::string, bool>> destinations;
    for (auto& mapping : options.outputs) {
      auto [path, file] = splitMapping(mapping, "--output");
      bool isDir = path.size() > 1 && path.back() == '/';
      program.output(path, isDir ? ObjectKind::DIR : ObjectKind::BLOB);
      destinations.emplace_back(file, isDir);
    }
    program.stdoutOutput();
    auto task = session.execute(program);
    askResources(task, options.resources);
    task.waitForResources(options.waitForResources);
    if (auto failed = submitAndWait(session, task)) return *failed;
    for (size_t i = 0; i < destinations.size(); i++) {
      auto& [file, isDir] = destinations[i];
      if (isDir) {
        task.output(i).fetchDir(file);
      } else {
        task.output(i).fetchToFile(file);
      }
    }
    auto out = task.output(destinations.size());
    if (options.stdoutFile.empty()) {
      out.fetchTo(stdout);
    } else {
      out.fetchToFile(options.stdoutFile);
    }
    session.close();
    return 0;
  } catch (const Error& e) {
    fprintf(stderr, "squall: %s\n", e.what());
    return 1;
  }
}

}  // namespace squall
