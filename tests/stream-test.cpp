// Live streams end to end (issue 4): programs reading a stream while its
// producer writes it, on one governor and across two, against real server
// and governor processes. Reference results come from the same commands run
// by /bin/sh here.
#include "cluster-suite.h"
#include "proc-status.h"
#include "sanitizers.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// stdout of `sh -c command`, run here.
std::string shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("popen failed");
  std::string out;
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  int status = pclose(pipe);
  if (status != 0) throw std::runtime_error("'" + command + "' failed: " + std::to_string(status));
  return out;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

Program streamFrom(const std::string& line) {
  return Program::shell(line).stdoutOutput(ObjectKind::STREAM);
}

class StreamTest : public ClusterSuite<StreamTest> {};

TEST_F(StreamTest, AReaderGetsEveryByteWhileTheProducerRuns) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("pipe");
  auto producer = session.execute(streamFrom("seq 1 300000").name("seq"));
  auto reader = session.execute(
      Program({"cksum"}).stdinFrom(producer.output()).stdoutOutput().name("cksum"));
  reader.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(reader.output().fetch(), shell("seq 1 300000 | cksum"));
  // Not kept, not read later: it flowed and is gone, but its size is known.
  auto info = producer.output().info();
  EXPECT_EQ(info.kind, ObjectKind::STREAM);
  EXPECT_EQ(info.state, "removed");
  EXPECT_EQ(info.size, shell("seq 1 300000").size());
  EXPECT_TRUE(info.locations.empty());
}

TEST_F(StreamTest, FanOutGivesEachReaderEveryByte) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("fan-out");
  auto producer = session.execute(streamFrom("seq 1 200000"));
  std::vector<Task> readers;
  for (auto* command : {"cksum", "wc -l", "tail -n 1"}) {
    readers.push_back(session.execute(
        Program::shell(command).stdinFrom(producer.output()).stdoutOutput().name(command)));
    readers.back().output().keep();
  }
  session.submit();
  session.waitAll();
  EXPECT_EQ(readers[0].output().fetch(), shell("seq 1 200000 | cksum"));
  EXPECT_EQ(readers[1].output().fetch(), "200000\n");
  EXPECT_EQ(readers[2].output().fetch(), "200000\n");
}

TEST_F(StreamTest, AStreamChainRunsAsAShellPipe) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("chain");
  auto a = session.execute(streamFrom("seq 1 50000"));
  auto b = session.execute(Program::shell("grep 7").stdinFrom(a.output()).stdoutOutput(ObjectKind::STREAM));
  auto c = session.execute(Program::shell("sort | uniq -c | sort -rn | head -n 5")
                               .stdinFrom(b.output())
                               .stdoutOutput());
  c.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(c.output().fetch(), shell("seq 1 50000 | grep 7 | sort | uniq -c | sort -rn | head -n 5"));
}

TEST_F(StreamTest, NamedPipesCarryStreamsInAndOut) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("fifos");
  auto producer = session.execute(
      Program::shell("seq 1 1000 > numbers.fifo").output("numbers.fifo", ObjectKind::STREAM));
  auto reader = session.execute(
      Program::shell("wc -l < in.fifo").input(producer.output(), "in.fifo").stdoutOutput());
  reader.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_EQ(reader.output().fetch(), "1000\n");
}

TEST_F(StreamTest, AKeptStreamIsFetchedAfterwardsAsWhatFlowed) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("kept");
  auto producer = session.execute(streamFrom("seq 1 100000"));
  producer.output().keep();
  auto reader = session.execute(
      Program({"cksum"}).stdinFrom(producer.output()).stdoutOutput());
  reader.output().keep();
  // Read after its end too: waits, then reads the stored bytes.
  auto after = session.concat({producer.output(), session.blob("end\n")});
  after.output().keep();
  session.submit();
  session.waitAll();
  auto expected = shell("seq 1 100000");
  EXPECT_EQ(producer.output().fetch(), expected);
  EXPECT_EQ(reader.output().fetch(), shell("seq 1 100000 | cksum"));
  EXPECT_EQ(after.output().fetch(), expected + "end\n");
  // A later submit reads the ended, kept stream like a blob.
  auto later = session.execute(Program({"wc", "-l"}).stdinFrom(producer.output()).stdoutOutput());
  later.output().keep();
  session.submit();
  EXPECT_EQ(later.output().fetch(), "100000\n");
}

