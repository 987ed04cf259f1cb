// `squall submit`: one program as a task, its outputs written locally.
#include "commands.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <squall/client/client.h>
#include <stdexcept>
#include <sys/wait.h>

namespace squall {

namespace {

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

}  // namespace

int runSubmit(const SubmitOptions& options) {
  try {
    if (options.command.empty()) throw Error("no program given (squall submit -- PROGRAM ARGS...)");
    if (options.shell && options.command.size() != 1) {
      throw Error("--shell takes one command line (quote it)");
    }
    Client client(options.server, options.token);
    auto session = client.newSession(options.name.empty() ? "submit " + options.command[0]
                                                          : options.name);
    Program program = options.shell ? Program::shell(options.command[0]) : Program(options.command);
    program.cpus(options.cpus).name(options.name.empty() ? options.command[0] : options.name);
    // A local file, or a directory (uploaded as a tree).
    auto upload = [&session](const std::string& file) {
      std::error_code error;
      if (std::filesystem::is_directory(file, error)) return session.directory(file);
      return session.blob(readFile(file), file);
    };
    for (auto& mapping : options.inputs) {
      auto [path, file] = splitMapping(mapping, "--input");
      program.input(upload(file), path);
    }
    for (auto& mapping : options.writableInputs) {
      auto [path, file] = splitMapping(mapping, "--input-rw");
      program.writableInput(upload(file), path);
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
    for (size_t i = 0; i < task.outputCount(); i++) task.output(i).keep();
    session.submit();
    try {
      session.waitAll();
    } catch (const TaskFailed& failure) {
      fprintf(stderr, "squall: %s\n", failure.what());
      if (!failure.stderrTail.empty() &&
          std::string(failure.what()).find(failure.stderrTail) == std::string::npos) {
        fprintf(stderr, "--- stderr (tail) ---\n%s", failure.stderrTail.c_str());
      }
      if (failure.exitStatus > 0 && failure.exitStatus < 256) return failure.exitStatus;
      return 1;
    }
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
