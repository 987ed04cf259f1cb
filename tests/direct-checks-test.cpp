// Direct actor calls (docs/actors.md, "Calls that skip the server") get the
// checks a submit gets (issue 40): ids new in the session and the store,
// the actor of the call's session, only actor calls recorded through
// recordDirect, places freed for calls cancelled that their governor never
// had, constants removed with their call; a data connection that broke is
// dropped, and a call that got no answer is placed anew unless the governor
// has it. A real server and one governor keeping the actor executor; raw
// RPC (on a thread of its own: one KJ loop per thread) where a client of
// the library would not send what is tested.
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/client/client.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <squall/tools/local-cluster.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>

#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <optional>
#include <cstdlib>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace squall {
namespace {

constexpr const char* TOKEN = "sesame";

// Runs `body(io)` on a thread with a KJ loop of its own and returns what it
// returns (the test thread's loop belongs to its Clients).
template <typename Body>
auto onItsOwnLoop(Body&& body) -> decltype(body(std::declval<kj::AsyncIoContext&>())) {
  std::optional<decltype(body(std::declval<kj::AsyncIoContext&>()))> result;
  std::string error;
  std::thread([&]() {
    try {
      auto io = kj::setupAsyncIo();
      result.emplace(body(io));
    } catch (const kj::Exception& e) {
      error = userMessage(e).cStr();
    }
  }).join();
  if (!result) throw std::runtime_error("raw RPC failed: " + error);
  return kj::mv(*result);
}

void setId(wire::Id::Builder id, uint64_t session, uint64_t n) {
  id.setSession(session);
  id.setN(n);
}

// One direct call: task `n` of session `session` on actor `actor`
// (session, n), method `method` with `config`, making object `output`,
// reading the constant `constant` (0: none) holding "7".
struct RawCall {
  uint64_t session;
  uint64_t n;
  std::pair<uint64_t, uint64_t> actor;
  std::string method = "add";
  std::string config = "0";
  uint64_t output;
  uint64_t constant = 0;
  bool keep = false;

