// The connection of a Client (see client.h): the thread-local KJ event
// loop shared by all Clients of a thread, connecting and registering with
// the server, connecting again after a lost connection, and the Client
// class's methods. Thread: the one that created the Client.
#include "client-impl.h"

#include <cstdio>
#include <cstdlib>
#include <squall/proto/errors.h>
#include <squall/proto/resource-amounts.h>
#include <squall/proto/token.h>

namespace squall {
namespace client {

namespace {

thread_local Loop* threadLoop = nullptr;
// Lent by shareThreadLoop().
thread_local kj::AsyncIoProvider* sharedProvider = nullptr;
thread_local kj::WaitScope* sharedScope = nullptr;

Loop& acquireLoop() {
  if (threadLoop == nullptr) threadLoop = new Loop(sharedProvider, sharedScope);
  threadLoop->users++;
  return *threadLoop;
}

void releaseLoop() {
  if (--threadLoop->users == 0) {
    delete threadLoop;
    threadLoop = nullptr;
  }
}

}  // namespace

void shareThreadLoop(kj::AsyncIoProvider& provider, kj::WaitScope& waitScope) {
  sharedProvider = &provider;
  sharedScope = &waitScope;
}

void unshareThreadLoop() {
  KJ_REQUIRE(threadLoop == nullptr || threadLoop->own != nullptr, "a Client still uses the shared loop");
  sharedProvider = nullptr;
  sharedScope = nullptr;
}

ClientImpl::ClientImpl() : loop(acquireLoop()) { dataWatches = kj::heap<kj::TaskSet>(dataWatchErrors); }
ClientImpl::~ClientImpl() {
  dataWatches = nullptr;
  dataServices.clear();
  service = nullptr;
  connection = nullptr;
  tlsNetwork = nullptr;
  tls = nullptr;
  releaseLoop();
}

std::string ClientImpl::describe(const kj::Exception& e) {
  std::string message = userMessage(e).cStr();
  if (e.getType() == kj::Exception::Type::DISCONNECTED) {
    message = "connection to the squall server at " + address + " lost: " + message;
  }
  return message;
}

void ClientImpl::connect() {
  auto& ws = waitScope();
  service = nullptr;
  connection = nullptr;
  connection = connectTo(network(), address).wait(ws);
  auto req = connection->bootstrap<wire::Bootstrap>().registerClientRequest();
  req.setVersion(wire::PROTOCOL_VERSION);
  req.setToken(token);
  service = req.send().wait(ws).getService();
}

bool ClientImpl::connectWithBackoff() {
  auto& timer = loop.provider->getTimer();
  auto deadline = timer.now() + static_cast<int64_t>(reconnectSeconds * 1000) * kj::MILLISECONDS;
  auto backoff = 100 * kj::MILLISECONDS;
  dataServices.clear();
  for (;;) {
    if (timer.now() + backoff > deadline) return false;
    timer.afterDelay(backoff).wait(waitScope());
    backoff = kj::min(backoff * 2, 1 * kj::SECONDS);
    try {
      connect();
      for (auto it = ownedSessions.begin(); it != ownedSessions.end();) {
        auto req = svc().adoptSessionRequest();
        req.setSession(it->first);
        req.setIncarnation(it->second);
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { req.send().wait(waitScope()); })) {
          if (e->getType() == kj::Exception::Type::DISCONNECTED) kj::throwFatalException(kj::mv(*e));
          it = ownedSessions.erase(it);
        } else {
          ++it;
        }
      }
      return true;
    } catch (const kj::Exception& e) {
      if (e.getType() != kj::Exception::Type::DISCONNECTED) throw Error(describe(e));
    }
  }
}