TEST_F(StreamTest, AFailingProducerFailsItsReadersSayingSo) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("bad-producer");
  // Allowed to fail, so that the session fails because of the reader.
  auto producer = session.execute(streamFrom("seq 1 1000; echo disk on fire >&2; exit 3").name("gen"));
  producer.allowFailure();
  auto reader = session.execute(Program({"cat"}).stdinFrom(producer.output()).stdoutOutput().name("cat"));
  session.submit();
  try {
    session.waitAll();
    FAIL() << "the reader should fail";
  } catch (const TaskFailed& failure) {
    EXPECT_EQ(failure.task, reader.id());
    EXPECT_NE(std::string(failure.what()).find("producer"), std::string::npos) << failure.what();
    EXPECT_NE(std::string(failure.what()).find("gen"), std::string::npos) << failure.what();
  }
  auto info = producer.info();
  EXPECT_EQ(info.state, "failed");
  EXPECT_NE(info.stderrTail.find("disk on fire"), std::string::npos);
}

TEST_F(StreamTest, AReaderThatStopsEarlyIsFineUnlessTheEdgeSaysOtherwise) {
  Client client(cluster->serverAddress());
  {
    auto session = client.newSession("head");
    auto producer = session.execute(Program({"yes"}).stdoutOutput(ObjectKind::STREAM).name("yes"));
    auto reader = session.execute(Program({"head", "-n", "3"}).stdinFrom(producer.output()).stdoutOutput());
    reader.output().keep();
    session.submit();
    session.waitAll();
    EXPECT_EQ(reader.output().fetch(), "y\ny\ny\n");
    EXPECT_EQ(producer.info().state, "finished");
  }
  {
    auto session = client.newSession("strict-head");
    auto producer = session.execute(Program({"yes"}).stdoutOutput(ObjectKind::STREAM).name("yes"));
    auto head = session.execute(Program({"head", "-n", "3"})
                                    .stdinFrom(producer.output())
                                    .stdoutOutput()
                                    .brokenPipeIsError()
                                    .name("head"));
    session.submit();
    try {
      session.waitAll();
      FAIL() << "the producer should fail";
    } catch (const TaskFailed& failure) {
      EXPECT_EQ(failure.task, producer.id());
      auto s = std::to_string(session.id()) + "/";
      EXPECT_EQ(std::string(failure.what()),
                "task " + std::to_string(producer.id()) + " (yes) failed: reader task " + s +
                    std::to_string(head.id()) + " closed its end of stream " + s +
                    std::to_string(producer.output().id()) + " early (broken pipe)");
    }
  }
}

TEST_F(StreamTest, GroupsThatCanNeverFitAreRefusedAtSubmit) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("too-big");
  auto producer = session.execute(streamFrom("yes").cpus(2));
  for (int i = 0; i < 2; i++) {
    session.execute(Program({"head", "-n", "1"}).stdinFrom(producer.output()).stdoutOutput().cpus(2));
  }
  try {
    session.submit();
    FAIL() << "accepted a group of 6 cpus on 4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("together they need 6 cpus but the governors have 4"),
              std::string::npos)
        << e.what();
  }
  // Nothing of it was applied; the session still works.
  auto ok = session.concat({session.blob("fine")});
  ok.output().keep();
  session.submit();
  EXPECT_EQ(ok.output().fetch(), "fine");
}

// Two governors with one cpu each, and a producer and a reader that each ask
// for a cpu of their own (else they would share one): they always run on
// different governors.
class CrossGovernorStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster = std::make_unique<LocalCluster>([] {
      ClusterOptions options;
      options.governors = 2;
      options.cpus = 1;
      return options;
    }());
    cluster->start();
    scratch = fs::temp_directory_path() / ("squall-stream-" + std::to_string(getpid()) + "-" +
                                           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(scratch);
  }
  void TearDown() override { fs::remove_all(scratch); }
  std::unique_ptr<LocalCluster> cluster;
  fs::path scratch;
};

