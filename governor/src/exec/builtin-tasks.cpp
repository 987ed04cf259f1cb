// Built-in tasks (concat, sleep), the task dispatcher and TaskControl.
// Loop thread only; file work on the libuv pool.
#include "actor-host.h"
#include "task-env.h"

#include "executor-pool.h"

#include <fcntl.h>
#include <xxhash.h>

extern char** environ;

namespace squall {

TaskControl::TaskControl() : cancelledPromise(nullptr) {
  auto paf = kj::newPromiseAndFulfiller<void>();
  fulfiller = kj::mv(paf.fulfiller);
  cancelledPromise = paf.promise.fork();
}

TaskControl::~TaskControl() noexcept(false) {}

void TaskControl::offerHold(kj::Own<ResourceHold> given, uint64_t cpuUnits) {
  hold = kj::mv(given);
  holdUnits = cpuUnits;
}

kj::Maybe<kj::Own<ResourceHold>> TaskControl::takeHold() {
  auto taken = kj::mv(hold);
  hold = nullptr;
  return taken;
}

void TaskControl::setRide(kj::Own<ExecutorLease> lease) { ride = kj::mv(lease); }

kj::Maybe<kj::Own<ExecutorLease>> TaskControl::takeRide() {
  auto taken = kj::mv(ride);
  ride = nullptr;
  return taken;
}

void TaskControl::timeOut() {
  if (cancelled) return;
  timedOut = true;
  cancel();
}

kj::String timeLimitMessage(uint64_t limitMs) {
  auto seconds = kj::str(limitMs / 1000);
  if (limitMs % 1000 != 0) {
    auto fraction = kj::str(1000 + limitMs % 1000);  // "1500" -> "500"
    size_t end = fraction.size();
    while (end > 1 && fraction[end - 1] == '0') end--;
    seconds = kj::str(seconds, ".", fraction.slice(1, end));
  }
  return kj::str("time limit of ", seconds, " s exceeded");
}

void TaskControl::cancel() {
  if (cancelled) return;
  cancelled = true;
  stop->stopped = true;
  KJ_IF_MAYBE(child, process) { child->killGroup(SIGKILL); }
  fulfiller->fulfill();
}

kj::Vector<kj::String> captureEnvironment() {
  kj::Vector<kj::String> result;
  for (char** e = environ; *e != nullptr; e++) result.add(kj::str(*e));
  return result;
}

kj::Promise<TaskOutcome> runTask(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control) {
  auto task = spec.getTask();
  switch (task.getConfig().which()) {
    case wire::TaskSpec::Config::CONCAT: return runConcat(env, spec, control);
    case wire::TaskSpec::Config::SLEEP: return runSleep(env, spec, control);
    case wire::TaskSpec::Config::EXECUTE: return runExecute(env, spec, control);
    case wire::TaskSpec::Config::MAKE_DIR: return runMakeDir(env, spec, control);
    case wire::TaskSpec::Config::SLICE_DIR: return runSliceDir(env, spec, control);
    case wire::TaskSpec::Config::LOAD:
    case wire::TaskSpec::Config::LOAD_DIR: return runLoad(env, spec, control);
    case wire::TaskSpec::Config::STORE: return runStore(env, spec, control);
    case wire::TaskSpec::Config::CALL: return runCall(env, spec, control);
    case wire::TaskSpec::Config::ACTOR:
      KJ_IF_MAYBE(actors, env.actors) { return actors->run(env, spec, control); }
      return TaskOutcome::failure(Id::from(task.getId()),
                                  kj::str("governor ", env.governorName, " has no executors to host actors"));
    case wire::TaskSpec::Config::ACTOR_CALL: return runActorCall(env, spec, control);
  }
  return TaskOutcome::failure(Id::from(task.getId()),
                              kj::str("unknown task type (config union ",
                                      static_cast<uint>(task.getConfig().which()),
                                      "); this governor is older than the server"));
}

namespace {

kj::Maybe<kj::String> checkBlobOutputs(wire::Assignment::Reader spec) {
  auto kinds = spec.getOutputKinds();
  for (uint i = 0; i < kinds.size(); i++) {
    if (kinds[i] != wire::ObjectKind::BLOB) {
      return kj::str("output ", Id::from(spec.getTask().getOutputs()[i]),
                     " is not a blob; only blob outputs are supported by this governor");
    }
  }
  return nullptr;
}

}  // namespace

kj::Promise<TaskOutcome> runConcat(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control) {
  auto task = spec.getTask();
  Id taskId = Id::from(task.getId());
  if (task.getOutputs().size() != 1) {
    return TaskOutcome::failure(taskId, kj::str("concat needs exactly one output, got ",
                                                task.getOutputs().size()));
  }
  KJ_IF_MAYBE(problem, checkBlobOutputs(spec)) { return TaskOutcome::failure(taskId, kj::mv(*problem)); }
  Id outputId = Id::from(task.getOutputs()[0]);

  kj::Vector<ObjectData> parts;
  uint64_t total = 0;
  bool allInMemory = true;
  for (auto input : task.getInputs()) {
    Id inputId = Id::from(input.getObject());
    KJ_IF_MAYBE(data, env.store.data(inputId)) {
      if (KJ_ASSERT_NONNULL(env.store.find(inputId)).kind != wire::ObjectKind::BLOB) {
        return TaskOutcome::failure(taskId, kj::str("concat: input ", inputId,
                                                    " is not a blob; concat joins blobs only"));
      }
      total += KJ_ASSERT_NONNULL(env.store.find(inputId)).size;
      if (!data->is<kj::Own<const Blob>>()) allInMemory = false;
      parts.add(kj::mv(*data));
    } else {
      return TaskOutcome::failure(taskId, kj::str("input ", inputId, " is not held by governor ",
                                                  env.governorName));
    }
  }

  auto finish = [taskId, outputId](ObjectMeta meta) {
    return TaskOutcome::success(taskId, outputId, meta.size, meta.hash);
  };

  if (allInMemory && total <= SMALL_OBJECT_SIZE) {
    // Small: join on the loop.
    auto bytes = kj::heapArray<kj::byte>(total);
    size_t at = 0;
    for (auto& part : parts) {
      auto& blob = part.get<kj::Own<const Blob>>();
      memcpy(bytes.begin() + at, blob->bytes.begin(), blob->bytes.size());
      at += blob->bytes.size();
    }
    return env.store.putBytes(outputId, wire::ObjectKind::BLOB, bytes.releaseAsBytes()).then(kj::mv(finish));
  }

  auto temp = kj::heap<TempFile>(env.store.newTempPath());
  auto path = kj::str(temp->path());
  return env.bridge
      .runOnPool<HashedSize>([path = kj::mv(path), parts = kj::mv(parts)]() {
        auto out = openOrThrow(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        XXH3_state_t* state = XXH3_createState();
        KJ_ASSERT(state != nullptr);
        KJ_DEFER(XXH3_freeState(state));
        XXH3_64bits_reset(state);
        HashedSize result;
        for (auto& part : parts) {
          KJ_SWITCH_ONEOF(part) {
            KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
              XXH3_64bits_update(state, blob->bytes.begin(), blob->bytes.size());
              writeAll(out, blob->bytes);
              result.size += blob->bytes.size();
            }
            KJ_CASE_ONEOF(file, kj::String) { result.size += appendFile(out, file, state); }
          }
        }
        result.hash = XXH3_64bits_digest(state);
        return result;
      })
      .then([&env, &control, taskId, outputId, temp = kj::mv(temp),
             finish = kj::mv(finish)](HashedSize hashed) mutable {
        if (control.isCancelled()) return TaskOutcome::failure(taskId, kj::str("cancelled"));
        return finish(env.store.adoptFile(outputId, wire::ObjectKind::BLOB, temp->release(), hashed));
      });
}

kj::Promise<TaskOutcome> runSleep(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control) {
  auto task = spec.getTask();
  Id taskId = Id::from(task.getId());
  if (task.getOutputs().size() > 1) {
    return TaskOutcome::failure(taskId, kj::str("sleep has at most one output, got ",
                                                task.getOutputs().size()));
  }
  KJ_IF_MAYBE(problem, checkBlobOutputs(spec)) { return TaskOutcome::failure(taskId, kj::mv(*problem)); }
  uint64_t ms = task.getConfig().getSleep().getMilliseconds();

  return env.timer.afterDelay(taskMilliseconds(ms))
      .exclusiveJoin(control.whenCancelled())
      .then([&env, &control, spec, taskId]() -> kj::Promise<TaskOutcome> {
        auto task = spec.getTask();
        if (control.isCancelled()) return TaskOutcome::failure(taskId, kj::str("cancelled"));
        if (task.getOutputs().size() == 0) {
          TaskOutcome outcome;
          outcome.id = taskId;
          outcome.ok = true;
          return kj::mv(outcome);
        }
        Id outputId = Id::from(task.getOutputs()[0]);
        auto finish = [taskId, outputId](ObjectMeta meta) {
          return TaskOutcome::success(taskId, outputId, meta.size, meta.hash);
        };
        if (task.getInputs().size() == 0) {
          return env.store.putBytes(outputId, wire::ObjectKind::BLOB, kj::Array<const kj::byte>())
              .then(kj::mv(finish));
        }
        Id inputId = Id::from(task.getInputs()[0].getObject());
        KJ_IF_MAYBE(data, env.store.data(inputId)) {
          auto meta = KJ_ASSERT_NONNULL(env.store.find(inputId));
          if (meta.kind != wire::ObjectKind::BLOB) {
            return TaskOutcome::failure(taskId, kj::str("sleep: input ", inputId,
                                                        " is not a blob; sleep passes blobs only"));
          }
          KJ_SWITCH_ONEOF(*data) {
            KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
              return env.store.putBytes(outputId, wire::ObjectKind::BLOB, kj::heapArray(blob->bytes.asPtr()))
                  .then(kj::mv(finish));
            }
            KJ_CASE_ONEOF(file, kj::String) {
              auto temp = kj::heap<TempFile>(env.store.newTempPath());
              auto to = kj::str(temp->path());
              return env.bridge
                  .runOnPool<void>([from = kj::mv(file), to = kj::mv(to)]() { linkOrCopy(from, to); })
                  .then([&env, outputId, meta, temp = kj::mv(temp), finish = kj::mv(finish)]() mutable {
                    return finish(env.store.adoptFile(outputId, wire::ObjectKind::BLOB, temp->release(),
                                                      HashedSize{meta.size, meta.hash}));
                  });
            }
          }
          KJ_UNREACHABLE;
        } else {
          return TaskOutcome::failure(taskId, kj::str("input ", inputId, " is not held by governor ",
                                                      env.governorName));
        }
      });
}

}  // namespace squall
