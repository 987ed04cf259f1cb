// The status port of a real squall-server with real governors: the JSON
// API and /metrics seen over HTTP while a pipeline with a failing task runs,
// bad requests answered with 400/404, and the port's flags.
#include "http-get.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace squall {
namespace {

class StatusPageTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.governors = 2;
    options.cpus = 2;
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  static LocalCluster* cluster;
  const std::string& http() { return cluster->httpAddress(); }
};
LocalCluster* StatusPageTest::cluster = nullptr;

TEST_F(StatusPageTest, ServerPrintsTheHttpAddressAndServesThePage) {
  ASSERT_FALSE(http().empty());
  auto page = httpGet(http(), "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<script src=\"/assets/app.js\">"), std::string::npos);
  EXPECT_EQ(httpGet(http(), "/assets/app.js").status, 200);
  auto governors = getJson(http(), "/api/governors");
  ASSERT_EQ(governors.size(), 2u);
  EXPECT_EQ(governors[0]["name"], "governor-0");
  EXPECT_EQ(governors[1]["cpus"], 2);
}

TEST_F(StatusPageTest, ApiFollowsAPipelineWithAFailingTask) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("status-e2e");
  auto words = session.blob("b\na\nc\n", "words");
  auto sorted = session.execute(Program({"sort"}).stdinFrom(words).stdoutOutput().name("sort"));
  auto broken = session.execute(
      Program::shell("echo 'broken: cannot open input.csv' >&2; exit 3").name("broken"));
  broken.allowFailure();
  auto after = session.execute(Program({"cat"}).stdinFrom(sorted.output()).stdoutOutput().name("after"));
  session.submit();
  session.wait(std::vector<Task>{sorted, after});
  // A wait on a failed task reports its failure.
  EXPECT_ANY_THROW(session.wait(std::vector<Task>{broken}));
  auto id = std::to_string(session.state().id);

  auto summary = getJson(http(), "/api/sessions/" + id);
  EXPECT_EQ(summary["name"], "status-e2e");
  EXPECT_EQ(summary["counts"]["finished"], 2);
  EXPECT_EQ(summary["counts"]["failed"], 1);
  auto tasks = getJson(http(), "/api/sessions/" + id + "/tasks");
  EXPECT_EQ(tasks["total"], 3);
  EXPECT_EQ(tasks["tasks"][0]["name"], "broken");  // failures first
  EXPECT_EQ(tasks["tasks"][0]["state"], "failed");
  auto task = getJson(http(), "/api/sessions/" + id + "/tasks/" + std::to_string(broken.id()));
  EXPECT_EQ(task["stderrTail"], "broken: cannot open input.csv\n");
  EXPECT_EQ(task["exitStatus"], 3);
  EXPECT_TRUE(task["governor"] == "governor-0" || task["governor"] == "governor-1");
  auto graph = getJson(http(), "/api/sessions/" + id + "/graph");
  EXPECT_EQ(graph["mode"], "tasks");
  EXPECT_EQ(graph["nodes"].size(), 3u);
  EXPECT_EQ(graph["edges"].size(), 1u);  // sort -> after
  auto timeline = getJson(http(), "/api/sessions/" + id + "/timeline");
  EXPECT_EQ(timeline["timed"], 3);
  auto overview = getJson(http(), "/api/overview");
  EXPECT_GE(overview["throughput"]["finished"].get<int>(), 2);
  EXPECT_GE(overview["throughput"]["failed"].get<int>(), 1);

  auto metrics = httpGet(http(), "/metrics");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("squall_governors 2\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("squall_tasks{state=\"failed\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.body.find("squall_scheduling_pass_seconds_count "), std::string::npos);

  // Closed: the page still shows all of it, with one state (it did not
  // fail: the failure was allowed).
  session.close();
  summary = getJson(http(), "/api/sessions/" + id);
  EXPECT_EQ(summary["closed"], true);
  EXPECT_EQ(summary["state"], "closed");
  EXPECT_EQ(summary["counts"]["finished"], 2);
  for (auto& row : getJson(http(), "/api/sessions")) {
    if (row["id"] == summary["id"]) {
      EXPECT_EQ(row["state"], "closed");
    }
  }
  task = getJson(http(), "/api/sessions/" + id + "/tasks/" + std::to_string(broken.id()));
  EXPECT_EQ(task["stderrTail"], "broken: cannot open input.csv\n");
  EXPECT_EQ(getJson(http(), "/api/sessions/" + id + "/graph"), graph);
  EXPECT_EQ(getJson(http(), "/api/sessions/" + id + "/timeline")["timed"], 3);
  EXPECT_EQ(getJson(http(), "/api/sessions/" + id + "/tasks")["total"], 3);
}

// All output of `squall ARGS` against `server`, and its exit status.
std::pair<int, std::string> squallCli(const std::string& server, std::vector<std::string> args) {
  args.insert(args.end(), {"--server", server});
  ChildProcess cli(findProgram("squall"), args);
  std::string out;
  while (auto line = cli.readLine(std::chrono::seconds(30))) out += *line + "\n";
  EXPECT_TRUE(cli.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  auto status = cli.poll();
  return {status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, out};
}

// A session that ran, failed and closed, kept over a server restart
// (killed, as by a crash, just after the close was answered): its graph,
// timeline and failures through the JSON API and `squall status`.
TEST(StatusPageHistoryTest, AClosedSessionSurvivesARestartWithItsGraphTimelineAndFailures) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 2;
  LocalCluster cluster(options);
  cluster.start();
  uint64_t id = 0, brokenId = 0;
  {
    Client client(cluster.serverAddress());
    auto session = client.newSession("kept-run");
    auto words = session.blob("b\na\n", "words");
    auto sorted = session.execute(Program({"sort"}).stdinFrom(words).stdoutOutput().name("sort"));
    session.execute(Program({"cat"}).stdinFrom(sorted.output()).stdoutOutput().name("after"));
    auto broken = session.execute(
        Program::shell("echo 'broken: no such input' >&2; exit 3").name("broken"));
    session.submit();
    EXPECT_THROW(session.waitAll(), TaskFailed);
    id = session.id();
    brokenId = broken.id();
    session.close();  // answered once what is kept of it is in the log
  }
  cluster.restartServer();
  auto http = cluster.httpAddress();
  auto base = "/api/sessions/" + std::to_string(id);

  auto summary = getJson(http, base);
  EXPECT_EQ(summary["name"], "kept-run");
  EXPECT_EQ(summary["state"], "failed");
  EXPECT_EQ(summary["closed"], true);
  EXPECT_EQ(summary["failure"]["task"], brokenId);
  EXPECT_EQ(summary["failure"]["stderrTail"], "broken: no such input\n");
  auto graph = getJson(http, base + "/graph");
  EXPECT_EQ(graph["mode"], "tasks");
  EXPECT_EQ(graph["nodes"].size(), 3u);
  EXPECT_EQ(graph["edges"].size(), 1u);  // sort -> after
  auto timeline = getJson(http, base + "/timeline");
  EXPECT_GE(timeline["timed"].get<int>(), 1);
  EXPECT_EQ(timeline["lanes"][0]["governor"], "governor-0");
  auto failures = getJson(http, base + "/tasks?state=failed");
  ASSERT_EQ(failures["tasks"].size(), 1u);
  EXPECT_EQ(failures["tasks"][0]["name"], "broken");
  auto task = getJson(http, base + "/tasks/" + std::to_string(brokenId));
  EXPECT_EQ(task["stderrTail"], "broken: no such input\n");
  EXPECT_EQ(task["exitStatus"], 3);

  auto [status, out] = squallCli(cluster.serverAddress(), {"status", std::to_string(id)});
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("(kept-run): failed (closed)"), std::string::npos) << out;
  EXPECT_NE(out.find("broken (task " + std::to_string(brokenId)), std::string::npos) << out;
  EXPECT_NE(out.find("| broken: no such input"), std::string::npos) << out;
  // By name too, and the client library says it is closed.
  EXPECT_EQ(squallCli(cluster.serverAddress(), {"status", "kept-run"}).second, out);
  Client client(cluster.serverAddress());
  auto state = client.attach(id).state();
  EXPECT_TRUE(state.closed);
  EXPECT_FALSE(state.open);
  // New sessions do not take its id.
  EXPECT_GT(client.newSession("next").id(), id);
}

