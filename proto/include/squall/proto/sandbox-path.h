// Paths inside a task's sandbox as client, server and governor compare
// them: "./a//b/" and "a/b" name the same place. Lexical only (the governor
// checks what is really there, see governor/src/safe-path.h). No threading
// rules.
#pragma once

#include <string>
#include <string_view>

namespace squall {

// `path` with "." and empty components dropped: "./a//b/" is "a/b".
inline std::string normalisedSandboxPath(std::string_view path) {
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= path.size(); i++) {
    if (i == path.size() || path[i] == '/') {
      auto part = path.substr(start, i - start);
      if (!part.empty() && part != ".") {
        if (!out.empty()) out += '/';
        out += part;
      }
      start = i + 1;
    }
  }
  return out;
}

// True when the normalised path `inner` is `outer` or lies inside it.
inline bool isAtOrInside(std::string_view inner, std::string_view outer) {
  return inner == outer || (inner.size() > outer.size() && inner.substr(0, outer.size()) == outer &&
                            inner[outer.size()] == '/');
}

}  // namespace squall
