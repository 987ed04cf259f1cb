// `call` tasks: a function of an executor program (tasklib), run by one of
// the pool's warm processes (executor-pool.h). Inputs go as store paths (a
// blob file is mapped by the executor, not copied; through the read-only
// store view when inputs are isolated by mount) or, for small blobs held in
// memory, as bytes in the call. Outputs come back as bytes or as files and
// directories left in a fresh directory of the store, adopted by rename.
// A live stream input or a stream output is one end of a pipe attached to
// the hub (stream-ends.h), handed to the executor as a descriptor over its
// socket: the function reads and writes it as it runs, as a program stage
// of a streamed pipeline would. Loop thread only; hashing and sealing on
// the pool.
#include "actor-host.h"
#include "dir-tree.h"
#include "executor-pool.h"
#include "input-isolation.h"
#include "stream-ends.h"
#include "task-env.h"

#include <squall/proto/errors.h>
#include <squall/proto/spec-names.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {

// How long a process that dropped its connection has for its exit to be
// seen, so the error can say how it ended.
constexpr kj::Duration EXIT_GRACE = 2 * kj::SECONDS;

// An output entry as the executor names it: one plain name in the call's
// directory.
bool isEntryName(kj::StringPtr name) {
  return name.size() > 0 && name != "." && name != ".." && name.findFirst('/') == nullptr &&
         name.findFirst('\0') == nullptr;
}

// The warm files lent to a call (StoreTemp::lend).
void setWarmFiles(capnp::List<wire::WarmFile>::Builder list, const StoreTemp& outDir) {
  auto lent = outDir.lent();
  for (uint i = 0; i < lent.size(); i++) {
    list[i].setPath(lent[i].path);
    list[i].setSize(lent[i].size);
  }
}

// Stores output `i` of a finished call.
kj::Promise<OutputInfo> adoptOutput(TaskEnv& env, Id id, wire::ObjectKind kind, wire::CallOutput::Reader out,
                                 kj::StringPtr dir, kj::StringPtr function) {
  if (out.isData()) {
    SQUALL_REQUIRE(kind == wire::ObjectKind::BLOB, "function ", function, " sent bytes for dir output ", id);
    auto data = out.getData();
    return env.store.putBytes(id, kind, kj::heapArray<const kj::byte>(data.begin(), data.size()))
        .then([id](ObjectMeta meta) { return OutputInfo{id, meta.size, meta.hash}; });
  }
  auto entry = out.getFile();
  SQUALL_REQUIRE(isEntryName(entry), "function ", function, " named output ", id, " '", entry,
                 "', not an entry of its output directory");
  auto path = kj::str(dir, "/", entry);
  auto& limits = env.store.treeLimits();
  auto what = kj::str("output ", id, " of ", function);
  return env.bridge
      .runOnPool<HashedSize>([path = kj::str(path), kind, limits, what = kj::mv(what)]() {
        struct stat st;
        KJ_SYSCALL(lstat(path.cStr(), &st), path);
        if (kind == wire::ObjectKind::DIR) {
          SQUALL_REQUIRE(S_ISDIR(st.st_mode), what, " should be a directory");
          auto root = openDirectory(path);
          return sealTree(root, what, limits);
        }
        SQUALL_REQUIRE(S_ISREG(st.st_mode), what, " should be a regular file");
        return hashFile(path);
      })
      .then([&env, id, kind, path = kj::mv(path), function = kj::str(function)](HashedSize hashed) mutable {
        // What the next call of it is lent a warm file for.
        if (kind == wire::ObjectKind::BLOB) env.store.rememberOutput(function, hashed.size);
        auto meta = kind == wire::ObjectKind::DIR ? env.store.adoptDir(id, kj::mv(path), hashed)
                                                  : env.store.adoptFile(id, kind, kj::mv(path), hashed);
        return OutputInfo{id, meta.size, meta.hash};
      });
}

