// The release of this build and the wire protocol it speaks, as every
// program's --version prints them (docs/deploy.md, "Versions").
#pragma once

#include <string>

namespace squall {

// "PROGRAM RELEASE (protocol N)", e.g. "squall-server 0.1.0 (protocol 8)".
std::string versionText(const char* program);

}  // namespace squall