void ClientImpl::blockSliced(kj::ForkedPromise<void>& answered) {
  auto& timer = loop.provider->getTimer();
  for (;;) {
    kj::Maybe<kj::TimePoint> until;
    if (whileBlocked) until = timer.now() + BLOCK_SLICE;
    KJ_IF_MAYBE(d, deadline) {
      KJ_IF_MAYBE(u, until) {
        if (*d < *u) until = *d;
      } else {
        until = *d;
      }
    }
    auto wake = until.map([&timer](kj::TimePoint at) { return timer.atTime(at).then([]() { return false; }); })
                    .orDefault(kj::Promise<bool>(kj::NEVER_DONE));
    if (answered.addBranch().then([]() { return true; }).exclusiveJoin(kj::mv(wake)).wait(waitScope())) return;
    KJ_IF_MAYBE(d, deadline) {
      if (timer.now() >= *d) throw Timeout("the wait's timeout ran out");
    }
    if (whileBlocked) whileBlocked();
  }
}

DeadlineScope::DeadlineScope(ClientImpl& client, WaitTimeout timeout) : client(client), saved(client.deadline) {
  if (timeout) {
    auto at = client.loop.provider->getTimer().now() + timeout->count() * kj::MILLISECONDS;
    KJ_IF_MAYBE(outer, saved) {
      if (*outer < at) at = *outer;
    }
    client.deadline = at;
  }
}

DeadlineScope::~DeadlineScope() { client.deadline = saved; }

void ClientImpl::reconnect(const kj::Exception& lost) {
  if (!connectWithBackoff()) throw Error(describe(lost));
}

std::string dataRoute(const std::string& where) {
  // A test's hook ("FROM=TO,..."): its proxy stands between this client
  // and a governor, whose announced address is FROM.
  const char* routes = getenv("SQUALL_TEST_DATA_ROUTE");
  if (routes == nullptr) return where;
  std::string all = routes;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find(',', at);
    if (end == std::string::npos) end = all.size();
    auto route = all.substr(at, end - at);
    auto eq = route.find('=');
    if (eq != std::string::npos && route.substr(0, eq) == where) return route.substr(eq + 1);
    at = end + 1;
  }
  return where;
}

wire::DataService::Client& ClientImpl::dataService(const std::string& where) {
  auto it = dataServices.find(where);
  if (it != dataServices.end()) return it->second.second;
  auto conn = connectTo(network(), dataRoute(where)).wait(waitScope());
  auto data = openData(*conn);
  uint64_t number = ++dataConnections;
  dataConnection[where] = number;
  // Dropped on a later turn: not from inside its own connection's events.
  dataWatches->add(conn->onDisconnect().then([this, where, number]() {
    return kj::evalLater([this, where, number]() {
      if (dataConnection[where] == number) dataServices.erase(where);
    });
  }));
  auto inserted = dataServices.emplace(where, std::make_pair(kj::mv(conn), kj::mv(data)));
  return inserted.first->second.second;
}

wire::DataService::Client ClientImpl::openData(RpcClient& connection) {
  auto req = connection.bootstrap<wire::DataBootstrap>().openRequest();
  req.setVersion(wire::PROTOCOL_VERSION);
  req.setToken(token);
  return req.send().getService();
}

}  // namespace client

// ------------------------------------------------------------ Client

Client::Client(const std::string& address, const std::string& token)
    : Client(ClientOptions{.address = address, .token = token}) {}

