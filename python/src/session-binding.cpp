// squall._squall's graph building (docs/python.md): DataObject, Task,
// Program and Session over the C++ client's, with Python's names
// (snake_case), keyword arguments and seconds for durations. Blocking calls
// (submit, wait, fetch, info) release the GIL; a wait is interrupted by
// Ctrl-C (ClientOptions::whileBlocked, module.cpp).
#include "binding.h"

#include <algorithm>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>

namespace squall {
namespace python {

namespace {

using Release = py::call_guard<py::gil_scoped_release>;

std::string typeName(py::handle value) { return py::str(value.get_type().attr("__name__")); }

std::chrono::milliseconds milliseconds(double seconds, const char* what) {
  if (!std::isfinite(seconds) || seconds < 0 || seconds > 1e9) {
    throw py::value_error(std::string(what) + " must be a number of seconds >= 0, not " + std::to_string(seconds));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000)));
}

// The tasks and the objects (or tasks' outputs) among `items`.
std::pair<std::vector<Task>, std::vector<DataObject>> tasksAndObjects(py::handle items, const char* what) {
  std::pair<std::vector<Task>, std::vector<DataObject>> both;
  for (auto item : items) {
    if (py::isinstance<TaskHandle>(item)) {
      both.first.push_back(item.cast<TaskHandle&>().live());
    } else {
      both.second.push_back(toObject(item, what).object);
    }
  }
  return both;
}

WaitTimeout waitTimeout(std::optional<double> seconds) {
  if (!seconds) return std::nullopt;
  return milliseconds(*seconds, "timeout");
}

// Sessions know their objects' kinds and outputs; a handle from another
// session is refused by the C++ client ("belongs to another session").
ObjectHandle handle(const std::shared_ptr<SessionBox>& box, DataObject object) { return ObjectHandle{box, object}; }
TaskHandle handle(const std::shared_ptr<SessionBox>& box, Task task) { return TaskHandle{box, task}; }

// Session::blob of parts: a big one is uploaded now, without the GIL.
DataObject partsBlob(const std::shared_ptr<SessionBox>& box, py::handle list, std::string label) {
  auto& session = box->live();
  HeldParts held(list);
  py::gil_scoped_release release;
  return session.blob(held.parts, std::move(label));
}

// A new constant's handle, with its content type (if any) set and known.
ObjectHandle typed(const std::shared_ptr<SessionBox>& box, DataObject object, const std::string& contentType) {
  if (!contentType.empty()) {
    object.contentType(contentType);
    box->contentTypes[object.id()] = contentType;
  }
  return handle(box, object);
}

// A Program with the session its inputs belong to (the C++ Program holds
// object ids only): execute() refuses it in another session.
struct ProgramBox {
  Program program;
  std::shared_ptr<SessionBox> session;

  explicit ProgramBox(Program program) : program(std::move(program)) {}

