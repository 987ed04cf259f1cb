// squall-python-executor: the tasklib executor "python" that runs
// @squall.remote functions and actors (docs/python.md) in warm processes.
// It embeds CPython and offers call-0 ... call-16 (a function declares its
// number of outputs, so one per count), each handing the call's config (the
// pickled function and arguments) and inputs to squall._worker.run, which
// returns the outputs' bytes. A Python exception in the function fails the
// task with its traceback as the error; the process carries on.
//
// Actors: one actor type, Actor, whose constructor makes the instance of a
// pickled class (squall._worker.construct) and keeps it; its methods
// call-0 ... call-16 run the Python method the config names on it
// (squall._worker.call_method). An exception in __init__ fails the actor,
// one in a method fails that call only, with its traceback.
//
// An actor of Ray's model whose class has `async def` methods, or that was
// given max_concurrency > 1, allows concurrent calls (tasklib's
// Call::allowConcurrentCalls): each call is detached and handed to the
// worker (call_method_concurrently), which runs it on the actor's event
// loop or thread pool and ends it through a callback.
//
// Threads: tasklib calls the functions, constructors and methods on the
// main thread, which takes the GIL for each (and lets it go while it
// waits in tasklib's loop, so that a concurrent actor's threads run);
// actors are destroyed there too, when serve() returns, while the
// interpreter still lives.
#include <pybind11/embed.h>
#include <squall/tasklib/tasklib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

constexpr size_t MAX_OUTPUTS = 16;

// In the build tree the package squall lies beside this program
// (build/python/squall); installed, it is on python3's own path.
void findPackage() {
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return;
  auto dir = self.parent_path();
  if (std::filesystem::exists(dir / "squall" / "_worker.py", ec)) {
    py::module_::import("sys").attr("path").attr("insert")(0, dir.string());
  }
}

// The call's inputs as the worker takes them: a blob's bytes as a read-only
// memoryview of the mapping or of the call (released by the worker before
// the call returns), a dir as its path.
py::list inputsOf(squall::Call& call) {
  py::list inputs;
  for (size_t i = 0; i < call.inputCount(); i++) {
    auto& input = call.input(i);
    if (input.kind() == squall::DataKind::DIR) {
      inputs.append(py::make_tuple("dir", input.path()));
      continue;
    }
    auto bytes = input.bytes();
    if (bytes.empty()) {
      inputs.append(py::bytes());
    } else {
      inputs.append(py::reinterpret_steal<py::object>(
          PyMemoryView_FromMemory(const_cast<char*>(bytes.data()), static_cast<Py_ssize_t>(bytes.size()), PyBUF_READ)));
    }
  }
  return inputs;
}

// Each input's store file (a blob mapped from one), or None: the worker
// maps it again itself for values that keep views of it (squall._objects).
py::list pathsOf(squall::Call& call) {
  py::list paths;
  for (size_t i = 0; i < call.inputCount(); i++) {
    auto& input = call.input(i);
    if (input.kind() == squall::DataKind::BLOB && !input.path().empty()) {
      paths.append(input.path());
    } else {
      paths.append(py::none());
    }
  }
  return paths;
}

py::bytes configOf(squall::Call& call) {
  auto config = call.config();
  return py::bytes(config.data(), config.size());
}

// The call running now (nullptr between calls), for the module
// _squall_executor, through which @remote calls made inside a function
// reach the task's session (squall._worker.nested_session, docs/nested.md).
squall::Call* currentCall = nullptr;

// Sets currentCall for the length of a call.
struct Running {
  explicit Running(squall::Call& call) : before(currentCall) { currentCall = &call; }
  ~Running() { currentCall = before; }
  squall::Call* before;
};

// Calls `run` (a function of the worker, given the call's config and
// inputs) and returns what it returns. The worker turns the Python code's
// exception into CallFailed(remote traceback), which becomes the task's
// error; anything else is the worker's own trouble.
template <typename Run>
py::object runWorker(py::module_& worker, Run run) {
  try {
    return run();
  } catch (py::error_already_set& e) {
    if (e.matches(worker.attr("CallFailed"))) throw std::runtime_error(py::str(e.value()).cast<std::string>());
    throw std::runtime_error(std::string("the squall Python worker failed: ") + e.what());
  }
}

// An output bigger than this, given in parts, is written straight into its
// file (one copy, from the value's memory); a smaller one rides in the
// call's answer.
constexpr size_t OUTPUT_FILE_BYTES = 1 << 20;

