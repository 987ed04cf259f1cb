// A submit of a client (ClientService.submit, submitGraph) as the server
// takes it in: chunks checked as they come, validated whole at commit,
// logged, then applied (docs/architecture.md, "The life of one task").
// And the actor calls that skipped the server (docs/actors.md, "Calls that
// skip the server"), recorded from a client's recordDirect or a governor's
// report as submits of their own. Loop thread only.
#pragma once

#include "context.h"

#include <map>
#include <memory>
#include <set>
#include <kj/debug.h>
#include <kj/function.h>
#include <squall/proto/errors.h>
#include <squall/proto/spec-names.h>
#include <squall/wire/service.capnp.h>

namespace squall {

class SubmissionImpl final : public wire::Submission::Server {
 public:
  // `open`: the submits its client has open, this one counted in.
  SubmissionImpl(ServerContext& context, uint64_t session, std::shared_ptr<uint64_t> open)
      : context(context), session(session), pending(session, context.limits, context.pendingSubmitBytes),
        open(kj::mv(open)) {}
  ~SubmissionImpl() noexcept(false) { closed(); }

  kj::Promise<void> add(AddContext call) override {
    addChunk(call.getParams());
    return kj::READY_NOW;
  }

  // A chunk: an add()'s reader, or one built already (submitGraph).
  template <typename Chunk>
  void addChunk(Chunk&& chunk) {
    SQUALL_REQUIRE(!committed, "submission already committed");
    pending.add(kj::fwd<Chunk>(chunk));
  }

  kj::Promise<void> appendData(AppendDataContext call) override {
    SQUALL_REQUIRE(!committed, "submission already committed");
    auto params = call.getParams();
    pending.appendData(params.getObject(), params.getData());
    return kj::READY_NOW;
  }

  kj::Promise<void> commit(CommitContext call) override { return commitThen(countsInto(call)); }

  // Makes this the record of actor calls a client sent to `governor`
  // directly (DataService.callActor), tasks `tasks`: once applied, those
  // are running there (held and assigned, not placed), unless it is gone
  // (0: unknown): then they are placed as submitted now.
  void sentTo(GovernorId governor, std::vector<uint64_t> tasks) {
    direct.emplace(DirectOrigin{governor, kj::mv(tasks)});
    pending.takeCallsOnEndedActors();
  }

  // An answer for commitThen that sets a call's results (both commit and
  // submitGraph answer with `tasks` and `objects`).
  template <typename Context>
  static kj::Function<void(uint64_t, uint64_t)> countsInto(Context call) {
    return [call](uint64_t tasks, uint64_t objects) mutable {
      call.getResults().setTasks(tasks);
      call.getResults().setObjects(objects);
    };
  }

