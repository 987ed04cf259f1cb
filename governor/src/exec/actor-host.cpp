// Actors on this governor: their processes, their calls' turns, restarts.
// Loop thread only.
#include "actor-host.h"

#include <capnp/serialize.h>
#include <squall/proto/errors.h>
#include <squall/proto/message-stream.h>
#include <squall/proto/rpc.h>

namespace squall {

namespace {

// How long a process that lost its connection has to exit before it is
// killed (it is hung, or closed its socket by mistake).
constexpr kj::Duration HUNG_GRACE = 2 * kj::SECONDS;
// Calls sent to the process and not answered, at most: enough that it
// never waits for the governor between calls. An executor writes the
// answers of the calls it ran before it runs an actor's next method
// (tasklib's answersOut), so a process that dies takes no answer but that
// of the call it was running: the first call not answered is the one that
// was running, those behind it never started.
constexpr size_t MAX_IN_FLIGHT = 16;

}  // namespace

// The governor's end of a process's calls channel. `reading` goes first,
// then the stream of messages it reads, then the socket.
struct ActorHosts::CallsChannel {
  explicit CallsChannel(kj::Own<kj::AsyncIoStream> socket)
      : socket(kj::mv(socket)), messages(kj::heap<BufferedMessageStream>(*this->socket)) {
    messages->usePlainMessages();
  }
  kj::Own<kj::AsyncIoStream> socket;
  kj::Own<BufferedMessageStream> messages;
  kj::Promise<void> reading = nullptr;
  // The serial of the last call sent on it.
  uint64_t sent = 0;
};

struct ActorHosts::Call {
  Id id;
  // Its MethodCall's serial on the channel it was sent on.
  uint64_t serial = 0;
  // Set once its inputs are here and its runner waits for the answer.
  kj::Maybe<BuildCall> build;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<Answer>>> fulfiller;
  bool sent = false;
  // Sent, and its process's connection ended before an answer came.
  bool lost = false;
  // Its task ended while it was sent (cancelled, timed out): its answer,
  // or its loss, is dropped; it is never run again.
  bool abandoned = false;
  // Times it was run again because the actor died while running it.
  uint32_t retries = 0;
  kj::Own<StoreTemp> outDir;
};

struct ActorHosts::Actor {
  Id id;
  // "executor/Type", for logs and errors.
  kj::String name;
  kj::String executor;
  kj::String type;
  uint32_t maxRestarts = 0;
  uint32_t maxCallRetries = 0;
  // How many calls its process may have under way at once (its
  // constructor says): above 1, they are answered as they end, and every
  // call sent and not answered may be running.
  uint32_t concurrency = 1;
  enum class State { ASSIGNED, STARTING, ALIVE, ENDED };
  State state = State::ASSIGNED;
  // Calls in their turn order: the sent ones first.
  std::deque<kj::Own<Call>> calls;
  // The same calls by id (a lookup per call must not walk the queue: an
  // actor may have thousands queued).
  std::unordered_map<Id, Call*, IdHash> byId;

  // Its place in `calls`, looked for from the front (calls leave from
  // there); calls.size() when not there.
  size_t indexOf(const Call& call) const {
    for (size_t i = 0; i < calls.size(); i++) {
      if (calls[i].get() == &call) return i;
    }
    return calls.size();
  }
  // Removes calls[i] (and its index entry).
  kj::Own<Call> remove(size_t i) {
    auto own = kj::mv(calls[i]);
    calls.erase(calls.begin() + i);
    byId.erase(own->id);
    return own;
  }
  // Set while its task runs (run()).
  TaskEnv* env = nullptr;
  kj::Maybe<wire::Assignment::Reader> assignment;
  TaskControl* control = nullptr;
  kj::Own<kj::PromiseFulfiller<TaskOutcome>> ended;
  kj::Own<ExecutorProcess> process;
  // The current process's calls channel (null before it starts and once it
  // ended).
  kj::Own<CallsChannel> channel;
  // Bumped with every process, so that what an earlier one answers late
  // is told apart.
  uint64_t generation = 0;
  uint32_t restarts = 0;
  uint64_t callsDone = 0;