  DataObject own(py::handle value, const char* what) {
    auto object = toObject(value, what);
    if (session && session != object.box) {
      throw Error(std::string(what) + ": object " + std::to_string(object.object.id()) + " is of session " +
                  std::to_string(object.box->id) + ", the program's other inputs of session " +
                  std::to_string(session->id));
    }
    session = object.box;
    return object.object;
  }
};

ObjectKind outputKind(const std::string& path) {
  return !path.empty() && path.back() == '/' ? ObjectKind::DIR : ObjectKind::BLOB;
}

std::string withoutSlash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// Program(args, stdin=..., stdout=..., inputs=..., outputs=..., env=...,
// cpus=..., name=...): the keyword form of the C++ builder.
std::shared_ptr<ProgramBox> makeProgram(py::handle args, py::handle stdinObject, py::handle stdoutKind,
                                        py::handle inputs, py::handle outputs, py::handle env,
                                        std::optional<uint32_t> cpus, std::optional<std::string> name) {
  std::shared_ptr<ProgramBox> box;
  if (py::isinstance<py::str>(args)) {
    box = std::make_shared<ProgramBox>(Program::shell(args.cast<std::string>()));
  } else if (py::isinstance<py::iterable>(args) && !py::isinstance<py::bytes>(args)) {
    std::vector<std::string> argv;
    for (auto a : args) {
      if (!py::isinstance<py::str>(a)) {
        throw py::type_error("Program: every argument must be a str, not " + typeName(a));
      }
      argv.push_back(a.cast<std::string>());
    }
    if (argv.empty()) throw py::value_error("Program: an empty argument list (give at least the program)");
    box = std::make_shared<ProgramBox>(Program(std::move(argv)));
  } else {
    throw py::type_error("Program takes a list of arguments or a shell line (str), not " + typeName(args));
  }
  auto& program = box->program;
  if (!stdinObject.is_none()) program.stdinFrom(box->own(stdinObject, "Program stdin"));
  if (!stdoutKind.is_none()) {
    if (py::isinstance<py::bool_>(stdoutKind)) {
      if (stdoutKind.cast<bool>()) program.stdoutOutput();
    } else if (py::isinstance<ObjectKind>(stdoutKind)) {
      program.stdoutOutput(stdoutKind.cast<ObjectKind>());
    } else {
      throw py::type_error("Program stdout: True or a squall.Kind (BLOB, STREAM), not " + typeName(stdoutKind));
    }
  }
  if (!inputs.is_none()) {
    if (!py::isinstance<py::dict>(inputs)) {
      throw py::type_error("Program inputs: a dict of sandbox path -> DataObject, not " + typeName(inputs));
    }
    for (auto [path, object] : inputs.cast<py::dict>()) {
      program.input(box->own(object, "Program inputs"), path.cast<std::string>());
    }
  }
  if (!outputs.is_none()) {
    if (py::isinstance<py::dict>(outputs)) {
      for (auto [path, kind] : outputs.cast<py::dict>()) {
        program.output(withoutSlash(path.cast<std::string>()), kind.cast<ObjectKind>());
      }
    } else if (py::isinstance<py::str>(outputs) || !py::isinstance<py::iterable>(outputs)) {
      throw py::type_error(
          "Program outputs: a list of sandbox paths ('dir/' for a dir) or a dict of path -> "
          "squall.Kind, not " +
          typeName(outputs));
    } else {
      for (auto path : outputs) {
        auto text = path.cast<std::string>();
        program.output(withoutSlash(text), outputKind(text));
      }
    }
  }
  if (!env.is_none()) {
    for (auto [key, value] : env.cast<py::dict>()) program.env(key.cast<std::string>(), value.cast<std::string>());
  }
  if (cpus) program.cpus(*cpus);
  if (name) program.name(*name);
  return box;
}

Program& builderOf(ProgramBox& p) { return p.program; }
Task& builderOf(TaskHandle& t) { return t.live(); }

// A chaining setter of a C++ builder (Program, Task) as a method of its
// Python holder, returning the holder: .def("name", chain<TaskHandle>(&Task::name)).
template <typename Holder, typename Builder, typename... Args>
auto chain(Builder& (Builder::*method)(Args...)) {
  return [method](Holder& holder, Args... args) -> Holder& {
    (builderOf(holder).*method)(std::forward<Args>(args)...);
    return holder;
  };
}

uint64_t idOf(const ObjectHandle& o) { return o.object.id(); }
uint64_t idOf(const TaskHandle& t) { return t.task.id(); }

// Handles are equal when they name the same session's same id (each
// attribute access makes a new one).
template <typename Handle>
void addIdentity(py::class_<Handle>& cls, std::string name) {
  cls.def("__eq__",
          [](Handle& a, py::handle b) {
            if (!py::isinstance<Handle>(b)) return false;
            auto& other = b.cast<Handle&>();
            return a.box == other.box && idOf(a) == idOf(other);
          })
      .def("__hash__", [](Handle& h) { return py::hash(py::make_tuple(h.box->id, idOf(h))); })
      .def("__repr__", [name](Handle& h) {
        return "<squall." + name + " " + std::to_string(h.box->id) + "/" + std::to_string(idOf(h)) + ">";
      });
}

}  // namespace

std::vector<DataObject> objectsOf(py::handle items, const char* what) {
  if (py::isinstance<py::str>(items) || py::isinstance<py::bytes>(items) || !py::isinstance<py::iterable>(items)) {
    throw py::type_error(std::string(what) + " must be a list of squall.DataObject or squall.Task, not " +
                         typeName(items));
  }
  std::vector<DataObject> objects;
  for (auto item : items) objects.push_back(toObject(item, what).object);
  return objects;
}

std::vector<ObjectKind> outputKinds(py::handle outputs, const char* what) {
  std::vector<ObjectKind> kinds;
  if (py::isinstance<py::int_>(outputs)) {
    auto n = outputs.cast<int64_t>();
    if (n < 0 || n > 4096) throw py::value_error(std::string(what) + ": a count from 0, not " + std::to_string(n));
    kinds.assign(n, ObjectKind::BLOB);
  } else {
    for (auto kind : outputs) kinds.push_back(kind.cast<ObjectKind>());
  }
  return kinds;
}

