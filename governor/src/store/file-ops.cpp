// Blocking file helpers; any thread.
#include "file-ops.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <string_view>
#include <kj/debug.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

namespace squall {

namespace {
constexpr size_t IO_PIECE = 1 << 20;
}

uint64_t hashBytes(kj::ArrayPtr<const kj::byte> bytes) {
  return XXH3_64bits(bytes.begin(), bytes.size());
}

HashedSize hashFd(int fd) {
  XXH3_state_t* state = XXH3_createState();
  KJ_ASSERT(state != nullptr);
  KJ_DEFER(XXH3_freeState(state));
  XXH3_64bits_reset(state);
  auto buffer = kj::heapArray<kj::byte>(IO_PIECE);
  HashedSize result;
  for (;;) {
    ssize_t n;
    KJ_SYSCALL(n = ::pread(fd, buffer.begin(), buffer.size(), result.size));
    if (n == 0) break;
    XXH3_64bits_update(state, buffer.begin(), n);
    result.size += n;
  }
  result.hash = XXH3_64bits_digest(state);
  return result;
}

HashedSize hashFile(kj::StringPtr path) {
  auto fd = openOrThrow(path, O_RDONLY);
  return hashFd(fd);
}

void unlinkFile(kj::StringPtr path) {
  if (::unlink(path.cStr()) < 0 && errno != ENOENT) KJ_FAIL_SYSCALL("unlink", errno, path);
}

kj::AutoCloseFd openOrThrow(kj::StringPtr path, int flags, int mode) {
  int fd;
  KJ_SYSCALL(fd = ::open(path.cStr(), flags | O_CLOEXEC, mode), path);
  return kj::AutoCloseFd(fd);
}

void writeAll(int fd, kj::ArrayPtr<const kj::byte> bytes) {
  while (bytes.size() > 0) {
    ssize_t n;
    KJ_SYSCALL(n = ::write(fd, bytes.begin(), bytes.size()));
    bytes = bytes.slice(n, bytes.size());
  }
}

void pwriteAll(int fd, kj::ArrayPtr<const kj::byte> bytes, uint64_t offset) {
  while (bytes.size() > 0) {
    ssize_t n;
    KJ_SYSCALL(n = ::pwrite(fd, bytes.begin(), bytes.size(), offset));
    bytes = bytes.slice(n, bytes.size());
    offset += n;
  }
}

kj::Array<kj::byte> preadUpTo(int fd, uint64_t offset, size_t max) {
  auto buffer = kj::heapArray<kj::byte>(max);
  size_t got = 0;
  while (got < max) {
    ssize_t n;
    KJ_SYSCALL(n = ::pread(fd, buffer.begin() + got, max - got, offset + got));
    if (n == 0) break;
    got += n;
  }
  if (got == max) return buffer;
  auto result = kj::heapArray<kj::byte>(got);
  memcpy(result.begin(), buffer.begin(), got);
  return result;
}

kj::AutoCloseFd openAnonymousFile(kj::StringPtr dir) {
  int fd = ::open(dir.cStr(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return kj::AutoCloseFd(fd);
  if (errno != EOPNOTSUPP && errno != EISDIR) KJ_FAIL_SYSCALL("open(O_TMPFILE)", errno, dir);
  auto pattern = kj::str(dir, "/.anonymous-XXXXXX");
  KJ_SYSCALL(fd = ::mkostemp(pattern.begin(), O_CLOEXEC), dir);
  kj::AutoCloseFd file(fd);
  KJ_SYSCALL(::unlink(pattern.cStr()), pattern);
  return file;
}

void writeFile(kj::StringPtr path, kj::ArrayPtr<const kj::byte> bytes, int mode) {
  auto fd = openOrThrow(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
  writeAll(fd, bytes);
}

uint64_t appendFile(int out, kj::StringPtr from, void* hashState) {
  auto in = openOrThrow(from, O_RDONLY);
  auto buffer = kj::heapArray<kj::byte>(IO_PIECE);
  uint64_t total = 0;
  for (;;) {
    ssize_t n;
    KJ_SYSCALL(n = ::read(in, buffer.begin(), buffer.size()), from);
    if (n == 0) break;
    if (hashState != nullptr) {
      XXH3_64bits_update(static_cast<XXH3_state_t*>(hashState), buffer.begin(), n);
    }
    writeAll(out, buffer.slice(0, n));
    total += n;
  }
  return total;
}

void linkOrCopy(kj::StringPtr from, kj::StringPtr to) {
  if (::link(from.cStr(), to.cStr()) == 0) return;
  int error = errno;
  if (error != EXDEV && error != EMLINK && error != EPERM) {
    KJ_FAIL_SYSCALL("link", error, from, to);
  }
  auto out = openOrThrow(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  appendFile(out, from, nullptr);
}

kj::String readTail(kj::StringPtr path, size_t max) {
  int fd = ::open(path.cStr(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kj::str();
  kj::AutoCloseFd owned(fd);
  struct stat st;
  KJ_SYSCALL(fstat(fd, &st), path);
  uint64_t size = st.st_size;
  uint64_t start = size > max ? size - max : 0;
  auto bytes = preadUpTo(fd, start, size - start);
  return kj::heapString(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

TempFile::~TempFile() noexcept(false) {
  if (filePath.size() > 0) ::unlink(filePath.cStr());
}

kj::String TempFile::release() { return kj::mv(filePath); }

}  // namespace squall
