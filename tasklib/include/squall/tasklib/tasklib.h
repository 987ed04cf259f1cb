// tasklib: write an executor, a program whose named functions run as squall
// tasks in warm processes started by a governor (docs/tasklib.md).
//
//   int main(int argc, char** argv) {
//     squall::Executor ex("text");
//     ex.add("wordcount", [](squall::Call& call) {
//       auto text = call.input(0).text();
//       call.output(0).write(std::to_string(countWords(text)));
//     });
//     return ex.serve(argc, argv);
//   }
//
// A function runs on the executor's one thread, one call at a time; it may
// keep state between calls (a loaded model, an index) in its captures or in
// globals. Inputs are read-only views: a blob in a file of the governor's
// store is mapped, not copied; a dir is a path. Outputs are buffers or files
// the function writes; the governor adopts them by rename. An exception
// thrown by the function fails the task with its what(). A live stream
// input is read as it is written (read(), fd()), a stream output written as
// the function goes (write(), fd()): a function can be a stage of a
// streamed pipeline.
//
// An actor type is a class whose instance lives in one executor process,
// its methods called one after another on its state (docs/actors.md):
//
//   struct Counter {
//     explicit Counter(squall::Call& init) : total(std::stol(std::string(init.config()))) {}
//     void add(squall::Call& call) {
//       total += std::stol(std::string(call.config()));
//       call.output(0).write(std::to_string(total));
//     }
//     long total;
//   };
//   ex.actor<Counter>("Counter").method("add", &Counter::add);
//
// The governor gives each actor a process of its own: it constructs one
// instance there, then calls its methods as "Counter.add"; plain functions
// of the same executor go on working beside it.
//
// An actor may let several of its calls be under way at once (Ray's async
// and threaded actors): its constructor calls init.allowConcurrentCalls(n),
// and each method hands its call over with call.detach(), returns, and
// ends it later from a thread or an event loop of its own:
//
//   void slow(squall::Call& call) {
//     auto end = call.detach();
//     std::thread([&call, end]() {
//       call.output(0).write(work(call.config()));
//       end->finish();
//     }).detach();
//   }
//
// Such calls start in the order they came, at most n at once, and are
// answered as they end.
//
// A function may submit tasks of its own (docs/nested.md): call.session()
// is its task's session, and what it submits there are the task's
// children (cancelled with it). While it waits for them, its cpus go back
// to the governor, so a recursion deeper than the cluster's cpus does not
// deadlock:
//
//   ex.add("fib", [](squall::Call& call) {
//     long n = std::stol(std::string(call.config()));
//     if (n < 2) return call.output(0).write(std::to_string(n));
//     auto& s = call.session();
//     auto a = s.call("math/fib", {}, std::to_string(n - 1));
//     auto b = s.call("math/fib", {}, std::to_string(n - 2));
//     a.output().keep();
//     b.output().keep();
//     s.submit();
//     long sum = std::stol(a.output().fetch()) + std::stol(b.output().fetch());
//     call.output(0).write(std::to_string(sum));
//   });
//
// Depends on proto and the client library (for session()), never on the
// governor's insides. Functions run outside the KJ event loop's callbacks
// (the client's waits run that loop).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <squall/client/client.h>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace squall {

enum class DataKind { BLOB, DIR, STREAM };

// Thrown by Output::write() on a stream output whose readers have all gone
// (they closed their ends early: `head` after its lines). Let it propagate:
// the call then ends as a pipeline stage ends on a broken pipe, without
// error (unless a reader said that closing early is one).
class StreamClosed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One input of a call: valid until the function returns.
class Input {
 public:
  DataKind kind() const { return kind_; }
  // The label the task gave it (may be empty).
  const std::string& label() const { return label_; }
  // A blob's size; a dir's total size of regular files; 0 for a live stream
  // (its size is known only at its end).
  uint64_t size() const { return size_; }
  // A blob's bytes (mapped from the store, or carried in the call); a live
  // stream's, read to its end into memory first (so a function written for
  // blobs takes streams too); throws for a dir.
  std::string_view bytes() const;
  std::string_view text() const { return bytes(); }
  // A live stream's next bytes, as they are written: up to `size` into
  // `buffer`, at least 1 unless the stream has ended (0). Blocks while the
  // producer has nothing new. Throws for a blob or a dir. (Not after
  // bytes(), which read it all.)
  size_t read(char* buffer, size_t size) const;
  // A live stream's descriptor (the read end of a pipe), for a library
  // that reads descriptors; -1 for a blob or a dir. tasklib closes it when
  // the function returns.
  int fd() const { return fd_; }
  // A dir's directory, or a blob's file when it has one (empty for a blob
  // carried in the call). Read-only: never write there.
  const std::string& path() const { return path_; }

