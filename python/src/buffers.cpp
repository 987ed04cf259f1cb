// Python values' bytes without copies (docs/python.md, "Big values"): a
// constant made of pieces of Python objects' memory (out-of-band pickles'
// buffers, squall._objects) read in place, and fetched bytes handed to
// Python as a read-only buffer over the client's own string or mapping of
// the governor's file, so a numpy array read from an object is a view of
// what was fetched.
#include "binding.h"

namespace squall {
namespace python {

namespace {

// Bytes fetched from an object (or the mapping of its file on this
// machine), owned here and read by Python in place.
struct Fetched {
  ObjectBytes bytes;
};

}  // namespace

HeldParts::HeldParts(py::handle list) {
  for (auto part : list) {
    Py_buffer view;
    if (PyObject_GetBuffer(part.ptr(), &view, PyBUF_ANY_CONTIGUOUS) != 0) {
      PyErr_Clear();
      for (auto& held : views) PyBuffer_Release(&held);
      throw py::type_error("a blob's parts must be bytes-like and contiguous, not " +
                           py::str(part.get_type().attr("__name__")).cast<std::string>());
    }
    views.push_back(view);
    parts.emplace_back(static_cast<const char*>(view.buf), static_cast<size_t>(view.len));
  }
}

HeldParts::~HeldParts() {
  for (auto& view : views) PyBuffer_Release(&view);
}

py::object fetchedBuffer(ObjectBytes bytes) {
  return py::cast(Fetched{std::move(bytes)});
}

py::object valueOf(const std::string& contentType, ObjectBytes bytes) {
  if (contentType != PICKLE_CONTENT_TYPE) return py::bytes(bytes.data(), bytes.size());
  return py::module_::import("squall._objects").attr("loads")(fetchedBuffer(std::move(bytes)));
}

void bindBuffers(py::module_& m) {
  py::class_<Fetched>(m, "_Fetched", py::buffer_protocol(),
                      "Bytes fetched from an object, read in place (read-only): memoryview(it).")
      .def_buffer([](Fetched& f) {
        return py::buffer_info(const_cast<char*>(f.bytes.data()), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(f.bytes.size())}, {1}, /*readonly=*/true);
      })
      .def("__len__", [](const Fetched& f) { return f.bytes.size(); });
}

}  // namespace python
}  // namespace squall
