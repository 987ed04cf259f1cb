// Internals of the client library (client.h) that its source files share:
// the connection (ClientImpl, connection.cpp), a session's calls to the
// server (SessionImpl, session.cpp) and what a session builds before a
// submit (LocalObject, LocalTask). Thread: the one that created the Client.
#pragma once

#include <squall/client/client.h>

#include <cstdio>
#include <functional>
#include <kj/async-io.h>
#include <kj/io.h>
#include <map>
#include <optional>
#include <set>
#include <squall/proto/rpc.h>
#include <squall/proto/tls.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>
#include <string>
#include <unordered_map>
#include <vector>

namespace squall {
namespace client {

// One KJ event loop per thread, shared by that thread's Clients: the
// loop's own, or one the thread runs already (a tasklib executor's, lent
// with shareThreadLoop()).
struct Loop {
  explicit Loop(kj::AsyncIoProvider* sharedProvider = nullptr, kj::WaitScope* sharedScope = nullptr) {
    if (sharedProvider != nullptr) {
      provider = sharedProvider;
      waitScope = sharedScope;
    } else {
      own = kj::setupAsyncIo();
      auto& io = KJ_ASSERT_NONNULL(own);
      provider = io.provider.get();
      waitScope = &io.waitScope;
    }
  }
  kj::Maybe<kj::AsyncIoContext> own;
  kj::AsyncIoProvider* provider;
  kj::WaitScope* waitScope;
  int users = 0;
};

struct ClientImpl {
  Loop& loop;
  std::string address;
  std::string token;
  // TLS, when configured: every connection goes through `tlsNetwork`.
  kj::Own<Tls> tls;
  kj::Own<kj::Network> tlsNetwork;
  kj::Network& network() { return tls.get() != nullptr ? *tlsNetwork : loop.provider->getNetwork(); }
  kj::Own<RpcClient> connection;
  kj::Maybe<wire::ClientService::Client> service;
  // Sessions this client made and has not closed, and the server
  // incarnation of each (SessionImpl::incarnation): adopted again after a
  // reconnect, so they stay tied to this client.
  std::map<uint64_t, uint64_t> ownedSessions;
  // How long a lost connection is tried again ($SQUALL_RECONNECT_TIMEOUT
  // seconds, default 60; 0: never).
  double reconnectSeconds = 60;
  std::map<std::string, std::pair<kj::Own<RpcClient>, wire::DataService::Client>> dataServices;
  // Which connection to each address is the current one: bumped with
  // every connection made (calls sent on one go down with it).
  std::map<std::string, uint64_t> dataConnection;
  uint64_t dataConnections = 0;
  // Each data connection's end, watched: one that breaks (a reset, the
  // governor gone) is dropped from dataServices, so that the next call
  // there connects anew instead of going into the dead one.
  struct DataWatchErrors final : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}
  };
  DataWatchErrors dataWatchErrors;
  kj::Own<kj::TaskSet> dataWatches;

  ClientImpl();
  ~ClientImpl();

  kj::WaitScope& waitScope() { return *loop.waitScope; }

  wire::ClientService::Client& svc() {
    KJ_IF_MAYBE(s, service) { return *s; }
    throw Error("not connected");
  }

