// Tests of the bounded tree walk. Test thread only.
#include <squall/proto/tree-walk.h>

#include <cstdlib>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <kj/debug.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/squall-walk-test-XXXXXX";
    KJ_ASSERT(mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

kj::AutoCloseFd openDir(const std::string& path) {
  int fd;
  KJ_SYSCALL(fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), path);
  return kj::AutoCloseFd(fd);
}

TEST(TreeWalkTest, EntriesComeInNameOrderAndEachEnteredDirectoryIsLeft) {
  TempDir dir;
  for (auto sub : {"/b", "/b/c", "/a-x"}) ASSERT_EQ(mkdir((dir.path + sub).c_str(), 0755), 0);
  ASSERT_EQ(symlink("/", (dir.path + "/b/l").c_str()), 0);
  TreeWalk walk(openDir(dir.path), "tree", TreeLimits());
  std::string seen;
  for (;;) {
    auto step = walk.next();
    if (step == TreeWalk::Step::END) break;
    if (step == TreeWalk::Step::LEAVE) {
      seen += "leave " + std::string(walk.path().cStr()) + "\n";
      continue;
    }
    seen += std::string(walk.path().cStr()) + " " + std::to_string(walk.depth()) + "\n";
    // "a-x" is not entered: its LEAVE never comes.
    if (S_ISDIR(walk.stat().st_mode) && walk.name() != "a-x") walk.enter();
  }
  EXPECT_EQ(seen, "a-x 1\nb 1\nb/c 2\nleave b/c\nb/l 2\nleave b\n");
}

// Going up opens "..": a directory moved meanwhile must not lead the walk
// somewhere else.
TEST(DirCursorTest, GoingUpAfterADirectoryWasMovedFails) {
  TempDir dir;
  for (auto sub : {"/root", "/root/a", "/root/a/b", "/elsewhere"}) {
    ASSERT_EQ(mkdir((dir.path + sub).c_str(), 0755), 0);
  }
  DirCursor cursor(openDir(dir.path + "/root"));
  cursor.enter("a");
  cursor.enter("b");
  ASSERT_EQ(rename((dir.path + "/root/a").c_str(), (dir.path + "/elsewhere/a").c_str()), 0);
  cursor.leave();  // b's parent is still a
  EXPECT_EQ(cursor.depth(), 1u);
  auto failure = kj::runCatchingExceptions([&]() { cursor.leave(); });
  ASSERT_TRUE(failure != nullptr);
  EXPECT_EQ(KJ_ASSERT_NONNULL(failure).getDescription(), "a directory was moved while its tree was walked");
}

}  // namespace
}  // namespace squall
