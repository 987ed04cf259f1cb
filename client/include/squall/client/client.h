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
#include <functional>
#include <map>
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

// A wait given a timeout that ran out before what it waited for had ended
// (nothing was changed by it: wait again, or not).
class Timeout : public Error {
 public:
  explicit Timeout(const std::string& message) : Error(message) {}
};

// How long a wait may block; none: until it ends.
using WaitTimeout = std::optional<std::chrono::milliseconds>;

namespace client {
struct ClientImpl;
struct SessionImpl;
}  // namespace client

// BLOB: bytes; DIR: a directory tree; STREAM: bytes that flow from a
// running program to the programs reading it (see Program::stdoutOutput).
enum class ObjectKind { BLOB, DIR, STREAM };

class Session;
class Task;

// One object's bytes, as Session::fetchAllMapped gives them: in memory of
// their own, or, for a big blob held by a governor on this machine, a
// read-only mapping of the governor's file (no copy; the file stays
// readable through the mapping even once the object is removed there).
class ObjectBytes {
 public:
  ObjectBytes() = default;
  explicit ObjectBytes(std::string text) : text_(std::move(text)) {}
  ObjectBytes(ObjectBytes&& other) noexcept;
  ObjectBytes& operator=(ObjectBytes&& other) noexcept;
  ObjectBytes(const ObjectBytes&) = delete;
  ObjectBytes& operator=(const ObjectBytes&) = delete;
  ~ObjectBytes();

  const char* data() const { return mapped_ != nullptr ? static_cast<const char*>(mapped_) : text_.data(); }
  size_t size() const { return mapped_ != nullptr ? length_ : text_.size(); }
  bool mapped() const { return mapped_ != nullptr; }
  // The bytes as a string of their own (a copy when mapped).
  std::string take();

 private:
  friend struct client::ClientImpl;
  friend struct client::SessionImpl;
  std::string text_;
  void* mapped_ = nullptr;
  size_t length_ = 0;
};

// What the server knows of a data object.
struct ObjectInfo {
  uint64_t id;
  ObjectKind kind;
  std::string label;
  std::string contentType;
  bool keep;
  std::string state;  // unfinished, finished, removed, failed (never made)
  // Once finished: a blob's bytes / a dir's regular files' total, and the
  // xxh3-64 hash of the content.
  uint64_t size;
  uint64_t hash;
  uint64_t producer;  // the task making it; 0 for a constant
  std::vector<std::string> locations;  // governors holding a copy
};

// A handle to a data object of a session (valid while its Session lives).
class DataObject {
 public:
  uint64_t id() const { return n; }
  ObjectKind kind() const;
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
  // For a dir: unpacks it into the local directory `path` (created; must
  // not exist or be empty). fetch()/fetchToFile() of a dir give a tar.
  void fetchDir(const std::string& path) const;
  void wait() const;
  // Asks the server (after submit).
  ObjectInfo info() const;

 private:
  friend class Session;
  friend class Task;
  friend class Program;
  friend class Actor;
  DataObject(client::SessionImpl* session, uint64_t n) : session(session), n(n) {}
  client::SessionImpl* session;
  uint64_t n;
};

// How an input is placed (Program::input).
struct InputOptions {
  // Also pass its path as the program's next argument.
  bool arg = false;
  // A private copy the program may change (write, append, chmod; add to or
  // remove from a dir's tree) instead of the read-only input; the object
  // itself never changes. Not for a stream read live.
  bool writable = false;
};

// Builds an `execute` task: a program (argv or a shell line), its inputs
// mapped as read-only files in its sandbox, its outputs taken from files
// and/or its stdout.
//
// Read-only means the object can never change, whatever the program does:
// writing to an input fails (the governor's default), or reaches only a
// private copy (governors started with --input-isolation copy); see the
// guide, "What a program may do to its inputs".
class Program {
 public:
  explicit Program(std::vector<std::string> args) : args(std::move(args)) {}
  // Runs `line` with /bin/sh -c.
  static Program shell(std::string line);