  void fill(wire::Graph::Builder graph) const {
    auto objects = graph.initObjects(constant != 0 ? 2 : 1);
    setId(objects[0].initId(), session, output);
    objects[0].setKeep(keep);
    if (constant != 0) {
      setId(objects[1].initId(), session, constant);
      objects[1].setIsConstant(true);
      objects[1].setData(kj::StringPtr("7").asBytes());
    }
    auto task = graph.initTasks(1)[0];
    setId(task.initId(), session, n);
    auto call = task.initConfig().initActorCall();
    setId(call.initActor(), actor.first, actor.second);
    call.setMethod(method);
    call.setConfig(kj::StringPtr(config).asBytes());
    setId(task.initOutputs(1)[0], session, output);
    if (constant != 0) setId(task.initInputs(1)[0].initObject(), session, constant);
  }
};

wire::DataService::Client openData(kj::AsyncIoContext& io, kj::Own<RpcClient>& connection, const std::string& address) {
  connection = connectTo(io.provider->getNetwork(), address).wait(io.waitScope);
  auto open = connection->bootstrap<wire::DataBootstrap>().openRequest();
  open.setVersion(wire::PROTOCOL_VERSION);
  open.setToken(TOKEN);
  return open.send().wait(io.waitScope).getService();
}

// What a governor answered to a direct call: why it refused it ("": it
// ran it), and the bytes of its output when the answer carried them.
struct RawAnswer {
  std::string refused;
  std::optional<std::string> output;
};

RawAnswer answerTo(const std::string& address, const RawCall& call) {
  return onItsOwnLoop([&](kj::AsyncIoContext& io) {
    kj::Own<RpcClient> connection;
    auto data = openData(io, connection, address);
    auto req = data.callActorRequest();
    call.fill(req.initCall());
    auto answer = req.send().wait(io.waitScope);
    RawAnswer raw{answer.getRefused().cStr(), std::nullopt};
    if (answer.hasResult() && answer.getResult().getOutputs().size() == 1) {
      auto output = answer.getResult().getOutputs()[0];
      if (output.getInlined()) raw.output = std::string(output.getData().asChars().begin(), output.getData().size());
    }
    return raw;
  });
}

// Sends `call` to the governor at `address`: "" when it was taken (and
// answered), else why it was refused.
std::string callDirectly(const std::string& address, const RawCall& call) {
  return answerTo(address, call).refused;
}

class Discard final : public wire::ByteSink::Server {
 protected:
  kj::Promise<void> write(WriteContext) override { return kj::READY_NOW; }
  kj::Promise<void> done(DoneContext) override { return kj::READY_NOW; }
};

// Whether the governor at `address` holds object (session, n).
bool holds(const std::string& address, uint64_t session, uint64_t n) {
  return onItsOwnLoop([&](kj::AsyncIoContext& io) {
    kj::Own<RpcClient> connection;
    auto data = openData(io, connection, address);
    auto req = data.readRequest();
    setId(req.initId(), session, n);
    req.setSink(kj::heap<Discard>());
    try {
      req.send().wait(io.waitScope);
      return true;
    } catch (const kj::Exception& e) {
      if (std::string(e.getDescription().cStr()).find("not held") == std::string::npos &&
          std::string(e.getDescription().cStr()).find("does not hold") == std::string::npos) {
        ADD_FAILURE() << "read failed otherwise: " << e.getDescription().cStr();
      }
      return false;
    }
  });
}

using Service = wire::ClientService::Client;

// Calls `ask` on a raw client of the server (registered with the token):
// "" when it succeeded, else the error.
template <typename Ask>
std::string askServer(const std::string& address, Ask&& ask) {
  return onItsOwnLoop([&](kj::AsyncIoContext& io) {
    auto connection = connectTo(io.provider->getNetwork(), address).wait(io.waitScope);
    auto reg = connection->bootstrap<wire::Bootstrap>().registerClientRequest();
    reg.setVersion(wire::PROTOCOL_VERSION);
    reg.setToken(TOKEN);
    auto service = reg.send().wait(io.waitScope).getService();
    try {
      ask(service, io);
      return std::string();
    } catch (const kj::Exception& e) {
      return std::string(userMessage(e).cStr());
    }
  });
}

// The incarnation of the server's session `s`, as a handle carries it:
// asked by the id alone, as attaching does.
uint64_t incarnationOf(Service& service, kj::AsyncIoContext& io, uint64_t s) {
  auto state = service.getStateRequest();
  state.setSession(s);
  return state.send().wait(io.waitScope).getState().getIncarnation();
}

// Whether `done()` comes true within 20 s, looked at every 20 ms: for what
// shows no event outside the cluster (an object removed on a governor, a
// governor's place freed at the server).
template <typename Done>
bool within20s(Done&& done) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A client whose waits give up after 30 s (a call nobody runs fails the
// test instead of hanging it).
ClientOptions patientClient(const std::string& server) {
  ClientOptions options;
  options.address = server;
  options.token = TOKEN;
  auto deadline = std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now() +
                                                                          std::chrono::seconds(60));
  options.whileBlocked = [deadline]() {
    if (std::chrono::steady_clock::now() > *deadline) throw Error("gave up waiting (60 s)");
  };
  return options;
}

class DirectChecksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.governors = 1;
    options.cpus = 2;
    options.token = TOKEN;
    const char* executor = getenv("SQUALL_ACTOR_EXECUTOR");
    options.governorArgs = {"--executor", std::string("stats=") + (executor != nullptr ? executor : "")};
    if (const char* level = getenv("SQUALL_TEST_LOG_LEVEL")) options.logLevel = level;
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void TearDown() override { EXPECT_TRUE(cluster->governor(0).running()); }

  static std::string governorAddress(Client& client) { return client.governors().at(0).dataAddress; }

  // An actor placed and warm, its first call answered.
  static Actor placedCounter(Session& session) {
    auto counter = session.actor("stats/Counter");
    counter.call("add", {}, "0");
    session.submit();
    session.waitAll();
    return counter;
  }

  static inline LocalCluster* cluster = nullptr;
};