  // Runs `body` and turns KJ exceptions into squall::Error.
  template <typename Body>
  auto guard(Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const kj::Exception& e) {
      throw Error(describe(e));
    }
  }

  // As guard(), for calls that may be made again: when the connection is
  // lost (the server restarted, the network failed) it is made again, this
  // client's sessions are re-attached, and `body` runs again.
  template <typename Body>
  auto retrying(Body&& body) -> decltype(body()) {
    for (;;) {
      try {
        return body();
      } catch (const kj::Exception& e) {
        if (e.getType() != kj::Exception::Type::DISCONNECTED) throw Error(describe(e));
        reconnect(e);
      }
    }
  }

  std::string describe(const kj::Exception& e);

  // Connects and registers; throws kj::Exception.
  void connect();

  // Connects again with backoff (100 ms doubling to 1 s) until the
  // reconnect timeout, then re-attaches owned sessions. An owned session
  // the server refuses to give back (closed meanwhile, or of another
  // incarnation: the server was started on another log) is owned no
  // longer; its next call hears why from the server. False when the time
  // ran out; throws Error for a refusal other than a lost connection.
  bool connectWithBackoff();

  // After `lost`: connects again or throws Error naming it.
  void reconnect(const kj::Exception& lost);

  wire::DataService::Client& dataService(const std::string& where);

  // Same-machine moves (local-data.cpp). Governors (by address) found not
  // to be on this machine: their bytes always take the connection.
  std::set<std::string> notLocal;
  // Whether bytes may move through files ($SQUALL_LOCAL_DATA, not "0").
  bool localData() const;
  // Opens a file the governor at `where` described, or notes that it is
  // not on this machine.
  kj::Maybe<kj::AutoCloseFd> openLocal(const std::string& where, wire::LocalFile::Reader file, int flags);
  // Reads blob `id` (`size` bytes, at least LOCAL_READ_MIN) held by the
  // governor at `where` from its file into `text` (appended) or `file`, or
  // maps the file into `mapped`; false when it must take the connection.
  bool readLocal(const std::string& where, wire::Id::Reader id, uint64_t size, std::string* text, FILE* file,
                 ObjectBytes* mapped = nullptr);
  // The data service on `connection` (DataBootstrap.open with the token).
  wire::DataService::Client openData(RpcClient& connection);

  // ClientOptions::whileBlocked and aroundWait (may be empty).
  std::function<void()> whileBlocked;
  std::function<void(bool)> aroundWait;

  // When set, a block() still waiting then throws Timeout (a wait given a
  // timeout: DeadlineScope). The promise is dropped, which cancels it.
  kj::Maybe<kj::TimePoint> deadline;

  // promise.wait(), but with whileBlocked set, in slices of BLOCK_SLICE with
  // a call of it between them, and with a deadline, no longer than that;
  // what it throws drops the promise (which cancels the request) and
  // propagates.
  template <typename T>
  T block(kj::Promise<T>&& promise) {
    if (!whileBlocked && deadline == nullptr) return promise.wait(waitScope());
    std::optional<T> result;
    auto answered = promise.then([&result](T&& value) { result.emplace(kj::mv(value)); }).fork();
    blockSliced(answered);
    return kj::mv(*result);
  }
  void block(kj::Promise<void>&& promise) {
    if (!whileBlocked && deadline == nullptr) return promise.wait(waitScope());
    auto answered = promise.fork();
    blockSliced(answered);
  }
  // Waits for `answered`, calling whileBlocked every BLOCK_SLICE (if set)
  // and throwing Timeout at the deadline (if set).
  void blockSliced(kj::ForkedPromise<void>& answered);
  static constexpr kj::Duration BLOCK_SLICE = 100 * kj::MILLISECONDS;
};

// Bounds the client's blocking calls by `timeout` (none: unchanged) for
// its life; an enclosing scope's earlier deadline stays.
class DeadlineScope {
 public:
  DeadlineScope(ClientImpl& client, WaitTimeout timeout);
  ~DeadlineScope();
  KJ_DISALLOW_COPY(DeadlineScope);

 private:
  ClientImpl& client;
  kj::Maybe<kj::TimePoint> saved;
};

// The TaskFailed that wait() throws for the failure `f`.
TaskFailed taskFailed(wire::Failure::Reader f);

