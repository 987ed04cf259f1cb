// Whether squall-governor can keep inputs read-only with a mount namespace
// here (--input-isolation mount). Not everywhere: in a chroot "/" is not a
// mount point, so the governor cannot keep its mounts from the host's, and
// user namespaces are refused there too; `auto` then copies inputs. Tests of
// what only mount mode does skip, saying why, where it is not available.
#pragma once

#include <squall/tools/local-cluster.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace squall {

// Asks a governor (once per process): it sets itself up, says which mode it
// chose, and stops because nothing listens on port 1. "" when mount mode
// works, else what the governor said.
inline const std::string& mountIsolationProblem() {
  static const std::string problem = []() -> std::string {
    namespace fs = std::filesystem;
    auto dir = fs::temp_directory_path() / ("squall-isolation-probe-" + std::to_string(getpid()));
    fs::create_directories(dir);
    auto log = dir / "log";
    auto line = "'" + findProgram("squall-governor") + "' --server 127.0.0.1:1 --connect-timeout 0 --work-dir '" +
                (dir / "w").string() + "' --input-isolation mount > /dev/null 2> '" + log.string() + "'";
    [[maybe_unused]] int status = std::system(line.c_str());
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    fs::remove_all(dir);
    auto said = text.str();
    return said.find("event=input-isolation mode=mount") != std::string::npos ? "" : said;
  }();
  return problem;
}

}  // namespace squall