  kj::String what() const { return kj::str("actor ", name, " (task ", id, ")"); }
};

ActorHosts::ActorHosts(ExecutorPool& pool, kj::Timer& timer, spdlog::logger& logger)
    : pool(pool), timer(timer), logger(logger), tasks(*this) {}

ActorHosts::~ActorHosts() noexcept(false) {}

void ActorHosts::taskFailed(kj::Exception&& exception) {
  logger.error("event=actor-tracking-failed error=\"{}\"", exception.getDescription().cStr());
}

kj::Maybe<ActorHosts::Actor&> ActorHosts::find(Id actor) {
  auto it = actors.find(actor);
  if (it == actors.end()) return nullptr;
  return *it->second;
}

void ActorHosts::expect(wire::Assignment::Reader assignment) {
  auto task = assignment.getTask();
  auto config = task.getConfig().getActor();
  Id id = Id::from(task.getId());
  if (actors.count(id) != 0) return;
  auto actor = kj::heap<Actor>();
  actor->id = id;
  actor->executor = kj::str(config.getExecutor());
  actor->type = kj::str(config.getType());
  actor->name = kj::str(config.getExecutor(), "/", config.getType());
  actor->maxRestarts = config.getMaxRestarts();
  actor->maxCallRetries = config.getMaxCallRetries();
  actors.emplace(id, kj::mv(actor));
}

kj::Maybe<kj::String> ActorHosts::enqueue(Id actorId, Id callId) {
  KJ_IF_MAYBE(actor, find(actorId)) {
    if (actor->state == Actor::State::ENDED) return kj::str(actor->what(), " has ended");
    auto call = kj::heap<Call>();
    call->id = callId;
    actor->byId[callId] = call.get();
    actor->calls.push_back(kj::mv(call));
    return nullptr;
  }
  return kj::str("actor ", actorId, " is not on this governor");
}

kj::Maybe<ActorHosts::TypeName> ActorHosts::typeOf(Id actorId) const {
  auto it = actors.find(actorId);
  if (it == actors.end()) return nullptr;
  return TypeName{it->second->executor, it->second->type};
}

kj::Promise<TaskOutcome> ActorHosts::run(TaskEnv& env, wire::Assignment::Reader assignment, TaskControl& control) {
  Id id = Id::from(assignment.getTask().getId());
  expect(assignment);
  auto& actor = KJ_ASSERT_NONNULL(find(id));
  KJ_IF_MAYBE(known, pool.findExecutor(actor.executor)) {
    bool offered = false;
    for (auto& f : known->functions) offered = offered || (f.actor && f.name == actor.type);
    if (!offered) {
      return TaskOutcome::failure(id, kj::str("executor ", actor.executor, " of governor ", env.governorName,
                                              " has no actor type ", actor.type));
    }
  } else {
    return TaskOutcome::failure(id, kj::str("governor ", env.governorName, " has no executor ", actor.executor));
  }
  actor.env = &env;
  actor.assignment = assignment;
  actor.control = &control;
  auto paf = kj::newPromiseAndFulfiller<TaskOutcome>();
  actor.ended = kj::mv(paf.fulfiller);
  start(actor);
  // Killed: its process goes with it, its calls fail.
  auto killed = control.whenCancelled().then([this, id]() -> kj::Promise<TaskOutcome> {
    KJ_IF_MAYBE(a, find(id)) {
      if (a->state != Actor::State::ENDED) {
        logger.info("event=actor-killed actor={} task={} calls_done={}", a->name.cStr(), kj::str(id).cStr(),
                    a->callsDone);
        end(*a, TaskOutcome::failure(id, kj::str("cancelled")), kj::str(a->what(), " was killed"));
      }
    }
    return TaskOutcome::failure(id, kj::str("cancelled"));
  });
  return paf.promise.exclusiveJoin(kj::mv(killed));
}

void ActorHosts::start(Actor& actor) {
  auto& env = *actor.env;
  auto assignment = KJ_ASSERT_NONNULL(actor.assignment);
  actor.state = Actor::State::STARTING;
  actor.generation++;
  uint64_t generation = actor.generation;
  try {
    actor.process = pool.startProcess(actor.executor, actor.control->resourceEnv());
  } catch (kj::Exception& e) {
    end(actor, TaskOutcome::failure(actor.id, kj::str(actor.what(), ": ", userMessage(e))),
        kj::str(actor.what(), " could not start"));
    return;
  }
  auto pid = actor.process->child->pid();
  // What it prints is the actor's, named as its task is (or by its type).
  auto taskName = assignment.getTask().getName();
  actor.process->workFor(OutputOwner{actor.id, taskName.size() > 0 ? kj::str(taskName) : kj::str(actor.type)});
  logger.info("event=actor-starting actor={} task={} pid={} restarts={}", actor.name.cStr(),
              kj::str(actor.id).cStr(), pid, actor.restarts);
  Id id = actor.id;
  // Its exit, whenever it comes, is a death unless the actor has ended.
  // The answers it wrote before are read first (died() waits for the
  // channel's end), unless a process it left behind holds the channel
  // open: then the channel ends a grace later.
  tasks.add(actor.process->exited.addBranch().then([this, id, generation]() {
    KJ_IF_MAYBE(a, find(id)) { maybeDied(*a, generation); }
    return timer.afterDelay(HUNG_GRACE).then([this, id, generation]() {
      KJ_IF_MAYBE(a, find(id)) {
        if (a->generation == generation && a->channel.get() != nullptr && a->state != Actor::State::ENDED) {
          channelEnded(*a, "its calls channel stayed open after its process exited");
        }
      }
    });
  }));
  // Its calls channel, sent ahead of the constructor on the same
  // connection: the executor reads it once it has the descriptor, and no
  // call is written to it before the constructor has answered.
  closeChannel(actor);
  {
    auto pair = pool.socketPair();
    actor.channel = kj::heap<CallsChannel>(kj::mv(pair.ours));
    actor.channel->reading = readAnswers(id, generation, *actor.channel).eagerlyEvaluate([this](kj::Exception&& e) {
      logger.error("event=actor-calls-channel-failed error=\"{}\"", e.getDescription().cStr());
    });
    auto open = actor.process->cap.openCallsRequest();
    open.setChannel(kj::heap<PipeEndCap>(kj::mv(pair.theirs)));
    tasks.add(open.send().ignoreResult().catch_([this, id, generation](kj::Exception&& e) {
      KJ_IF_MAYBE(a, find(id)) {
        if (a->generation != generation || a->state == Actor::State::ENDED) return;
        // Gone (its exit says how, died()), or it cannot take calls.
        a->process->child->killGroup(SIGKILL);
        if (e.getType() != kj::Exception::Type::DISCONNECTED) {
          auto error = kj::str(a->what(), ": its process took no calls channel: ", userMessage(e));
          end(*a, TaskOutcome::failure(id, kj::str(error)), error);
        }
      }
    }));
  }
  auto task = assignment.getTask();
  auto request = actor.process->cap.constructRequest();
  request.setType(actor.type);
  request.setConfig(task.getConfig().getActor().getConfig());
  setCallContext(request.initContext(), task);
  setStoredCallInputs(env, task, request.initInputs(task.getInputs().size()));
  tasks.add(request.send().then(
      [this, id, generation](auto response) {
        KJ_IF_MAYBE(a, find(id)) {
          if (a->generation != generation || a->state != Actor::State::STARTING) return;
          a->state = Actor::State::ALIVE;
          a->concurrency = kj::max(1u, response.getConcurrency());
          logger.info("event=actor-started actor={} task={} pid={} concurrency={}", a->name.cStr(),
                      kj::str(id).cStr(), a->process->child->pid(), a->concurrency);
          pump(*a);
        }
      },
      [this, id, generation](kj::Exception&& e) {
        KJ_IF_MAYBE(a, find(id)) {
          if (a->generation != generation || a->state != Actor::State::STARTING) return;
          if (e.getType() == kj::Exception::Type::DISCONNECTED) {
            // Its process went: its exit says how (died()).
            a->process->child->killGroup(SIGKILL);
            return;
          }
          auto error = kj::str(a->what(), ": its constructor failed: ", userMessage(e));
          a->process->child->killGroup(SIGKILL);
          end(*a, TaskOutcome::failure(id, kj::str(error)), error);
        }
      }));
}

void ActorHosts::pump(Actor& actor) {
  if (actor.state != Actor::State::ALIVE || actor.channel.get() == nullptr) return;
  auto& channel = *actor.channel;
  size_t inFlight = 0;
  // A concurrent actor starts every call it receives: its limit is its own.
  size_t mostInFlight = actor.concurrency > 1 ? actor.concurrency : MAX_IN_FLIGHT;
  for (auto& entry : actor.calls) {
    auto& call = *entry;
    if (call.sent) {
      inFlight++;
      continue;
    }
    // A call whose inputs are not here yet holds back those behind it.
    if (call.build == nullptr || inFlight >= mostInFlight) break;
    auto built = KJ_ASSERT_NONNULL(call.build)();
    call.serial = ++channel.sent;
    built.message->getRoot<wire::MethodCall>().setSerial(call.serial);
    call.outDir = kj::mv(built.outDir);
    call.sent = true;
    inFlight++;
    // Gathered with the others sent in this turn into one write. A write
    // that fails ends the channel for the reader too (readAnswers).
    auto segments = built.message->getSegmentsForOutput();
    auto written = channel.messages->writeMessage(nullptr, segments);
    if (capnp::computeSerializedSizeInWords(*built.message) * sizeof(capnp::word) >=
        BufferedMessageStream::COPY_LIMIT_BYTES) {
      // Written from its own words: they live until then.
      tasks.add(written.attach(kj::mv(built.message)).catch_([](kj::Exception&&) {}));
    }
  }
}

kj::Promise<void> ActorHosts::readAnswers(Id id, uint64_t generation, CallsChannel& channel) {
  // Is the channel still the actor's current one?
  auto current = [this, id, generation, &channel]() -> Actor* {
    KJ_IF_MAYBE(a, find(id)) {
      if (a->generation == generation && a->channel.get() == &channel && a->state != Actor::State::ENDED) return a;
    }
    return nullptr;
  };
  return channel.messages->tryReadMessage(nullptr, readerOptions())
      .then(
          [this, id, generation, &channel, current](kj::Maybe<capnp::MessageReaderAndFds> read) -> kj::Promise<void> {
            Actor* actor = current();
            if (actor == nullptr) return kj::READY_NOW;
            KJ_IF_MAYBE(message, read) {
              answered(*actor, kj::mv(message->reader));
              if (current() == nullptr) return kj::READY_NOW;
              return readAnswers(id, generation, channel);
            }
            channelEnded(*actor, "its calls channel ended");
            return kj::READY_NOW;
          },
          [this, current](kj::Exception&& e) {
            Actor* actor = current();
            if (actor != nullptr) channelEnded(*actor, kj::str("its calls channel failed: ", e.getDescription()));
          });
}

void ActorHosts::closeChannel(Actor& actor) {
  if (actor.channel.get() == nullptr) return;
  // Not from here: its reader may be the callback that got here.
  tasks.add(kj::evalLater([channel = kj::mv(actor.channel)]() mutable { channel = nullptr; }));
}

void ActorHosts::answered(Actor& actor, kj::Own<capnp::MessageReader> message) {
  kj::Maybe<kj::String> broken;
  // The first call sent, or for a concurrent actor any sent one (they are
  // at the front).
  size_t index = 0;
  Call* call = nullptr;
  uint64_t serial = 0;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { serial = message->getRoot<wire::MethodAnswer>().getSerial(); })) {
    broken = kj::str("its answer could not be read: ", e->getDescription());
  } else {
    size_t looked = actor.concurrency > 1 ? actor.calls.size() : kj::min(actor.calls.size(), size_t(1));
    for (; index < looked && actor.calls[index]->sent; index++) {
      if (actor.calls[index]->serial == serial) {
        call = actor.calls[index].get();
        break;
      }
    }
    if (call == nullptr) broken = kj::str("it answered call ", serial, " out of turn");
  }
  KJ_IF_MAYBE(why, broken) {
    // The protocol is broken: the process goes, and died() decides.
    logger.error("event=actor-protocol-error actor={} task={} error=\"{}\"", actor.name.cStr(),
                 kj::str(actor.id).cStr(), why->cStr());
    actor.process->child->killGroup(SIGKILL);
    channelEnded(actor, *why);
    return;
  }
  auto own = actor.remove(index);
  actor.callsDone++;
  if (!call->abandoned) {
    KJ_IF_MAYBE(f, call->fulfiller) {
      auto answer = message->getRoot<wire::MethodAnswer>();
      if (answer.getFailed()) {
        (*f)->reject(SQUALL_EXCEPTION(FAILED, answer.getError()));
      } else {
        (*f)->fulfill(Answer{kj::mv(message), kj::mv(call->outDir)});
      }
    }
  }
  pump(actor);
}

