// squall's C++ client API: connect, open a session, build a graph of tasks
// and data objects locally, submit it, wait, fetch results.
//
// Threading: a Client runs its own KJ event loop on the thread that created
// it; use it (and its sessions, tasks and objects) from that thread only.
// Every call blocks until the server answers. Errors are thrown as
// squall::Error (or TaskFailed) carrying the server's message.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace squall {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A session failed because one of its tasks did (or it was cancelled).
class TaskFailed : public Error {
 public:
  TaskFailed(const std::string& message, uint64_t task, std::string taskName, int exitStatus,
             std::string stderrTail)
      : Error(message), task(task), taskName(std::move(taskName)), exitStatus(exitStatus),
        stderrTail(std::move(stderrTail)) {}
  uint64_t task;          // 0 when no single task caused it
  std::string taskName;
  int exitStatus;         // -1 when not a process exit
  std::string stderrTail;
};

namespace client {
struct ClientImpl;
struct SessionImpl;
}  // namespace client

class Session;
class Task;

// A handle to a data object of a session (valid while its Session lives).
class DataObject {
 public:
  uint64_t id() const { return n; }
  // Keep the object after its consumers finish, so it can be fetched or
  // used in later submits. Set before submit.
  DataObject& keep(bool keep = true);
  DataObject& label(std::string label);
  DataObject& contentType(std::string type);
  // Blocks until the object is finished, then returns its bytes. The object
  // must be kept.
  std::string fetch() const;
  // Like fetch() but writes the bytes to `path` (streamed, any size).
  void fetchToFile(const std::string& path) const;
  // Like fetch() but writes the bytes to an open stream.
  void fetchTo(std::FILE* file) const;
  void wait() const;

 private:
  friend class Session;
  friend class Task;
  friend class Program;
  DataObject(client::SessionImpl* session, uint64_t n) : session(session), n(n) {}
  client::SessionImpl* session;
  uint64_t n;
};

// Builds an `execute` task: a program (argv or a shell line), its inputs
// mapped as read-only files in its sandbox, its outputs taken from files
// and/or its stdout.
class Program {
 public:
  explicit Program(std::vector<std::string> args) : args(std::move(args)) {}
  // Runs `line` with /bin/sh -c.
  static Program shell(std::string line);

  Program& arg(std::string value);
  // Places `object` at `path` in the sandbox.
  Program& input(const DataObject& object, std::string path);
  // Places `object` at `path` and passes `path` as the next argument.
  Program& inputArg(const DataObject& object, std::string path);
  // Feeds `object` on the program's stdin.
  Program& stdinFrom(const DataObject& object);
  // Declares an output read from the file `path` the program writes.
  Program& output(std::string path);
  // Declares an output made of the program's stdout.
  Program& stdoutOutput();
  Program& env(std::string name, std::string value);
  Program& cpus(uint32_t n);
  Program& name(std::string name);

  struct Input {
    uint64_t object;
    std::string path;
  };

 private:
  friend class Session;
  std::vector<std::string> args;
  bool isShell = false;
  std::vector<Input> inputs;
  int stdinIndex = -1;
  std::vector<std::optional<std::string>> outputs;  // nullopt = stdout
  std::vector<std::pair<std::string, std::string>> envVars;
  uint32_t cpuCount = 1;
  std::string taskName;
};

class Task {
 public:
  uint64_t id() const { return n; }
  DataObject output(size_t index = 0) const;
  size_t outputCount() const;
  Task& name(std::string name);
  Task& cpus(uint32_t n);
  // Blocks until this task is finished.
  void wait() const;

 private:
  friend class Session;
  Task(client::SessionImpl* session, uint64_t n) : session(session), n(n) {}
  client::SessionImpl* session;
  uint64_t n;
};

struct SessionState {
  uint64_t id;
  std::string name;
  bool open;
  std::string failure;
  uint64_t waiting, ready, running, finished, failed;
};

struct GovernorInfo {
  uint32_t id;
  std::string name;
  std::string dataAddress;
  uint32_t cpus;
  uint32_t cpusUsed;
  uint32_t tasksAssigned;
  // Data objects the server knows the governor holds.
  uint64_t objects;
};

class Session {
 public:
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  uint64_t id() const;

  // A constant blob, uploaded with the next submit.
  DataObject blob(std::string data, std::string label = "");
  // Output 0 = the inputs' bytes, concatenated in order.
  Task concat(const std::vector<DataObject>& inputs);
  // Sleeps; output 0 = `input`'s bytes (empty without input).
  Task sleep(std::chrono::milliseconds duration, std::optional<DataObject> input = std::nullopt);
  Task execute(const Program& program);

  // Sends everything built since the last submit, in as many messages as
  // it needs. Throws Error naming the problem if the graph is invalid (then
  // nothing of it was applied).
  void submit();
  // Block until the named tasks/objects are finished; throw TaskFailed if the
  // session fails first.
  void wait(const std::vector<Task>& tasks);
  void wait(const std::vector<DataObject>& objects);
  void waitAll();
  // Blocks until at least one is finished; returns those finished now.
  std::vector<uint64_t> waitSome(const std::vector<Task>& tasks);
  void unkeep(const std::vector<DataObject>& objects);
  void cancel();
  SessionState state();
  // Removes everything of the session on the server; later calls throw.
  void close();

 private:
  friend class Client;
  explicit Session(std::unique_ptr<client::SessionImpl> impl);
  std::unique_ptr<client::SessionImpl> impl;
};

class Client {
 public:
  // `address`: host:port; empty = $SQUALL_SERVER, else 127.0.0.1:7210.
  // `token`: empty = $SQUALL_TOKEN / $SQUALL_TOKEN_FILE, else none.
  explicit Client(const std::string& address = "", const std::string& token = "");
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  Session newSession(const std::string& name = "");
  std::vector<GovernorInfo> governors();
  const std::string& address() const;

 private:
  std::unique_ptr<client::ClientImpl> impl;
};

}  // namespace squall
