// Where the tests' executor (tests/executors/test-executor.cpp, "testfn")
// was built: tests/CMakeLists.txt gives its path in SQUALL_TEST_EXECUTOR to
// the test programs that start governors with it. Any thread.
#pragma once

#include <cstdlib>
#include <string>

namespace squall {

// The program's path; empty when the test runs without the variable (its
// governors then refuse `--executor testfn=`, saying so).
inline std::string testExecutor() {
  const char* path = getenv("SQUALL_TEST_EXECUTOR");
  return path != nullptr ? path : "";
}

}  // namespace squall