void ActorHosts::channelEnded(Actor& actor, kj::StringPtr why) {
  uint64_t generation = actor.generation;
  logger.debug("event=actor-calls-channel-ended actor={} task={} why=\"{}\"", actor.name.cStr(),
               kj::str(actor.id).cStr(), why.cStr());
  // Every answer written before the process went has been read: the
  // first call not answered was running, those behind it never started.
  for (auto& call : actor.calls) {
    if (call->sent) call->lost = true;
  }
  closeChannel(actor);
  if (actor.process->exit == nullptr) {
    // Its exit says what happened; a process that is hung, or closed its
    // channel by mistake, is killed after a grace.
    Id id = actor.id;
    tasks.add(actor.process->exited.addBranch().exclusiveJoin(timer.afterDelay(HUNG_GRACE)).then(
        [this, id, generation]() {
          KJ_IF_MAYBE(a, find(id)) {
            if (a->generation == generation && a->process->exit == nullptr) a->process->child->killGroup(SIGKILL);
          }
        }));
  }
  maybeDied(actor, generation);
}

void ActorHosts::maybeDied(Actor& actor, uint64_t generation) {
  if (generation != actor.generation || actor.state == Actor::State::ENDED) return;
  if (actor.process.get() == nullptr || actor.process->exit == nullptr) return;
  // What the process answered before it went is still being read: the
  // call it ran when it went is the first not answered.
  for (auto& call : actor.calls) {
    if (call->sent && !call->lost) return;
  }
  died(actor);
}