struct LocalObject {
  uint64_t n = 0;
  ObjectKind kind = ObjectKind::BLOB;
  bool keep = false;
  bool constant = false;
  std::string label;
  std::string contentType;
  std::string data;
  // A blob constant read from this file at submit (a big fileBlob): sent in
  // pieces, never held whole. Empty: its bytes are `data`.
  std::string path;
  uint64_t fileSize = 0;
  // Once uploaded to a governor (SessionImpl::uploadConstants): its name
  // and data address, its size and the xxh3-64 of the bytes (which
  // `data` no longer needs to hold).
  std::string placedOn;
  std::string placedAddress;
  uint64_t placedSize = 0;
  uint64_t placedHash = 0;
  uint64_t size() const { return !placedOn.empty() ? placedSize : path.empty() ? data.size() : fileSize; }
};

struct LocalTask {
  uint64_t n = 0;
  enum class Type { CONCAT, SLEEP, EXECUTE, MAKE_DIR, SLICE_DIR, LOAD, LOAD_DIR, STORE, CALL, ACTOR, ACTOR_CALL } type =
      Type::CONCAT;
  std::string name;
  std::optional<uint32_t> cpus;  // unset: the default (1), see Program::cpus
  struct ResourceRequest {
    std::string name;
    uint64_t units = 0;  // RESOURCE_UNIT per item
    bool all = false;
  };
  std::vector<ResourceRequest> resources;
  std::vector<Program::Input> inputs;
  std::vector<uint64_t> outputs;
  uint64_t sleepMs = 0;
  std::vector<std::string> args;
  bool shell = false;
  int stdinIndex = -1;
  std::vector<std::optional<std::string>> outputMappings;
  std::vector<std::pair<std::string, std::string>> env;
  std::string path;  // slice_dir, load, load_dir, store
  bool overwrite = false;
  uint32_t retries = 0;
  bool allowFailure = false;
  bool waitForResources = false;
  uint64_t timeLimitMs = 0;
  uint64_t expectedMs = 0;
  std::string attributes;
  bool strictPipes = false;  // execute: earlyCloseIsError on its inputs
  // call: "executor/function" split, and its config bytes; actor:
  // "executor/Type" split, its constructor's config; actor call: the
  // method in `function`, its config.
  std::string executor;
  std::string function;
  std::string callConfig;
  uint32_t maxRestarts = 0;
  uint32_t maxCallRetries = 0;
  // A named actor's name (Actor::named).
  std::string actorName;
  // actor call: the actor's task.
  uint64_t actor = 0;
};

// Where a data connection to the governor at `where` goes: there, unless
// $SQUALL_TEST_DATA_ROUTE (a test's proxy) says otherwise.
std::string dataRoute(const std::string& where);

// An actor call sent to its actor's governor directly (docs/actors.md,
// "Calls that skip the server"): the server hears of it from the
// governor's report, or from recordDirect when this client names it to the
// server first.
struct DirectCall {
  uint64_t actor = 0;
  // The data address of the governor it was sent to, and the connection
  // (ClientImpl::dataConnection).
  std::string address;
  uint64_t connection = 0;
  std::vector<uint64_t> outputs;
  std::string name;
  // Its graph (a flat wire::Graph), for recordDirect.
  kj::Array<capnp::word> graph;
  // Resolves once answered, or once its fate is left to the server.
  kj::ForkedPromise<void> done = nullptr;
  bool answered = false;
  bool ok = false;
  std::string error;
  int exitStatus = -1;
  std::string stderrTail;
  // Its kept outputs, and the bytes of those its answer carried (small
  // blobs, governor's DIRECT_ANSWER_BYTES): a fetch of one is answered
  // here, neither recorded first nor read from the governor. Dropped with
  // unkeep, and with the call (pruneDirect).
  std::vector<uint64_t> kept;
  std::map<uint64_t, std::string> bytes;
  // The server has it (recordDirect answered; it may have had it before).
  bool recorded = false;
  // Its fate is the server's: the governor refused it (it is placed anew),
  // or the connection broke before the answer (it runs there, or is placed
  // anew if that governor is gone). Waited for there.
  bool viaServer = false;
  // Why the server refused to record it (it then knows nothing of it).
  std::string recordError;
  // The governor refused it, or did not say it had it once its
  // connection broke before the answer (heldCalls): recorded with no
  // governor (placed anew).
  bool refused = false;
  // Its connection broke before the answer, and the governor is being
  // asked whether it has it (SessionImpl::cutOff): `done` resolves once
  // its fate is left to the server.
  bool asking = false;
};