// The live tasks behind handles (for the calls that take a list of tasks).
std::vector<Task> liveTasks(std::vector<TaskHandle>& handles) {
  std::vector<Task> tasks;
  for (auto& handle : handles) tasks.push_back(handle.live());
  return tasks;
}

void setResource(Task& task, const std::string& name, py::handle amount) {
  if (py::isinstance<py::str>(amount)) {
    task.resource(name, amount.cast<std::string>());
  } else if (py::isinstance<py::int_>(amount) || py::isinstance<py::float_>(amount)) {
    task.resource(name, amount.cast<double>());
  } else {
    throw py::type_error("resource " + name + ": an amount (number, or text such as '2G' or 'all'), not " +
                         typeName(amount));
  }
}

ObjectHandle toObject(py::handle value, const char* what) {
  if (py::isinstance<ObjectHandle>(value)) {
    auto& object = value.cast<ObjectHandle&>();
    object.box->live();
    return object;
  }
  if (py::isinstance<TaskHandle>(value)) {
    auto& task = value.cast<TaskHandle&>();
    auto& live = task.live();
    if (live.outputCount() != 1) {
      throw Error(std::string(what) + ": task " + std::to_string(live.id()) + " has " +
                  std::to_string(live.outputCount()) + " outputs; pass one of task.outputs");
    }
    return ObjectHandle{task.box, live.output(0)};
  }
  throw py::type_error(std::string(what) + ": a squall.DataObject or squall.Task, not " + typeName(value));
}

// ------------------------------------------------------------ DataObject, Task