// Writes one output the worker returned: bytes, or a list of bytes-like
// parts (an out-of-band pickle: squall._objects.dumps).
void writeOutput(squall::Output& output, py::handle value) {
  if (py::isinstance<py::bytes>(value)) {
    char* data = nullptr;
    Py_ssize_t size = 0;
    PyBytes_AsStringAndSize(value.ptr(), &data, &size);
    output.write(std::string_view(data, static_cast<size_t>(size)));
    return;
  }
  std::vector<py::buffer_info> parts;
  size_t total = 0;
  for (auto part : value) {
    parts.push_back(py::reinterpret_borrow<py::buffer>(part).request());
    total += static_cast<size_t>(parts.back().size * parts.back().itemsize);
  }
  auto bytesOf = [](const py::buffer_info& part) {
    return std::string_view(static_cast<const char*>(part.ptr), static_cast<size_t>(part.size * part.itemsize));
  };
  if (total <= OUTPUT_FILE_BYTES) {
    for (auto& part : parts) output.write(bytesOf(part));
    return;
  }
  // Every byte is written: a file the governor lent may hold old ones.
  const std::string& path = output.fileOfSize(total);
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open output " + output.name() + ": " + strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  for (auto& part : parts) {
    auto bytes = bytesOf(part);
    while (!bytes.empty()) {
      ssize_t n = ::write(fd, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw std::runtime_error("cannot write output " + output.name() + ": " + strerror(errno));
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
}

// Writes the outputs the worker returned, one per output.
void writeOutputs(squall::Call& call, py::handle outputs) {
  for (size_t i = 0; i < call.outputCount(); i++) writeOutput(call.output(i), outputs[py::int_(i)]);
}

// Flushes Python's standard output and error: what a call printed goes
// before its answer (the governor gives what a process prints to the call
// it runs until its answer comes).
void flushPrinted() {
  for (const char* name : {"stdout", "stderr"}) {
    PyObject* stream = PySys_GetObject(name);  // borrowed
    if (stream == nullptr || stream == Py_None) continue;
    PyObject* done = PyObject_CallMethod(stream, "flush", nullptr);
    if (done == nullptr) {
      PyErr_Clear();
    } else {
      Py_DECREF(done);
    }
  }
}

struct FlushAtEnd {
  ~FlushAtEnd() { flushPrinted(); }
};

// The call's resource variables (Call::environment: CUDA_VISIBLE_DEVICES
// for its GPUs, ...) in os.environ for the call's length: Python copied
// the environment at start, and tasklib's setenv does not reach that copy.
class PythonCallEnv {
 public:
  explicit PythonCallEnv(const std::vector<std::string>& vars) {
    if (vars.empty()) return;
    environ = py::module_::import("os").attr("environ");
    for (auto& var : vars) {
      auto eq = var.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      auto name = py::str(var.substr(0, eq));
      saved.emplace_back(name, environ.attr("get")(name));
      environ[name] = py::str(var.substr(eq + 1));
    }
  }
  ~PythonCallEnv() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      try {
        if (it->second.is_none()) {
          environ.attr("pop")(it->first, py::none());
        } else {
          environ[it->first] = it->second;
        }
      } catch (py::error_already_set&) {
      }
    }
  }

 private:
  py::object environ;
  std::vector<std::pair<py::str, py::object>> saved;
};

void runCall(py::module_& worker, squall::Call& call) {
  FlushAtEnd flush;
  PythonCallEnv environment(call.environment());
  Running running(call);
  auto outputs =
      runWorker(worker, [&]() { return worker.attr("run")(configOf(call), inputsOf(call), call.outputCount(), pathsOf(call)); });
  writeOutputs(call, outputs);
}

// The actor type "Actor": an instance of a Python class, made by the
// worker from the actor's config and inputs, whose methods the calls name.
// The package is on sys.path already (main()), so the import finds the
// module main() loaded.
class PythonActor {
 public:
  explicit PythonActor(squall::Call& init) {
    py::gil_scoped_acquire gil;
    worker = py::module_::import("squall._worker");
    Running running(init);
    instance = runWorker(worker, [&]() { return worker.attr("construct")(configOf(init), inputsOf(init), pathsOf(init)); });
    auto concurrency = worker.attr("actor_concurrency")().cast<uint32_t>();
    concurrent = concurrency > 1;
    if (concurrent) init.allowConcurrentCalls(concurrency);
  }
  ~PythonActor() {
    py::gil_scoped_acquire gil;
    instance.release().dec_ref();
    worker.release().dec_ref();
  }