  Program& arg(std::string value);
  // Places `object` at `path` in the sandbox.
  Program& input(const DataObject& object, std::string path, InputOptions options = {});
  // Places `object` at `path` and passes `path` as the next argument.
  Program& inputArg(const DataObject& object, std::string path);
  // Places a private copy of `object` at `path` that the program may
  // change (InputOptions::writable).
  Program& writableInput(const DataObject& object, std::string path);
  // Feeds `object` on the program's stdin.
  Program& stdinFrom(const DataObject& object);
  // Declares an output read from the file (or, for ObjectKind::DIR, the
  // directory) `path` the program writes. For ObjectKind::STREAM, `path` is
  // a named pipe the governor makes; what the program writes into it flows
  // to the stream's readers while it runs.
  //
  // In place: an output at an input's path (of the input's kind), or inside
  // a dir input, takes what the program left there, e.g. `sed -i s/a/b/ f`
  // with input and output both at `f`, or a tool that adds a file to the
  // dir `d` with an output `d` (ObjectKind::DIR). That input then becomes
  // writable (a private copy); the object it came from never changes.
  Program& output(std::string path, ObjectKind kind = ObjectKind::BLOB);
  // Declares an output made of the program's stdout: a blob, or with
  // ObjectKind::STREAM a stream its readers read while it is written.
  //
  // Streams: a program that takes a stream as an input (stdinFrom, or
  // input(stream, path) for a named pipe) runs at the same time as the
  // stream's producer, on the same or another governor, reading the bytes
  // as they come, with backpressure. Every reader gets every byte. A task
  // that reads a stream in any other way (concat, or an input of a later
  // submit) waits for its end; the stream's bytes are then stored (as they
  // are when the stream is kept) and it behaves like a blob.
  Program& stdoutOutput(ObjectKind kind = ObjectKind::BLOB);
  // When this program stops reading one of its input streams early (exits
  // before the end, like `head`), the producer meets a broken pipe. That is
  // normal for pipes and the producer still finishes; with this set, it
  // fails instead.
  Program& brokenPipeIsError(bool isError = true);
  Program& env(std::string name, std::string value);
  // Cpus the program holds while it runs (default 1). Programs joined by
  // streams (a pipe) that do not set it share one cpu between them, as a
  // shell's pipe runs on one core; one that sets it holds what it asks for.
  Program& cpus(uint32_t n);
  Program& name(std::string name);

  // A Program can be a factory: named slots are bound to objects at each
  // Session::execute(program, {{"slot", object}, ...}) call.
  // Slot placed at `path` in the sandbox.
  Program& inputSlot(std::string slot, std::string path, InputOptions options = {});
  // Slot placed at `path`, and `path` passed as the next argument.
  Program& inputArgSlot(std::string slot, std::string path);
  // Slot fed on stdin.
  Program& stdinSlot(std::string slot);

  struct Input {
    uint64_t object;  // 0 while a slot is unbound
    std::string path;
    std::string slot;
    bool writable = false;
    std::string label;  // see Task::inputLabel
  };

 private:
  friend class Session;
  std::vector<std::string> args;
  bool isShell = false;
  std::vector<Input> inputs;
  int stdinIndex = -1;
  std::vector<std::optional<std::string>> outputs;  // nullopt = stdout
  std::vector<ObjectKind> outputKinds;
  std::vector<std::pair<std::string, std::string>> envVars;
  // Unset: the default, 1 (shared with the rest of a pipe; see cpus()).
  std::optional<uint32_t> cpuCount;
  std::string taskName;
  bool strictPipes = false;
};

struct TaskInfo {
  uint64_t id;
  std::string name;
  std::string type;   // concat, execute, make_dir, ...
  std::string state;  // waiting, ready, running, finished, failed, cancelled, skipped
  std::string governor;
  uint64_t startTimeUs;  // wall clock, µs since the epoch; 0 = not started
  uint64_t durationUs;
  int exitStatus;  // -1 when not a process exit
  std::string error;
  std::string stdoutTail;  // last KiBs of stdout when it was not an output
  std::string stderrTail;
  uint32_t attempt;
  std::string attributes;
  std::vector<uint64_t> inputs;  // object ids, in order
  std::vector<ObjectInfo> outputs;
};