void bindObjects(py::module_& m) {
  py::class_<ObjectHandle> objectClass(m, "DataObject",
                                       "A data object of a session: a constant or a task's output. Set keep, "
                                       "label and content_type before submit; fetch after.");
  addIdentity(objectClass, "DataObject");
  objectClass.def_property_readonly("id", [](ObjectHandle& o) { return o.object.id(); })
      .def_property_readonly("session_id", [](ObjectHandle& o) { return o.box->id; })
      .def_property_readonly("kind", [](ObjectHandle& o) { return o.live().kind(); })
      .def(
          "keep",
          [](ObjectHandle& o, bool keep) -> ObjectHandle& {
            o.live().keep(keep);
            return o;
          },
          py::arg("keep") = true,
          "Keeps the object after its readers finish, so it can be fetched or used by later submits. "
          "Returns the object.")
      .def(
          "label",
          [](ObjectHandle& o, std::string label) -> ObjectHandle& {
            o.live().label(std::move(label));
            return o;
          },
          py::arg("label"))
      .def(
          "content_type",
          [](ObjectHandle& o, const std::string& type) -> ObjectHandle& {
            o.live().contentType(type);
            o.box->contentTypes[o.object.id()] = type;
            return o;
          },
          py::arg("type"), "Free text ('text', 'json', 'pickle', 'mime/...'); 'pickle' makes value() unpickle it.")
      .def(
          "fetch",
          [](ObjectHandle& o) {
            auto& object = o.live();
            std::string data;
            {
              py::gil_scoped_release release;
              data = object.fetch();
            }
            return py::bytes(data);
          },
          "Waits until the object is finished and returns its bytes (a dir's as a tar). It must be kept.")
      .def(
          "fetch_to_file", [](ObjectHandle& o, const std::string& path) { o.live().fetchToFile(path); },
          py::arg("path"), Release(), "Like fetch(), written to the file at path (streamed, any size).")
      .def(
          "fetch_dir", [](ObjectHandle& o, const std::string& path) { o.live().fetchDir(path); }, py::arg("path"),
          Release(), "A dir: unpacks it into the local directory path (created; must not exist or be empty).")
      .def(
          "value",
          [](ObjectHandle& o) -> py::object {
            auto& object = o.live();
            std::string type;
            auto known = o.box->contentTypes.find(object.id());
            if (known != o.box->contentTypes.end()) {
              type = known->second;
            } else {
              py::gil_scoped_release release;
              type = object.info().contentType;
            }
            ObjectBytes data;
            {
              py::gil_scoped_release release;
              data = std::move(o.box->live().fetchAllMapped({object})[0]);
            }
            return valueOf(type, std::move(data));
          },
          "fetch(), unpickled when the content type is 'pickle' (Session.pickled, @remote results; a big "
          "array in it is a read-only view of the fetched bytes, or of the governor's file on this machine); bytes "
          "otherwise.")
      .def(
          "wait", [](ObjectHandle& o) { o.live().wait(); }, Release(), "Blocks until the object is finished.")
      .def(
          "info", [](ObjectHandle& o) { return o.live().info(); }, Release(), "Asks the server (after submit).")
      .def("_content_type", [](ObjectHandle& o) -> std::optional<std::string> {
        auto known = o.box->contentTypes.find(o.object.id());
        if (known == o.box->contentTypes.end()) return std::nullopt;
        return known->second;
      });

  py::class_<TaskHandle> taskClass(m, "Task",
                                   "A task of a session. Its setters (name, cpus, resource, ...) return the task "
                                   "and work before submit.");
  addIdentity(taskClass, "Task");
  taskClass.def_property_readonly("id", [](TaskHandle& t) { return t.task.id(); })
      .def_property_readonly("session_id", [](TaskHandle& t) { return t.box->id; })
      .def_property_readonly(
          "output",
          [](TaskHandle& t) {
            auto& task = t.live();
            if (task.outputCount() == 0) throw Error("task " + std::to_string(task.id()) + " has no outputs");
            return handle(t.box, task.output(0));
          },
          "Its first output.")
      .def_property_readonly(
          "outputs",
          [](TaskHandle& t) {
            auto& task = t.live();
            std::vector<ObjectHandle> outputs;
            for (size_t i = 0; i < task.outputCount(); i++) outputs.push_back(handle(t.box, task.output(i)));
            return outputs;
          },
          "Its outputs, in the order they were declared.")
      .def("name", chain<TaskHandle>(&Task::name), py::arg("name"), "Free text; '/' groups names ('align/chr1').")
      .def("cpus", chain<TaskHandle>(&Task::cpus), py::arg("n"), "Cpus it holds while it runs (default 1).")
      .def(
          "resource",
          [](TaskHandle& t, const std::string& name, py::object amount) -> TaskHandle& {
            setResource(t.live(), name, amount);
            return t;
          },
          py::arg("name"), py::arg("amount"),
          "A resource besides cpus (docs/resources.md): an amount of the pool name ('gpus', 'mem', any a "
          "governor offers), fractional for a share of one item, or as text ('2G', 'all').")
      .def("retries", chain<TaskHandle>(&Task::retries), py::arg("n"), "Extra attempts after a failure.")
      .def("allow_failure", chain<TaskHandle>(&Task::allowFailure), py::arg("allow") = true,
           "Its failure does not fail the session; tasks that need its outputs are skipped.")
      .def(
          "time_limit",
          [](TaskHandle& t, double seconds) -> TaskHandle& {
            t.live().timeLimit(milliseconds(seconds, "time_limit"));
            return t;
          },
          py::arg("seconds"), "The governor kills it after this many seconds.")
      .def(
          "expected_duration",
          [](TaskHandle& t, double seconds) -> TaskHandle& {
            t.live().expectedDuration(milliseconds(seconds, "expected_duration"));
            return t;
          },
          py::arg("seconds"), "A hint for the scheduler (docs/scheduling.md); never enforced.")
      .def(
          "attributes",
          [](TaskHandle& t, py::object attributes) -> TaskHandle& {
            auto& task = t.live();
            if (py::isinstance<py::str>(attributes)) {
              task.attributes(attributes.cast<std::string>());
            } else {
              task.attributes(py::module_::import("json").attr("dumps")(attributes).cast<std::string>());
            }
            return t;
          },
          py::arg("attributes"), "Free-form user attributes: JSON text, or a value json.dumps takes.")
      .def("input_label", chain<TaskHandle>(&Task::inputLabel), py::arg("index"), py::arg("label"),
           "The label of input index, read by a function as call.input(i).label().")
      .def(
          "info", [](TaskHandle& t) { return t.live().info(); }, Release(), "Asks the server (after submit).")
      .def(
          "wait", [](TaskHandle& t) { t.live().wait(); }, Release(),
          "Blocks until it is finished; raises TaskFailed if the session fails first.")
      .def(
          "cancel", [](TaskHandle& t) { t.live().cancel(); }, Release(),
          "Cancels it (after submit) and every task it submitted: they end cancelled, what reads their "
          "outputs is skipped, the session goes on.")
      .def(
          "explain", [](TaskHandle& t) { return t.box->live().explain(t.task.id()); }, Release(),
          "Why it is not running yet, or how it ended (squall explain).");
}

// ------------------------------------------------------------ Program