// Item 5: a call may not name as its output an object the governor holds
// (another call's kept result), nor run on (and be recorded in) a session
// that is not its actor's.
TEST_F(DirectChecksTest, ACallMayNotStoreOverAHeldObjectNorUseAnotherSessionsActor) {
  Client client(patientClient(cluster->serverAddress()));
  auto a = client.newSession("a");
  auto counter = placedCounter(a);
  auto made = counter.call("add", {}, "1");
  made.output().keep();
  a.submitAndWait({made});
  ASSERT_EQ(made.output().fetch(), "1");
  auto address = governorAddress(client);
  std::pair<uint64_t, uint64_t> actor{a.id(), counter.id()};

  auto over = callDirectly(address, RawCall{a.id(), 1u << 30, actor, "add", "5", made.output().id()});
  EXPECT_NE(over.find("is held here already"), std::string::npos) << over;
  EXPECT_EQ(made.output().fetch(), "1") << "a direct call stored over a kept object";

  auto b = client.newSession("b");
  auto foreign = callDirectly(address, RawCall{b.id(), 1u << 30, actor, "add", "100", (1u << 30) + 1});
  EXPECT_NE(foreign.find("is not of the call's session"), std::string::npos) << foreign;

  // The actor's state saw neither.
  auto next = counter.call("add", {}, "0");
  next.output().keep();
  a.submitAndWait({next});
  EXPECT_EQ(next.output().fetch(), "1");
}

// Item 7: recordDirect records actor calls only; an actor call recorded as
// sent to a governor that never had it holds its place there until it is
// cancelled, then the governor says it does not know it and the place is
// freed.
TEST_F(DirectChecksTest, OnlyActorCallsAreRecordedAndACancelledUnknownCallFreesItsPlace) {
  Client client(patientClient(cluster->serverAddress()));
  auto session = client.newSession("record");
  auto counter = placedCounter(session);
  auto address = governorAddress(client);
  auto s = session.id();
  auto assigned = [&]() { return client.governors().at(0).tasksAssigned; };
  auto before = assigned();

  auto notACall = askServer(cluster->serverAddress(), [&](Service& service, kj::AsyncIoContext& io) {
    auto record = service.recordDirectRequest();
    record.setSession(s);
    record.setIncarnation(incarnationOf(service, io, s));
    record.setAddress(address);
    auto graph = record.initCalls(1)[0];
    auto objects = graph.initObjects(2);
    setId(objects[0].initId(), s, 1u << 30);
    objects[0].setIsConstant(true);
    objects[0].setData(kj::StringPtr("x").asBytes());
    setId(objects[1].initId(), s, (1u << 30) + 1);
    auto task = graph.initTasks(1)[0];
    setId(task.initId(), s, (1u << 30) + 2);
    task.initConfig().setConcat();
    setId(task.initInputs(1)[0].initObject(), s, 1u << 30);
    setId(task.initOutputs(1)[0], s, (1u << 30) + 1);
    record.send().wait(io.waitScope);
  });
  EXPECT_NE(notACall.find("is not an actor call"), std::string::npos) << notACall;
  EXPECT_EQ(assigned(), before) << "a task that is no actor call took a place on the governor";

  // A call the governor never had, recorded as running there.
  uint64_t n = (1u << 30) + 10;
  auto recorded = askServer(cluster->serverAddress(), [&](Service& service, kj::AsyncIoContext& io) {
    auto record = service.recordDirectRequest();
    record.setSession(s);
    record.setIncarnation(incarnationOf(service, io, s));
    record.setAddress(address);
    RawCall{s, n, {s, counter.id()}, "add", "1", n + 1}.fill(record.initCalls(1)[0]);
    record.send().wait(io.waitScope);
  });
  ASSERT_EQ(recorded, "");
  EXPECT_EQ(assigned(), before + 1);
  auto cancelled = askServer(cluster->serverAddress(), [&](Service& service, kj::AsyncIoContext& io) {
    auto cancel = service.cancelTaskRequest();
    cancel.setSession(s);
    cancel.setIncarnation(incarnationOf(service, io, s));
    cancel.setTask(n);
    cancel.send().wait(io.waitScope);
  });
  ASSERT_EQ(cancelled, "");
  EXPECT_TRUE(within20s([&]() { return assigned() == before; }))
      << "the cancelled call still holds a place: " << assigned() << " tasks assigned, " << before << " before";
}

