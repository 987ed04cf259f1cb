#include <gtest/gtest.h>
#include <squall/proto/sandbox-path.h>

#include <string>

namespace squall {
namespace {

TEST(SandboxPathTest, RelativePathsInsideTheSandboxPass) {
  EXPECT_TRUE(checkSandboxPath("a/b.txt") == nullptr);
  EXPECT_TRUE(checkSandboxPath("a/..b") == nullptr);
  EXPECT_TRUE(checkSandboxPath("./a") == nullptr);
}

TEST(SandboxPathTest, PathsThatLeaveOrAreNotPathsAreRefusedSayingWhy) {
  EXPECT_FALSE(checkSandboxPath("") == nullptr);
  EXPECT_FALSE(checkSandboxPath("a/../../b") == nullptr);
  EXPECT_FALSE(checkSandboxPath("..") == nullptr);
  EXPECT_FALSE(checkSandboxPath("../o") == nullptr);
  KJ_IF_MAYBE(problem, checkSandboxPath("/tmp/x")) {
    EXPECT_NE(std::string(problem->cStr()).find("absolute"), std::string::npos);
  } else {
    ADD_FAILURE() << "an absolute path passed";
  }
  EXPECT_FALSE(checkSandboxPath(kj::StringPtr("a\0b", 3)) == nullptr);
  EXPECT_FALSE(checkSandboxPath(kj::str(kj::repeat('a', 4097))) == nullptr);
}

}  // namespace
}  // namespace squall
