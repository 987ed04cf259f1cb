// Actor calls sent here directly. Loop thread only.
#include "direct-calls.h"

#include "task-queue.h"

#include <capnp/serialize.h>
#include <squall/proto/errors.h>

namespace squall {

// Held by a direct call's outcome: the call is forgotten with it.
class DirectCalls::Forget final : public OutcomeWatch {
 public:
  Forget(DirectCalls& calls, Id id) : calls(calls), alive(calls.alive), id(id) {}
  ~Forget() noexcept(false) {
    if (!*alive) return;
    auto it = calls.calls.find(id);
    if (it == calls.calls.end()) return;
    for (auto& object : it->second.objects) calls.claimed.erase(object);
    calls.calls.erase(it);
  }

 private:
  DirectCalls& calls;
  std::shared_ptr<bool> alive;
  Id id;
};

kj::Maybe<kj::String> DirectCalls::refusal(wire::Graph::Reader call, Objects& objects) {
  if (call.getTasks().size() != 1) return kj::str("a direct call carries one task, not ", call.getTasks().size());
  auto task = call.getTasks()[0];
  if (!task.getConfig().isActorCall()) return kj::str("task ", task.getId().getN(), " is not an actor call");
  Id id = Id::from(task.getId());
  uint64_t session = id.session;
  if (calls.count(id) != 0) return kj::str("call ", id, " is here already");
  // Its outputs and the constants it reads, each once, and nothing else.
  for (auto object : call.getObjects()) {
    if (object.getId().getSession() != session || !objects.emplace(object.getId().getN(), object).second) {
      return kj::str("object ", object.getId().getN(), " of a direct call is given twice or is of another session");
    }
  }
  size_t used = 0;
  for (auto output : task.getOutputs()) {
    auto it = objects.find(output.getN());
    if (output.getSession() != session || it == objects.end() || it->second.getIsConstant() ||
        it->second.getKind() == wire::ObjectKind::STREAM) {
      return kj::str("output ", output.getN(), " of a direct call must be given as a blob or dir it makes");
    }
    used++;
  }
  std::unordered_set<uint64_t> inputs;
  for (auto input : task.getInputs()) {
    auto it = objects.find(input.getObject().getN());
    if (input.getObject().getSession() != session || it == objects.end() || !it->second.getIsConstant()) {
      return kj::str("input ", input.getObject().getN(), " of a direct call must be a constant sent with it");
    }
    if (inputs.insert(input.getObject().getN()).second) used++;
  }
  if (used != objects.size()) return kj::str("a direct call carries objects it does not use");
  // The actor of its own session (as a submit's calls must be): a call
  // may not run on, nor be recorded in, another session's.
  Id actor = Id::from(task.getConfig().getActorCall().getActor());
  if (actor.session != session) return kj::str("actor ", actor, " is not of the call's session ", session);
  if (actors.typeOf(actor) == nullptr) return kj::str("actor ", actor, " is not on governor ", governorName);
  // Every id new here, as a submit's are in its session: a call does not
  // store over an object held here (another call's or task's output, a
  // kept result), nor take the id of a task this governor has.
  KJ_IF_MAYBE(taskQueue, queue) {
    if (taskQueue->holds(id)) return kj::str("task ", id, " is here already");
  }
  for (auto& entry : objects) {
    Id object{session, entry.first};
    if (store.find(object) != nullptr || store.whenArrived(object) != nullptr || claimed.count(object) != 0) {
      return kj::str("object ", object, " of a direct call is held here already");
    }
  }
  return nullptr;
}

kj::Promise<DirectCallPort::Answer> DirectCalls::callActor(wire::Graph::Reader call) {
  Objects objects;
  KJ_IF_MAYBE(why, refusal(call, objects)) {
    logger.debug("event=direct-call-refused why=\"{}\"", why->cStr());
    return Answer{kj::Own<capnp::MallocMessageBuilder>(), kj::mv(*why)};
  }
  auto& taskQueue = KJ_ASSERT_NONNULL(queue);
  auto task = call.getTasks()[0];
  Id id = Id::from(task.getId());
  // The constants first, so that the call finds them (as with assign).
  for (auto object : call.getObjects()) {
    if (object.getIsConstant()) store.putConstant(Id::from(object.getId()), object.getKind(), object.getData());
  }
  Call entry;
  for (auto output : task.getOutputs()) entry.outputs.push_back(Id::from(output));
  for (auto object : call.getObjects()) {
    entry.objects.push_back(Id::from(object.getId()));
    claimed.insert(entry.objects.back());
  }
  {
    capnp::MallocMessageBuilder copy(call.totalSize().wordCount + 8);
    copy.setRoot(call);
    entry.graph = capnp::messageToFlatArray(copy);
  }
  auto paf = kj::newPromiseAndFulfiller<Answer>();
  entry.answer = kj::mv(paf.fulfiller);
  calls.emplace(id, kj::mv(entry));
  // Queued as the server's assignment would be.
  capnp::MallocMessageBuilder message(call.totalSize().wordCount + 64);
  auto assignment = message.initRoot<wire::Assignment>();
  assignment.setTask(task);
  auto locations = assignment.initInputs(task.getInputs().size());
  for (uint i = 0; i < locations.size(); i++) {
    auto constant = objects.at(task.getInputs()[i].getObject().getN());
    locations[i].setKind(constant.getKind());
    locations[i].setSize(constant.getData().size());
  }
  auto kinds = assignment.initOutputKinds(task.getOutputs().size());
  for (uint i = 0; i < kinds.size(); i++) {
    auto output = objects.at(task.getOutputs()[i].getN());
    kinds.set(i, output.getKind());
    // Its answer carries kept small outputs to the client that waits.
    if (output.getKeep()) assignment.setInlineOutputBytes(DIRECT_ANSWER_BYTES);
  }
  logger.debug("event=direct-call task={}", kj::str(id).cStr());
  taskQueue.assign(assignment.asReader());
  return kj::mv(paf.promise);
}

void DirectCalls::ended(TaskOutcome& outcome) {
  if (outcome.notStarted) return;
  auto it = calls.find(outcome.id);
  if (it == calls.end() || it->second.graph.size() == 0) return;
  auto& call = it->second;
  auto result = kj::heap<capnp::MallocMessageBuilder>();
  outcome.toWire(result->initRoot<wire::TaskResult>());
  outcome.direct = kj::mv(call.graph);
  outcome.watch = kj::heap<Forget>(*this, outcome.id);
  call.answer->fulfill(Answer{kj::mv(result), kj::str()});
}

kj::Promise<void> DirectCalls::record(Id task) {
  auto it = calls.find(task);
  if (it == calls.end() || it->second.graph.size() == 0) return kj::READY_NOW;
  auto& call = it->second;
  KJ_IF_MAYBE(r, call.recorded) { return r->addBranch(); }
  KJ_IF_MAYBE(send, sendRecord) {
    capnp::FlatArrayMessageReader reader(call.graph);
    KJ_IF_MAYBE(sent, (*send)(reader.getRoot<wire::Graph>())) {
      logger.debug("event=direct-call-recorded-early task={}", kj::str(task).cStr());
      call.recorded = sent->fork();
      return KJ_ASSERT_NONNULL(call.recorded).addBranch();
    }
  }
  return SQUALL_EXCEPTION(DISCONNECTED, "the server cannot be reached to record call ", task,
                          ", which its client sent governor ", governorName, " directly");
}

std::vector<Id> DirectCalls::pending() const {
  std::vector<Id> ids;
  for (auto& [id, call] : calls) {
    ids.push_back(id);
    ids.insert(ids.end(), call.outputs.begin(), call.outputs.end());
  }
  return ids;
}

}  // namespace squall