// Item 9: the constants a direct call brought to its governor go with it:
// when it failed (as a submitted call's would), and when its session closed
// before its report came (nobody records it).
TEST_F(DirectChecksTest, ADirectCallsConstantsAreRemovedWithIt) {
  Client client(patientClient(cluster->serverAddress()));
  auto address = governorAddress(client);
  {
    // Its session fails, and its objects go when it closes, as a
    // submitted call's do.
    auto session = client.newSession("failing call");
    auto counter = placedCounter(session);
    auto constant = session.blob("payload");
    auto failing = counter.call("fail", {constant}, "now");
    session.submit();
    EXPECT_THROW(failing.wait(), Error);
    auto s = session.id();
    auto n = constant.id();
    EXPECT_TRUE(holds(address, s, n));
    session.close();
    EXPECT_TRUE(within20s([&]() { return !holds(address, s, n); })) << "the failed call's constant stayed";
  }
  {
    auto session = client.newSession("closed before the report");
    auto counter = placedCounter(session);
    auto s = session.id();
    // One call waits (30 s) for a file nobody makes, a second one with a
    // constant waits behind it, until the session closes: its actor goes,
    // both end cancelled, and nobody records them.
    char dir[] = "/tmp/squall-direct-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    std::string mine = std::string(dir) + "/mine";
    RawCall held{s, 1u << 30, {s, counter.id()}, "meet", mine + " " + dir + "/never", (1u << 30) + 1};
    RawCall queued{s, (1u << 30) + 2, {s, counter.id()}, "add", "1", (1u << 30) + 3, (1u << 30) + 4};
    std::string heldAnswer = "unanswered", queuedAnswer = "unanswered";
    std::thread holder([&]() { heldAnswer = callDirectly(address, held); });
    ASSERT_TRUE(within20s([&]() { return access(mine.c_str(), F_OK) == 0; })) << "the held call never started";
    std::thread waiter([&]() { queuedAnswer = callDirectly(address, queued); });
    EXPECT_TRUE(within20s([&]() { return holds(address, s, queued.constant); }));
    session.close();
    holder.join();
    waiter.join();
    EXPECT_EQ(heldAnswer, "");
    EXPECT_EQ(queuedAnswer, "");
    EXPECT_TRUE(within20s([&]() { return !holds(address, s, queued.constant); }))
        << "the constant of a call whose session closed stayed";
    unlink(mine.c_str());
    rmdir(dir);
  }
}

// A TCP proxy between this test's clients and a governor, that cuts its
// connections as a NAT or firewall that forgot them does: at once (each
// client end reset), or silently (nothing said until the client sends,
// which gets a reset and goes nowhere). Connections made after a cut are
// carried on. Runs on a thread of its own.
class CuttingProxy {
 public:
  explicit CuttingProxy(const std::string& upstream) {
    auto colon = upstream.rfind(':');
    target.sin_family = AF_INET;
    target.sin_port = htons(static_cast<uint16_t>(std::stoi(upstream.substr(colon + 1))));
    inet_pton(AF_INET, upstream.substr(0, colon).c_str(), &target.sin_addr);
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, "127.0.0.1", &local.sin_addr);
    socklen_t size = sizeof(local);
    if (bind(listener, reinterpret_cast<sockaddr*>(&local), size) != 0 || listen(listener, 16) != 0 ||
        getsockname(listener, reinterpret_cast<sockaddr*>(&local), &size) != 0 || pipe(commands) != 0 ||
        pipe(acks) != 0) {
      throw std::runtime_error("proxy setup failed");
    }
    address = "127.0.0.1:" + std::to_string(ntohs(local.sin_port));
    thread = std::thread([this]() { run(); });
  }
  ~CuttingProxy() {
    command('q');
    thread.join();
    for (int fd : {listener, commands[0], commands[1], acks[0], acks[1]}) close(fd);
  }
  std::string address;
  // Resets every connection now.
  void cutNow() { command('r'); }
  // Forgets every connection: the governor's end closed, the client's
  // reset when it next sends.
  void cutSilently() { command('s'); }
  // Connections carried so far.
  int accepted() const { return acceptedCount; }

 private:
  struct Pair {
    int client;
    int upstream;  // -1 once forgotten
  };
  sockaddr_in target{};
  int listener = -1;
  int commands[2] = {-1, -1};
  int acks[2] = {-1, -1};
  std::thread thread;
  std::atomic<int> acceptedCount{0};

  void command(char c) {
    if (write(commands[1], &c, 1) != 1) throw std::runtime_error("proxy command");
    char ack;
    if (read(acks[0], &ack, 1) != 1) throw std::runtime_error("proxy ack");
  }
  static void reset(int fd) {
    linger hard{1, 0};
    setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof(hard));
    close(fd);
  }
  static bool pump(int from, int to) {
    char buffer[65536];
    ssize_t got = read(from, buffer, sizeof(buffer));
    if (got <= 0) return false;
    for (ssize_t at = 0; at < got;) {
      ssize_t put = write(to, buffer + at, static_cast<size_t>(got - at));
      if (put <= 0) return false;
      at += put;
    }
    return true;
  }
  void run() {
    std::vector<Pair> pairs;
    for (;;) {
      std::vector<pollfd> fds = {{listener, POLLIN, 0}, {commands[0], POLLIN, 0}};
      for (auto& p : pairs) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.upstream, POLLIN, 0});  // (-1: ignored by poll)
      }
      if (poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[1].revents != 0) {
        char c;
        if (read(commands[0], &c, 1) != 1 || c == 'q') {
          for (auto& p : pairs) {
            close(p.client);
            if (p.upstream >= 0) close(p.upstream);
          }
          char ack = 'k';
          if (write(acks[1], &ack, 1) != 1) return;
          return;
        }
        for (auto& p : pairs) {
          if (p.upstream >= 0) close(p.upstream);
          p.upstream = -1;
          if (c == 'r') reset(p.client);
        }
        if (c == 'r') pairs.clear();
        char ack = 'k';
        if (write(acks[1], &ack, 1) != 1) return;
        continue;
      }
      std::vector<Pair> next;
      for (size_t i = 0; i < pairs.size(); i++) {
        auto p = pairs[i];
        auto& client = fds[2 + 2 * i];
        auto& upstream = fds[3 + 2 * i];
        bool open = true;
        if (client.revents != 0) {
          if (p.upstream < 0) {
            reset(p.client);  // a connection it forgot: nothing goes through
            continue;
          }
          open = pump(p.client, p.upstream);
        }
        if (open && p.upstream >= 0 && upstream.revents != 0) open = pump(p.upstream, p.client);
        if (!open) {
          close(p.client);
          if (p.upstream >= 0) close(p.upstream);
          continue;
        }
        next.push_back(p);
      }
      pairs = std::move(next);
      if (fds[0].revents != 0) {
        int client = accept(listener, nullptr, nullptr);
        int upstream = socket(AF_INET, SOCK_STREAM, 0);
        if (client >= 0 && connect(upstream, reinterpret_cast<sockaddr*>(&target), sizeof(target)) == 0) {
          pairs.push_back({client, upstream});
          acceptedCount++;
        } else {
          if (client >= 0) close(client);
          close(upstream);
        }
      }
    }
  }
};

