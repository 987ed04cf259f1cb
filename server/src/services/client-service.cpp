#include "services.h"

#include "explain.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <unordered_set>
#include <kj/debug.h>
#include <squall/proto/errors.h>
#include <squall/proto/resource-amounts.h>
#include <squall/proto/rpc.h>
#include <squall/proto/spec-names.h>
#include <squall/proto/token.h>

#include "client-service.h"
#include "submission.h"

namespace squall {

namespace {

// How long a watchOutput waits for output before it answers with none.
constexpr kj::Duration OUTPUT_WAIT = 10 * kj::SECONDS;

using TaskInfoState = wire::TaskInfo::State;
// TaskInfo states by TaskNode::State.
constexpr TaskInfoState TASK_STATES[] = {TaskInfoState::WAITING,  TaskInfoState::READY,
                                         TaskInfoState::RUNNING,  TaskInfoState::FINISHED,
                                         TaskInfoState::FAILED,   TaskInfoState::CANCELLED,
                                         TaskInfoState::SKIPPED};

void fillFailure(wire::Failure::Builder out, const Session& session) {
  out.setMessage(session.state == Session::State::CLOSED ? "session was closed"
                                                         : session.failureMessage);
  out.setTask(session.failedTask);
  out.setTaskName(session.failedTaskName);
  out.setExitStatus(session.failedExitStatus);
  out.setStderrTail(session.failedStderrTail);
}

// Why `task` ended without making its outputs: it failed (allowed to) or
// was skipped.
void fillTaskFailure(wire::Failure::Builder out, const TaskNode& task) {
  out.setMessage(kj::str("task ", task.id.n, task.spec.getName().size() ? kj::str(" (", task.spec.getName(), ")") : kj::str(),
                         task.state == TaskNode::State::SKIPPED ? " was " : " failed: ", task.error));
  out.setTask(task.id.n);
  out.setTaskName(task.spec.getName());
  out.setExitStatus(task.exitStatus);
  out.setStderrTail(task.stderrTail);
}

class ClientServiceImpl final : public wire::ClientService::Server {
 public:
  ClientServiceImpl(ServerContext& context, kj::String peer)
      : context(context), running(context.running), peer(kj::mv(peer)) {}

  // The client's connection is gone: its sessions go too.
  ~ClientServiceImpl() noexcept(false) {
    if (!*running) return;
    context.logger.info("event=client-gone peer={}", peer.cStr());
    context.sessions.closeOwnedBy(this);
    context.dispatcher.kick();
  }

  // The open session `id`; one that is closed (and kept in the history)
  // is named as such rather than as unknown.
  Session& openSession(uint64_t id) {
    KJ_IF_MAYBE(session, context.sessions.find(id)) { return *session; }
    KJ_IF_MAYBE(kept, context.history.find(id)) {
      // A session that failed says why (e.g. a named actor's session,
      // closed when its actor failed, reached by a call of another).
      SQUALL_FAIL("session ", id, " is closed",
                  kept->getFailed() ? kj::str(" (it failed: ", kept->getFailure(), ")") : kj::str());
    }
    return context.sessions.get(id);
  }

  // The id of the session a call names, once its reference is found to be
  // this incarnation's (wire::ClientService): a server started on another
  // log numbers its sessions from 1 again, and a client of the one before
  // must hear that its session is gone, not reach another's of the same id.
  // Checked before the id is looked at.
  template <typename Params>
  uint64_t sessionOf(Params params) {
    auto id = params.getSession();
    auto mine = context.sessions.incarnation();
    if (params.getIncarnation() != mine) {
      context.logger.warn("event=stale-session-refused session={} incarnation={:016x} server_incarnation={:016x} "
                          "peer={}", id, params.getIncarnation(), mine, peer.cStr());
      SQUALL_FAIL("session ", id, " is gone: the reference to it is of server incarnation ",
                  incarnationText(params.getIncarnation()), " and this server is incarnation ", incarnationText(mine),
                  " (started again on another session log, or another server at that address); a session ", id,
                  " here is not that session");
    }
    return id;
  }

  // 16 hex digits, as the server's log writes it.
  static kj::String incarnationText(uint64_t incarnation) {
    if (incarnation == 0) return kj::str("(none)");
    char text[17];
    snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(incarnation));
    return kj::str(text);
  }

