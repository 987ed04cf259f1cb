// The local task queue. Loop thread only.
#include "task-queue.h"

#include "actor-host.h"
#include "executor-pool.h"
#include "stream-hub.h"

#include <algorithm>
#include <capnp/message.h>

namespace squall {

namespace {

// Whether the task reads or writes a stream live: its group was placed
// together and readers may attach, so it neither moves nor waits behind
// another call.
bool touchesLiveStreams(wire::Assignment::Reader assignment) {
  for (auto kind : assignment.getOutputKinds()) {
    if (kind == wire::ObjectKind::STREAM) return true;
  }
  for (auto input : assignment.getInputs()) {
    if (input.getLive()) return true;
  }
  return false;
}

bool isLive(wire::Assignment::Reader assignment, uint i) {
  auto locations = assignment.getInputs();
  return i < locations.size() && locations[i].getLive();
}

// How readers' errors name a stream's producer.
kj::String producerName(wire::TaskSpec::Reader task) {
  if (task.getName().size() > 0) return kj::str(task.getName());
  if (task.getConfig().isExecute()) {
    auto args = task.getConfig().getExecute().getArgs();
    if (args.size() > 0) {
      kj::StringPtr program = args[0];
      if (program.size() <= 40) return kj::str(program);
      return kj::str(program.slice(0, 37), "...");
    }
  }
  return kj::str();
}

}  // namespace

void TaskQueue::ended(wire::Assignment::Reader assignment, TaskOutcome outcome) {
  KJ_IF_MAYBE(hub, env.streams) { hub->taskEnded(assignment, outcome.ok, outcome.error); }
  KJ_IF_MAYBE(actors, env.actors) { actors->taskEnded(assignment, outcome.error); }
  report(kj::mv(outcome));
}

namespace {
std::vector<ResourcePool> withCpus(uint32_t cpus, std::vector<ResourcePool> pools) {
  pools.insert(pools.begin(), cpusPool(cpus));
  return pools;
}
}  // namespace

TaskQueue::TaskQueue(TaskEnv& env, DataFetcher& fetcher, uint32_t cpus, std::vector<ResourcePool> pools,
                     Reporter report)
    : env(env), fetcher(fetcher), cpus(cpus), allocator(withCpus(cpus, kj::mv(pools))), report(kj::mv(report)),
      work(*this) {}

std::vector<ResourcePool> TaskQueue::offeredPools() const {
  std::vector<ResourcePool> pools;
  for (auto& pool : allocator.pools()) {
    if (pool.name != "cpus") pools.push_back(pool);
  }
  return pools;
}

TaskQueue::~TaskQueue() noexcept(false) { *alive = false; }

class TaskQueue::Hold final : public ResourceHold {
 public:
  Hold(TaskQueue& queue, ResourceGrant grant) : queue(queue), alive(queue.alive), grant(std::move(grant)) {}
  ~Hold() noexcept(false) {
    if (!*alive) return;
    auto& waiting = queue.rejoining;
    waiting.erase(std::remove(waiting.begin(), waiting.end(), this), waiting.end());
    if (lentUnits > 0) queue.seceded.erase(lentFor);
    // Without the lent cpus, which are the queue's already.
    queue.released(std::move(grant));
  }
  KJ_DISALLOW_COPY(Hold);

  bool lend(Id task) override {
    if (!*alive || lentUnits > 0) return false;
    auto cpus = queue.cpuPool();
    ResourceGrant lent;
    for (auto it = grant.parts.begin(); it != grant.parts.end();) {
      if (it->pool == cpus) {
        for (auto& [item, share] : it->items) lentUnits += share;
        lent.parts.push_back(std::move(*it));
        it = grant.parts.erase(it);
      } else {
        ++it;
      }
    }
    if (lentUnits == 0) return false;
    lentFor = task;
    queue.seceded.insert(task);
    queue.env.logger.debug("event=cpus-lent task={} cpus={}", kj::str(task).cStr(),
                           static_cast<double>(lentUnits) / RESOURCE_UNIT);
    queue.lendListener(task, true);
    queue.released(std::move(lent));
    return true;
  }