// The governor's data address and a CuttingProxy in front of it, which
// the clients' data connections go through ($SQUALL_TEST_DATA_ROUTE)
// while this lives.
struct ProxiedGovernor {
  explicit ProxiedGovernor(const std::string& server) : address(addressOf(server)), proxy(address) {
    setenv("SQUALL_TEST_DATA_ROUTE", (address + "=" + proxy.address).c_str(), 1);
  }
  ~ProxiedGovernor() { unsetenv("SQUALL_TEST_DATA_ROUTE"); }
  static std::string addressOf(const std::string& server) {
    Client probe(patientClient(server));
    return probe.governors().at(0).dataAddress;
  }
  std::string address;
  CuttingProxy proxy;
};

// Item 6: the client's data connection to the governor is cut (a reset it
// sees, then one it does not until its next call): the dead connection is
// dropped and the next call goes on a new one; a call sent into a
// connection that was gone never reached the governor, which says so, and
// it is placed anew (through the server) instead of being waited for in
// vain.
TEST_F(DirectChecksTest, ACutDataConnectionIsDroppedAndACallThatNeverArrivedIsPlacedAnew) {
  signal(SIGPIPE, SIG_IGN);
  ProxiedGovernor routed(cluster->serverAddress());
  auto& proxy = routed.proxy;
  Client client(patientClient(cluster->serverAddress()));
  auto session = client.newSession("cut");
  auto counter = placedCounter(session);
  auto call = [&](const char* amount) {
    auto task = counter.call("add", {}, amount);
    task.output().keep();
    session.submitAndWait({task});
    return task.output().fetch();
  };
  EXPECT_EQ(call("1"), "1");
  ASSERT_GE(proxy.accepted(), 1) << "the direct calls did not go through the proxy";

  // Reset while the client was away: seen before the next call, which
  // goes on a new connection.
  int before = proxy.accepted();
  proxy.cutNow();
  EXPECT_EQ(call("1"), "2");
  // (One new connection, which its fetch used too: not a call placed
  // anew, its output then fetched on a connection made for that.)
  EXPECT_EQ(proxy.accepted(), before + 1);

  // Forgotten silently: the call goes into the dead connection, which
  // answers with a reset; the governor never had it: placed anew.
  proxy.cutSilently();
  EXPECT_EQ(call("1"), "3");
  // And each ran once.
  EXPECT_EQ(call("0"), "3");
}

