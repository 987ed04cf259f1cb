// The server's protocol seen by a client that does not use the client
// library: malformed graphs, wrong versions and tokens, unknown sessions.
#include <cstdio>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <squall/tools/local-cluster.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>

namespace squall {
namespace {

class RawRpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.governors = 1;
    options.cpus = 1;
    options.token = "sesame";
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }

  // Registers and returns the error text ("" when accepted).
  std::string registerWith(uint32_t version, const char* token) {
    auto req = bootstrap().registerClientRequest();
    req.setVersion(version);
    req.setToken(token);
    try {
      service = req.send().wait(io.waitScope).getService();
      return "";
    } catch (const kj::Exception& e) {
      // The server closes a connection it refused: the next try makes a
      // new one.
      connection = nullptr;
      return userMessage(e).cStr();
    }
  }

  wire::Bootstrap::Client bootstrap() {
    if (!connection) {
      connection = connectTo(io.provider->getNetwork(), cluster->serverAddress()).wait(io.waitScope);
    }
    return connection->bootstrap<wire::Bootstrap>();
  }

  // Submits the graph `fill` writes; returns the error text.
  template <typename Fill>
  std::string submitGraph(uint64_t session, Fill&& fill) {
    auto req = service.submitRequest();
    req.setSession(session);
    req.setIncarnation(incarnation);
    auto submission = req.send().getSubmission();
    auto add = submission.addRequest();
    fill(add);
    try {
      add.send().wait(io.waitScope);
      submission.commitRequest().send().wait(io.waitScope);
      return "";
    } catch (const kj::Exception& e) {
      return userMessage(e).cStr();
    }
  }

  // The same in one ClientService.submitGraph call.
  template <typename Fill>
  std::string submitInOneCall(uint64_t session, Fill&& fill) {
    auto req = service.submitGraphRequest();
    req.setSession(session);
    req.setIncarnation(incarnation);
    fill(req);
    try {
      req.send().wait(io.waitScope);
      return "";
    } catch (const kj::Exception& e) {
      return userMessage(e).cStr();
    }
  }

  // Also sets `incarnation`, which every later call naming it carries.
  uint64_t newSession() {
    auto response = service.newSessionRequest().send().wait(io.waitScope);
    incarnation = response.getIncarnation();
    return response.getSession();
  }
  uint64_t incarnation = 0;

  // KJ objects' destructors may throw; gtest's fixture's must not, so they
  // live behind a pointer (members are destroyed in reverse order).
  struct Rig {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    kj::Own<RpcClient> connection;
    wire::ClientService::Client service = nullptr;
  };
  std::unique_ptr<Rig> rig = std::make_unique<Rig>();
  kj::AsyncIoContext& io = rig->io;
  kj::Own<RpcClient>& connection = rig->connection;
  wire::ClientService::Client& service = rig->service;

  static LocalCluster* cluster;
};
LocalCluster* RawRpcTest::cluster = nullptr;

void setId(wire::Id::Builder id, uint64_t session, uint64_t n) {
  id.setSession(session);
  id.setN(n);
}

// Object 1, a constant holding `text`; task 10 concatenates it into object
// 2, kept.
// (`add`: a Submission.add or a ClientService.submitGraph request.)
template <typename Graph>
void concatOfOneConstant(Graph& add, uint64_t s, kj::StringPtr text) {
  auto objects = add.initObjects(2);
  setId(objects[0].initId(), s, 1);
  objects[0].setIsConstant(true);
  objects[0].setData(text.asBytes());
  setId(objects[1].initId(), s, 2);
  objects[1].setKeep(true);
  auto tasks = add.initTasks(1);
  setId(tasks[0].initId(), s, 10);
  tasks[0].initConfig().setConcat();
  setId(tasks[0].initInputs(1)[0].initObject(), s, 1);
  setId(tasks[0].initOutputs(1)[0], s, 2);
}

