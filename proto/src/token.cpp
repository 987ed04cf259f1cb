#include <squall/proto/token.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <kj/debug.h>
#include <sstream>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <squall/proto/errors.h>
#include <cerrno>
#include <cstring>

namespace squall {

namespace {
std::string readTokenFile(const std::string& path) {
  std::ifstream in(path);
  SQUALL_REQUIRE(in.good(), "cannot read the token file ", path.c_str(), ": ", strerror(errno));
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  auto begin = text.find_first_not_of(" \t\r\n");
  auto end = text.find_last_not_of(" \t\r\n");
  SQUALL_REQUIRE(begin != std::string::npos, "the token file ", path.c_str(),
                 " is empty: it should hold the cluster's shared secret (docs/deploy.md)");
  return text.substr(begin, end - begin + 1);
}
}  // namespace

std::string resolveToken(const std::string& value, const std::string& file) {
  if (!value.empty()) return value;
  if (!file.empty()) return readTokenFile(file);
  if (const char* env = getenv("SQUALL_TOKEN"); env && *env) return env;
  if (const char* env = getenv("SQUALL_TOKEN_FILE"); env && *env) return readTokenFile(env);
  auto fallback = defaultTokenFile();
  if (!fallback.empty() && access(fallback.c_str(), F_OK) == 0) return readTokenFile(fallback);
  return {};
}

std::string defaultTokenFile() {
  if (const char* state = getenv("XDG_STATE_HOME"); state && *state == '/') {
    return std::string(state) + "/squall/token";
  }
  if (const char* home = getenv("HOME"); home && *home == '/') return std::string(home) + "/.local/state/squall/token";
  return {};
}

std::string ensureTokenFile(const std::string& path) {
  namespace fs = std::filesystem;
  if (access(path.c_str(), F_OK) == 0) return readTokenFile(path);
  auto dir = fs::path(path).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    KJ_REQUIRE(!ec, "cannot make the directory of the token file", dir.string(), ec.message());
  }
  unsigned char bytes[32];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    KJ_REQUIRE(n > 0, "cannot draw random bytes for a token", strerror(errno));
    got += static_cast<size_t>(n);
  }
  static const char* hex = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += hex[b >> 4];
    token += hex[b & 15];
  }
  // O_EXCL: two starts racing keep the first one's token.
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno == EEXIST) return readTokenFile(path);
  KJ_REQUIRE(fd >= 0, "cannot write the token file", path, strerror(errno));
  std::string line = token + "\n";
  bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  close(fd);
  KJ_REQUIRE(ok, "cannot write the token file", path);
  return token;
}

std::string openListenProblem(const std::string& address, const std::string& token, bool insecure,
                              const std::string& exposed) {
  if (!token.empty() || insecure || isLoopbackAddress(address)) return {};
  return "refusing to listen on " + address + " without a token: anyone who can reach it could " + exposed +
         ". Give --token-file FILE (or $SQUALL_TOKEN_FILE; `squall start` makes " +
         (defaultTokenFile().empty() ? std::string("one") : defaultTokenFile()) +
         "), or --insecure if every host that can reach it is trusted";
}

std::vector<std::string> tokenWarnings(const std::string& address, const std::string& announced,
                                       const std::string& token, bool onCommandLine, const std::string& exposed) {
  std::vector<std::string> warnings;
  if (token.empty() && !isLoopbackAddress(address)) {
    warnings.push_back("event=insecure address=" + announced +
                       " warning=\"no token: anyone who can reach this address can " + exposed + "\"");
  }
  if (onCommandLine) {
    warnings.push_back(
        "event=token-on-command-line warning=\"--token is visible to every user of this machine (ps); use "
        "--token-file or $SQUALL_TOKEN_FILE\"");
  }
  return warnings;
}

bool isLoopbackAddress(const std::string& address) {
  std::string host = address;
  if (!host.empty() && host[0] == '[') {
    host = host.substr(1, host.find(']') == std::string::npos ? std::string::npos : host.find(']') - 1);
  } else if (std::count(host.begin(), host.end(), ':') == 1) {
    host = host.substr(0, host.find(':'));
  }
  if (host == "localhost") return true;
  in_addr v4;
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

bool tokensEqual(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; i++) {
    unsigned char x = i < a.size() ? a[i] : 0;
    unsigned char y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace squall
