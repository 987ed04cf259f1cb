// Safe by default (issue 17): nothing listens off loopback without a token
// unless told --insecure; `squall start` makes a token file every part and
// client finds; the token never shows in logs, on the status page or in any
// process's command line; a wrong token is refused by the server and by a
// governor's data service, both saying so and logging who tried.
#include "command-output.h"
#include "http-get.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/client/client.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <squall/proto/token.h>
#include <squall/tools/local-cluster.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <stdexcept>
#include <sstream>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

// A temp dir, removed with the object.
struct TempDir {
  TempDir() {
    path = (fs::temp_directory_path() / "squall-auth-XXXXXX").string();
    if (mkdtemp(path.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string path;
};

// Runs `program args` with no token anywhere in its environment; its
// output (stdout and stderr) and exit status.
std::pair<std::string, int> runWithoutToken(const std::string& program, const std::string& args) {
  return commandOutput("env -u SQUALL_TOKEN -u SQUALL_TOKEN_FILE '" + findProgram(program) + "' " + args +
                       " 2>&1");
}

TEST(AuthTest, AnOpenAddressWithoutATokenIsRefusedUnlessInsecure) {
  auto [server, serverStatus] = runWithoutToken("squall-server", "--listen 0.0.0.0:0 --http off --log off");
  EXPECT_EQ(serverStatus, 2) << server;
  EXPECT_NE(server.find("squall-server: refusing to listen on 0.0.0.0:0 without a token: anyone who can reach it "
                        "could run any program as the governors' users"),
            std::string::npos)
      << server;
  EXPECT_NE(server.find("--insecure"), std::string::npos) << server;

  auto [governor, governorStatus] =
      runWithoutToken("squall-governor", "--listen 0.0.0.0:0 --server 127.0.0.1:1 --connect-timeout 0");
  EXPECT_EQ(governorStatus, 2) << governor;
  EXPECT_NE(governor.find("refusing to listen on 0.0.0.0:0 without a token: anyone who can reach it could read "
                          "every object this governor holds"),
            std::string::npos)
      << governor;

  // --insecure: it listens, and says loudly what that means.
  TempDir dir;
  auto log = dir.path + "/server.log";
  ChildProcess insecure(findProgram("squall-server"), {"--listen", "0.0.0.0:0", "--http", "off", "--log", "off",
                                                       "--insecure"},
                        {}, {"env", "-u", "SQUALL_TOKEN", "-u", "SQUALL_TOKEN_FILE", "sh", "-c",
                             "exec \"$@\" 2>>'" + log + "'", "sh"});
  insecure.expectLine("listening address=", std::chrono::seconds(30));
  insecure.stop();
  auto said = slurp(log);
  EXPECT_NE(said.find("event=insecure"), std::string::npos) << said;
  EXPECT_NE(said.find("anyone who can reach this address can run any program"), std::string::npos) << said;
}

// Every process on this machine whose command line holds `text`.
std::vector<std::string> commandLinesHolding(const std::string& text) {
  std::vector<std::string> found;
  for (auto& entry : fs::directory_iterator("/proc")) {
    auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto cmdline = slurp(entry.path() / "cmdline");
    if (cmdline.find(text) != std::string::npos) found.push_back(name + ": " + cmdline);
  }
  return found;
}

TEST(AuthTest, TheTokenNeverShowsInLogsOnThePageOrInCommandLines) {
  std::mt19937_64 random(std::random_device{}());
  auto token = "tok" + std::to_string(random());
  TempDir dir;
  auto serverLog = dir.path + "/server.log";
  auto governorLog = dir.path + "/governor.log";
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  options.token = token;
  options.logLevel = "debug";
  options.serverWrap = {"sh", "-c", "exec \"$@\" 2>>'" + serverLog + "'", "sh"};
  options.governorWrapEach = {{"sh", "-c", "exec \"$@\" 2>>'" + governorLog + "'", "sh"}};
  LocalCluster cluster(options);
  cluster.start();
  EXPECT_EQ(commandLinesHolding(token), std::vector<std::string>{});
  {
    Client client(cluster.serverAddress(), token);
    auto session = client.newSession("with a token");
    auto echo = session.execute(Program({"echo", "hi"}).stdoutOutput());
    echo.output().keep();
    session.submit();
    EXPECT_EQ(echo.output().fetch(), "hi\n");
    for (auto path : {"/", "/api/governors", "/api/sessions", "/metrics"}) {
      auto reply = httpGet(cluster.httpAddress(), path);
      EXPECT_EQ(reply.body.find(token), std::string::npos) << path;
    }
  }
  // A wrong token and none: refused, saying which, and logged with the
  // peer's address (never the token).
  for (std::string wrong : {std::string("not-") + token, std::string()}) {
    try {
      Client client(ClientOptions{.address = cluster.serverAddress(), .token = wrong.empty() ? " " : wrong});
      client.newSession("should not open");
      ADD_FAILURE() << "a client with token '" << wrong << "' was let in";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("authentication failed: wrong token"), std::string::npos) << e.what();
    }
  }
  cluster.stop();
  auto serverSaid = slurp(serverLog);
  auto governorSaid = slurp(governorLog);
  EXPECT_NE(serverSaid.find("event=auth-refused service=rpc peer=127.0.0.1:"), std::string::npos) << serverSaid;
  EXPECT_EQ(serverSaid.find(token), std::string::npos);
  EXPECT_EQ(governorSaid.find(token), std::string::npos);
}

TEST(AuthTest, AGovernorsDataServiceRefusesAWrongTokenAndLogsThePeer) {
  TempDir dir;
  auto governorLog = dir.path + "/governor.log";
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  options.token = "the-right-one";
  options.governorWrapEach = {{"sh", "-c", "exec \"$@\" 2>>'" + governorLog + "'", "sh"}};
  LocalCluster cluster(options);
  cluster.start();
  std::string dataAddress;
  {
    Client client(cluster.serverAddress(), "the-right-one");
    auto governors = client.governors();
    ASSERT_EQ(governors.size(), 1u);
    dataAddress = governors[0].dataAddress;
  }
  auto io = kj::setupAsyncIo();
  for (std::string token : {"the-wrong-one", ""}) {
    auto connection = connectTo(io.provider->getNetwork(), dataAddress).wait(io.waitScope);
    auto request = connection->bootstrap<wire::DataBootstrap>().openRequest();
    request.setVersion(wire::PROTOCOL_VERSION);
    request.setToken(token);
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { request.send().wait(io.waitScope); })) {
      EXPECT_NE(std::string(userMessage(*e).cStr()).find("invalid token for the data service of governor governor-0"),
                std::string::npos)
          << userMessage(*e).cStr();
    } else {
      ADD_FAILURE() << "the data service let in token '" << token << "'";
    }
  }
  cluster.stop();
  auto said = slurp(governorLog);
  EXPECT_NE(said.find("event=auth-refused service=data peer=127.0.0.1:"), std::string::npos) << said;
  EXPECT_NE(said.find("reason=\"wrong token\""), std::string::npos) << said;
  EXPECT_NE(said.find("reason=\"no token\""), std::string::npos) << said;
}

