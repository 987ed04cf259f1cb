#include "dispatcher.h"

#include <algorithm>
#include <chrono>
#include <kj/debug.h>

namespace squall {

namespace {
constexpr size_t MAX_TASKS_PER_ASSIGN = 16384;
constexpr uint64_t MAX_TASK_BYTES_PER_ASSIGN = 16 << 20;
constexpr uint64_t MAX_CONSTANT_BYTES_PER_ASSIGN = 16 << 20;

// Task `id` while it is assigned to `governor` (not cancelled, closed or
// placed elsewhere since).
kj::Maybe<TaskNode&> assignedTo(SessionTable& sessions, Id id, GovernorId governor) {
  KJ_IF_MAYBE(task, sessions.findTask(id)) {
    if (task->state == TaskNode::State::ASSIGNED && task->governor == governor) return *task;
  }
  return nullptr;
}
}  // namespace

void Dispatcher::kick() {
  if (pending) return;
  pending = true;
  rpcs.add(kj::evalLater([this]() {
    pending = false;
    pass();
  }));
}

void Dispatcher::governorLost(GovernorId id) {
  std::string name;
  KJ_IF_MAYBE(g, governors.find(id)) { name = g->name; }
  else {
    return;
  }
  auto held = governors.remove(id);
  // An idle governor leaving is routine (it was stopped); one taking tasks
  // with it is a degradation.
  logger.log(held.empty() ? spdlog::level::info : spdlog::level::warn,
             "event=governor-lost governor={} name={} tasks={}", id, name, held.size());
  sessions.governorLost(id, name, held);
  if (auto* log = sessions.sessionLog()) log->governorGone(name);
  kick();
}

kj::Promise<void> Dispatcher::durable() {
  if (sessions.sessionLog() == nullptr) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  waitingForLog.push_back(kj::mv(paf.fulfiller));
  kick();
  return kj::mv(paf.promise);
}

kj::Promise<void> Dispatcher::whenPlacing() {
  if (!holding) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  waitingForPlacing.push_back(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void Dispatcher::resume() {
  if (!holding) return;
  holding = false;
  for (auto& f : waitingForPlacing) f->fulfill();
  waitingForPlacing.clear();
  logger.info("event=placement-resumed ready={}", scheduler.readyCount());
  kick();
}

void Dispatcher::expectedGone(const std::map<std::string, GovernorId>& missing) {
  for (auto& [name, id] : missing) {
    logger.warn("event=governor-not-back name={} action=remake-its-objects", name);
    sessions.governorLost(id, name, {});
    if (auto* log = sessions.sessionLog()) log->governorGone(name);
  }
  kick();
}

Dispatcher::Cuts Dispatcher::cutAll() {
  Cuts cuts;
  for (auto& [gid, governor] : governors.all()) {
    cuts[gid] = Cut{governor.toAssign.size(), governor.toCancel.size(), governor.toRemove.size(),
                    governor.unconfirmed() ? governor.appliedUpdate : 0};
  }
  return cuts;
}

void Dispatcher::send(const Cuts& cuts) {
  for (auto& [gid, cut] : cuts) {
    KJ_IF_MAYBE(governor, governors.find(gid)) { flush(*governor, cut); }
  }
}

void Dispatcher::commitLog() {
  auto* log = sessions.sessionLog();
  committing = true;
  lastCommit = timer.now();
  // Shared by the two continuations (only one of them runs).
  auto commit = kj::heap<Commit>();
  commit->cuts = cutAll();
  commit->waiting = kj::mv(waitingForLog);
  waitingForLog.clear();
  auto& state = *commit;
  rpcs.add(log->commit()
               .then(
                   [this, &state]() {
                     committing = false;
                     for (auto& f : state.waiting) f->fulfill();
                     send(state.cuts);
                     // What queued up meanwhile goes in the next commit.
                     kick();
                   },
                   [this, &state](kj::Exception&& e) {
                     committing = false;
                     logger.error("event=log-failed action=commit queued={} error=\"{}\"",
                                  sessions.sessionLog()->queued(), e.getDescription().cStr());
                     // Not durable: the governors keep those results (and
                     // the next commit writes them again). The work goes on;
                     // no kick, so a full disk is not retried in a busy loop.
                     for (auto& [gid, cut] : state.cuts) cut.durableUpdate = 0;
                     for (auto& f : state.waiting) {
                       f->reject(KJ_EXCEPTION(OVERLOADED,
                                              "the server cannot write its session log; retry later",
                                              e.getDescription()));
                     }
                     send(state.cuts);
                   })
               .attach(kj::mv(commit)));
}

void Dispatcher::pass() {
  auto started = std::chrono::steady_clock::now();
  passCount++;
  auto& effects = sessions.effects();
  // First: closing adds cancels and removals of its own.
  for (auto id : std::exchange(effects.closeLingering, {})) {
    logger.info("event=lingering-session-closes session={} reason=\"its named actors ended\"", id);
    sessions.close(id, true);
  }
  scheduler.enqueue(effects.ready, sessions);
  effects.ready.clear();
  scheduler.actorsPlaced(effects.actorsPlaced);
  effects.actorsPlaced.clear();
  if (!effects.readyLater.empty()) {
    rpcs.add(timer.afterDelay(INPUT_RETRY_DELAY).then([this, later = kj::mv(effects.readyLater)]() {
      scheduler.enqueue(later, sessions);
      kick();
    }));
    effects.readyLater.clear();
  }
  for (auto& [g, id] : effects.cancel) {
    KJ_IF_MAYBE(governor, governors.find(g)) { governor->toCancel.push_back(id); }
  }
  effects.cancel.clear();
  for (auto& [g, id] : effects.remove) {
    KJ_IF_MAYBE(governor, governors.find(g)) { governor->toRemove.push_back(id); }
  }
  effects.remove.clear();

  if (!holding) {
    scheduler.place(sessions, governors);
    scheduler.placeCalls(sessions, governors);
    for (auto& retraction : scheduler.steal(sessions, governors)) retract(kj::mv(retraction));
    for (auto& order : scheduler.prefetch(effects.inputFinished, sessions, governors)) sendPrefetch(order);
  }
  effects.inputFinished.clear();
  if (sessions.sessionLog() == nullptr) {
    send(cutAll());
  } else {
    sendWithLog();
  }
  auto took = std::chrono::steady_clock::now() - started;
  sessions.stats().recordPass(std::chrono::duration_cast<std::chrono::microseconds>(took).count());
}

void Dispatcher::sendWithLog() {
  // Assignments go out at once: should the server die before the log has
  // what led to them, the governors report what they run and the results
  // the log lacks when they register again, so nothing is lost or run
  // twice. Cancels and removals undo work and data: the log must say why
  // first, so they wait for the commit, and a governor's assignments queued
  // behind its cancels wait with them (a governor sees them in the order
  // they were made).
  Cuts now;
  bool unconfirmed = false;
  for (auto& [gid, governor] : governors.all()) {
    if (governor.toCancel.empty() && !governor.toAssign.empty()) {
      now[gid] = Cut{governor.toAssign.size(), 0, 0};
    }
    unconfirmed = unconfirmed || governor.unconfirmed();
  }
  send(now);
  if (committing) return;  // its completion comes back here
  if (sessions.sessionLog()->queued() == 0 && !unconfirmed && waitingForLog.empty()) {
    send(cutAll());  // all that led here is in the log already
    return;
  }
  if (timer.now() - lastCommit >= COMMIT_INTERVAL) {
    commitLog();
  } else if (!commitDue) {
    commitDue = true;
    rpcs.add(timer.atTime(lastCommit + COMMIT_INTERVAL).then([this]() {
      commitDue = false;
      kick();
    }));
  }
}

void Dispatcher::flush(GovernorState& governor, const Cut& cut) {
  auto take = [](std::vector<Id>& box, size_t n) {
    n = std::min(n, box.size());
    std::vector<Id> out(box.begin(), box.begin() + static_cast<ptrdiff_t>(n));
    box.erase(box.begin(), box.begin() + static_cast<ptrdiff_t>(n));
    return out;
  };
  auto cancel = take(governor.toCancel, cut.cancel);
  auto remove = take(governor.toRemove, cut.remove);
  // Placed while a commit was under way: a task cancelled, or of a session
  // closed, since is not sent, and its place on the governor is free again.
  std::vector<Id> assign;
  for (auto& id : take(governor.toAssign, cut.assign)) {
    if (assignedTo(sessions, id, governor.id) != nullptr) {
      assign.push_back(id);
    } else {
      governors.release(governor.id, id);
    }
  }
  if (!cancel.empty()) {
    auto req = governor.control.cancelTasksRequest();
    auto list = req.initTasks(cancel.size());
    for (uint i = 0; i < list.size(); i++) cancel[i].to(list[i]);
    // What it does not have (a direct call recorded as sent there that
    // never reached it) it will never report: its place is freed here.
    GovernorId gid = governor.id;
    rpcs.add(req.send().then([this, gid](capnp::Response<wire::GovernorControl::CancelTasksResults> response) {
      if (response.getUnknown().size() == 0) return;
      for (auto wireId : response.getUnknown()) {
        auto id = Id::from(wireId);
        if (assignedTo(sessions, id, gid) != nullptr) continue;
        logger.debug("event=cancel-unknown governor={} session={} task={}", gid, id.session, id.n);
        governors.release(gid, id);
      }
      kick();
    }));
  }
  // Assignments go in calls of bounded size, so that no message nears
  // capnp's 64 MiB limit (a send past it fails, and the governor would
  // never hear of its tasks): at most MAX_TASKS_PER_ASSIGN tasks and
  // MAX_TASK_BYTES_PER_ASSIGN of task specs, and MAX_CONSTANT_BYTES_PER_ASSIGN
  // of constants. A constant bigger than that (up to the submit limit,
  // below 64 MiB) goes alone. A task's constants go in its own call or an
  // earlier one: calls on one capability arrive in the order sent, and the
  // governor stores a call's constants before it queues its tasks.
  std::vector<size_t> batchTasks;
  std::vector<ObjectNode*> batchConstants;
  uint64_t batchConstantBytes = 0, batchTaskBytes = 0;
  auto sendBatch = [&]() {
    if (batchTasks.empty() && batchConstants.empty()) return;
    sendAssign(governor, assign, batchTasks, batchConstants);
    sessions.stats().bytesConstants += batchConstantBytes;
    batchTasks.clear();
    batchConstants.clear();
    batchConstantBytes = batchTaskBytes = 0;
  };
  for (size_t k = 0; k < assign.size(); k++) {
    auto& task = sessions.get(assign[k].session).tasks.at(assign[k].n);
    for (auto* object : task.inputs) {
      auto& where = object->locations;
      if (!object->constant || std::find(where.begin(), where.end(), governor.id) != where.end()) {
        continue;
      }
      if (batchConstantBytes + object->size > MAX_CONSTANT_BYTES_PER_ASSIGN) sendBatch();
      batchConstants.push_back(object);
      batchConstantBytes += object->size;
      where.push_back(governor.id);
    }
    uint64_t specBytes = task.spec.totalSize().wordCount * sizeof(capnp::word);
    if (batchTasks.size() == MAX_TASKS_PER_ASSIGN ||
        (!batchTasks.empty() && batchTaskBytes + specBytes > MAX_TASK_BYTES_PER_ASSIGN)) {
      sendBatch();
    }
    batchTasks.push_back(k);
    batchTaskBytes += specBytes;
  }
  sendBatch();
  if (!remove.empty()) {
    auto req = governor.control.removeObjectsRequest();
    auto list = req.initObjects(remove.size());
    for (uint i = 0; i < list.size(); i++) remove[i].to(list[i]);
    rpcs.add(req.send().ignoreResult());
  }
  if (cut.durableUpdate > governor.confirmedUpdate) {
    governor.confirmedUpdate = cut.durableUpdate;
    auto req = governor.control.resultsDurableRequest();
    req.setThrough(cut.durableUpdate);
    rpcs.add(req.send().ignoreResult());
  }
}

void Dispatcher::claimUploads(GovernorState& governor, uint64_t session, std::vector<Id> objects) {
  auto req = governor.control.claimUploadsRequest();
  auto list = req.initObjects(objects.size());
  for (uint i = 0; i < list.size(); i++) objects[i].to(list[i]);
  GovernorId gid = governor.id;
  rpcs.add(req.send().then([this, gid, session](capnp::Response<wire::GovernorControl::ClaimUploadsResults> response) {
    if (response.getMissing().size() == 0) return;
    KJ_IF_MAYBE(target, sessions.find(session)) {
      auto first = Id::from(response.getMissing()[0]);
      logger.warn("event=upload-missing session={} object={} governor={} count={}", session, first.n, gid,
                  response.getMissing().size());
      for (auto wireId : response.getMissing()) {
        auto it = target->objects.find(Id::from(wireId).n);
        if (it == target->objects.end()) continue;
        auto& where = it->second.locations;
        where.erase(std::remove(where.begin(), where.end(), gid), where.end());
      }
      sessions.fail(*target, kj::str("constant ", first.n, " is not held by governor ", gid,
                                     ", where it was uploaded (it started over, or the upload waited longer than "
                                     "its --upload-ttl for the submit); submit it again")
                                 .cStr());
      kick();
    }
  }));
}

void Dispatcher::sendPrefetch(const PrefetchOrder& order) {
  KJ_IF_MAYBE(governor, governors.find(order.to)) {
    auto req = governor->control.prefetchRequest();
    auto list = req.initObjects(order.objects.size());
    std::vector<Id> ids;
    for (uint i = 0; i < list.size(); i++) {
      auto& object = *order.objects[i];
      auto item = list[i];
      object.id.to(item.initId());
      item.setKind(object.kind);
      item.setSize(object.size);
      std::vector<kj::StringPtr> sources;
      for (auto g : object.locations) {
        KJ_IF_MAYBE(holder, governors.find(g)) { sources.push_back(holder->dataAddress); }
      }
      auto list = item.initSources(sources.size());
      for (uint j = 0; j < sources.size(); j++) list.set(j, sources[j]);
      ids.push_back(object.id);
    }
    GovernorId to = order.to;
    rpcs.add(req.send().then(
        [this, to, ids](capnp::Response<wire::GovernorControl::PrefetchResults> response) {
          std::vector<Id> held;
          for (auto id : response.getHeld()) held.push_back(Id::from(id));
          prefetched(to, ids, held);
        },
        [this, to, ids](kj::Exception&& e) {
          logger.debug("event=prefetch-failed governor={} error=\"{}\"", to, e.getDescription().cStr());
          prefetched(to, ids, {});
        }));
  }
}

void Dispatcher::prefetched(GovernorId to, const std::vector<Id>& asked, const std::vector<Id>& held) {
  bool removing = false;
  for (auto& id : asked) {
    bool has = std::find(held.begin(), held.end(), id) != held.end();
    KJ_IF_MAYBE(object, sessions.findObject(id)) {
      auto& waiting = object->prefetching;
      waiting.erase(std::remove(waiting.begin(), waiting.end(), to), waiting.end());
      if (has && object->state == ObjectNode::State::FINISHED) {
        if (std::find(object->locations.begin(), object->locations.end(), to) == object->locations.end()) {
          object->locations.push_back(to);
          sessions.stats().bytesPrefetched += object->size;
        }
        continue;
      }
    }
    // Not needed any more (removed, or its session went) while it came.
    if (has) {
      KJ_IF_MAYBE(governor, governors.find(to)) {
        governor->toRemove.push_back(id);
        removing = true;
      }
    }
  }
  if (removing) kick();
}

void Dispatcher::sendAssign(GovernorState& governor, const std::vector<Id>& assign,
                            const std::vector<size_t>& which, const std::vector<ObjectNode*>& constants) {
  auto req = governor.control.assignRequest();
  auto list = req.initTasks(which.size());
  std::vector<Id> sent;
  std::vector<Id> actors;
  sent.reserve(which.size());
  for (size_t b = 0; b < which.size(); b++) {
    const Id& id = assign[which[b]];
    sent.push_back(id);
    auto& task = sessions.get(id.session).tasks.at(id.n);
    if (task.isActor) actors.push_back(id);
    auto assignment = list[b];
    assignment.setTask(task.spec);
    assignment.setAttempt(task.attempt);
    assignment.setSharesCpus(task.group != nullptr && task.cpus == 0);
    assignment.setPriority(task.bLevel);
    auto inputs = assignment.initInputs(task.inputs.size());
    for (uint i = 0; i < task.inputs.size(); i++) {
      auto& object = *task.inputs[i];
      auto input = inputs[i];
      input.setKind(object.kind);
      input.setSize(object.size);
      if (task.liveInputs[i]) {
        // Its producer was assigned in this same pass (the whole group is).
        input.setLive(true);
        GovernorId producer = object.producer->governor;
        if (producer != governor.id) {
          KJ_IF_MAYBE(holder, governors.find(producer)) {
            input.initSources(1).set(0, holder->dataAddress);
          }
        }
        continue;
      }
      // Read after its end: its stored bytes, a blob.
      if (object.kind == wire::ObjectKind::STREAM) input.setKind(wire::ObjectKind::BLOB);
      auto& where = object.locations;
      // Held already, or a constant travelling in this call or an earlier one.
      if (object.constant || std::find(where.begin(), where.end(), governor.id) != where.end()) {
        continue;
      }
      auto sources = input.initSources(where.size());
      for (uint s = 0; s < where.size(); s++) {
        KJ_IF_MAYBE(holder, governors.find(where[s])) { sources.set(s, holder->dataAddress); }
      }
    }
    auto kinds = assignment.initOutputKinds(task.outputs.size());
    auto readers = assignment.initLiveReaders(task.outputs.size());
    auto persist = assignment.initPersist(task.outputs.size());
    for (uint i = 0; i < task.outputs.size(); i++) {
      auto& output = *task.outputs[i];
      kinds.set(i, output.kind);
      // A kept small blob comes back with the result, for its fetch.
      if (output.keep && output.kind == wire::ObjectKind::BLOB) {
        assignment.setInlineOutputBytes(CACHED_OUTPUT_BYTES);
      }
      if (output.kind != wire::ObjectKind::STREAM) continue;
      // Stored as it flows when kept or read after its end; readers added
      // by later submits must then find it stored (see PendingSubmit).
      output.persisted = output.keep || !output.consumers.empty();
      readers.set(i, output.liveReaders.size());
      persist.set(i, output.persisted);
    }
  }
  auto constantList = req.initConstants(constants.size());
  for (uint i = 0; i < constants.size(); i++) {
    constants[i]->id.to(constantList[i].initId());
    constantList[i].setKind(constants[i]->kind);
    constantList[i].setData(kj::arrayPtr(constants[i]->data.data(), constants[i]->data.size()));
  }
  logger.debug("event=assign governor={} tasks={} constants={}", governor.id, which.size(),
               constants.size());
  std::vector<Id> constantIds;
  for (auto* constant : constants) constantIds.push_back(constant->id);
  GovernorId gid = governor.id;
  rpcs.add(req.send().then(
      [this, gid, actors = kj::mv(actors)](auto) { actorsHeld(gid, actors); },
      [this, gid, sent = kj::mv(sent), constantIds = kj::mv(constantIds)](kj::Exception&& e) {
        assignFailed(gid, sent, constantIds, kj::mv(e));
      }));
}

void Dispatcher::actorsHeld(GovernorId gid, const std::vector<Id>& actors) {
  for (auto& id : actors) {
    KJ_IF_MAYBE(session, sessions.find(id.session)) {
      auto task = session->tasks.find(id.n);
      auto actor = session->actors.find(id.n);
      if (task == session->tasks.end() || actor == session->actors.end()) continue;
      // Still placed there (not ended, lost or moved since).
      if (task->second.state == TaskNode::State::ASSIGNED && task->second.governor == gid) {
        actor->second.heldBy = gid;
      }
    }
  }
}

void Dispatcher::assignFailed(GovernorId gid, const std::vector<Id>& sent, const std::vector<Id>& constants,
                              kj::Exception&& e) {
  // A dropped connection is governorLost()'s to handle: its tasks go
  // elsewhere. Anything else (a message the governor cannot take) would be
  // refused again wherever the tasks went: they fail, saying why, instead
  // of holding their governor's cpus for good.
  if (e.getType() == kj::Exception::Type::DISCONNECTED) return;
  std::string name;
  KJ_IF_MAYBE(governor, governors.find(gid)) { name = governor->name; }
  else {
    return;
  }
  logger.error("event=assign-failed governor={} name={} tasks={} error=\"{}\"", gid, name, sent.size(),
               e.getDescription().cStr());
  // The constants it carried never arrived: a later call must carry them.
  for (auto& id : constants) {
    KJ_IF_MAYBE(session, sessions.find(id.session)) {
      auto it = session->objects.find(id.n);
      if (it == session->objects.end()) continue;
      auto& where = it->second.locations;
      where.erase(std::remove(where.begin(), where.end(), gid), where.end());
    }
  }
  for (auto& id : sent) {
    if (assignedTo(sessions, id, gid) != nullptr) {
      capnp::MallocMessageBuilder message;
      auto result = message.initRoot<wire::TaskResult>();
      id.to(result.initId());
      result.setOk(false);
      result.setError(kj::str("the server could not send the task to governor ", name, ": ",
                              e.getDescription()));
      governors.release(gid, id);
      sessions.taskResult(result.asReader(), gid, name.c_str());
    }
  }
  kick();
}

void Dispatcher::retract(Retraction retraction) {
  KJ_IF_MAYBE(governor, governors.find(retraction.from)) {
    logger.debug("event=steal from={} to={} tasks={}", retraction.from, retraction.to, retraction.tasks.size());
    auto req = governor->control.retractRequest();
    auto list = req.initTasks(retraction.tasks.size());
    for (uint i = 0; i < list.size(); i++) retraction.tasks[i].to(list[i]);
    auto shared = kj::heap<Retraction>(kj::mv(retraction));
    auto& r = *shared;
    rpcs.add(req.send()
                 .then(
                     [this, &r](capnp::Response<wire::GovernorControl::RetractResults>&& reply) {
                       std::vector<Id> back;
                       for (auto id : reply.getRetracted()) back.push_back(Id::from(id));
                       retracted(r, back);
                     },
                     [this, &r](kj::Exception&&) {
                       // A dropped connection: governorLost() re-places its tasks.
                       retracted(r, {});
                     })
                 .attach(kj::mv(shared)));
  }
}

void Dispatcher::retracted(const Retraction& retraction, const std::vector<Id>& back) {
  scheduler.retractionSettled(retraction);
  sessions.stats().tasksStolen += back.size();
  for (auto& id : retraction.tasks) {
    KJ_IF_MAYBE(task, sessions.findTask(id)) { task->retracting = false; }
  }
  for (auto& id : back) {
    // The governor dropped it and never reports it: its capacity is free
    // whatever became of the task meanwhile (a cancel finds it gone).
    governors.release(retraction.from, id);
    KJ_IF_MAYBE(task, assignedTo(sessions, id, retraction.from)) { sessions.retracted(*task); }
  }
  kick();
}

void Dispatcher::taskFailed(kj::Exception&& exception) {
  // A governor call failed: almost always its connection dropping, which
  // governorLost() handles.
  logger.debug("event=governor-call-failed error=\"{}\"", exception.getDescription().cStr());
}

}  // namespace squall
