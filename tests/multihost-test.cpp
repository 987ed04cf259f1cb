// Many hosts (issue 15): the server and three governors each in a network
// namespace of its own, joined by a bridge, every link limited by tbf
// (tools/netns.sh); this test, the client, stays in the root namespace and
// reaches them at their namespace addresses. Proves what a single host
// cannot: governors announce and are reached at the address they listen
// on, data and streams cross real links between hosts, a host cut off is
// noticed and its work done elsewhere, and the links' rate is what the
// data moves at. Skipped where namespaces are refused (not root).
#include "http-get.h"
#include "netns-hosts.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

namespace squall {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Every host's link, both ways.
constexpr const char* RATE = "200mbit";
constexpr double RATE_BYTES = 200e6 / 8;
// What tbf lets through at once when idle: tools/netns.sh gives the bucket
// 10 ms of RATE (at least 64 KiB).
constexpr double BURST_BYTES = RATE_BYTES / 100;
constexpr size_t GOVERNORS = 3;
constexpr const char* GOVERNOR_POOLS[GOVERNORS] = {"on_a", "on_b", "on_c"};

std::string hostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

// stdout of `sh -c command`, run here; throws when it fails.
std::string shell(const std::string& command) {
  auto [output, status] = commandOutput(command);
  if (status != 0) throw std::runtime_error("'" + command + "' failed: " + output);
  return output;
}

// Host 0 runs the server, host i + 1 governor i (governor-i), which offers
// one item of its own pool GOVERNOR_POOLS[i]: a task asking for it runs
// there and nowhere else.
class MultihostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    hosts = std::make_unique<NetnsHosts>(NetnsHosts::processPrefix(), GOVERNORS + 1, RATE);
    if (hosts->refused()) {
      GTEST_SKIP() << "this machine refuses network namespaces (run as root to test many hosts): "
                   << *hosts->refused();
    }
  }
  void TearDown() override {
    cluster.reset();
    hosts.reset();
  }

  ClusterOptions options() const {
    ClusterOptions options;
    options.governors = GOVERNORS;
    options.cpus = 2;
    options.listen = hosts->address(0) + ":0";
    options.http = hosts->address(0) + ":0";
    options.serverWrap = hosts->exec(0);
    // Off loopback, every part needs the token (and the governors' data
    // services check it too).
    options.token = token;
    for (size_t i = 0; i < GOVERNORS; i++) {
      options.governorWrapEach.push_back(hosts->exec(i + 1));
      options.governorListenEach.push_back(hosts->address(i + 1) + ":0");
      options.governorArgsEach.push_back({"--resource", std::string(GOVERNOR_POOLS[i]) + "=1"});
    }
    return options;
  }
  void start(const ClusterOptions& options) {
    cluster = std::make_unique<LocalCluster>(options);
    cluster->start();
  }
  static std::string governorName(size_t i) { return "governor-" + std::to_string(i); }

  std::unique_ptr<NetnsHosts> hosts;
  std::unique_ptr<LocalCluster> cluster;
  const std::string token = "multihost-" + std::to_string(getpid());
};

TEST_F(MultihostTest, EachGovernorRegistersWithItsNamespaceAddress) {
  start(options());
  EXPECT_EQ(hostOf(cluster->serverAddress()), hosts->address(0));
  Client client(cluster->serverAddress(), token);
  auto governors = client.governors();
  ASSERT_EQ(governors.size(), GOVERNORS);
  for (auto& governor : governors) {
    auto index = std::stoul(governor.name.substr(governor.name.find('-') + 1));
    ASSERT_LT(index, GOVERNORS) << governor.name;
    EXPECT_EQ(hostOf(governor.dataAddress), hosts->address(index + 1)) << governor.name;
    EXPECT_NE(governor.dataAddress.rfind("127.", 0), 0u) << governor.name;
  }
  auto listed = getJson(cluster->httpAddress(), "/api/governors");
  ASSERT_EQ(listed.size(), GOVERNORS);
  for (auto& governor : listed) {
    std::string name = governor["name"];
    auto index = std::stoul(name.substr(name.find('-') + 1));
    ASSERT_LT(index, GOVERNORS) << name;
    EXPECT_EQ(hostOf(governor["dataAddress"]), hosts->address(index + 1)) << name;
  }
}

// A blob made on governor A is read by a task that can run only on B: it
// crosses A's and B's links; what B read is what A made, byte for byte.
TEST_F(MultihostTest, ABlobMadeOnOneHostIsReadIntactOnAnother) {
  start(options());
  Client client(cluster->serverAddress(), token);
  auto session = client.newSession("cross-host");
  auto producer = session.execute(Program::shell("head -c 8388608 /dev/urandom").stdoutOutput());
  producer.resource("on_a", 1);
  auto consumer = session.execute(Program({"cksum"}).stdinFrom(producer.output()).stdoutOutput());
  consumer.resource("on_b", 1);
  producer.output().keep();
  consumer.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(producer.info().governor, governorName(0));
  EXPECT_EQ(consumer.info().governor, governorName(1));

  auto copy = fs::temp_directory_path() / ("squall-multihost-" + std::to_string(getpid()));
  producer.output().fetchToFile(copy.string());
  EXPECT_EQ(fs::file_size(copy), 8388608u);
  auto here = shell("cksum < '" + copy.string() + "'");
  fs::remove(copy);
  EXPECT_EQ(consumer.output().fetch(), here);

  auto locations = producer.output().info().locations;
  std::sort(locations.begin(), locations.end());
  EXPECT_EQ(locations, (std::vector<std::string>{governorName(0), governorName(1)}));
}

