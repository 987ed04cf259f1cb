// Runs a shell command line for the tests that check what a squall program
// prints when it refuses to start. Test thread only.
#pragma once

#include <cstdio>
#include <string>
#include <sys/wait.h>
#include <utility>

namespace squall {

// The command's standard output (add 2>&1 for its errors too) and exit
// status (-1 when it did not exit normally).
inline std::pair<std::string, int> commandOutput(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"popen failed", -1};
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  int status = pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace squall
