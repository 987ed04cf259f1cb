#include "server-link.h"

#include "governor-control.h"

#include <squall/proto/errors.h>
#include <algorithm>
#include <utility>
#include <vector>

namespace squall {

namespace {

// Connects, retrying refused connections with backoff until `deadline`.
kj::Promise<kj::Own<RpcClient>> connectWithRetry(kj::Network& network, kj::Timer& timer,
                                                 kj::StringPtr address, kj::TimePoint deadline,
                                                 kj::Duration backoff, spdlog::logger& logger) {
  return connectTo(network, address)
      .catch_([&network, &timer, address, deadline, backoff,
               &logger](kj::Exception&& e) -> kj::Promise<kj::Own<RpcClient>> {
        if (e.getType() != kj::Exception::Type::DISCONNECTED || timer.now() + backoff > deadline) {
          return kj::mv(e);
        }
        logger.warn("event=connect-retry server={} retry_ms={} error=\"{}\"", address.cStr(),
                    backoff / kj::MILLISECONDS, e.getDescription().cStr());
        return timer.afterDelay(backoff).then([&network, &timer, address, deadline, backoff, &logger]() {
          return connectWithRetry(network, timer, address, deadline,
                                  kj::min(backoff * 2, 1 * kj::SECONDS), logger);
        });
      });
}

}  // namespace

ServerLink::ServerLink(kj::Network& network, kj::Timer& timer, ObjectStore& store, TaskQueue& queue,
                       ResultBatcher& batcher, spdlog::logger& logger, ServerLinkOptions options)
    : network(network), timer(timer), store(store), queue(queue), batcher(batcher), logger(logger),
      options(kj::mv(options)) {
  queue.onLend([this](Id task, bool lent) { sendLend(task, lent); });
  KJ_IF_MAYBE(outputs, this->options.outputs) {
    outputs->sendWith([this](kj::ArrayPtr<const TaskOutputs::Chunk> chunks,
                             uint64_t dropped) -> kj::Maybe<kj::Promise<void>> {
      KJ_IF_MAYBE(up, upstream) {
        auto request = up->outputRequest();
        auto list = request.initChunks(chunks.size());
        for (uint i = 0; i < chunks.size(); i++) {
          chunks[i].task.to(list[i].initTask());
          list[i].setStderr(chunks[i].isStderr);
          list[i].setLabel(chunks[i].label);
          list[i].setText(chunks[i].text);
        }
        request.setDropped(dropped);
        return request.send().ignoreResult();
      }
      return nullptr;
    });
  }
}

void ServerLink::sendLend(Id task, bool lent) {
  // Without a connection, the next registration says which are lent.
  KJ_IF_MAYBE(up, upstream) {
    auto request = up->lendCpusRequest();
    task.to(request.initTask());
    request.setLent(lent);
    // A lost connection is seen (and registered again) by lost().
    sends.add(request.send().ignoreResult().catch_([](kj::Exception&&) {}));
  }
}

kj::Maybe<kj::Promise<void>> ServerLink::recordDirect(wire::Graph::Reader call) {
  KJ_IF_MAYBE(up, upstream) {
    auto request = up->recordDirectRequest();
    request.setCall(call);
    return request.send().ignoreResult();
  }
  return nullptr;
}

kj::Promise<uint32_t> ServerLink::registerWith(RpcClient& connection, bool again) {
  // The token first, in a message of its own: the server reads a
  // registration (which may be large) only from a connection that has
  // authenticated. Its answer says which server this is: one started
  // again on another log gets none of what is here (startOver()).
  auto authenticate = connection.bootstrap<wire::Bootstrap>().authenticateRequest();
  authenticate.setVersion(wire::PROTOCOL_VERSION);
  authenticate.setToken(options.token);
  return authenticate.send().then([this, &connection, again](auto response) {
    uint64_t incarnation = response.getIncarnation();
    kj::Promise<void> ready = kj::READY_NOW;
    if (serverIncarnation != 0 && incarnation != serverIncarnation) ready = startOver(incarnation);
    serverIncarnation = incarnation;
    KJ_IF_MAYBE(uploads, options.uploads) { uploads->setIncarnation(incarnation); }
    return ready.then([this, &connection, again]() { return sendRegistration(connection, again); });
  });
}

kj::Promise<uint32_t> ServerLink::sendRegistration(RpcClient& connection, bool again) {
  auto request = connection.bootstrap<wire::Bootstrap>().registerGovernorRequest();
  request.setVersion(wire::PROTOCOL_VERSION);
  request.setToken(options.token);
  auto info = request.initInfo();
  info.setName(options.name);
  info.setDataAddress(options.dataAddress);
  info.initResources().setCpus(options.cpus);
  auto pools = queue.offeredPools();
  auto poolList = info.initPools(pools.size());
  for (uint i = 0; i < pools.size(); i++) {
    poolList[i].setName(pools[i].name);
    poolList[i].setIndexed(pools[i].indexed);
    auto ids = poolList[i].initIds(pools[i].ids.size());
    for (uint j = 0; j < pools[i].ids.size(); j++) ids.set(j, pools[i].ids[j]);
    poolList[i].setTotal(pools[i].total);
  }
  KJ_IF_MAYBE(pool, options.executors) {
    auto& known = pool->executors();
    auto list = info.initExecutors(known.size());
    for (uint i = 0; i < known.size(); i++) {
      list[i].setName(known[i].name);
      auto functions = list[i].initFunctions(known[i].functions.size());
      for (uint j = 0; j < known[i].functions.size(); j++) {
        auto& f = known[i].functions[j];
        functions[j].setName(f.name);
        functions[j].setNamed(f.named);
        functions[j].setActor(f.actor);
        auto outputs = functions[j].initOutputs(f.outputs.size());
        for (uint k = 0; k < f.outputs.size(); k++) outputs.set(k, f.outputs[k]);
      }
    }
  }
  std::vector<std::pair<Id, ObjectMeta>> objects;
  std::vector<Id> tasks;
  if (again) {
    store.forEach([&](Id id, const ObjectMeta& meta) { objects.emplace_back(id, meta); });
    tasks = queue.held();
    for (auto id : batcher.unacknowledged()) tasks.push_back(id);
  }
  auto inventory = info.initInventory(objects.size());
  for (size_t i = 0; i < objects.size(); i++) {
    objects[i].first.to(inventory[i].initId());
    inventory[i].setSize(objects[i].second.size);
    inventory[i].setHash(objects[i].second.hash);
  }
  auto held = info.initTasks(tasks.size());
  for (size_t i = 0; i < tasks.size(); i++) tasks[i].to(held[i]);
  // Functions waiting for tasks they submitted, their cpus lent.
  auto seceded = again ? queue.secededTasks() : std::vector<Id>();
  auto lentList = info.initSeceded(seceded.size());
  for (size_t i = 0; i < seceded.size(); i++) seceded[i].to(lentList[i]);
  std::vector<Id> direct;
  KJ_IF_MAYBE(calls, options.direct) {
    if (again) direct = calls->pending();
  }
  auto directList = info.initDirect(direct.size());
  for (size_t i = 0; i < direct.size(); i++) direct[i].to(directList[i]);
  info.setIncarnation(serverIncarnation);
  request.setControl(kj::heap<GovernorControlImpl>(store, queue, batcher, logger, options.uploads));
  upstream = nullptr;
  return request.send().then([this, seceded = kj::mv(seceded)](auto response) {
    upstream = response.getUpstream();
    batcher.connected(response.getUpstream());
    // Lent or taken back while the registration was on its way.
    auto now = queue.secededTasks();
    for (auto id : now) {
      if (std::find(seceded.begin(), seceded.end(), id) == seceded.end()) sendLend(id, true);
    }
    for (auto id : seceded) {
      if (std::find(now.begin(), now.end(), id) == now.end()) sendLend(id, false);
    }
    return response.getGovernorId();
  });
}

kj::Promise<void> ServerLink::startOver(uint64_t incarnation) {
  // Every task and object here belongs to a session of the server before,
  // whose ids this one may have given out again: none may reach it.
  auto tasks = queue.held();
  std::vector<Id> objects;
  store.forEach([&](Id id, const ObjectMeta&) { objects.push_back(id); });
  logger.warn("event=start-over reason=\"the server started again on another session log\" "
              "incarnation_before={:016x} incarnation={:016x} tasks={} objects={}",
              serverIncarnation, incarnation, tasks.size(), objects.size());
  batcher.abandon(tasks);
  for (auto id : tasks) queue.cancel(id);
  for (auto id : objects) store.remove(id);
  KJ_IF_MAYBE(uploads, options.uploads) { uploads->clear(); }
  // Registered only once they have gone: the new server may give their ids
  // out again, and a task of the same id arriving here meanwhile would be
  // taken for a duplicate. Bounded: a child that will not die holds up no
  // registration for long (its result is dropped whenever it comes).
  return timer.timeoutAfter(10 * kj::SECONDS, batcher.abandonedEnded()).catch_([this](kj::Exception&& e) {
    logger.warn("event=start-over-timeout error=\"{}\" action=register", e.getDescription().cStr());
  });
}

kj::OneOf<uint32_t, kj::String> ServerLink::connect(kj::WaitScope& waitScope) {
  auto deadline = timer.now() + options.connectTimeout;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                server = connectWithRetry(network, timer, options.server, deadline, 100 * kj::MILLISECONDS,
                                          logger)
                             .wait(waitScope);
              })) {
    return kj::str("cannot connect to the server at ", options.server, ": ", e->getDescription());
  }
  uint32_t governorId = 0;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { governorId = registerWith(*server, false).wait(waitScope); })) {
    return kj::str("the server at ", options.server, " refused registration: ", e->getDescription());
  }
  return governorId;
}

