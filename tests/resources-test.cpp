// Resources beyond cpus end to end (docs/resources.md): two governors with
// different pools, tasks asking for amounts, shares and all of a pool,
// learning their items from their environment; the governors never hand
// out more than they have.
#include "command-output.h"
#include "http-get.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

namespace squall {
namespace {

namespace fs = std::filesystem;

class ResourcesE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Nothing detected from this machine: an empty /proc and no GPUs in
    // the environment, so the pools are exactly those given.
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("ROCR_VISIBLE_DEVICES");
    procDir = fs::temp_directory_path() / ("squall-no-proc-" + std::to_string(getpid()));
    fs::create_directories(procDir);
    ClusterOptions options;
    options.governors = 2;
    options.cpus = 4;
    options.governorArgs = {"--proc", procDir.string()};
    options.governorArgsEach = {{"--resource", "gpus=[7,8]", "--resource", "scratch=sum(10G)"},
                                {"--resource", "fpga=1"}};
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
    fs::remove_all(procDir);
  }
  static inline LocalCluster* cluster = nullptr;
  static inline fs::path procDir;
};

// Runs `line` in a shell as one task with `ask` applied; its stdout.
template <typename Ask>
std::string runShell(Client& client, const std::string& line, Ask&& ask) {
  auto session = client.newSession("resources");
  auto task = session.execute(Program::shell(line).stdoutOutput());
  ask(task);
  task.output().keep();
  session.submit();
  return task.output().fetch();
}

