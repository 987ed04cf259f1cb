// Actor calls that clients send to this governor directly
// (DataService.callActor), skipping the server: the call's path is then
// client -> governor -> executor -> governor -> client, two hand-offs
// fewer than through the server (docs/actors.md, "Calls that skip the
// server"; docs/decisions.md). Each is checked, its constants stored, and
// queued as if the server had assigned it (TaskQueue::assign): it takes
// its turn on the actor behind every call that reached the governor
// before it, by either way. Its outcome is reported like any other, with
// its graph attached (TaskResult.direct) so that the server records it.
// Loop thread only.
#pragma once

#include "actor-host.h"
#include "data-service.h"
#include "object-store.h"

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace squall {

class TaskQueue;

// The most bytes of kept blob outputs a direct call's answer carries: the
// client that waits for it then reads them from the answer (as Ray's
// owner gets small returns in the task's reply, up to 100 KiB).
constexpr uint32_t DIRECT_ANSWER_BYTES = 64 * 1024;

class DirectCalls final : public DirectCallPort {
 public:
  DirectCalls(ObjectStore& store, ActorHosts& actors, kj::StringPtr governorName, spdlog::logger& logger)
      : store(store), actors(actors), governorName(governorName), logger(logger) {}
  ~DirectCalls() noexcept(false) { *alive = false; }
  KJ_DISALLOW_COPY(DirectCalls);

  // The queue the calls go to (it is made after this: its reporter calls
  // ended()).
  void useQueue(TaskQueue& taskQueue) { queue = taskQueue; }

  // Checks the call (one actorCall task on an actor of its session hosted
  // here, its outputs, the constants it reads and nothing else, every id
  // new here as a submit's are in its session), queues it, and
  // answers with its result once it ends; refuses (without running it)
  // what it cannot take.
  kj::Promise<Answer> callActor(wire::Graph::Reader call) override;
  bool holds(Id task) const override { return calls.count(task) != 0; }

  // Every outcome passes here before it is reported: a direct call's gets
  // its graph (TaskOutcome::direct), and its client its answer.
  void ended(TaskOutcome& outcome);

  // For a registration: the direct calls queued, running, or whose
  // results the server does not have durably yet, and their outputs
  // (GovernorInfo.direct). A call is forgotten once its result is.
  std::vector<Id> pending() const;

  size_t count() const { return calls.size(); }

  // Before the function of `task` submits tasks of its own: resolves once
  // the server has recorded it, when it is a direct call not recorded yet
  // (at once otherwise); rejects when the record is refused or the server
  // cannot be reached. Recording goes through `send` (the server link's).
  using SendRecord = kj::Function<kj::Maybe<kj::Promise<void>>(wire::Graph::Reader)>;
  void recordWith(SendRecord send) { sendRecord = kj::mv(send); }
  void stopRecording() { sendRecord = nullptr; }
  kj::Promise<void> record(Id task);

 private:
  struct Call {
    // Its outputs (for pending()).
    std::vector<Id> outputs;
    // Its outputs and constants (in `claimed`).
    std::vector<Id> objects;
    // Its graph until it ends (then it goes with the outcome).
    kj::Array<capnp::word> graph;
    kj::Own<kj::PromiseFulfiller<Answer>> answer;
    // Recorded by the server already (record()), or being.
    kj::Maybe<kj::ForkedPromise<void>> recorded;
  };
  class Forget;

  ObjectStore& store;
  ActorHosts& actors;
  kj::StringPtr governorName;
  spdlog::logger& logger;
  kj::Maybe<TaskQueue&> queue;
  kj::Maybe<SendRecord> sendRecord;
  std::unordered_map<Id, Call, IdHash> calls;
  // The objects of the calls in `calls` (outputs to come, constants):
  // another call may not name them.
  std::unordered_set<Id, IdHash> claimed;
  // False once this is gone, for outcomes that outlive it.
  std::shared_ptr<bool> alive = std::make_shared<bool>(true);

  // Why the governor does not take `call` this way; nullptr when it does.
  // Fills `objects` with its objects by n.
  using Objects = std::unordered_map<uint64_t, wire::ObjectSpec::Reader>;
  kj::Maybe<kj::String> refusal(wire::Graph::Reader call, Objects& objects);
};

}  // namespace squall