kj::Promise<void> ServerLink::lost() {
  auto dropped = server->onDisconnect().then([]() {}, [](kj::Exception&&) {});
  if (options.serverTimeout <= 0 * kj::SECONDS) return dropped;
  // A server that stops answering (a network cut that sends no reset, or
  // one that gave this governor up) counts as lost too.
  auto timeout = options.serverTimeout;
  auto cap = KJ_ASSERT_NONNULL(upstream);
  auto unanswered =
      heartbeat(timer, timeout, [cap = kj::mv(cap)]() mutable { return cap.pingRequest().send().ignoreResult(); })
          .then([]() {},
                [this, timeout](kj::Exception&& e) {
                  logger.warn("event=server-unanswered timeout_ms={} error=\"{}\"", timeout / kj::MILLISECONDS,
                              e.getDescription().cStr());
                });
  return dropped.exclusiveJoin(kj::mv(unanswered));
}

kj::Maybe<kj::String> ServerLink::run(kj::WaitScope& waitScope, kj::ForkedPromise<void>& stop) {
  for (;;) {
    auto onStop = stop.addBranch().then([]() { return true; });
    auto onLost = lost().then([]() { return false; });
    if (onStop.exclusiveJoin(kj::mv(onLost)).wait(waitScope)) return nullptr;
    // Tasks keep running and their results wait; reconnect with backoff.
    logger.warn("event=server-lost server={} action=reconnect running={} waiting={}", options.server.cStr(),
                queue.runningCount(), queue.waitingCount());
    server = nullptr;
    kj::Maybe<kj::String> failure;
    if (!reconnect(waitScope, stop, failure)) return failure;
  }
}