std::string submitFailure(Client& client, const std::function<void(Task&)>& ask) {
  auto session = client.newSession("refused");
  auto task = session.execute(Program({"true"}));
  ask(task);
  try {
    session.submit();
  } catch (const Error& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST_F(ResourcesE2eTest, ATaskLearnsTheItemsItWasGivenFromItsEnvironment) {
  Client client(cluster->serverAddress());
  auto out = runShell(client, "echo $SQUALL_RESOURCE_GPUS/$CUDA_VISIBLE_DEVICES/$OMP_NUM_THREADS/$SQUALL_RESOURCE_CPUS",
                      [](Task& t) { t.cpus(2).resource("gpus", 1.0); });
  // One of the governor's two GPUs, by its id, and two of its four cpus.
  std::vector<std::string> parts;
  std::istringstream fields(out.substr(0, out.size() - 1));
  for (std::string part; std::getline(fields, part, '/');) parts.push_back(part);
  ASSERT_EQ(parts.size(), 4u) << out;
  EXPECT_TRUE(parts[0] == "7" || parts[0] == "8") << out;
  EXPECT_EQ(parts[1], parts[0]) << out;
  EXPECT_EQ(parts[2], "2") << out;
  EXPECT_EQ(parts[3].size(), 3u) << out;  // two of 0..3, "a,b"
  // No GPU asked, on the governor with GPUs: it sees none (empty, not all);
  // on the one without, the variable is left alone.
  EXPECT_EQ(runShell(client, "echo \"[${CUDA_VISIBLE_DEVICES-unset}] $SQUALL_RESOURCE_SCRATCH\"",
                     [](Task& t) { t.resource("scratch", "1G"); }),
            "[] \n");
  EXPECT_EQ(runShell(client, "echo \"[${CUDA_VISIBLE_DEVICES-unset}] $SQUALL_RESOURCE_FPGA\"",
                     [](Task& t) { t.resource("fpga", 1.0); }),
            "[unset] 0\n");
  EXPECT_EQ(runShell(client, "echo $CUDA_VISIBLE_DEVICES", [](Task& t) { t.resource("gpus", "all"); }), "7,8\n");
}

TEST_F(ResourcesE2eTest, ImpossibleRequestsAreRefusedAtSubmitNamingTheResource) {
  Client client(cluster->serverAddress());
  auto message = submitFailure(client, [](Task& t) { t.resource("gpus", 3.0); });
  EXPECT_NE(message.find("no governor could ever run it: the best has 2 gpus, not 3"), std::string::npos) << message;
  message = submitFailure(client, [](Task& t) { t.resource("tpu", 1.0); });
  EXPECT_NE(message.find("no tpu"), std::string::npos) << message;
  EXPECT_NE(message.find("resources offered: fpga, gpus, scratch"), std::string::npos) << message;
  message = submitFailure(client, [](Task& t) { t.resource("gpus", 1.5); });
  EXPECT_NE(message.find("whole items only"), std::string::npos) << message;
  message = submitFailure(client, [](Task& t) { t.resource("scratch", "11G"); });
  EXPECT_NE(message.find("10737418240 scratch, not 11811160064"), std::string::npos) << message;
  // Both exist, but never on one governor.
  message = submitFailure(client, [](Task& t) { t.resource("gpus", 1.0).resource("fpga", 1.0); });
  EXPECT_NE(message.find("no governor could ever run it"), std::string::npos) << message;
  // The client refuses what is malformed before anything is sent.
  auto session = client.newSession("malformed");
  auto task = session.execute(Program({"true"}));
  EXPECT_THROW(task.resource("GPUs", 1.0), Error);
  EXPECT_THROW(task.resource("cpus", 1.0), Error);
  EXPECT_THROW(task.resource("gpus", "lots"), Error);
  task.resource("gpus", 0.5);
  EXPECT_THROW(task.resource("gpus", 0.5), Error);
}

// Issue 41 point 3: more cpus than any governor has were accepted and
// waited silently for ever. Refused at submit now, naming the best
// governor's, unless the task waits for a bigger governor; and so are
// resources no governor has. `squall submit` and `squall run` say so and
// take --wait-for-resources.
TEST_F(ResourcesE2eTest, MoreCpusThanAnyGovernorHasAreRefusedUnlessTheTaskWaitsForResources) {
  Client client(cluster->serverAddress());
  auto message = submitFailure(client, [](Task& t) { t.cpus(5); });
  EXPECT_NE(message.find("no governor could ever run it: it asks for 5 cpus and the best governor has 4"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("--wait-for-resources"), std::string::npos) << message;
  EXPECT_EQ(submitFailure(client, [](Task& t) { t.cpus(4); }), "(accepted)");
  // Waiting: accepted, and placed nowhere while no governor has 5 cpus.
  EXPECT_EQ(submitFailure(client, [](Task& t) { t.cpus(5).waitForResources(); }), "(accepted)");
  EXPECT_EQ(submitFailure(client, [](Task& t) { t.resource("gpus", 3.0).waitForResources(); }), "(accepted)");
  auto session = client.newSession("waiting for resources");
  auto waiting = session.execute(Program({"true"}));
  waiting.cpus(8).waitForResources();
  session.submit();
  EXPECT_EQ(waiting.info().state, "ready");

  auto squall = findProgram("squall");
  auto dir = fs::temp_directory_path() / ("squall-too-big-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "big.toml") << "[step.big]\ncommand = [\"true\"]\ncpus = 5\n";
  auto [printed, status] = commandOutput("cd '" + dir.string() + "' && '" + squall + "' run --server " +
                                         cluster->serverAddress() + " big.toml 2>&1");
  EXPECT_EQ(status, 1) << printed;
  EXPECT_NE(printed.find("it asks for 5 cpus and the best governor has 4"), std::string::npos) << printed;
  std::tie(printed, status) = commandOutput("'" + squall + "' submit --server " + cluster->serverAddress() +
                                            " --cpus 5 -- true 2>&1");
  EXPECT_NE(status, 0) << printed;
  EXPECT_NE(printed.find("it asks for 5 cpus and the best governor has 4"), std::string::npos) << printed;
  fs::remove_all(dir);
}

// The status port shows each governor's pools and what is held of them.
TEST_F(ResourcesE2eTest, TheStatusPortShowsPoolsAndTheirUse) {
  auto governors = getJson(cluster->httpAddress(), "/api/governors");
  ASSERT_EQ(governors.size(), 2u);
  auto& first = governors[0]["name"] == "governor-0" ? governors[0] : governors[1];
  auto& second = governors[0]["name"] == "governor-0" ? governors[1] : governors[0];
  EXPECT_EQ(first["resources"]["gpus"]["capacity"], 2.0);
  EXPECT_EQ(first["resources"]["gpus"]["indexed"], true);
  EXPECT_EQ(first["resources"]["scratch"]["capacity"], 10.0 * (1ull << 30));
  EXPECT_EQ(first["resources"]["gpus"]["used"], 0.0);
  EXPECT_EQ(second["resources"]["fpga"]["capacity"], 1.0);
  EXPECT_FALSE(second["resources"].contains("gpus"));
  auto metrics = httpGet(cluster->httpAddress(), "/metrics").body;
  EXPECT_NE(metrics.find("squall_governor_resource{governor=\"governor-0\",resource=\"gpus\"} 2"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("squall_governor_resource_used{governor=\"governor-1\",resource=\"fpga\"} 0"),
            std::string::npos)
      << metrics;
}

// The command line and pipeline files ask the same way.
TEST_F(ResourcesE2eTest, SquallSubmitAndPipelineFilesAskForResources) {
  auto squall = findProgram("squall");
  auto server = " --server " + cluster->serverAddress();
  auto [printed, status] = commandOutput(squall + " submit" + server +
                                         " --resource gpus=0.5 --resource scratch=1G -- sh -c "
                                         "'echo $SQUALL_RESOURCE_GPUS' 2>&1");
  EXPECT_EQ(status, 0) << printed;
  EXPECT_TRUE(printed == "7\n" || printed == "8\n") << printed;
  std::tie(printed, status) = commandOutput(squall + " submit" + server + " --resource gpus=3 -- true 2>&1");
  EXPECT_EQ(status, 1) << printed;
  EXPECT_NE(printed.find("2 gpus, not 3"), std::string::npos) << printed;

  auto dir = fs::path(cluster->workDir()) / "resources-pipeline";
  fs::create_directories(dir);
  std::ofstream(dir / "gpu.toml") << "[step.train]\n"
                                     "shell = 'echo $CUDA_VISIBLE_DEVICES $SQUALL_RESOURCE_FPGA'\n"
                                     "resources = { gpus = 1 }\n"
                                     "stdout = true\n"
                                     "collect = 'out.txt'\n"
                                     "[step.program]\n"
                                     "shell = 'echo $SQUALL_RESOURCE_FPGA'\n"
                                     "resources = { fpga = \"all\" }\n"
                                     "stdout = true\n"
                                     "collect = 'fpga.txt'\n";
  std::tie(printed, status) = commandOutput(squall + " run" + server + " --dry-run " + (dir / "gpu.toml").string());
  EXPECT_EQ(status, 0) << printed;
  EXPECT_NE(printed.find("gpus=1"), std::string::npos) << printed;
  EXPECT_NE(printed.find("fpga=all"), std::string::npos) << printed;
  std::tie(printed, status) = commandOutput(squall + " run" + server + " " + (dir / "gpu.toml").string() + " 2>&1");
  ASSERT_EQ(status, 0) << printed;
  std::ifstream out(dir / "out.txt");
  std::string gpu;
  out >> gpu;
  EXPECT_TRUE(gpu == "7" || gpu == "8") << gpu;
  std::ifstream fpga(dir / "fpga.txt");
  std::string item;
  fpga >> item;
  EXPECT_EQ(item, "0");
  // A bad amount: the file is refused, naming the key.
  std::ofstream(dir / "bad.toml") << "[step.x]\ncommand = ['true']\nresources = { gpus = 'lots' }\n";
  std::tie(printed, status) = commandOutput(squall + " run" + server + " " + (dir / "bad.toml").string() + " 2>&1");
  EXPECT_EQ(status, 2) << printed;
  EXPECT_NE(printed.find("resources.gpus"), std::string::npos) << printed;
}

// Two halves of one GPU and a whole one run at once: the halves share an
// item, the whole one gets the other. Each task waits (bounded) until all
// three are running, so they pass only if they ran together.
// `squall explain`: a task waiting for GPUs names the task holding them;
// one waiting for an input names the task making it; one that ended, how.
TEST_F(ResourcesE2eTest, ExplainSaysWhatATaskWaitsForAndBehindWhom) {
  auto dir = fs::temp_directory_path() / ("squall-explain-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto started = (dir / "started").string(), gate = (dir / "gate").string();
  Client client(cluster->serverAddress());
  auto session = client.newSession("explain");
  auto holder = session.execute(
      Program::shell("touch '" + started + "'; while [ ! -e '" + gate + "' ]; do sleep 0.02; done"));
  // Said to be long, so it is placed first (critical path first) and takes the GPUs.
  holder.name("holder").resource("gpus", "all").expectedDuration(std::chrono::hours(1));
  auto waiter = session.execute(Program::shell("echo done").stdoutOutput());
  waiter.name("waiter").resource("gpus", 1);
  auto after = session.execute(Program::shell("cat in").input(waiter.output(), "in").stdoutOutput());
  after.name("after");
  session.submit();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!fs::exists(started) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(fs::exists(started));

  auto squall = findProgram("squall");
  auto explain = [&](const std::string& task, int expectedStatus = 0) {
    auto [printed, status] = commandOutput(squall + " explain --server " + cluster->serverAddress() + " " +
                                           std::to_string(session.id()) + " " + task + " 2>&1");
    EXPECT_EQ(status, expectedStatus) << printed;
    return printed;
  };
  auto text = explain("waiter");
  EXPECT_NE(text.find("(ready): waiting for resources to be free: gpus"), std::string::npos) << text;
  EXPECT_NE(text.find("governor-0: gpus: 0 of 2 free, the task asks 1; held by task " +
                      std::to_string(holder.id()) + " 'holder'"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("governor-1: offers no 'gpus'"), std::string::npos) << text;
  text = explain("after");
  EXPECT_NE(text.find("(waiting): waiting for 1 input not made yet"), std::string::npos) << text;
  EXPECT_NE(text.find("made by task " + std::to_string(waiter.id()) + " 'waiter', which is ready, not placed yet"),
            std::string::npos)
      << text;
  text = explain(std::to_string(holder.id()));
  EXPECT_NE(text.find("(running): assigned to governor-0"), std::string::npos) << text;
  text = explain("nobody", 1);
  // The task page's JSON shows what each asked for.
  auto base = "/api/sessions/" + std::to_string(session.id()) + "/tasks/";
  auto waiterJson = getJson(cluster->httpAddress(), base + std::to_string(waiter.id()));
  EXPECT_EQ(waiterJson["resources"]["requests"], Json::parse(R"([{"name": "gpus", "amount": "1"}])")) << waiterJson;
  auto holderJson = getJson(cluster->httpAddress(), base + std::to_string(holder.id()));
  EXPECT_EQ(holderJson["resources"]["requests"][0]["amount"], "all");
  EXPECT_EQ(holderJson["policy"]["expectedMs"], 3600000);
  EXPECT_NE(text.find("no task 'nobody'"), std::string::npos) << text;

  std::ofstream(gate).put('\n');
  session.waitAll();
  text = explain("waiter");
  EXPECT_NE(text.find("(finished): finished on governor-0 in "), std::string::npos) << text;
  fs::remove_all(dir);
}

TEST_F(ResourcesE2eTest, FractionsShareOneGpuWhileAWholeOneGoesToAnother) {
  Client client(cluster->serverAddress());
  auto barrier = fs::path(cluster->workDir()) / "gpu-barrier";
  fs::create_directories(barrier);
  auto session = client.newSession("shares");
  std::vector<Task> tasks;
  for (double share : {0.5, 0.5, 1.0}) {
    auto line = "touch " + barrier.string() + "/$$; n=0; while [ $(ls " + barrier.string() +
                " | wc -l) -lt 3 ] && [ $n -lt 400 ]; do sleep 0.05; n=$((n+1)); done; "
                "[ $n -lt 400 ] && echo $CUDA_VISIBLE_DEVICES";
    auto task = session.execute(Program::shell(line).stdoutOutput());
    task.resource("gpus", share);
    task.output().keep();
    tasks.push_back(task);
  }
  session.submit();
  auto a = tasks[0].output().fetch();
  auto b = tasks[1].output().fetch();
  auto whole = tasks[2].output().fetch();
  EXPECT_EQ(a, b);
  EXPECT_NE(a, whole);
  EXPECT_TRUE((a == "7\n" && whole == "8\n") || (a == "8\n" && whole == "7\n")) << a << whole;
}

// 1,000 tasks with mixed requests, each recording when it held which items:
// at no moment do the shares of one GPU add up past one, nor the scratch
// past 10G, nor the fpga past one.
TEST_F(ResourcesE2eTest, NoOverCommitUnderAThousandMixedTasks) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("mixed");
  std::mt19937 random(11);
  struct Ask {
    std::string name;
    double amount;  // -1: all
  };
  std::vector<std::pair<Task, Ask>> tasks;
  const std::string line =
      "a=$(date +%s%N); sleep 0.0$((RANDOM % 3)); b=$(date +%s%N); echo $a $b ${SQUALL_RESOURCE_GPUS:--}";
  for (int i = 0; i < 1000; i++) {
    Ask ask;
    switch (random() % 6) {
      case 0: ask = {"gpus", 0.25}; break;
      case 1: ask = {"gpus", 0.5}; break;
      case 2: ask = {"gpus", 1.0}; break;
      case 3: ask = {"gpus", -1}; break;
      case 4: ask = {"scratch", double(1 + random() % 6)}; break;
      default: ask = {"fpga", 1.0}; break;
    }
    auto task = session.execute(Program({"bash", "-c", line}).stdoutOutput());
    if (ask.amount < 0) {
      task.resource(ask.name, "all");
    } else if (ask.name == "scratch") {
      task.resource(ask.name, std::to_string(int(ask.amount)) + "G");
    } else {
      task.resource(ask.name, ask.amount);
    }
    task.output().keep();
    tasks.emplace_back(task, ask);
  }
  session.submit();
  session.waitAll();
  // Events per item: +share at start, -share at end; ends before starts
  // at the same instant.
  std::map<std::string, std::vector<std::pair<uint64_t, double>>> events;
  for (auto& [task, ask] : tasks) {
    std::istringstream out(task.output().fetch());
    uint64_t start = 0, end = 0;
    std::string ids;
    ASSERT_TRUE(out >> start >> end >> ids) << task.output().fetch();
    std::vector<std::pair<std::string, double>> held;
    if (ask.name == "gpus") {
      std::istringstream list(ids);
      for (std::string id; std::getline(list, id, ',');) {
        held.emplace_back("gpu " + id, ask.amount < 0 || ask.amount >= 1 ? 1.0 : ask.amount);
      }
      EXPECT_EQ(held.size(), ask.amount < 0 ? 2u : 1u) << ids;
    } else {
      held.emplace_back(ask.name, ask.amount);
    }
    for (auto& [item, share] : held) {
      events[item].emplace_back(start, share);
      events[item].emplace_back(end, -share);
    }
  }
  std::map<std::string, double> limit{{"gpu 7", 1.0}, {"gpu 8", 1.0}, {"scratch", 10.0}, {"fpga", 1.0}};
  ASSERT_EQ(events.size(), 4u);
  for (auto& [item, list] : events) {
    std::sort(list.begin(), list.end());
    double held = 0, peak = 0;
    for (auto& [when, delta] : list) {
      held += delta;
      peak = std::max(peak, held);
    }
    EXPECT_LE(peak, limit[item] + 1e-9) << item << " over-committed";
    EXPECT_GT(peak, 0) << item;
  }
}

}  // namespace
}  // namespace squall