// Tasks 10 and 11, each concatenating the other's output.
template <typename Graph>
void cycleOfTwoConcats(Graph& add, uint64_t s) {
  auto objects = add.initObjects(2);
  setId(objects[0].initId(), s, 1);
  setId(objects[1].initId(), s, 2);
  auto tasks = add.initTasks(2);
  for (int i = 0; i < 2; i++) {
    setId(tasks[i].initId(), s, 10 + i);
    tasks[i].initConfig().setConcat();
    setId(tasks[i].initInputs(1)[0].initObject(), s, 1 + i);
    setId(tasks[i].initOutputs(1)[0], s, 2 - i);
  }
}

TEST_F(RawRpcTest, WrongVersionAndTokenAreRefusedClearly) {
  EXPECT_NE(registerWith(999, "sesame").find("protocol version mismatch"), std::string::npos);
  EXPECT_NE(registerWith(wire::PROTOCOL_VERSION, "guess").find("authentication failed"),
            std::string::npos);
  EXPECT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
}

TEST_F(RawRpcTest, MalformedGraphsAreRejectedAndTheSessionStaysUsable) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  // A cycle through two concats.
  auto error = submitGraph(s, [&](auto& add) { cycleOfTwoConcats(add, s); });
  EXPECT_NE(error.find("cycle"), std::string::npos) << error;
  // An execute with no program and a stdin index out of range.
  error = submitGraph(s, [&](auto& add) {
    auto objects = add.initObjects(1);
    setId(objects[0].initId(), s, 1);
    auto tasks = add.initTasks(1);
    setId(tasks[0].initId(), s, 10);
    setId(tasks[0].initOutputs(1)[0], s, 1);
    tasks[0].initConfig().initExecute().setStdinInput(3);
  });
  EXPECT_NE(error.find("needs a program"), std::string::npos) << error;
  // After all that, a valid graph with the same ids goes through.
  error = submitGraph(s, [&](auto& add) {
    concatOfOneConstant(add, s, "abc");
  });
  EXPECT_EQ(error, "");
  auto wait = service.waitRequest();
  wait.setSession(s);
  wait.setIncarnation(incarnation);
  EXPECT_TRUE(wait.send().wait(io.waitScope).getResult().isOk());
}

// submitGraph (one call for a graph that fits one message, what the client
// library sends for a small submit) checks as submit/add/commit do, and
// counts as an open submit while it is written.
TEST_F(RawRpcTest, AOneCallSubmitIsCheckedAsTheLongWay) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  auto cycle = [&](auto& add) { cycleOfTwoConcats(add, s); };
  auto oneCall = submitInOneCall(s, cycle);
  EXPECT_NE(oneCall.find("cycle"), std::string::npos) << oneCall;
  EXPECT_EQ(oneCall, submitGraph(s, cycle));
  auto unknownKind = [&](auto& add) {
    auto objects = add.initObjects(1);
    setId(objects[0].initId(), s, 1);
    objects[0].setIsConstant(true);
    objects[0].setKind(static_cast<wire::ObjectKind>(7));
  };
  oneCall = submitInOneCall(s, unknownKind);
  EXPECT_NE(oneCall.find("object 1 has an unknown kind (7)"), std::string::npos) << oneCall;
  EXPECT_EQ(oneCall, submitGraph(s, unknownKind));
  oneCall = submitInOneCall(s + 1000, [&](auto& add) { concatOfOneConstant(add, s + 1000, "abc"); });
  EXPECT_NE(oneCall.find(std::to_string(s + 1000)), std::string::npos) << oneCall;
  // With the client's 16 submits open, a one-call submit is refused too.
  std::vector<wire::Submission::Client> held;
  for (int i = 0; i < 16; i++) {
    auto req = service.submitRequest();
    req.setSession(s);
    req.setIncarnation(incarnation);
    held.push_back(req.send().wait(io.waitScope).getSubmission());
  }
  oneCall = submitInOneCall(s, [&](auto& add) { concatOfOneConstant(add, s, "abc"); });
  EXPECT_NE(oneCall.find("(limit client-submits=16)"), std::string::npos) << oneCall;
  held.clear();
  // Refused ones applied nothing: the graph goes through, and runs.
  auto ok = [&](auto& add) { concatOfOneConstant(add, s, "abc"); };
  auto req = service.submitGraphRequest();
  req.setSession(s);
  req.setIncarnation(incarnation);
  ok(req);
  auto counts = req.send().wait(io.waitScope);
  EXPECT_EQ(counts.getTasks(), 1u);
  EXPECT_EQ(counts.getObjects(), 2u);
  auto wait = service.waitRequest();
  wait.setSession(s);
  wait.setIncarnation(incarnation);
  EXPECT_TRUE(wait.send().wait(io.waitScope).getResult().isOk());
  // Its ids are taken now, as after the long way.
  EXPECT_NE(submitInOneCall(s, ok), "");
}

