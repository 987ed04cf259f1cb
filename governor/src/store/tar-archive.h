// Directory trees as tar archives (libarchive): producing one piece by piece
// for DataService.read of a dir, and unpacking a received archive (fetched
// from a governor, or a dir constant) into a new tree.
//
// Produced archives are pax (libarchive's "restricted pax": ustar headers,
// pax extended headers only where ustar cannot say it, e.g. long paths)
// with relative paths, directories, regular files (mode kept) and symbolic
// links stored as links.
//
// Unpacking applies the safe-path rules: an entry that is absolute, holds
// "..", is a hard link, a device, a fifo or a socket is refused; nothing is
// created through a symbolic link (an entry below a link, or a second entry
// with the same name, fails).
//
// Blocking; pool threads. A TarWriter is used by one thread at a time.
#pragma once

#include <kj/array.h>
#include <squall/proto/tree-walk.h>
#include <kj/io.h>
#include <kj/one-of.h>
#include <kj/string.h>
#include <string>
#include <vector>

struct archive;

namespace squall {

class TarWriter {
 public:
  // Archives the tree open at `root` (a directory descriptor). Cheap: no
  // file access until next().
  explicit TarWriter(kj::AutoCloseFd root);
  ~TarWriter() noexcept(false);
  KJ_DISALLOW_COPY(TarWriter);

  // The next `max` bytes of the archive (fewer only at its end; empty once
  // it is complete). Memory stays bounded by `max` plus one read piece: file
  // bytes are read as the archive needs them.
  kj::Array<kj::byte> next(size_t max);

 private:
  struct archive* archive = nullptr;
  // Lists the root at the first next() (on the pool), not in the
  // constructor. A dir object is within the store's limits already.
  TreeWalk walk;
  kj::AutoCloseFd file;
  kj::String filePath;
  uint64_t fileLeft = 0;
  bool finished = false;
  std::vector<kj::byte> pending;
  size_t pendingStart = 0;

  static long onWrite(struct archive*, void* self, const void* buffer, size_t size);
  void step();
  void check(int rc, const char* what);
};

// Bytes in memory, or an open file read from its start.
using TarSource = kj::OneOf<kj::ArrayPtr<const kj::byte>, int>;

// Unpacks the archive into the empty directory open at `dirFd`. `what`
// names the archive in errors, e.g. "constant 1/4":
//   "constant 1/4: tar entry '../x' is not allowed: it contains '..'"
//   "constant 1/4: tar entry 'l' is a hard link; hard links are not allowed"
// The tree it makes stays within `limits` (checkTreeLimits' messages). A
// file entry must hold exactly the bytes its header declares, all of them
// present in the archive: a truncated archive, or an entry whose size runs
// past its end, fails naming the entry; a sparse entry (holes, a declared
// size beyond its data) is refused, so the bytes unpacked never exceed the
// archive's own.
void unpackTar(TarSource source, int dirFd, kj::StringPtr what, const TreeLimits& limits);

}  // namespace squall
