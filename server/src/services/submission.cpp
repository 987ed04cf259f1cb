// Actor calls that skipped the server, recorded as submits (submission.h).
// Loop thread only.
#include "submission.h"

#include <kj/debug.h>
#include <squall/proto/errors.h>
#include <squall/proto/spec-names.h>

namespace squall {

// The chunk of a submit that a direct call's graph is.
std::unique_ptr<capnp::MallocMessageBuilder> directChunk(wire::Graph::Reader graph) {
  auto chunk = std::make_unique<capnp::MallocMessageBuilder>(graph.totalSize().wordCount + 16);
  auto root = chunk->initRoot<wire::Submission::AddParams>();
  root.setObjects(graph.getObjects());
  root.setTasks(graph.getTasks());
  return chunk;
}

// Why `graph` is not a direct call of session `session` (one actor call,
// its outputs and the constants it reads, nothing else: what a governor's
// DataService.callActor takes); nullptr when it is. Anything else would
// be "running" on a governor that never heard of it, holding its place.
kj::Maybe<kj::String> notADirectCall(wire::Graph::Reader graph, uint64_t session) {
  if (graph.getTasks().size() != 1) return kj::str("a direct call carries one task, not ", graph.getTasks().size());
  auto task = graph.getTasks()[0];
  if (!task.getConfig().isActorCall()) return kj::str("task ", task.getId().getN(), " is not an actor call");
  if (task.getId().getSession() != session) return kj::str("task ", task.getId().getN(), " is of another session");
  std::map<uint64_t, wire::ObjectSpec::Reader> objects;
  for (auto object : graph.getObjects()) {
    if (object.getId().getSession() != session || !objects.emplace(object.getId().getN(), object).second) {
      return kj::str("object ", object.getId().getN(), " of a direct call is given twice or is of another session");
    }
  }
  std::set<uint64_t> used;
  for (auto output : task.getOutputs()) {
    auto it = objects.find(output.getN());
    if (output.getSession() != session || it == objects.end() || it->second.getIsConstant() ||
        it->second.getKind() == wire::ObjectKind::STREAM || !used.insert(output.getN()).second) {
      return kj::str("output ", output.getN(), " of a direct call must be given as a blob or dir it makes");
    }
  }
  for (auto input : task.getInputs()) {
    auto it = objects.find(input.getObject().getN());
    if (input.getObject().getSession() != session || it == objects.end() || !it->second.getIsConstant()) {
      return kj::str("input ", input.getObject().getN(), " of a direct call must be a constant sent with it");
    }
    used.insert(input.getObject().getN());
  }
  if (used.size() != objects.size()) return kj::str("a direct call carries objects it does not use");
  return nullptr;
}

// Records actor calls a client sent to a governor directly (`graphs`, one
// call each; `governor`: where they run, 0 for nowhere): those the session
// does not have are submitted (checked, logged, applied) together and made
// to run there (SubmissionImpl::sentTo). Those it has are left as they
// are. Resolves once applied; rejects as a submit does (nothing recorded),
// and for a graph that is not one direct call (notADirectCall).
kj::Promise<void> recordDirectCalls(ServerContext& context, uint64_t sessionId, kj::ArrayPtr<const wire::Graph::Reader> graphs,
                                    GovernorId governor) {
  for (auto graph : graphs) {
    KJ_IF_MAYBE(why, notADirectCall(graph, sessionId)) { SQUALL_FAIL("not a direct call: ", *why); }
  }
  auto& session = context.sessions.get(sessionId);
  std::vector<wire::Graph::Reader> unknown;
  for (auto graph : graphs) {
    bool known = false;
    for (auto task : graph.getTasks()) known = known || session.tasks.count(task.getId().getN()) != 0;
    if (!known) unknown.push_back(graph);
  }
  if (unknown.empty()) return kj::READY_NOW;
  SQUALL_REQUIRE(session.state == Session::State::OPEN, "session ", sessionId, " has failed: ", session.failureMessage);
  auto submission = kj::heap<SubmissionImpl>(context, sessionId, nullptr);
  std::vector<uint64_t> ids;
  for (auto graph : unknown) {
    for (auto task : graph.getTasks()) ids.push_back(task.getId().getN());
    submission->addChunk(directChunk(graph));
  }
  context.logger.debug("event=direct-calls-recorded session={} calls={} governor={}", sessionId, ids.size(), governor);
  submission->sentTo(governor, ids);
  auto& target = *submission;
  return target.commitThen([](uint64_t, uint64_t) {})
      .attach(kj::mv(submission))
      .catch_([&context, sessionId, graphs, governor, ids = kj::mv(ids)](kj::Exception&& e) -> kj::Promise<void> {
        // Recorded meanwhile by the other way (the governor's report and
        // the client's recordDirect crossed while both were written): done
        // when all were; when only some were (the governor reports each
        // call as it ends, the client records them together), the others
        // are recorded again without them. Each retry follows progress.
        KJ_IF_MAYBE(session, context.sessions.find(sessionId)) {
          size_t known = 0;
          for (auto n : ids) known += session->tasks.count(n);
          if (known == ids.size()) return kj::READY_NOW;
          if (known > 0) return recordDirectCalls(context, sessionId, graphs, governor);
        }
        kj::throwFatalException(kj::mv(e));
      });
}

}  // namespace squall