void ActorHosts::died(Actor& actor) {
  auto& process = *actor.process;
  kj::String how = kj::str("lost its connection");
  KJ_IF_MAYBE(exit, process.exit) { how = exitText(*exit); }
  auto reason = kj::str("its process (pid ", process.child->pid(), ") ", how);
  // The first call sent was running; those behind it never started. In a
  // concurrent actor, any call sent may have been running.
  bool first = true;
  for (size_t i = 0; i < actor.calls.size();) {
    auto& call = *actor.calls[i];
    if (!call.sent) break;
    call.sent = false;
    call.lost = false;
    call.outDir = nullptr;
    if (call.abandoned) {
      // Its task has ended: it goes (and if it ran, it was why).
      first = actor.concurrency > 1;
      actor.remove(i);
      continue;
    }
    if (first) {
      first = actor.concurrency > 1;
      if (call.retries < actor.maxCallRetries) {
        call.retries++;
        logger.warn("event=actor-call-retried actor={} call={} retry={} why=\"{}\"", actor.name.cStr(),
                    kj::str(call.id).cStr(), call.retries, reason.cStr());
      } else {
        KJ_IF_MAYBE(f, call.fulfiller) {
          (*f)->reject(SQUALL_EXCEPTION(FAILED, actor.what(), " died while running the call: ", reason,
                                        actor.maxCallRetries > 0
                                            ? kj::str(" (run ", call.retries + 1, " times; max_call_retries ",
                                                      actor.maxCallRetries, ")")
                                            : kj::str("")));
        }
        actor.remove(i);
        continue;
      }
    }
    i++;
  }
  if (actor.restarts >= actor.maxRestarts) {
    auto error = kj::str(actor.what(), " died: ", reason,
                         actor.maxRestarts > 0 ? kj::str(" (restarted ", actor.restarts, " times; max_restarts ",
                                                         actor.maxRestarts, ")")
                                               : kj::str(" (max_restarts 0)"));
    logger.warn("event=actor-died actor={} task={} why=\"{}\"", actor.name.cStr(), kj::str(actor.id).cStr(),
                error.cStr());
    end(actor, TaskOutcome::failure(actor.id, kj::str(error)), error);
    return;
  }
  actor.restarts++;
  logger.warn("event=actor-restarting actor={} task={} restart={} why=\"{}\"", actor.name.cStr(),
              kj::str(actor.id).cStr(), actor.restarts, reason.cStr());
  start(actor);
}