  // call-N: the method the config names, on the instance; N outputs.
  void call(squall::Call& call) {
    py::gil_scoped_acquire gil;
    FlushAtEnd flush;
    Running running(call);
    if (concurrent) return callConcurrently(call);
    auto outputs = runWorker(worker, [&]() {
      return worker.attr("call_method")(instance, configOf(call), inputsOf(call), call.outputCount(),
                                        pathsOf(call));
    });
    writeOutputs(call, outputs);
  }

 private:
  // Hands the call to the worker, which ends it through `done` (on one of
  // its threads, or at once when the call is wrong).
  void callConcurrently(squall::Call& call) {
    auto end = call.detach();
    auto done = py::cpp_function([&call, end](py::object outputs, py::object error) {
      std::string failure;
      bool failed = !error.is_none();
      if (failed) {
        failure = py::str(error).cast<std::string>();
      } else {
        try {
          writeOutputs(call, outputs);
        } catch (const std::exception& e) {
          failed = true;
          failure = e.what();
        }
      }
      // The executor's thread may be waiting for the GIL.
      py::gil_scoped_release release;
      if (failed) {
        end->fail(failure);
      } else {
        end->finish();
      }
    });
    runWorker(worker, [&]() {
      // Its session and task, and how its thread has the server record it
      // before submitting tasks (Call::recordWithServer).
      auto record = py::cpp_function([&call]() {
        py::gil_scoped_release release;
        call.recordWithServer();
      });
      return worker.attr("call_method_concurrently")(instance, configOf(call), inputsOf(call), call.outputCount(),
                                                     pathsOf(call),
                                                     py::make_tuple(call.sessionId(), call.taskId(), record), done);
    });
  }

  py::module_ worker;
  py::object instance;
  bool concurrent = false;
};

}  // namespace

// What squall._worker asks of the call running now: its task and session,
// the executor's event loop (shared with the package's client library),
// and giving the call's cpus back while it waits for what it submitted.
PYBIND11_EMBEDDED_MODULE(_squall_executor, m) {
  m.def("context", []() {
    if (currentCall == nullptr) return py::make_tuple(0, 0);
    return py::make_tuple(currentCall->sessionId(), currentCall->taskId());
  });
  m.def("loop", []() {
    if (currentCall == nullptr) throw std::runtime_error("no call is running");
    auto [provider, waitScope] = currentCall->eventLoop();
    return py::make_tuple(reinterpret_cast<uintptr_t>(provider), reinterpret_cast<uintptr_t>(waitScope));
  });
  m.def("waiting", [](bool waiting) {
    if (currentCall != nullptr) currentCall->waiting(waiting);
  });
  // Before the call running now submits tasks (Call::recordWithServer).
  m.def("record", []() {
    if (currentCall == nullptr) return;
    py::gil_scoped_release release;
    currentCall->recordWithServer();
  });
}

int main(int argc, char** argv) {
  // No Python signal handlers: SIGINT and SIGTERM end the process as the
  // governor expects (a handler would only run between calls).
  py::scoped_interpreter python(false);
  py::module_ worker;
  try {
    findPackage();
    // Each line a function prints goes to the governor as it is printed.
    auto sys = py::module_::import("sys");
    for (const char* name : {"stdout", "stderr"}) {
      auto stream = sys.attr(name);
      if (!stream.is_none() && py::hasattr(stream, "reconfigure")) stream.attr("reconfigure")(py::arg("line_buffering") = true);
    }
    worker = py::module_::import("squall._worker");
  } catch (py::error_already_set& e) {
    fprintf(stderr, "%s: cannot import squall._worker (is the Python package squall on python3's path?): %s\n",
            argc > 0 ? argv[0] : "squall-python-executor", e.what());
    return 1;
  }
  squall::Executor executor("python");
  auto actor = executor.actor<PythonActor>("Actor");
  for (size_t n = 0; n <= MAX_OUTPUTS; n++) {
    executor.add(
        "call-" + std::to_string(n),
        [&worker](squall::Call& call) {
          py::gil_scoped_acquire gil;
          runCall(worker, call);
        },
        n);
    actor.method("call-" + std::to_string(n), &PythonActor::call, n);
  }
  // The client @remote calls inside functions made goes before the loop it
  // shares.
  executor.atStop([&worker]() {
    py::gil_scoped_acquire gil;
    try {
      worker.attr("close_nested")();
    } catch (py::error_already_set& e) {
      fprintf(stderr, "squall-python-executor: closing the nested client: %s\n", e.what());
    }
  });
  py::gil_scoped_release release;
  return executor.serve(argc, argv);
}
