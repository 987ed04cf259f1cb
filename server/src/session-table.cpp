#include "session-table.h"

#include <algorithm>
#include <kj/debug.h>
#include <squall/proto/errors.h>

namespace squall {

Session& SessionTable::open(std::string name, const void* owner) {
  uint64_t id = nextSession++;
  auto& session = sessions[id];
  session.id = id;
  session.name = std::move(name);
  session.owner = owner;
  logger.info("event=session-open session={} name=\"{}\"", id, session.name);
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

void SessionTable::close(uint64_t id) {
  auto it = sessions.find(id);
  if (it == sessions.end()) return;
  auto& session = it->second;
  for (auto& [n, task] : session.tasks) {
    if (task.state == TaskNode::State::ASSIGNED) pending.cancel.emplace_back(task.governor, task.id);
  }
  for (auto& [n, object] : session.objects) {
    for (auto g : object.locations) pending.remove.emplace_back(g, object.id);
  }
  if (onClose) onClose(session);
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
    if (session.owner == owner) ids.push_back(id);
  }
  for (auto id : ids) close(id);
}

void SessionTable::submitted(Session& session, std::vector<TaskNode*> ready) {
  for (auto* task : ready) pending.ready.push_back(task->id);
  (void)session;
}

void SessionTable::assigned(TaskNode& task, GovernorId governor) {
  auto& session = sessions.at(task.id.session);
  session.setTaskState(task, TaskNode::State::ASSIGNED);
  task.governor = governor;
}

void SessionTable::taskResult(wire::TaskResult::Reader result, GovernorId from,
                              kj::StringPtr fromName) {
  auto id = Id::from(result.getId());
  auto orphanOutputs = [&]() {
    for (auto output : result.getOutputs()) pending.remove.emplace_back(from, Id::from(output.getId()));
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
  auto policy = task.spec.getPolicy();
  logger.info("event=task-failed session={} task={} attempt={} error=\"{}\"", id.session, id.n,
              task.attempt, result.getError().cStr());
  if (task.attempt <= policy.getRetries()) {
    counters.taskRetries++;
    task.attempt++;
    session.setTaskState(task, TaskNode::State::READY);
    pending.ready.push_back(task.id);
    return;
  }
  session.setTaskState(task, TaskNode::State::FAILED);
  session.unfinishedTasks--;
  counters.tasksFailed++;
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

void SessionTable::abandon(Session& session, TaskNode& failed) {
  std::vector<TaskNode*> stack = {&failed};
  while (!stack.empty()) {
    TaskNode* task = stack.back();
    stack.pop_back();
    auto skip = [&](TaskNode& skipped, std::string why) {
      session.setTaskState(skipped, TaskNode::State::SKIPPED);
      session.unfinishedTasks--;
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
  session.unfinishedTasks--;
  counters.tasksFinished++;
  logger.debug("event=task-finished session={} task={} governor={}", task.id.session, task.id.n, from);
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
      }
    }
    for (auto* consumer : object.consumers) {
      if (consumer->done()) continue;  // (an object made again after a loss)
      if (--consumer->unfinishedInputs == 0 && consumer->state == TaskNode::State::WAITING &&
          session.state == Session::State::OPEN) {
        session.setTaskState(*consumer, TaskNode::State::READY);
        pending.ready.push_back(consumer->id);
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
  for (auto& [n, t] : session.tasks) {
    switch (t.state) {
      case TaskNode::State::ASSIGNED:
        pending.cancel.emplace_back(t.governor, t.id);
        t.governor = 0;
        [[fallthrough]];
      case TaskNode::State::WAITING:
      case TaskNode::State::READY:
        session.setTaskState(t, TaskNode::State::CANCELLED);
        session.unfinishedTasks--;
        break;
      default:
        break;
    }
  }
  notifyAll(session);
}

void SessionTable::governorLost(GovernorId governor, kj::StringPtr name,
                                const std::vector<Id>& assigned) {
  std::vector<std::pair<Session*, TaskNode*>> touched;
  for (auto id : assigned) {
    KJ_IF_MAYBE(session, find(id.session)) {
      auto it = session->tasks.find(id.n);
      if (it == session->tasks.end() || it->second.state != TaskNode::State::ASSIGNED ||
          it->second.governor != governor) {
        continue;
      }
      auto& task = it->second;
      task.governor = 0;
      if (task.group != nullptr) {
        fail(*session, kj::str("governor ", name, " disconnected while running task ", id.n,
                               task.spec.getName().size() ? kj::str(" (", task.spec.getName(), ")")
                                                          : kj::str(),
                               ", which reads or writes a live stream; a stream cannot be resumed")
                           .cStr());
        continue;
      }
      logger.info("event=task-requeued session={} task={} reason=governor-lost governor={}",
                  id.session, id.n, name.cStr());
      session->setTaskState(task, TaskNode::State::WAITING);
      touched.emplace_back(session, &task);
    }
  }
  for (auto& [sid, session] : sessions) {
    std::vector<TaskNode*> changed;
    for (auto& [n, object] : session.objects) {
      auto it = std::find(object.locations.begin(), object.locations.end(), governor);
      if (it == object.locations.end()) continue;
      object.locations.erase(it);
      if (object.locations.empty() && !object.constant &&
          object.state == ObjectNode::State::FINISHED &&
          (object.keep || object.unfinishedConsumers > 0) && session.state == Session::State::OPEN) {
        if (!remake(session, object, name, changed)) break;
      }
    }
    for (auto* task : changed) touched.emplace_back(&session, task);
  }
  for (auto& [session, task] : touched) {
    if (session->state == Session::State::OPEN && !task->done()) requeue(*session, *task);
  }
}

bool SessionTable::remake(Session& session, ObjectNode& lost, kj::StringPtr governor,
                          std::vector<TaskNode*>& touched) {
  std::vector<ObjectNode*> stack = {&lost};
  while (!stack.empty()) {
    auto* object = stack.back();
    stack.pop_back();
    if (object->state == ObjectNode::State::UNFINISHED) continue;  // already on its way
    auto* producer = object->producer;
    if (object->kind == wire::ObjectKind::STREAM || producer == nullptr || producer->group != nullptr) {
      fail(session, kj::str("object ", object->id.n, " was lost with governor ", governor,
                            " and cannot be made again: its task ",
                            producer ? producer->id.n : 0, " reads or writes a live stream")
                        .cStr());
      return false;
    }
    logger.info("event=object-remade session={} object={} task={} governor={}", session.id,
                object->id.n, producer->id.n, governor.cStr());
    // The producer runs again: every output of it is made anew, and its
    // inputs are needed again.
    if (producer->done()) {
      session.setTaskState(*producer, TaskNode::State::WAITING);
      session.unfinishedTasks++;
      touched.push_back(producer);
      for (auto* input : producer->inputs) {
        input->unfinishedConsumers++;
        bool gone = input->state == ObjectNode::State::REMOVED ||
                    (input->state == ObjectNode::State::FINISHED && input->locations.empty() &&
                     !input->constant);
        if (gone) stack.push_back(input);
      }
    }
    for (auto* output : producer->outputs) {
      if (output->state != ObjectNode::State::FINISHED && output->state != ObjectNode::State::REMOVED) {
        continue;
      }
      output->state = ObjectNode::State::UNFINISHED;
      for (auto g : output->locations) pending.remove.emplace_back(g, output->id);
      output->locations.clear();
      for (auto* consumer : output->consumers) {
        if (!consumer->done()) touched.push_back(consumer);
      }
    }
  }
  return true;
}

void SessionTable::requeue(Session& session, TaskNode& task) {
  task.unfinishedInputs = 0;
  for (size_t i = 0; i < task.inputs.size(); i++) {
    if (!task.liveInputs[i] && task.inputs[i]->state != ObjectNode::State::FINISHED) {
      task.unfinishedInputs++;
    }
  }
  if (task.state == TaskNode::State::ASSIGNED) {
    // Still running elsewhere: it finishes, or fails and comes back here.
    return;
  }
  bool ready = task.unfinishedInputs == 0;
  if (ready && task.state != TaskNode::State::READY) {
    session.setTaskState(task, TaskNode::State::READY);
    pending.ready.push_back(task.id);
  } else if (!ready && task.state != TaskNode::State::WAITING) {
    session.setTaskState(task, TaskNode::State::WAITING);
  }
}

void SessionTable::unkeep(Session& session, capnp::List<uint64_t>::Reader ids) {
  for (auto n : ids) {
    auto it = session.objects.find(n);
    SQUALL_REQUIRE(it != session.objects.end(), "unkeep: unknown object ", n);
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
  for (auto n : ids) {
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
    every.erase(std::remove_if(every.begin(), every.end(),
                               [](const std::shared_ptr<Waiter>& w) { return w->remaining == 0; }),
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
