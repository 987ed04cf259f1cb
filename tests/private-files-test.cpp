// Files private by default (docs/deploy.md, "The security model"): a
// cluster's state directory, the session log and its WAL, each governor's
// work dir, store and sandboxes are its user's alone, while tasks (the same
// user) still read their inputs, write their outputs and are served them,
// in both input isolation modes.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include "isolation-probe.h"

#include <filesystem>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

// The permission bits of `path`, as "700"; "missing" when there is none.
std::string modeOf(const fs::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) < 0) return "missing";
  char text[8];
  snprintf(text, sizeof(text), "%o", st.st_mode & 07777);
  return text;
}

class PrivateFilesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "mount" && !mountIsolationProblem().empty()) {
      GTEST_SKIP() << "no mount mode here: " << mountIsolationProblem();
    }
    char pattern[] = "/tmp/squall-private-files-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    scratch = pattern;
    // As `squall start --work-dir DIR` makes it: DIR does not exist yet.
    ClusterOptions options;
    options.workDir = (scratch / "state" / "cluster").string();
    options.governors = 1;
    options.cpus = 2;
    options.governorArgs = {"--input-isolation", GetParam()};
    cluster = std::make_unique<LocalCluster>(options);
    cluster->start();
  }
  void TearDown() override {
    cluster.reset();
    if (!scratch.empty()) fs::remove_all(scratch);
  }

  fs::path scratch;
  std::unique_ptr<LocalCluster> cluster;
};

TEST_P(PrivateFilesTest, StateLogWorkDirStoreAndSandboxesAreTheirUsersAlone) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("private");
  // Bigger than what a governor keeps in memory: a file in its store, which
  // the task reads through its sandbox (a link, the store's read-only view
  // or a copy).
  std::string big(100000, 'a');
  auto blob = session.blob(big);
  auto task = session.execute(Program::shell("stat -c %a . && wc -c < in && echo made > out")
                                  .input(blob, "in")
                                  .stdoutOutput()
                                  .output("out"));
  auto reader = session.execute(Program({"cat", "o"}).input(task.output(1), "o").stdoutOutput());
  task.output(0).keep();
  reader.output().keep();
  session.submit();
  EXPECT_EQ(task.output(0).fetch(), "700\n100000\n");
  EXPECT_EQ(reader.output().fetch(), "made\n");

  auto state = fs::path(cluster->workDir());
  auto governor = state / "governor-0";
  EXPECT_EQ(modeOf(state), "700");
  EXPECT_EQ(modeOf(state / "server.sqlite"), "600");
  EXPECT_EQ(modeOf(state / "server.sqlite-wal"), "600");
  if (fs::exists(state / "server.sqlite-shm")) {
    EXPECT_EQ(modeOf(state / "server.sqlite-shm"), "600");
  }
  EXPECT_EQ(modeOf(governor), "700");
  EXPECT_EQ(modeOf(governor / "objects"), "700");
  EXPECT_EQ(modeOf(governor / "tasks"), "700");
  if (fs::exists(governor / "objects-ro")) {
    EXPECT_EQ(modeOf(governor / "objects-ro"), "700");
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PrivateFilesTest, ::testing::Values("mount", "copy"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace squall
