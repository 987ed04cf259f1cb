// The task/object graph of every session, as the server holds it. Plain
// data; owned and mutated only by SessionTable on the loop thread.
#pragma once

#include "resource-fit.h"

#include <capnp/message.h>
#include <cstdint>
#include <kj/async.h>
#include <map>
#include <memory>
#include <squall/proto/ids.h>
#include <squall/wire/common.capnp.h>
#include <string>
#include <unordered_map>
#include <vector>

namespace squall {

using GovernorId = uint32_t;

struct TaskNode;
struct Session;

// An actor (a task of type actor) and its method calls, in their turns:
// the order they were submitted in (docs/actors.md). Calls are placed on
// the actor's governor, in turn order, once the actor task is placed;
// a call not ready yet holds back the calls behind it.
struct ActorNode {
  TaskNode* task = nullptr;
  // The next call's turn.
  uint64_t nextTurn = 0;
  // Calls by turn; done ones leave from the front (Scheduler::placeCalls).
  std::map<uint64_t, TaskNode*> calls;
  // Killed by its client (ClientService.killActor): its end is no failure.
  bool killed = false;
  // Its calls that finished ok.
  uint64_t callsDone = 0;
  // Restarts after a lost governor (counted against max_restarts here: the
  // governor's own count went with it).
  uint32_t lostRestarts = 0;
  // Its name (ActorConfig.name), when named: reached from other sessions,
  // and its session outlives its client while it lives.
  std::string name;
  // The governor that said it holds the actor (it answered the assignment,
  // or reported the actor when it registered again); 0 while none has.
  // Clients are told where an actor runs only then (ClientService.
  // locateActor): a call sent straight to a governor the assignment had not
  // reached yet was refused there and placed through the server, behind
  // the calls sent right after it, which the governor took and ran first.
  GovernorId heldBy = 0;
};

// Tasks joined by streams read live: a producer and its readers, and their
// producers and readers in turn. They run at the same time, so they are
// placed together, only when all of them can start at once.
struct StreamGroup {
  std::vector<TaskNode*> members;
  uint32_t cpus = 0;
};

// A wait() or waitSome() call in progress.
struct Waiter {
  Session* session;
  // Ids still unfinished; the waiter completes at 0 (or at 1 finished for
  // waitSome, see `any`).
  size_t remaining = 0;
  bool any = false;
  // Empty for "every task of the session".
  std::vector<uint64_t> ids;
  kj::Own<kj::PromiseFulfiller<void>> fulfiller;
};

// The most bytes of a kept output's result the server keeps to answer its
// fetch (ObjectNode.data): small results (a pickled number, a short
// string) are what a client waiting for one task fetches most.
constexpr uint32_t CACHED_OUTPUT_BYTES = 1024;

struct ObjectNode {
  // FAILED: its producer failed (allowed to) or was skipped; never made.
  enum class State { UNFINISHED, FINISHED, REMOVED, FAILED };

  Id id;
  wire::ObjectKind kind = wire::ObjectKind::BLOB;
  State state = State::UNFINISHED;
  bool keep = false;
  bool constant = false;
  std::string label;
  std::string contentType;
  // A constant whose bytes the client uploaded to this governor (by name):
  // not `constant` (the server never has its bytes), held there like a
  // task's output, with no task to make it again if that copy is lost.
  std::string uploadedTo;
  // A constant's bytes, or a kept blob output's when they came with its
  // task's result (at most CACHED_OUTPUT_BYTES): a fetch is then answered
  // here, without a read from its governor (bytesHere). Freed when the
  // object is removed; not logged (after a restart fetches read the
  // governor).
  std::vector<kj::byte> data;
  TaskNode* producer = nullptr;
  // Tasks that need it finished (a stream: read after its end).
  std::vector<TaskNode*> consumers;
  // A stream's readers that read it while it is written (same StreamGroup
  // as the producer).
  std::vector<TaskNode*> liveReaders;
  // A stream whose bytes are stored as they flow (kept, or read after its
  // end); decided when its producer is assigned.
  bool persisted = false;
  // Consumers not yet finished; the object is removed when this reaches 0
  // and it is not kept.
  uint32_t unfinishedConsumers = 0;
  uint64_t size = 0;
  uint64_t hash = 0;
  // Governors holding a copy (finished objects only).
  std::vector<GovernorId> locations;
  // Governors asked to fetch a copy ahead of a reader (prefetch), not yet
  // answered.
  std::vector<GovernorId> prefetching;
  std::vector<std::shared_ptr<Waiter>> waiters;

  // Whether `data` holds all its bytes: a constant, or a finished blob
  // whose bytes came with its result (an empty blob needs none).
  bool bytesHere() const {
    return constant || (kind == wire::ObjectKind::BLOB && state == State::FINISHED && data.size() == size);
  }
};

struct TaskNode {
  // SKIPPED: not run because an input's producer failed and was allowed to.
  enum class State { WAITING, READY, ASSIGNED, FINISHED, FAILED, CANCELLED, SKIPPED };

