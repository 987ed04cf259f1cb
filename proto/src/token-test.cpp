#include <squall/proto/token.h>

#include <cstdio>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <kj/exception.h>

namespace squall {
namespace {

// A state directory of the test's own, for the default token file.
class StateDir {
 public:
  StateDir() {
    path = (std::filesystem::temp_directory_path() / "squall-token-state-XXXXXX").string();
    EXPECT_NE(mkdtemp(path.data()), nullptr);
    setenv("XDG_STATE_HOME", path.c_str(), 1);
  }
  ~StateDir() {
    unsetenv("XDG_STATE_HOME");
    std::filesystem::remove_all(path);
  }
  std::string path;
};

TEST(TokenTest, FlagWinsOverFileAndEnvironment) {
  StateDir state;
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
  // An empty (or blank) file and a missing one: errors that say so, in
  // words (no assertion text).
  auto errorOf = [&]() -> std::string {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { resolveToken("", path); })) {
      return e->getDescription().cStr();
    }
    return "no error";
  };
  std::ofstream(path) << " \n";
  EXPECT_EQ(errorOf(), std::string("the token file ") + path +
                           " is empty: it should hold the cluster's shared secret (docs/deploy.md)");
  std::remove(path);
  EXPECT_EQ(errorOf(), std::string("cannot read the token file ") + path + ": No such file or directory");
}

TEST(TokenTest, TheDefaultFileIsMadeOnceOwnerOnlyAndFoundLast) {
  StateDir state;
  auto path = defaultTokenFile();
  EXPECT_EQ(path, state.path + "/squall/token");
  EXPECT_EQ(resolveToken("", ""), "");  // none yet
  auto made = ensureTokenFile(path);
  EXPECT_EQ(made.size(), 64u);
  EXPECT_EQ(made.find_first_not_of("0123456789abcdef"), std::string::npos);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ensureTokenFile(path), made);  // kept, not made again
  EXPECT_EQ(resolveToken("", ""), made);
  setenv("SQUALL_TOKEN", "from-env", 1);
  EXPECT_EQ(resolveToken("", ""), "from-env");
  unsetenv("SQUALL_TOKEN");
  // Without XDG_STATE_HOME: under $HOME.
  unsetenv("XDG_STATE_HOME");
  const char* home = getenv("HOME");
  std::string saved = home != nullptr ? home : "";
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(defaultTokenFile(), "/home/someone/.local/state/squall/token");
  if (home != nullptr) setenv("HOME", saved.c_str(), 1);
}

TEST(TokenTest, AnOpenAddressWithoutATokenIsRefusedSayingWhatToDo) {
  EXPECT_TRUE(isLoopbackAddress("127.0.0.1:7210"));
  EXPECT_TRUE(isLoopbackAddress("127.3.4.5:0"));
  EXPECT_TRUE(isLoopbackAddress("[::1]:7210"));
  EXPECT_TRUE(isLoopbackAddress("localhost:7210"));
  EXPECT_FALSE(isLoopbackAddress("0.0.0.0:7210"));
  EXPECT_FALSE(isLoopbackAddress("[::]:7210"));
  EXPECT_FALSE(isLoopbackAddress("*:7210"));
  EXPECT_FALSE(isLoopbackAddress("10.0.0.2:0"));
  EXPECT_FALSE(isLoopbackAddress("node7:7210"));
  auto problem = openListenProblem("0.0.0.0:7210", "", false, "run any program");
  EXPECT_NE(problem.find("refusing to listen on 0.0.0.0:7210 without a token: anyone who can reach it could run "
                         "any program"),
            std::string::npos)
      << problem;
  EXPECT_NE(problem.find("--token-file"), std::string::npos) << problem;
  EXPECT_NE(problem.find("--insecure"), std::string::npos) << problem;
  EXPECT_EQ(openListenProblem("0.0.0.0:7210", "secret", false, "x"), "");
  EXPECT_EQ(openListenProblem("0.0.0.0:7210", "", true, "x"), "");
  EXPECT_EQ(openListenProblem("127.0.0.1:7210", "", false, "x"), "");
}

TEST(TokenTest, ComparesWholeStrings) {
  EXPECT_TRUE(tokensEqual("abc", "abc"));
  EXPECT_FALSE(tokensEqual("abc", "abd"));
  EXPECT_FALSE(tokensEqual("abc", "abcd"));
  EXPECT_TRUE(tokensEqual("", ""));
}

}  // namespace
}  // namespace squall