// submitGraph with waitFor answers once what it names has finished, with
// `waited` set; a waitFor naming an id of neither the graph nor the
// session, or more ids than a wait may, refuses the submit (nothing
// applied).
// An actor call on actor 5 of session `s`: task 10 making object 2,
// reading `input` (0: none).
void actorCall(wire::Graph::Builder graph, uint64_t s, uint64_t input = 0) {
  auto objects = graph.initObjects(input != 0 ? 2 : 1);
  setId(objects[0].initId(), s, 2);
  if (input != 0) {
    setId(objects[1].initId(), s, input);
    objects[1].setIsConstant(true);
    objects[1].setData(kj::StringPtr("7").asBytes());
  }
  auto task = graph.initTasks(1)[0];
  setId(task.initId(), s, 10);
  auto call = task.initConfig().initActorCall();
  setId(call.initActor(), s, 5);
  call.setMethod("add");
  setId(task.initOutputs(1)[0], s, 2);
  if (input != 0) setId(task.initInputs(1)[0].initObject(), s, input);
}

// Direct actor calls (docs/actors.md, "Calls that skip the server"): a
// governor refuses, without running it, a call that is not one actor call
// with its outputs and constants, or whose actor it does not host; the
// server refuses to record an invalid one and to locate a task that is no
// actor, naming why.
TEST_F(RawRpcTest, DirectCallsAGovernorCannotTakeAreRefusedByName) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  auto governors = service.listGovernorsRequest().send().wait(io.waitScope);
  ASSERT_EQ(governors.getGovernors().size(), 1u);
  auto address = kj::str(governors.getGovernors()[0].getDataAddress());
  auto governor = connectTo(io.provider->getNetwork(), address).wait(io.waitScope);
  auto open = governor->bootstrap<wire::DataBootstrap>().openRequest();
  open.setVersion(wire::PROTOCOL_VERSION);
  open.setToken("sesame");
  auto data = open.send().wait(io.waitScope).getService();
  auto refusal = [&](auto fill) {
    auto req = data.callActorRequest();
    fill(req.initCall());
    auto answer = req.send().wait(io.waitScope);
    EXPECT_FALSE(answer.hasResult());
    return kj::str(answer.getRefused());
  };
  auto two = refusal([&](wire::Graph::Builder g) { g.initTasks(2); });
  EXPECT_TRUE(two.startsWith("a direct call carries one task, not 2")) << two.cStr();
  auto concat = refusal([&](wire::Graph::Builder g) {
    concatOfOneConstant(g, s, "x");
  });
  EXPECT_TRUE(concat.endsWith("is not an actor call")) << concat.cStr();
  auto notConstant = refusal([&](wire::Graph::Builder g) {
    actorCall(g, s, 3);
    g.getObjects()[1].setIsConstant(false);
  });
  EXPECT_TRUE(notConstant.endsWith("must be a constant sent with it")) << notConstant.cStr();
  auto unused = refusal([&](wire::Graph::Builder g) {
    actorCall(g, s, 3);
    g.getTasks()[0].initInputs(0);
  });
  EXPECT_EQ(unused, "a direct call carries objects it does not use");
  auto absent = refusal([&](wire::Graph::Builder g) { actorCall(g, s, 3); });
  EXPECT_TRUE(absent.startsWith(kj::str("actor ", s, "/5 is not on governor"))) << absent.cStr();

  // The server: no such actor to record a call on, or to locate.
  auto record = service.recordDirectRequest();
  record.setSession(s);
  record.setIncarnation(incarnation);
  record.setAddress(address);
  actorCall(record.initCalls(1)[0], s, 3);
  std::string error;
  try {
    record.send().wait(io.waitScope);
  } catch (const kj::Exception& e) {
    error = userMessage(e).cStr();
  }
  EXPECT_NE(error.find("calls unknown actor 5"), std::string::npos) << error;
  ASSERT_EQ(submitInOneCall(s, [&](auto& add) { concatOfOneConstant(add, s, "abc"); }), "");
  auto locate = service.locateActorRequest();
  locate.setSession(s);
  locate.setIncarnation(incarnation);
  locate.setActor(10);
  error.clear();
  try {
    locate.send().wait(io.waitScope);
  } catch (const kj::Exception& e) {
    error = userMessage(e).cStr();
  }
  EXPECT_NE(error.find("task 10 of session " + std::to_string(s) + " is not an actor"), std::string::npos) << error;
}