Client::Client(const ClientOptions& options) {
  try {
    impl = std::make_unique<client::ClientImpl>();
  } catch (const kj::Exception& e) {
    // Another KJ event loop runs on this thread (a tasklib executor's).
    throw Error(std::string("cannot make a squall Client on this thread: ") + userMessage(e).cStr() +
                " (make it on a thread of its own)");
  }
  const auto& address = options.address;
  const auto& token = options.token;
  impl->address = address;
  impl->whileBlocked = options.whileBlocked;
  impl->aroundWait = options.aroundWait;
  if (impl->address.empty()) {
    const char* env = getenv("SQUALL_SERVER");
    impl->address = env && *env ? env : "127.0.0.1:" + std::to_string(SERVER_PORT);
  }
  impl->guard([&]() {
    impl->token = resolveToken(token, "");
    impl->tls = Tls::load(resolveTls(TlsFiles{options.tlsCert, options.tlsKey, options.tlsCa}));
    if (impl->tls.get() != nullptr) impl->tlsNetwork = impl->tls->wrap(impl->loop.provider->getNetwork());
  });
  if (const char* env = getenv("SQUALL_RECONNECT_TIMEOUT"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    double seconds = strtod(env, &end);
    if (end == env || *end != '\0' || !(seconds >= 0)) {
      throw Error(std::string("bad SQUALL_RECONNECT_TIMEOUT '") + env + "': expected seconds");
    }
    impl->reconnectSeconds = seconds;
  }
  try {
    impl->connect();
  } catch (const kj::Exception& e) {
    std::string message =
        "cannot connect to the squall server at " + impl->address + ": " + userMessage(e).cStr();
    bool unreachable = e.getType() == kj::Exception::Type::DISCONNECTED;
    if (!options.waitForServer || !unreachable) throw Error(message);
    if (!impl->connectWithBackoff()) {
      char tried[64];
      snprintf(tried, sizeof(tried), " (tried for %g s)", impl->reconnectSeconds);
      throw Error(message + tried);
    }
  }
}

Client::~Client() = default;

const std::string& Client::address() const { return impl->address; }

Session Client::newSession(const std::string& name, SessionOptions options) {
  return impl->guard([&]() {
    auto req = impl->svc().newSessionRequest();
    req.setName(name);
    req.setPersistent(options.persistent);
    auto response = req.send().wait(impl->waitScope());
    impl->ownedSessions.emplace(response.getSession(), response.getIncarnation());
    return Session(
        std::make_unique<client::SessionImpl>(*impl, response.getSession(), response.getIncarnation()));
  });
}

Session Client::attach(uint64_t id) {
  return impl->retrying([&]() {
    // By the id alone (incarnation 0): the session with this id on the
    // server now, named by the server's incarnation from here on.
    auto req = impl->svc().getStateRequest();
    req.setSession(id);
    // The reader points into the response: keep the response.
    auto response = req.send().wait(impl->waitScope());
    auto session = std::make_unique<client::SessionImpl>(*impl, id, response.getState().getIncarnation());
    session->owned = false;
    // Its ids come from a block of its own, reserved when first needed
    // (the creator and other submitters hold theirs).
    session->nextN = 0;
    session->blockEnd = 0;
    return Session(std::move(session));
  });
}

Session Client::attachChild(uint64_t id, uint64_t parentTask) {
  auto session = attach(id);
  session.impl->parent = parentTask;
  return session;
}

Session Client::attach(const std::string& name) {
  uint64_t id = impl->retrying([&]() {
    auto req = impl->svc().findSessionRequest();
    req.setName(name);
    return req.send().wait(impl->waitScope()).getSession();
  });
  return attach(id);
}

std::vector<SessionState> Client::sessions() {
  return impl->retrying([&]() {
    auto response = impl->svc().listSessionsRequest().send().wait(impl->waitScope());
    std::vector<SessionState> result;
    for (auto s : response.getSessions()) result.push_back(client::toState(s));
    return result;
  });
}

std::vector<GovernorInfo> Client::governors() {
  return impl->retrying([&]() {
    auto response = impl->svc().listGovernorsRequest().send().wait(impl->waitScope());
    std::vector<GovernorInfo> result;
    for (auto g : response.getGovernors()) {
      std::vector<std::string> functions;
      for (auto f : g.getFunctions()) functions.emplace_back(f.cStr());
      GovernorInfo info{g.getId(), g.getName().cStr(), g.getDataAddress().cStr(),
                        g.getCpus(), g.getCpusUsed(), g.getTasksAssigned(),
                        g.getObjects(), std::move(functions), {}};
      for (auto r : g.getResources()) {
        info.resources[r.getName().cStr()] = {double(r.getCapacity()) / RESOURCE_UNIT,
                                              double(r.getUsed()) / RESOURCE_UNIT};
      }
      result.push_back(std::move(info));
    }
    return result;
  });
}

}  // namespace squall
