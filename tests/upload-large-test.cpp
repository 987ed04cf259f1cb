// A 1 GiB constant uploaded from a local file straight to a governor and
// read by two tasks on two governors (the second fetches it from the
// first), with the peak resident sizes of the server and this client far
// below its size: neither holds the bytes. Writes 1 GiB in the cluster's
// temp dir (and 1 GiB in each governor's store); skipped, saying so, when
// the disk has no room for it. LABELS large.
#include "proc-status.h"
#include "sanitizers.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <sys/statvfs.h>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

// 1 GiB; 256 MiB under a sanitizer (CI's time: the same paths, and ASan's
// peaks are not checked).
constexpr uint64_t GIB = plainOrSanitized<uint64_t>(uint64_t(1) << 30, uint64_t(256) << 20);
// A quarter of the constant: a copy of it in a process breaks it.
constexpr uint64_t PEAK_LIMIT_KB = 256 * 1024;

TEST(UploadLargeTest, AGibConstantIsReadByTwoTasksOnTwoGovernors) {
  auto temp = fs::temp_directory_path();
  struct statvfs disk;
  ASSERT_EQ(statvfs(temp.c_str(), &disk), 0) << temp << ": " << strerror(errno);
  uint64_t available = uint64_t(disk.f_bavail) * disk.f_frsize;
  if (available < 3 * GIB + (256 << 20)) {
    GTEST_SKIP() << "the temp dir " << temp << " has " << (available >> 20)
                 << " MiB free; this test writes 3 GiB there (point TMPDIR at a larger disk)";
  }
  ClusterOptions options;
  options.governors = 2;
  options.cpus = 1;
  auto cluster = std::make_unique<LocalCluster>(options);
  cluster->start();
  const std::string work = cluster->workDir();
  {
    // 2^24 lines of 64 bytes.
    auto file = fs::path(work) / "input";
    const std::string line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_";
    auto command = "yes '" + line + "' | head -c " + std::to_string(GIB) + " > '" + file.string() + "'";
    ASSERT_EQ(std::system(command.c_str()), 0) << command;

    Client client(cluster->serverAddress());
    auto session = client.newSession("1 GiB constant");
    auto constant = session.fileBlob(file.string());
    // Each holds its governor's one cpu a while: the second runs on the
    // other governor.
    std::vector<Task> readers;
    for (int i = 0; i < 2; i++) {
      readers.push_back(session.execute(Program::shell("grep -c _ in; sleep 2").input(constant, "in").stdoutOutput()));
      readers.back().output().keep();
    }
    session.submit();
    for (auto& task : readers) EXPECT_EQ(task.output().fetch(), std::to_string(GIB / 64) + "\n");
    EXPECT_NE(readers[0].info().governor, readers[1].info().governor);

    uint64_t serverPeak = procStatusKb(cluster->server().pid(), "VmHWM");
    uint64_t clientPeak = procStatusKb(getpid(), "VmHWM");
    std::printf("peak RSS: server %llu kB, client %llu kB\n", static_cast<unsigned long long>(serverPeak),
                static_cast<unsigned long long>(clientPeak));
    if (!UNDER_ASAN) {
      EXPECT_LT(serverPeak, PEAK_LIMIT_KB) << "the server held the constant";
      EXPECT_LT(clientPeak, PEAK_LIMIT_KB) << "the client held the constant";
    }
  }
  cluster.reset();
  EXPECT_FALSE(fs::exists(work)) << work << " is left behind";
}

}  // namespace
}  // namespace squall
