// The server's handle on this governor. Loop thread only.
#include "governor-control.h"

namespace squall {

kj::Promise<void> GovernorControlImpl::assign(AssignContext context) {
  auto params = context.getParams();
  auto constants = params.getConstants();
  for (auto constant : constants) {
    store.putConstant(Id::from(constant.getId()), constant.getKind(), constant.getData());
  }
  auto tasks = params.getTasks();
  logger.debug("event=assign tasks={} constants={}", tasks.size(), constants.size());
  for (auto assignment : tasks) queue.assign(assignment);
  return kj::READY_NOW;
}

kj::Promise<void> GovernorControlImpl::claimUploads(ClaimUploadsContext context) {
  std::vector<Id> ids;
  for (auto id : context.getParams().getObjects()) ids.push_back(Id::from(id));
  std::vector<Id> missing = ids;
  KJ_IF_MAYBE(table, uploads) { missing = table->claim(kj::arrayPtr(ids.data(), ids.size())); }
  if (!missing.empty()) logger.warn("event=claim-missing count={} first={}", missing.size(), kj::str(missing[0]).cStr());
  auto list = context.getResults().initMissing(missing.size());
  for (uint i = 0; i < list.size(); i++) missing[i].to(list[i]);
  return kj::READY_NOW;
}

kj::Promise<void> GovernorControlImpl::removeObjects(RemoveObjectsContext context) {
  auto objects = context.getParams().getObjects();
  logger.debug("event=remove-objects count={}", objects.size());
  for (auto object : objects) store.remove(Id::from(object));
  return kj::READY_NOW;
}

kj::Promise<void> GovernorControlImpl::cancelTasks(CancelTasksContext context) {
  auto ids = context.getParams().getTasks();
  logger.debug("event=cancel-tasks count={}", ids.size());
  // Those it does not have it will never report: the server frees their
  // places (a direct call recorded as sent here that never arrived).
  std::vector<Id> unknown;
  for (auto id : ids) {
    if (!queue.cancel(Id::from(id))) unknown.push_back(Id::from(id));
  }
  auto list = context.getResults().initUnknown(unknown.size());
  for (uint i = 0; i < list.size(); i++) unknown[i].to(list[i]);
  return kj::READY_NOW;
}

kj::Promise<void> GovernorControlImpl::retract(RetractContext context) {
  auto ids = context.getParams().getTasks();
  std::vector<Id> dropped;
  for (auto id : ids) {
    if (queue.retract(Id::from(id))) dropped.push_back(Id::from(id));
  }
  logger.debug("event=retract asked={} retracted={}", ids.size(), dropped.size());
  auto list = context.getResults().initRetracted(dropped.size());
  for (uint i = 0; i < list.size(); i++) dropped[i].to(list[i]);
  return kj::READY_NOW;
}

kj::Promise<void> GovernorControlImpl::ping(PingContext context) {
  auto stats = store.stats();
  auto out = context.getResults().initStore();
  out.setObjects(stats.objects);
  out.setMemoryBytes(stats.memoryBytes);
  out.setMemoryCapacity(stats.memoryCapacity);
  out.setMemoryObjects(stats.memoryObjects);
  out.setSpilledBytes(stats.spilledBytes);
  out.setSpilledObjects(stats.spilledObjects);
  out.setWarmBytes(stats.warmBytes);
  return kj::READY_NOW;
}

kj::Promise<void> GovernorControlImpl::prefetch(PrefetchContext context) {
  auto objects = context.getParams().getObjects();
  kj::Vector<kj::Promise<kj::Maybe<Id>>> fetches;
  for (auto o : objects) {
    auto sources = kj::heapArrayBuilder<kj::String>(o.getSources().size());
    for (auto s : o.getSources()) sources.add(kj::str(s));
    Id id = Id::from(o.getId());
    fetches.add(queue.prefetch(id, o.getKind(), sources.finish()).then([id](bool held) -> kj::Maybe<Id> {
      if (held) return id;
      return nullptr;
    }));
  }
  logger.debug("event=prefetch objects={}", objects.size());
  return kj::joinPromises(fetches.releaseAsArray()).then([context](kj::Array<kj::Maybe<Id>> done) mutable {
    size_t n = 0;
    for (auto& d : done) n += d != nullptr;
    auto list = context.getResults().initHeld(n);
    uint i = 0;
    for (auto& d : done) {
      KJ_IF_MAYBE(id, d) { id->to(list[i++]); }
    }
  });
}

kj::Promise<void> GovernorControlImpl::resultsDurable(ResultsDurableContext context) {
  batcher.durable(context.getParams().getThrough());
  return kj::READY_NOW;
}

}  // namespace squall