// A CA and a certificate for this host signed by it (and a second CA that
// signed nothing here), made with openssl as an operator would.
struct TestPki {
  explicit TestPki(const std::string& dir) : dir(dir) {
    auto ec = std::string(" -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes");
    std::string script = "set -e; cd '" + dir + "'\n" +
                         "openssl req -x509" + ec + " -keyout ca.key -out ca.pem -days 2 -subj /CN=squall-test-ca\n" +
                         "openssl req -x509" + ec + " -keyout other.key -out other-ca.pem -days 2 -subj /CN=another-ca\n" +
                         "openssl req" + ec + " -keyout host.key -out host.csr -subj /CN=localhost\n" +
                         "printf 'subjectAltName=DNS:localhost,DNS:127.0.0.1,IP:127.0.0.1\\nextendedKeyUsage=serverAuth,"
                         "clientAuth\\n' > ext.cnf\n" +
                         "openssl x509 -req -in host.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out host.pem -days 2 "
                         "-extfile ext.cnf\n";
    auto [out, status] = commandOutput("sh -c \"$(cat <<'PKI'\n" + script + "PKI\n)\" 2>&1");
    if (status != 0) throw std::runtime_error("openssl failed: " + out);
  }
  std::string path(const char* name) const { return dir + "/" + name; }
  // A cluster of `governors` with one cpu each, every part on this
  // host's certificate, trusting the CA.
  ClusterOptions cluster(int governors, const std::string& token) const {
    ClusterOptions options;
    options.governors = governors;
    options.cpus = 1;
    options.token = token;
    options.tlsCert = path("host.pem");
    options.tlsKey = path("host.key");
    options.tlsCa = path("ca.pem");
    return options;
  }
  // A client of `address` the cluster lets in.
  ClientOptions client(const std::string& address, const std::string& token) const {
    ClientOptions options{.address = address, .token = token};
    options.tlsCa = path("ca.pem");
    options.tlsCert = path("host.pem");
    options.tlsKey = path("host.key");
    return options;
  }
  std::string dir;
};

