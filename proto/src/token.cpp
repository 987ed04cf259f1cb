#include <squall/proto/token.h>

#include <cstdlib>
#include <fstream>
#include <kj/debug.h>
#include <sstream>

namespace squall {

namespace {
std::string readTokenFile(const std::string& path) {
  std::ifstream in(path);
  KJ_REQUIRE(in.good(), "cannot read token file", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  auto begin = text.find_first_not_of(" \t\r\n");
  auto end = text.find_last_not_of(" \t\r\n");
  KJ_REQUIRE(begin != std::string::npos, "token file is empty", path);
  return text.substr(begin, end - begin + 1);
}
}  // namespace

std::string resolveToken(const std::string& value, const std::string& file) {
  if (!value.empty()) return value;
  if (!file.empty()) return readTokenFile(file);
  if (const char* env = getenv("SQUALL_TOKEN"); env && *env) return env;
  if (const char* env = getenv("SQUALL_TOKEN_FILE"); env && *env) return readTokenFile(env);
  return {};
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