  kj::Promise<void> newSession(NewSessionContext call) override {
    auto params = call.getParams();
    auto& session = context.sessions.open(params.getName().cStr(), this, params.getPersistent());
    call.getResults().setSession(session.id);
    call.getResults().setIncarnation(context.sessions.incarnation());
    return kj::READY_NOW;
  }

  kj::Promise<void> adoptSession(AdoptSessionContext call) override {
    auto id = sessionOf(call.getParams());
    context.sessions.adopt(openSession(id), this);
    context.logger.info("event=session-adopted session={} peer={}", id, peer.cStr());
    return kj::READY_NOW;
  }

  kj::Promise<void> closeSession(CloseSessionContext call) override {
    auto id = sessionOf(call.getParams());
    // Closed already (a client sending it again after a reconnect): done.
    if (context.sessions.find(id) == nullptr && context.history.find(id) != nullptr) {
      return kj::READY_NOW;
    }
    context.sessions.get(id);
    context.sessions.close(id);
    context.output.forget(id);
    // Answered once the log has what is kept of it (the history record goes
    // with the next commit), so that a client that saw it close finds it
    // after a restart too. A failing log is the Dispatcher's to report; the
    // session is closed either way.
    return context.dispatcher.durable().catch_([](kj::Exception&&) {});
  }

  kj::Promise<void> submit(SubmitContext call) override {
    call.getResults().setSubmission(newSubmission(sessionOf(call.getParams())));
    return kj::READY_NOW;
  }

  kj::Promise<void> submitGraph(SubmitGraphContext call) override {
    auto params = call.getParams();
    auto submission = newSubmission(sessionOf(params));
    // The chunk as submit() would have had it: the log keeps chunks in
    // that form, and replay reads them so. Built once, kept as built.
    auto chunk = std::make_unique<capnp::MallocMessageBuilder>(params.totalSize().wordCount + 16);
    auto root = chunk->initRoot<wire::Submission::AddParams>();
    root.setObjects(params.getObjects());
    root.setTasks(params.getTasks());
    submission->addChunk(std::move(chunk));
    auto& target = *submission;
    auto id = params.getSession();
    bool waits = params.getWaitFor().size() > 0;
    // Checked before anything is applied: a bad wait refuses the submit.
    if (waits) checkCombinedWait(id, params);
    auto applied = target.commitThen(SubmissionImpl::countsInto(call)).attach(kj::mv(submission));
    if (!waits) return applied;
    return applied.then([this, id, call]() mutable {
      // Applied and durable: from here the call is a wait, and like one it
      // ends if its caller goes (not before: a submit cut off between its
      // log write and its apply would be replayed without having been
      // applied). Whatever ends the wait is told in `waited`, never thrown:
      // a thrown error says the submit failed.
      call.allowCancellation();
      return kj::evalNow([&]() {
               return context.sessions.wait(openSession(id), call.getParams().getWaitFor(), false);
             })
          .then([this, id, call]() mutable {
                  fillWaitResult(id, call.getResults().initWaited(), call.getParams().getWaitFor());
                },
                [call](kj::Exception&& e) mutable {
                  call.getResults().initWaited().initFailed().setMessage(e.getDescription());
                });
    });
  }

  kj::Promise<void> locateActor(LocateActorContext call) override {
    auto params = call.getParams();
    auto& session = openSession(sessionOf(params));
    auto it = session.tasks.find(params.getActor());
    SQUALL_REQUIRE(it != session.tasks.end() && it->second.isActor, "task ", params.getActor(), " of session ",
                   params.getSession(), " is not an actor");
    auto& task = it->second;
    // Only once its governor said it holds it (ActorNode.heldBy): before,
    // a call sent there could arrive ahead of the actor.
    auto actor = session.actors.find(params.getActor());
    if (task.state == TaskNode::State::ASSIGNED && actor != session.actors.end() &&
        actor->second.heldBy == task.governor) {
      KJ_IF_MAYBE(governor, context.governors.find(task.governor)) {
        call.getResults().setAddress(governor->dataAddress);
        auto prefix = kj::str(actorTypeName(task.spec.getConfig().getActor()), ".");
        std::vector<std::pair<std::string, uint32_t>> methods;
        for (auto& [name, outputs] : governor->functions) {
          if (name.rfind(prefix.cStr(), 0) == 0) methods.emplace_back(name.substr(prefix.size()), outputs.size());
        }
        auto list = call.getResults().initMethods(methods.size());
        for (uint i = 0; i < list.size(); i++) {
          list[i].setName(methods[i].first);
          list[i].setOutputs(methods[i].second);
        }
      }
    }
    return kj::READY_NOW;
  }

