// SessionTable, continued (session-table.h): what changes when a governor
// goes or comes back. Its tasks run again elsewhere (an actor restarts,
// counted against max_restarts), the objects only it held are made again
// from their producers, and a governor that registers again has its
// running tasks and held objects adopted. Loop thread only.
#include "session-table.h"

#include <algorithm>
#include <unordered_set>
#include <kj/debug.h>
#include <squall/proto/errors.h>

namespace squall {

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
      if (task.isActor) {
        // Its process went with the governor: a restart elsewhere, counted
        // against max_restarts (the server's count: the governor's went
        // with it), or its end.
        auto& actor = session->actors.at(id.n);
        if (actor.lostRestarts >= task.spec.getConfig().getActor().getMaxRestarts()) {
          failLost(*session, task,
                   kj::str("its governor ", name, " was lost (max_restarts ",
                           task.spec.getConfig().getActor().getMaxRestarts(), " used up)")
                       .cStr());
          continue;
        }
        actor.lostRestarts++;
        actor.heldBy = 0;  // until a governor answers its next assignment
      }
      logger.info("event=task-requeued session={} task={} reason=governor-lost governor={}",
                  id.session, id.n, name.cStr());
      session->setTaskState(task, TaskNode::State::WAITING);
      touched.emplace_back(session, &task);
    }
  }
  locationsLost(governor, name, [](const ObjectNode&) { return false; }, touched);
  for (auto& [session, task] : touched) {
    if (session->state == Session::State::OPEN && !task->done()) requeue(*session, *task);
  }
}

void SessionTable::failLost(Session& session, TaskNode& task, const std::string& error) {
  logger.info("event=task-failed session={} task={} error=\"{}\"", session.id, task.id.n, error);
  session.setTaskState(task, TaskNode::State::FAILED);
  session.countDone(task);
  counters.tasksFailed++;
  task.error = error;
  record(session, task, {});
  if (task.isActor) actorEnded(session, session.actors.at(task.id.n));
  if (!task.children.empty()) {
    cancelChildren(session, task, kj::str("cancelled: its parent task ", task.id.n, " failed").cStr());
  }
  if (task.spec.getPolicy().getAllowFailure()) {
    abandon(session, task);
    return;
  }
  fail(session,
       kj::str(task.spec.getName().size() ? kj::str("task ", task.id.n, " (", task.spec.getName(), ")")
                                          : kj::str("task ", task.id.n),
               " failed: ", error.c_str())
           .cStr(),
       &task);
}

void SessionTable::locationsLost(GovernorId governor, kj::StringPtr name,
                                 const std::function<bool(const ObjectNode&)>& held,
                                 std::vector<std::pair<Session*, TaskNode*>>& touched) {
  for (auto& [sid, session] : sessions) {
    std::vector<TaskNode*> changed;
    for (auto& [n, object] : session.objects) {
      auto it = std::find(object.locations.begin(), object.locations.end(), governor);
      if (it == object.locations.end() || held(object)) continue;
      object.locations.erase(it);
      if (object.locations.empty() && !object.constant &&
          object.state == ObjectNode::State::FINISHED &&
          (object.keep || object.unfinishedConsumers > 0) && session.state == Session::State::OPEN) {
        if (!remake(session, object, name, changed)) break;
      }
    }
    for (auto* task : changed) touched.emplace_back(&session, task);
  }
}

