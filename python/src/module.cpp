// The extension module squall._squall (docs/python.md): the C++ client
// (client/include/squall/client/client.h) for Python. This file holds the
// module's entry, its exceptions, the info records and Client; the
// session's graph building is in session-binding.cpp, Actor in
// actor-binding.cpp, LocalCluster in cluster-binding.cpp. The package
// squall (python/squall/) re-exports it.
#include "binding.h"

#include <squall/client/shared-loop.h>

#include <algorithm>
#include <pybind11/stl.h>

#include <cstdio>
#include <sstream>

namespace squall {
namespace python {

namespace {

// Owned for the life of the process (module types are never freed).
PyObject* errorType = nullptr;
PyObject* taskFailedType = nullptr;
PyObject* timeoutType = nullptr;

// ClientOptions::whileBlocked: between slices of a blocking wait, with the
// GIL taken back for the moment, run Python's signal handlers; a Ctrl-C
// (KeyboardInterrupt) or any exception a handler raises ends the wait.
void checkSignals() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

// The open sessions entered with `with`, innermost last (strong refs,
// dropped by __exit__). A thread's own: squall.current_session().
thread_local std::vector<PyObject*> enteredSessions;

// Text from the server (errors, stderr tails) as str, bytes that are not
// UTF-8 replaced rather than raising.
py::str lenient(const std::string& text) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
}

std::string quoted(const std::string& text) { return py::repr(py::str(text)).cast<std::string>(); }

const char* kindName(ObjectKind kind) {
  switch (kind) {
    case ObjectKind::BLOB: return "BLOB";
    case ObjectKind::DIR: return "DIR";
    case ObjectKind::STREAM: return "STREAM";
  }
  return "?";
}

}  // namespace

void enterSession(py::handle session) { enteredSessions.push_back(session.inc_ref().ptr()); }

void exitSession(py::handle session) {
  for (auto it = enteredSessions.rbegin(); it != enteredSessions.rend(); ++it) {
    if (*it == session.ptr()) {
      enteredSessions.erase(std::next(it).base());
      session.dec_ref();
      return;
    }
  }
}

// ------------------------------------------------------------ boxes

ClientBox::~ClientBox() {
  if (!client) return;
  if (std::this_thread::get_id() != owner) {
    // Its event loop lives on its own thread: nothing of it may be touched
    // here. The server closes its sessions when the connection goes with
    // the process.
    fprintf(stderr,
            "squall: a Client was garbage-collected on another thread than its own; "
            "it is left open (close clients with close() or `with`)\n");
    client.release();
    return;
  }
  try {
    close();
  } catch (const std::exception&) {
    // The server or connection is gone; nothing left to release.
  }
}

void ClientBox::checkThread() const {
  if (std::this_thread::get_id() != owner) {
    throw Error("this squall Client belongs to the thread that made it; make one Client per thread");
  }
}

Client& ClientBox::live() {
  checkThread();
  if (!client) throw Error("the squall Client is closed");
  return *client;
}

void ClientBox::close() {
  checkThread();
  if (!client) return;
  for (auto& weak : sessions) {
    if (auto session = weak.lock()) session->session.reset();  // its destructor closes it
  }
  sessions.clear();
  client.reset();
}

std::shared_ptr<SessionBox> ClientBox::adopt(Session session) {
  auto box = std::make_shared<SessionBox>(shared_from_this(), std::move(session));
  // Sessions hold their client; the client reaches them weakly.
  sessions.erase(std::remove_if(sessions.begin(), sessions.end(), [](auto& w) { return w.expired(); }), sessions.end());
  sessions.push_back(box);
  return box;
}

SessionBox::~SessionBox() {
  if (session && client && std::this_thread::get_id() != client->owner) {
    // See ~ClientBox: leave it to the server. Never destroyed: its client
    // belongs to another thread.
    new Session(std::move(*session));
    session.reset();
  }
}

Session& SessionBox::live() {
  client->checkThread();
  if (!session) throw Error("session " + std::to_string(id) + " is closed: its Client was closed");
  return *session;
}

// ------------------------------------------------------------ errors

void bindErrors(py::module_& m) {
  errorType = PyErr_NewExceptionWithDoc(
      "squall.Error",
      "An error squall reports: the server's message (a refused graph, an unknown session, a lost "
      "connection), or a misuse of the API, named.",
      nullptr, nullptr);
  taskFailedType = PyErr_NewExceptionWithDoc(
      "squall.TaskFailed",
      "A session failed because one of its tasks did (or it was cancelled). Attributes: task (its "
      "id, 0 when no single task caused it), task_name, exit_status (-1 when not a process exit) "
      "and stderr_tail (the last KiBs of its stderr; for @remote functions the message holds the "
      "remote traceback).",
      errorType, nullptr);
  // Both a squall.Error and Python's TimeoutError.
  timeoutType = PyErr_NewExceptionWithDoc(
      "squall.Timeout", "A wait given a timeout that ran out first (what it waited for goes on).",
      py::make_tuple(py::handle(errorType), py::handle(PyExc_TimeoutError)).release().ptr(), nullptr);
  m.attr("Error") = py::handle(errorType);
  m.attr("TaskFailed") = py::handle(taskFailedType);
  m.attr("Timeout") = py::handle(timeoutType);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const TaskFailed& e) {
      auto type = py::reinterpret_borrow<py::object>(taskFailedType);
      py::object error = type(lenient(e.what()));
      error.attr("task") = e.task;
      error.attr("task_name") = lenient(e.taskName);
      error.attr("exit_status") = e.exitStatus;
      error.attr("stderr_tail") = lenient(e.stderrTail);
      PyErr_SetObject(taskFailedType, error.ptr());
    } catch (const Timeout& e) {
      PyErr_SetObject(timeoutType, lenient(e.what()).ptr());
    } catch (const Error& e) {
      PyErr_SetObject(errorType, lenient(e.what()).ptr());
    }
  });
}