TEST_F(RawRpcTest, AOneCallSubmitThatWaitsAnswersOnceItsTasksFinished) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  auto ok = [&](auto& add) { concatOfOneConstant(add, s, "abc"); };
  auto refused = submitInOneCall(s, [&](auto& add) {
    ok(add);
    auto ids = add.initWaitFor(2);
    ids.set(0, 10);
    ids.set(1, 99);
  });
  EXPECT_NE(refused.find("wait: unknown task or object 99"), std::string::npos) << refused;
  refused = submitInOneCall(s, [&](auto& add) {
    ok(add);
    add.initWaitFor(1000001);  // the default wait-ids limit is 1,000,000
  });
  EXPECT_NE(refused.find("ids, more than"), std::string::npos) << refused;
  auto req = service.submitGraphRequest();
  req.setSession(s);
  req.setIncarnation(incarnation);
  ok(req);
  auto ids = req.initWaitFor(2);
  ids.set(0, 10);  // the task
  ids.set(1, 2);   // its output
  auto answer = req.send().wait(io.waitScope);
  EXPECT_EQ(answer.getTasks(), 1u);
  ASSERT_TRUE(answer.hasWaited());
  EXPECT_TRUE(answer.getWaited().isOk());
  auto state = service.getTasksRequest();
  state.setSession(s);
  state.setIncarnation(incarnation);
  state.initIds(1).set(0, 10);
  auto response = state.send().wait(io.waitScope);
  auto tasks = response.getTasks();
  ASSERT_EQ(tasks.size(), 1u);
  EXPECT_EQ(tasks[0].getState(), wire::TaskInfo::State::FINISHED);
  // Without waitFor: answered at once, without `waited`.
  auto plain = service.submitGraphRequest();
  plain.setSession(s);
  plain.setIncarnation(incarnation);
  auto objects = plain.initObjects(1);
  setId(objects[0].initId(), s, 20);
  objects[0].setIsConstant(true);
  objects[0].setData(kj::StringPtr("x").asBytes());
  EXPECT_FALSE(plain.send().wait(io.waitScope).hasWaited());
}