// False when $SQUALL_DIRECT_CALLS is 0, no or off: every actor call then
// goes through the server (e.g. where clients cannot reach governors).
bool directCallsAllowed();

struct SessionImpl {
  ClientImpl& client;
  uint64_t id;
  // The incarnation of the server that gave out `id` (newSession, or
  // getState when attached): every call naming the session carries it, so
  // that a server started on another log, which may have given `id` to
  // another session, refuses the call rather than act on that one.
  uint64_t incarnation;
  bool closed = false;
  // False for attached sessions: they stay open when this handle goes.
  bool owned = true;
  // A handle on another session's named actor (Session::getActor): its
  // calls are that session's tasks.
  bool foreignHandle = false;
  // Ids this handle may give: [nextN, blockEnd); more are reserved on the
  // server when they run out (the creator starts with [1, 2^20)).
  uint64_t nextN = 1;
  uint64_t blockEnd = FIRST_ID_BLOCK;
  static constexpr uint64_t FIRST_ID_BLOCK = uint64_t(1) << 20;
  static constexpr uint64_t ID_BLOCK = uint64_t(1) << 20;
  // The task whose function submits through this handle (docs/nested.md);
  // 0 for a client's own.
  uint64_t parent = 0;
  // With a parent: the tasks submitted through it (what waitAll waits for).
  std::vector<uint64_t> submittedTasks;
  uint64_t takeId();
  void cancelTask(uint64_t n);
  // Built since the last submit.
  std::vector<LocalObject> objects;
  std::vector<LocalTask> tasks;
  // The types of the actors made here ("executor/Type"), naming their calls.
  std::unordered_map<uint64_t, std::string> actorTypes;
  // Handles on sessions of named actors reached from here (getActor), by
  // session id: their calls are tasks of the actor's session, submitted
  // with this one's.
  std::map<uint64_t, std::unique_ptr<SessionImpl>> foreign;
  std::unordered_map<uint64_t, size_t> objectIndex;
  std::unordered_map<uint64_t, size_t> taskIndex;
  // Outputs of every task built in this session, and kinds of its objects.
  std::unordered_map<uint64_t, std::vector<uint64_t>> outputsOf;
  std::unordered_map<uint64_t, ObjectKind> kinds;

  SessionImpl(ClientImpl& client, uint64_t id, uint64_t incarnation)
      : client(client), id(id), incarnation(incarnation) {}

  // Names this session in a request's params: its id and the incarnation
  // the id is of (every call naming a session carries both).
  template <typename Params>
  void name(Params&& params) const {
    params.setSession(id);
    params.setIncarnation(incarnation);
  }