bool ServerLink::reconnect(kj::WaitScope& waitScope, kj::ForkedPromise<void>& stop,
                           kj::Maybe<kj::String>& failure) {
  using Connected = std::pair<kj::Own<RpcClient>, uint32_t>;
  auto giveUp = timer.now() + options.reconnectTimeout;
  kj::Maybe<kj::String> lastError;
  for (;;) {
    auto attempt = connectWithRetry(network, timer, options.server, giveUp, 100 * kj::MILLISECONDS, logger)
                       .then([this](kj::Own<RpcClient> connection) {
                         auto& ref = *connection;
                         return registerWith(ref, true).then(
                             [connection = kj::mv(connection)](uint32_t id) mutable {
                               return std::make_pair(kj::mv(connection), id);
                             });
                       })
                       .then([](auto result) -> kj::Maybe<Connected> { return kj::mv(result); });
    auto stopped = stop.addBranch().then([]() -> kj::Maybe<Connected> { return nullptr; });
    kj::Maybe<Connected> outcome;
    bool signal = false;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  outcome = attempt.exclusiveJoin(kj::mv(stopped)).wait(waitScope);
                  signal = outcome == nullptr;
                })) {
      lastError = kj::str(e->getDescription());
      if (timer.now() < giveUp) {
        // Connected, then lost again while registering (a server going
        // down or coming up), or refused: go round until the timeout.
        logger.warn("event=reregister-retry error=\"{}\"", e->getDescription().cStr());
        timer.afterDelay(200 * kj::MILLISECONDS).wait(waitScope);
        continue;
      }
    }
    if (signal) return false;  // told to stop: not a failure
    KJ_IF_MAYBE(connected, outcome) {
      server = kj::mv(connected->first);
      logger.info("event=reregistered governor={} name={} running={} objects={}", connected->second,
                  options.name.cStr(), queue.runningCount(), store.count());
      return true;
    }
    break;
  }
  KJ_IF_MAYBE(message, lastError) {
    logger.error("event=server-lost server={} action=exit error=\"{}\"", options.server.cStr(), message->cStr());
    failure = kj::str("lost the connection to the server at ", options.server,
                      " and could not register again: ", *message);
  }
  return false;
}

}  // namespace squall
