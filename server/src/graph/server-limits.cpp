#include "server-limits.h"

#include <cerrno>
#include <cstdlib>

namespace squall {

const std::vector<Limits::Entry>& Limits::entries() {
  static const std::vector<Entry> all = {
      {"submit-bytes", &Limits::submitBytes, true, "bytes of one submit, constants included"},
      {"submit-tasks", &Limits::submitTasks, false, "tasks in one submit"},
      {"submit-objects", &Limits::submitObjects, false, "objects in one submit"},
      {"client-submits", &Limits::clientSubmits, false, "submits one client has open at once"},
      {"pending-bytes", &Limits::pendingBytes, true, "bytes of all open submits together"},
      {"session-tasks", &Limits::sessionTasks, false, "tasks in one session"},
      {"session-objects", &Limits::sessionObjects, false, "objects in one session"},
      {"constant-bytes", &Limits::constantBytes, true, "bytes of one constant"},
      {"task-bytes", &Limits::taskBytes, true, "bytes of one task as submitted"},
      {"attribute-bytes", &Limits::attributeBytes, true, "bytes of one task's attributes"},
      {"attribute-depth", &Limits::attributeDepth, false, "nesting of one task's attributes"},
      {"path-bytes", &Limits::pathBytes, true, "bytes of one path in a task"},
      {"arg-bytes", &Limits::argBytes, true, "bytes of one argument or environment entry"},
      {"wait-ids", &Limits::waitIds, false, "ids in one wait"},
      {"time-limit-ms", &Limits::timeLimitMs, false, "a task's time limit, in milliseconds"},
  };
  return all;
}

Limits Limits::unbounded() {
  Limits limits;
  for (auto& entry : entries()) limits.*entry.member = UINT64_MAX;
  return limits;
}

std::optional<std::string> Limits::set(const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos) return "'" + assignment + "' is not NAME=VALUE";
  auto name = assignment.substr(0, eq);
  auto text = assignment.substr(eq + 1);
  for (auto& entry : entries()) {
    if (name != entry.name) continue;
    const char* begin = text.c_str();
    char* end = nullptr;
    errno = 0;
    unsigned long long value = begin[0] >= '0' && begin[0] <= '9' ? strtoull(begin, &end, 10) : 0;
    if (end == nullptr || errno != 0) return "limit " + name + ": '" + text + "' is not a number";
    int shift = 0;
    if (entry.bytes && *end != '\0' && end[1] == '\0') {
      switch (*end) {
        case 'K': shift = 10; break;
        case 'M': shift = 20; break;
        case 'G': shift = 30; break;
        case 'T': shift = 40; break;
        default: break;
      }
      if (shift != 0) end++;
    }
    if (*end != '\0') return "limit " + name + ": '" + text + "' is not a number";
    if (value == 0) return "limit " + name + " must be at least 1";
    if (shift != 0 && value > (UINT64_MAX >> shift)) return "limit " + name + ": '" + text + "' is too large";
    uint64_t bytes = static_cast<uint64_t>(value) << shift;
    if (entry.member == &Limits::constantBytes && bytes > MAX_CONSTANT_BYTES) {
      return "limit constant-bytes can be at most " + std::to_string(MAX_CONSTANT_BYTES) +
             " (a constant travels to its governor in one message, below Cap'n Proto's 64 MiB)";
    }
    this->*entry.member = bytes;
    return std::nullopt;
  }
  std::string known;
  for (auto& entry : entries()) known += std::string(known.empty() ? "" : ", ") + entry.name;
  return "unknown limit '" + name + "' (known: " + known + ")";
}

std::string Limits::named(const uint64_t& member) const {
  for (auto& entry : entries()) {
    if (&(this->*entry.member) == &member) return std::string(entry.name) + "=" + std::to_string(member);
  }
  return "?";
}

}  // namespace squall