  // Governors in turn, so that big constants spread over the cluster (the
  // governor itself refuses one its disk cannot hold).
  // TODO(perf): prefer governors with the most free store once they report it.
  kj::Promise<void> placeData(PlaceDataContext call) override {
    auto params = call.getParams();
    auto& session = openSession(sessionOf(params));
    SQUALL_REQUIRE(session.state == Session::State::OPEN, "session ", session.id, " has failed: ",
                   session.failureMessage);
    auto sizes = params.getSizes();
    SQUALL_REQUIRE(sizes.size() <= context.limits.submitObjects, "placeData: ", sizes.size(),
                   " constants, more than a submit may have (", context.limits.submitObjects, ")");
    std::vector<const GovernorState*> governors;
    for (auto& [gid, g] : context.governors.all()) governors.push_back(&g);
    SQUALL_REQUIRE(!governors.empty(), "no governor is connected to hold constants of session ", session.id);
    auto places = call.getResults().initPlaces(sizes.size());
    for (uint i = 0; i < sizes.size(); i++) {
      auto* governor = governors[context.nextPlace++ % governors.size()];
      places[i].setGovernor(governor->name);
      places[i].setAddress(governor->dataAddress);
    }
    context.logger.debug("event=place-data session={} constants={}", session.id, sizes.size());
    return kj::READY_NOW;
  }

  // What the session's tasks printed (SessionOutput); a wait of at most
  // OUTPUT_WAIT when nothing new has come.
  kj::Promise<void> watchOutput(WatchOutputContext call) override {
    auto params = call.getParams();
    uint64_t session = openSession(sessionOf(params)).id;
    uint64_t since = params.getSince();
    auto fill = [this, call, session, since]() mutable {
      context.output.fill(session, since, call.getResults());
    };
    if (!params.getWait() || context.timer == nullptr) {
      fill();
      return kj::READY_NOW;
    }
    return context.output.whenPast(session, since, *context.timer, OUTPUT_WAIT).then(kj::mv(fill));
  }

  kj::Promise<void> recordDirect(RecordDirectContext call) override {
    auto params = call.getParams();
    openSession(sessionOf(params));
    GovernorId governor = 0;
    for (auto& [gid, g] : context.governors.all()) {
      if (params.getAddress().size() > 0 && g.dataAddress == params.getAddress().cStr()) governor = gid;
    }
    auto calls = params.getCalls();
    auto graphs = kj::heapArrayBuilder<const wire::Graph::Reader>(calls.size());
    for (auto graph : calls) graphs.add(graph);
    auto list = graphs.finish();
    return recordDirectCalls(context, params.getSession(), list, governor).attach(kj::mv(list));
  }

  // A combined submit and wait names ids of its own graph or of the
  // session's earlier submits, as many as a wait may.
  void checkCombinedWait(uint64_t id, wire::ClientService::SubmitGraphParams::Reader params) {
    auto ids = params.getWaitFor();
    checkWaitIds(ids);
    auto& session = openSession(id);
    std::unordered_set<uint64_t> graph;
    for (auto object : params.getObjects()) graph.insert(object.getId().getN());
    for (auto task : params.getTasks()) graph.insert(task.getId().getN());
    for (auto n : ids) {
      SQUALL_REQUIRE(graph.count(n) != 0 || session.objects.count(n) != 0 || session.tasks.count(n) != 0,
                     "wait: unknown task or object ", n);
    }
  }

  kj::Own<SubmissionImpl> newSubmission(uint64_t id) {
    auto& session = openSession(id);
    SQUALL_REQUIRE(session.state == Session::State::OPEN, "session ", id, " has failed: ", session.failureMessage);
    SQUALL_REQUIRE(*openSubmits < context.limits.clientSubmits, "this client has ", *openSubmits,
                   " submits open already (limit ", context.limits.named(context.limits.clientSubmits),
                   "); commit or drop one first");
    ++*openSubmits;
    return kj::heap<SubmissionImpl>(context, id, openSubmits);
  }