void bindProgram(py::module_& m) {
  using Self = ProgramBox&;
  auto options = [](bool arg, bool writable) {
    InputOptions o;
    o.arg = arg;
    o.writable = writable;
    return o;
  };
  py::class_<ProgramBox, std::shared_ptr<ProgramBox>>(
      m, "Program",
      "An execute task's program: its arguments (or a shell line), inputs placed as read-only files in its "
      "sandbox, outputs taken from files and/or stdout. Outputs are numbered in the order they are "
      "declared. The methods return the program, so they chain; a Program with slots is a factory: "
      "Session.execute(program, slots={'name': object}).")
      .def(py::init(&makeProgram), py::arg("args"), py::kw_only(), py::arg("stdin") = py::none(),
           py::arg("stdout") = py::none(), py::arg("inputs") = py::none(), py::arg("outputs") = py::none(),
           py::arg("env") = py::none(), py::arg("cpus") = py::none(), py::arg("name") = py::none(),
           "args: a list (the program and its arguments) or a str (a line for /bin/sh -c). stdin: an "
           "object fed on stdin. stdout: True (a blob output) or a Kind (STREAM). inputs: {path: object} "
           "placed read-only. outputs: [path, 'dir/'] or {path: Kind}, after stdout. env: {name: value}.")
      .def_static(
          "shell", [](std::string line) { return std::make_shared<ProgramBox>(Program::shell(std::move(line))); },
          py::arg("line"), "Runs line with /bin/sh -c.")
      .def("arg", chain<ProgramBox>(&Program::arg), py::arg("value"))
      .def(
          "input",
          [options](Self p, py::handle object, std::string path, bool arg, bool writable) -> Self {
            p.program.input(p.own(object, "Program.input"), std::move(path), options(arg, writable));
            return p;
          },
          py::arg("object"), py::arg("path"), py::kw_only(), py::arg("arg") = false, py::arg("writable") = false,
          "Places object at path in the sandbox (arg: also passes path as the next argument; writable: a "
          "private copy the program may change).")
      .def(
          "input_arg",
          [](Self p, py::handle object, std::string path) -> Self {
            p.program.inputArg(p.own(object, "Program.input_arg"), std::move(path));
            return p;
          },
          py::arg("object"), py::arg("path"))
      .def(
          "writable_input",
          [](Self p, py::handle object, std::string path) -> Self {
            p.program.writableInput(p.own(object, "Program.writable_input"), std::move(path));
            return p;
          },
          py::arg("object"), py::arg("path"))
      .def(
          "stdin_from",
          [](Self p, py::handle object) -> Self {
            p.program.stdinFrom(p.own(object, "Program.stdin_from"));
            return p;
          },
          py::arg("object"))
      .def("output", chain<ProgramBox>(&Program::output), py::arg("path"), py::arg("kind") = ObjectKind::BLOB,
           "An output read from the file (or, DIR, the directory) path the program writes; STREAM: a named "
           "pipe whose bytes flow to the readers while it runs.")
      .def("stdout_output", chain<ProgramBox>(&Program::stdoutOutput), py::arg("kind") = ObjectKind::BLOB,
           "An output made of the program's stdout (a blob, or a STREAM).")
      .def("broken_pipe_is_error", chain<ProgramBox>(&Program::brokenPipeIsError), py::arg("is_error") = true)
      .def("env", chain<ProgramBox>(&Program::env), py::arg("name"), py::arg("value"))
      .def("cpus", chain<ProgramBox>(&Program::cpus), py::arg("n"))
      .def("name", chain<ProgramBox>(&Program::name), py::arg("name"))
      .def(
          "input_slot",
          [options](Self p, std::string slot, std::string path, bool arg, bool writable) -> Self {
            p.program.inputSlot(std::move(slot), std::move(path), options(arg, writable));
            return p;
          },
          py::arg("slot"), py::arg("path"), py::kw_only(), py::arg("arg") = false, py::arg("writable") = false,
          "A named slot placed at path, bound per Session.execute(program, slots={slot: object}).")
      .def("input_arg_slot", chain<ProgramBox>(&Program::inputArgSlot), py::arg("slot"), py::arg("path"))
      .def("stdin_slot", chain<ProgramBox>(&Program::stdinSlot), py::arg("slot"));
}

// ------------------------------------------------------------ Session