// Once applied, a one-call submit that waits is a wait: a client that goes
// takes it with it, and its session closes (were the call held to its end,
// it would hold the client's service, and the session, for the minute its
// task sleeps).
TEST_F(RawRpcTest, AOneCallSubmitThatWaitsEndsWithItsClient) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  auto req = service.submitGraphRequest();
  req.setSession(s);
  req.setIncarnation(incarnation);
  auto task = req.initTasks(1)[0];
  setId(task.initId(), s, 10);
  task.initConfig().initSleep().setMilliseconds(60000);
  req.initWaitFor(1).set(0, 10);
  auto pending = req.send();
  // (Unknown until the submit is applied.)
  auto running = [&]() {
    auto state = service.getTasksRequest();
    state.setSession(s);
    state.setIncarnation(incarnation);
    state.initIds(1).set(0, 10);
    try {
      auto response = state.send().wait(io.waitScope);
      auto tasks = response.getTasks();
      return tasks.size() == 1 && tasks[0].getState() == wire::TaskInfo::State::RUNNING;
    } catch (const kj::Exception& e) {
      EXPECT_NE(std::string(userMessage(e).cStr()).find("unknown task 10"), std::string::npos)
          << userMessage(e).cStr();
      return false;
    }
  };
  bool started = false;
  for (int i = 0; i < 1000 && !started; i++) {
    started = running();
    if (!started) io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  }
  ASSERT_TRUE(started) << "the sleeping task never ran";
  EXPECT_FALSE(pending.poll(io.waitScope)) << "answered before its task finished";
  // The client goes: its call, its service and its connection.
  { auto dropped = kj::mv(pending); }
  service = nullptr;
  connection = nullptr;
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  bool closed = false;
  for (int i = 0; i < 1000 && !closed; i++) {
    auto state = service.getStateRequest();
    state.setSession(s);
    state.setIncarnation(incarnation);
    closed = state.send().wait(io.waitScope).getState().getClosed();
    if (!closed) io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  }
  EXPECT_TRUE(closed) << "the session outlived its client while its combined wait ran";
}

// add and appendData are streaming calls: a client sends them and the
// commit without waiting for their answers. A refused part refuses the
// commit with its message; nothing of the submit is applied.
TEST_F(RawRpcTest, ASubmitWithARefusedPartIsNotCommitted) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  auto req = service.submitRequest();
  req.setSession(s);
  req.setIncarnation(incarnation);
  auto submission = req.send().getSubmission();
  auto add = submission.addRequest();
  concatOfOneConstant(add, s, "abc");
  auto added = add.send();
  auto append = submission.appendDataRequest();
  append.setObject(99);  // declared by no add
  append.setData(kj::StringPtr("xyz").asBytes());
  auto appended = append.send();
  auto commit = submission.commitRequest().send();
  std::string error;
  try {
    commit.wait(io.waitScope);
  } catch (const kj::Exception& e) {
    error = userMessage(e).cStr();
  }
  EXPECT_NE(error.find("appendData: object 99"), std::string::npos) << error;
  // Task 10 was not applied: the same graph goes through afterwards.
  EXPECT_EQ(submitGraph(s, [&](auto& next) { concatOfOneConstant(next, s, "abc"); }), "");
}

// Issue 19 point 8: an object of a kind this server does not know was
// accepted (and reached the governors).
TEST_F(RawRpcTest, AnObjectOfUnknownKindIsRefused) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  auto error = submitGraph(s, [&](auto& add) {
    auto objects = add.initObjects(1);
    setId(objects[0].initId(), s, 1);
    objects[0].setIsConstant(true);
    objects[0].setKind(static_cast<wire::ObjectKind>(7));
  });
  EXPECT_NE(error.find("object 1 has an unknown kind (7)"), std::string::npos) << error;
}

// Issue 19 point 6: a client could hold any number of submits open, each
// with its own 4 GiB. Now client-submits of them (16 by default); one
// committed or dropped makes room for the next.
TEST_F(RawRpcTest, AClientHoldsABoundedNumberOfSubmitsOpen) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  auto open = [&]() {
    auto req = service.submitRequest();
    req.setSession(s);
    req.setIncarnation(incarnation);
    return req.send().wait(io.waitScope).getSubmission();
  };
  std::vector<wire::Submission::Client> held;
  for (int i = 0; i < 16; i++) held.push_back(open());
  try {
    open();
    ADD_FAILURE() << "a 17th open submit accepted";
  } catch (const kj::Exception& e) {
    EXPECT_NE(std::string(userMessage(e).cStr()).find("(limit client-submits=16)"), std::string::npos)
        << userMessage(e).cStr();
  }
  held[0].commitRequest().send().wait(io.waitScope);  // an empty submit
  held.erase(held.begin(), held.begin() + 2);  // and one dropped
  held.push_back(open());                     // 15 open
  EXPECT_EQ(submitGraph(s, [&](auto&) {}), "");  // the 16th
}

