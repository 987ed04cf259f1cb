// squall-python-executor: the tasklib executor "python" that runs
// @squall.remote functions (docs/python.md) in warm processes. It embeds
// CPython and offers call-0 ... call-16 (a function declares its number of
// outputs, so one per count), each handing the call's config (the pickled
// function and arguments) and inputs to squall._worker.run, which returns
// the outputs' bytes. A Python exception in the function fails the task
// with its traceback as the error; the process carries on.
//
// Thread: tasklib calls the functions on the main thread, which holds the
// GIL throughout.
#include <pybind11/embed.h>
#include <squall/tasklib/tasklib.h>

#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>

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

void runCall(py::module_& worker, squall::Call& call) {
  py::object outputs;
  try {
    auto config = call.config();
    outputs = worker.attr("run")(py::bytes(config.data(), config.size()), inputsOf(call), call.outputCount());
  } catch (py::error_already_set& e) {
    // The worker turns the function's exception into CallFailed(remote
    // traceback); anything else is the worker's own trouble.
    if (e.matches(worker.attr("CallFailed"))) throw std::runtime_error(py::str(e.value()).cast<std::string>());
    throw std::runtime_error(std::string("the squall Python worker failed: ") + e.what());
  }
  for (size_t i = 0; i < call.outputCount(); i++) {
    py::bytes bytes = outputs[py::int_(i)];
    char* data = nullptr;
    Py_ssize_t size = 0;
    PyBytes_AsStringAndSize(bytes.ptr(), &data, &size);
    call.output(i).write(std::string_view(data, static_cast<size_t>(size)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  // No Python signal handlers: SIGINT and SIGTERM end the process as the
  // governor expects (a handler would only run between calls).
  py::scoped_interpreter python(false);
  py::module_ worker;
  try {
    findPackage();
    worker = py::module_::import("squall._worker");
  } catch (py::error_already_set& e) {
    fprintf(stderr, "%s: cannot import squall._worker (is the Python package squall on python3's path?): %s\n",
            argc > 0 ? argv[0] : "squall-python-executor", e.what());
    return 1;
  }
  squall::Executor executor("python");
  for (size_t n = 0; n <= MAX_OUTPUTS; n++) {
    executor.add(
        "call-" + std::to_string(n), [&worker](squall::Call& call) { runCall(worker, call); }, n);
  }
  return executor.serve(argc, argv);
}
