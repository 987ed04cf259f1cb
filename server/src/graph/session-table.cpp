#include "session-table.h"

#include <algorithm>
#include <capnp/serialize.h>
#include <unordered_set>
#include <kj/debug.h>
#include <squall/proto/errors.h>

namespace squall {

Session& SessionTable::open(std::string name, const void* owner, bool persistent) {
  uint64_t id = nextSession;
  if (log != nullptr) log->sessionOpened(id, name, persistent);
  nextSession++;
  auto& session = sessions[id];
  session.id = id;
  session.name = std::move(name);
  session.owner = owner;
  session.persistent = persistent;
  logger.info("event=session-open session={} name=\"{}\" persistent={}", id, session.name, persistent);
  return session;
}

Session& SessionTable::restore(const SessionLog::SessionRecord& record,
                               const std::function<GovernorId(const std::string&)>& governorId) {
  SQUALL_REQUIRE(!sessions.count(record.id), "session ", record.id, " is in the log twice");
  auto& session = sessions[record.id];
  session.id = record.id;
  session.name = record.name;
  session.persistent = record.persistent;
  session.lingering = record.lingering;
  session.reservedUpTo = std::max(session.reservedUpTo, record.reservedIds);
  nextSession = std::max(nextSession, record.id + 1);
  restoring = true;
  KJ_DEFER(restoring = false);

  // The graph: every submit's chunks, validated and applied as one.
  PendingSubmit submit(record.id, Limits::unbounded());
  for (auto& chunk : record.chunks) {
    KJ_REQUIRE(chunk.size() % sizeof(capnp::word) == 0, "a logged submit is truncated", record.id);
    capnp::FlatArrayMessageReader reader(
        kj::arrayPtr(reinterpret_cast<const capnp::word*>(chunk.data()), chunk.size() / sizeof(capnp::word)),
        storedMessageReading(chunk.size()));
    submit.add(reader.getRoot<wire::Submission::AddParams>());
  }
  for (auto& [n, data] : record.constants) submit.appendData(n, kj::arrayPtr(data.data(), data.size()));
  for (auto* task : submit.commit(session)) pending.ready.push_back(task->id);
  // Decided at assignment (see the Dispatcher), which may have happened
  // before the restart: tasks adopted from their governors keep it.
  for (auto& [n, object] : session.objects) {
    if (object.kind == wire::ObjectKind::STREAM) object.persisted = object.keep || !object.consumers.empty();
  }
  // What the client stopped keeping (before the outcomes, so that what is
  // no longer needed goes as they are applied).
  for (auto n : record.unkept) {
    auto it = session.objects.find(n);
    if (it != session.objects.end()) it->second.keep = false;
  }

  // The outcomes, as their governors reported them: the finished ones first
  // (a failure recorded later cancels what was still to run).
  std::unordered_map<uint64_t, const SessionLog::ObjectRecord*> objects;
  for (auto& object : record.objects) objects[object.object] = &object;
  for (bool finished : {true, false}) {
    for (auto& outcome : record.tasks) {
      bool ok = outcome.state == static_cast<int>(TaskNode::State::FINISHED);
      if (ok != finished) continue;
      auto it = session.tasks.find(outcome.task);
      if (it == session.tasks.end() || it->second.done()) continue;
      auto& task = it->second;
      capnp::MallocMessageBuilder message;
      auto result = message.initRoot<wire::TaskResult>();
      task.id.to(result.initId());
      result.setOk(ok);
      result.setError(outcome.error);
      result.setExitStatus(outcome.exitStatus);
      result.setStdoutTail(outcome.stdoutTail);
      result.setStderrTail(outcome.stderrTail);
      result.setStartTimeUs(outcome.startTimeUs);
      result.setDurationUs(outcome.durationUs);
      if (ok) {
        auto outputs = result.initOutputs(task.outputs.size());
        for (size_t i = 0; i < task.outputs.size(); i++) {
          auto& output = *task.outputs[i];
          output.id.to(outputs[i].initId());
          auto oit = objects.find(output.id.n);
          if (oit != objects.end()) {
            outputs[i].setSize(oit->second->size);
            outputs[i].setHash(oit->second->hash);
          }
        }
      }
      auto governor = governorId(outcome.governor);
      if (task.state != TaskNode::State::ASSIGNED) session.setTaskState(task, TaskNode::State::ASSIGNED);
      task.governor = governor;
      task.attempt = outcome.attempt;
      taskResult(result.asReader(), governor, outcome.governor);
    }
  }
  if (!record.failure.empty()) fail(session, record.failure);
  registerNamedActors(session);
  // A lingering session whose named actors ended meanwhile goes now.
  closeIfNoNamedActorLives(session);
  logger.info("event=session-restored session={} name=\"{}\" tasks={} finished={} failed={}",
              session.id, session.name, session.tasks.size(),
              session.counts[static_cast<int>(TaskNode::State::FINISHED)],
              session.state != Session::State::OPEN);
  return session;
}

Session& SessionTable::get(uint64_t id) {
  auto it = sessions.find(id);
  SQUALL_REQUIRE(it != sessions.end(), "unknown session ", id, " (never opened, or closed)");
  return it->second;
}

kj::Maybe<Session&> SessionTable::find(uint64_t id) {
  auto it = sessions.find(id);
  if (it == sessions.end()) return nullptr;
  return it->second;
}

void SessionTable::close(uint64_t id, bool evenIfNamedActors) {
  auto it = sessions.find(id);
  if (it == sessions.end()) return;
  auto& session = it->second;
  if (!evenIfNamedActors) {
    if (size_t living = livingNamedActors(session); living > 0) {
      // Its named actors outlive it: kept open, ownerless, until they end.
      session.owner = nullptr;
      if (!session.lingering && log != nullptr) {
        try {
          log->sessionLingering(id);
        } catch (const kj::Exception& e) {
          logger.error("event=log-failed action=linger session={} error=\"{}\"", id, e.getDescription().cStr());
        }
      }
      session.persistent = true;
      session.lingering = true;
      logger.info("event=session-lingers session={} named_actors={}", id, living);
      return;
    }
  }
  // Unfinished tasks are cancelled by closing: they say so to onClose (the
  // history keeps the session as it closed).
  for (auto& [n, task] : session.tasks) {
    if (task.state == TaskNode::State::ASSIGNED) pending.cancel.emplace_back(task.governor, task.id);
    if (!task.done()) session.setTaskState(task, TaskNode::State::CANCELLED);
  }
  for (auto& [n, object] : session.objects) {
    for (auto g : object.locations) pending.remove.emplace_back(g, object.id);
  }
  forgetNames(session, "its session was closed");
  if (onClose) onClose(session);
  if (log != nullptr) {
    try {
      log->sessionClosed(id);
    } catch (const kj::Exception& e) {
      // Closing goes on: the next start prunes what is left of it (its
      // client is gone and it is not persistent), or shows it again.
      logger.error("event=log-failed action=close session={} error=\"{}\"", id,
                   e.getDescription().cStr());
    }
  }
  session.state = Session::State::CLOSED;
  notifyAll(session);
  logger.info("event=session-close session={} tasks={}", id, session.tasks.size());
  // Out of the map first, destroyed after: destroying a session's waiters can
  // release the last reference to a client's service, whose destructor
  // closes that client's sessions, re-entering this table.
  auto node = sessions.extract(it);
}

void SessionTable::closeOwnedBy(const void* owner) {
  std::vector<uint64_t> ids;
  for (auto& [id, session] : sessions) {
    if (session.owner != owner) continue;
    if (session.persistent) {
      session.owner = nullptr;  // outlives its client; anyone may re-attach
    } else {
      ids.push_back(id);
    }
  }
  for (auto id : ids) close(id);
}

void SessionTable::submitted(Session& session, std::vector<TaskNode*> ready) {
  for (auto* task : ready) pending.ready.push_back(task->id);
  registerNamedActors(session);
}

void SessionTable::forgetNames(Session& session, const char* why) {
  for (auto& [n, actor] : session.actors) {
    if (!actor.name.empty()) unname(session, actor, why);
  }
}

size_t SessionTable::livingNamedActors(const Session& session) {
  size_t living = 0;
  for (auto& [n, actor] : session.actors) living += !actor.name.empty() && !actor.task->done();
  return living;
}

void SessionTable::closeIfNoNamedActorLives(Session& session) {
  auto& queued = pending.closeLingering;
  if (!session.lingering || livingNamedActors(session) > 0 ||
      std::find(queued.begin(), queued.end(), session.id) != queued.end()) {
    return;
  }
  queued.push_back(session.id);
}

void SessionTable::unname(const Session& session, const ActorNode& actor, const char* why) {
  auto it = named.find(actor.name);
  if (it == named.end() || it->second != actor.task->id) return;
  named.erase(it);
  auto& task = *actor.task;
  auto end = "task " + std::to_string(task.id.n) + " of session " + std::to_string(session.id) + " ";
  if (task.state == TaskNode::State::FAILED) {
    end += "failed: " + task.error;
  } else {
    end += "ended: " + (task.error.empty() ? std::string(why) : task.error);
  }
  if (endedNames.count(actor.name) == 0) {
    if (endedOrder.size() >= MAX_ENDED_NAMES) {
      endedNames.erase(endedOrder.front());  // the name that ended longest ago
      endedOrder.pop_front();
    }
    endedOrder.push_back(actor.name);
  }
  endedNames[actor.name] = std::move(end);
}

const std::string* SessionTable::namedActorEnd(const std::string& name) const {
  auto it = endedNames.find(name);
  return it == endedNames.end() || named.count(name) != 0 ? nullptr : &it->second;
}

void SessionTable::registerNamedActors(Session& session) {
  for (auto& [n, actor] : session.actors) {
    if (!actor.name.empty() || actor.task->done()) continue;
    auto name = actor.task->spec.getConfig().getActor().getName();
    if (name.size() == 0) continue;
    if (!named.emplace(name.cStr(), actor.task->id).second) {
      // A replayed log can hold a name twice only if it was tampered with.
      logger.warn("event=actor-name-taken session={} task={} name=\"{}\"", session.id, n, name.cStr());
      continue;
    }
    actor.name = name.cStr();
  }
}

void SessionTable::assigned(TaskNode& task, GovernorId governor) {
  auto& session = sessions.at(task.id.session);
  session.setTaskState(task, TaskNode::State::ASSIGNED);
  task.governor = governor;
}

kj::Maybe<TaskNode&> SessionTable::findTask(Id id) {
  KJ_IF_MAYBE(session, find(id.session)) {
    auto it = session->tasks.find(id.n);
    if (it != session->tasks.end()) return it->second;
  }
  return nullptr;
}

kj::Maybe<ObjectNode&> SessionTable::findObject(Id id) {
  KJ_IF_MAYBE(session, find(id.session)) {
    auto it = session->objects.find(id.n);
    if (it != session->objects.end()) return it->second;
  }
  return nullptr;
}

void SessionTable::retracted(TaskNode& task) {
  auto& session = sessions.at(task.id.session);
  task.governor = 0;
  session.setTaskState(task, TaskNode::State::WAITING);
  requeue(session, task);
}

void SessionTable::taskResult(wire::TaskResult::Reader result, GovernorId from,
                              kj::StringPtr fromName) {
  auto id = Id::from(result.getId());
  // Outputs of a result nobody waits for any more go, unless the table
  // counts them as held there already (a result sent again after a
  // reconnect, which the log had recorded).
  // So do the constants a direct call brought there (TaskResult.direct).
  auto orphanOutputs = [&]() {
    std::vector<Id> ids;
    for (auto output : result.getOutputs()) ids.push_back(Id::from(output.getId()));
    if (result.hasDirect()) {
      for (auto object : result.getDirect().getObjects()) {
        if (object.getIsConstant()) ids.push_back(Id::from(object.getId()));
      }
    }
    for (auto oid : ids) {
      KJ_IF_MAYBE(session, find(oid.session)) {
        auto it = session->objects.find(oid.n);
        if (it != session->objects.end() && it->second.state == ObjectNode::State::FINISHED &&
            std::find(it->second.locations.begin(), it->second.locations.end(), from) !=
                it->second.locations.end()) {
          continue;
        }
      }
      pending.remove.emplace_back(from, oid);
    }
  };
  auto sit = sessions.find(id.session);
  if (sit == sessions.end()) return orphanOutputs();
  auto& session = sit->second;
  auto tit = session.tasks.find(id.n);
  if (tit == session.tasks.end()) return orphanOutputs();
  auto& task = tit->second;
  if (task.state != TaskNode::State::ASSIGNED || task.governor != from) return orphanOutputs();
  task.governor = 0;
  task.governorName = fromName.cStr();
  task.startTimeUs = result.getStartTimeUs();
  task.durationUs = result.getDurationUs();
  task.exitStatus = result.getExitStatus();
  task.error = result.getError().cStr();
  task.stdoutTail = result.getStdoutTail().cStr();
  task.stderrTail = result.getStderrTail().cStr();
  if (result.getOk()) {
    finishTask(session, task, result, from);
    return;
  }
  if (task.unfinishedInputs > 0) {
    // An input was lost with its governor while this task was reading it,
    // and is being made again: not the task's failure.
    logger.info("event=task-requeued session={} task={} reason=input-lost error=\"{}\"",
                id.session, id.n, result.getError().cStr());
    session.setTaskState(task, TaskNode::State::WAITING);
    return;
  }
  if (result.getInputUnavailable() && task.inputRetries < MAX_INPUT_RETRIES) {
    // It never ran: an input's source went away as the task was placed (a
    // governor killed). The server hears of that loss at about the same
    // time; placed again a moment later, the task reads another copy, or
    // waits for one made again. Not an attempt of its own; bounded, so a
    // source that stays unreachable (and not lost) still fails it.
    task.inputRetries++;
    logger.info("event=task-requeued session={} task={} reason=input-unavailable error=\"{}\"",
                id.session, id.n, result.getError().cStr());
    session.setTaskState(task, TaskNode::State::READY);
    pending.readyLater.push_back(task.id);
    return;
  }
  auto policy = task.spec.getPolicy();
  logger.info("event=task-failed session={} task={} attempt={} error=\"{}\"", id.session, id.n,
              task.attempt, result.getError().cStr());
  if (!task.children.empty()) {
    cancelChildren(session, task,
                   kj::str("cancelled: its parent task ", id.n, " failed", task.attempt <= policy.getRetries()
                                                                               ? " and is run again"
                                                                               : "")
                       .cStr());
  }
  if (task.attempt <= policy.getRetries()) {
    counters.taskRetries++;
    task.attempt++;
    session.setTaskState(task, TaskNode::State::READY);
    pending.ready.push_back(task.id);
    return;
  }
  session.setTaskState(task, TaskNode::State::FAILED);
  session.countDone(task);
  counters.tasksFailed++;
  record(session, task, result);
  if (task.isActor) actorEnded(session, session.actors.at(task.id.n));
  if (policy.getAllowFailure()) {
    abandon(session, task);
    return;
  }
  fail(session,
       kj::str(task.spec.getName().size() ? kj::str("task ", id.n, " (", task.spec.getName(), ")")
                                          : kj::str("task ", id.n),
               " failed", task.attempt > 1 ? kj::str(" (attempt ", task.attempt, ")") : kj::str(),
               ": ", result.getError())
           .cStr(),
       &task, result);
}

void SessionTable::killActor(Session& session, uint64_t n) {
  auto it = session.actors.find(n);
  SQUALL_REQUIRE(it != session.actors.end(), "task ", n, " of session ", session.id, " is not an actor");
  auto& actor = it->second;
  auto& task = *actor.task;
  if (task.done()) return;
  actor.killed = true;
  if (task.state == TaskNode::State::ASSIGNED) {
    pending.cancel.emplace_back(task.governor, task.id);
    task.governor = 0;
  }
  session.setTaskState(task, TaskNode::State::CANCELLED);
  task.error = "killed";
  logger.info("event=actor-killed session={} task={} calls_left={}", session.id, n, actor.calls.size());
  record(session, task, {});
  actorEnded(session, actor);
  taskDone(session, task);
}

void SessionTable::cancelTask(Session& session, uint64_t n) {
  auto it = session.tasks.find(n);
  SQUALL_REQUIRE(it != session.tasks.end(), "session ", session.id, " has no task ", n);
  auto& task = it->second;
  logger.info("event=task-cancelled session={} task={} children={}", session.id, n, task.children.size());
  cancelOne(session, task, "cancelled");
  cancelChildren(session, task, kj::str("cancelled: its parent task ", n, " was cancelled").cStr());
}

void SessionTable::cancelChildren(Session& session, TaskNode& parent, const std::string& why) {
  std::vector<TaskNode*> stack(parent.children.begin(), parent.children.end());
  while (!stack.empty()) {
    TaskNode* task = stack.back();
    stack.pop_back();
    stack.insert(stack.end(), task->children.begin(), task->children.end());
    cancelOne(session, *task, why);
  }
}

void SessionTable::cancelOne(Session& session, TaskNode& task, const std::string& why) {
  if (task.isActor) {
    killActor(session, task.id.n);  // nothing for one that has ended
    return;
  }
  if (task.done()) return;
  if (task.state == TaskNode::State::ASSIGNED) {
    pending.cancel.emplace_back(task.governor, task.id);
    task.governor = 0;
  }
  session.setTaskState(task, TaskNode::State::CANCELLED);
  session.countDone(task);
  task.error = why;
  record(session, task, {});
  abandon(session, task);
}

uint64_t SessionTable::reserveIds(Session& session, uint64_t count) {
  SQUALL_REQUIRE(count >= 1 && count <= MAX_ID_BLOCK, "reserveIds: ask for 1 to ", MAX_ID_BLOCK, " ids, not ",
                 count);
  uint64_t first = std::max(session.nextId, session.reservedUpTo);
  SQUALL_REQUIRE(first <= UINT64_MAX / 2, "session ", session.id, " has used up its ids");
  if (log != nullptr) log->idsReserved(session.id, first + count);
  session.reservedUpTo = first + count;
  return first;
}

void SessionTable::actorEnded(Session& session, ActorNode& actor) {
  if (!actor.name.empty()) {
    unname(session, actor, "it ended");
    closeIfNoNamedActorLives(session);
  }
  auto why = actor.killed ? kj::str("actor ", actor.task->id.n, " was killed before the call ran")
                          : kj::str("actor ", actor.task->id.n, " ended before the call ran",
                                    actor.task->error.empty() ? kj::str() : kj::str(": ", actor.task->error.c_str()));
  auto calls = std::move(actor.calls);
  actor.calls.clear();
  for (auto& [turn, call] : calls) {
    if (call->done()) continue;
    if (call->state == TaskNode::State::ASSIGNED) {
      // Its governor fails it too; that report is dropped.
      pending.cancel.emplace_back(call->governor, call->id);
      call->governor = 0;
    }
    session.setTaskState(*call, actor.killed ? TaskNode::State::CANCELLED : TaskNode::State::FAILED);
    session.countDone(*call);
    call->error = why.cStr();
    record(session, *call, {});
    abandon(session, *call);
    if (!call->children.empty()) {
      cancelChildren(session, *call, kj::str("cancelled: its parent task ", call->id.n, " ended with its actor").cStr());
    }
  }
}

void SessionTable::abandon(Session& session, TaskNode& failed) {
  std::vector<TaskNode*> stack = {&failed};
  while (!stack.empty()) {
    TaskNode* task = stack.back();
    stack.pop_back();
    auto skip = [&](TaskNode& skipped, std::string why) {
      session.setTaskState(skipped, TaskNode::State::SKIPPED);
      session.countDone(skipped);
      skipped.error = std::move(why);
      stack.push_back(&skipped);
    };
    for (auto* output : task->outputs) {
      output->state = ObjectNode::State::FAILED;
      notify(output->waiters);
      for (auto* list : {&output->consumers, &output->liveReaders}) {
        for (auto* consumer : *list) {
          if (consumer->state != TaskNode::State::WAITING &&
              consumer->state != TaskNode::State::READY) {
            continue;
          }
          skip(*consumer, kj::str("skipped: its input ", output->id.n, " was not made (task ",
                                  failed.id.n, " failed)")
                              .cStr());
        }
      }
    }
    // A stream group runs whole or not at all.
    if (task->group != nullptr) {
      for (auto* member : task->group->members) {
        if (member->state == TaskNode::State::WAITING || member->state == TaskNode::State::READY) {
          skip(*member, kj::str("skipped: task ", task->id.n,
                                ", joined to it by a stream, was not run")
                            .cStr());
        }
      }
    }
    taskDone(session, *task);
  }
}

void SessionTable::taskDone(Session& session, TaskNode& task) {
  notify(task.waiters);
  for (auto* input : task.inputs) releaseInput(*input);
  if (session.unfinishedTasks == 0) notify(session.allWaiters);
}

void SessionTable::finishTask(Session& session, TaskNode& task, wire::TaskResult::Reader result,
                              GovernorId from) {
  session.setTaskState(task, TaskNode::State::FINISHED);
  session.countDone(task);
  counters.tasksFinished++;
  if (task.actor != nullptr) {
    task.actor->callsDone++;
    counters.actorCallsFinished++;
  }
  logger.debug("event=task-finished session={} task={} governor={}", task.id.session, task.id.n, from);
  record(session, task, result);
  auto infos = result.getOutputs();
  for (uint i = 0; i < task.outputs.size(); i++) {
    auto& object = *task.outputs[i];
    object.state = ObjectNode::State::FINISHED;
    if (object.kind == wire::ObjectKind::STREAM && !object.persisted) {
      object.locations.clear();  // it flowed and is gone
    } else {
      object.locations = {from};
    }
    for (auto info : infos) {
      if (info.getId().getN() == object.id.n) {
        object.size = info.getSize();
        object.hash = info.getHash();
        counters.bytesProduced += object.size;
        bool keepBytes = info.getInlined() && object.keep && object.kind == wire::ObjectKind::BLOB &&
                         info.getData().size() == object.size && object.size <= CACHED_OUTPUT_BYTES;
        if (keepBytes) {
          object.data.assign(info.getData().begin(), info.getData().end());
        } else if (!object.constant) {
          object.data.clear();  // (made again: the bytes of before are not these)
        }
      }
    }
    for (auto* consumer : object.consumers) {
      if (consumer->done()) continue;  // (an object made again after a loss)
      if (--consumer->unfinishedInputs == 0 && consumer->state == TaskNode::State::WAITING &&
          session.state == Session::State::OPEN) {
        session.setTaskState(*consumer, TaskNode::State::READY);
        pending.ready.push_back(consumer->id);
      } else if (consumer->state == TaskNode::State::WAITING && consumer->inputs.size() > 1) {
        pending.inputFinished.push_back(consumer->id);
      }
    }
    notify(object.waiters);
  }
  for (size_t i = 0; i < task.inputs.size(); i++) {
    auto* input = task.inputs[i];
    if (task.liveInputs[i]) continue;  // read as it flowed, not held
    if (std::find(input->locations.begin(), input->locations.end(), from) == input->locations.end() &&
        input->state == ObjectNode::State::FINISHED) {
      // The governor fetched a copy to run the task; it holds it now.
      input->locations.push_back(from);
      counters.bytesFetched += input->size;
    }
  }
  taskDone(session, task);
  for (auto* output : task.outputs) maybeRemove(*output);
}

void SessionTable::record(Session& session, TaskNode& task, wire::TaskResult::Reader result) {
  if (log == nullptr || restoring) return;
  log->taskDone({session.id, task.id.n, static_cast<int32_t>(task.state), task.attempt,
                 task.governorName, task.startTimeUs, task.durationUs, task.exitStatus, task.error,
                 task.stdoutTail, task.stderrTail});
  for (auto info : result.getOutputs()) {
    log->objectChanged({session.id, info.getId().getN(), static_cast<int32_t>(ObjectNode::State::FINISHED),
                        info.getSize(), info.getHash(), {task.governorName}});
  }
}

void SessionTable::releaseInput(ObjectNode& object) {
  KJ_ASSERT(object.unfinishedConsumers > 0);
  object.unfinishedConsumers--;
  maybeRemove(object);
}

void SessionTable::maybeRemove(ObjectNode& object) {
  if (object.state == ObjectNode::State::FINISHED && !object.keep && object.unfinishedConsumers == 0) {
    removeNow(object);
  }
}

void SessionTable::removeNow(ObjectNode& object) {
  object.state = ObjectNode::State::REMOVED;
  for (auto g : object.locations) pending.remove.emplace_back(g, object.id);
  object.locations.clear();
  object.data = {};
  object.data.shrink_to_fit();
}

void SessionTable::fail(Session& session, std::string message, const TaskNode* task,
                        wire::TaskResult::Reader result) {
  if (session.state != Session::State::OPEN) return;
  session.state = Session::State::FAILED;
  session.failureMessage = std::move(message);
  if (task != nullptr) {
    session.failedTask = task->id.n;
    session.failedTaskName = task->spec.getName().cStr();
    session.failedExitStatus = result.getExitStatus();
    session.failedStderrTail = result.getStderrTail().cStr();
  }
  logger.info("event=session-failed session={} reason=\"{}\"", session.id, session.failureMessage);
  if (log != nullptr && !restoring) log->sessionFailed(session.id, session.failureMessage);
  for (auto& [n, t] : session.tasks) {
    switch (t.state) {
      case TaskNode::State::ASSIGNED:
        pending.cancel.emplace_back(t.governor, t.id);
        t.governor = 0;
        [[fallthrough]];
      case TaskNode::State::WAITING:
      case TaskNode::State::READY:
        session.setTaskState(t, TaskNode::State::CANCELLED);
        session.countDone(t);
        break;
      default:
        break;
    }
  }
  forgetNames(session, kj::str("its session failed: ", session.failureMessage.c_str()).cStr());
  notifyAll(session);
}

void SessionTable::unkeep(Session& session, capnp::List<uint64_t>::Reader ids) {
  for (auto n : ids) {
    auto it = session.objects.find(n);
    SQUALL_REQUIRE(it != session.objects.end(), "unkeep: unknown object ", n);
    if (it->second.keep && log != nullptr && !restoring) log->objectUnkept(session.id, n);
    it->second.keep = false;
    maybeRemove(it->second);
  }
}

kj::Promise<void> SessionTable::wait(Session& session, capnp::List<uint64_t>::Reader ids, bool any) {
  auto waiter = std::make_shared<Waiter>();
  waiter->session = &session;
  waiter->any = any;
  std::vector<std::vector<std::shared_ptr<Waiter>>*> lists;
  size_t done = 0;
  // A client may name an id many times: each counts once, so what is held
  // until the wait ends grows with the session, not with the request.
  std::unordered_set<uint64_t> seen;
  for (auto n : ids) {
    if (!seen.insert(n).second) continue;
    auto oit = session.objects.find(n);
    if (oit != session.objects.end()) {
      if (oit->second.state != ObjectNode::State::UNFINISHED) {
        done++;
      } else {
        lists.push_back(&oit->second.waiters);
      }
      continue;
    }
    auto tit = session.tasks.find(n);
    SQUALL_REQUIRE(tit != session.tasks.end(), "wait: unknown task or object ", n);
    if (tit->second.done()) {
      done++;
    } else {
      lists.push_back(&tit->second.waiters);
    }
    waiter->ids.push_back(n);
  }
  if (session.state != Session::State::OPEN) return kj::READY_NOW;
  if (ids.size() == 0) {
    if (session.unfinishedTasks == 0) return kj::READY_NOW;
    lists = {&session.allWaiters};
    waiter->remaining = 1;
  } else {
    if (lists.empty() || (any && done > 0)) return kj::READY_NOW;
    waiter->remaining = any ? 1 : lists.size();
  }
  auto& every = session.everyWaiter;
  if (every.size() > 1024) {
    // Done, or given up by its client (a wait allows cancellation).
    every.erase(std::remove_if(every.begin(), every.end(),
                               [](const std::shared_ptr<Waiter>& w) {
                                 return w->remaining == 0 || (w->fulfiller && !w->fulfiller->isWaiting());
                               }),
                every.end());
  }
  every.push_back(waiter);
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiter->fulfiller = kj::mv(paf.fulfiller);
  for (auto* list : lists) list->push_back(waiter);
  return kj::mv(paf.promise);
}

void SessionTable::notify(std::vector<std::shared_ptr<Waiter>>& waiters) {
  for (auto& waiter : waiters) {
    if (waiter->remaining > 0 && --waiter->remaining == 0 && waiter->fulfiller) {
      waiter->fulfiller->fulfill();
    }
  }
  waiters.clear();
}

void SessionTable::notifyAll(Session& session) {
  for (auto& waiter : session.everyWaiter) {
    if (waiter->remaining > 0 && waiter->fulfiller) {
      waiter->remaining = 0;
      waiter->fulfiller->fulfill();
    }
  }
  session.everyWaiter.clear();
  session.allWaiters.clear();
}

}  // namespace squall
