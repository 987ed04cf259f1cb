#include "services.h"

#include "explain.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <unordered_set>
#include <kj/debug.h>
#include <squall/proto/errors.h>
#include <squall/proto/resource-amounts.h>
#include <squall/proto/rpc.h>
#include <squall/proto/spec-names.h>
#include <squall/proto/token.h>

#include "client-service.h"
#include "submission.h"

namespace squall {

namespace {

class GovernorUpstreamImpl final : public wire::GovernorUpstream::Server {
 public:
  GovernorUpstreamImpl(ServerContext& context, GovernorId id, wire::GovernorControl::Client control)
      : context(context), running(context.running), id(id) {
    // No answer within the timeout (or a broken connection) and it is
    // given up.
    if (context.timer != nullptr && context.governorTimeout > 0 * kj::SECONDS) {
      auto timeout = context.governorTimeout;
      heartbeat = squall::heartbeat(*context.timer, timeout,
                                    [this, control = kj::mv(control)]() mutable {
                                      return control.pingRequest().send().then([this](auto answer) {
                                        storeStatsFrom(answer.getStore());
                                      });
                                    })
                      .catch_([this, timeout](kj::Exception&& e) {
                        if (!*running || this->context.governors.find(this->id) == nullptr) return;
                        this->context.logger.warn(
                            "event=governor-unreachable governor={} timeout_ms={} error=\"{}\"", this->id,
                            timeout / kj::MILLISECONDS, e.getDescription().cStr());
                        this->context.dispatcher.governorLost(this->id);
                      })
                      .eagerlyEvaluate(nullptr);
    }
  }

  // The governor's connection is gone.
  ~GovernorUpstreamImpl() noexcept(false) {
    if (*running) context.dispatcher.governorLost(id);
  }

  // What the governor's store holds, for the status page and /metrics.
  void storeStatsFrom(wire::StoreStats::Reader stats) {
    KJ_IF_MAYBE(g, context.governors.find(id)) {
      auto& store = g->store;
      store.known = true;
      store.objects = stats.getObjects();
      store.memoryBytes = stats.getMemoryBytes();
      store.memoryCapacity = stats.getMemoryCapacity();
      store.memoryObjects = stats.getMemoryObjects();
      store.spilledBytes = stats.getSpilledBytes();
      store.spilledObjects = stats.getSpilledObjects();
      store.warmBytes = stats.getWarmBytes();
    }
  }

  kj::Promise<void> ping(PingContext) override {
    current();
    return kj::READY_NOW;
  }

  kj::Promise<void> lendCpus(LendCpusContext call) override {
    auto& governor = current();
    auto params = call.getParams();
    auto task = Id::from(params.getTask());
    context.governors.lend(governor, task, params.getLent());
    context.logger.debug("event=cpus-lent governor={} session={} task={} lent={}", id, task.session, task.n,
                         params.getLent());
    // Lent cpus take more work at once.
    if (params.getLent()) context.dispatcher.kick();
    return kj::READY_NOW;
  }