TEST_F(StatusPageTest, BadRequestsGet400Or404AndTheServerCarriesOn) {
  EXPECT_EQ(httpGet(http(), "/api/sessions/x").status, 400);
  EXPECT_EQ(httpGet(http(), "/api/sessions/1/tasks?state=bogus").status, 400);
  EXPECT_EQ(httpGet(http(), "/api/sessions/1/tasks?limit=-5").status, 400);
  EXPECT_EQ(httpGet(http(), "/api/sessions/999999").status, 404);
  EXPECT_EQ(httpGet(http(), "/etc/passwd").status, 404);
  EXPECT_EQ(httpGet(http(), "/assets/../../etc/passwd").status, 404);
  EXPECT_EQ(httpGet(http(), "/api/overview", "POST").status, 405);
  EXPECT_EQ(httpGet(http(), "/api/overview", "DELETE").status, 405);
  EXPECT_TRUE(cluster->server().running());
  EXPECT_EQ(httpGet(http(), "/api/overview").status, 200);
}

// Issue 19 (HTTP sizes): kj-http reads at most a bounded head; a request
// line or header of megabytes ends that connection (no 200, nothing held)
// and the page carries on.
TEST_F(StatusPageTest, OversizedRequestsAreCutOffAndThePageCarriesOn) {
  auto colon = http().rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(http().substr(colon + 1))));
  inet_pton(AF_INET, http().substr(0, colon).c_str(), &addr.sin_addr);
  auto tryHuge = [&](const std::string& request) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    timeval timeout{10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    size_t sent = 0;
    while (sent < request.size()) {  // until the server stops reading
      ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    char reply[16] = {};
    ssize_t got = recv(fd, reply, sizeof(reply) - 1, 0);
    close(fd);
    return got > 0 ? std::string(reply, static_cast<size_t>(got)) : std::string();
  };
  std::string big(16 << 20, 'x');
  auto header = tryHuge("GET /api/overview HTTP/1.1\r\nHost: " + http() + "\r\nX-Big: " + big + "\r\n\r\n");
  EXPECT_EQ(header.find("200"), std::string::npos) << header;
  auto line = tryHuge("GET /" + big + " HTTP/1.1\r\nHost: " + http() + "\r\n\r\n");
  EXPECT_EQ(line.find("200"), std::string::npos) << line;
  EXPECT_TRUE(cluster->server().running());
  EXPECT_EQ(httpGet(http(), "/api/overview").status, 200);
}

