// `call` tasks: a function of an executor program (tasklib), run by one of
// the pool's warm processes (executor-pool.h). Inputs go as store paths (a
// blob file is mapped by the executor, not copied; through the read-only
// store view when inputs are isolated by mount) or, for small blobs held in
// memory, as bytes in the call. Outputs come back as bytes or as files and
// directories left in a fresh directory of the store, adopted by rename.
// Loop thread only; hashing and sealing on the pool.
#include "dir-tree.h"
#include "executor-pool.h"
#include "input-isolation.h"
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
      .then([&env, id, kind, path = kj::mv(path)](HashedSize hashed) mutable {
        auto meta = kind == wire::ObjectKind::DIR ? env.store.adoptDir(id, kj::mv(path), hashed)
                                                  : env.store.adoptFile(id, kind, kj::mv(path), hashed);
        return OutputInfo{id, meta.size, meta.hash};
      });
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
  if (declared == nullptr) {
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
  return pool->acquire(call.getExecutor())
      .then([&env, spec, &control, taskId, function = kj::mv(function)](
                kj::Own<ExecutorPool::Lease> lease) mutable -> kj::Promise<TaskOutcome> {
        if (control.isCancelled()) return TaskOutcome::failure(taskId, kj::str("cancelled"));
        auto task = spec.getTask();
        // The executor makes the directory when an output needs it (most
        // calls answer with bytes and never do).
        auto outDir = kj::heap<StoreTemp>(env.store);
        auto request = lease->executor().callRequest();
        request.setFunction(task.getConfig().getCall().getFunction());
        request.setConfig(task.getConfig().getCall().getConfig());
        auto inputs = task.getInputs();
        auto list = request.initInputs(inputs.size());
        for (uint i = 0; i < inputs.size(); i++) {
          Id id = Id::from(inputs[i].getObject());
          auto meta = KJ_REQUIRE_NONNULL(env.store.find(id), "input is not held", id);
          SQUALL_REQUIRE(meta.kind != wire::ObjectKind::STREAM, "function ", function, ": input ", id,
                         " is a live stream, which functions do not read yet");
          auto in = list[i];
          in.setKind(meta.kind);
          in.setSize(meta.size);
          in.setLabel(inputs[i].getLabel());
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
        auto kinds = spec.getOutputKinds();
        auto outKinds = request.initOutputKinds(kinds.size());
        for (uint i = 0; i < kinds.size(); i++) outKinds.set(i, kinds[i]);
        request.setOutputDir(outDir->path());
        auto& leaseRef = *lease;
        // From here a cancel kills the process (nothing above can leave it
        // registered with a lease that is gone).
        control.setProcess(lease->process());
        return request.send().then(
            [&env, spec, taskId, &control, &leaseRef, function = kj::str(function),
             outDir = kj::mv(outDir)](auto response) mutable -> kj::Promise<TaskOutcome> {
              control.setProcess(nullptr);
              // Free for the next call while the outputs are adopted.
              leaseRef.release();
              auto outputs = response.getOutputs();
              auto ids = spec.getTask().getOutputs();
              auto kinds = spec.getOutputKinds();
              SQUALL_REQUIRE(outputs.size() == ids.size(), "function ", function, " answered with ",
                             outputs.size(), " outputs for ", ids.size());
              kj::Vector<kj::Promise<OutputInfo>> adopted;
              bool anyFile = false;
              for (uint i = 0; i < ids.size(); i++) {
                anyFile = anyFile || outputs[i].isFile();
                adopted.add(adoptOutput(env, Id::from(ids[i]), kinds[i], outputs[i], outDir->path(), function));
              }
              // Nothing was made there: no removal to wait for on the pool.
              if (!anyFile && access(outDir->path().cStr(), F_OK) != 0) outDir->release();
              return kj::joinPromises(adopted.releaseAsArray())
                  .attach(kj::mv(response), kj::mv(outDir))
                  .then([taskId](kj::Array<OutputInfo> done) {
                    TaskOutcome outcome;
                    outcome.id = taskId;
                    outcome.ok = true;
                    for (auto& output : done) outcome.outputs.add(output);
                    return outcome;
                  });
            },
            [&control, &leaseRef, taskId, function = kj::str(function)](kj::Exception&& e) mutable
            -> kj::Promise<TaskOutcome> {
              control.setProcess(nullptr);
              if (control.isCancelled()) return TaskOutcome::failure(taskId, kj::str("cancelled"));
              if (e.getType() != kj::Exception::Type::DISCONNECTED) {
                // The function threw: its process is fine.
                leaseRef.release();
                return TaskOutcome::failure(taskId,
                                            kj::str("function ", function, " failed: ", userMessage(e)));
              }
              return leaseRef.deathReason(EXIT_GRACE).then(
                  [taskId, function = kj::mv(function), pid = leaseRef.process().pid(),
                   e = kj::mv(e)](kj::Maybe<kj::String> how) {
                    KJ_IF_MAYBE(text, how) {
                      return TaskOutcome::failure(taskId, kj::str("the executor process (pid ", pid, ") ", *text,
                                                                  " while running ", function));
                    }
                    return TaskOutcome::failure(taskId, kj::str("lost the executor process (pid ", pid,
                                                                ") while running ", function, ": ",
                                                                userMessage(e)));
                  });
            })
            // The lease outlives both handlers; dropped unreleased, it kills
            // the process (a cancel, a crash).
            .attach(kj::mv(lease));
      });
}

}  // namespace squall