std::vector<TaskNode*> SessionTable::governorReturned(GovernorId governor, kj::StringPtr name,
                                                      capnp::List<wire::Id>::Reader tasks,
                                                      capnp::List<wire::ObjectInfo>::Reader objects,
                                                      capnp::List<wire::Id>::Reader direct) {
  std::vector<TaskNode*> adopted;
  std::unordered_set<Id, IdHash> sentDirectly;
  for (auto wireId : direct) sentDirectly.insert(Id::from(wireId));
  // Neither a task nor an object the table knows, and sent directly.
  auto unknownDirect = [&](Id id) {
    if (sentDirectly.count(id) == 0) return false;
    KJ_IF_MAYBE(session, find(id.session)) {
      return session->tasks.count(id.n) == 0 && session->objects.count(id.n) == 0;
    }
    return true;
  };
  for (auto wireId : tasks) {
    auto id = Id::from(wireId);
    if (unknownDirect(id)) continue;
    TaskNode* task = nullptr;
    KJ_IF_MAYBE(session, find(id.session)) {
      auto it = session->tasks.find(id.n);
      if (it != session->tasks.end() && session->state == Session::State::OPEN &&
          it->second.group == nullptr &&
          (it->second.state == TaskNode::State::READY || it->second.state == TaskNode::State::WAITING)) {
        task = &it->second;
        session->setTaskState(*task, TaskNode::State::ASSIGNED);
        task->governor = governor;
        adopted.push_back(task);
        // Its calls may follow it now (Scheduler::placeCalls).
        if (task->isActor) pending.actorsPlaced.push_back(task->id);
      } else if (it != session->tasks.end() && it->second.state == TaskNode::State::ASSIGNED &&
                 it->second.governor == governor) {
        task = &it->second;  // ours already
      }
      // An actor it reported: clients' calls may go to it directly.
      if (task != nullptr && task->isActor) session->actors.at(id.n).heldBy = governor;
    }
    if (task == nullptr) {
      // Done, running elsewhere, or of a closed session; a live-stream task
      // cannot be taken over either (its peers were started again).
      pending.cancel.emplace_back(governor, id);
    }
  }
  std::unordered_set<Id, IdHash> reported;
  for (auto info : objects) {
    auto id = Id::from(info.getId());
    reported.insert(id);
    if (unknownDirect(id)) continue;
    bool wanted = false;
    KJ_IF_MAYBE(session, find(id.session)) {
      auto it = session->objects.find(id.n);
      if (it != session->objects.end()) {
        auto& object = it->second;
        if (object.state == ObjectNode::State::FINISHED && !object.constant &&
            (object.keep || object.unfinishedConsumers > 0)) {
          wanted = true;
          if (std::find(object.locations.begin(), object.locations.end(), governor) ==
              object.locations.end()) {
            object.locations.push_back(governor);
          }
        } else if (object.state == ObjectNode::State::UNFINISHED && object.producer != nullptr &&
                   object.producer->state == TaskNode::State::ASSIGNED &&
                   object.producer->governor == governor) {
          wanted = true;  // its producer's result is on its way
        }
      }
    }
    if (!wanted) pending.remove.emplace_back(governor, id);
  }
  std::vector<std::pair<Session*, TaskNode*>> touched;
  locationsLost(governor, name, [&](const ObjectNode& object) { return reported.count(object.id) > 0; },
                touched);
  for (auto& [session, task] : touched) {
    if (session->state == Session::State::OPEN && !task->done()) requeue(*session, *task);
  }
  logger.info("event=governor-returned governor={} name={} tasks_adopted={} tasks_reported={} "
              "objects_reported={}",
              governor, name.cStr(), adopted.size(), tasks.size(), objects.size());
  return adopted;
}

bool SessionTable::remake(Session& session, ObjectNode& lost, kj::StringPtr governor,
                          std::vector<TaskNode*>& touched) {
  std::vector<ObjectNode*> stack = {&lost};
  while (!stack.empty()) {
    auto* object = stack.back();
    stack.pop_back();
    if (object->state == ObjectNode::State::UNFINISHED) continue;  // already on its way
    auto* producer = object->producer;
    if (producer == nullptr && !object->uploadedTo.empty()) {
      // A constant uploaded to a governor has no lineage: its bytes were
      // only there.
      fail(session, kj::str("constant ", object->id.n, " (", object->size, " bytes, uploaded to governor ",
                            object->uploadedTo.c_str(), ") was lost with governor ", governor,
                            " and cannot be made again: submit it again")
                        .cStr());
      return false;
    }
    if (object->kind == wire::ObjectKind::STREAM || producer == nullptr || producer->group != nullptr) {
      fail(session, kj::str("object ", object->id.n, " was lost with governor ", governor,
                            " and cannot be made again: its task ",
                            producer ? producer->id.n : 0, " reads or writes a live stream")
                        .cStr());
      return false;
    }
    if (producer->actor != nullptr) {
      // A method call ran on its actor's state: running it again would
      // change that state twice. What it made is lost; what reads it is
      // skipped.
      logger.info("event=object-lost session={} object={} task={} governor={} reason=actor-call", session.id,
                  object->id.n, producer->id.n, governor.cStr());
      object->state = ObjectNode::State::FAILED;
      object->locations.clear();
      notify(object->waiters);
      for (auto* consumer : object->consumers) {
        if (consumer->state != TaskNode::State::WAITING && consumer->state != TaskNode::State::READY) continue;
        session.setTaskState(*consumer, TaskNode::State::SKIPPED);
        session.countDone(*consumer);
        consumer->error = kj::str("skipped: its input ", object->id.n, " was lost with governor ", governor,
                                  " (made by method call ", producer->id.n, ", which is not run twice)")
                              .cStr();
        abandon(session, *consumer);
      }
      continue;
    }
    logger.info("event=object-remade session={} object={} task={} governor={}", session.id,
                object->id.n, producer->id.n, governor.cStr());
    // The producer runs again: every output of it is made anew, and its
    // inputs are needed again.
    if (producer->done()) {
      session.setTaskState(*producer, TaskNode::State::WAITING);
      session.countUndone(*producer);
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
  // A run that went (with its governor) may have submitted tasks: the next
  // run submits its own.
  if (!task.children.empty()) {
    cancelChildren(session, task, kj::str("cancelled: its parent task ", task.id.n, " is run again").cStr());
  }
  bool ready = task.unfinishedInputs == 0;
  if (ready && task.state != TaskNode::State::READY) {
    session.setTaskState(task, TaskNode::State::READY);
    pending.ready.push_back(task.id);
  } else if (!ready && task.state != TaskNode::State::WAITING) {
    session.setTaskState(task, TaskNode::State::WAITING);
  }
}

}  // namespace squall