  // wait, waitSome and fetch may take as long as the tasks they wait for,
  // or for ever (an actor's call behind one that never ends): each allows
  // cancellation, so that a client that goes takes its waits with it.
  // Cap'n Proto 0.9 otherwise runs an incoming call to its end, and the
  // call holds this service, whose end closes the client's sessions.
  kj::Promise<void> wait(WaitContext call) override {
    call.allowCancellation();
    auto params = call.getParams();
    auto id = sessionOf(params);
    checkWaitIds(params.getIds());
    auto& session = openSession(id);
    return context.sessions.wait(session, params.getIds(), false).then([this, id, call]() mutable {
      fillWaitResult(id, call.getResults().initResult(), call.getParams().getIds());
    });
  }

  kj::Promise<void> waitSome(WaitSomeContext call) override {
    call.allowCancellation();
    auto params = call.getParams();
    auto id = sessionOf(params);
    checkWaitIds(params.getIds());
    auto& session = openSession(id);
    return context.sessions.wait(session, params.getIds(), true).then([this, id, call]() mutable {
      auto results = call.getResults();
      fillWaitResult(id, results.initResult(), call.getParams().getIds());
      std::vector<uint64_t> finished;
      KJ_IF_MAYBE(s, context.sessions.find(id)) {
        for (auto n : call.getParams().getIds()) {
          auto oit = s->objects.find(n);
          if (oit != s->objects.end()) {
            if (oit->second.state != ObjectNode::State::UNFINISHED) finished.push_back(n);
            continue;
          }
          auto tit = s->tasks.find(n);
          if (tit != s->tasks.end() && tit->second.done()) finished.push_back(n);
        }
      }
      auto list = results.initFinished(finished.size());
      for (uint i = 0; i < finished.size(); i++) list.set(i, finished[i]);
    });
  }

  kj::Promise<void> fetch(FetchContext call) override {
    call.allowCancellation();
    auto params = call.getParams();
    auto id = sessionOf(params);
    auto n = params.getObject();
    auto& session = openSession(id);
    auto it = session.objects.find(n);
    SQUALL_REQUIRE(it != session.objects.end(), "fetch: unknown object ", n);
    // Or needed still: a task that reads it may fetch it (a reference
    // passed inside its arguments, docs/ray.md).
    SQUALL_REQUIRE(it->second.keep || it->second.unfinishedConsumers > 0, "fetch: object ", n,
                   " is not kept (mark it keep before submitting to fetch it)");
    // After a restart, the governors that held it get their while to come
    // back first (the object is made again if its holder does not).
    return context.dispatcher.whenPlacing()
        .then([this, id, n]() {
          capnp::MallocMessageBuilder scratch;
          auto ids = scratch.initRoot<capnp::List<uint64_t>>(1);
          ids.set(0, n);
          return context.sessions.wait(context.sessions.get(id), ids.asReader(), false);
        })
        .then([this, id, n, call]() mutable {
          auto& session = context.sessions.get(id);
          auto& object = session.objects.at(n);
          auto location = call.getResults().initLocation();
          if (object.state != ObjectNode::State::FINISHED) {
            SQUALL_REQUIRE(session.state == Session::State::OPEN, "fetch: object ", n,
                         " will not be made: ", session.failureMessage);
            if (object.state == ObjectNode::State::FAILED && object.producer != nullptr) {
              // Its task's failure, as a wait for it would say.
              fillTaskFailure(location.initFailed(), *object.producer);
              return;
            }
            SQUALL_FAIL("fetch: object ", n, " was removed");
          }
          object.id.to(location.initId());
          // A kept stream that has ended is stored bytes: a blob.
          location.setKind(object.kind == wire::ObjectKind::STREAM ? wire::ObjectKind::BLOB : object.kind);
          location.setSize(object.size);
          if (object.bytesHere()) {
            location.setData(kj::arrayPtr(object.data.data(), object.data.size()));
            return;
          }
          for (auto g : object.locations) {
            KJ_IF_MAYBE(governor, context.governors.find(g)) {
              location.setGovernor(governor->dataAddress);
              return;
            }
          }
          SQUALL_FAIL("fetch: object ", n, " is held by no connected governor");
        });
  }

