// squall._squall's Actor (docs/actors.md, docs/python.md "Actors"): the C++
// client's Actor for Python, made by Session.actor and Session.actor_handle
// (session-binding.cpp). Its setters return the actor and work before
// submit; kill() blocks on the server and releases the GIL meanwhile.
// @squall.remote on a class (squall/remote.py) builds on it.
#include "binding.h"

#include <pybind11/stl.h>

namespace squall {
namespace python {

void bindActor(py::module_& m) {
  py::class_<ActorHandle> actorClass(
      m, "Actor",
      "An actor of a session (docs/actors.md): one instance of an executor's actor type, living in a process "
      "of its own until killed or the session ends. call() makes a task of one of its methods; calls run one "
      "at a time, in the order made.");
  actorClass.def_property_readonly("id", [](ActorHandle& a) { return a.actor.id(); }, "Its task's id.")
      .def_property_readonly("session_id", [](ActorHandle& a) { return a.actor.sessionId(); },
                             "The session it is a task of (another's, for a named actor found by name).")
      .def_property_readonly(
          "task", [](ActorHandle& a) { return TaskHandle{a.box, a.live().task()}; },
          "Its task (no outputs): name, attributes, allow_failure (its death then fails no session), info().")
      .def(
          "call",
          [](ActorHandle& a, const std::string& method, py::handle inputs, std::string config, py::handle outputs) {
            auto& actor = a.live();
            auto kinds = outputKinds(outputs, "actor call outputs");
            auto task = actor.call(method, objectsOf(inputs, "actor call inputs"), std::move(config), kinds);
            return TaskHandle{a.box, task};
          },
          py::arg("method"), py::arg("inputs") = py::list(), py::arg("config") = py::bytes(""),
          py::arg("outputs") = 1,
          "A call of method on inputs with config bytes: a task whose outputs are the method's (how many blobs, "
          "or their Kinds in order). Calls on one actor run one at a time, in the order they were made.")
      .def(
          "cpus",
          [](ActorHandle& a, uint32_t n) -> ActorHandle& {
            a.live().cpus(n);
            return a;
          },
          py::arg("n"), "Cpus it holds for its whole life (default 1).")
      .def(
          "resource",
          [](ActorHandle& a, const std::string& name, py::object amount) -> ActorHandle& {
            auto task = a.live().task();
            setResource(task, name, amount);
            return a;
          },
          py::arg("name"), py::arg("amount"),
          "A resource it holds for its whole life, as Task.resource ('gpus', 1; 'mem', '2G').")
      .def(
          "max_restarts",
          [](ActorHandle& a, uint32_t n) -> ActorHandle& {
            a.live().maxRestarts(n);
            return a;
          },
          py::arg("n"),
          "Times it is started again (its constructor run anew) after its process died; 0 by default.")
      .def(
          "max_call_retries",
          [](ActorHandle& a, uint32_t n) -> ActorHandle& {
            a.live().maxCallRetries(n);
            return a;
          },
          py::arg("n"), "Times a call running when its process died runs again on the restarted actor; 0 by default.")
      .def(
          "named",
          [](ActorHandle& a, std::string name) -> ActorHandle& {
            a.live().named(std::move(name));
            return a;
          },
          py::arg("name"),
          "Names it (before submit): any session of the server reaches it with Session.get_actor(name), and it "
          "outlives its session until killed (docs/actors.md, \"Named actors\").")
      .def(
          "kill",
          [](ActorHandle& a) {
            auto& actor = a.live();
            py::gil_scoped_release release;
            actor.kill();
          },
          "Ends it (after submit): its process stops, its task and its calls not yet run end cancelled; the "
          "session goes on. Killing an actor that has ended does nothing.")
      .def("__eq__",
           [](ActorHandle& a, py::handle b) {
             if (!py::isinstance<ActorHandle>(b)) return false;
             auto& other = b.cast<ActorHandle&>();
             return a.box == other.box && a.actor.id() == other.actor.id();
           })
      .def("__hash__", [](ActorHandle& a) { return py::hash(py::make_tuple(a.box->id, a.actor.id())); })
      .def("__repr__", [](ActorHandle& a) {
        return "<squall.Actor " + std::to_string(a.box->id) + "/" + std::to_string(a.actor.id()) + ">";
      });
}

}  // namespace python
}  // namespace squall