  kj::Promise<void> output(OutputContext call) override {
    auto& governor = current();
    auto params = call.getParams();
    for (auto chunk : params.getChunks()) {
      auto task = chunk.getTask();
      context.output.add(task.getSession(), task.getN(), chunk.getStderr(), chunk.getLabel(),
                         kj::StringPtr(governor.name.c_str(), governor.name.size()), chunk.getText());
    }
    if (params.getDropped() > 0) {
      context.logger.warn("event=task-output-dropped governor={} chunks={}", id, params.getDropped());
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> recordDirect(RecordDirectContext call) override {
    current();
    auto graph = call.getParams().getCall();
    SQUALL_REQUIRE(graph.getTasks().size() > 0, "recordDirect: the call's graph has no task");
    auto task = Id::from(graph.getTasks()[0].getId());
    if (context.sessions.findTask(task) != nullptr) return kj::READY_NOW;
    auto builder = kj::heapArrayBuilder<const wire::Graph::Reader>(1);
    builder.add(graph);
    auto graphs = builder.finish();
    return recordDirectCalls(context, task.session, graphs, id).attach(kj::mv(graphs));
  }

  kj::Promise<void> update(UpdateContext call) override {
    current();
    // Actor calls clients sent the governor directly that their sessions
    // do not have yet: recorded first (a submit each session's), then
    // their results are applied with the rest. A record refused (the
    // session closed or failed, the actor ended) leaves its results
    // unknown: their outputs are removed there.
    std::map<uint64_t, kj::Vector<wire::Graph::Reader>> unrecorded;
    for (auto result : call.getParams().getResults()) {
      if (!result.hasDirect() || context.sessions.findTask(Id::from(result.getId())) != nullptr) continue;
      unrecorded[result.getId().getSession()].add(result.getDirect());
    }
    if (unrecorded.empty()) {
      applyUpdate(call);
      return kj::READY_NOW;
    }
    kj::Vector<kj::Promise<void>> records;
    for (auto& [session, graphs] : unrecorded) records.add(recordEach(session, graphs.releaseAsArray()));
    return kj::joinPromises(records.releaseAsArray()).then([this, call]() mutable { applyUpdate(call); });
  }

 private:
  // Records the session's direct calls together; when that is refused,
  // each alone, so that one bad call does not drop the others.
  kj::Promise<void> recordEach(uint64_t session, kj::Array<wire::Graph::Reader> graphs) {
    auto list = std::make_shared<kj::Array<wire::Graph::Reader>>(kj::mv(graphs));
    auto record = [this, session](kj::ArrayPtr<const wire::Graph::Reader> some) {
      return kj::evalNow([&]() { return recordDirectCalls(context, session, some, id); });
    };
    return record(*list).catch_([this, session, list, record](kj::Exception&& e) -> kj::Promise<void> {
      context.logger.info("event=direct-calls-refused session={} governor={} calls={} error=\"{}\"", session, id,
                          list->size(), e.getDescription().cStr());
      if (list->size() == 1) return kj::READY_NOW;
      kj::Vector<kj::Promise<void>> each;
      for (size_t i = 0; i < list->size(); i++) {
        each.add(record(list->slice(i, i + 1)).catch_([](kj::Exception&&) {}));
      }
      return kj::joinPromises(each.releaseAsArray()).attach(kj::mv(list));
    });
  }

  void applyUpdate(UpdateContext& call) {
    auto& governor = current();
    for (auto result : call.getParams().getResults()) {
      context.governors.release(id, Id::from(result.getId()));
      context.sessions.taskResult(result, id, governor.name.c_str());
    }
    // Answered at once, so that the governor sends its next results while
    // these are written; the commit that has them confirms them (see the
    // Dispatcher).
    governor.appliedUpdate = std::max(governor.appliedUpdate, call.getParams().getNumber());
    if (call.getParams().getRanDry()) context.dispatcher.ranDry(governor);
    call.getResults().setDurable(context.sessions.sessionLog() == nullptr);
    context.dispatcher.kick();
  }

  ServerContext& context;
  std::shared_ptr<bool> running;
  GovernorId id;
  kj::Promise<void> heartbeat = nullptr;

  // This governor; one given up (it did not answer in time) must register
  // again: its work has been placed elsewhere meanwhile.
  GovernorState& current() {
    KJ_IF_MAYBE(governor, context.governors.find(id)) { return *governor; }
    kj::throwFatalException(KJ_EXCEPTION(DISCONNECTED, "the server gave this governor up; register again"));
  }
};

class BootstrapImpl final : public wire::Bootstrap::Server {
 public:
  BootstrapImpl(ServerContext& context, kj::Own<PeerGate> gate)
      : context(context), gate(kj::mv(gate)), peer(kj::str(this->gate->peer())) {}

  kj::Promise<void> authenticate(AuthenticateContext call) override {
    auto params = call.getParams();
    checkPeer(params.getVersion(), params.getToken());
    call.getResults().setIncarnation(context.sessions.incarnation());
    return kj::READY_NOW;
  }

  kj::Promise<void> registerClient(RegisterClientContext call) override {
    auto params = call.getParams();
    checkPeer(params.getVersion(), params.getToken());
    context.logger.info("event=client-registered peer={}", peer.cStr());
    call.getResults().setService(newClientService(context, kj::str(peer)));
    return kj::READY_NOW;
  }

  kj::Promise<void> registerGovernor(RegisterGovernorContext call) override {
    auto params = call.getParams();
    checkPeer(params.getVersion(), params.getToken());
    auto info = params.getInfo();
    auto cpus = info.getResources().getCpus();
    SQUALL_REQUIRE(cpus >= 1, "a governor needs at least 1 cpu");
    SQUALL_REQUIRE(info.getDataAddress().size() > 0, "a governor must give its data address");
    auto& governor = context.governors.add(info.getName().cStr(), info.getDataAddress().cStr(), cpus,
                                           params.getControl());
    for (auto pool : info.getPools()) {
      PoolState state;
      state.indexed = pool.getIndexed();
      state.capacity = pool.getIndexed() ? pool.getIds().size() * RESOURCE_UNIT : pool.getTotal();
      governor.pools[pool.getName().cStr()] = state;
    }
    for (auto executor : info.getExecutors()) {
      for (auto function : executor.getFunctions()) {
        auto name = kj::str(executor.getName(), "/", function.getName());
        auto& outputs = governor.functions[name.cStr()];
        for (auto output : function.getOutputs()) outputs.push_back(output.cStr());
        if (function.getActor()) governor.actorTypes.insert(name.cStr());
      }
    }
    context.logger.info("event=governor-registered governor={} name={} data={} cpus={} functions={}",
                        governor.id, governor.name, governor.dataAddress, cpus, governor.functions.size());
    if (auto* log = context.sessions.sessionLog()) log->governorSeen(governor.name);
    // Registered before with a server on another log: its tasks and objects
    // name sessions of that server, which may share ids with this one's.
    uint64_t theirs = info.getIncarnation();
    bool stale = theirs != 0 && theirs != context.sessions.incarnation();
    if (stale) {
      context.logger.warn(
          "event=governor-of-another-incarnation governor={} name={} its_incarnation={:016x} incarnation={:016x} "
          "tasks={} objects={} action=adopt-none",
          governor.id, governor.name, theirs, context.sessions.incarnation(), info.getTasks().size(),
          info.getInventory().size());
    } else if (info.getTasks().size() > 0 || info.getInventory().size() > 0 || info.getDirect().size() > 0 ||
               context.dispatcher.held()) {
      // Back after a server restart or a lost connection: take over what
      // it still runs and holds.
      for (auto* task : context.sessions.governorReturned(governor.id, governor.name, info.getTasks(),
                                                          info.getInventory(), info.getDirect())) {
        context.governors.adopt(governor, task->id, task->cpus, task->resources);
      }
      for (auto seceded : info.getSeceded()) context.governors.lend(governor, Id::from(seceded), true);
    }
    if (context.dispatcher.held() && context.governors.expectedCount() == 0) {
      context.dispatcher.resume();
    }
    call.getResults().setUpstream(kj::heap<GovernorUpstreamImpl>(context, governor.id, governor.control));
    call.getResults().setGovernorId(governor.id);

    context.dispatcher.kick();
    return kj::READY_NOW;
  }

 private:
  ServerContext& context;
  kj::Own<PeerGate> gate;
  kj::String peer;

  // Admits the connection, or refuses it (logged by the listener, the
  // connection closed once this call's error is written) and throws.
  void checkPeer(uint32_t version, capnp::Text::Reader token) {
    if (version != wire::PROTOCOL_VERSION) {
      gate->refuse(kj::str("protocol version ", version));
      SQUALL_FAIL("protocol version mismatch: peer speaks ", version, ", server speaks ", wire::PROTOCOL_VERSION,
                  "; run the same squall release on both sides");
    }
    // A server without a token checks none (it listens on loopback only,
    // unless started --insecure): a client's token from the default file
    // is no reason to refuse it.
    if (!context.token.empty() && !tokensEqual(token.cStr(), context.token)) {
      gate->refuse(token.size() == 0 ? "no token" : "wrong token");
      SQUALL_FAIL("authentication failed: ", token.size() == 0 ? "no token given" : "wrong token",
                  " (the server's is in its --token-file; clients read $SQUALL_TOKEN_FILE, $SQUALL_TOKEN or ",
                  defaultTokenFile().empty() ? kj::str("the default token file") : kj::str(defaultTokenFile().c_str()),
                  ")");
    }
    gate->admit();
  }
};

}  // namespace

kj::Own<wire::Bootstrap::Server> newBootstrap(ServerContext& context, kj::Own<PeerGate> gate) {
  return kj::heap<BootstrapImpl>(context, kj::mv(gate));
}

}  // namespace squall