TEST(AuthTest, TlsCarriesEveryConnectionAndRefusesAStrangerOrAPlainPeer) {
  TempDir dir;
  TestPki pki(dir.path);
  LocalCluster cluster(pki.cluster(2, "tls-and-a-token"));
  cluster.start();
  auto good = pki.client(cluster.serverAddress(), "tls-and-a-token");
  {
    // A task on each governor, the second reading the first's output: the
    // server, both data services and the fetch all speak TLS.
    Client client(good);
    auto session = client.newSession("over tls");
    auto first = session.execute(Program::shell("echo secret data").stdoutOutput().name("first"));
    auto second = session.execute(Program({"tr", "a-z", "A-Z"}).stdinFrom(first.output()).stdoutOutput());
    second.output().keep();
    session.submit();
    EXPECT_EQ(second.output().fetch(), "SECRET DATA\n");
  }
  auto refused = [&](ClientOptions options) -> std::string {
    try {
      Client client(options);
      client.newSession("should not open");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  // Plain TCP to a TLS server: no session.
  ClientOptions plain{.address = cluster.serverAddress(), .token = "tls-and-a-token"};
  EXPECT_NE(refused(plain), "");
  // A server certificate the client's CA did not sign: refused by the client.
  ClientOptions stranger = good;
  stranger.tlsCa = pki.path("other-ca.pem");
  auto message = refused(stranger);
  EXPECT_NE(message.find("certificate"), std::string::npos) << message;
  // A client certificate the server's CA did not sign: refused by the server.
  ClientOptions unsigned_ = good;
  unsigned_.tlsCert = pki.path("other-ca.pem");
  unsigned_.tlsKey = pki.path("other.key");
  EXPECT_NE(refused(unsigned_), "");
  // A file that is no certificate is named.
  ClientOptions broken = good;
  broken.tlsCa = pki.path("ext.cnf");
  message = refused(broken);
  EXPECT_NE(message.find("cannot use " + pki.path("ext.cnf") + " as the TLS CA"), std::string::npos) << message;
}

// A peer that opens a TCP connection to a TLS port and never starts its
// handshake holds up no one (kj's TLS receiver did each handshake inside
// accept(), one after another), and is closed at the deadline.
TEST(AuthTest, AStalledTlsHandshakeHoldsUpNoOneAndIsClosedAtItsDeadline) {
  TempDir dir;
  TestPki pki(dir.path);
  auto options = pki.cluster(1, "tls-deadline");
  options.serverArgs = {"--auth-timeout", "8"};
  LocalCluster cluster(options);
  cluster.start();
  auto colon = cluster.serverAddress().rfind(':');
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(cluster.serverAddress().substr(colon + 1))));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  int stalled = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(stalled, 0);
  ASSERT_EQ(::connect(stalled, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  // Meanwhile a client with the certificates is served at once.
  auto start = std::chrono::steady_clock::now();
  {
    Client client(pki.client(cluster.serverAddress(), "tls-deadline"));
    auto session = client.newSession("beside a stalled handshake");
    auto echo = session.execute(Program({"echo", "served"}).stdoutOutput());
    echo.output().keep();
    session.submit();
    EXPECT_EQ(echo.output().fetch(), "served\n");
  }
  // (Well before the stalled one's 8 s: a listener that shook hands one at
  // a time would have served the client only once those were over.)
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(6))
      << "the client waited for the stalled handshake";
  // The stalled one is closed at its deadline (the read sees the end).
  timeval limit{30, 0};
  setsockopt(stalled, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char byte;
  EXPECT_EQ(::recv(stalled, &byte, 1, 0), 0) << "the server kept a connection that never shook hands";
  ::close(stalled);
}

// A systemd unit's ExecStart as systemd would run it: ${VAR} from
// `values`, then from the unit's Environment= lines; words split on
// spaces; /usr/local/bin/PROGRAM is the built PROGRAM.
std::vector<std::string> unitCommand(const std::string& unit, std::map<std::string, std::string> values) {
  std::ifstream in(std::string(SQUALL_SOURCE_DIR) + "/deploy/systemd/" + unit);
  EXPECT_TRUE(in.good()) << unit;
  std::string line, exec;
  while (std::getline(in, line)) {
    if (line.rfind("Environment=", 0) == 0) {
      std::istringstream words(line.substr(12));
      for (std::string word; words >> word;) values.emplace(word.substr(0, word.find('=')), word.substr(word.find('=') + 1));
    }
    if (line.rfind("ExecStart=", 0) == 0) exec = line.substr(10);
  }
  std::vector<std::string> command;
  std::istringstream words(exec);
  for (std::string word; words >> word;) {
    for (size_t at; (at = word.find("${")) != std::string::npos;) {
      auto end = word.find('}', at);
      auto name = word.substr(at + 2, end - at - 2);
      EXPECT_TRUE(values.count(name)) << unit << " uses ${" << name << "}";
      word.replace(at, end - at + 1, values[name]);
    }
    if (word.rfind("/usr/local/bin/", 0) == 0) word = findProgram(word.substr(15));
    command.push_back(word);
  }
  return command;
}

TEST(AuthTest, TheSystemdUnitsStartAClusterAsWritten) {
  TempDir dir;
  auto credentials = dir.path + "/credentials";
  fs::create_directories(credentials);
  std::ofstream(credentials + "/token") << "from-a-credential\n";
  fs::permissions(credentials + "/token", fs::perms::owner_read | fs::perms::owner_write);
  auto server = unitCommand("squall-server.service", {{"SQUALL_LISTEN", "127.0.0.1:0"},
                                                       {"SQUALL_HTTP", "off"},
                                                       {"CREDENTIALS_DIRECTORY", credentials},
                                                       {"STATE_DIRECTORY", dir.path}});
  ChildProcess serverProcess(server[0], std::vector<std::string>(server.begin() + 1, server.end()));
  auto line = serverProcess.expectLine("listening address=", std::chrono::seconds(30));
  auto address = line.substr(line.find('=') + 1);
  auto governor = unitCommand("squall-governor.service", {{"SQUALL_SERVER", address},
                                                           {"SQUALL_GOVERNOR_LISTEN", "127.0.0.1:0"},
                                                           {"CREDENTIALS_DIRECTORY", credentials},
                                                           {"STATE_DIRECTORY", dir.path}});
  ChildProcess governorProcess(governor[0], std::vector<std::string>(governor.begin() + 1, governor.end()));
  governorProcess.expectLine("registered governor=", std::chrono::seconds(30));
  {
    Client client(address, "from-a-credential");
    auto session = client.newSession("as the units say");
    auto echo = session.execute(Program({"echo", "unit"}).stdoutOutput());
    echo.output().keep();
    session.submit();
    EXPECT_EQ(echo.output().fetch(), "unit\n");
  }
  EXPECT_TRUE(fs::exists(dir.path + "/server.sqlite"));
  governorProcess.stop();
  serverProcess.stop();
}

// No cluster here runs the Kubernetes manifests (docs/deploy.md says so);
// what can be checked is checked: they parse, and every flag their
// containers give is one the program takes.
TEST(AuthTest, TheKubernetesManifestsParseAndUseOnlyRealFlags) {
  auto manifest = std::string(SQUALL_SOURCE_DIR) + "/deploy/kubernetes/squall.yaml";
  auto [commands, status] = commandOutput(
      "python3 -c 'import sys, yaml\n"
      "for doc in yaml.safe_load_all(open(sys.argv[1])):\n"
      "  spec = doc.get(\"spec\", {}).get(\"template\", {}).get(\"spec\", {})\n"
      "  for c in spec.get(\"containers\", []): print(\" \".join(c[\"command\"]))' '" +
      manifest + "' 2>&1");
  ASSERT_EQ(status, 0) << commands;
  std::istringstream lines(commands);
  int seen = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string program;
    words >> program;
    auto name = program.substr(program.rfind('/') + 1);
    auto [help, helpStatus] = commandOutput("'" + findProgram(name) + "' --help 2>&1");
    for (std::string word; words >> word;) {
      auto flag = word.substr(0, word.find('='));
      EXPECT_NE(help.find(flag + " "), std::string::npos) << name << " has no " << flag;
    }
    seen++;
  }
  EXPECT_EQ(seen, 2);
}

TEST(AuthTest, SquallStartMakesAnOwnerOnlyTokenFileThatClientsFind) {
  // test-main gave this program a state directory of its own.
  auto path = defaultTokenFile();
  ASSERT_FALSE(path.empty());
  std::error_code ec;
  fs::remove(path, ec);
  std::string first;
  for (int run = 0; run < 2; run++) {
    ChildProcess start(findProgram("squall"), {"start", "--governors", "1", "--listen", "127.0.0.1:0", "--http",
                                               "off", "--cpus", "1"});
    auto line = start.expectLine("squall is running: server=", std::chrono::seconds(30));
    auto address = line.substr(line.find('=') + 1, line.find(' ', line.find('=')) - line.find('=') - 1);
    EXPECT_EQ(start.expectLine("token: ", std::chrono::seconds(5)).rfind("token: " + path + " ", 0), 0u);
    struct stat st;
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    auto token = resolveToken("", "");
    if (run == 0) first = token;
    EXPECT_EQ(token, first);  // made once, kept
    {
      Client client(address);  // finds the file
      auto session = client.newSession("found the token");
      auto hello = session.concat({session.blob("hello")});
      hello.output().keep();
      session.submit();
      EXPECT_EQ(hello.output().fetch(), "hello");
    }
    try {
      Client client(address, "guessed");
      client.newSession("should not open");
      ADD_FAILURE() << "a guessed token was let in";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("wrong token"), std::string::npos) << e.what();
    }
    start.signal(SIGINT);
    EXPECT_TRUE(start.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  }
}

}  // namespace
}  // namespace squall
