// A 1 GiB input read by a function with no copy (issue 14's acceptance
// test), against a real server and governor: the blob is made on the
// governor by a program (the client uploads none of it), testfn/readall
// (tests/executors) reads it whole through its mapping, and the peak
// resident sizes of the executor process, the governor and this client stay
// far below its size. Writes 1 GiB in the temp dir, removed with the
// cluster; skipped, saying so, when the disk has no room for it.
#include "proc-status.h"
#include "sanitizers.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sys/statvfs.h>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t GIB = uint64_t(1) << 30;
// A quarter of the input: a copy of it in any of the processes breaks it.
constexpr uint64_t PEAK_LIMIT_KB = 256 * 1024;

// The value of NAME in readall's "NAME=VALUE ..." answer.
std::string field(const std::string& answer, const std::string& name) {
  auto at = (" " + answer).find(" " + name + "=");
  if (at == std::string::npos) return "";
  auto value = answer.substr(at + name.size() + 1);
  return value.substr(0, value.find(' '));
}

TEST(TasklibLargeTest, AGibInputIsReadThroughItsMappingWithNoCopy) {
  const char* executor = getenv("SQUALL_TEST_EXECUTOR");
  ASSERT_NE(executor, nullptr) << "SQUALL_TEST_EXECUTOR names the test executor (ctest sets it)";
  auto temp = fs::temp_directory_path();
  struct statvfs disk;
  ASSERT_EQ(statvfs(temp.c_str(), &disk), 0) << temp << ": " << strerror(errno);
  uint64_t available = uint64_t(disk.f_bavail) * disk.f_frsize;
  if (available < GIB + (256 << 20)) {
    GTEST_SKIP() << "the temp dir " << temp << " has " << (available >> 20)
                 << " MiB free; this test writes 1 GiB there (point TMPDIR at a larger disk)";
  }

  ClusterOptions options;
  options.governors = 1;
  options.cpus = 1;
  options.governorArgs = {"--executor", std::string("testfn=") + executor};
  auto cluster = std::make_unique<LocalCluster>(options);
  cluster->start();
  const std::string work = cluster->workDir();
  {
    Client client(cluster->serverAddress());
    auto session = client.newSession("1 GiB input");
    // 2^24 lines of 64 bytes, made by a program on the governor.
    const std::string line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
    ASSERT_EQ(GIB % (line.size() + 1), 0u);
    auto generate = session.execute(
        Program::shell("yes '" + line + "' | head -c " + std::to_string(GIB) + " > big").output("big").name("generate"));
    auto read = session.call("testfn/readall", {generate.output()});
    read.output().keep();
    session.submit();
    auto answer = read.output().fetch();

    uint64_t lines = GIB / (line.size() + 1);
    uint64_t lineSum = '\n';
    for (unsigned char c : line) lineSum += c;
    EXPECT_EQ(field(answer, "bytes"), std::to_string(GIB)) << answer;
    EXPECT_EQ(field(answer, "newlines"), std::to_string(lines)) << answer;
    EXPECT_EQ(field(answer, "sum"), std::to_string(lines * lineSum)) << answer;
    EXPECT_EQ(field(answer, "mapped"), "yes") << answer;  // a store file, not bytes in the call

    // Read while the executor process and the governor still run.
    auto pid = field(answer, "pid");
    ASSERT_FALSE(pid.empty()) << answer;
    uint64_t executorPeak = procStatusKb(std::stoi(pid), "VmHWM");
    uint64_t governorPeak = procStatusKb(cluster->governor(0).pid(), "VmHWM");
    uint64_t clientPeak = procStatusKb(getpid(), "VmHWM");
    std::printf("peak RSS: executor %llu kB, governor %llu kB, client %llu kB\n",
                static_cast<unsigned long long>(executorPeak), static_cast<unsigned long long>(governorPeak),
                static_cast<unsigned long long>(clientPeak));
    // ASan keeps freed blocks in a quarantine (256 MiB by default) and adds
    // its shadow: the peaks then say nothing of copies. The bytes are still
    // read and checked.
    if (!UNDER_ASAN) {
      EXPECT_LT(executorPeak, PEAK_LIMIT_KB) << "the executor process held the input";
      EXPECT_LT(governorPeak, PEAK_LIMIT_KB) << "the governor held the input";
      EXPECT_LT(clientPeak, PEAK_LIMIT_KB) << "the client held the input";
    }
  }
  // Stopping the cluster removes its work dir, the 1 GiB with it.
  cluster.reset();
  EXPECT_FALSE(fs::exists(work)) << work << " is left behind";
}

}  // namespace
}  // namespace squall
