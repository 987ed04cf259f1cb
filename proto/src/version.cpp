#include <squall/proto/version.h>

#include <squall/wire/common.capnp.h>

namespace squall {

std::string versionText(const char* program) {
  return std::string(program) + " " + SQUALL_RELEASE + " (protocol " + std::to_string(wire::PROTOCOL_VERSION) + ")";
}

}  // namespace squall