// --log off: closed sessions are kept in memory, as many as
// --history-sessions says; a bad limit is refused at start.
TEST(StatusPageHistoryTest, WithoutALogClosedSessionsAreKeptInMemoryWithinTheFlags) {
  ClusterOptions options;
  options.governors = 1;
  options.serverArgs = {"--log", "off", "--history-sessions", "1"};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  std::vector<uint64_t> ids;
  for (auto name : {"first", "second"}) {
    auto session = client.newSession(name);
    session.execute(Program({"true"}).name("noop"));
    session.submit();
    session.waitAll();
    ids.push_back(session.id());
    session.close();
  }
  auto http = cluster.httpAddress();
  EXPECT_EQ(httpGet(http, "/api/sessions/" + std::to_string(ids[0])).status, 404);
  auto graph = getJson(http, "/api/sessions/" + std::to_string(ids[1]) + "/graph");
  ASSERT_EQ(graph["nodes"].size(), 1u);
  EXPECT_EQ(graph["nodes"][0]["state"], "finished");
  EXPECT_TRUE(client.attach(ids[1]).state().closed);

  for (auto flag : {"--history-mb 0", "--history-sessions -1"}) {
    auto command = findProgram("squall-server") + " --log off --listen 127.0.0.1:0 --http off " + flag + " 2>&1";
    FILE* out = popen(command.c_str(), "r");
    ASSERT_NE(out, nullptr);
    std::string text;
    char buffer[512];
    while (fgets(buffer, sizeof(buffer), out) != nullptr) text += buffer;
    int status = pclose(out);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << flag;
    EXPECT_NE(text.find(std::string(flag).substr(0, std::string(flag).find(' ')) + ": Value"),
              std::string::npos)
        << text;
  }
}

TEST(StatusPageFlagsTest, OffMeansNoPortAndABusyPortIsAClearError) {
  ClusterOptions off;
  off.governors = 0;
  off.http = "off";
  LocalCluster quiet(off);
  quiet.start();
  EXPECT_TRUE(quiet.httpAddress().empty());

  ClusterOptions first;
  first.governors = 0;
  LocalCluster one(first);
  one.start();
  ClusterOptions clash;
  clash.governors = 0;
  clash.http = one.httpAddress();
  LocalCluster two(clash);
  try {
    two.start();
    FAIL() << "a second server took the same status port";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("http address="), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace squall