  kj::Promise<void> reclaim() override {
    if (!*alive || lentUnits == 0) return kj::READY_NOW;
    KJ_REQUIRE(fulfiller == nullptr, "a call asked to rejoin twice");
    auto paf = kj::newPromiseAndFulfiller<void>();
    fulfiller = kj::mv(paf.fulfiller);
    queue.rejoining.push_back(this);
    queue.schedulePump();
    return kj::mv(paf.promise);
  }

  // pump(): takes the lent cpus again if they are free now.
  bool tryReclaim() {
    auto taken = queue.allocator.take({ResourceNeed{"cpus", lentUnits, false}});
    if (!taken) return false;
    for (auto& part : taken->parts) grant.parts.push_back(std::move(part));
    lentUnits = 0;
    queue.seceded.erase(lentFor);
    queue.lendListener(lentFor, false);
    KJ_IF_MAYBE(f, fulfiller) { (*f)->fulfill(); }
    fulfiller = nullptr;
    return true;
  }

 private:
  TaskQueue& queue;
  std::shared_ptr<bool> alive;
  ResourceGrant grant;
  // While lent: how many cpu units, for which task.
  uint64_t lentUnits = 0;
  Id lentFor;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> fulfiller;
};

size_t TaskQueue::cpuPool() const {
  auto& pools = allocator.pools();
  for (size_t i = 0; i < pools.size(); i++) {
    if (pools[i].name == "cpus") return i;
  }
  KJ_FAIL_ASSERT("the queue has no cpus pool");
}

void TaskQueue::released(ResourceGrant grant) {
  allocator.give(grant);
  schedulePump();
}

void TaskQueue::schedulePump() {
  if (pumpScheduled) return;
  pumpScheduled = true;
  work.add(kj::evalLater([this]() {
    pumpScheduled = false;
    pump();
  }));
}

kj::Maybe<kj::Own<ExecutorLease>> TaskQueue::ride(Task& task) {
  auto spec = task.spec->getTask();
  if (!spec.getConfig().isCall() || spec.getPolicy().getTimeLimitMs() > 0) return nullptr;
  // cpus only: another resource is not held by the process it would join.
  if (task.needs.size() != 1 || touchesLiveStreams(*task.spec)) return nullptr;
  KJ_IF_MAYBE(pool, env.executors) {
    auto call = spec.getConfig().getCall();
    return pool->join(call.getExecutor(), call.getFunction(), task.needs[0].units);
  }
  return nullptr;
}

void TaskQueue::taskFailed(kj::Exception&& exception) {
  // Every task chain ends in finish()/failWaiting(); reaching here is a bug.
  env.logger.error("event=task-chain-failed error=\"{}\"", exception.getDescription().cStr());
}

kj::Maybe<TaskQueue::Task&> TaskQueue::lookup(Id id, uint64_t serial) {
  auto it = tasks.find(id);
  if (it == tasks.end() || it->second->serial != serial) return nullptr;
  return *it->second;
}

void TaskQueue::assign(wire::Assignment::Reader assignment) {
  auto spec = assignment.getTask();
  Id id = Id::from(spec.getId());
  if (tasks.find(id) != tasks.end()) {
    env.logger.warn("event=duplicate-assignment task={}", kj::str(id).cStr());
    return;
  }
  // Its stream outputs, so that readers may attach at once (and learn of
  // any failure from here on).
  KJ_IF_MAYBE(hub, env.streams) {
    auto kinds = assignment.getOutputKinds();
    auto readers = assignment.getLiveReaders();
    auto persist = assignment.getPersist();
    auto outputs = spec.getOutputs();
    for (uint i = 0; i < outputs.size() && i < kinds.size(); i++) {
      if (kinds[i] != wire::ObjectKind::STREAM) continue;
      hub->expect(Id::from(outputs[i]), id, producerName(spec), i < readers.size() ? readers[i] : 0,
                  i < persist.size() && persist[i]);
    }
  }
  if (shuttingDown) {
    ended(assignment, TaskOutcome::failure(id, kj::str("governor ", env.governorName, " is shutting down")));
    return;
  }
  auto which = spec.getConfig().which();
  bool actorCall = which == wire::TaskSpec::Config::ACTOR_CALL;
  if (which == wire::TaskSpec::Config::ACTOR || actorCall) {
    KJ_IF_MAYBE(actors, env.actors) {
      if (actorCall) {
        KJ_IF_MAYBE(why, actors->enqueue(Id::from(spec.getConfig().getActorCall().getActor()), id)) {
          ended(assignment, TaskOutcome::failure(id, kj::mv(*why)));
          return;
        }
      } else {
        actors->expect(assignment);
      }
    } else {
      ended(assignment, TaskOutcome::failure(id, kj::str("governor ", env.governorName, " hosts no actors")));
      return;
    }
  }
  // A stream reader sharing its group's cpu holds none of its own; a
  // method call runs on its actor's.
  uint32_t needed = assignment.getSharesCpus() || actorCall ? 0 : spec.getResources().getCpus();
  if (needed > cpus) {
    ended(assignment, TaskOutcome::failure(id, kj::str("task needs ", needed, " cpus but governor ",
                                                       env.governorName, " has only ", cpus)));
    return;
  }
  std::vector<ResourceNeed> needs{{"cpus", uint64_t(needed) * RESOURCE_UNIT, false}};
  for (auto request : spec.getResources().getRequests()) {
    if (actorCall) break;
    needs.push_back({request.getName().cStr(), request.getAmount(), request.getAll()});
  }
  if (auto why = allocator.impossible(needs)) {
    ended(assignment, TaskOutcome::failure(id, kj::str("task cannot run on governor ", env.governorName, ": ",
                                                       why->c_str())));
    return;
  }

  // Inputs not held yet: joining a transfer under way or fetching them.
  kj::Vector<kj::Promise<void>> waits;
  auto inputs = spec.getInputs();
  auto locations = assignment.getInputs();
  for (uint i = 0; i < inputs.size(); i++) {
    Id object = Id::from(inputs[i].getObject());
    if (isLive(assignment, i)) continue;
    if (env.store.find(object) != nullptr) continue;
    KJ_IF_MAYBE(arriving, env.store.whenArrived(object)) {
      waits.add(kj::mv(*arriving));
      continue;
    }
    if (i < locations.size() && locations[i].getSources().size() > 0) {
      auto location = locations[i];
      waits.add(fetcher.fetch(object, location.getKind(), location.getSources()[0]));
      continue;
    }
    ended(assignment, TaskOutcome::failure(id, kj::str("input ", object, " is not held by governor ",
                                                       env.governorName, " and no source was given")));
    return;
  }

  auto task = kj::heap<Task>();
  task->id = id;
  task->serial = nextSerial++;
  task->spec = capnp::clone(assignment);
  task->needs = std::move(needs);
  uint64_t serial = task->serial;
  tasks.emplace(id, kj::mv(task));
  env.logger.debug("event=task-assigned task={} cpus={} fetching={}", kj::str(id).cStr(), needed,
                   waits.size());

  if (waits.empty()) {
    inputsReady(id, serial);
  } else {
    work.add(kj::joinPromises(waits.releaseAsArray())
                 .then([this, id, serial]() { inputsReady(id, serial); },
                       [this, id, serial](kj::Exception&& e) {
                         // DISCONNECTED: a source that went away, not a bad input.
                         failWaiting(id, serial, kj::str(e.getDescription()),
                                     e.getType() == kj::Exception::Type::DISCONNECTED);
                       }));
  }
}

void TaskQueue::inputsReady(Id id, uint64_t serial) {
  KJ_IF_MAYBE(task, lookup(id, serial)) {
    // Every input must still be here (an object removed meanwhile is lost).
    auto inputs = task->spec->getTask().getInputs();
    for (uint i = 0; i < inputs.size(); i++) {
      if (isLive(*task->spec, i)) continue;
      Id object = Id::from(inputs[i].getObject());
      if (env.store.find(object) == nullptr) {
        failWaiting(id, serial, kj::str("input ", object, " was removed from governor ",
                                        env.governorName, " before the task started"));
        return;
      }
    }
    if (task->spec->getTask().getConfig().isActorCall()) {
      // It needs no resources (its actor holds them) and waits for its
      // turn on the actor, not behind other tasks.
      start(*task);
      return;
    }
    makeReady(*task);
    pump();
  }
}

kj::Promise<bool> TaskQueue::prefetch(Id id, wire::ObjectKind kind, kj::Array<kj::String> sources) {
  if (env.store.find(id) != nullptr) return true;
  kj::Promise<bool> held = false;
  // Each source in turn, the next only if the one before failed.
  for (size_t i = sources.size(); i > 0; i--) {
    held = fetcher.fetch(id, kind, sources[i - 1])
               .then([]() -> kj::Promise<bool> { return true; },
                     [this, id, next = kj::mv(held), from = kj::str(sources[i - 1])](kj::Exception&& e) mutable {
                       env.logger.debug("event=prefetch-failed object={} from={} error=\"{}\"", kj::str(id).cStr(),
                                        from.cStr(), e.getDescription().cStr());
                       return kj::mv(next);
                     });
  }
  return held;
}

void TaskQueue::makeReady(Task& task) {
  task.state = State::READY;
  ready.insert(ReadyEntry{task.spec->getPriority(), task.serial, task.id});
}

void TaskQueue::failWaiting(Id id, uint64_t serial, kj::String error, bool inputUnavailable) {
  KJ_IF_MAYBE(task, lookup(id, serial)) {
    KJ_ASSERT(task->state != State::RUNNING);
    auto spec = kj::mv(task->spec);
    tasks.erase(id);
    auto outcome = TaskOutcome::failure(id, kj::mv(error));
    outcome.inputUnavailable = inputUnavailable;
    ended(*spec, kj::mv(outcome));
  }
}

void TaskQueue::pump() {
  // Tasks taking their lent cpus again go first: they are running already
  // (and may hold what others wait for).
  while (!rejoining.empty()) {
    if (!rejoining.front()->tryReclaim()) return;
    rejoining.pop_front();
  }
  while (!ready.empty()) {
    auto head = ready.begin();
    KJ_IF_MAYBE(task, lookup(head->id, head->serial)) {
      if (task->state != State::READY) {
        ready.erase(head);
        continue;
      }
      // Strict order: a big task at the head is not overtaken (no
      // starvation of tasks that need many cpus).
      task->grant = allocator.take(task->needs);
      if (!task->grant) {
        KJ_IF_MAYBE(lease, ride(*task)) {
          task->control.setRide(kj::mv(*lease));
        } else {
          return;
        }
      }
      ready.erase(head);
      start(*task);
    } else {
      ready.erase(head);
    }
  }
}

void TaskQueue::start(Task& task) {
  task.state = State::RUNNING;
  running++;
  if (task.grant) {
    task.control.setResourceEnv(allocator.environment(*task.grant));
    if (task.spec->getTask().getConfig().isCall()) {
      // Its executor process holds them until it has no call left.
      uint64_t units = task.needs[0].units;
      task.control.offerHold(kj::heap<Hold>(*this, std::move(*task.grant)), units);
      task.grant.reset();
    }
  }
  task.startWallUs = wallClockUs();
  task.startMonotonicUs = monotonicUs();
  Id id = task.id;
  uint64_t serial = task.serial;
  env.logger.debug("event=task-started task={} free_cpus={}", kj::str(id).cStr(), freeCpus());
  uint64_t limitMs = task.spec->getTask().getPolicy().getTimeLimitMs();
  if (limitMs > 0) {
    task.deadline = env.timer.afterDelay(taskMilliseconds(limitMs))
                        .then([&task]() { task.control.timeOut(); })
                        .eagerlyEvaluate(nullptr);
  }
  auto which = task.spec->getTask().getConfig().which();
  // execute and call end when their process is killed.
  bool abandonable = which != wire::TaskSpec::Config::EXECUTE && which != wire::TaskSpec::Config::SLEEP &&
                     which != wire::TaskSpec::Config::CALL && which != wire::TaskSpec::Config::ACTOR &&
                     which != wire::TaskSpec::Config::ACTOR_CALL;
  auto runner = kj::evalNow([this, &task]() { return runTask(env, *task.spec, task.control); });
  if (abandonable) {
    // A built-in's file work on the pool cannot be interrupted: on cancel or
    // time-out it is abandoned (it runs to the end of its current step, its
    // result and temporary files are dropped) and the task ends at once.
    runner = runner.exclusiveJoin(task.control.whenCancelled().then(
        [id]() { return TaskOutcome::failure(id, kj::str("cancelled")); }));
  }
  work.add(kj::mv(runner)
               .then([this, id, serial](TaskOutcome outcome) { finish(id, serial, kj::mv(outcome)); },
                     [this, id, serial](kj::Exception&& e) {
                       finish(id, serial,
                              TaskOutcome::failure(id, kj::str("governor ", env.governorName,
                                                               " failed to run the task: ",
                                                               e.getDescription())));
                     }));
}

void TaskQueue::finish(Id id, uint64_t serial, TaskOutcome outcome) {
  KJ_IF_MAYBE(task, lookup(id, serial)) {
    KJ_ASSERT(task->state == State::RUNNING);
    if (outcome.notStarted && !task->control.isCancelled() && !shuttingDown) {
      // Given back by its executor process before it ran: it waits again,
      // in its place.
      task->control.takeRide();
      task->control.takeHold();
      running--;
      makeReady(*task);
      env.logger.debug("event=task-given-back task={}", kj::str(id).cStr());
      pump();
      return;
    }
    outcome.id = id;
    outcome.startTimeUs = task->startWallUs;
    outcome.durationUs = monotonicUs() - task->startMonotonicUs;
    if (task->control.isCancelled()) {
      // Outputs made before the kill landed are not wanted.
      for (auto& output : outcome.outputs) env.store.remove(output.id);
      outcome.outputs.clear();
      outcome.ok = false;
      if (task->control.hasTimedOut()) {
        outcome.timedOut = true;
        outcome.error = timeLimitMessage(task->spec->getTask().getPolicy().getTimeLimitMs());
      } else {
        outcome.error = kj::str("cancelled");
      }
    }
    if (task->grant) {
      allocator.give(*task->grant);
      task->grant.reset();
    }
    // A call's cpus, if its runner did not take them.
    task->control.takeHold();
    running--;
    KJ_IF_MAYBE(aftermath, task->control.takeAftermath()) {
      finishing++;
      work.add(aftermath->then(
          [this]() {
            finishing--;
            checkIdle();
          },
          [this](kj::Exception&& e) {
            env.logger.warn("event=task-aftermath-failed error=\"{}\"", e.getDescription().cStr());
            finishing--;
            checkIdle();
          }));
    }
    auto spec = kj::mv(task->spec);
    tasks.erase(id);
    if (outcome.ok && spec->getInlineOutputBytes() > 0) {
      outcome.inlineSmallOutputs(env.store, spec->getInlineOutputBytes());
    }
    ended(*spec, kj::mv(outcome));
    checkIdle();
    pump();
    if (ready.empty() && freeCpus() > 0) dryListener();
  }
}

void TaskQueue::checkIdle() {
  if (running > 0 || finishing > 0) return;
  KJ_IF_MAYBE(f, idleFulfiller) {
    (*f)->fulfill();
    idleFulfiller = nullptr;
  }
}

bool TaskQueue::cancel(Id id) {
  auto it = tasks.find(id);
  if (it == tasks.end()) {
    env.logger.debug("event=cancel-unknown task={}", kj::str(id).cStr());
    return false;
  }
  auto& task = *it->second;
  env.logger.debug("event=task-cancel task={}", kj::str(id).cStr());
  if (task.state == State::RUNNING) {
    // finish() reports it once the runner has stopped (child reaped).
    task.control.cancel();
  } else {
    auto spec = kj::mv(task.spec);
    tasks.erase(it);
    ended(*spec, TaskOutcome::failure(id, kj::str("cancelled")));
  }
  return true;
}

bool TaskQueue::retract(Id id) {
  auto it = tasks.find(id);
  if (it == tasks.end() || it->second->state == State::RUNNING) return false;
  if (touchesLiveStreams(*it->second->spec)) return false;
  // An actor's calls have taken their turns here.
  auto which = it->second->spec->getTask().getConfig().which();
  if (which == wire::TaskSpec::Config::ACTOR || which == wire::TaskSpec::Config::ACTOR_CALL) return false;
  // A fetch under way goes on (its object may serve a later task); its
  // continuation finds the task gone by its serial.
  tasks.erase(it);
  env.logger.debug("event=task-retracted task={}", kj::str(id).cStr());
  return true;
}

kj::Promise<void> TaskQueue::shutdown() {
  shuttingDown = true;
  kj::Vector<Id> ids;
  for (auto& entry : tasks) ids.add(entry.first);
  for (auto id : ids) cancel(id);
  if (running == 0 && finishing == 0) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  idleFulfiller = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

}  // namespace squall