  kj::Promise<void> unkeep(UnkeepContext call) override {
    auto params = call.getParams();
    auto& session = openSession(sessionOf(params));
    SQUALL_REQUIRE(session.state == Session::State::OPEN, "unkeep: session ", session.id,
                   " has failed: ", session.failureMessage);
    context.sessions.unkeep(session, params.getObjects());
    // Answered once logged, so that a restart does not keep them again.
    return context.dispatcher.durable();
  }

  kj::Promise<void> cancel(CancelContext call) override {
    auto& session = openSession(sessionOf(call.getParams()));
    context.sessions.fail(session, "cancelled by the client");
    context.dispatcher.kick();
    return kj::READY_NOW;
  }

  kj::Promise<void> killActor(KillActorContext call) override {
    auto params = call.getParams();
    auto& session = openSession(sessionOf(params));
    context.sessions.killActor(session, params.getActor());
    context.dispatcher.kick();
    return kj::READY_NOW;
  }

  kj::Promise<void> cancelTask(CancelTaskContext call) override {
    auto params = call.getParams();
    auto& session = openSession(sessionOf(params));
    context.sessions.cancelTask(session, params.getTask());
    context.dispatcher.kick();
    return kj::READY_NOW;
  }

  kj::Promise<void> findActor(FindActorContext call) override {
    auto name = call.getParams().getName();
    auto& named = context.sessions.namedActors();
    auto it = named.find(name.cStr());
    if (it == named.end()) {
      auto* ended = context.sessions.namedActorEnd(name.cStr());
      SQUALL_FAIL("no live actor is named '", name, "'",
                  ended == nullptr ? kj::str() : kj::str(" (the last one, ", ended->c_str(), ")"));
    }
    auto& task = KJ_ASSERT_NONNULL(context.sessions.findTask(it->second));
    auto results = call.getResults();
    results.setSession(it->second.session);
    results.setActor(it->second.n);
    results.setType(task.function);
    return kj::READY_NOW;
  }

  kj::Promise<void> reserveIds(ReserveIdsContext call) override {
    auto params = call.getParams();
    auto& session = openSession(sessionOf(params));
    call.getResults().setFirst(context.sessions.reserveIds(session, params.getCount()));
    return kj::READY_NOW;
  }

  // Incarnation 0: the session with this id now (attaching by a typed
  // id); the answer says which incarnation to name it by from then on.
  kj::Promise<void> getState(GetStateContext call) override {
    auto params = call.getParams();
    auto id = params.getIncarnation() == 0 ? params.getSession() : sessionOf(params);
    if (context.sessions.find(id) == nullptr) {
      KJ_IF_MAYBE(kept, context.history.find(id)) {
        fillKeptState(call.getResults().initState(), *kept);
        call.getResults().getState().setIncarnation(context.sessions.incarnation());
        return kj::READY_NOW;
      }
    }
    fillState(call.getResults().initState(), context.sessions.get(id));
    call.getResults().getState().setIncarnation(context.sessions.incarnation());
    return kj::READY_NOW;
  }

  static int toNodeState(wire::TaskInfo::State s) {
    using W = wire::TaskInfo::State;
    using S = TaskNode::State;
    switch (s) {
      case W::WAITING: return static_cast<int>(S::WAITING);
      case W::READY: return static_cast<int>(S::READY);
      case W::RUNNING: return static_cast<int>(S::ASSIGNED);
      case W::FINISHED: return static_cast<int>(S::FINISHED);
      case W::FAILED: return static_cast<int>(S::FAILED);
      case W::CANCELLED: return static_cast<int>(S::CANCELLED);
      case W::SKIPPED: return static_cast<int>(S::SKIPPED);
    }
    return static_cast<int>(S::WAITING);
  }

