// How deeply a JSON text nests, found without parsing it: a recursive
// parser (nlohmann-json) overflows the stack on a text such as 100,000 '['
// then 100,000 ']', so user attributes are measured with this loop first.
// Pure function; any thread.
#pragma once

#include <cstddef>
#include <string_view>

namespace squall {

// The deepest nesting of arrays and objects in `text` (brackets inside
// strings do not count), or `limit + 1` as soon as it passes `limit`.
inline size_t jsonNesting(std::string_view text, size_t limit) {
  size_t depth = 0, deepest = 0;
  bool inString = false, escaped = false;
  for (char c : text) {
    if (inString) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        inString = false;
      }
      continue;
    }
    if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return limit + 1;
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
  return deepest;
}

// Attributes nesting deeper than this are refused at submit, and shown as
// text (never parsed) by the status page.
constexpr size_t MAX_ATTRIBUTE_NESTING = 64;

}  // namespace squall
