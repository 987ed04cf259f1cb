// What the pieces of the extension module squall._squall share: the boxes
// that tie the C++ client's handles to Python's object lifetimes, and the
// exceptions. The C++ handles (Session, Task, DataObject, Actor) point into
// their Client and Session; a box keeps what a handle needs alive, so a
// Python object that outlives a closed Session or Client raises
// squall.Error instead of touching freed memory.
//
// Threading: a Client belongs to the thread that made it (its KJ event loop
// is that thread's). Every method checks that it runs there and raises
// squall.Error naming the problem otherwise. Blocking calls release the GIL;
// building calls keep it (they are short and touch Python objects).
#pragma once

#include <pybind11/pybind11.h>
#include <squall/client/client.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace squall {
namespace python {

namespace py = pybind11;

struct SessionBox;

// A Client and its sessions. Closing it closes them (their boxes stay,
// answering squall.Error).
struct ClientBox : std::enable_shared_from_this<ClientBox> {
  std::thread::id owner = std::this_thread::get_id();
  std::unique_ptr<Client> client;  // null once closed
  std::vector<std::weak_ptr<SessionBox>> sessions;

  ~ClientBox();
  // The client, if this is its thread and it is open; else throws Error.
  Client& live();
  void checkThread() const;
  // Closes its sessions (those it made are closed on the server), then
  // the connection. Safe to call twice.
  void close();
  // Records a session made from this client, so close() can reach it.
  std::shared_ptr<SessionBox> adopt(Session session);
};

struct SessionBox {
  std::shared_ptr<ClientBox> client;
  uint64_t id;
  // Reset when its client closes.
  std::optional<Session> session;
  // From Client.attach: leaving `with` leaves it open.
  bool attached = false;
  // Content types set through Python, by object id: DataObject.value()
  // and @remote read them (a pickled object is unpickled).
  std::unordered_map<uint64_t, std::string> contentTypes;

  SessionBox(std::shared_ptr<ClientBox> client, Session session)
      : client(std::move(client)), id(session.id()), session(std::move(session)) {}
  ~SessionBox();
  Session& live();
};

// A DataObject or Task with the session box that keeps it valid.
struct ObjectHandle {
  std::shared_ptr<SessionBox> box;
  DataObject object;
  DataObject& live() {
    box->live();
    return object;
  }
};

struct TaskHandle {
  std::shared_ptr<SessionBox> box;
  Task task;
  Task& live() {
    box->live();
    return task;
  }
};

struct ActorHandle {
  std::shared_ptr<SessionBox> box;
  Actor actor;
  Actor& live() {
    box->live();
    return actor;
  }
};

// The content type of pickled Python values (squall.Session.pickled,
// @squall.remote's default outputs).
constexpr const char* PICKLE_CONTENT_TYPE = "pickle";

// The memory of a list of bytes-like Python objects (a constant's parts,
// Session::blob), exported (so none is resized or freed) while this lives;
// TypeError for anything else. Made and destroyed with the GIL held.
struct HeldParts {
  explicit HeldParts(py::handle list);
  ~HeldParts();
  HeldParts(const HeldParts&) = delete;
  HeldParts& operator=(const HeldParts&) = delete;
  std::vector<std::string_view> parts;
  std::vector<Py_buffer> views;
};
// Fetched bytes as a read-only Python buffer that owns them (no copy).
py::object fetchedBuffer(ObjectBytes bytes);
// An object's value: unpickled when its content type is 'pickle'
// (squall._objects.loads: out-of-band arrays are views of the bytes), the
// bytes otherwise.
py::object valueOf(const std::string& contentType, ObjectBytes bytes);

// The session's handle for `value`: a DataObject, or a Task with exactly one
// output (its output); anything else raises TypeError naming `what`.
ObjectHandle toObject(py::handle value, const char* what);

// The objects of `items` (DataObjects, or Tasks of one output); anything
// else raises TypeError naming `what`.
std::vector<DataObject> objectsOf(py::handle items, const char* what);

// The kinds of a call's outputs: a count of blobs, or Kinds in order.
std::vector<ObjectKind> outputKinds(py::handle outputs, const char* what);

// Task.resource's amount: text ('2G', 'all') or a number.
void setResource(Task& task, const std::string& name, py::handle amount);

// The `with session:` stack of this thread (squall.current_session()).
void enterSession(py::handle session);
void exitSession(py::handle session);

// The module's parts, in the order module.cpp adds them.
void bindErrors(py::module_& m);
void bindInfos(py::module_& m);
void bindClient(py::module_& m);
void bindObjects(py::module_& m);
void bindProgram(py::module_& m);
void bindActor(py::module_& m);
void bindSession(py::module_& m);
void bindCluster(py::module_& m);
void bindBuffers(py::module_& m);
void bindOutput(py::module_& m);

}  // namespace python
}  // namespace squall