// A piece of what a task's process printed (Session::watchOutput): whole
// lines mostly, of its standard output or error. `label` names the task
// ("square pid=123"), `governor` where it ran.
struct TaskOutput {
  uint64_t task;
  bool isStderr;
  std::string label;
  std::string governor;
  std::string text;
};

struct TaskExplanation {
  std::string summary;               // one line
  std::vector<std::string> details;  // the facts behind it
};

class Task {
 public:
  uint64_t id() const { return n; }
  DataObject output(size_t index = 0) const;
  size_t outputCount() const;
  Task& name(std::string name);
  Task& cpus(uint32_t n);
  // A resource besides cpus (docs/resources.md): `amount` of the pool
  // `name` ("gpus", "mem", any a governor offers), fractional for a share
  // of one item (0.5 gpus: two such tasks on one GPU), in the pool's units
  // for a sum ("mem" in bytes: resource("mem", 2.0 * (1 << 30))); as text
  // with K/M/G/T ("2G") or "all" for the whole pool. Once per name; the
  // server refuses what no governor could give, naming the resource.
  Task& resource(const std::string& name, double amount);
  Task& resource(const std::string& name, const std::string& amount);
  // Failure policy (set before submit): extra attempts after a failure; a
  // failure that does not fail the session (dependents are skipped); a time
  // limit after which the governor kills the task.
  Task& retries(uint32_t n);
  Task& allowFailure(bool allow = true);
  Task& timeLimit(std::chrono::milliseconds limit);
  // What it asks (cpus, resources) may be more than any governor connected
  // now has: it waits for one that can run it (the cluster grows, an
  // autoscaler adds one) instead of being refused at submit.
  Task& waitForResources(bool wait = true);
  // How long the task is expected to run: a hint for the scheduler, which
  // starts the longest expected chains of work first (docs/scheduling.md).
  // Never enforced; unknown by default.
  Task& expectedDuration(std::chrono::milliseconds expected);
  // Free-form user attributes, JSON text, shown with the task.
  Task& attributes(std::string json);
  // The label of input `index` (in the order the task was given its
  // inputs), carried in the task's spec: a function reads it as
  // call.input(index).label() (docs/tasklib.md); the status page shows it.
  Task& inputLabel(size_t index, std::string label);
  TaskInfo info() const;
  // Blocks until this task is finished.
  void wait() const;
  // Cancels the submitted task and every task it submitted (its children,
  // docs/nested.md), theirs too: they end cancelled, what reads their
  // outputs is skipped, and the session goes on. Nothing for a task that
  // has ended but its children still running.
  void cancel() const;

 private:
  friend class Session;
  friend class Actor;
  Task(client::SessionImpl* session, uint64_t n) : session(session), n(n) {}
  client::SessionImpl* session;
  uint64_t n;
};

// An actor (docs/actors.md): one instance of an actor type that an
// executor program registered (tasklib's Executor::actor), living in a
// process of its own on one governor from when it is placed until it is
// killed or its session closes. It holds the resources its task asks for
// (cpus, gpus, ...) for its whole life. Its method calls are tasks like any
// other (their outputs feed other tasks, other tasks' outputs feed them),
// run one at a time, in the order they were made; calls on different
// actors run in parallel. A wait for every task of the session does not
// wait for actors, only for their calls. Valid while its Session lives.
class Actor {
 public:
  // Its task's id (the actor is a task of type actor, without outputs).
  uint64_t id() const { return n; }
  // The session it is a task of (another session's, for a named actor
  // reached with Session::getActor).
  uint64_t sessionId() const;
  // A call of `method` on `inputs` with `config` bytes, making outputs of
  // the kinds given (blobs or dirs; as many as the method declares). The
  // server refuses a method the actor type does not have, naming it.
  Task call(const std::string& method, const std::vector<DataObject>& inputs = {}, std::string config = "",
            const std::vector<ObjectKind>& outputs = {ObjectKind::BLOB});
  // Its task: a name, attributes, allowFailure (its death then fails no
  // session), expectedDuration... (set before submit).
  Task task() const;
  // What it holds while it lives (set before submit; see Task).
  Actor& cpus(uint32_t n);
  Actor& resource(const std::string& name, double amount);
  Actor& resource(const std::string& name, const std::string& amount);
  // Times its governor starts it again (the constructor run anew on the
  // same inputs) after its process died; 0 by default: it ends failed and
  // so do its calls not yet run.
  Actor& maxRestarts(uint32_t n);
  // Times a call that was running when the actor's process died is run
  // again on the restarted actor before it fails; 0 by default.
  Actor& maxCallRetries(uint32_t n);
  // Names the actor (set before submit; letters, digits, '-', '_', '.'):
  // any session of the server reaches it with Session::getActor(name), and
  // it outlives its session: closing the session (or its client going)
  // leaves the session open, ownerless, until its named actors end (kill
  // them, from any session). Unique among the server's live actors: a
  // second submit of a name in use is refused, naming who has it.
  Actor& named(std::string name);
  // Ends the actor: its process is stopped, its task ends cancelled (not a
  // failure), its calls not yet run end cancelled (what reads their
  // outputs is skipped). Killing an actor that has ended does nothing.
  void kill();