void bindSession(py::module_& m) {
  using Box = std::shared_ptr<SessionBox>;
  py::class_<SessionBox, Box>(
      m, "Session",
      "A session: build tasks and objects, submit, wait, fetch. A context manager: inside `with` it is the "
      "current session (squall.current_session()); leaving closes it, removing everything it made (a "
      "session from Client.attach is left open).")
      .def_property_readonly("id", [](SessionBox& s) { return s.id; })
      .def(
          "blob",
          [](Box self, std::string data, std::string label, const std::string& contentType) {
            return typed(self, self->live().blob(std::move(data), std::move(label)), contentType);
          },
          py::arg("data"), py::arg("label") = "", py::arg("content_type") = "",
          "A constant blob (bytes; a str is encoded as UTF-8), uploaded with the next submit (any size: over 1 MiB "
          "straight to a governor, never through the server).")
      .def(
          "blob",
          [](Box self, py::list parts, std::string label, const std::string& contentType) {
            return typed(self, partsBlob(self, parts, std::move(label)), contentType);
          },
          py::arg("parts"), py::arg("label") = "", py::arg("content_type") = "",
          "A constant blob made of a list of bytes-like parts, in order: over 1 MiB uploaded straight from their "
          "memory to a governor before it returns (never joined), copied otherwise; they may change after.")
      .def(
          "pickled",
          [](Box self, py::object value, std::string label) {
            auto parts = py::module_::import("squall._objects").attr("dumps")(value);
            return typed(self, partsBlob(self, parts, std::move(label)), PICKLE_CONTENT_TYPE);
          },
          py::arg("value"), py::arg("label") = "",
          "A constant holding value pickled (cloudpickle; big arrays out of band, read without a copy), content "
          "type 'pickle': value() and @remote functions taking it get the value back.")
      .def(
          "file", [](Box self, const std::string& path) { return handle(self, self->live().fileBlob(path)); },
          py::arg("path"), Release(), "A local file uploaded as a constant blob (any size: a big one is read at the submit, in pieces, "
          "straight to a governor).")
      .def(
          "directory", [](Box self, const std::string& path) { return handle(self, self->live().directory(path)); },
          py::arg("path"), Release(), "A local directory uploaded as a dir constant (as a tar, 48 MiB at most).")
      .def(
          "concat",
          [](Box self, py::handle inputs) { return handle(self, self->live().concat(objectsOf(inputs, "concat"))); },
          py::arg("inputs"), "Output: the inputs' bytes, concatenated in order.")
      .def(
          "call",
          [](Box self, const std::string& function, py::handle inputs, std::string config, py::handle outputs) {
            auto kinds = outputKinds(outputs, "call outputs");
            return handle(self,
                          self->live().call(function, objectsOf(inputs, "call inputs"), std::move(config), kinds));
          },
          py::arg("function"), py::arg("inputs") = py::list(), py::arg("config") = py::bytes(""),
          py::arg("outputs") = 1,
          "A function of an executor the governors keep warm (tasklib, docs/tasklib.md): 'executor/function' "
          "on inputs with config bytes; outputs: how many blobs, or their Kinds in order.")
      .def(
          "actor",
          [](Box self, const std::string& type, py::handle inputs, std::string config) {
            auto actor = self->live().actor(type, objectsOf(inputs, "actor inputs"), std::move(config));
            return ActorHandle{self, actor};
          },
          py::arg("type"), py::arg("inputs") = py::list(), py::arg("config") = py::bytes(""),
          "An actor (docs/actors.md) of an actor type an executor registered, 'executor/Type', constructed "
          "from inputs and config bytes; its methods' calls are tasks (Actor.call). It lives until killed or "
          "the session ends. @squall.remote on a class builds these for Python classes.")
      .def(
          "get_actor",
          [](Box self, const std::string& name) {
            auto& session = self->live();
            std::optional<Actor> actor;
            {
              py::gil_scoped_release release;
              actor.emplace(session.getActor(name));
            }
            return ActorHandle{self, *actor};
          },
          py::arg("name"),
          "The live actor named name (Actor.named), of any session of the server; calls on it go with this "
          "session's submit. Raises squall.Error when no live actor has the name.")
      .def(
          "actor_handle", [](Box self, uint64_t id) { return ActorHandle{self, self->live().actorHandle(id)}; },
          py::arg("id"), "The handle of this session's actor whose task is id (made by this or an earlier submit).")
      .def(
          "sleep",
          [](Box self, double seconds, py::handle input) {
            std::optional<DataObject> in;
            if (!input.is_none()) in = toObject(input, "sleep input").object;
            return handle(self, self->live().sleep(milliseconds(seconds, "sleep"), in));
          },
          py::arg("seconds"), py::arg("input") = py::none(), "Sleeps; output: input's bytes (empty without one).")
      .def(
          "execute",
          [](Box self, py::handle program, py::object slots, py::kwargs kwargs) {
            std::shared_ptr<ProgramBox> box;
            if (py::isinstance<ProgramBox>(program)) {
              if (kwargs.size() > 0) {
                throw py::type_error("execute(program): set stdin, outputs, ... on the Program, not as keywords");
              }
              box = program.cast<std::shared_ptr<ProgramBox>>();
            } else {
              box = py::module_::import("squall._squall")
                        .attr("Program")(program, **kwargs)
                        .cast<std::shared_ptr<ProgramBox>>();
            }
            if (box->session && box->session != self) {
              throw Error("execute: the program's inputs belong to session " + std::to_string(box->session->id) +
                          ", not to session " + std::to_string(self->id));
            }
            auto& session = self->live();
            if (slots.is_none()) return handle(self, session.execute(box->program));
            std::vector<std::pair<std::string, DataObject>> bound;
            for (auto [slot, object] : slots.cast<py::dict>()) {
              bound.emplace_back(slot.cast<std::string>(), toObject(object, "execute slots").object);
            }
            return handle(self, session.execute(box->program, bound));
          },
          py::arg("program"), py::arg("slots") = py::none(),
          "An execute task: a Program, or the arguments and keywords of Program(...) "
          "(session.execute(['sort'], stdin=text, stdout=True)). slots binds a factory Program's slots.")
      .def(
          "make_dir",
          [](Box self, py::handle entries) {
            std::vector<std::pair<std::string, DataObject>> list;
            auto add = [&list](py::handle path, py::handle object) {
              list.emplace_back(path.cast<std::string>(), toObject(object, "make_dir").object);
            };
            if (py::isinstance<py::dict>(entries)) {
              for (auto [path, object] : entries.cast<py::dict>()) add(path, object);
            } else {
              for (auto entry : entries) {
                auto pair = entry.cast<py::tuple>();
                if (pair.size() != 2) throw py::value_error("make_dir: entries are (path, object) pairs");
                add(pair[0], pair[1]);
              }
            }
            return handle(self, self->live().makeDir(list));
          },
          py::arg("entries"), "Output: a dir holding each object at its relative path ({path: object}).")
      .def(
          "slice_dir",
          [](Box self, py::handle dir, const std::string& path) {
            return handle(self, self->live().sliceDir(toObject(dir, "slice_dir").object, path));
          },
          py::arg("dir"), py::arg("path"),
          "Output: the file at path inside dir (a blob), or with a trailing '/' the subdirectory (a dir).")
      .def(
          "load", [](Box self, const std::string& path) { return handle(self, self->live().load(path)); },
          py::arg("path"), "Reads a file on the governor (under its --allow-path roots).")
      .def(
          "load_dir", [](Box self, const std::string& path) { return handle(self, self->live().loadDir(path)); },
          py::arg("path"), "Reads a directory on the governor (under its --allow-path roots).")
      .def(
          "store",
          [](Box self, py::handle object, const std::string& path, bool overwrite) {
            return handle(self, self->live().store(toObject(object, "store").object, path, overwrite));
          },
          py::arg("object"), py::arg("path"), py::arg("overwrite") = false,
          "Writes a blob or dir to path on the governor (under --allow-path).")
      .def(
          "submit", [](SessionBox& s) { s.live().submit(); }, Release(),
          "Sends everything built since the last submit. Raises squall.Error naming the problem if the graph "
          "is invalid (then nothing of it was applied).")
      .def(
          "submit_and_wait",
          [](SessionBox& s, std::vector<TaskHandle> handles) {
            auto& session = s.live();
            auto tasks = liveTasks(handles);
            py::gil_scoped_release release;
            session.submitAndWait(tasks);
          },
          py::arg("tasks"),
          "submit(), then wait(tasks), in one round trip to the server when what was built fits one message "
          "(e.g. an actor's method call made and waited for). Raises squall.Error if the graph is invalid "
          "(nothing applied), TaskFailed if the wait fails.")
      .def(
          "wait",
          [](SessionBox& s, py::handle items, std::optional<double> timeout) {
            auto& session = s.live();
            auto limit = waitTimeout(timeout);
            auto [tasks, objects] = tasksAndObjects(items, "wait");
            py::gil_scoped_release release;
            auto start = std::chrono::steady_clock::now();
            session.wait(tasks, limit);
            if (limit) {
              // What is left of it for the objects.
              auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
              limit = std::max(std::chrono::milliseconds(0), *limit - spent);
            }
            session.wait(objects, limit);
          },
          py::arg("items"), py::arg("timeout") = py::none(),
          "Blocks until the tasks and objects are finished; raises TaskFailed if the session fails first, "
          "squall.Timeout (also a TimeoutError) if timeout seconds pass first. Ctrl-C interrupts it "
          "(KeyboardInterrupt; the session goes on).")
      .def(
          "wait_all", [](SessionBox& s) { s.live().waitAll(); }, Release(),
          "Blocks until every task of the session is finished; raises TaskFailed if one fails it.")
      .def(
          "wait_some",
          [](SessionBox& s, py::list items, std::optional<double> timeout) {
            auto& session = s.live();
            auto limit = waitTimeout(timeout);
            auto [tasks, objects] = tasksAndObjects(items, "wait_some");
            if (!tasks.empty() && !objects.empty()) {
              throw py::type_error("wait_some: tasks or objects, not both in one call");
            }
            std::vector<uint64_t> finished;
            {
              py::gil_scoped_release release;
              finished = tasks.empty() ? session.waitSome(objects, limit) : session.waitSome(tasks, limit);
            }
            py::list done;
            for (size_t i = 0; i < items.size(); i++) {
              auto id = tasks.empty() ? objects[i].id() : tasks[i].id();
              if (std::find(finished.begin(), finished.end(), id) != finished.end()) done.append(items[i]);
            }
            return done;
          },
          py::arg("items"), py::arg("timeout") = py::none(),
          "Blocks until at least one of the tasks (or objects) is finished, or timeout seconds pass; "
          "returns those finished now, in the order given (none when the timeout ran out).")
      .def(
          "unkeep",
          [](SessionBox& s, py::handle objects) {
            auto list = objectsOf(objects, "unkeep");
            py::gil_scoped_release release;
            s.live().unkeep(list);
          },
          py::arg("objects"), "No longer keeps the objects (removed once no task needs them).")
      .def(
          "cancel", [](SessionBox& s) { s.live().cancel(); }, Release(),
          "Cancels its unfinished tasks; the session fails.")
      .def(
          "state", [](SessionBox& s) { return s.live().state(); }, Release())
      .def(
          "tasks",
          [](SessionBox& s, std::optional<std::vector<uint64_t>> ids, std::optional<std::vector<std::string>> states,
             uint32_t limit) {
            return s.live().tasks(ids.value_or(std::vector<uint64_t>{}), states.value_or(std::vector<std::string>{}),
                                  limit);
          },
          py::arg("ids") = py::none(), py::arg("states") = py::none(), py::arg("limit") = 1000, Release(),
          "Tasks by id, or (no ids) up to limit tasks in states (none: any), failures first.")
      .def(
          "explain",
          [](SessionBox& s, py::handle task) {
            uint64_t id = py::isinstance<TaskHandle>(task) ? task.cast<TaskHandle&>().task.id() : task.cast<uint64_t>();
            auto& session = s.live();
            py::gil_scoped_release release;
            return session.explain(id);
          },
          py::arg("task"), "Why a task (a Task or an id) is not running yet, or how it ended.")
      .def(
          "close", [](SessionBox& s) { s.live().close(); }, Release(),
          "Removes everything of the session on the server; later calls raise squall.Error.")
      .def(
          "detach", [](SessionBox& s) { s.live().detach(); },
          "Leaves the session open on the server when this object goes.")
      .def(
          "object",
          [](Box self, uint64_t id) {
            auto& session = self->live();
            std::optional<DataObject> object;
            {
              py::gil_scoped_release release;
              object.emplace(session.object(id));
            }
            return handle(self, *object);
          },
          py::arg("id"), "A handle to an object of this session made elsewhere (to fetch or wait for).")
      .def(
          "objects", [](SessionBox& s, std::vector<uint64_t> ids) { return s.live().objects(ids); }, py::arg("ids"),
          Release(), "ObjectInfos by id.")
      .def(
          "fetch_all",
          [](SessionBox& s, py::handle objects, bool views) {
            auto list = objectsOf(objects, "fetch_all");
            std::vector<ObjectBytes> values;
            {
              py::gil_scoped_release release;
              values = s.live().fetchAllMapped(list);
            }
            py::list out;
            for (auto& value : values) {
              out.append(views ? fetchedBuffer(std::move(value)) : py::bytes(value.data(), value.size()));
            }
            return out;
          },
          py::arg("objects"), py::arg("views") = false,
          "The bytes of each object, in order, waiting for them: as many fetch() calls with every request in "
          "flight at once. Raises the TaskFailed of the first that will not be made. views: read-only buffers "
          "that own the bytes (no copy; memoryview() of each; a big blob held on this machine is a mapping of the "
          "governor's file) instead of bytes.")
      .def("__enter__",
           [](py::object self) {
             self.cast<SessionBox&>().live();
             enterSession(self);
             return self;
           })
      .def("__exit__",
           [](py::object self, py::args) {
             exitSession(self);
             auto& box = self.cast<SessionBox&>();
             if (!box.session || box.attached) return;
             auto& session = box.live();
             py::gil_scoped_release release;
             session.close();
           })
      .def("__repr__", [](SessionBox& s) { return "<squall.Session " + std::to_string(s.id) + ">"; });
}

}  // namespace python
}  // namespace squall
