#include <squall/proto/token.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>

namespace squall {
namespace {

TEST(TokenTest, FlagWinsOverFileAndEnvironment) {
  setenv("SQUALL_TOKEN", "from-env", 1);
  EXPECT_EQ(resolveToken("from-flag", ""), "from-flag");
  EXPECT_EQ(resolveToken("", ""), "from-env");
  unsetenv("SQUALL_TOKEN");
  EXPECT_EQ(resolveToken("", ""), "");
}

TEST(TokenTest, FileIsTrimmedAndMissingFileIsAnError) {
  char path[] = "/tmp/squall-token-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "  secret\n";
  EXPECT_EQ(resolveToken("", path), "secret");
  std::remove(path);
  EXPECT_ANY_THROW(resolveToken("", path));
}

TEST(TokenTest, ComparesWholeStrings) {
  EXPECT_TRUE(tokensEqual("abc", "abc"));
  EXPECT_FALSE(tokensEqual("abc", "abd"));
  EXPECT_FALSE(tokensEqual("abc", "abcd"));
  EXPECT_TRUE(tokensEqual("", ""));
}

}  // namespace
}  // namespace squall
