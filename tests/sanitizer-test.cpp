// The sanitizer tree's wiring (docs/testing.md): a report in any process a
// test starts ends it with SANITIZER_EXIT_CODE, which the harness and the
// tests take for a failure. Skipped in builds without AddressSanitizer.
#include "sanitizers.h"

#include <gtest/gtest.h>
#include <squall/tools/local-cluster.h>

#include <climits>
#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace squall {
namespace {

// This test program again, running only `test` (a deliberate bug below);
// returns its wait status and what it printed.
std::pair<int, std::string> runAlone(const std::string& test) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n <= 0) return {-1, "cannot read /proc/self/exe"};
  self[n] = '\0';
  auto command = std::string(self) + " --gtest_also_run_disabled_tests --gtest_filter=" + test + " 2>&1";
  FILE* out = popen(command.c_str(), "r");
  if (out == nullptr) return {-1, "popen failed"};
  std::string text;
  char buffer[512];
  while (fgets(buffer, sizeof(buffer), out) != nullptr) text += buffer;
  return {pclose(out), text};
}

// The deliberate bugs, run only by the tests below (DISABLED_ keeps them
// out of every other run). Volatile so the compiler sees none of them.
TEST(SanitizerWiringTest, DISABLED_UseAfterFree) {
  int* volatile value = new int(1);
  delete value;
  volatile int read = *value;
  (void)read;
}

TEST(SanitizerWiringTest, DISABLED_SignedOverflow) {
  volatile int big = INT_MAX;
  volatile int sum = big + 1;
  (void)sum;
}

TEST(SanitizerWiringTest, DISABLED_Leak) {
  // Reachable from nowhere once the test returns.
  volatile auto* leaked = new char[100];
  leaked[0] = 1;
  leaked = nullptr;
}

TEST(SanitizerWiringTest, AReportEndsTheProcessWithTheSanitizerStatus) {
  if (!UNDER_ASAN) GTEST_SKIP() << "not built with SQUALL_SANITIZE=address,undefined";
  auto [status, text] = runAlone("SanitizerWiringTest.DISABLED_UseAfterFree");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == SANITIZER_EXIT_CODE) << status << "\n" << text;
  EXPECT_NE(text.find("heap-use-after-free"), std::string::npos) << text;
}

TEST(SanitizerWiringTest, UndefinedBehaviourEndsTheProcessWithTheSanitizerStatus) {
  if (!UNDER_ASAN) GTEST_SKIP() << "not built with SQUALL_SANITIZE=address,undefined";
  auto [status, text] = runAlone("SanitizerWiringTest.DISABLED_SignedOverflow");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == SANITIZER_EXIT_CODE) << status << "\n" << text;
  EXPECT_NE(text.find("signed integer overflow"), std::string::npos) << text;
}

TEST(SanitizerWiringTest, ALeakAtExitEndsTheProcessWithTheSanitizerStatus) {
  if (!UNDER_ASAN) GTEST_SKIP() << "not built with SQUALL_SANITIZE=address,undefined";
  auto [status, text] = runAlone("SanitizerWiringTest.DISABLED_Leak");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == SANITIZER_EXIT_CODE) << status << "\n" << text;
  EXPECT_NE(text.find("detected memory leaks"), std::string::npos) << text;
}

}  // namespace
}  // namespace squall
