// A graph arriving in chunks (Submission.add / appendData) and its atomic
// validation and application to a session. Loop thread only.
#pragma once

#include "graph.h"
#include <map>
#include <memory>
#include <set>
#include "server-limits.h"

#include <functional>
#include <memory>
#include <kj/string.h>
#include <squall/wire/service.capnp.h>

namespace squall {

// The governors' cpus when a submit is checked (0: no governor yet, so
// nothing can be said about what fits).
struct ClusterCapacity {
  uint64_t totalCpus = 0;
  uint32_t largestCpus = 0;
  // The functions the governors offer ("executor/function" -> its output
  // names); null when not known (no governor yet, a replay): call tasks are
  // then not checked against them.
  std::shared_ptr<const std::map<std::string, std::vector<std::string>>> functions;
  // Of those, the actor types ("executor/Type"; their methods are in
  // `functions` as "executor/Type.method"); null when not known.
  std::shared_ptr<const std::set<std::string>> actorTypes;
  // The live named actors (name -> task); null when not known (a replay).
  std::shared_ptr<const std::map<std::string, Id>> namedActors;
  // Each governor's cpus and pools; null when not known (as above).
  std::shared_ptr<const std::vector<std::pair<uint32_t, Pools>>> governors;
};

// What a task spec asks for besides cpus.
std::vector<ResourceAsk> resourceAsks(wire::TaskSpec::Reader spec);

class PendingSubmit {
 public:
  // `pendingTotal`: the bytes of every open submit of the server (checked
  // against Limits::pendingBytes; none: not counted).
  PendingSubmit(uint64_t session, const Limits& limits, std::shared_ptr<uint64_t> pendingTotal = {})
      : session(session), limits(limits), pendingTotal(std::move(pendingTotal)) {}
  ~PendingSubmit();
  PendingSubmit(const PendingSubmit&) = delete;
  PendingSubmit& operator=(const PendingSubmit&) = delete;

  // Copies one chunk. Throws FAILED when a limit is exceeded.
  void add(wire::Submission::AddParams::Reader chunk);
  // The same for a chunk built already (ClientService.submitGraph): kept
  // as it is, not copied.
  void add(std::unique_ptr<capnp::MallocMessageBuilder> chunk);
  // Appends to a constant declared in an earlier add(). Throws FAILED for an
  // unknown or non-constant object.
  void appendData(uint64_t object, kj::ArrayPtr<const kj::byte> data);

  // Validates everything against `target` and, only if all of it is valid
  // and `apply`, moves the graph in. Returns the tasks that are ready at
  // once (none when not applied). Throws FAILED naming the first problem;
  // `target` is then untouched. Tasks joined by live streams must fit
  // `capacity` all at once. The server checks a submit, makes it durable
  // (the session log) and then commits it again to apply it, as the
  // session may have changed meanwhile.
  std::vector<TaskNode*> commit(Session& target, ClusterCapacity capacity = {}, bool apply = true);
  // The chunks as flat messages and the appended constants' bytes, as the
  // session log stores them.
  std::vector<kj::Array<capnp::word>> flatChunks() const;
  const std::unordered_map<uint64_t, std::vector<kj::byte>>& appendedData() const { return appended; }

  // Forgets the chunks (after commit, or when the submit is refused).
  void drop();

  // The record of actor calls that ran already (sent to a governor
  // directly): a call on an actor that has ended since is taken (its
  // applier ends it with its actor) rather than refused.
  void takeCallsOnEndedActors() { endedActorsTaken = true; }

  // Actors that had ended when the last commit applied calls on them
  // (taken, or allowed to fail): the applier ends those calls as the
  // actor's others ended (SessionTable::actorEnded).
  const std::vector<ActorNode*>& endedActorsCalled() const { return endedCalled; }

  // Constants uploaded to a governor (ObjectSpec.placedOn): (n, governor
  // name), in the order added.
  const std::vector<std::pair<uint64_t, std::string>>& placedObjects() const { return placed; }

  uint64_t taskCount() const { return tasks; }
  uint64_t objectCount() const { return objects; }

 private:
  uint64_t session;
  Limits limits;
  std::shared_ptr<uint64_t> pendingTotal;
  uint64_t bytes = 0;
  bool endedActorsTaken = false;
  std::vector<ActorNode*> endedCalled;
  uint64_t tasks = 0;
  uint64_t objects = 0;
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> messages;
  // add()'s checks and counts; returns the chunk's size in bytes.
  size_t admit(wire::Submission::AddParams::Reader chunk);
  // Constants' extra bytes from appendData, by object n.
  std::unordered_map<uint64_t, std::vector<kj::byte>> appended;
  std::unordered_map<uint64_t, bool> declaredConstants;
  std::vector<std::pair<uint64_t, std::string>> placed;

  // The task's sizes against the limits (attributes, paths, arguments...).
  void checkBounds(kj::StringPtr label, wire::TaskSpec::Reader task) const;
  // Counts `more` bytes against submit-bytes and pending-bytes.
  void charge(uint64_t more);
  // Gives the bytes counted in pending-bytes back (the submit was applied
  // or dropped).
  void release();
};

// The cpus each member of a stream group holds while they run (members in
// id order): what it asked for (Resources.cpusAsked); those that did not
// ask share one cpu, the way a shell's pipe runs on one core: the first of
// them holds it when no member asked, else they ride on what the others
// asked for. So a pipe of 8 plain stages needs 1 cpu, and a stage that asks
// for 4 makes the pipe need 4.
std::vector<uint32_t> streamGroupCharges(const std::vector<wire::TaskSpec::Reader>& members);

}  // namespace squall
