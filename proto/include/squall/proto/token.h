// The shared secret that authenticates every connection. No threading rules.
#pragma once

#include <string>

namespace squall {

// The token from, in order: `value` (a flag), the file `file` (a flag;
// surrounding whitespace trimmed), $SQUALL_TOKEN, $SQUALL_TOKEN_FILE.
// Empty when none is given: a server without a token accepts only peers
// without one. Throws FAILED naming an unreadable file.
std::string resolveToken(const std::string& value, const std::string& file);

// Compares in time independent of where the strings differ.
bool tokensEqual(const std::string& a, const std::string& b);

}  // namespace squall
