#include "status-server.h"

#include "status-test-fixture.h"

#include <kj/async-io.h>
#include <kj/compat/http.h>

namespace squall {
namespace {

using testing::TestGraph;

struct Reply {
  unsigned status;
  std::string body;
  std::string contentType;
};

// A real server on 127.0.0.1 (any port) and a kj-http client, one loop.
// Everything with KJ destructors (which may throw), held by pointer since
// gtest's destructors must not.
struct Loop {
  Loop(StatusView& view, spdlog::logger& logger)
      : server(kj::heap<StatusServer>(view, io.provider->getTimer(), logger, options)),
        serving(server->listen(*receiver).eagerlyEvaluate(nullptr)) {}
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::HttpHeaderTable::Builder builder;
  kj::HttpHeaderId contentType = builder.add("Content-Type");
  kj::Own<kj::HttpHeaderTable> table = builder.build();
  kj::Own<kj::ConnectionReceiver> receiver =
      io.provider->getNetwork().parseAddress("127.0.0.1", 0).wait(io.waitScope)->listen();
  StatusServerOptions options = []() {
    StatusServerOptions o;
    o.tick = 20 * kj::MILLISECONDS;
    o.keepalive = 40 * kj::MILLISECONDS;
    return o;
  }();
  kj::Own<StatusServer> server;
  kj::Promise<void> serving;
};

// A real server on 127.0.0.1 (any port) and a kj-http client, one loop.
class StatusServerTest : public testing::StatusFixture {
 protected:
  std::unique_ptr<Loop> loop = std::make_unique<Loop>(view, *logger);
  kj::AsyncIoContext& io = loop->io;
  kj::Own<kj::HttpHeaderTable>& table = loop->table;
  kj::HttpHeaderId contentType = loop->contentType;
  kj::Own<kj::ConnectionReceiver>& receiver = loop->receiver;
  kj::Own<StatusServer>& server = loop->server;
  kj::Promise<void>& serving = loop->serving;

  kj::Own<kj::AsyncIoStream> connect() {
    return io.provider->getNetwork()
        .parseAddress("127.0.0.1", receiver->getPort())
        .wait(io.waitScope)
        ->connect()
        .wait(io.waitScope);
  }

  Reply request(kj::StringPtr path, kj::HttpMethod method = kj::HttpMethod::GET,
                kj::StringPtr host = "127.0.0.1") {
    auto connection = connect();
    auto client = kj::newHttpClient(*table, *connection);
    kj::HttpHeaders headers(*table);
    headers.set(kj::HttpHeaderId::HOST, host);
    auto req = client->request(method, path, headers, uint64_t(0));
    auto response = req.response.wait(io.waitScope);
    auto body = response.body->readAllText().wait(io.waitScope);
    Reply reply{response.statusCode, body.cStr(), ""};
    KJ_IF_MAYBE(type, response.headers->get(contentType)) { reply.contentType = type->cStr(); }
    return reply;
  }

  // Sends `request` as it is (no client adds headers) and returns the
  // response's status line.
  std::string rawStatusLine(kj::StringPtr request) {
    auto connection = connect();
    connection->write(request.begin(), request.size()).wait(io.waitScope);
    std::string seen;
    char buffer[512];
    while (seen.find("\r\n") == std::string::npos) {
      size_t n = connection->tryRead(buffer, 1, sizeof(buffer)).wait(io.waitScope);
      if (n == 0) break;
      seen.append(buffer, n);
    }
    return seen.substr(0, seen.find("\r\n"));
  }

  Json json(kj::StringPtr path) {
    auto reply = request(path);
    EXPECT_EQ(reply.status, 200u) << path.cStr() << ": " << reply.body;
    EXPECT_EQ(reply.contentType, "application/json");
    return Json::parse(reply.body);
  }

  // Reads from an event stream until `text` has arrived (bounded).
  std::string readUntil(kj::AsyncInputStream& body, std::string& seen, const std::string& text) {
    auto deadline = io.provider->getTimer().afterDelay(5 * kj::SECONDS);
    auto fork = deadline.fork();
    char buffer[4096];
    while (seen.find(text) == std::string::npos) {
      auto read = body.tryRead(buffer, 1, sizeof(buffer))
                      .exclusiveJoin(fork.addBranch().then([]() -> size_t {
                        KJ_FAIL_ASSERT("timed out waiting for an event");
                      }))
                      .wait(io.waitScope);
      if (read == 0) break;
      seen.append(buffer, read);
    }
    return seen;
  }
};

TEST_F(StatusServerTest, ServesThePageAndItsAssets) {
  auto page = request("/");
  EXPECT_EQ(page.status, 200u);
  EXPECT_EQ(page.contentType, "text/html; charset=utf-8");
  EXPECT_NE(page.body.find("/assets/app.js"), std::string::npos);
  EXPECT_EQ(request("/sessions/4/tasks/2").body, page.body);
  auto script = request("/assets/app.js");
  EXPECT_EQ(script.status, 200u);
  EXPECT_EQ(script.contentType, "text/javascript; charset=utf-8");
  EXPECT_GT(script.body.size(), 10000u);  // the bundle, dagre inside
  EXPECT_EQ(request("/assets/app.css").status, 200u);
  EXPECT_EQ(request("/assets/nope.js").status, 404u);
}

TEST_F(StatusServerTest, BadRequestsGet400And404NotACrash) {
  auto bad = request("/api/sessions/abc");
  EXPECT_EQ(bad.status, 400u);
  EXPECT_NE(Json::parse(bad.body)["error"].get<std::string>().find("abc"), std::string::npos);
  EXPECT_EQ(request("/api/sessions/7").status, 404u);
  EXPECT_EQ(request("/api/sessions/7/tasks").status, 404u);
  EXPECT_EQ(request("/api/sessions/7/tasks/1").status, 404u);
  EXPECT_EQ(request("/api/sessions/7/graph").status, 404u);
  EXPECT_EQ(request("/api/events?session=7").status, 404u);
  EXPECT_EQ(request("/nowhere").status, 404u);
  EXPECT_EQ(request("/api/sessions/1/tasks?limit=100000").status, 400u);
  EXPECT_EQ(request("/%zz").status, 400u);
  // Still serving.
  EXPECT_EQ(request("/api/overview").status, 200u);
}

TEST_F(StatusServerTest, ReadOnlyAndLoopbackNamesOnly) {
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::POST).status, 405u);
  EXPECT_EQ(request("/api/sessions/1", kj::HttpMethod::DELETE).status, 405u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "evil.example:7222").status, 403u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "localhost:7222").status, 200u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "[::1]:7222").status, 200u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "127.0.0.1").status, 200u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "127.3.4.5:80").status, 200u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "LocalHost").status, 200u);
  // Names that merely start like a loopback address are anyone's (DNS
  // rebinding), and so is a request that names no host.
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "127.evil.example").status, 403u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "127.0.0.1.evil.example:7222").status, 403u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "[::2]:7222").status, 403u);
  EXPECT_EQ(request("/api/overview", kj::HttpMethod::GET, "localhost.evil.example").status, 403u);
  EXPECT_EQ(rawStatusLine("GET /api/overview HTTP/1.1\r\n\r\n"), "HTTP/1.1 400 Bad Request");
  EXPECT_EQ(request("/", kj::HttpMethod::HEAD).status, 200u);
}