  void fillTask(wire::TaskInfo::Builder out, const TaskNode& task) {
    out.setId(task.id.n);
    out.setName(task.spec.getName());
    out.setState(TASK_STATES[static_cast<int>(task.state)]);
    out.setGovernor(task.governorName);
    if (task.state == TaskNode::State::ASSIGNED) {
      // Running (or queued) there now.
      KJ_IF_MAYBE(governor, context.governors.find(task.governor)) { out.setGovernor(governor->name); }
    }
    out.setStartTimeUs(task.startTimeUs);
    out.setDurationUs(task.durationUs);
    out.setExitStatus(task.exitStatus);
    out.setError(task.error);
    out.setStdoutTail(task.stdoutTail);
    out.setStderrTail(task.stderrTail);
    out.setAttempt(task.attempt);
    out.setAttributes(task.spec.getAttributes());
    out.setType(taskTypeName(task.spec));
    auto inputs = out.initInputs(task.inputs.size());
    for (size_t i = 0; i < task.inputs.size(); i++) inputs.set(i, task.inputs[i]->id.n);
    auto outputs = out.initOutputs(task.outputs.size());
    for (size_t i = 0; i < task.outputs.size(); i++) fillObject(outputs[i], *task.outputs[i]);
  }

  void fillObject(wire::ObjectStatus::Builder out, const ObjectNode& object) {
    using W = wire::ObjectStatus::State;
    static const W STATES[] = {W::UNFINISHED, W::FINISHED, W::REMOVED, W::FAILED};
    out.setId(object.id.n);
    out.setKind(object.kind);
    out.setLabel(object.label);
    out.setContentType(object.contentType);
    out.setKeep(object.keep);
    out.setState(STATES[static_cast<int>(object.state)]);
    out.setSize(object.size);
    out.setHash(object.hash);
    out.setProducer(object.producer == nullptr ? 0 : object.producer->id.n);
    auto locations = out.initLocations(object.locations.size());
    for (size_t i = 0; i < object.locations.size(); i++) {
      KJ_IF_MAYBE(governor, context.governors.find(object.locations[i])) {
        locations.set(i, governor->name);
      } else {
        locations.set(i, kj::str("governor ", object.locations[i]));
      }
    }
  }

  // What is kept of a task of a closed session: no spec, inputs or
  // outputs; tails for the first failures only.
  static void fillKeptTask(wire::TaskInfo::Builder out, wire::KeptTask::Reader task) {
    auto outcome = task.getOutcome();
    out.setId(outcome.getTask());
    out.setName(task.getName());
    out.setType(task.getType());
    out.setState(TASK_STATES[outcome.getState()]);
    out.setGovernor(outcome.getGovernor());
    out.setStartTimeUs(outcome.getStartTimeUs());
    out.setDurationUs(outcome.getDurationUs());
    out.setExitStatus(outcome.getExitStatus());
    out.setError(outcome.getError());
    out.setStdoutTail(outcome.getStdoutTail());
    out.setStderrTail(outcome.getStderrTail());
    out.setAttempt(outcome.getAttempt());
  }

  kj::Promise<void> getObjects(GetObjectsContext call) override {
    auto params = call.getParams();
    auto& session = openSession(sessionOf(params));
    auto ids = params.getIds();
    auto out = call.getResults().initObjects(ids.size());
    for (uint i = 0; i < ids.size(); i++) {
      auto it = session.objects.find(ids[i]);
      SQUALL_REQUIRE(it != session.objects.end(), "unknown object ", ids[i], " in session ",
                     session.id);
      fillObject(out[i], it->second);
    }
    return kj::READY_NOW;
  }

  // `counts` by TaskNode::State.
  static void fillCounts(wire::SessionState::Builder state, const uint64_t* counts) {
    using S = TaskNode::State;
    auto count = [&](S s) { return counts[static_cast<int>(s)]; };
    state.setTasksWaiting(count(S::WAITING));
    state.setTasksReady(count(S::READY));
    state.setTasksRunning(count(S::ASSIGNED));
    state.setTasksFinished(count(S::FINISHED));
    state.setTasksFailed(count(S::FAILED) + count(S::CANCELLED));
    state.setTasksSkipped(count(S::SKIPPED));
  }

  static void fillState(wire::SessionState::Builder state, const Session& session) {
    state.setId(session.id);
    state.setName(session.name);
    state.setState(session.state == Session::State::OPEN ? wire::SessionState::State::OPEN
                                                         : wire::SessionState::State::FAILED);
    if (session.state != Session::State::OPEN) fillFailure(state.initFailure(), session);
    fillCounts(state, session.counts);
    state.setNextId(session.nextId);
  }

