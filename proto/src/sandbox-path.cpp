#include <squall/proto/sandbox-path.h>

namespace squall {

kj::Maybe<kj::String> checkSandboxPath(kj::StringPtr path) {
  if (path.size() == 0) return kj::str("path is empty");
  if (path[0] == '/') return kj::str("path '", path, "' is absolute; it must be relative to the task's sandbox");
  if (path.size() > 4096) return kj::str("path is longer than 4096 bytes");
  size_t start = 0;
  for (size_t i = 0; i <= path.size(); i++) {
    if (i == path.size() || path[i] == '/') {
      auto part = path.slice(start, i);
      if (part == kj::StringPtr("..")) return kj::str("path '", path, "' contains '..' and would escape the sandbox");
      start = i + 1;
    } else if (path[i] == '\0') {
      return kj::str("path contains a NUL byte");
    }
  }
  return nullptr;
}

}  // namespace squall
