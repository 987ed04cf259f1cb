// The shared secret that authenticates every connection. No threading rules.
#pragma once

#include <string>
#include <vector>

namespace squall {

// The token from, in order: `value` (a flag), the file `file` (a flag;
// surrounding whitespace trimmed), $SQUALL_TOKEN, $SQUALL_TOKEN_FILE, and
// the default token file (defaultTokenFile()) if it exists. Empty when
// none is given: a server or governor without a token checks none
// (loopback only, unless --insecure). Throws FAILED naming an unreadable
// file.
std::string resolveToken(const std::string& value, const std::string& file);

// Where `squall start` keeps the token it makes and where every part and
// client looks for one by default: $XDG_STATE_HOME/squall/token, else
// $HOME/.local/state/squall/token; "" when neither variable is set.
std::string defaultTokenFile();

// The token in `path`, or a new random one (256 bits, hex) written there
// first, readable by its owner only (0600; the directories made 0700).
// Throws FAILED naming the path when it cannot.
std::string ensureTokenFile(const std::string& path);

// Why listening on `address` is refused, or "": an address off loopback
// with no token, unless `insecure`. `exposed` says what a stranger who
// reaches it could do ("run any program as this user").
std::string openListenProblem(const std::string& address, const std::string& token, bool insecure,
                              const std::string& exposed);

// What a part that listens on `address` (announced as `announced`) logs
// about its token, key=value lines: listening open without one
// (--insecure; `exposed` as for openListenProblem), and a token given on
// its command line (`onCommandLine`), which every user sees in ps.
std::vector<std::string> tokenWarnings(const std::string& address, const std::string& announced,
                                       const std::string& token, bool onCommandLine, const std::string& exposed);

// Whether HOST:PORT (or HOST) names a loopback address: 127.0.0.0/8, ::1,
// localhost. A port-0 or wildcard address (0.0.0.0, ::, *) is not one.
bool isLoopbackAddress(const std::string& address);

// Compares in time independent of where the strings differ.
bool tokensEqual(const std::string& a, const std::string& b);

}  // namespace squall