 private:
  friend class ExecutorService;
  DataKind kind_ = DataKind::BLOB;
  std::string label_;
  uint64_t size_ = 0;
  std::string path_;
  const char* data_ = nullptr;
  // The mapping behind data_, when the blob is a file.
  std::shared_ptr<void> mapping_;
  int fd_ = -1;
  // A live stream, once bytes() read it.
  mutable std::string drainedBytes_;
  mutable bool drained_ = false;
};

// One output of a call. A blob is made either by write() (appended, kept in
// memory until the call ends) or by writing the file at file(); a dir by
// filling the directory at dir(); a stream by write() (straight to its
// readers, blocking while they are behind) or through fd(). A stream's
// readers see its end when the function returns.
namespace detail {
struct LentFiles;
}  // namespace detail

class Output {
 public:
  DataKind kind() const { return kind_; }
  // Its name, when the function declared names, else its index.
  const std::string& name() const { return name_; }
  // Appends to a blob output's bytes, or sends them down a stream (throws
  // StreamClosed once every reader has gone).
  void write(std::string_view bytes);
  // A stream output's descriptor (the write end of a pipe); -1 for a blob
  // or a dir. A write to it after the readers went fails with EPIPE (the
  // executor ignores SIGPIPE); tasklib closes it when the function returns.
  int fd() const { return fd_; }
  // The file to write a blob output into (created empty; the function may
  // replace it), for outputs too big for memory or written by a library.
  const std::string& file();
  // The file for a blob output of exactly `size` bytes that the function
  // writes in full (every byte, from the start), opened without O_TRUNC.
  // The governor may lend the call a file whose memory is in place already
  // (a removed object's): writing a big output into it is several times
  // faster than into a new one, and until written it holds that object's
  // old bytes. Otherwise as file(), but `size` bytes long (zeros).
  const std::string& fileOfSize(uint64_t size);
  // The directory to fill for a dir output (created empty).
  const std::string& dir();

 private:
  friend class ExecutorService;
  friend class Call;
  // fileOfSize() without the checks (the executor writes a big buffer).
  const std::string& placeFile(uint64_t size);
  DataKind kind_ = DataKind::BLOB;
  std::string name_;
  std::string dirPath_;   // the call's output directory
  std::string entry_;     // this output's entry in it ("0", "1", ...)
  std::string path_;      // dirPath_/entry_, once file() or dir() was used
  std::string buffer_;
  bool usedBuffer_ = false;
  bool usedPath_ = false;
  int fd_ = -1;
  // The files the governor lent the call (shared by its outputs).
  std::shared_ptr<detail::LentFiles> lent_;
};

// How a call handed over with Call::detach() ends: finish() once its
// outputs are written, or fail() with the error its task fails with. One
// of them, once (later ones are ignored), from any thread; the Call stays
// valid until then. A process that goes first takes the call with it.
class CallEnd {
 public:
  virtual ~CallEnd() = default;
  virtual void finish() = 0;
  virtual void fail(std::string error) = 0;
};

// What a function gets: its inputs, config and outputs.
class Call {
 public:
  Call() = default;
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  size_t inputCount() const { return inputs_.size(); }
  const Input& input(size_t i) const;
  // The bytes the task was given as its config (may be empty).
  std::string_view config() const { return config_; }
  size_t outputCount() const { return outputs_.size(); }
  Output& output(size_t i);
  // By declared name; throws if there is none of that name.
  Output& output(std::string_view name);

