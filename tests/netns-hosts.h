// Hosts on one machine for the multi-host tests: network namespaces joined
// by a bridge, made by tools/netns.sh in the constructor and removed in the
// destructor, however the test ends (a failed assertion, an exception).
// Test thread only.
#pragma once

#include "command-output.h"

#include <cstdio>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unistd.h>
#include <vector>

namespace squall {

class NetnsHosts {
 public:
  // `tools/netns.sh up prefix count rate`. Throws std::runtime_error with
  // the script's message when it fails, unless this machine refuses
  // namespaces (its exit status 77): refused() then says why.
  NetnsHosts(std::string prefix, size_t count, const std::string& rate) : prefix(std::move(prefix)) {
    auto [output, status] = commandOutput(script() + " up " + this->prefix + " " + std::to_string(count) +
                                          " " + rate + " 2>&1");
    if (status == 77) {
      why = output;
      return;
    }
    if (status != 0) throw std::runtime_error("tools/netns.sh up failed: " + output);
    std::istringstream lines(output);
    std::string name, address;
    while (lines >> name >> address) hosts.push_back({name, address});
    if (hosts.size() != count) {
      down();
      throw std::runtime_error("tools/netns.sh up printed: " + output);
    }
  }
  ~NetnsHosts() { down(); }
  NetnsHosts(const NetnsHosts&) = delete;
  NetnsHosts& operator=(const NetnsHosts&) = delete;

  // Why namespaces are refused here; nullopt when the hosts were made.
  const std::optional<std::string>& refused() const { return why; }
  const std::string& name(size_t i) const { return hosts.at(i).name; }
  const std::string& address(size_t i) const { return hosts.at(i).address; }
  // The command prefix that runs a program on host i: it enters the
  // host's network namespace and execs the program (see
  // ClusterOptions::serverWrap). nsenter rather than `ip netns exec`, which
  // also makes / a slave mount and so fails in a chroot (fresh-debian).
  std::vector<std::string> exec(size_t i) const { return {"nsenter", "--net=/run/netns/" + name(i)}; }
  // Runs `ip args` on host i (e.g. "link set eth0 down" cuts it off).
  void ip(size_t i, const std::string& args) const {
    auto command = "nsenter --net=/run/netns/" + name(i) + " ip " + args;
    auto [output, status] = commandOutput(command + " 2>&1");
    if (status != 0) throw std::runtime_error(command + ": " + output);
  }

  // A prefix of this process's own, `mh` and its pid in hex (8 characters
  // at most: pids stay below 2^22). First removes the hosts of such
  // prefixes whose process is gone (killed by ctest's timeout before its
  // destructor ran).
  static std::string processPrefix() {
    auto [list, status] = commandOutput("ip netns list 2>/dev/null");
    std::regex ours("^mh([0-9a-f]{1,6})-(?:[0-9]+|sw)\\b");
    std::istringstream lines(list);
    for (std::string line; std::getline(lines, line);) {
      std::smatch match;
      if (std::regex_search(line, match, ours)) {
        pid_t owner = static_cast<pid_t>(std::stoul(match[1], nullptr, 16));
        if (processGone(owner)) commandOutput(script() + " down mh" + match[1].str());
      }
    }
    char hex[16];
    std::snprintf(hex, sizeof(hex), "mh%x", static_cast<unsigned>(getpid()));
    return hex;
  }

 private:
  struct Host {
    std::string name;
    std::string address;
  };
  std::string prefix;
  std::vector<Host> hosts;
  std::optional<std::string> why;

  static std::string script() { return SQUALL_NETNS_SCRIPT; }
  // A zombie counts as gone: where no init reaps orphans (a container),
  // a killed test stays one.
  static bool processGone(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string text;
    std::getline(stat, text);
    auto end = text.rfind(") ");
    return end == std::string::npos || text.compare(end + 2, 1, "Z") == 0;
  }
  void down() { commandOutput(script() + " down " + prefix + " 2>&1"); }
};

}  // namespace squall