  // Direct actor calls (DirectCall), by task, in the order they were made.
  std::map<uint64_t, DirectCall> direct;
  // Of those, the ones left to the server and not recorded yet (it was
  // unreachable when they were to be): recorded by the next call of the
  // session that can block (settleDirect).
  std::set<uint64_t> unsettled;
  // Their outputs: object -> task.
  std::unordered_map<uint64_t, uint64_t> directOutputs;
  // Where actors run (locateActor): the governor's data address, empty
  // when unknown (then asked again after `askAgain`).
  struct ActorPlace {
    std::string address;
    kj::TimePoint askAgain = kj::origin<kj::TimePoint>();
    // Its type's methods there and the outputs each makes: a call that
    // does not fit goes through the server, which says why at submit.
    std::map<std::string, uint32_t> methods;
  };
  std::unordered_map<uint64_t, ActorPlace> actorPlaces;
  // Calls made through the server, by actor, that this handle has not seen
  // end: while there are, that actor's calls go through the server too, so
  // that they run in the order made.
  std::unordered_map<uint64_t, std::set<uint64_t>> serverCalls;
  // The server or a governor does not know direct calls, or
  // $SQUALL_DIRECT_CALLS says not to make them: none are made.
  bool directOff = !directCallsAllowed();
  // Calls made through the server and the ids that name them (the task,
  // its outputs) -> (actor, task), for serverCalls.
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> serverCallIds;
  // Records of direct calls sent from answers' continuations (declared
  // after what they use, `direct` above all, so destroyed first).
  struct DirectErrors final : public kj::TaskSet::ErrorHandler {
    // Each record handles its own failure (leaveToServer).
    void taskFailed(kj::Exception&&) override {}
  };
  DirectErrors directErrors;
  kj::Own<kj::TaskSet> directTasks;
  // What its tasks print (Session::watchOutput, output.cpp): the sink, the
  // number of the next chunk it has not had, and the wait for more (a
  // chain of ClientService.watchOutput calls, while `watchingOutput`).
  std::function<void(const std::vector<TaskOutput>&)> outputSink;
  uint64_t outputSince = 0;
  bool watchingOutput = false;
  // The watch ended with its connection: the next call of the session
  // starts it again (once connected; from where it was).
  bool outputWatchLost = false;
  kj::Promise<void> outputWatch = nullptr;
  kj::Promise<void> watchOutputFrom();
  // Starts the chain of watchOutput calls; throws kj::Exception when not
  // connected.
  void startOutputWatch();
  void watchOutputAgain();
  // Hands the sink the chunks of a watchOutput answer it has not had.
  void deliverOutput(wire::ClientService::WatchOutputResults::Reader answer);
  // By data connection (ClientImpl::dataConnection) that broke with direct
  // calls unanswered: resolves once the governor said which it has and
  // each was left to the server (cutOff). Kept for the session's life
  // (one per broken connection).
  std::map<uint64_t, kj::ForkedPromise<void>> askingHeld;
  // Direct calls `asking` (DirectCall::asking).
  size_t askingCalls = 0;