kj::Promise<ActorHosts::Answer> ActorHosts::call(Id actorId, Id callId, BuildCall build) {
  KJ_IF_MAYBE(actor, find(actorId)) {
    auto it = actor->byId.find(callId);
    if (it == actor->byId.end()) {
      return SQUALL_EXCEPTION(FAILED, actor->what(), " holds no turn for call ", callId);
    }
    auto& entry = *it->second;
    KJ_REQUIRE(entry.build == nullptr, "a call is run once", callId);
    auto paf = kj::newPromiseAndFulfiller<Answer>();
    entry.build = kj::mv(build);
    entry.fulfiller = kj::mv(paf.fulfiller);
    pump(*actor);
    return kj::mv(paf.promise);
  }
  return SQUALL_EXCEPTION(FAILED, "actor ", actorId, " is not on this governor");
}

void ActorHosts::abandon(Id actorId, Id callId) {
  KJ_IF_MAYBE(actor, find(actorId)) {
    auto it = actor->byId.find(callId);
    if (it == actor->byId.end()) return;
    auto& call = *it->second;
    size_t i = actor->indexOf(call);
    call.fulfiller = nullptr;
    if (!call.sent) {
      actor->remove(i);
      return;
    }
    // Sent: it stays until answered or lost, and is never sent again.
    call.abandoned = true;
    if (i == 0 && actor->concurrency == 1 && actor->state == Actor::State::ALIVE &&
        actor->process->exit == nullptr) {
      // It runs: only stopping the process stops it.
      logger.warn("event=actor-call-abandoned actor={} call={} action=stop-process", actor->name.cStr(),
                  kj::str(callId).cStr());
      actor->process->child->killGroup(SIGKILL);
    }
  }
}