// Stores the outputs of a finished call (`kind` "function" or "method"
// and `what`, its name, say whose in errors): one promise per output, null for a stream output,
// whose bytes went through its pipe. Without a file output the executor
// made no directory (the protocol says so): `outDir` is released then, so
// there is nothing to remove on the pool, nor a path lookup to pay for
// each call.
kj::Array<kj::Promise<kj::Maybe<OutputInfo>>> adoptOutputs(TaskEnv& env, wire::Assignment::Reader spec,
                                                           capnp::List<wire::CallOutput>::Reader outputs,
                                                           StoreTemp& outDir, kj::StringPtr kind,
                                                           kj::StringPtr what) {
  auto ids = spec.getTask().getOutputs();
  auto kinds = spec.getOutputKinds();
  SQUALL_REQUIRE(outputs.size() == ids.size(), kind, " ", what, " answered with ", outputs.size(), " outputs for ",
                 ids.size());
  auto adopted = kj::heapArrayBuilder<kj::Promise<kj::Maybe<OutputInfo>>>(ids.size());
  bool anyFile = false;
  for (uint i = 0; i < ids.size(); i++) {
    if (kinds[i] == wire::ObjectKind::STREAM) {
      SQUALL_REQUIRE(outputs[i].isStream(), kind, " ", what, " answered with bytes for stream output ",
                     Id::from(ids[i]));
      adopted.add(kj::Maybe<OutputInfo>(nullptr));
      continue;
    }
    anyFile = anyFile || outputs[i].isFile();
    adopted.add(adoptOutput(env, Id::from(ids[i]), kinds[i], outputs[i], outDir.path(), what)
                    .then([](OutputInfo info) { return kj::Maybe<OutputInfo>(kj::mv(info)); }));
  }
  if (!anyFile) outDir.release();
  return adopted.finish();
}

// How a call ended before its streams were settled: the outputs it made
// (nullptr for stream outputs) or why it failed.
struct CallEnd {
  kj::Maybe<kj::String> error;
  kj::Array<kj::Maybe<OutputInfo>> outputs;
  bool notStarted = false;
};

kj::Promise<CallEnd> callFailed(kj::String error) { return CallEnd{kj::mv(error), nullptr}; }

// About how big a call's message is, so that capnp makes it that size:
// without a hint it allocates, and zeroes, 8 KiB for every call.
capnp::MessageSize callSize(wire::TaskSpec::Reader task, kj::StringPtr function, size_t configBytes,
                            size_t outputs, kj::StringPtr outputDir) {
  auto textWords = [](size_t bytes) { return (bytes + 8) / 8; };
  uint64_t words = 20 + textWords(function.size()) + textWords(configBytes) + textWords(outputDir.size()) + outputs;
  for (auto input : task.getInputs()) {
    // Its label, and a store path or bytes held in memory (the larger).
    words += 8 + textWords(input.getLabel().size()) + textWords(256);
  }
  return capnp::MessageSize{words, 0};
}

}  // namespace

void setCallContext(wire::CallContext::Builder context, wire::TaskSpec::Reader task) {
  context.setSession(task.getId().getSession());
  context.setTask(task.getId().getN());
}

namespace {

// One input as the store holds it (not read live).
void setStoredInput(TaskEnv& env, wire::TaskInput::Reader input, wire::CallInput::Builder in) {
  in.setLabel(input.getLabel());
  Id id = Id::from(input.getObject());
  auto meta = KJ_REQUIRE_NONNULL(env.store.find(id), "input is not held", id);
  // A stream that has ended and was kept is read as the blob it is.
  in.setKind(meta.kind == wire::ObjectKind::STREAM ? wire::ObjectKind::BLOB : meta.kind);
  in.setSize(meta.size);
  auto data = KJ_REQUIRE_NONNULL(env.store.data(id), "input is not held", id);
  KJ_SWITCH_ONEOF(data) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) { in.setData(blob->bytes); }
    KJ_CASE_ONEOF(path, kj::String) {
      KJ_IF_MAYBE(view, env.storeView) {
        in.setPath(view->viewOf(path));
      } else {
        in.setPath(path);
      }
    }
  }
}

}  // namespace