  // Sends what was built to the actors' governors directly when it may
  // (every task an actor call on a placed actor with no call of this
  // handle on it through the server, reading constants built with it);
  // false when it must go through the server (nothing sent).
  bool sendDirect();
  // Before what was built goes through the server: its inputs made by
  // direct calls are recorded, and calls on an actor wait for this
  // handle's direct calls on it to be answered (their order).
  void beforeServerSubmit();
  // Uploads the submit's big blob constants to governors the server
  // chooses (ClientService.placeData), one after the other; each then
  // carries its place instead of its bytes. Throws Error naming the
  // governor when one fails.
  void uploadConstants();
  // Uploads `object` (`size` bytes) to the governor at `address`: its
  // bytes are `parts`, or (null) its data or file.
  void upload(LocalObject& object, const std::string& governor, const std::string& address, uint64_t size,
              const std::vector<std::string_view>* parts = nullptr);
  // Places and uploads a constant of `size` bytes made of `parts` at once.
  void uploadPieces(LocalObject& object, const std::vector<std::string_view>& parts, uint64_t size);
  // Where the server places constants of these sizes: (governor, address).
  std::vector<std::pair<std::string, std::string>> placeData(const std::vector<uint64_t>& sizes);
  // Best effort, after a refused submit: the governors drop its uploads.
  void discardUploads();
  // Where `actor` runs (its address empty when unknown).
  const ActorPlace& actorPlace(uint64_t actor);
  // The direct call making `id` (a task or one of its outputs), if any.
  DirectCall* directOf(uint64_t id, uint64_t* task = nullptr);
  // The bytes of object `id` that its direct call's answer carried (that
  // call answered ok), or null.
  const std::string* answeredBytes(uint64_t id);
  // Records (recordDirect) the direct calls named by `ids` (tasks or
  // objects; all when `all`) that the server may not know, so that a
  // request naming them finds them.
  void recordNamed(const std::vector<uint64_t>& ids, bool all = false);
  // Records calls not recorded yet: each at its governor, or (refused)
  // placed anew.
  void record(const std::vector<uint64_t>& tasks);
  // A recordDirect of `ns` (one address: where they are recorded as
  // running, empty for none).
  capnp::Request<wire::ClientService::RecordDirectParams, wire::ClientService::RecordDirectResults> recordRequest(
      const std::string& address, const std::vector<uint64_t>& ns);
  // Records the calls left unsettled.
  void settleDirect();
  // What answered ones this handle no longer needs to keep: recorded,
  // then forgotten (waits for them go to the server).
  void pruneDirect();
  // Sends one call (sendDirect).
  void sendOne(const LocalTask& task, const std::string& address,
               const std::unordered_map<uint64_t, const LocalObject*>& objects);
  // Its answer came, or its connection broke first.
  void answered(uint64_t n, capnp::Response<wire::DataService::CallActorResults>&& response);
  // Calls on a connection that broke: those the governor says it has
  // (heldCalls, on a new connection) are recorded as running there, the
  // others placed anew; resolves once each is left to the server.
  kj::Promise<void> cutOff(uint64_t n, kj::Exception&& e);
  // Which of direct calls `ns` the governor at `address` has (none when
  // it cannot be asked: gone, unreachable within ASK_HELD_TIMEOUT).
  kj::Promise<std::set<uint64_t>> heldAt(const std::string& address, const std::vector<uint64_t>& ns);
  // Their fate is the server's from now (DirectCall::viaServer): recorded
  // at once, together and in this order, if the server is reachable, else
  // later (settleDirect).
  void leaveToServer(const std::vector<uint64_t>& ns);
  // Calls made through the server (the actor calls among `made`), one
  // such call, and their end seen (ids waited for, or every one).
  void madeViaServer(const std::vector<LocalTask>& made);
  void viaServerCall(uint64_t actor, uint64_t task, const std::vector<uint64_t>& outputs);
  void sawEnd(const std::vector<uint64_t>& ids, bool all);
  // The part of a wait that direct calls answer: `ids` less what it
  // waits for here; returns the ids it leaves to the server. For a wait
  // for any with direct calls still out, `race` is the first of their
  // answers, for the caller to race the server's waitSome against.
  std::vector<uint64_t> waitDirect(const std::vector<uint64_t>& ids, bool any, std::vector<uint64_t>* finished,
                                   bool& done, kj::Maybe<kj::Promise<void>>& race);

  LocalObject& pendingObject(uint64_t n) {
    auto it = objectIndex.find(n);
    if (it == objectIndex.end()) {
      throw Error("object " + std::to_string(n) + " was already submitted; set it up before submit");
    }
    return objects[it->second];
  }

  LocalTask& pendingTask(uint64_t n) {
    auto it = taskIndex.find(n);
    if (it == taskIndex.end()) {
      throw Error("task " + std::to_string(n) + " was already submitted; set it up before submit");
    }
    return tasks[it->second];
  }

  LocalObject& newObject(ObjectKind kind = ObjectKind::BLOB) {
    LocalObject object;
    object.n = takeId();
    object.kind = kind;
    return addObject(std::move(object));
  }

  LocalObject& addObject(LocalObject object) {
    kinds[object.n] = object.kind;
    objectIndex[object.n] = objects.size();
    objects.push_back(std::move(object));
    return objects.back();
  }

