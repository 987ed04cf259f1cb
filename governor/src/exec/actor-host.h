// The actors that live on this governor (docs/actors.md). An actor is an
// instance of an actor type of an executor program (tasklib), in an
// executor process of its own: its task (type actor) holds its resources
// while it lives, and its method calls (tasks of type actorCall) run in
// that process, one after another, in the order the server assigned them
// here, which is the order they were submitted in. Loop thread only.
//
// Calls take a turn when assigned (enqueue) and are sent once their inputs
// are here and every call before them was sent, over the process's calls
// channel (executor.capnp, openCalls: plain messages, no RPC per call; the
// executor runs what it receives in order, writing each answer before the
// next method, so calls are pipelined: see MAX_IN_FLIGHT in the .cpp).
// An actor whose constructor allowed concurrent calls (Ray's async and
// threaded actors) gets up to that many at once, answered as they end;
// when its process dies, every call sent and not answered counts as
// running (run again while its retries allow, else failed), and a call
// abandoned while sent is left to end, its answer dropped.
// When the process
// dies, the call it was running is run again on the restarted actor while
// its max_call_retries allow, else fails; the calls behind it run on the restarted actor, in order; the
// actor is started again (its constructor run anew on the same inputs)
// while its max_restarts allow, else it ends failed and so do its calls.
// Killing the actor (cancelling its task) stops its process; its calls
// fail saying so. A call cancelled (or timed out) while it runs stops the
// process too: a method cannot be interrupted otherwise.
#pragma once

#include "executor-pool.h"
#include "task-env.h"

#include <capnp/message.h>
#include <deque>
#include <kj/function.h>
#include <unordered_map>

namespace squall {

class ActorHosts final : private kj::TaskSet::ErrorHandler {
 public:
  ActorHosts(ExecutorPool& pool, kj::Timer& timer, spdlog::logger& logger);
  ~ActorHosts() noexcept(false);
  KJ_DISALLOW_COPY(ActorHosts);

  // A call's message (a MethodCall; its serial is set when it is sent),
  // made anew for every attempt (a restarted actor gets it again), with the
  // output directory it names.
  struct Built {
    kj::Own<capnp::MallocMessageBuilder> message;
    kj::Own<StoreTemp> outDir;
  };
  using BuildCall = kj::Function<Built()>;
  // A method's answer (not failed).
  struct Answer {
    kj::Own<capnp::MessageReader> message;
    kj::Own<StoreTemp> outDir;
    wire::MethodAnswer::Reader get() { return message->getRoot<wire::MethodAnswer>(); }
  };

  // The actor task `assignment` was assigned here: its calls may take
  // their turns from now on, before it starts.
  void expect(wire::Assignment::Reader assignment);
  // A call of `actor` was assigned: it takes its turn after the calls
  // assigned before it. Nullptr when it may, else why not.
  kj::Maybe<kj::String> enqueue(Id actor, Id call);
  // The executor and type of `actor`, when it is here.
  struct TypeName {
    kj::StringPtr executor;
    kj::StringPtr type;
  };
  kj::Maybe<TypeName> typeOf(Id actor) const;

  // The actor task's runner: starts the actor's process with the
  // resources `control` holds, constructs it, serves its calls. Resolves
  // when the actor ends: failed (it could not be constructed, or died more
  // often than it may be restarted) or cancelled (killed).
  kj::Promise<TaskOutcome> run(TaskEnv& env, wire::Assignment::Reader assignment, TaskControl& control);

  // A call's runner, once its inputs are here: resolves with its answer
  // in its turn; rejects (FAILED) when the method threw or the actor died
  // under it beyond its retries, or ended before it ran.
  kj::Promise<Answer> call(Id actor, Id call, BuildCall build);
  // The call's task ended before its answer (cancelled, timed out): a
  // call not sent is dropped; a call running stops the actor's process
  // (it restarts as after a crash, if it may); a call waiting in the
  // process runs, its answer dropped.
  void abandon(Id actor, Id call);

  // A task assigned here ended (any type): an actor's end fails the calls
  // still queued for it; a call's end gives up its turn.
  void taskEnded(wire::Assignment::Reader assignment, kj::StringPtr error);

  size_t count() const { return actors.size(); }

 private:
  struct Call;
  struct Actor;
  struct CallsChannel;

  ExecutorPool& pool;
  kj::Timer& timer;
  spdlog::logger& logger;
  std::unordered_map<Id, kj::Own<Actor>, IdHash> actors;
  // RPCs and process watches in flight; declared last, so destroyed first.
  kj::TaskSet tasks;

  kj::Maybe<Actor&> find(Id actor);
  // Starts (or restarts) the actor's process and sends its constructor.
  void start(Actor& actor);
  // Sends the calls whose turn it is.
  void pump(Actor& actor);
  // Reads the answers on the calls channel of the process of `generation`
  // until it ends.
  kj::Promise<void> readAnswers(Id actor, uint64_t generation, CallsChannel& channel);
  // The answer to the first call sent.
  void answered(Actor& actor, kj::Own<capnp::MessageReader> message);
  // The calls channel ended (the process went, or broke the protocol):
  // the calls sent and not answered are lost.
  void channelEnded(Actor& actor, kj::StringPtr why);
  // Drops the actor's calls channel (once the loop is past the callback
  // that may be reading it).
  void closeChannel(Actor& actor);
  // The process of `generation` may be gone: once its exit is seen and
  // every call sent to it is answered or lost, died() runs.
  void maybeDied(Actor& actor, uint64_t generation);
  // Its process is gone: the calls' fates, then a restart or the end.
  void died(Actor& actor);
  // Ends the actor: every call still queued fails with `why`.
  void end(Actor& actor, TaskOutcome outcome, kj::StringPtr why);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
