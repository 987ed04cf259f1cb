// Where the object store's memory tier lives (ObjectStore::useMemoryTier):
// a tmpfs the governor mounts at `<store>/memory` when it has a mount
// namespace of its own (the tmpfs goes with the namespace, even after a
// SIGKILL), else a directory of its own in /dev/shm (`squall-store-<pid>`;
// those of governors no longer running, of the same user, are removed when
// the next one starts). Loop thread (start-up and exit).
#pragma once

#include <kj/string.h>
#include <spdlog/logger.h>

namespace squall {

// --store-memory's SIZE: an amount as resources take it (parseAmount:
// "512M", "1.5G"; K, M, G, T are powers of 1024), in bytes; null when it is
// not one.
kj::Maybe<uint64_t> parseStoreMemory(kj::StringPtr text);

// --store-memory's default: 30% of the memory available now (as Ray's object
// store), from `<procRoot>/meminfo`; 0 when it cannot be read.
uint64_t defaultStoreMemory(kj::StringPtr procRoot);

class MemoryTierDir {
 public:
  // Makes the directory: the tmpfs with `ownNamespace`, else the directory
  // in `shmRoot` (/dev/shm; tests give another). Throws FAILED saying why it
  // could not be made.
  MemoryTierDir(kj::StringPtr storeDir, bool ownNamespace, kj::StringPtr shmRoot, spdlog::logger& logger);
  // Unmounts the tmpfs, or removes the /dev/shm directory and what is in it.
  ~MemoryTierDir() noexcept(false);
  KJ_DISALLOW_COPY(MemoryTierDir);

  kj::StringPtr path() const { return dir; }
  // "tmpfs" or "shm".
  kj::StringPtr how() const { return mounted ? "tmpfs" : "shm"; }
  // Whether its files get huge pages (a tmpfs of its own, huge=within_size).
  bool hasHugePages() const { return hugePages; }

  // Removes `squall-store-PID` directories in `shmRoot` owned by this user
  // whose PID no process has; how many.
  static size_t removeStale(kj::StringPtr shmRoot, spdlog::logger& logger);

 private:
  spdlog::logger& logger;
  kj::String dir;
  bool mounted = false;
  bool hugePages = false;
};

}  // namespace squall