  // Validates and applies what was added; `answer` gets the counts of
  // tasks and objects applied.
  kj::Promise<void> commitThen(kj::Function<void(uint64_t, uint64_t)> answer) {
    SQUALL_REQUIRE(!committed, "submission already committed");
    committed = true;
    closed();
    auto* log = context.sessions.sessionLog();
    if (log == nullptr) {
      KJ_DEFER(pending.drop());
      checkPlaced();
      apply(answer);
      return kj::READY_NOW;
    }
    // Acknowledged only once durable, so that a crash after the answer
    // keeps the graph: checked, written by the log's writer thread while
    // the loop goes on, then checked again and applied (the session may
    // have changed while it was written; if it no longer fits, what was
    // written is taken back). Refused or applied, the chunks go.
    KJ_ON_SCOPE_FAILURE(pending.drop());
    pending.commit(context.sessions.get(session), capacity(), false);
    checkPlaced();
    std::vector<std::pair<uint64_t, std::vector<uint8_t>>> constants;
    for (auto& [n, bytes] : pending.appendedData()) constants.emplace_back(n, std::vector<uint8_t>(bytes.begin(), bytes.end()));
    auto running = context.running;
    return log->submitLater(session, pending.flatChunks(), kj::mv(constants))
        .then(
            [this, answer = kj::mv(answer), running](SessionLog::SubmitRows rows) mutable {
              KJ_DEFER(pending.drop());
              if (!*running) kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "the server is stopping"));
              KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { apply(answer); })) {
                if (auto* log = context.sessions.sessionLog()) log->undoSubmit(rows);
                kj::throwFatalException(kj::mv(*e));
              }
            },
            [this](kj::Exception&& e) {
              pending.drop();
              kj::throwFatalException(kj::mv(e));
            });
  }

 private:
  ServerContext& context;
  uint64_t session;
  PendingSubmit pending;
  std::shared_ptr<uint64_t> open;
  bool committed = false;
  struct DirectOrigin {
    GovernorId governor;
    std::vector<uint64_t> tasks;
  };
  std::optional<DirectOrigin> direct;

  void closed() {
    if (open) --*open;
    open.reset();
  }

  ClusterCapacity capacity() {
    ClusterCapacity capacity;
    auto functions = std::make_shared<std::map<std::string, std::vector<std::string>>>();
    auto actorTypes = std::make_shared<std::set<std::string>>();
    auto governors = std::make_shared<std::vector<std::pair<uint32_t, Pools>>>();
    for (auto& [gid, governor] : context.governors.all()) {
      capacity.totalCpus += governor.cpus;
      capacity.largestCpus = std::max(capacity.largestCpus, governor.cpus);
      for (auto& function : governor.functions) functions->insert(function);
      actorTypes->insert(governor.actorTypes.begin(), governor.actorTypes.end());
      governors->emplace_back(governor.cpus, governor.pools);
    }
    // With no governor, nothing is known yet (as for cpus).
    capacity.namedActors = std::make_shared<std::map<std::string, Id>>(context.sessions.namedActors());
    if (!context.governors.all().empty()) {
      capacity.functions = kj::mv(functions);
      capacity.actorTypes = kj::mv(actorTypes);
      capacity.governors = kj::mv(governors);
    }
    return capacity;
  }

  // The governor a constant was uploaded to (ObjectSpec.placedOn), by name.
  GovernorState* placedOn(const std::string& name) {
    for (auto& [gid, governor] : context.governors.all()) {
      if (governor.name == name) return &governor;
    }
    return nullptr;
  }

  // Uploaded constants must be on governors connected now.
  void checkPlaced() {
    for (auto& [n, name] : pending.placedObjects()) {
      SQUALL_REQUIRE(placedOn(name) != nullptr, "constant ", n, " was uploaded to governor ", name,
                     ", which is not connected now; upload it again");
    }
  }

  // Uploaded constants, applied: held where they were uploaded, claimed
  // there before the dispatcher sends anything that reads them.
  void claimPlaced(Session& target) {
    std::map<GovernorId, std::vector<Id>> claims;
    for (auto& [n, name] : pending.placedObjects()) {
      auto& object = target.objects.at(n);
      auto* governor = placedOn(name);
      if (governor == nullptr) {
        // Gone while the submit was written: like a task output lost with it.
        context.sessions.fail(target, kj::str("constant ", n, " was lost with governor ", name.c_str(),
                                              ", where it was uploaded, before its submit was applied")
                                          .cStr());
        continue;
      }
      object.locations.push_back(governor->id);
      claims[governor->id].push_back(object.id);
    }
    for (auto& [gid, ids] : claims) {
      context.dispatcher.claimUploads(KJ_ASSERT_NONNULL(context.governors.find(gid)), session, kj::mv(ids));
    }
  }

  // The direct calls of this record, applied: running on their governor.
  void placeDirect(Session& target, std::vector<TaskNode*>& ready) {
    context.sessions.stats().actorCallsDirect += direct->tasks.size();
    GovernorState* governor = nullptr;
    KJ_IF_MAYBE(g, context.governors.find(direct->governor)) { governor = g; }
    std::unordered_set<const TaskNode*> taken;
    for (auto n : direct->tasks) {
      auto it = target.tasks.find(n);
      if (it == target.tasks.end()) continue;
      auto& task = it->second;
      if (task.state != TaskNode::State::READY && task.state != TaskNode::State::WAITING) continue;
      // Its constants are where it ran (the governor stored them with the
      // call): removed from there with the session's other objects.
      if (governor != nullptr) {
        for (auto* input : task.inputs) {
          auto& where = input->locations;
          if (input->constant && std::find(where.begin(), where.end(), governor->id) == where.end()) {
            where.push_back(governor->id);
          }
        }
      }
      // One on an actor that has ended since is ended by apply().
      if (governor == nullptr || (task.actor != nullptr && task.actor->task->done())) continue;
      context.governors.adopt(*governor, task.id, task.cpus, task.resources);
      context.sessions.assigned(task, governor->id);
      taken.insert(&task);
    }
    ready.erase(std::remove_if(ready.begin(), ready.end(), [&](TaskNode* t) { return taken.count(t) != 0; }),
                ready.end());
  }

  // Checks the submit against the session as it is now and applies it.
  void apply(kj::Function<void(uint64_t, uint64_t)>& answer) {
    auto& target = context.sessions.get(session);
    auto ready = pending.commit(target, capacity());
    if (direct) placeDirect(target, ready);
    claimPlaced(target);
    // Calls on an actor that had ended (run directly before it did, or
    // allowed to fail) end as the calls it left did (cancelled when it was
    // killed), failing no session.
    for (auto* actor : pending.endedActorsCalled()) context.sessions.actorEnded(target, *actor);
    ready.erase(std::remove_if(ready.begin(), ready.end(), [](TaskNode* t) { return t->done(); }), ready.end());
    context.logger.info("event=submit session={} tasks={} objects={} ready={}", session,
                        pending.taskCount(), pending.objectCount(), ready.size());
    answer(pending.taskCount(), pending.objectCount());
    context.sessions.submitted(target, std::move(ready));
    context.dispatcher.kick();
  }
};

// The chunk of a submit that a direct call's graph is.
std::unique_ptr<capnp::MallocMessageBuilder> directChunk(wire::Graph::Reader graph);

// Why `graph` is not a direct call of session `session` (one actor call,
// its outputs and the constants it reads, nothing else: what a governor's
// DataService.callActor takes); nullptr when it is.
kj::Maybe<kj::String> notADirectCall(wire::Graph::Reader graph, uint64_t session);

// Records actor calls a client sent to a governor directly (`graphs`, one
// call each; `governor`: where they run, 0 for nowhere) as one submit of
// those the session does not have. Rejects as a submit does, and for a
// graph that is not one direct call.
kj::Promise<void> recordDirectCalls(ServerContext& context, uint64_t sessionId,
                                    kj::ArrayPtr<const wire::Graph::Reader> graphs, GovernorId governor);

}  // namespace squall
