// Files that hold what only the server's user may read (the session log:
// sessions' graphs, constants, errors). Any thread; no shared state.
#pragma once

#include <string>

namespace squall {

// Before SQLite opens `path`: the directories missing on the way are made
// 0700 (existing ones keep their mode: an operator's choice, like the
// current directory) and the file is made, empty and 0600, when missing.
// SQLite gives the -wal and -shm files it makes the database file's mode.
void preparePrivateDatabase(const std::string& path);

// Once `path` is known to be a database of ours: it and its -wal and -shm
// files narrowed to 0600 where an earlier version left them wider.
void narrowPrivateDatabase(const std::string& path);

}  // namespace squall