kj::Promise<TaskOutcome> runCall(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control) {
  auto task = spec.getTask();
  Id taskId = Id::from(task.getId());
  auto call = task.getConfig().getCall();
  auto function = callName(call);
  ExecutorPool* pool = nullptr;
  const ExecutorPool::Function* declared = nullptr;
  KJ_IF_MAYBE(p, env.executors) {
    pool = p;
    KJ_IF_MAYBE(f, p->find(call.getExecutor(), call.getFunction())) { declared = f; }
  }
  if (declared == nullptr || declared->actor || call.getFunction().findFirst('.') != nullptr) {
    return TaskOutcome::failure(taskId, kj::str("governor ", env.governorName, " does not offer the function ",
                                                function));
  }
  // The server checked this against what governors announced; this
  // governor's executor may be another version.
  auto kinds = spec.getOutputKinds();
  if (kinds.size() != declared->outputs.size()) {
    return TaskOutcome::failure(taskId, kj::str("function ", function, " makes ", declared->outputs.size(),
                                                " outputs; the task has ", kinds.size()));
  }
  // Live inputs and stream outputs, checked before anything is attached.
  kj::Vector<LiveInputSpec> liveInputs;
  kj::Vector<StreamOutputSpec> streamOutputs;
  auto inputs = task.getInputs();
  auto locations = spec.getInputs();
  for (uint i = 0; i < inputs.size(); i++) {
    if (i >= locations.size() || !locations[i].getLive()) continue;
    auto live = liveInputSpec(env.streams != nullptr, inputs[i], locations[i]);
    KJ_IF_MAYBE(problem, live.tryGet<kj::String>()) { return TaskOutcome::failure(taskId, kj::mv(*problem)); }
    liveInputs.add(kj::mv(live.get<LiveInputSpec>()));
  }
  for (uint i = 0; i < kinds.size(); i++) {
    if (kinds[i] != wire::ObjectKind::STREAM) continue;
    Id outputId = Id::from(task.getOutputs()[i]);
    if (env.streams == nullptr) {
      return TaskOutcome::failure(taskId, kj::str("output ", outputId, " is a stream; this governor writes "
                                                  "no streams"));
    }
    streamOutputs.add(StreamOutputSpec{i, outputId, nullptr});
  }
  // Its place: behind the calls of a busy process (the queue found it), or
  // a process of its own that holds its cpus.
  kj::Promise<kj::Own<ExecutorLease>> leased = nullptr;
  KJ_IF_MAYBE(ride, control.takeRide()) {
    leased = kj::mv(*ride);
  } else {
    kj::Own<ResourceHold> hold;
    KJ_IF_MAYBE(h, control.takeHold()) { hold = kj::mv(*h); }
    leased = pool->acquire(call.getExecutor(), call.getFunction(), kj::mv(hold), control.heldCpuUnits(),
                           liveInputs.empty() && streamOutputs.empty());
  }
  return leased
      .then([&env, spec, &control, taskId, function = kj::mv(function), liveInputs = kj::mv(liveInputs),
             streamOutputs = kj::mv(streamOutputs)](kj::Own<ExecutorLease> lease) mutable
            -> kj::Promise<TaskOutcome> {
        if (control.isCancelled()) return TaskOutcome::failure(taskId, kj::str("cancelled"));
        auto task = spec.getTask();
        // The executor makes the directory when an output needs it (most
        // calls answer with bytes and never do).
        auto outDir = kj::heap<StoreTemp>(env.store, env.store.placeFor(0));
        outDir->lend(function);
        auto callConfig = task.getConfig().getCall();
        auto request = lease->executor().callRequest(callSize(task, callConfig.getFunction(),
                                                              callConfig.getConfig().size(),
                                                              spec.getOutputKinds().size(), outDir->path()));
        request.setFunction(task.getConfig().getCall().getFunction());
        request.setConfig(task.getConfig().getCall().getConfig());
        setCallContext(request.initContext(), task);
        {
          // A warm process serves calls of other grants: each call says its own.
          auto& vars = control.resourceEnv();
          auto env = request.getContext().initEnv(vars.size());
          for (uint i = 0; i < vars.size(); i++) env.set(i, vars[i]);
        }
        auto inputs = task.getInputs();
        auto locations = spec.getInputs();
        auto list = request.initInputs(inputs.size());
        kj::Own<StreamEnds> ends;
        KJ_IF_MAYBE(hub, env.streams) {
          ends = openStreamEnds(*hub, nullptr, taskId, liveInputs, streamOutputs);
        } else {
          ends = kj::heap<StreamEnds>();
        }
        uint nextLive = 0;
        for (uint i = 0; i < inputs.size(); i++) {
          auto in = list[i];
          if (i < locations.size() && locations[i].getLive()) {
            in.setLabel(inputs[i].getLabel());
            in.setKind(wire::ObjectKind::STREAM);
            in.setStream(kj::heap<PipeEndCap>(kj::mv(ends->taskInputEnds[nextLive++])));
            continue;
          }
          setStoredInput(env, inputs[i], in);
        }
        auto kinds = spec.getOutputKinds();
        auto outKinds = request.initOutputKinds(kinds.size());
        for (uint i = 0; i < kinds.size(); i++) outKinds.set(i, kinds[i]);
        request.setOutputDir(outDir->path());
        setWarmFiles(request.initWarmFiles(outDir->lent().size()), *outDir);
        if (ends->taskOutputEnds.size() > 0) {
          auto pipes = request.initOutputStreams(ends->taskOutputEnds.size());
          for (uint i = 0; i < pipes.size(); i++) {
            pipes.set(i, kj::heap<PipeEndCap>(kj::mv(ends->taskOutputEnds[i])));
          }
        }
        ends->taskInputEnds.clear();
        ends->taskOutputEnds.clear();
        auto& leaseRef = *lease;
        // A live input that fails kills the process (a call with streams
        // never waits behind another: it runs from the start).
        ends->watchInputs([&leaseRef]() { leaseRef.kill(); });
        auto& endsRef = *ends;
        // A cancel ends the wait at once; the lease, dropped, kills the
        // process if the call runs, or leaves it queued (its answer dropped)
        // if it waits.
        // Its output is prefixed with its name (the function's without).
        auto answered = leaseRef.send(kj::mv(request), kj::mv(outDir),
                                      task.getName().size() > 0 ? task.getName() : kj::StringPtr(function))
                            .exclusiveJoin(control.whenCancelled().then([]() -> kj::Promise<ExecutorLease::Answer> {
                              return KJ_EXCEPTION(FAILED, "cancelled");
                            }));
        auto ended =
            kj::mv(answered)
                .then(
                    [&env, spec, &control, &endsRef, function = kj::str(function)](
                        ExecutorLease::Answer answer) mutable -> kj::Promise<CallEnd> {
                      auto inputsSettled = endsRef.settleInputs();
                      auto response = kj::mv(answer.response);
                      auto outDir = kj::mv(answer.outDir);
                      auto adopted = adoptOutputs(env, spec, response.getOutputs(), *outDir, "function", function);
                      return inputsSettled.exclusiveJoin(control.whenCancelled())
                          .then([adopted = kj::mv(adopted)]() mutable {
                            return kj::joinPromises(kj::mv(adopted));
                          })
                          .attach(kj::mv(response), kj::mv(outDir))
                          .then([&control, &endsRef](kj::Array<kj::Maybe<OutputInfo>> done) {
                            if (control.isCancelled()) return CallEnd{kj::str("cancelled"), nullptr};
                            KJ_IF_MAYBE(f, endsRef.inputFailure) { return CallEnd{kj::str(*f), nullptr}; }
                            return CallEnd{nullptr, kj::mv(done)};
                          });
                    },
                    [&control, &leaseRef, &endsRef, function = kj::str(function)](kj::Exception&& e) mutable
                    -> kj::Promise<CallEnd> {
                      // Inputs that did not reach their end were closed early.
                      endsRef.settleInputs();
                      if (control.isCancelled()) return callFailed(kj::str("cancelled"));
                      KJ_IF_MAYBE(f, endsRef.inputFailure) { return callFailed(kj::str(*f)); }
                      if (!leaseRef.started()) {
                        // Given back before its process reached it.
                        CallEnd end;
                        end.notStarted = true;
                        return end;
                      }
                      if (e.getType() != kj::Exception::Type::DISCONNECTED) {
                        // The function threw: its process is fine.
                        return callFailed(kj::str("function ", function, " failed: ", userMessage(e)));
                      }
                      return leaseRef.deathReason(EXIT_GRACE).then(
                          [function = kj::mv(function), pid = leaseRef.process().pid(),
                           e = kj::mv(e)](kj::Maybe<kj::String> how) {
                            KJ_IF_MAYBE(text, how) {
                              return CallEnd{kj::str("the executor process (pid ", pid, ") ", *text,
                                                     " while running ", function),
                                             nullptr};
                            }
                            return CallEnd{kj::str("lost the executor process (pid ", pid, ") while running ",
                                                   function, ": ", userMessage(e)),
                                           nullptr};
                          });
                    })
                // The lease outlives both handlers.
                .attach(kj::mv(lease));
        return ended
            .catch_([](kj::Exception&& e) { return CallEnd{kj::str(userMessage(e)), nullptr}; })
            .then([&control, &endsRef, spec, taskId](CallEnd end) mutable -> kj::Promise<TaskOutcome> {
              if (end.notStarted) {
                TaskOutcome outcome;
                outcome.id = taskId;
                outcome.notStarted = true;
                return outcome;
              }
              // The streams' verdict: their readers learn it once the flow
              // has ended.
              kj::Maybe<kj::String> failure;
              KJ_IF_MAYBE(e, end.error) { failure = kj::str("failed: ", *e); }
              return endsRef
                  .finish(failure.map([](const kj::String& f) -> kj::StringPtr { return f; }),
                          control.whenCancelled())
                  .then([&control, spec, taskId,
                         end = kj::mv(end)](kj::Array<StreamOutput::Result> streams) mutable {
                    if (control.isCancelled()) return TaskOutcome::failure(taskId, kj::str("cancelled"));
                    KJ_IF_MAYBE(e, end.error) { return TaskOutcome::failure(taskId, kj::mv(*e)); }
                    KJ_IF_MAYBE(e, firstStreamError(streams)) { return TaskOutcome::failure(taskId, kj::str(*e)); }
                    TaskOutcome outcome;
                    outcome.id = taskId;
                    outcome.ok = true;
                    auto ids = spec.getTask().getOutputs();
                    size_t nextStream = 0;  // stream outputs' results come in their order
                    for (uint i = 0; i < end.outputs.size(); i++) {
                      KJ_IF_MAYBE(info, end.outputs[i]) {
                        outcome.outputs.add(kj::mv(*info));
                      } else {
                        auto& r = streams[nextStream++];
                        outcome.outputs.add(OutputInfo{Id::from(ids[i]), r.size, r.hash});
                      }
                    }
                    return outcome;
                  });
            })
            .attach(kj::mv(ends));
      });
}

