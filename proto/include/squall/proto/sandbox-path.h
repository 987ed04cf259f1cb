// Paths inside a task's sandbox. checkSandboxPath is the rule for them
// (inputs, outputs, make_dir and slice_dir entries): relative, no '..'
// component, no NUL, bounded; shared by the server's submit checks and the
// command line's pipeline checks so that a pipeline file is refused before
// anything is submitted for exactly what the server would refuse. And how
// client, server and governor compare them: "./a//b/" and "a/b" name the
// same place. Lexical only (the governor checks what is really there, see
// governor/src/safe-path.h). Pure functions; any thread.
#pragma once

#include <kj/string.h>
#include <string>
#include <string_view>

namespace squall {

// What is wrong with `path`, or nullptr if it stays inside the sandbox.
kj::Maybe<kj::String> checkSandboxPath(kj::StringPtr path);

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