void ActorHosts::taskEnded(wire::Assignment::Reader assignment, kj::StringPtr error) {
  auto task = assignment.getTask();
  Id id = Id::from(task.getId());
  auto config = task.getConfig();
  if (config.isActor()) {
    KJ_IF_MAYBE(actor, find(id)) {
      if (actor->state != Actor::State::ENDED) {
        // It never ran (cancelled while it waited), or its runner ended it.
        end(*actor, TaskOutcome::failure(id, kj::str(error)), kj::str(actor->what(), " ended: ", error));
      }
      actors.erase(id);
    }
  } else if (config.isActorCall()) {
    Id actorId = Id::from(config.getActorCall().getActor());
    KJ_IF_MAYBE(actor, find(actorId)) {
      // Answered calls have left already: the common case looks no further.
      auto it = actor->byId.find(id);
      if (it == actor->byId.end()) return;
      auto& call = *it->second;
      // Still queued (a failed input, a cancel before it ran); a sent one
      // stays until the process answers it or dies.
      if (!call.sent) {
        actor->remove(actor->indexOf(call));
      } else {
        call.fulfiller = nullptr;
        call.abandoned = true;
      }
    }
  }
}

void ActorHosts::end(Actor& actor, TaskOutcome outcome, kj::StringPtr why) {
  actor.state = Actor::State::ENDED;
  closeChannel(actor);
  auto calls = kj::mv(actor.calls);
  actor.calls.clear();
  actor.byId.clear();
  for (auto& call : calls) {
    KJ_IF_MAYBE(f, call->fulfiller) { (*f)->reject(SQUALL_EXCEPTION(FAILED, why)); }
  }
  if (actor.process.get() != nullptr && actor.process->exit == nullptr) {
    actor.process->child->killGroup(SIGKILL);
    // Kept until its exit is seen: the child is reaped by its watch.
    auto process = kj::mv(actor.process);
    auto& ref = *process;
    tasks.add(ref.exited.addBranch().attach(kj::mv(process)));
  }
  if (actor.ended.get() != nullptr && actor.ended->isWaiting()) actor.ended->fulfill(kj::mv(outcome));
}

}  // namespace squall