void setStoredCallInputs(TaskEnv& env, wire::TaskSpec::Reader task,
                         capnp::List<wire::CallInput, capnp::Kind::STRUCT>::Builder list) {
  auto inputs = task.getInputs();
  for (uint i = 0; i < inputs.size() && i < list.size(); i++) setStoredInput(env, inputs[i], list[i]);
}

kj::Promise<TaskOutcome> runActorCall(TaskEnv& env, wire::Assignment::Reader spec, TaskControl& control) {
  auto task = spec.getTask();
  Id taskId = Id::from(task.getId());
  auto config = task.getConfig().getActorCall();
  Id actorId = Id::from(config.getActor());
  ActorHosts* hosts = nullptr;
  ExecutorPool* pool = nullptr;
  KJ_IF_MAYBE(a, env.actors) { hosts = a; }
  KJ_IF_MAYBE(p, env.executors) { pool = p; }
  if (hosts == nullptr || pool == nullptr) {
    return TaskOutcome::failure(taskId, kj::str("governor ", env.governorName, " hosts no actors"));
  }
  ActorHosts::TypeName type;
  KJ_IF_MAYBE(t, hosts->typeOf(actorId)) {
    type = *t;
  } else {
    return TaskOutcome::failure(taskId, kj::str("actor ", actorId, " is not on governor ", env.governorName));
  }
  auto function = kj::str(type.type, ".", config.getMethod());
  auto method = kj::str(type.executor, "/", function);
  auto kinds = spec.getOutputKinds();
  KJ_IF_MAYBE(declared, pool->find(type.executor, function)) {
    if (kinds.size() != declared->outputs.size()) {
      return TaskOutcome::failure(taskId, kj::str("method ", method, " makes ", declared->outputs.size(),
                                                  " outputs; the task has ", kinds.size()));
    }
  } else {
    return TaskOutcome::failure(taskId, kj::str("governor ", env.governorName, " does not offer the method ",
                                                method));
  }
  for (auto kind : kinds) {
    if (kind == wire::ObjectKind::STREAM) {
      return TaskOutcome::failure(taskId, kj::str("method ", method, ": an actor's methods write no streams"));
    }
  }
  for (auto location : spec.getInputs()) {
    if (location.getLive()) {
      return TaskOutcome::failure(taskId, kj::str("method ", method, ": an actor's methods read no live streams"));
    }
  }
  // Made again for each attempt: a restarted actor gets the call anew.
  auto build = [&env, spec, function = kj::str(function), producer = kj::str(method)]() {
    auto task = spec.getTask();
    auto config = task.getConfig().getActorCall();
    auto outDir = kj::heap<StoreTemp>(env.store, env.store.placeFor(0));
    outDir->lend(producer);
    auto kinds = spec.getOutputKinds();
    auto message = kj::heap<capnp::MallocMessageBuilder>(
        callSize(task, function, config.getConfig().size(), kinds.size(), outDir->path()).wordCount);
    auto call = message->initRoot<wire::MethodCall>();
    call.setFunction(function);
    call.setConfig(config.getConfig());
    setCallContext(call.initContext(), task);
    setStoredCallInputs(env, task, call.initInputs(task.getInputs().size()));
    auto outKinds = call.initOutputKinds(kinds.size());
    for (uint i = 0; i < kinds.size(); i++) outKinds.set(i, kinds[i]);
    call.setOutputDir(outDir->path());
    setWarmFiles(call.initWarmFiles(outDir->lent().size()), *outDir);
    return ActorHosts::Built{kj::mv(message), kj::mv(outDir)};
  };
  return hosts->call(actorId, taskId, kj::mv(build))
      .exclusiveJoin(control.whenCancelled().then([hosts, actorId, taskId]() -> kj::Promise<ActorHosts::Answer> {
        hosts->abandon(actorId, taskId);
        return KJ_EXCEPTION(FAILED, "cancelled");
      }))
      .then(
          [&env, spec, taskId, method = kj::str(method)](ActorHosts::Answer answer) -> kj::Promise<TaskOutcome> {
            auto adopted = adoptOutputs(env, spec, answer.get().getOutputs(), *answer.outDir, "method", method);
            return kj::joinPromises(kj::mv(adopted))
                .attach(kj::mv(answer.message), kj::mv(answer.outDir))
                .then([taskId](kj::Array<kj::Maybe<OutputInfo>> done) {
                  TaskOutcome outcome;
                  outcome.id = taskId;
                  outcome.ok = true;
                  for (auto& info : done) outcome.outputs.add(kj::mv(KJ_ASSERT_NONNULL(info)));
                  return outcome;
                });
          },
          [&control, taskId, method = kj::str(method)](kj::Exception&& e) {
            if (control.isCancelled()) return TaskOutcome::failure(taskId, kj::str("cancelled"));
            return TaskOutcome::failure(taskId, kj::str("method ", method, " failed: ", userMessage(e)));
          });
}

}  // namespace squall
