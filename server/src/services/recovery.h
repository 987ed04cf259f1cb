// Replaying the session log at start: every session it holds is brought
// back into the table through the same validation as a submit (see
// SessionTable::restore). Loop thread, before the loop serves anyone.
#pragma once

#include "governor-pool.h"
#include "session-log.h"
#include "session-table.h"

#include <cstdio>
#include <spdlog/logger.h>

namespace squall {

// Replays `log` into `sessions`. A session that cannot be brought back is
// logged, reported on `report` (when not null) and left in the log
// untouched (never silently dropped); the others carry on. False when the
// log itself cannot be read (reported the same way): the server must not
// start.
bool recoverSessions(SessionLog& log, SessionTable& sessions, GovernorPool& governors,
                     spdlog::logger& logger, std::FILE* report);

}  // namespace squall
