// Big bytes moved through the file system when the governor is on this
// machine (wire::LocalFile, docs/decisions-ray.md "Same machine, no
// socket"): an upload writes the governor's temp file itself, a fetch reads
// the object's file. Anything that does not check out falls back to the
// connection. Thread: the one that created the Client.
#include "client-impl.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <squall/proto/errors.h>
#include <squall/proto/local-file.h>
#include <sys/mman.h>
#include <unistd.h>

namespace squall {
namespace client {

namespace {
// Pieces a local read moves per call.
constexpr size_t LOCAL_PIECE = 64 << 20;
}  // namespace

void writeLocal(int fd, const kj::byte* bytes, size_t size, uint64_t offset) {
  while (size > 0) {
    ssize_t n = ::pwrite(fd, bytes, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(std::string("cannot write the governor's file: ") + strerror(n < 0 ? errno : ENOSPC));
    bytes += n;
    size -= n;
    offset += n;
  }
}

bool ClientImpl::localData() const {
  const char* setting = getenv("SQUALL_LOCAL_DATA");
  return setting == nullptr || strcmp(setting, "0") != 0;
}

kj::Maybe<kj::AutoCloseFd> ClientImpl::openLocal(const std::string& where, wire::LocalFile::Reader file,
                                                 int flags) {
  auto fd = openLocalFile(file, flags);
  if (fd == nullptr) {
    // Another machine (or pid namespace, or user): not asked again. Else
    // the file moved meanwhile (a spill left a link): this once only.
    auto root = kj::str("/proc/", file.getPid(), "/root/");
    if (file.getBootId() != machineBootId() || ::access(root.cStr(), X_OK) != 0) notLocal.insert(where);
  }
  return fd;
}

bool ClientImpl::readLocal(const std::string& where, wire::Id::Reader id, uint64_t size, std::string* text,
                           FILE* file, ObjectBytes* mapped) {
  if (size < LOCAL_READ_MIN || !localData() || notLocal.count(where) > 0) return false;
  auto req = dataService(where).readLocalRequest();
  req.setId(id);
  kj::Maybe<kj::AutoCloseFd> opened;
  uint64_t held = 0;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
    auto answer = block(req.send());
    held = answer.getSize();
    opened = openLocal(where, answer.getFile(), O_RDONLY);
  })) {
    // Not held as a file there (or an older governor): the connection.
    if (e->getType() == kj::Exception::Type::DISCONNECTED) kj::throwFatalException(kj::mv(*e));
    return false;
  }
  KJ_IF_MAYBE(fd, opened) {
    SQUALL_REQUIRE(held == size, "object of ", size, " bytes is ", held, " bytes on governor ", where);
    if (mapped != nullptr) {
      // The store never writes or truncates a file once it holds an object
      // in it, so the mapping reads the object as long as it lives.
      void* at = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd->get(), 0);
      if (at != MAP_FAILED) {
        mapped->mapped_ = at;
        mapped->length_ = size;
        return true;
      }
    }
    size_t start = text != nullptr ? text->size() : 0;
    if (text != nullptr) text->resize(start + size);
    auto buffer = file != nullptr ? kj::heapArray<kj::byte>(8 << 20) : nullptr;
    for (uint64_t offset = 0; offset < size;) {
      size_t want = std::min<uint64_t>(file != nullptr ? buffer.size() : LOCAL_PIECE, size - offset);
      kj::byte* into = file != nullptr ? buffer.begin() : reinterpret_cast<kj::byte*>(&(*text)[start + offset]);
      ssize_t n = ::pread(fd->get(), into, want, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      SQUALL_REQUIRE(n > 0, "cannot read object file on governor ", where, ": ",
                     n < 0 ? strerror(errno) : "it ended early");
      if (file != nullptr) {
        SQUALL_REQUIRE(fwrite(into, 1, n, file) == static_cast<size_t>(n),
                       "cannot write fetched data: ", strerror(errno));
      }
      offset += n;
    }
    return true;
  }
  return false;
}

}  // namespace client
}  // namespace squall
