// mkdir -p with a mode, shared by the parts that keep private state on
// disk (a governor's work dir, the server's session log). Any thread.
#pragma once

#include <kj/string.h>

namespace squall {

// Makes `path` and the directories missing on the way; every directory it
// makes gets `mode` (the umask still applies: private by default), and one
// that exists keeps its own (an operator's choice). Throws FAILED naming
// the directory that cannot be made.
void makeDirs(kj::StringPtr path, int mode = 0700);

}  // namespace squall