  // The task this call runs for: its session, and its id there (0 for
  // both when the governor did not say: a test serving without one).
  uint64_t sessionId() const { return sessionId_; }
  uint64_t taskId() const { return taskId_; }
  // NAME=VALUE that the call's resources give it (CUDA_VISIBLE_DEVICES
  // for its GPUs, OMP_NUM_THREADS, SQUALL_RESOURCE_*: docs/resources.md):
  // the process's environment holds them while the function runs, and
  // goes back after (a warm process serves calls of other grants). Empty
  // for an actor's methods: its process has its actor's from the start.
  const std::vector<std::string>& environment() const { return env_; }
  // The task's session, to submit tasks, actors and method calls from the
  // function (docs/nested.md): each task submitted is a child of this one,
  // cancelled when it is cancelled or fails; waitAll() waits for the ones
  // submitted here. While a wait blocks, the cpus this call holds go back
  // to the governor (and the server places other tasks on them); it takes
  // them back, before tasks that have not started, once the wait returns.
  // The executor connects to the server ($SQUALL_SERVER, $SQUALL_TOKEN and
  // $SQUALL_TLS_*, which the governor sets) on first use, once per
  // process. Valid until the function returns. Throws squall::Error when
  // the server cannot be reached.
  Session& session();

  // For a language binding that carries its own copy of the client library
  // (the Python executor, docs/python.md): the executor's event loop, as
  // a kj::AsyncIoProvider* and a kj::WaitScope*, to share with it
  // (squall/client/shared-loop.h), and what session()'s waits do around a
  // wait: give this call's cpus back (true), take them again (false).
  std::pair<void*, void*> eventLoop() const;
  void waiting(bool waiting);
  // Before the function submits tasks through a session of its own making
  // (a binding's client): makes sure the server has recorded this call
  // (one its client sent the governor directly is recorded only with its
  // result otherwise, and the server takes no children of a task it does
  // not know). session() does it itself. Any thread; throws squall::Error
  // when the server refuses or cannot be reached.
  void recordWithServer();

  // In an actor's constructor: up to `n` of the instance's method calls
  // may be under way at once (default 1: one after another, in the order
  // they came). Its methods then end their calls through detach().
  void allowConcurrentCalls(uint32_t n);
  // In a method of an actor that allows concurrent calls: hands the call
  // over, so that the method may return at once and the executor take the
  // next call; the call ends through the CallEnd returned. Throws
  // std::logic_error anywhere else. session() is not for a detached call's
  // other threads (it runs on the executor's thread only).
  std::shared_ptr<CallEnd> detach();

  // What the executor gives a call for session(), eventLoop() and
  // waiting() (tasklib's own; null in a Call made by hand).
  class Host {
   public:
    virtual Client& processClient(uint64_t session, uint64_t task) = 0;
    virtual std::pair<void*, void*> eventLoop() = 0;
    virtual void waiting(uint64_t session, uint64_t task, bool waiting) = 0;
    virtual std::shared_ptr<CallEnd> detach(Call& call) = 0;
    virtual void recordCall(uint64_t session, uint64_t task) = 0;

   protected:
    ~Host() = default;
  };

 private:
  friend class ExecutorService;
  uint64_t sessionId_ = 0;
  uint64_t taskId_ = 0;
  std::vector<std::string> env_;
  Host* host_ = nullptr;
  std::unique_ptr<Session> session_;
  std::vector<Input> inputs_;
  std::string_view config_;
  std::vector<Output> outputs_;
  // The streams' descriptors, closed when the function returns.
  std::vector<int> ownedFds_;
  // A constructor's allowConcurrentCalls; whether this call may detach
  // (a method of such an actor), and whether it did.
  uint32_t concurrency_ = 1;
  bool constructor_ = false;
  bool detachable_ = false;
  bool detached_ = false;
  // The executor's thread, which alone may make the session.
  std::thread::id thread_;
};

using Function = std::function<void(Call&)>;

template <typename T>
class ActorType;

class Executor {
 public:
  // `name` is the executor's name as tasks call it (`name/function`):
  // letters, digits, '-', '_' and '.'.
  explicit Executor(std::string name);
  ~Executor();

  // Registers `fn` with `outputs` unnamed outputs (1 by default).
  Executor& add(std::string name, Function fn, size_t outputs = 1);
  // Registers `fn` with named outputs, in this order.
  Executor& add(std::string name, Function fn, std::vector<std::string> outputNames);

  // Registers the actor type T as `name` (a function name without '.':
  // its methods are called as "name.method"), then its methods through
  // the handle returned. T is constructed from a Call bringing the actor
  // task's inputs and config, and no outputs; like a method's, they are
  // valid only while it runs, so T copies what it keeps. A constructor
  // that throws fails the actor with its what(). The instance is
  // destroyed when serve() returns, on the executor's thread.
  template <typename T>
  ActorType<T> actor(std::string name);

