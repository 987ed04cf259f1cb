#include "governor-pool.h"

namespace squall {

GovernorState& GovernorPool::add(std::string name, std::string dataAddress, uint32_t cpus,
                                 wire::GovernorControl::Client control) {
  GovernorId id;
  auto was = expectedIds.find(name);
  if (was != expectedIds.end()) {
    id = was->second;  // back after a server restart: the log's copies are its
    expectedIds.erase(was);
  } else {
    id = nextId++;
  }
  return governors
      .emplace(std::piecewise_construct, std::forward_as_tuple(id),
               std::forward_as_tuple(id, std::move(name), std::move(dataAddress), cpus,
                                     kj::mv(control)))
      .first->second;
}

std::vector<Id> GovernorPool::remove(GovernorId id) {
  std::vector<Id> held;
  auto it = governors.find(id);
  if (it == governors.end()) return held;
  for (auto& [task, cpus] : it->second.assigned) held.push_back(task);
  governors.erase(it);
  return held;
}

GovernorId GovernorPool::expect(const std::string& name) {
  for (auto& [id, governor] : governors) {
    if (governor.name == name) return id;
  }
  auto [it, inserted] = expectedIds.emplace(name, 0);
  if (inserted) it->second = nextId++;
  return it->second;
}

std::map<std::string, GovernorId> GovernorPool::takeExpected() {
  std::map<std::string, GovernorId> out;
  out.swap(expectedIds);
  return out;
}

void GovernorPool::adopt(GovernorState& governor, Id task, uint32_t cpus,
                         const std::vector<ResourceAsk>& resources) {
  if (!governor.assigned.emplace(task, cpus).second) return;
  governor.load += cpus;
  holdResources(governor, task, resources);
}

void GovernorPool::holdResources(GovernorState& governor, Id task, const std::vector<ResourceAsk>& resources) {
  if (resources.empty()) return;
  account(governor.pools, resources, 1);
  governor.holding.emplace(task, resources);
}

kj::Maybe<GovernorState&> GovernorPool::find(GovernorId id) {
  auto it = governors.find(id);
  if (it == governors.end()) return nullptr;
  return it->second;
}

void GovernorPool::hold(GovernorState& governor, Id task, uint32_t cpus,
                        const std::vector<ResourceAsk>& resources) {
  governor.assigned.emplace(task, cpus);
  governor.load += cpus;
  holdResources(governor, task, resources);
  governor.toAssign.push_back(task);
}

void GovernorPool::release(GovernorId id, Id task) {
  KJ_IF_MAYBE(governor, find(id)) {
    auto it = governor->assigned.find(task);
    if (it == governor->assigned.end()) return;
    if (governor->lent.erase(task) == 0) governor->load -= it->second;
    governor->assigned.erase(it);
    auto held = governor->holding.find(task);
    if (held != governor->holding.end()) {
      account(governor->pools, held->second, -1);
      governor->holding.erase(held);
    }
  }
}

void GovernorPool::lend(GovernorState& governor, Id task, bool lent) {
  auto it = governor.assigned.find(task);
  if (it == governor.assigned.end()) return;  // ended meanwhile
  if (lent && governor.lent.insert(task).second) governor.load -= it->second;
  if (!lent && governor.lent.erase(task) > 0) governor.load += it->second;
}

}  // namespace squall