TEST_F(StatusServerTest, JsonApiAndMetrics) {
  auto& g = governor("gov-1", 2);
  TestGraph graph(1);
  graph.output(2).output(3).task({10, {}, {2}, {"echo", "hi"}}).task({11, {2}, {3}, {"cat"}});
  auto& s = submit(graph, "demo");
  run(s, 10, g);
  auto overview = json("/api/overview");
  EXPECT_EQ(overview["governors"][0]["name"], "gov-1");
  EXPECT_EQ(overview["sessions"][0]["name"], "demo");
  EXPECT_EQ(json("/api/governors").size(), 1u);
  EXPECT_EQ(json("/api/sessions").size(), 1u);
  auto id = std::to_string(s.id);
  EXPECT_EQ(json(("/api/sessions/" + id).c_str())["counts"]["running"], 1);
  EXPECT_EQ(json(("/api/sessions/" + id + "/tasks?state=running").c_str())["total"], 1);
  EXPECT_EQ(json(("/api/sessions/" + id + "/tasks/10").c_str())["config"]["args"][0], "echo");
  EXPECT_EQ(json(("/api/sessions/" + id + "/graph").c_str())["mode"], "tasks");
  EXPECT_EQ(json(("/api/sessions/" + id + "/timeline").c_str())["lanes"].size(), 1u);
  auto metrics = request("/metrics");
  EXPECT_EQ(metrics.status, 200u);
  EXPECT_EQ(metrics.contentType, "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(metrics.body.find("squall_tasks{state=\"running\"} 1"), std::string::npos);
}

TEST_F(StatusServerTest, EventsPushChangesAndForgetPagesThatLeave) {
  auto& g = governor("gov-1", 2);
  TestGraph graph(1);
  graph.output(2).task({10, {}, {2}, {"x"}});
  auto& s = submit(graph, "live");
  auto connection = connect();
  auto client = kj::newHttpClient(*table, *connection);
  kj::HttpHeaders headers(*table);
  headers.set(kj::HttpHeaderId::HOST, "127.0.0.1");
  auto path = kj::str("/api/events?session=", s.id);
  auto req = client->request(kj::HttpMethod::GET, path, headers, uint64_t(0));
  auto response = req.response.wait(io.waitScope);
  EXPECT_EQ(response.statusCode, 200u);
  std::string seen;
  readUntil(*response.body, seen, "\"ready\":1");
  EXPECT_EQ(server->eventClients(), 1u);
  run(s, 10, g);
  report(s, 10, true, g);
  readUntil(*response.body, seen, "\"finished\":1");
  // Nothing changes: keepalive comments only.
  readUntil(*response.body, seen, ": keepalive");

  // The page goes away: its stream is dropped within a few ticks.
  response.body = nullptr;
  client = nullptr;
  connection = nullptr;
  auto deadline = io.provider->getTimer().now() + 5 * kj::SECONDS;
  while (server->eventClients() > 0 && io.provider->getTimer().now() < deadline) {
    io.provider->getTimer().afterDelay(10 * kj::MILLISECONDS).wait(io.waitScope);
  }
  EXPECT_EQ(server->eventClients(), 0u);
  EXPECT_EQ(request("/api/overview").status, 200u);
}

TEST_F(StatusServerTest, EventStreamsEndWhenTheServerGoes) {
  auto connection = connect();
  auto client = kj::newHttpClient(*table, *connection);
  kj::HttpHeaders headers(*table);
  headers.set(kj::HttpHeaderId::HOST, "127.0.0.1");
  auto req = client->request(kj::HttpMethod::GET, "/api/events", headers, uint64_t(0));
  auto response = req.response.wait(io.waitScope);
  std::string seen;
  readUntil(*response.body, seen, "\"governors\"");
  serving = nullptr;
  server = nullptr;  // must not crash with a stream open
  char buffer[256];
  auto rest = response.body->tryRead(buffer, 1, sizeof(buffer))
                  .then([](size_t n) { return n; }, [](kj::Exception&&) { return size_t(0); })
                  .wait(io.waitScope);
  EXPECT_EQ(rest, 0u);
}

}  // namespace
}  // namespace squall