  static void fillKeptState(wire::SessionState::Builder state, wire::KeptSession::Reader kept) {
    state.setId(kept.getId());
    state.setName(kept.getName());
    state.setClosed(true);
    if (kept.getFailed()) {
      state.setState(wire::SessionState::State::FAILED);
      state.setFailure(kept.getFailure());
    } else {
      state.setState(wire::SessionState::State::CLOSED);
    }
    uint64_t counts[7];
    for (uint i = 0; i < 7; i++) counts[i] = kept.getCounts()[i];
    fillCounts(state, counts);
    state.setNextId(kept.getNextId());
  }

  kj::Promise<void> findSession(FindSessionContext call) override {
    auto name = call.getParams().getName();
    uint64_t found = 0;
    for (auto& [id, session] : context.sessions.all()) {
      if (session.name == name.cStr()) found = id;  // newest wins
    }
    if (found == 0) found = context.history.findByName(std::string_view(name.begin(), name.size()));
    SQUALL_REQUIRE(found != 0, "no session is named '", name, "'");
    call.getResults().setSession(found);
    return kj::READY_NOW;
  }

  kj::Promise<void> explain(ExplainContext call) override {
    auto params = call.getParams();
    auto id = sessionOf(params);
    SQUALL_REQUIRE(context.sessions.find(id) != nullptr || context.history.find(id) == nullptr,
                   "session ", id, " is closed: explain answers for open sessions (`squall logs` shows how its "
                   "tasks ended)");
    auto& session = context.sessions.get(id);
    auto it = session.tasks.find(params.getTask());
    SQUALL_REQUIRE(it != session.tasks.end(), "unknown task ", params.getTask(), " in session ", id);
    auto why = explainTask(session, it->second, context.dispatcher.placement(), context.governors,
                           context.dispatcher.held());
    auto results = call.getResults();
    results.setSummary(why.summary);
    auto details = results.initDetails(why.details.size());
    for (uint i = 0; i < details.size(); i++) details.set(i, why.details[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> listSessions(ListSessionsContext call) override {
    auto& all = context.sessions.all();
    auto list = call.getResults().initSessions(all.size());
    uint i = 0;
    for (auto& [id, session] : all) {
      list[i].setIncarnation(context.sessions.incarnation());
      fillState(list[i++], session);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> getTasks(GetTasksContext call) override {
    auto params = call.getParams();
    auto id = sessionOf(params);
    auto ids = params.getIds();
    bool wanted[7] = {};
    bool any = params.getStates().size() == 0;
    for (auto s : params.getStates()) {
      auto index = static_cast<int>(s);
      if (index < 7) wanted[toNodeState(s)] = true;
    }
    size_t limit = params.getLimit() == 0 ? 1000 : std::min<size_t>(params.getLimit(), 100000);
    if (context.sessions.find(id) == nullptr) {
      KJ_IF_MAYBE(kept, context.history.find(id)) {
        // Kept failures first, then by id, already.
        auto tasks = kept->getTasks();
        std::vector<wire::KeptTask::Reader> chosen;
        for (auto n : ids) {
          size_t at = 0;
          while (at < tasks.size() && tasks[at].getOutcome().getTask() != n) at++;
          SQUALL_REQUIRE(at < tasks.size(), "task ", n, " of closed session ", id,
                         " is not kept (the server keeps ", tasks.size(),
                         " of its tasks: the failures and the longest-running)");
          chosen.push_back(tasks[at]);
        }
        for (size_t i = 0; ids.size() == 0 && i < tasks.size() && chosen.size() < limit; i++) {
          if (any || wanted[tasks[i].getOutcome().getState()]) chosen.push_back(tasks[i]);
        }
        auto out = call.getResults().initTasks(chosen.size());
        for (size_t i = 0; i < chosen.size(); i++) fillKeptTask(out[i], chosen[i]);
        return kj::READY_NOW;
      }
    }
    auto& session = context.sessions.get(id);
    std::vector<const TaskNode*> chosen;
    if (ids.size() > 0) {
      for (auto n : ids) {
        auto it = session.tasks.find(n);
        SQUALL_REQUIRE(it != session.tasks.end(), "unknown task ", n);
        chosen.push_back(&it->second);
      }
    } else {
      // Failures first, then the rest in id order.
      std::vector<const TaskNode*> failures, others;
      for (auto& [n, task] : session.tasks) {
        if (!any && !wanted[static_cast<int>(task.state)]) continue;
        (task.state == TaskNode::State::FAILED ? failures : others).push_back(&task);
      }
      auto byId = [](const TaskNode* a, const TaskNode* b) { return a->id.n < b->id.n; };
      std::sort(failures.begin(), failures.end(), byId);
      std::sort(others.begin(), others.end(), byId);
      for (auto* list : {&failures, &others}) {
        for (auto* t : *list) {
          if (chosen.size() < limit) chosen.push_back(t);
        }
      }
    }
    auto out = call.getResults().initTasks(chosen.size());
    for (size_t i = 0; i < chosen.size(); i++) fillTask(out[i], *chosen[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> listGovernors(ListGovernorsContext call) override {
    auto& all = context.governors.all();
    // Objects held per governor; counted on demand (a rare call).
    std::map<GovernorId, uint64_t> held;
    for (auto& [sid, session] : context.sessions.all()) {
      for (auto& [n, object] : session.objects) {
        for (auto g : object.locations) held[g]++;
      }
    }
    auto list = call.getResults().initGovernors(all.size());
    uint i = 0;
    for (auto& [id, g] : all) {
      auto out = list[i++];
      out.setId(id);
      out.setName(g.name);
      out.setDataAddress(g.dataAddress);
      out.setCpus(g.cpus);
      out.setCpusUsed(std::min(g.load, g.cpus));
      out.setTasksAssigned(g.assigned.size());
      out.setObjects(held[id]);
      auto functions = out.initFunctions(g.functions.size());
      uint f = 0;
      for (auto& [name, outputs] : g.functions) functions.set(f++, name);
      auto resources = out.initResources(g.pools.size());
      uint r = 0;
      for (auto& [name, pool] : g.pools) {
        auto entry = resources[r++];
        entry.setName(name);
        entry.setCapacity(pool.capacity);
        entry.setUsed(pool.used);
      }
    }
    return kj::READY_NOW;
  }

 private:
  ServerContext& context;
  std::shared_ptr<bool> running;
  kj::String peer;
  // Its submits not yet committed or dropped (Limits::clientSubmits).
  std::shared_ptr<uint64_t> openSubmits = std::make_shared<uint64_t>(0);

  void checkWaitIds(capnp::List<uint64_t>::Reader ids) {
    SQUALL_REQUIRE(ids.size() <= context.limits.waitIds, "wait: ", ids.size(), " ids, more than ",
                   context.limits.waitIds, " (limit ", context.limits.named(context.limits.waitIds),
                   "); wait for all, or in parts");
  }

  // Ok, unless the session failed or one of `ids` ended without being made
  // (a failure that was allowed, or skipped because of one).
  void fillWaitResult(uint64_t id, wire::WaitResult::Builder out,
                      capnp::List<uint64_t>::Reader ids) {
    KJ_IF_MAYBE(session, context.sessions.find(id)) {
      if (session->state != Session::State::OPEN) {
        fillFailure(out.initFailed(), *session);
        return;
      }
      for (auto n : ids) {
        const TaskNode* task = nullptr;
        auto oit = session->objects.find(n);
        if (oit != session->objects.end()) {
          if (oit->second.state == ObjectNode::State::FAILED) task = oit->second.producer;
        } else {
          auto tit = session->tasks.find(n);
          if (tit != session->tasks.end() && (tit->second.state == TaskNode::State::FAILED ||
                                              tit->second.state == TaskNode::State::SKIPPED)) {
            task = &tit->second;
          }
        }
        if (task != nullptr) {
          fillTaskFailure(out.initFailed(), *task);
          return;
        }
      }
      out.setOk();
    } else {
      out.initFailed().setMessage(kj::str("session ", id, " was closed"));
    }
  }
};

}  // namespace

kj::Own<wire::ClientService::Server> newClientService(ServerContext& context, kj::String peer) {
  return kj::heap<ClientServiceImpl>(context, kj::mv(peer));
}

}  // namespace squall