// A stream's producer on A and its reader on B run at once; the bytes flow
// between the hosts as they are written.
TEST_F(MultihostTest, AStreamFlowsFromOneHostToAReaderOnAnother) {
  start(options());
  Client client(cluster->serverAddress(), token);
  auto session = client.newSession("cross-host-stream");
  const std::string generate = "seq 1 3000000";
  auto producer = session.execute(Program::shell(generate).stdoutOutput(ObjectKind::STREAM).cpus(1));
  producer.resource("on_a", 1);
  auto reader = session.execute(Program({"cksum"}).stdinFrom(producer.output()).stdoutOutput().cpus(1));
  reader.resource("on_b", 1);
  reader.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(producer.info().governor, governorName(0));
  EXPECT_EQ(reader.info().governor, governorName(1));
  EXPECT_EQ(reader.output().fetch(), shell(generate + " | cksum"));
  EXPECT_EQ(producer.output().info().size, shell(generate).size());
}

// A host whose link goes down mid-task sends no reset: the server gives its
// governor up after --governor-timeout and runs the task elsewhere.
TEST_F(MultihostTest, AHostCutOffMidTaskIsGivenUpAndItsTaskRunsOnAnother) {
  auto cut = options();
  cut.serverArgs = {"--governor-timeout", "3"};
  cut.governorArgs = {"--server-timeout", "3"};
  start(cut);
  Client client(cluster->serverAddress(), token);
  auto session = client.newSession("cut-off");
  // Each run writes where it runs (its sandbox is under governor-<i>/);
  // the first one then waits for good, the second one finishes.
  auto runs = fs::path(cluster->workDir()) / "runs";
  auto task = session.execute(Program::shell("echo \"$PWD\" >> '" + runs.string() +
                                             "'; [ \"$(wc -l < '" + runs.string() +
                                             "')\" -ge 2 ] || sleep 300; echo done")
                                  .stdoutOutput());
  task.output().keep();
  session.submit();
  auto governorsOf = [&runs]() {
    std::vector<size_t> where;
    std::ifstream in(runs);
    for (std::string line; std::getline(in, line);) {
      auto at = line.find("/governor-");
      where.push_back(at == std::string::npos ? GOVERNORS : std::stoul(line.substr(at + 10)));
    }
    return where;
  };
  // No event says a task has started: look, bounded.
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (governorsOf().empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(governorsOf().size(), 1u);
  size_t victim = governorsOf()[0];
  ASSERT_LT(victim, GOVERNORS);
  hosts->ip(victim + 1, "link set eth0 down");

  // Bounded, so that a server that never notices fails the test rather
  // than hang it: the client's waits have no deadline.
  deadline = std::chrono::steady_clock::now() + 60s;
  while (task.info().state != "finished" && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(task.info().state, "finished") << "governor-" << victim << " was cut off and never given up";
  EXPECT_EQ(task.output().fetch(), "done\n");
  auto where = governorsOf();
  ASSERT_EQ(where.size(), 2u);
  EXPECT_NE(where[1], victim);
  EXPECT_EQ(task.info().governor, governorName(where[1]));
  for (auto& governor : client.governors()) EXPECT_NE(governor.name, governorName(victim));
  for (auto& governor : getJson(cluster->httpAddress(), "/api/governors")) {
    EXPECT_NE(governor["name"], governorName(victim));
  }
  auto state = session.state();
  EXPECT_TRUE(state.failure.empty()) << state.failure;
  EXPECT_EQ(state.finished, 1u);
}

// tbf applies to the data: moving N bytes over a link of rate R takes at
// least (N - burst) / R, from a governor to the client and from one
// governor to another. A lower bound only: a slow machine only adds.
TEST_F(MultihostTest, DataCrossesALinkNoFasterThanItsRate) {
  // The "hosts" are namespaces of this machine: the client would read the
  // governor's file instead of crossing the link (local-data.cpp).
  setenv("SQUALL_LOCAL_DATA", "0", 1);
  struct Unset {
    ~Unset() { unsetenv("SQUALL_LOCAL_DATA"); }
  } unset;
  start(options());
  Client client(cluster->serverAddress(), token);
  auto session = client.newSession("rate");
  constexpr size_t BYTES = 24 << 20;
  const double atLeast = (BYTES - BURST_BYTES) / RATE_BYTES;
  // Random: no compression on the way makes it smaller.
  auto producer =
      session.execute(Program::shell("head -c " + std::to_string(BYTES) + " /dev/urandom").stdoutOutput());
  producer.resource("on_a", 1);
  producer.output().keep();
  session.submit();
  producer.output().wait();

  auto started = std::chrono::steady_clock::now();
  auto bytes = producer.output().fetch();
  std::chrono::duration<double> fetching = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(bytes.size(), BYTES);
  EXPECT_GE(fetching.count(), atLeast) << BYTES << " bytes fetched from governor A over " << RATE;

  auto reader = session.execute(Program::shell("wc -c").stdinFrom(producer.output()).stdoutOutput());
  reader.resource("on_b", 1);
  reader.output().keep();
  started = std::chrono::steady_clock::now();
  session.submit();
  session.wait({reader});
  std::chrono::duration<double> moving = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(reader.output().fetch(), std::to_string(BYTES) + "\n");
  EXPECT_GE(moving.count(), atLeast) << BYTES << " bytes moved from governor A to B over " << RATE;
  std::printf("%zu bytes over %s: fetched in %.2f s, moved between governors in %.2f s (at least %.2f s)\n",
              BYTES, RATE, fetching.count(), moving.count(), atLeast);
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// `squall start --ssh HOST` on plain machines: host 1 runs an sshd of the
// test's own (its keys made here); `squall start` runs on host 0 and starts
// a governor on host 1 through it. The token reaches host 1 over ssh's
// stdin, the governor is reached at host 1's address, and it goes when
// squall start does.
TEST_F(MultihostTest, SquallStartSshStartsAGovernorOnAnotherHostAndStopsIt) {
  if (access("/usr/sbin/sshd", X_OK) != 0) GTEST_SKIP() << "no /usr/sbin/sshd (Debian's openssh-server)";
  auto dir = fs::temp_directory_path() / ("squall-ssh-" + std::to_string(getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  auto d = dir.string();
  shell("ssh-keygen -q -t ed25519 -N '' -f '" + d + "/host_key' && ssh-keygen -q -t ed25519 -N '' -f '" + d +
        "/id' && cp '" + d + "/id.pub' '" + d + "/authorized_keys' && mkdir -p /run/sshd");
  std::ofstream(dir / "sshd_config") << "Port 2222\nListenAddress " << hosts->address(1) << "\nHostKey " << d
                                     << "/host_key\nAuthorizedKeysFile " << d
                                     << "/authorized_keys\nPermitRootLogin prohibit-password\nStrictModes no\n"
                                        "UsePAM no\nPasswordAuthentication no\nPidFile none\n";
  std::ofstream(dir / "ssh_config") << "Host *\n  Port 2222\n  IdentityFile " << d
                                    << "/id\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
                                       "  BatchMode yes\n  LogLevel ERROR\n";
  auto enter = hosts->exec(1);
  std::vector<std::string> wrap = enter;
  wrap.insert(wrap.end(), {"sh", "-c", "exec \"$@\" 2>&1", "sh"});
  ChildProcess sshd("/usr/sbin/sshd", {"-D", "-e", "-f", d + "/sshd_config"}, {}, wrap);
  sshd.expectLine("Server listening on", 30s);

  ChildProcess start(findProgram("squall"),
                     {"start", "--governors", "0", "--ssh", hosts->address(1), "--ssh-command",
                      "ssh -F " + d + "/ssh_config", "--listen", hosts->address(0) + ":0", "--http", "off",
                      "--cpus", "1"},
                     {}, hosts->exec(0));
  auto line = start.expectLine("squall is running: server=", 60s);
  auto address = line.substr(line.find('=') + 1, line.find(' ', line.find('=')) - line.find('=') - 1);
  auto workDir = line.substr(line.find("work-dir=") + 9);
  {
    // The default token file squall start made (test-main's state dir).
    Client client(address);
    auto governors = client.governors();
    ASSERT_EQ(governors.size(), 1u);
    EXPECT_EQ(hostOf(governors[0].dataAddress), hosts->address(1));
    auto session = client.newSession("over ssh");
    auto task = session.execute(Program({"echo", "remote"}).stdoutOutput());
    task.output().keep();
    session.submit();
    EXPECT_EQ(task.output().fetch(), "remote\n");
  }
  start.signal(SIGINT);
  EXPECT_TRUE(start.waitExit(std::chrono::steady_clock::now() + 30s));
  // The governor went with it (its lifeline was the ssh channel). Polled:
  // nothing here is told when a process on another host ends. ("[-]-": the
  // shell running pgrep does not match itself.)
  auto deadline = std::chrono::steady_clock::now() + 30s;
  auto remaining = [&]() { return shell("pgrep -f -- '[-]-work-dir " + workDir + "' || true"); };
  while (!remaining().empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(remaining(), "");
  sshd.stop();
}

}  // namespace
}  // namespace squall
