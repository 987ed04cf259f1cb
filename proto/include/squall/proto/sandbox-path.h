// The rule for paths inside a task's sandbox (inputs, outputs, make_dir and
// slice_dir entries): relative, no '..' component, no NUL, bounded. Shared
// by the server's submit checks and the command line's pipeline checks so
// that a pipeline file is refused before anything is submitted for exactly
// what the server would refuse. Pure function; any thread.
#pragma once

#include <kj/string.h>

namespace squall {

// What is wrong with `path`, or nullptr if it stays inside the sandbox.
kj::Maybe<kj::String> checkSandboxPath(kj::StringPtr path);

}  // namespace squall
