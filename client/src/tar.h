// Directory <-> tar archive for the client (uploading a local directory as a
// dir constant, unpacking a fetched dir). Any thread; blocking file I/O.
#pragma once

#include <cstdint>
#include <string>

namespace squall::client {

// The directory tree at `dir` as a pax tar with relative paths (regular
// files, directories and symlinks kept as links). Throws squall::Error when
// it is missing, unreadable, or larger than `maxBytes`.
std::string tarDirectory(const std::string& dir, uint64_t maxBytes);

// Unpacks the tar file `archive` into `dest` (created if missing; must be
// empty). Entries that are absolute, contain "..", or pass through a
// symlink are refused with squall::Error, as are hard links and devices.
void untarInto(const std::string& archive, const std::string& dest);

}  // namespace squall::client