// ------------------------------------------------------------ info records

void bindInfos(py::module_& m) {
  py::enum_<ObjectKind>(m, "Kind",
                        "The kind of a data object: BLOB (bytes), DIR (a directory tree) or "
                        "STREAM (bytes read while a program writes them).")
      .value("BLOB", ObjectKind::BLOB)
      .value("DIR", ObjectKind::DIR)
      .value("STREAM", ObjectKind::STREAM);
  m.attr("BLOB") = ObjectKind::BLOB;
  m.attr("DIR") = ObjectKind::DIR;
  m.attr("STREAM") = ObjectKind::STREAM;

  py::class_<ObjectInfo>(m, "ObjectInfo", "What the server knows of a data object.")
      .def_readonly("id", &ObjectInfo::id)
      .def_readonly("kind", &ObjectInfo::kind)
      .def_readonly("label", &ObjectInfo::label)
      .def_readonly("content_type", &ObjectInfo::contentType)
      .def_readonly("keep", &ObjectInfo::keep)
      .def_readonly("state", &ObjectInfo::state, "unfinished, finished, removed or failed (never made)")
      .def_readonly("size", &ObjectInfo::size, "once finished: a blob's bytes, a dir's files' total")
      .def_readonly("hash", &ObjectInfo::hash, "once finished: the xxh3-64 hash of the content")
      .def_readonly("producer", &ObjectInfo::producer, "the task making it; 0 for a constant")
      .def_readonly("locations", &ObjectInfo::locations, "the governors holding a copy")
      .def("__repr__", [](const ObjectInfo& o) {
        std::ostringstream out;
        out << "ObjectInfo(id=" << o.id << ", kind=" << kindName(o.kind) << ", state=" << quoted(o.state)
            << ", size=" << o.size << ", label=" << quoted(o.label) << ")";
        return out.str();
      });

  py::class_<TaskInfo>(m, "TaskInfo", "What the server knows of a task.")
      .def_readonly("id", &TaskInfo::id)
      .def_readonly("name", &TaskInfo::name)
      .def_readonly("type", &TaskInfo::type, "concat, execute, call, make_dir, ...")
      .def_readonly("state", &TaskInfo::state, "waiting, ready, running, finished, failed, cancelled or skipped")
      .def_readonly("governor", &TaskInfo::governor)
      .def_property_readonly(
          "start_time",
          [](const TaskInfo& t) -> std::optional<double> {
            if (t.startTimeUs == 0) return std::nullopt;
            return t.startTimeUs / 1e6;
          },
          "when it started, in seconds since the epoch (None: not started)")
      .def_property_readonly(
          "duration", [](const TaskInfo& t) { return t.durationUs / 1e6; }, "how long it ran, in seconds")
      .def_readonly("exit_status", &TaskInfo::exitStatus, "-1 when not a process exit")
      .def_property_readonly("error", [](const TaskInfo& t) { return lenient(t.error); })
      .def_property_readonly(
          "stdout_tail", [](const TaskInfo& t) { return py::bytes(t.stdoutTail); },
          "the last KiBs of its stdout when that was not an output")
      .def_property_readonly(
          "stderr_tail", [](const TaskInfo& t) { return py::bytes(t.stderrTail); }, "the last KiBs of its stderr")
      .def_readonly("attempt", &TaskInfo::attempt)
      .def_readonly("attributes", &TaskInfo::attributes, "its user attributes, JSON text")
      .def_readonly("inputs", &TaskInfo::inputs, "the ids of its inputs, in order")
      .def_readonly("outputs", &TaskInfo::outputs)
      .def("__repr__", [](const TaskInfo& t) {
        std::ostringstream out;
        out << "TaskInfo(id=" << t.id << ", name=" << quoted(t.name) << ", type=" << quoted(t.type)
            << ", state=" << quoted(t.state) << ", governor=" << quoted(t.governor) << ")";
        return out.str();
      });

  py::class_<SessionState>(m, "SessionState", "A session's state and its tasks counted by state.")
      .def_readonly("id", &SessionState::id)
      .def_readonly("name", &SessionState::name)
      .def_readonly("open", &SessionState::open)
      .def_readonly("closed", &SessionState::closed)
      .def_readonly("failure", &SessionState::failure, "why it failed ('' while it has not)")
      .def_readonly("waiting", &SessionState::waiting)
      .def_readonly("ready", &SessionState::ready)
      .def_readonly("running", &SessionState::running)
      .def_readonly("finished", &SessionState::finished)
      .def_readonly("failed", &SessionState::failed)
      .def_readonly("skipped", &SessionState::skipped)
      .def("__repr__", [](const SessionState& s) {
        std::ostringstream out;
        out << "SessionState(id=" << s.id << ", name=" << quoted(s.name) << ", open=" << (s.open ? "True" : "False")
            << ", finished=" << s.finished << ", failure=" << quoted(s.failure) << ")";
        return out.str();
      });

  py::class_<GovernorInfo>(m, "GovernorInfo", "A governor connected to the server.")
      .def_readonly("id", &GovernorInfo::id)
      .def_readonly("name", &GovernorInfo::name)
      .def_readonly("data_address", &GovernorInfo::dataAddress)
      .def_readonly("cpus", &GovernorInfo::cpus)
      .def_readonly("cpus_used", &GovernorInfo::cpusUsed)
      .def_readonly("tasks_assigned", &GovernorInfo::tasksAssigned)
      .def_readonly("objects", &GovernorInfo::objects)
      .def_readonly("functions", &GovernorInfo::functions, "the functions its executors offer, 'executor/function'")
      .def_readonly("resources", &GovernorInfo::resources,
                    "its resources besides cpus: name -> (all it has, what its tasks hold)")
      .def("__repr__", [](const GovernorInfo& g) {
        std::ostringstream out;
        out << "GovernorInfo(id=" << g.id << ", name=" << quoted(g.name) << ", cpus=" << g.cpus
            << ", cpus_used=" << g.cpusUsed << ")";
        return out.str();
      });

  py::class_<TaskExplanation>(m, "TaskExplanation", "Why a task is where it is (squall explain).")
      .def_readonly("summary", &TaskExplanation::summary)
      .def_readonly("details", &TaskExplanation::details)
      .def("__str__", [](const TaskExplanation& e) {
        std::string text = e.summary;
        for (auto& line : e.details) text += "\n  " + line;
        return text;
      });
}