TEST_F(CrossGovernorStreamTest, TwoGibArriveIntactWithBoundedMemory) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("2gib");
  // Text that does not repeat (a counter per line), cut at 2 GiB (512 MiB
  // under a sanitizer: CI's time; the buffers cycle the same way).
  const uint64_t bytes = plainOrSanitized<uint64_t>(uint64_t(2) << 30, uint64_t(512) << 20);
  const std::string generate =
      "seq -f '%020.0f squall stream test line' 1 50000000 | head -c " + std::to_string(bytes);
  auto producer = session.execute(streamFrom(generate).cpus(1).name("generate"));
  auto reader = session.execute(
      Program({"cksum"}).stdinFrom(producer.output()).stdoutOutput().cpus(1).name("cksum"));
  reader.output().keep();
  session.submit();
  session.waitAll();
  EXPECT_NE(producer.info().governor, reader.info().governor);
  EXPECT_EQ(reader.output().fetch(), shell(generate + " | cksum"));
  EXPECT_EQ(producer.output().info().size, bytes);
  for (size_t i = 0; i < 2; i++) {
    auto peakKb = procStatusKb(cluster->governor(i).pid(), "VmHWM");
    // ASan keeps freed blocks in a quarantine (256 MiB by default) and
    // adds its shadow: the peak then says nothing of the stream's buffers.
    if (!UNDER_ASAN) {
      EXPECT_LT(peakKb, 200u * 1024) << "governor " << i << " peaked at " << peakKb << " kB";
    }
    std::printf("governor %zu peak RSS: %llu kB\n", i, static_cast<unsigned long long>(peakKb));
  }
}

TEST_F(CrossGovernorStreamTest, ASlowReaderThrottlesTheProducer) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("slow");
  auto pidFile = scratch / "producer.pid";
  auto gate = scratch / "gate";
  ASSERT_EQ(mkfifo(gate.c_str(), 0600), 0);
  // 256 MiB offered; the reader reads nothing until the gate opens.
  auto producer = session.execute(
      streamFrom("echo $$ > " + pidFile.string() + "; exec dd if=/dev/zero bs=1M count=256 2>/dev/null")
          .cpus(1));
  auto reader = session.execute(Program::shell("cat " + gate.string() + " > /dev/null; wc -c")
                                    .stdinFrom(producer.output())
                                    .stdoutOutput()
                                    .cpus(1));
  reader.output().keep();
  session.submit();
  // No event says "the reader has started" or "the producer is blocked":
  // look (bounded) until the reader has opened the gate and the kernel shows
  // the producer waiting in a pipe write.
  int gateFd = -1;
  pid_t pid = 0;
  std::string wchan;
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (gateFd < 0) gateFd = open(gate.c_str(), O_WRONLY | O_NONBLOCK);  // ENXIO until then
    if (pid == 0 && fs::exists(pidFile)) {
      auto text = slurp(pidFile);
      if (!text.empty() && text.back() == '\n') pid = std::stoi(text);
    }
    if (pid != 0) {
      wchan = slurp("/proc/" + std::to_string(pid) + "/wchan");
      if (gateFd >= 0 && wchan.find("pipe_write") != std::string::npos) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_GE(gateFd, 0) << "the reader never started";
  ASSERT_NE(wchan.find("pipe_write"), std::string::npos) << "producer never blocked: " << wchan;
  std::istringstream io(slurp("/proc/" + std::to_string(pid) + "/io"));
  uint64_t written = 0;
  for (std::string line; std::getline(io, line);) {
    if (line.rfind("wchar:", 0) == 0) written = std::stoull(line.substr(6));
  }
  std::printf("producer blocked after %llu bytes with the reader stopped\n",
              static_cast<unsigned long long>(written));
  EXPECT_LT(written, 64u << 20) << "the producer ran far ahead of a stopped reader";
  close(gateFd);
  session.waitAll();
  EXPECT_EQ(reader.output().fetch(), std::to_string(256u << 20) + "\n");
}

TEST_F(CrossGovernorStreamTest, AGovernorDyingMidStreamFailsTheGroup) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("dying");
  auto producer = session.execute(Program({"yes"}).stdoutOutput(ObjectKind::STREAM).cpus(1).name("yes"));
  session.execute(Program::shell("cat > /dev/null").stdinFrom(producer.output()).cpus(1).name("sink"));
  session.submit();
  ASSERT_EQ(session.state().running, 2u);
  cluster->governor(1).signal(SIGKILL);
  try {
    session.waitAll();
    FAIL() << "the session should fail";
  } catch (const TaskFailed& failure) {
    std::string what = failure.what();
    EXPECT_TRUE(what.find("disconnected") != std::string::npos ||
                what.find("lost") != std::string::npos)
        << what;
  }
  EXPECT_TRUE(cluster->server().running());
  EXPECT_TRUE(cluster->governor(0).running());
}

}  // namespace
}  // namespace squall
