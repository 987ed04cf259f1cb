// Blocking file operations. They may block for as long as the disk takes, so
// loop code calls them only for small, bounded work and otherwise through
// UvBridge::runOnPool. Any thread; no shared state.
#pragma once

#include <cstdint>
#include <kj/array.h>
#include <kj/io.h>
#include <kj/refcount.h>
#include <kj/string.h>
#include <squall/proto/make-dirs.h>

namespace squall {

// A descriptor shared between the loop and pool jobs: closed when the last
// holder lets go, so a job never reads a descriptor number reused elsewhere.
struct SharedFd final : public kj::AtomicRefcounted {
  explicit SharedFd(kj::AutoCloseFd fd) : fd(kj::mv(fd)) {}
  kj::AutoCloseFd fd;
};

struct HashedSize {
  uint64_t size = 0;
  uint64_t hash = 0;
};

// xxh3-64 of a byte range.
uint64_t hashBytes(kj::ArrayPtr<const kj::byte> bytes);

// Size and xxh3-64 of a whole file, read in 1 MiB pieces.
HashedSize hashFile(kj::StringPtr path);
// The same for an open file, read from offset 0 (its position is untouched).
HashedSize hashFd(int fd);

kj::AutoCloseFd openOrThrow(kj::StringPtr path, int flags, int mode = 0644);
// Unlinks a file; one already gone is fine.
void unlinkFile(kj::StringPtr path);
void writeAll(int fd, kj::ArrayPtr<const kj::byte> bytes);
void pwriteAll(int fd, kj::ArrayPtr<const kj::byte> bytes, uint64_t offset);
// Up to `max` bytes from `offset`; fewer only at end of file.
kj::Array<kj::byte> preadUpTo(int fd, uint64_t offset, size_t max);

// A new file in `dir` with no name (O_TMPFILE, or made and unlinked where
// the file system has no O_TMPFILE), open for reading and writing: nothing
// can reach it by a path.
kj::AutoCloseFd openAnonymousFile(kj::StringPtr dir);

// Writes `bytes` to a new file at `path` (replacing one there).
void writeFile(kj::StringPtr path, kj::ArrayPtr<const kj::byte> bytes, int mode);

// Appends the whole file `from` to `out`, returning the bytes copied and
// feeding them to `state` (an XXH3_state_t*) when given.
uint64_t appendFile(int out, kj::StringPtr from, void* hashState);

// Hard-links `from` at `to`, or copies it when linking is impossible
// (another filesystem, link limits).
void linkOrCopy(kj::StringPtr from, kj::StringPtr to);

// The last `max` bytes of a file as text (empty when missing).
kj::String readTail(kj::StringPtr path, size_t max);

// Deletes a file when dropped unless released: producers write into one so
// a cancelled or failed job leaves nothing behind.
class TempFile {
 public:
  explicit TempFile(kj::String path) : filePath(kj::mv(path)) {}
  TempFile(TempFile&&) = default;
  ~TempFile() noexcept(false);
  kj::StringPtr path() const { return filePath; }
  // The file is someone else's now.
  kj::String release();

 private:
  kj::String filePath;
};

}  // namespace squall