// Item 6, the other way: a call whose connection broke after it reached
// the governor is not placed anew (it would run twice): the governor says
// it has it, and it is recorded as running there.
TEST_F(DirectChecksTest, ACallCutOffAfterItReachedTheGovernorRunsThereOnce) {
  signal(SIGPIPE, SIG_IGN);
  ProxiedGovernor routed(cluster->serverAddress());
  auto& proxy = routed.proxy;
  char dir[] = "/tmp/squall-direct-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string mine = std::string(dir) + "/mine", theirs = std::string(dir) + "/theirs";
  // The call may end once the client waits for it, which is when it sees
  // the reset and asks the governor (a wait turns the loop; the call is
  // answered only after the governor was asked).
  auto options = patientClient(cluster->serverAddress());
  bool armed = false;
  options.whileBlocked = [&armed, &theirs, patient = options.whileBlocked]() {
    patient();
    if (armed) {
      FILE* file = fopen(theirs.c_str(), "w");
      if (file != nullptr) fclose(file);
    }
  };
  Client client(options);
  auto session = client.newSession("cut after it arrived");
  auto counter = placedCounter(session);
  auto held = counter.call("meet", {}, mine + " " + theirs);
  held.output().keep();
  session.submit();
  ASSERT_TRUE(within20s([&]() { return access(mine.c_str(), F_OK) == 0; })) << "the call never started";
  unlink(mine.c_str());
  proxy.cutNow();
  armed = true;
  held.wait();
  EXPECT_EQ(held.output().fetch(), "met");
  // A call after it runs after any copy of it: there was none.
  auto after = counter.call("add", {}, "0");
  after.output().keep();
  session.submitAndWait({after});
  EXPECT_EQ(after.output().fetch(), "0");
  EXPECT_NE(access(mine.c_str(), F_OK), 0) << "the call cut off ran twice";
  unlink(theirs.c_str());
  unlink(mine.c_str());
  rmdir(dir);
}

// A direct call's kept small output comes back in its answer, as Ray's
// small returns come in the task's reply: fetching it then asks neither
// the server nor the governor (here it works with the server stopped). An
// output not kept does not come back.
TEST_F(DirectChecksTest, AKeptSmallOutputComesBackInItsDirectCallsAnswer) {
  auto stopped = std::make_shared<std::atomic<bool>>(false);
  auto options = patientClient(cluster->serverAddress());
  options.whileBlocked = [stopped, patience = options.whileBlocked]() {
    if (*stopped) throw Error("the fetch waited for an answer while the server was stopped");
    patience();
  };
  Client client(options);
  auto session = client.newSession("answered bytes");
  // (Its first call went with the actor, through the server: the client
  // asks where it runs at the next call, placed by then.)
  auto counter = placedCounter(session);
  auto call = counter.call("add", {}, "41");
  call.output().keep();
  session.submitAndWait({call});
  pid_t server = cluster->server().pid();
  ASSERT_EQ(kill(server, SIGSTOP), 0);
  *stopped = true;
  std::string value, error;
  try {
    value = call.output().fetch();
  } catch (const Error& e) {
    error = e.what();
  }
  *stopped = false;
  ASSERT_EQ(kill(server, SIGCONT), 0);
  EXPECT_EQ(error, "");
  EXPECT_EQ(value, "41");

  auto address = governorAddress(client);
  std::pair<uint64_t, uint64_t> actor{session.id(), counter.id()};
  auto kept = answerTo(address, RawCall{session.id(), 1u << 30, actor, "add", "1", (1u << 30) + 1, 0, true});
  EXPECT_EQ(kept.refused, "");
  EXPECT_EQ(kept.output.value_or("(not in the answer)"), "42");
  auto unkept = answerTo(address, RawCall{session.id(), (1u << 30) + 2, actor, "add", "1", (1u << 30) + 3});
  EXPECT_EQ(unkept.refused, "");
  EXPECT_FALSE(unkept.output.has_value()) << *unkept.output;
}

}  // namespace
}  // namespace squall
