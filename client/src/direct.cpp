// Actor calls sent to their actor's governor directly, skipping the server
// (docs/actors.md, "Calls that skip the server"; client-impl.h DirectCall).
// A call made and waited for is then one round trip to the governor
// instead of client -> server -> governor -> server -> client. The server
// records each from the governor's report (TaskResult.direct), or from
// recordDirect when this client names the call to it first (a submit
// reading its outputs, a fetch, a cancel, a failure to wait for). Thread:
// the client's.
#include "client-impl.h"

#include <capnp/serialize.h>
#include <kj/debug.h>
#include <squall/proto/errors.h>

namespace squall {
namespace client {

namespace {

// How long before the server is asked again where an actor runs, when it
// was not placed yet (its calls meanwhile go through the server).
constexpr kj::Duration ASK_AGAIN = 200 * kj::MILLISECONDS;
// Submits of more calls go through the server, which places them in
// batches: a call of its own is a round trip to the governor for each,
// and on 2 cores 2,000 calls submitted at once ran at about half the rate
// through the server's batches (docs/benchmarks.md). What the direct way
// saves is latency, which is what a call made and waited for pays.
constexpr size_t MAX_DIRECT_CALLS = 8;
// Answered direct calls a session keeps; beyond, the answered ones are
// recorded and forgotten (waits for them then go to the server).
constexpr size_t KEEP_DIRECT = 4096;
// How long a governor is given to say which calls it has, once their
// connection broke before their answers (cutOff); those it has not said it
// has by then are placed anew.
constexpr kj::Duration ASK_HELD_TIMEOUT = 10 * kj::SECONDS;

}  // namespace

bool directCallsAllowed() {
  const char* value = getenv("SQUALL_DIRECT_CALLS");
  if (value == nullptr) return true;
  std::string v = value;
  return !(v == "0" || v == "no" || v == "off" || v == "false");
}

const SessionImpl::ActorPlace& SessionImpl::actorPlace(uint64_t actor) {
  auto& place = actorPlaces[actor];
  if (!place.address.empty()) return place;
  auto now = client.loop.provider->getTimer().now();
  if (now < place.askAgain) return place;
  place.askAgain = now + ASK_AGAIN;
  try {
    auto req = client.svc().locateActorRequest();
    name(req);
    req.setActor(actor);
    auto answer = req.send().wait(client.waitScope());
    place.address = answer.getAddress().cStr();
    place.methods.clear();
    for (auto m : answer.getMethods()) place.methods[m.getName().cStr()] = m.getOutputs();
  } catch (const kj::Exception& e) {
    // A server that predates locateActor (capnp answers UNIMPLEMENTED for
    // a method the peer does not have): every call goes through it, as
    // before direct calls. Any other error (the actor is not one) is the
    // server's to say at submit.
    if (e.getType() == kj::Exception::Type::UNIMPLEMENTED) directOff = true;
    if (e.getType() == kj::Exception::Type::DISCONNECTED) throw;
  }
  return place;
}

DirectCall* SessionImpl::directOf(uint64_t n, uint64_t* task) {
  auto it = direct.find(n);
  if (it == direct.end()) {
    auto out = directOutputs.find(n);
    if (out == directOutputs.end()) return nullptr;
    it = direct.find(out->second);
    if (it == direct.end()) return nullptr;
  }
  if (task != nullptr) *task = it->first;
  return &it->second;
}

const std::string* SessionImpl::answeredBytes(uint64_t id) {
  auto* call = directOf(id);
  if (call == nullptr || !call->answered || !call->ok || call->viaServer) return nullptr;
  auto it = call->bytes.find(id);
  return it == call->bytes.end() ? nullptr : &it->second;
}

bool SessionImpl::sendDirect() {
  if (directOff || parent != 0 || tasks.empty() || tasks.size() > MAX_DIRECT_CALLS) return false;
  // A connection that broke while this thread was away from the loop (a
  // reset, its governor gone) is seen now, and dropped (ClientImpl::
  // dataWatches): the calls go on a new one, not into the dead one. (First:
  // calls cut off with it may go through the server, and these after them.)
  client.waitScope().poll();
  // Calls cut off whose governor is being asked whether it has them may
  // go through the server: calls on their actors wait for that there
  // (beforeServerSubmit), so that they run after them.
  if (askingCalls > 0) {
    std::unordered_set<uint64_t> actors;
    for (auto& t : tasks) actors.insert(t.actor);
    for (auto& [n, call] : direct) {
      if (call.asking && actors.count(call.actor) != 0) return false;
    }
  }
  std::unordered_map<uint64_t, const LocalObject*> byId;
  for (auto& o : objects) byId[o.n] = &o;
  // Actor calls only, with nothing the server must do for them (retries),
  // reading constants of their own, each once (their records are one
  // graph each), small enough for one message.
  std::unordered_set<uint64_t> used;
  size_t bytes = 0;
  for (auto& t : tasks) {
    // (What the server would refuse goes to the server, to say why.)
    if (t.type != LocalTask::Type::ACTOR_CALL || t.retries > 0 || t.cpus || !t.resources.empty()) return false;
    auto server = serverCalls.find(t.actor);
    if (server != serverCalls.end() && !server->second.empty()) return false;
    for (auto& in : t.inputs) {
      auto it = byId.find(in.object);
      if (it == byId.end() || !it->second->constant || !it->second->path.empty() || !used.insert(in.object).second) {
        return false;
      }
      bytes += it->second->data.size();
    }
    for (auto out : t.outputs) {
      auto it = byId.find(out);
      if (it == byId.end() || it->second->kind == ObjectKind::STREAM) return false;
      used.insert(out);
    }
  }
  if (used.size() != objects.size() || bytes > INLINE_CONSTANT_BYTES) return false;
  // Where each actor runs, and a connection there, before anything goes.
  std::map<uint64_t, std::string> where;
  for (auto& t : tasks) {
    auto& place = actorPlace(t.actor);
    if (place.address.empty()) return false;
    auto method = place.methods.find(t.function);
    if (method == place.methods.end() || method->second != t.outputs.size()) return false;
    where[t.actor] = place.address;
  }
  for (auto& [actor, address] : where) {
    try {
      client.dataService(address);
    } catch (const kj::Exception&) {
      actorPlaces.erase(actor);
      return false;
    }
  }
  if (direct.size() >= KEEP_DIRECT) pruneDirect();
  for (auto& t : tasks) sendOne(t, where[t.actor], byId);
  // Out now: capnp writes a message from the event loop, which a caller
  // that goes on with other work before its next wait would not turn.
  client.waitScope().poll();
  return true;
}

void SessionImpl::sendOne(const LocalTask& t, const std::string& address,
                          const std::unordered_map<uint64_t, const LocalObject*>& byId) {
  auto req = client.dataService(address).callActorRequest();
  auto graph = req.initCall();
  auto list = graph.initObjects(t.outputs.size() + t.inputs.size());
  uint i = 0;
  for (auto out : t.outputs) fillObject(list[i++], *byId.at(out), id, true);
  for (auto& in : t.inputs) fillObject(list[i++], *byId.at(in.object), id, true);
  fillTask(graph.initTasks(1)[0], t, id, parent);
  DirectCall call;
  call.actor = t.actor;
  call.address = address;
  call.connection = client.dataConnection[address];
  call.outputs = t.outputs;
  for (auto out : t.outputs) {
    if (byId.at(out)->keep) call.kept.push_back(out);
  }
  call.name = t.name;
  {
    capnp::MallocMessageBuilder copy(graph.totalSize().wordCount + 8);
    copy.setRoot(graph.asReader());
    call.graph = capnp::messageToFlatArray(copy);
  }
  uint64_t n = t.n;
  call.done = req.send()
                  .then(
                      [this, n](capnp::Response<wire::DataService::CallActorResults>&& response) -> kj::Promise<void> {
                        answered(n, kj::mv(response));
                        return kj::READY_NOW;
                      },
                      [this, n](kj::Exception&& e) { return cutOff(n, kj::mv(e)); })
                  .fork();
  for (auto out : t.outputs) directOutputs[out] = n;
  direct.emplace(n, kj::mv(call));
}

void SessionImpl::answered(uint64_t n, capnp::Response<wire::DataService::CallActorResults>&& response) {
  auto it = direct.find(n);
  if (it == direct.end()) return;
  auto& call = it->second;
  if (response.getRefused().size() > 0) {
    // Not run (the actor is not there any more): the server places it.
    call.error = response.getRefused().cStr();
    call.refused = true;
    actorPlaces.erase(call.actor);
    leaveToServer({n});
    return;
  }
  auto result = response.getResult();
  call.answered = true;
  call.ok = result.getOk();
  call.error = result.getError().cStr();
  call.exitStatus = result.getExitStatus();
  call.stderrTail = result.getStderrTail().cStr();
  for (auto output : result.getOutputs()) {
    uint64_t out = output.getId().getN();
    if (!output.getInlined() || output.getData().size() != output.getSize() ||
        std::find(call.kept.begin(), call.kept.end(), out) == call.kept.end()) {
      continue;
    }
    auto data = output.getData();
    call.bytes[out].assign(reinterpret_cast<const char*>(data.begin()), data.size());
  }
}

kj::Promise<void> SessionImpl::cutOff(uint64_t n, kj::Exception&& e) {
  auto it = direct.find(n);
  if (it == direct.end() || it->second.viaServer) return kj::READY_NOW;
  auto address = it->second.address;
  auto connection = it->second.connection;
  if (it->second.asking) return askingHeld.at(connection).addBranch();
  // A governor that predates callActor (UNIMPLEMENTED, as above) never
  // took them: they go through the server, and so does every call after.
  bool olderGovernor = e.getType() == kj::Exception::Type::UNIMPLEMENTED;
  if (olderGovernor) {
    directOff = true;
  } else if (client.dataConnection[address] == connection) {
    client.dataServices.erase(address);
  }
  // Every call still out on that connection went down with it: handed to
  // the server together, in the order made, so that it places them in that
  // order (their failures reach here in no set order).
  std::vector<uint64_t> cut;
  for (auto& entry : direct) {
    auto& call = entry.second;
    if (call.address != address || call.connection != connection || call.answered || call.viaServer) continue;
    call.error = userMessage(e).cStr();
    call.refused = olderGovernor;
    call.asking = !olderGovernor;
    askingCalls += call.asking;
    actorPlaces.erase(call.actor);
    cut.push_back(entry.first);
  }
  if (olderGovernor) {
    leaveToServer(cut);
    return kj::READY_NOW;
  }
  // Some may have reached the governor before the break, some not (a
  // connection a NAT or firewall forgot takes the next call and answers
  // with a reset): the governor, asked on a new connection, says which it
  // has. Those run there (recorded as running there, never sent twice);
  // the others are placed anew (so is every one when it cannot say: gone,
  // its calls are placed anew with its other tasks).
  auto asked = heldAt(address, cut).then([this, cut](std::set<uint64_t> held) {
    std::vector<uint64_t> there, anew;
    for (auto c : cut) {
      auto found = direct.find(c);
      if (found == direct.end()) continue;
      found->second.asking = false;
      askingCalls--;
      if (held.count(c) != 0) {
        there.push_back(c);
      } else {
        found->second.refused = true;
        anew.push_back(c);
      }
    }
    leaveToServer(there);
    leaveToServer(anew);
  });
  auto& forked = askingHeld.insert_or_assign(connection, asked.fork()).first->second;
  return forked.addBranch();
}

kj::Promise<std::set<uint64_t>> SessionImpl::heldAt(const std::string& address, const std::vector<uint64_t>& ns) {
  auto ask = kj::evalNow([&]() { return connectTo(client.network(), dataRoute(address)); })
                 .then([this, ns](kj::Own<RpcClient> connection) {
                   auto req = client.openData(*connection).heldCallsRequest();
                   auto list = req.initTasks(ns.size());
                   for (uint i = 0; i < list.size(); i++) {
                     list[i].setSession(id);
                     list[i].setN(ns[i]);
                   }
                   return req.send()
                       .then([](capnp::Response<wire::DataService::HeldCallsResults>&& response) {
                         std::set<uint64_t> held;
                         for (auto task : response.getHeld()) held.insert(task.getN());
                         return held;
                       })
                       .attach(kj::mv(connection));
                 })
                 // It cannot say (gone, unreachable): none is taken as
                 // held. (Every governor it reaches speaks this protocol:
                 // DataBootstrap.open refuses another version.)
                 .catch_([](kj::Exception&&) { return std::set<uint64_t>(); });
  return ask.exclusiveJoin(
      client.loop.provider->getTimer().afterDelay(ASK_HELD_TIMEOUT).then([]() { return std::set<uint64_t>(); }));
}

void SessionImpl::leaveToServer(const std::vector<uint64_t>& ns) {
  if (ns.empty()) return;
  for (auto n : ns) {
    auto& call = direct.at(n);
    call.viaServer = true;
    unsettled.insert(n);
    viaServerCall(call.actor, n, call.outputs);
  }
  if (client.service == nullptr) return;
  auto& first = direct.at(ns.front());
  auto req = recordRequest(first.refused ? "" : first.address, ns);
  if (directTasks.get() == nullptr) directTasks = kj::heap<kj::TaskSet>(directErrors);
  directTasks->add(req.send().then(
      [this, ns](auto) {
        for (auto n : ns) {
          auto it = direct.find(n);
          if (it == direct.end()) continue;
          it->second.recorded = true;
          unsettled.erase(n);
        }
      },
      [this, ns](kj::Exception&& e) {
        if (e.getType() == kj::Exception::Type::DISCONNECTED) return;  // later (settleDirect)
        for (auto n : ns) {
          auto it = direct.find(n);
          if (it == direct.end()) continue;
          it->second.recorded = true;
          it->second.recordError = userMessage(e).cStr();
          unsettled.erase(n);
        }
      }));
}

capnp::Request<wire::ClientService::RecordDirectParams, wire::ClientService::RecordDirectResults>
SessionImpl::recordRequest(const std::string& address, const std::vector<uint64_t>& ns) {
  auto req = client.svc().recordDirectRequest();
  name(req);
  req.setAddress(address);
  auto calls = req.initCalls(ns.size());
  for (size_t i = 0; i < ns.size(); i++) {
    capnp::FlatArrayMessageReader graph(direct.at(ns[i]).graph);
    calls.setWithCaveats(i, graph.getRoot<wire::Graph>());
  }
  return req;
}

void SessionImpl::record(const std::vector<uint64_t>& ns) {
  // Calls whose governor is being asked whether it has them are recorded
  // where its answer says.
  kj::Vector<kj::Promise<void>> asking;
  for (auto n : ns) {
    auto& call = direct.at(n);
    if (call.asking) asking.add(call.done.addBranch());
  }
  if (!asking.empty()) client.block(kj::joinPromises(asking.releaseAsArray()));
  // By where they are recorded as running.
  std::map<std::string, std::vector<uint64_t>> byAddress;
  for (auto n : ns) {
    auto& call = direct.at(n);
    if (call.recorded) continue;
    byAddress[call.refused ? "" : call.address].push_back(n);
  }
  for (auto& group : byAddress) {
    // (Named: clang 14 cannot capture a structured binding.)
    auto& address = group.first;
    auto& list = group.second;
    std::string error;
    try {
      client.retrying([&]() { recordRequest(address, list).send().wait(client.waitScope()); });
    } catch (const Error& e) {
      error = e.what();
    }
    for (auto n : list) {
      auto& call = direct.at(n);
      call.recorded = true;
      unsettled.erase(n);
      if (!error.empty()) call.recordError = error;
    }
  }
}

void SessionImpl::recordNamed(const std::vector<uint64_t>& ids, bool all) {
  std::vector<uint64_t> ns;
  if (all) {
    for (auto& [n, call] : direct) {
      if (!call.recorded) ns.push_back(n);
    }
  } else {
    std::set<uint64_t> seen;
    for (auto i : ids) {
      uint64_t n = 0;
      auto* call = directOf(i, &n);
      if (call != nullptr && !call->recorded && seen.insert(n).second) ns.push_back(n);
    }
  }
  if (!ns.empty()) record(ns);
}

void SessionImpl::settleDirect() {
  if (!unsettled.empty()) record(std::vector<uint64_t>(unsettled.begin(), unsettled.end()));
}

void SessionImpl::pruneDirect() {
  std::vector<uint64_t> done;
  for (auto& [n, call] : direct) {
    if (call.answered && call.ok) done.push_back(n);
  }
  record(done);
  for (auto n : done) {
    auto& call = direct.at(n);
    if (!call.recordError.empty()) continue;
    for (auto out : call.outputs) directOutputs.erase(out);
    direct.erase(n);
  }
}

void SessionImpl::beforeServerSubmit() {
  settleDirect();
  if (direct.empty()) return;
  // Calls on an actor wait for this handle's direct calls on it to be
  // answered: the server's way to the actor must not overtake them.
  std::set<uint64_t> actors;
  for (auto& t : tasks) {
    if (t.type == LocalTask::Type::ACTOR_CALL) actors.insert(t.actor);
  }
  kj::Vector<kj::Promise<void>> earlier;
  for (auto& [n, call] : direct) {
    if (actors.count(call.actor) != 0 && !call.answered && !call.viaServer) earlier.add(call.done.addBranch());
  }
  if (!earlier.empty()) client.block(kj::joinPromises(earlier.releaseAsArray()));
  // What it reads of direct calls must be known to the server.
  std::vector<uint64_t> read;
  for (auto& t : tasks) {
    for (auto& in : t.inputs) {
      if (directOf(in.object) != nullptr) read.push_back(in.object);
    }
  }
  recordNamed(read);
}

void SessionImpl::madeViaServer(const std::vector<LocalTask>& made) {
  for (auto& t : made) {
    if (t.type == LocalTask::Type::ACTOR_CALL) viaServerCall(t.actor, t.n, t.outputs);
  }
}

void SessionImpl::viaServerCall(uint64_t actor, uint64_t task, const std::vector<uint64_t>& outputs) {
  serverCalls[actor].insert(task);
  serverCallIds[task] = {actor, task};
  for (auto out : outputs) serverCallIds[out] = {actor, task};
}

void SessionImpl::sawEnd(const std::vector<uint64_t>& ids, bool all) {
  if (all) {
    serverCalls.clear();
    serverCallIds.clear();
    return;
  }
  for (auto i : ids) {
    auto it = serverCallIds.find(i);
    if (it == serverCallIds.end()) continue;
    auto [actor, task] = it->second;
    auto calls = serverCalls.find(actor);
    if (calls != serverCalls.end()) {
      calls->second.erase(task);
      if (calls->second.empty()) serverCalls.erase(calls);
    }
    serverCallIds.erase(it);
  }
}

std::vector<uint64_t> SessionImpl::waitDirect(const std::vector<uint64_t>& ids, bool any,
                                              std::vector<uint64_t>* finished, bool& done,
                                              kj::Maybe<kj::Promise<void>>& race) {
  done = false;
  settleDirect();
  if (direct.empty()) return ids;
  bool all = ids.empty();
  // The direct calls this wait is for, and the ids naming each.
  std::map<uint64_t, std::vector<uint64_t>> here;
  std::vector<uint64_t> rest;
  if (all) {
    for (auto& [n, call] : direct) {
      if (!call.viaServer) here[n];
    }
  } else {
    for (auto i : ids) {
      uint64_t n = 0;
      auto* call = directOf(i, &n);
      if (call != nullptr && !call->viaServer) {
        here[n].push_back(i);
      } else {
        rest.push_back(i);
      }
    }
  }
  if (here.empty()) return ids;
  for (;;) {
    std::vector<uint64_t> failed;
    std::vector<uint64_t> ended;
    kj::Vector<kj::Promise<void>> unanswered;
    for (auto it = here.begin(); it != here.end();) {
      auto& call = direct.at(it->first);
      if (call.viaServer) {
        // Refused, or cut off: the server says how it ends.
        rest.insert(rest.end(), it->second.begin(), it->second.end());
        it = here.erase(it);
        continue;
      }
      if (!call.answered) {
        unanswered.add(call.done.addBranch());
      } else if (call.ok) {
        ended.insert(ended.end(), it->second.begin(), it->second.end());
      } else {
        failed.push_back(it->first);
      }
      ++it;
    }
    if (any && !ended.empty()) {
      if (finished != nullptr) finished->insert(finished->end(), ended.begin(), ended.end());
      done = true;
      return {};
    }
    if (!failed.empty()) {
      // How a failure ends the session (or not: allowed to fail, a killed
      // actor) is the server's to say: recorded, then waited for there.
      // One the server would not record fails the wait here.
      record(failed);
      for (auto n : failed) {
        auto& call = direct.at(n);
        if (!call.recordError.empty()) {
          std::string label = call.name.empty() ? "task " + std::to_string(n)
                                                : "task " + std::to_string(n) + " (" + call.name + ")";
          throw TaskFailed(label + " failed: " + call.error, n, call.name, call.exitStatus, call.stderrTail);
        }
        call.viaServer = true;
      }
      continue;
    }
    if (unanswered.empty()) break;
    if (!any) {
      client.block(kj::joinPromises(unanswered.releaseAsArray()));
      continue;
    }
    // The first answer (or break) among them; with ids at the server too,
    // the caller races that against the server's answer.
    auto first = kj::mv(unanswered[0]);
    for (size_t i = 1; i < unanswered.size(); i++) first = first.exclusiveJoin(kj::mv(unanswered[i]));
    if (rest.empty() && !all) {
      client.block(kj::mv(first));
      continue;
    }
    race = kj::mv(first);
    break;
  }
  if (!all && rest.empty()) {
    done = true;
    return {};
  }
  // What the server is to wait for, it must know (a record sent from an
  // answer's continuation may still be on its way).
  settleDirect();
  return all ? std::vector<uint64_t>{} : rest;
}

}  // namespace client
}  // namespace squall