// ------------------------------------------------------------ Client

void bindClient(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  py::class_<ClientBox, std::shared_ptr<ClientBox>>(
      m, "Client",
      "A connection to a squall server. Use it from the thread that made it. Closing it (close(), or "
      "leaving `with`) closes the sessions it made.")
      .def(py::init([](const std::string& address, const std::string& token, bool waitForServer,
                       py::object aroundWait) {
             ClientOptions options;
             options.address = address;
             options.token = token;
             options.waitForServer = waitForServer;
             options.whileBlocked = checkSignals;
             if (!aroundWait.is_none()) {
               // Called with the GIL released (waits release it); the
               // callable goes with the GIL held.
               std::shared_ptr<py::object> hook(new py::object(aroundWait), [](py::object* o) {
                 py::gil_scoped_acquire gil;
                 delete o;
               });
               options.aroundWait = [hook](bool waiting) {
                 py::gil_scoped_acquire gil;
                 (*hook)(waiting);
               };
             }
             auto box = std::make_shared<ClientBox>();
             py::gil_scoped_release release;
             box->client = std::make_unique<Client>(options);
             return box;
           }),
           py::arg("address") = "", py::arg("token") = "", py::arg("wait_for_server") = false,
           py::arg("around_wait") = py::none(),
           "Connects to the server at address (host:port; '' = $SQUALL_SERVER, else 127.0.0.1:7210) "
           "with the shared secret token ('' = $SQUALL_TOKEN / $SQUALL_TOKEN_FILE). With "
           "wait_for_server, a server that cannot be reached yet is tried for "
           "$SQUALL_RECONNECT_TIMEOUT seconds. around_wait(True/False) is called before and after each "
           "wait blocks (the executor's own use: a function gives its cpus back while it waits).")
      .def_property_readonly("address", [](ClientBox& c) { return c.live().address(); })
      .def(
          "new_session",
          [](std::shared_ptr<ClientBox> self, const std::string& name, bool persistent) {
            auto& client = self->live();
            std::optional<Session> session;
            {
              py::gil_scoped_release release;
              session.emplace(client.newSession(name, SessionOptions{.persistent = persistent}));
            }
            return self->adopt(std::move(*session));
          },
          py::arg("name") = "", py::arg("persistent") = false,
          "A new session. Use it as a context manager: leaving `with` closes it (removing everything it "
          "made on the server) and makes it the current session inside (squall.current_session(), "
          "which @squall.remote functions build in). A persistent session outlives this client.")
      .def(
          "attach_child",
          [](std::shared_ptr<ClientBox> self, uint64_t id, uint64_t parent) {
            auto& client = self->live();
            std::optional<Session> session;
            {
              py::gil_scoped_release release;
              session.emplace(client.attachChild(id, parent));
            }
            auto box = self->adopt(std::move(*session));
            box->attached = true;
            return box;
          },
          py::arg("session"), py::arg("parent"),
          "Session `session` for the function running as task `parent` (squall._worker uses it): what is "
          "submitted through it are the task's children (docs/nested.md).")
      .def(
          "attach",
          [](std::shared_ptr<ClientBox> self, py::object which) {
            auto& client = self->live();
            std::optional<Session> session;
            if (py::isinstance<py::int_>(which)) {
              auto id = which.cast<uint64_t>();
              py::gil_scoped_release release;
              session.emplace(client.attach(id));
            } else if (py::isinstance<py::str>(which)) {
              auto name = which.cast<std::string>();
              py::gil_scoped_release release;
              session.emplace(client.attach(name));
            } else {
              throw py::type_error("attach() takes a session id (int) or name (str), not " +
                                   std::string(py::str(which.get_type().attr("__name__"))));
            }
            auto box = self->adopt(std::move(*session));
            box->attached = true;
            return box;
          },
          py::arg("session"),
          "An existing session, by id or by name (the newest open one). Leaving `with` or dropping it "
          "leaves the session open.")
      .def(
          "sessions", [](ClientBox& c) { return c.live().sessions(); }, Release(), "The open sessions.")
      .def(
          "governors", [](ClientBox& c) { return c.live().governors(); }, Release(),
          "The connected governors, with their cpus in use and the functions they offer.")
      .def("close", &ClientBox::close, "Closes the sessions this client made, then the connection.")
      .def("__enter__", [](std::shared_ptr<ClientBox> self) { return self; })
      .def("__exit__", [](ClientBox& c, py::args) { c.close(); })
      .def("__repr__", [](ClientBox& c) {
        return c.client ? "<squall.Client " + c.client->address() + ">" : std::string("<squall.Client closed>");
      });

  m.def(
      "current_session",
      []() -> py::object {
        if (enteredSessions.empty()) {
          throw Error("no current session: build tasks inside `with client.new_session() as session:`");
        }
        return py::reinterpret_borrow<py::object>(enteredSessions.back());
      },
      "The session of the innermost `with session:` block of this thread; raises squall.Error outside one.");
}

}  // namespace python
}  // namespace squall

PYBIND11_MODULE(_squall, m) {
  using namespace squall::python;
  m.doc() = "squall's C++ client for Python; use it through the package squall (docs/python.md).";
  // squall-python-executor's: Clients made on its thread share its event
  // loop (addresses from _squall_executor.loop()), so that a function's
  // @remote calls wait on it (docs/nested.md).
  m.def("_share_thread_loop", [](uintptr_t provider, uintptr_t waitScope) {
    squall::client::shareThreadLoop(*reinterpret_cast<kj::AsyncIoProvider*>(provider),
                                    *reinterpret_cast<kj::WaitScope*>(waitScope));
  });
  m.def("_unshare_thread_loop", []() { squall::client::unshareThreadLoop(); });
  bindErrors(m);
  bindInfos(m);
  bindClient(m);
  bindObjects(m);
  bindProgram(m);
  bindActor(m);
  bindSession(m);
  bindOutput(m);
  bindCluster(m);
  bindBuffers(m);
}