  Id id;
  State state = State::WAITING;
  // Points into the session's copy of the submitted message.
  wire::TaskSpec::Reader spec;
  std::vector<ObjectNode*> inputs;
  // Parallel to inputs: read live (a stream whose producer runs alongside).
  std::vector<bool> liveInputs;
  std::vector<ObjectNode*> outputs;
  // Inputs not yet finished, live ones not counted.
  uint32_t unfinishedInputs = 0;
  // Set when the task reads or writes a stream live.
  StreamGroup* group = nullptr;
  uint32_t cpus = 1;
  // What it needs besides cpus (resource-fit.h).
  std::vector<ResourceAsk> resources;
  // "executor/function" of a call task, "executor/Type" of an actor (placed
  // only where it is offered); empty for other types.
  std::string function;
  // An actor task: it lives (holding its resources) until killed, and is
  // not among the tasks a wait for every task waits for.
  bool isActor = false;
  // A method call: its actor (whose governor runs it, on the actor's
  // resources) and its turn there.
  ActorNode* actor = nullptr;
  uint64_t turn = 0;
  // The task whose running function submitted it (TaskSpec.parent), and
  // the tasks it submitted: cancelling or failing a task cancels its
  // children (docs/nested.md).
  TaskNode* parent = nullptr;
  std::vector<TaskNode*> children;
  // The governor whose capacity the task holds while assigned (0 = none).
  GovernorId governor = 0;
  // Its expected run time in ms (or a stand-in, see b-level.h), and the
  // longest expected path from its start to the end of the graph: its
  // priority while it waits to be placed.
  double cost = 1;
  double bLevel = 1;
  // When it was last assigned (the pass's serial): a governor's most
  // recently assigned tasks are the last in its queue, the ones taken
  // back first when another governor is idle (work stealing).
  uint64_t assignedAt = 0;
  // Its governor is being asked to give it back (retract).
  bool retracting = false;
  // Where its finished inputs are being sent ahead while it waits for the
  // others (0 = nowhere yet): Scheduler::prefetch.
  GovernorId prefetchTo = 0;
  // 1 for the first run; counts up with retries.
  uint32_t attempt = 1;
  // Times it was placed again because an input's source went away.
  uint32_t inputRetries = 0;
  std::vector<std::shared_ptr<Waiter>> waiters;

  // Filled from the last result (bounded: tails are at most a few KiB).
  std::string governorName;
  uint64_t startTimeUs = 0;
  uint64_t durationUs = 0;
  int32_t exitStatus = -1;
  std::string error;
  std::string stdoutTail;
  std::string stderrTail;

  bool done() const {
    return state == State::FINISHED || state == State::FAILED || state == State::CANCELLED ||
           state == State::SKIPPED;
  }
};

struct Session {
  enum class State { OPEN, FAILED, CLOSED };

  uint64_t id;
  std::string name;
  State state = State::OPEN;
  // Who closes it when they disconnect (an opaque client-connection key);
  // none for a session replayed from the log until its client re-attaches.
  const void* owner = nullptr;
  // Outlives its client: not closed when the owner disconnects.
  bool persistent = false;
  // Closed by its client while named actors of it lived: it stays open,
  // ownerless, and closes when the last of them ends.
  bool lingering = false;
  std::string failureMessage;
  uint64_t failedTask = 0;
  std::string failedTaskName;
  int32_t failedExitStatus = -1;
  std::string failedStderrTail;

  std::unordered_map<uint64_t, TaskNode> tasks;
  std::unordered_map<uint64_t, ObjectNode> objects;
  // Submitted messages, kept while the session lives: TaskNode::spec points
  // into them.
  std::vector<std::unique_ptr<capnp::MallocMessageBuilder>> messages;
  std::vector<std::unique_ptr<StreamGroup>> groups;
  // Its actors, by their task's n.
  std::unordered_map<uint64_t, ActorNode> actors;

  uint64_t unfinishedTasks = 0;
  // Lowest id no task or object of the session has used.
  uint64_t nextId = 1;
  // Ids below this are promised to a submitter (reserveIds); the creator
  // holds [1, FIRST_ID_BLOCK) from the start.
  static constexpr uint64_t FIRST_ID_BLOCK = uint64_t(1) << 20;
  uint64_t reservedUpTo = FIRST_ID_BLOCK;
  uint64_t counts[7] = {};  // by TaskNode::State
  // Bumped by every task state change: readers (the status page) cache
  // what they derive from the tasks until it moves.
  uint64_t changes = 0;
  // wait() with no ids: completes when unfinishedTasks reaches 0.
  std::vector<std::shared_ptr<Waiter>> allWaiters;
  // Every pending waiter, so that a failure or close reaches all of them.
  std::vector<std::shared_ptr<Waiter>> everyWaiter;

  // A task ended (or was counted unfinished again): waits for every task
  // count every task but actors.
  void countDone(const TaskNode& task) {
    if (!task.isActor) unfinishedTasks--;
  }
  void countUndone(const TaskNode& task) {
    if (!task.isActor) unfinishedTasks++;
  }

  void setTaskState(TaskNode& task, TaskNode::State state) {
    counts[static_cast<int>(task.state)]--;
    counts[static_cast<int>(state)]++;
    task.state = state;
    changes++;
  }
};

}  // namespace squall
