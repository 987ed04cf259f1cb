// Actors in the client (see client.h: Session::getActor, Actor): a named
// actor found on the server, and an actor's calls, settings and kill.
// Session::actor, which makes one, is with the other builders in
// session.cpp. Thread: the one that created the Client.
#include "client-impl.h"

#include <squall/proto/errors.h>

namespace squall {

Actor Session::getActor(const std::string& name) {
  impl->checkOpen();
  uint64_t session = 0, n = 0;
  std::string type;
  impl->client.retrying([&]() {
    auto req = impl->client.svc().findActorRequest();
    req.setName(name);
    auto found = req.send().wait(impl->client.waitScope());
    session = found.getSession();
    n = found.getActor();
    type = found.getType();
  });
  client::SessionImpl* owner = impl.get();
  if (session != impl->id) {
    // Its calls are tasks of its own session, through a handle on it.
    auto& handle = impl->foreign[session];
    if (handle == nullptr) {
      // Named by the incarnation that answered findActor: this handle's.
      handle = std::make_unique<client::SessionImpl>(impl->client, session, impl->incarnation);
      handle->owned = false;
      handle->foreignHandle = true;
      handle->nextN = 0;
      handle->blockEnd = 0;
    }
    owner = handle.get();
  }
  owner->actorTypes[n] = type;
  return Actor(owner, n);
}

Actor& Actor::named(std::string name) {
  session->pendingTask(n).actorName = std::move(name);
  return *this;
}

Task Actor::call(const std::string& method, const std::vector<DataObject>& inputs, std::string config,
                 const std::vector<ObjectKind>& outputs) {
  if (method.empty() || method.find('.') != std::string::npos || method.find('/') != std::string::npos) {
    throw Error("actor call: '" + method + "' is not a method name");
  }
  for (auto& input : inputs) {
    if (input.session != session) {
      throw Error("actor call: object " + std::to_string(input.id()) + " is of another session than actor " +
                  std::to_string(n) + " (a named actor of another session reads objects of its own: pass bytes "
                  "as the call's config)");
    }
  }
  auto known = session->actorTypes.find(n);
  std::string type = known != session->actorTypes.end() ? known->second : "actor " + std::to_string(n);
  auto& task = session->newTask(client::LocalTask::Type::ACTOR_CALL, outputs);
  task.actor = n;
  task.function = method;
  task.callConfig = std::move(config);
  task.name = type + "." + method;
  // A call on another session's actor must not fail that session (which
  // would end the actor for everyone): it may fail, and its caller hears
  // of it from wait() and fetch() as usual.
  task.allowFailure = session->foreignHandle;
  for (auto& input : inputs) task.inputs.push_back({input.id(), "", ""});
  return Task(session, task.n);
}

Task Actor::task() const { return Task(session, n); }

Actor& Actor::maxRestarts(uint32_t count) {
  session->pendingTask(n).maxRestarts = count;
  return *this;
}

Actor& Actor::maxCallRetries(uint32_t count) {
  session->pendingTask(n).maxCallRetries = count;
  return *this;
}

Actor& Actor::resource(const std::string& name, double amount) {
  task().resource(name, amount);
  return *this;
}

Actor& Actor::resource(const std::string& name, const std::string& amount) {
  task().resource(name, amount);
  return *this;
}

uint64_t Actor::sessionId() const { return session->id; }

Actor& Actor::cpus(uint32_t count) {
  task().cpus(count);
  return *this;
}

void Actor::kill() {
  // Its next calls go through the server, which says it has ended.
  session->actorPlaces.erase(n);
  session->checkOpen();
  if (session->taskIndex.count(n) != 0) {
    throw Error("actor " + std::to_string(n) + " is not submitted yet: kill it after submit (or leave it out)");
  }
  session->client.retrying([&]() {
    auto req = session->client.svc().killActorRequest();
    session->name(req);
    req.setActor(n);
    req.send().wait(session->client.waitScope());
  });
}

}  // namespace squall