  LocalTask& newTask(LocalTask::Type type, const std::vector<ObjectKind>& outputKinds) {
    checkOpen();
    LocalTask task;
    task.n = takeId();
    task.type = type;
    for (auto kind : outputKinds) task.outputs.push_back(newObject(kind).n);
    outputsOf[task.n] = task.outputs;
    taskIndex[task.n] = tasks.size();
    tasks.push_back(std::move(task));
    return tasks.back();
  }

  void checkOpen() {
    if (closed) throw Error("session " + std::to_string(id) + " is closed");
    if (outputWatchLost) watchOutputAgain();
  }

  // Runs a call that needs the session to go on (submit, fetch, unkeep): an
  // error it meets because the session has failed is thrown as the
  // TaskFailed that wait() throws, naming the task that failed it. The
  // session's state is asked only when the call has failed.
  template <typename Body>
  auto whileOpen(Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const TaskFailed&) {
      throw;
    } catch (const Error&) {
      auto state = client.guard([&]() {
        auto req = client.svc().getStateRequest();
        name(req);
        return req.send().wait(client.waitScope());
      });
      if (state.getState().getState() == wire::SessionState::State::FAILED) {
        throw taskFailed(state.getState().getFailure());
      }
      throw;
    }
  }

  void checkInput(const DataObject& object, SessionImpl* owner) {
    if (owner != this) {
      throw Error("object " + std::to_string(object.id()) + " belongs to another session");
    }
  }

  // With `waitFor`, a graph that fits one message is also waited for in
  // the same call (submitGraph's waitFor): true when it was (a task that
  // failed throws TaskFailed, as wait() does); false when the caller must
  // still wait (a bigger graph, an older server, a submit sent again after
  // a lost connection).
  bool submit(const std::vector<uint64_t>* waitFor = nullptr);
  void wait(const std::vector<uint64_t>& ids, bool any, std::vector<uint64_t>* finished);
  // `expect`: when set, the object must be of this kind.
  void fetch(uint64_t n, std::string* text, FILE* file, std::optional<ObjectKind> expect = {});
  // The bytes of each, with every request in flight at once; `map`: big
  // blobs on this machine as mappings (ObjectBytes).
  std::vector<ObjectBytes> fetchAll(const std::vector<uint64_t>& ids, bool map);
  std::vector<ObjectInfo> objectInfos(const std::vector<uint64_t>& ids);
  // Also records the object's kind.
  ObjectInfo objectInfo(wire::ObjectStatus::Reader status);
  std::vector<TaskInfo> taskInfos(const std::vector<uint64_t>& ids,
                                  const std::vector<std::string>& states, uint32_t limit);
};

// A constant this big goes with its submit's message; bigger ones follow
// in pieces (Submission.appendData).
constexpr size_t INLINE_CONSTANT_BYTES = 1 << 20;
// A blob constant bigger than INLINE_CONSTANT_BYTES skips the server: it is
// uploaded to a governor (DataService.upload) in pieces of this size.
constexpr size_t UPLOAD_CHUNK_BYTES = 4 << 20;
// How often a client writing a governor's file on its machine says how far
// it got (UploadSink.wrote).
constexpr uint64_t LOCAL_PROGRESS_BYTES = 16 << 20;
// Blobs this big or bigger are read from the governor's file when it is on
// this machine (readLocal); smaller ones are not worth the extra call.
constexpr uint64_t LOCAL_READ_MIN = 1 << 20;

// Writes `size` bytes at `offset` of a governor's file (local-data.cpp);
// throws Error naming why not.
void writeLocal(int fd, const kj::byte* bytes, size_t size, uint64_t offset);

void setId(wire::Id::Builder b, uint64_t session, uint64_t n);
void fillTask(wire::TaskSpec::Builder out, const LocalTask& task, uint64_t session, uint64_t parent);
// A constant's bytes go only `withData`.
void fillObject(wire::ObjectSpec::Builder out, const LocalObject& o, uint64_t session, bool withData);

// A session's state as the client API gives it.
SessionState toState(wire::SessionState::Reader s);

}  // namespace client
}  // namespace squall
