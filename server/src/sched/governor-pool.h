// The connected governors: capacity in use, the tasks each holds, and what
// the next flush sends each of them. Loop thread only.
#pragma once

#include "graph.h"

#include <map>
#include <set>
#include <unordered_set>
#include <squall/wire/service.capnp.h>

namespace squall {

// What a governor's object store held at its last heartbeat
// (GovernorControl.ping); `known` once one answered.
struct GovernorStore {
  bool known = false;
  uint64_t objects = 0;
  uint64_t memoryBytes = 0;
  uint64_t memoryCapacity = 0;
  uint64_t memoryObjects = 0;
  uint64_t spilledBytes = 0;
  uint64_t spilledObjects = 0;
  uint64_t warmBytes = 0;
};

struct GovernorState {
  GovernorId id;
  std::string name;
  std::string dataAddress;
  uint32_t cpus;
  // Cpus of the tasks assigned and not yet reported back (running or queued
  // on the governor).
  uint32_t load = 0;
  // Cpus' worth of tasks it may hold queued beyond its cpus when more than
  // the scheduler's base depth (Scheduler::ranDry); 0: the base.
  uint32_t deepQueue = 0;
  wire::GovernorControl::Client control;
  // The functions its executors offer: "executor/function" -> output names.
  std::map<std::string, std::vector<std::string>> functions;
  // Of those, its actor types ("executor/Type").
  std::set<std::string> actorTypes;
  std::unordered_map<Id, uint32_t, IdHash> assigned;
  // Of those, running functions that gave their cpus back while they wait
  // for tasks they submitted: not in `load` (docs/nested.md).
  std::unordered_set<Id, IdHash> lent;
  // Its pools besides cpus, with what the tasks assigned to it hold.
  Pools pools;
  std::unordered_map<Id, std::vector<ResourceAsk>, IdHash> holding;
  // The number of its last update applied, and of the last one a log
  // commit confirmed to it (resultsDurable); the next commit confirms the
  // ones between.
  uint64_t appliedUpdate = 0;
  uint64_t confirmedUpdate = 0;
  bool unconfirmed() const { return appliedUpdate > confirmedUpdate; }
  // Outgoing batches, sent by the next flush.
  std::vector<Id> toAssign;
  std::vector<Id> toRemove;
  std::vector<Id> toCancel;
  GovernorStore store;

  GovernorState(GovernorId id, std::string name, std::string dataAddress, uint32_t cpus,
                wire::GovernorControl::Client control)
      : id(id), name(std::move(name)), dataAddress(std::move(dataAddress)), cpus(cpus),
        control(kj::mv(control)) {}
};

class GovernorPool {
 public:
  GovernorState& add(std::string name, std::string dataAddress, uint32_t cpus,
                     wire::GovernorControl::Client control);
  // Forgets the governor and returns the tasks it held.
  std::vector<Id> remove(GovernorId id);
  kj::Maybe<GovernorState&> find(GovernorId id);
  void hold(GovernorState& governor, Id task, uint32_t cpus, const std::vector<ResourceAsk>& resources = {});
  // A task it reported running when it (re)registered: held, not sent.
  void adopt(GovernorState& governor, Id task, uint32_t cpus, const std::vector<ResourceAsk>& resources = {});
  // The id a governor named `name` has, or will get when it registers
  // (a governor the session log says the server had before a restart).
  GovernorId expect(const std::string& name);
  // Those expected that have not registered; forgets them.
  std::map<std::string, GovernorId> takeExpected();
  size_t expectedCount() const { return expectedIds.size(); }
  // A task's result arrived: its capacity is free again.
  void release(GovernorId id, Id task);
  // A running task gave its cpus back (`lent`), or took them again.
  void lend(GovernorState& governor, Id task, bool lent);
  std::map<GovernorId, GovernorState>& all() { return governors; }

 private:
  void holdResources(GovernorState& governor, Id task, const std::vector<ResourceAsk>& resources);
  std::map<GovernorId, GovernorState> governors;
  std::map<std::string, GovernorId> expectedIds;
  GovernorId nextId = 1;
};

}  // namespace squall