 private:
  friend class Session;
  Actor(client::SessionImpl* session, uint64_t n) : session(session), n(n) {}
  client::SessionImpl* session;
  uint64_t n;
};

struct SessionState {
  uint64_t id;
  std::string name;
  bool open;
  std::string failure;
  uint64_t waiting, ready, running, finished, failed, skipped;
  // Closed: what the server keeps of it (counts, failure, some tasks) is
  // all there is. `open` is then false; `failure` says whether it failed.
  bool closed = false;
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
  // The functions its executors offer ("executor/function"), sorted.
  std::vector<std::string> functions;
  // Its resources besides cpus: name -> (all it has, what its tasks hold),
  // in items or units (gpus 2, memory in bytes; docs/resources.md).
  std::map<std::string, std::pair<double, double>> resources;
};

class Session {
 public:
  Session(Session&&) noexcept;
  Session& operator=(Session&&) noexcept;
  ~Session();

  uint64_t id() const;

  // A constant blob, uploaded with the next submit: up to 1 MiB inside the
  // submit, bigger ones of any size straight to a governor the server
  // chooses (their bytes never go through the server).
  DataObject blob(std::string data, std::string label = "");
  // A constant made of pieces of memory, in order (Python's out-of-band
  // pickles: an array's own memory): up to 1 MiB copied; a bigger one
  // uploaded to a governor before this returns, read straight from the
  // pieces, never joined. The pieces may change once it returns.
  DataObject blob(const std::vector<std::string_view>& parts, std::string label = "");
  // A local file uploaded as a constant blob, any size: a big one is read
  // at the submit, in pieces, never held whole (`label` empty: its name).
  DataObject fileBlob(const std::string& path, std::string label = "");
  // A local directory uploaded as a dir constant (a tar, through the
  // server: 48 MiB at most; bigger data is read on a governor with loadDir).
  DataObject directory(const std::string& path);
  // Output 0 = the inputs' bytes, concatenated in order.
  Task concat(const std::vector<DataObject>& inputs);
  // A function of an executor program that governors keep warm (tasklib,
  // docs/tasklib.md): "executor/function" on `inputs` with `config` bytes.
  // `outputs`: the kinds of what it makes, in order (one blob by default;
  // a STREAM output flows to its readers while the function writes it);
  // an input that is a stream whose producer has not started is read live.
  // The server refuses a function no governor offers, or a count of
  // outputs it does not declare, naming it.
  Task call(const std::string& function, const std::vector<DataObject>& inputs = {}, std::string config = "",
            const std::vector<ObjectKind>& outputs = {ObjectKind::BLOB});
  // An actor of `type` ("executor/Type", as its executor registered it),
  // constructed from `inputs` and `config` (docs/actors.md). The server
  // refuses a type no governor offers, naming it.
  Actor actor(const std::string& type, const std::vector<DataObject>& inputs = {}, std::string config = "");
  // A handle to the actor whose task is `actorTask` in this session (made
  // by this or an earlier submit).
  Actor actorHandle(uint64_t actorTask);
  // The live actor named `name` (Actor::named), of any session of the
  // server. Calls on an actor of another session are tasks of that session
  // (their outputs are fetched and waited for as usual, and go with
  // this session's submit); they read objects of that session only, so
  // pass data as their config. Such a call is allowed to fail: a method
  // that throws fails the call (wait() and fetch() throw TaskFailed) but
  // not the actor's session, so the actor lives on for its other users.
  // Throws Error when no live actor has the name (saying how the last one
  // of that name ended, if one did).
  Actor getActor(const std::string& name);
  // Sleeps; output 0 = `input`'s bytes (empty without input).
  Task sleep(std::chrono::milliseconds duration, std::optional<DataObject> input = std::nullopt);
  Task execute(const Program& program);
  // Binds a factory Program's slots (see Program::inputSlot).
  Task execute(const Program& program,
               const std::vector<std::pair<std::string, DataObject>>& slots);
  // Output 0: a dir holding each object at its relative path.
  Task makeDir(const std::vector<std::pair<std::string, DataObject>>& entries);
  // Output 0: the file (blob), or with a trailing '/' the directory (dir), at
  // `path` inside `dir`.
  Task sliceDir(const DataObject& dir, const std::string& path);
  // Read a file / directory on the governor (under its --allow-path roots).
  Task load(const std::string& path);
  Task loadDir(const std::string& path);
  // Write a blob or dir to `path` on the governor (under --allow-path).
  Task store(const DataObject& object, const std::string& path, bool overwrite = false);

