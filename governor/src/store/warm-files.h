// Files of removed memory-tier objects kept with their pages, for new
// objects to be written into (docs/decisions-ray.md, "Warm memory for new
// objects"). The first write of a fresh page costs a fault (16-20 µs a page
// on the VMs this runs on: a fresh 256 MB object writes at 0.3-0.5 GB/s);
// a page already in memory takes a plain copy (5-6 GB/s through pwrite).
// So instead of unlinking a removed object's file, the store offers it
// here, and an upload that goes into the tier takes the best-fitting one.
//
// A file is kept only when nothing else can still see its bytes: no other
// name (st_nlink 1) and no other open descriptor or mapping anywhere on the
// machine. The kernel answers the second: a write lease (F_SETLEASE) is
// granted only when no other struct file refers to the inode, and a mapping
// holds one after its descriptor is closed (checked on tmpfs with and
// without huge pages). A driver that still maps a removed object's array,
// an executor reading it, a fetch streaming it: the file is unlinked as
// before and their pages stay theirs.
//
// Kept files are named `.warm-N` in the tier's directory.
//
// Memory: kept files count against the tier's capacity with the objects
// (limit()), and the largest go first when objects need the room. Loop
// thread; the checks and unlinks run on the pool.
#pragma once

#include "uv-bridge.h"

#include <kj/async.h>
#include <kj/string.h>
#include <spdlog/logger.h>
#include <map>
#include <string>
#include <string_view>

namespace squall {

class WarmFiles {
 public:
  // Smaller files are unlinked: their pages are few, a slot is not.
  static constexpr uint64_t MIN_BYTES = 1 << 20;
  static constexpr size_t MAX_FILES = 64;
  static constexpr size_t MAX_PRODUCERS = 1024;

  WarmFiles(UvBridge& bridge, kj::TaskSet& background, spdlog::logger& logger)
      : bridge(bridge), background(background), logger(logger) {}
  KJ_DISALLOW_COPY(WarmFiles);

  // At most `bytes` may be kept: the tier's capacity less what its objects
  // hold. Unlinks (largest first) what is past it.
  void limit(uint64_t bytes);

  // The file at `path` (one of the store's, renamed out of the object's
  // name) of `size` bytes: kept when it passes the checks above and fits,
  // else unlinked. Either happens on the pool, later.
  void offer(kj::String path, uint64_t size);

  // Renames the smallest kept file of at least `size` bytes (else the
  // largest) to `path` and makes it `size` bytes long; false when none is
  // kept (or the rename failed: then the caller makes a fresh file).
  bool take(uint64_t size, kj::StringPtr path);

  // Lends the file take() would pick for `size` to a call's executor,
  // renamed to `path` (writable, its size as it was); how big it is, 0 when
  // none. What the executor does not take goes back with offer().
  uint64_t lend(uint64_t size, kj::StringPtr path);

  // What a producer (a function, a method) made last time, its largest
  // blob of MIN_BYTES or more: what a call of it is lent for. 0: nothing.
  void remember(kj::StringPtr producer, uint64_t size);
  uint64_t lastMade(kj::StringPtr producer) const;

  uint64_t bytes() const { return held; }
  size_t count() const { return files.size(); }

  // Whether only `fd` refers to its file (the checks above); pool thread.
  static bool onlyHolder(int fd);

 private:
  UvBridge& bridge;
  kj::TaskSet& background;
  spdlog::logger& logger;
  uint64_t held = 0;
  uint64_t allowed = 0;
  uint64_t counter = 0;
  std::multimap<uint64_t, kj::String> files;
  // remember(): bounded (forgotten all at once when full).
  std::map<std::string, uint64_t, std::less<>> made;

  // Takes the best kept file for `size` out of the set and renames it to
  // `path`, writable; its size, or 0 (nothing moved) when none.
  uint64_t pick(uint64_t size, kj::StringPtr path);

  void unlinkLater(kj::String path);
  void keep(kj::String path, uint64_t size);
};

}  // namespace squall