// Submits are checked, written to the session log off the loop thread, and
// checked again as they are applied. Two submits of one session racing for
// the same ids: the first is applied, the second refused, and only the
// first comes back after a restart (what was written of the second is
// taken back).
TEST_F(RawRpcTest, OfTwoSubmitsRacingForTheSameIdsOnlyTheAppliedOneIsReplayed) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  options.token = "sesame";
  LocalCluster own(options);
  own.start();
  connection = connectTo(io.provider->getNetwork(), own.serverAddress()).wait(io.waitScope);
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto newSession = service.newSessionRequest();
  newSession.setName("race");
  newSession.setPersistent(true);
  auto opened = newSession.send().wait(io.waitScope);
  auto s = opened.getSession();
  incarnation = opened.getIncarnation();
  auto filled = [&](const char* text) {
    auto req = service.submitRequest();
    req.setSession(s);
    req.setIncarnation(incarnation);
    auto submission = req.send().getSubmission();
    auto add = submission.addRequest();
    concatOfOneConstant(add, s, text);
    add.send().wait(io.waitScope);
    return submission;
  };
  auto first = filled("first");
  auto second = filled("second");
  auto firstCommit = first.commitRequest().send();
  auto secondCommit = second.commitRequest().send();
  firstCommit.wait(io.waitScope);
  try {
    secondCommit.wait(io.waitScope);
    ADD_FAILURE() << "two submits with the same ids both applied";
  } catch (const kj::Exception& e) {
    EXPECT_NE(std::string(userMessage(e).cStr()).find("is already used in this session"), std::string::npos)
        << userMessage(e).cStr();
  }
  auto wait = service.waitRequest();
  wait.setSession(s);
  wait.setIncarnation(incarnation);
  ASSERT_TRUE(wait.send().wait(io.waitScope).getResult().isOk());

  own.restartServer();
  connection = connectTo(io.provider->getNetwork(), own.serverAddress()).wait(io.waitScope);
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto getState = service.getStateRequest();
  getState.setSession(s);
  getState.setIncarnation(incarnation);
  auto response = getState.send().wait(io.waitScope);  // holds what state points into
  auto state = response.getState();
  EXPECT_EQ(state.getTasksWaiting() + state.getTasksReady() + state.getTasksRunning() +
                state.getTasksFinished() + state.getTasksFailed() + state.getTasksSkipped(),
            1u);
  auto fetch = service.fetchRequest();
  fetch.setSession(s);
  fetch.setIncarnation(incarnation);
  fetch.setObject(2);
  // Made from "first" (5 bytes), not "second" (6).
  EXPECT_EQ(fetch.send().wait(io.waitScope).getLocation().getSize(), 5u);
}

// A kept output of at most CACHED_OUTPUT_BYTES (1 KiB) comes with its
// task's result and the server answers its fetch with the bytes (no read
// from the governor: a client waiting for one small result saves a round
// trip); a bigger one is fetched from the governor that holds it.
TEST_F(RawRpcTest, ASmallKeptOutputIsFetchedFromTheServerABigOneFromItsGovernor) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  for (size_t size : {size_t(3), size_t(1024), size_t(1025)}) {
    auto s = newSession();
    std::string text(size, 'x');
    ASSERT_EQ(submitGraph(s, [&](auto& add) { concatOfOneConstant(add, s, text); }), "");
    auto fetch = service.fetchRequest();
    fetch.setSession(s);
    fetch.setIncarnation(incarnation);
    fetch.setObject(2);
    auto response = fetch.send().wait(io.waitScope);
    auto location = response.getLocation();
    EXPECT_EQ(location.getSize(), size);
    if (size <= 1024) {
      ASSERT_TRUE(location.isData()) << size << " bytes were not answered by the server";
      EXPECT_EQ(std::string(location.getData().asChars().begin(), location.getData().size()), text);
    } else {
      ASSERT_TRUE(location.isGovernor()) << size << " bytes were answered by the server";
      EXPECT_NE(std::string(location.getGovernor().cStr()), "");
    }
  }
}