  // Sends everything built since the last submit, in as many messages as
  // it needs. Throws Error naming the problem if the graph is invalid (then
  // nothing of it was applied, and it is dropped: the next submit sends
  // only what is built after this one).
  void submit();
  // submit(), then wait(tasks), in one round trip to the server when what
  // was built fits one message (e.g. an actor's call made and waited for:
  // Ray's `ray.get(a.f.remote())`). Errors as from those two: Error from
  // the submit (nothing applied), TaskFailed from the wait.
  void submitAndWait(const std::vector<Task>& tasks);
  // Block until the named tasks/objects are finished; throw TaskFailed if the
  // session fails first.
  //
  // Once the session has failed, every call that needs it to go on
  // (submit, wait, waitSome, unkeep, and fetch of an object that will not be
  // made) throws that same TaskFailed, naming the task that failed it. What
  // it finished and kept can still be fetched, and state(), tasks() and
  // objects() still answer: they describe the failed session.
  // With a timeout, one that runs out first throws Timeout.
  void wait(const std::vector<Task>& tasks, WaitTimeout timeout = std::nullopt);
  void wait(const std::vector<DataObject>& objects, WaitTimeout timeout = std::nullopt);
  void waitAll();
  // Blocks until at least one is finished; returns those finished now
  // (none when the timeout ran out first).
  std::vector<uint64_t> waitSome(const std::vector<Task>& tasks, WaitTimeout timeout = std::nullopt);
  // Objects of one session (outputs of calls on another session's actor
  // are of that session); Error for a mix.
  std::vector<uint64_t> waitSome(const std::vector<DataObject>& objects, WaitTimeout timeout = std::nullopt);
  void unkeep(const std::vector<DataObject>& objects);
  void cancel();
  SessionState state();
  // Tasks by id, or (none given) up to `limit` tasks in `states` (empty:
  // any), failures first.
  std::vector<TaskInfo> tasks(const std::vector<uint64_t>& ids = {},
                              const std::vector<std::string>& states = {}, uint32_t limit = 1000);
  // Why a task is where it is (`squall explain`): for one not running yet,
  // what it waits for (inputs, resources and who holds them, room on the
  // governors, its place in the queue); for one that ended, how.
  TaskExplanation explain(uint64_t task);
  // What the session's functions and actors (in executors) print, handed
  // to `sink` as it comes, in order, while this client waits for anything
  // (it runs no thread of its own): Ray's log_to_driver. From the oldest
  // the server still holds; once per session (a second sink replaces the
  // first). A sink that throws loses that batch only.
  void watchOutput(std::function<void(const std::vector<TaskOutput>&)> sink);
  // Hands the sink what the server holds and it has not had yet, waiting
  // for nothing more (before the session closes, say).
  void drainOutput();
  // Removes everything of the session on the server; later calls throw.
  void close();
  // Leave the session open on the server when this object goes (for
  // sessions attached from another client).
  void detach();
  // A handle to an object of this session made elsewhere (e.g. by the client
  // that built the graph), for fetch/wait; asks the server for its kind
  // (throws Error for an id the session does not have).
  DataObject object(uint64_t id);
  std::vector<ObjectInfo> objects(const std::vector<uint64_t>& ids);
  // The bytes of each object (kept, or read by a task not yet ended), in
  // order, waiting for them: as many fetch() calls, but with every request
  // in flight at once (one round trip to the server and one to each
  // governor, not one per object). Throws the TaskFailed of the first, in
  // order, that will not be made.
  std::vector<std::string> fetchAll(const std::vector<DataObject>& objects);
  // As fetchAll, but a blob of 1 MiB or more held by a governor on this
  // machine comes as a read-only mapping of its file (ObjectBytes): no copy.
  std::vector<ObjectBytes> fetchAllMapped(const std::vector<DataObject>& objects);

