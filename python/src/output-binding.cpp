// Session.watch_output and Session.drain_output: what a session's tasks
// print, for Ray's log_to_driver (docs/ray.md, "Output").
#include "binding.h"

#include <pybind11/stl.h>

namespace squall {
namespace python {

namespace {

// A Python callable kept by the client (called during its waits, which let
// the GIL go), dropped with the GIL held.
struct HeldSink {
  explicit HeldSink(py::function f) : fn(std::move(f)) {}
  ~HeldSink() {
    py::gil_scoped_acquire gil;
    fn = py::function();
  }
  py::function fn;
};

}  // namespace

void bindOutput(py::module_& m) {
  auto session = py::reinterpret_borrow<py::class_<SessionBox, std::shared_ptr<SessionBox>>>(m.attr("Session"));
  session
      .def(
          "watch_output",
          [](SessionBox& s, py::function sink) {
            auto held = std::make_shared<HeldSink>(std::move(sink));
            s.live().watchOutput([held](const std::vector<TaskOutput>& chunks) {
              py::gil_scoped_acquire gil;
              py::list list;
              for (auto& c : chunks) {
                auto text = py::reinterpret_steal<py::str>(
                    PyUnicode_DecodeUTF8(c.text.data(), static_cast<Py_ssize_t>(c.text.size()), "replace"));
                list.append(py::make_tuple(c.task, c.isStderr, c.label, c.governor, text));
              }
              try {
                held->fn(list);
              } catch (py::error_already_set& e) {
                e.discard_as_unraisable("squall: the watch_output sink");
              }
            });
          },
          py::arg("sink"),
          "Calls sink(chunks) with what the session's functions and actors print, as it comes, while this "
          "client waits for anything: each chunk (task id, is_stderr, label, governor, text), text whole lines "
          "mostly. One sink per session.")
      .def(
          "drain_output", [](SessionBox& s) { s.live().drainOutput(); }, py::call_guard<py::gil_scoped_release>(),
          "Hands the watch_output sink what the server holds and it has not had, waiting for nothing more.");
}

}  // namespace python
}  // namespace squall