  // Serves the governor over the descriptor given as
  // --squall-executor-fd N, until the governor closes it: returns 0 then.
  // Returns 2 with a message on stderr when started any other way, and
  // --squall-describe prints what it offers (one line per function) for a
  // person to read.
  int serve(int argc, char** argv);

  // What serve() does with an already connected socket (tests).
  int serveFd(int fd);

  // Runs `fn` when serving ends, while the event loop still lives (a
  // binding closes the clients it made on it).
  void atStop(std::function<void()> fn) { atStop_ = std::move(fn); }

  struct FunctionEntry {
    Function fn;
    // Output names: declared, or "0", "1", ...
    std::vector<std::string> outputs;
    bool named = false;
  };
  const std::string& name() const { return name_; }
  const std::map<std::string, FunctionEntry, std::less<>>& functions() const { return functions_; }

  // An actor type with its type erased: the instance is a T behind the
  // void, and a method is only ever given an instance its own type made.
  using ActorFactory = std::function<std::shared_ptr<void>(Call&)>;
  using ActorMethod = std::function<void(void*, Call&)>;
  struct MethodEntry {
    ActorMethod fn;
    // Output names: declared, or "0", "1", ...
    std::vector<std::string> outputs;
    bool named = false;
  };
  struct ActorEntry {
    ActorFactory make;
    std::map<std::string, MethodEntry, std::less<>> methods;
  };
  const std::map<std::string, ActorEntry, std::less<>>& actors() const { return actors_; }

  // A blob output written with write() comes back in the answer up to this
  // size, else through a file.
  static constexpr size_t INLINE_LIMIT = 64 << 10;

 private:
  template <typename T>
  friend class ActorType;

  // What actor<T>() and ActorType<T> come down to.
  void addActorType(std::string name, ActorFactory make);
  // `outputs`: the declared names when `named`, else "0", "1", ...
  void addMethod(const std::string& type, std::string name, ActorMethod fn, std::vector<std::string> outputs,
                 bool named);

  std::string name_;
  std::function<void()> atStop_;
  std::map<std::string, FunctionEntry, std::less<>> functions_;
  std::map<std::string, ActorEntry, std::less<>> actors_;
};

// The methods of one actor type, as Executor::actor() registered it:
// names follow the rule of function names, without '.'; outputs are
// declared as a function's are (a count, 1 by default, or names). A
// method that throws fails its call with its what(); the instance stays,
// with whatever state the method left. Holds the Executor by reference.
template <typename T>
class ActorType {
 public:
  ActorType& method(std::string name, void (T::*fn)(Call&), size_t outputs = 1) {
    return method(std::move(name), std::function<void(T&, Call&)>(fn), outputs);
  }
  ActorType& method(std::string name, void (T::*fn)(Call&), std::vector<std::string> outputNames) {
    return method(std::move(name), std::function<void(T&, Call&)>(fn), std::move(outputNames));
  }
  ActorType& method(std::string name, std::function<void(T&, Call&)> fn, size_t outputs = 1) {
    std::vector<std::string> names;
    for (size_t i = 0; i < outputs; i++) names.push_back(std::to_string(i));
    executor_.addMethod(type_, std::move(name), erase(std::move(fn)), std::move(names), false);
    return *this;
  }
  ActorType& method(std::string name, std::function<void(T&, Call&)> fn, std::vector<std::string> outputNames) {
    executor_.addMethod(type_, std::move(name), erase(std::move(fn)), std::move(outputNames), true);
    return *this;
  }

  const std::string& name() const { return type_; }

 private:
  friend class Executor;
  ActorType(Executor& executor, std::string type) : executor_(executor), type_(std::move(type)) {}

  static Executor::ActorMethod erase(std::function<void(T&, Call&)> fn) {
    if (!fn) return nullptr;  // refused by name in addMethod
    return [fn = std::move(fn)](void* self, Call& call) { fn(*static_cast<T*>(self), call); };
  }

  Executor& executor_;
  std::string type_;
};

template <typename T>
ActorType<T> Executor::actor(std::string name) {
  static_assert(std::is_constructible_v<T, Call&>, "an actor type is constructed from a squall::Call&");
  addActorType(name, [](Call& init) -> std::shared_ptr<void> { return std::make_shared<T>(init); });
  return ActorType<T>(*this, std::move(name));
}

}  // namespace squall