 private:
  friend class Client;
  std::vector<ObjectBytes> fetchEach(const std::vector<DataObject>& objects, bool map);
  explicit Session(std::unique_ptr<client::SessionImpl> impl);
  std::unique_ptr<client::SessionImpl> impl;
};

struct SessionOptions {
  // The session outlives this client: it is not closed when the client
  // goes (or its connection drops for good); `squall wait ID`, or another
  // Client's attach(ID), picks it up. Close it when done.
  bool persistent = false;
};

struct ClientOptions {
  // host:port; empty = $SQUALL_SERVER, else 127.0.0.1:7210.
  std::string address;
  // Empty = $SQUALL_TOKEN / $SQUALL_TOKEN_FILE, else none.
  std::string token;
  // A server that cannot be reached at first (restarting) is tried again
  // for up to $SQUALL_RECONNECT_TIMEOUT seconds instead of failing at once.
  bool waitForServer = false;
  // TLS (docs/deploy.md): the CA the server and governors must be signed
  // by, and this client's certificate and key, PEM files. Empty =
  // $SQUALL_TLS_CA, $SQUALL_TLS_CERT, $SQUALL_TLS_KEY; none: plain TCP.
  std::string tlsCa;
  std::string tlsCert;
  std::string tlsKey;
  // Called on the client's thread about every 100 ms while a wait
  // (Session::wait, waitSome, waitAll, Task::wait, DataObject::wait) or a
  // fetch blocks, e.g. to notice Ctrl-C (the Python binding checks its
  // signals here). What it throws ends the call with that exception: the
  // request is cancelled on the server and the session goes on. Empty:
  // calls block until they are answered.
  std::function<void()> whileBlocked;
  // Called with true just before a wait (Session::wait, waitSome, waitAll,
  // Task::wait, DataObject::wait) blocks on the server, and with false
  // once it is answered (or fails). tasklib sets it for a function's own
  // session: the function gives its cpus back while it waits for its
  // children (docs/nested.md). What it throws propagates.
  std::function<void(bool waiting)> aroundWait;
};

class Client {
 public:
  explicit Client(const std::string& address = "", const std::string& token = "");
  explicit Client(const ClientOptions& options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // A lost connection (the server restarted, the network failed) is made
  // again for up to $SQUALL_RECONNECT_TIMEOUT seconds (default 60): this
  // client's sessions are re-attached and waits carry on. A submit cut off
  // by it is sent again unless the server had recorded it.
  Session newSession(const std::string& name = "", SessionOptions options = {});
  // An existing session, by id or by name (the newest open one), e.g. one a
  // running `squall run` made. The returned Session does not close it when
  // destroyed. New tasks may be added to it. A closed session the server
  // still keeps (by id, or by name when no open one has it) attaches too,
  // to look at: state() and tasks() answer, the rest throws "closed".
  Session attach(uint64_t id);
  Session attach(const std::string& name);
  // attach(id) for a running task's function (tasklib: Call::session()):
  // every task submitted through it is a child of `parentTask`, cancelled
  // when the parent is cancelled or fails (docs/nested.md).
  Session attachChild(uint64_t id, uint64_t parentTask);
  std::vector<SessionState> sessions();
  std::vector<GovernorInfo> governors();
  const std::string& address() const;

 private:
  std::unique_ptr<client::ClientImpl> impl;
};

}  // namespace squall
