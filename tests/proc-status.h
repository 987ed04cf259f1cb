// A process's memory figures as the kernel reports them in /proc/PID/status,
// for the tests that bound how much a squall process held. Test thread only.
#pragma once

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <sys/types.h>

namespace squall {

// The kB value of `field` (VmHWM: peak resident size, VmRSS: current) of a
// live process; throws when the process or the field is not there.
inline uint64_t procStatusKb(pid_t pid, const std::string& field) {
  auto path = "/proc/" + std::to_string(pid) + "/status";
  std::ifstream status(path);
  if (!status) throw std::runtime_error("cannot read " + path);
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  throw std::runtime_error("no " + field + " in " + path);
}

}  // namespace squall