TEST_F(RawRpcTest, UnknownSessionsAndObjectsAreNamed) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto req = service.getStateRequest();
  req.setSession(424242);
  try {
    req.send().wait(io.waitScope);
    FAIL();
  } catch (const kj::Exception& e) {
    EXPECT_NE(std::string(userMessage(e).cStr()).find("unknown session 424242"), std::string::npos);
  }
  auto s = newSession();
  auto wait = service.waitRequest();
  wait.setSession(s);
  wait.setIncarnation(incarnation);
  wait.initIds(1).set(0, 77);
  try {
    wait.send().wait(io.waitScope);
    FAIL();
  } catch (const kj::Exception& e) {
    EXPECT_NE(std::string(userMessage(e).cStr()).find("unknown task or object 77"),
              std::string::npos);
  }
}

std::string hex16(uint64_t value) {
  char text[17];
  snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// A session reference carries the incarnation its id came from: one of
// another incarnation (a server started on another log gave the id out
// again) is refused, naming both, and nothing is done to the session of
// that id here; 0 is taken by getState alone (attaching by a typed id).
TEST_F(RawRpcTest, ASessionReferenceOfAnotherIncarnationIsRefusedNamingBoth) {
  ASSERT_EQ(registerWith(wire::PROTOCOL_VERSION, "sesame"), "");
  auto s = newSession();
  ASSERT_NE(incarnation, 0u);
  auto byId = service.getStateRequest();
  byId.setSession(s);
  EXPECT_EQ(byId.send().wait(io.waitScope).getState().getIncarnation(), incarnation);
  for (uint64_t stale : {incarnation + 1, uint64_t(0)}) {
    SCOPED_TRACE(stale);
    auto refused = [&](auto&& request, const char* what) {
      request.setSession(s);
      request.setIncarnation(stale);
      try {
        request.send().wait(io.waitScope);
        ADD_FAILURE() << what << " of another incarnation was accepted";
      } catch (const kj::Exception& e) {
        std::string message = userMessage(e).cStr();
        EXPECT_EQ(e.getType(), kj::Exception::Type::FAILED) << what;
        EXPECT_NE(message.find("session " + std::to_string(s) + " is gone"), std::string::npos) << message;
        EXPECT_NE(message.find(hex16(incarnation)), std::string::npos) << message;
        if (stale != 0) {
          EXPECT_NE(message.find(hex16(stale)), std::string::npos) << message;
        }
      }
    };
    refused(service.adoptSessionRequest(), "adoptSession");
    refused(service.closeSessionRequest(), "closeSession");
    refused(service.cancelRequest(), "cancel");
    refused(service.waitRequest(), "wait");
    auto submit = service.submitGraphRequest();
    concatOfOneConstant(submit, s, "stale");
    refused(kj::mv(submit), "submitGraph");
    if (stale != 0) refused(service.getStateRequest(), "getState");
  }
  // Untouched: open, nothing submitted.
  auto state = service.getStateRequest();
  state.setSession(s);
  state.setIncarnation(incarnation);
  auto response = state.send().wait(io.waitScope);
  EXPECT_EQ(response.getState().getState(), wire::SessionState::State::OPEN);
  EXPECT_EQ(response.getState().getTasksReady() + response.getState().getTasksWaiting() +
                response.getState().getTasksFinished() + response.getState().getTasksRunning(),
            0u);
}

}  // namespace
}  // namespace squall
