// Tar archives of directory trees. Pool threads; blocking.
#include "tar-archive.h"

#include "dir-tree.h"
#include "file-ops.h"
#include "safe-path.h"

#include <archive.h>
#include <archive_entry.h>
#include <cerrno>
#include <fcntl.h>
#include <kj/debug.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {
constexpr size_t READ_PIECE = 1 << 20;

struct EntryDeleter {
  archive_entry* entry;
  ~EntryDeleter() { archive_entry_free(entry); }
};
}  // namespace

// ----------------------------------------------------------------- writing

TarWriter::TarWriter(kj::AutoCloseFd root) : walk(kj::mv(root), "dir", TreeLimits::none()) {
  archive = archive_write_new();
  KJ_ASSERT(archive != nullptr);
  check(archive_write_set_format_pax_restricted(archive), "set format");
  check(archive_write_open(archive, this, nullptr, &TarWriter::onWrite, nullptr), "open");
}

TarWriter::~TarWriter() noexcept(false) {
  if (archive != nullptr) archive_write_free(archive);
}

long TarWriter::onWrite(struct archive*, void* self, const void* buffer, size_t size) {
  auto* writer = static_cast<TarWriter*>(self);
  auto* bytes = static_cast<const kj::byte*>(buffer);
  writer->pending.insert(writer->pending.end(), bytes, bytes + size);
  return static_cast<long>(size);
}

void TarWriter::check(int rc, const char* what) {
  if (rc == ARCHIVE_OK || rc == ARCHIVE_WARN) return;
  const char* message = archive_error_string(archive);
  KJ_FAIL_REQUIRE("cannot write the tar archive", what, message != nullptr ? message : "unknown error");
}

kj::Array<kj::byte> TarWriter::next(size_t max) {
  while (pending.size() - pendingStart < max && !finished) step();
  size_t n = kj::min(max, pending.size() - pendingStart);
  auto out = kj::heapArray<kj::byte>(pending.data() + pendingStart, n);
  pendingStart += n;
  if (pendingStart > READ_PIECE || pendingStart == pending.size()) {
    pending.erase(pending.begin(), pending.begin() + pendingStart);
    pendingStart = 0;
  }
  return out;
}

void TarWriter::step() {
  if (file.get() >= 0) {
    auto buffer = kj::heapArray<kj::byte>(kj::min(READ_PIECE, fileLeft));
    ssize_t n;
    KJ_SYSCALL(n = ::read(file, buffer.begin(), buffer.size()), filePath);
    KJ_REQUIRE(n > 0, "file shrank while it was archived", filePath);
    la_ssize_t written = archive_write_data(archive, buffer.begin(), n);
    if (written < 0) check(static_cast<int>(written), "data");
    fileLeft -= n;
    if (fileLeft == 0) file = nullptr;
    return;
  }
  switch (walk.next()) {
    case TreeWalk::Step::END:
      check(archive_write_close(archive), "close");
      finished = true;
      return;
    case TreeWalk::Step::LEAVE: return;
    case TreeWalk::Step::ENTRY: break;
  }
  kj::StringPtr path = walk.path();
  kj::StringPtr name = walk.name();
  int dirFd = walk.dirFd();
  auto& st = walk.stat();

  archive_entry* entry = archive_entry_new();
  KJ_ASSERT(entry != nullptr);
  EntryDeleter deleter{entry};
  archive_entry_copy_pathname(entry, path.cStr());
  archive_entry_set_perm(entry, st.st_mode & 0777);
  archive_entry_set_mtime(entry, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  if (S_ISDIR(st.st_mode)) {
    archive_entry_set_filetype(entry, AE_IFDIR);
    archive_entry_set_size(entry, 0);
    check(archive_write_header(archive, entry), "header");
    walk.enter();
  } else if (S_ISREG(st.st_mode)) {
    int fd;
    KJ_SYSCALL(fd = ::openat(dirFd, name.cStr(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC), path);
    kj::AutoCloseFd opened(fd);
    struct stat fst;
    KJ_SYSCALL(::fstat(opened, &fst), path);
    archive_entry_set_filetype(entry, AE_IFREG);
    archive_entry_set_size(entry, fst.st_size);
    check(archive_write_header(archive, entry), "header");
    if (fst.st_size > 0) {
      file = kj::mv(opened);
      filePath = kj::str(path);
      fileLeft = fst.st_size;
    }
  } else if (S_ISLNK(st.st_mode)) {
    auto target = readLinkAt(dirFd, name.cStr());
    archive_entry_set_filetype(entry, AE_IFLNK);
    archive_entry_set_size(entry, 0);
    archive_entry_copy_symlink(entry, target.cStr());
    check(archive_write_header(archive, entry), "header");
  } else {
    SQUALL_FAIL("cannot archive '", path, "': it is ", entryKindName(st.st_mode));
  }
}

// --------------------------------------------------------------- unpacking

namespace {

struct Reader {
  struct archive* archive;
  Reader() : archive(archive_read_new()) { KJ_ASSERT(archive != nullptr); }
  ~Reader() { archive_read_free(archive); }
  kj::String error() const {
    const char* message = archive_error_string(archive);
    return kj::str(message != nullptr ? message : "unknown error");
  }
};

// What an unpacking may still make.
struct UnpackBudget {
  const TreeLimits& limits;
  uint64_t entries = 0;
  // The archive's own size: no entry's bytes can exceed what is left of it.
  uint64_t bytesLeft;
};

void unpackEntry(Reader& reader, archive_entry* entry, int rootFd, kj::StringPtr what,
                 UnpackBudget& budget) {
  const char* rawPath = archive_entry_pathname(entry);
  if (rawPath == nullptr) rawPath = archive_entry_pathname_utf8(entry);
  if (rawPath == nullptr) SQUALL_FAIL(what, ": a tar entry has a name that cannot be read");
  kj::StringPtr path = rawPath;
  auto type = archive_entry_filetype(entry);
  bool isHardLink = archive_entry_hardlink(entry) != nullptr;
  KJ_IF_MAYBE(problem, relativePathProblem(path)) {
    // "./" and "." name the root itself: nothing to create.
    if (type == AE_IFDIR && !isHardLink && *problem == "it names no file") return;
    SQUALL_FAIL(what, ": tar entry '", path, "' is not allowed: ", *problem);
  }
  if (isHardLink) {
    SQUALL_FAIL(what, ": tar entry '", path, "' is a hard link; hard links are not allowed");
  }
  auto parts = pathComponents(path);
  checkTreeLimits(budget.limits, what, joinPath(parts, parts.size()), parts.size(), ++budget.entries);
  auto label = kj::str(what, ": tar entry '", path, "'");
  if (type == AE_IFDIR) {
    openDirChain(rootFd, parts, parts.size(), true, label);
    return;
  }
  if (type != AE_IFREG && type != AE_IFLNK) {
    SQUALL_FAIL(label, " is ", entryKindName(type),
                "; only regular files, directories and symbolic links are allowed");
  }
  if (type == AE_IFREG && archive_entry_sparse_count(entry) > 0) {
    SQUALL_FAIL(label, " is a sparse file; sparse entries are not allowed");
  }
  auto parent = openDirChain(rootFd, parts, parts.size() - 1, true, label);
  auto& name = parts.back();
  if (type == AE_IFLNK) {
    const char* target = archive_entry_symlink(entry);
    if (target == nullptr) SQUALL_FAIL(label, " is a symbolic link without a target");
    if (::symlinkat(target, parent, name.cStr()) < 0) {
      if (errno == EEXIST) SQUALL_FAIL(label, " appears twice");
      KJ_FAIL_SYSCALL("symlinkat", errno, path);
    }
    return;
  }
  int fd = ::openat(parent, name.cStr(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    (archive_entry_perm(entry) & 0755) | 0600);
  if (fd < 0) {
    if (errno == EEXIST || errno == ELOOP) SQUALL_FAIL(label, " appears twice");
    KJ_FAIL_SYSCALL("openat", errno, path);
  }
  kj::AutoCloseFd out(fd);
  // Written in order, with no holes: a sparse entry could declare any size
  // (a file of terabytes from a few bytes of archive, read and copied in
  // full later on).
  uint64_t written = 0;
  for (;;) {
    const void* block;
    size_t size;
    la_int64_t offset;
    int rc = archive_read_data_block(reader.archive, &block, &size, &offset);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
      SQUALL_FAIL(label, " cannot be read (is the archive cut short?): ", reader.error());
    }
    if (offset < 0 || static_cast<uint64_t>(offset) != written) {
      SQUALL_FAIL(label, " is a sparse file; sparse entries are not allowed");
    }
    if (size > budget.bytesLeft) SQUALL_FAIL(label, " holds more bytes than the archive");
    budget.bytesLeft -= size;
    writeAll(out, kj::arrayPtr(static_cast<const kj::byte*>(block), size));
    written += size;
  }
  if (archive_entry_size_is_set(entry) && static_cast<uint64_t>(archive_entry_size(entry)) != written) {
    SQUALL_FAIL(label, " declares ", archive_entry_size(entry), " bytes but holds ", written);
  }
}

}  // namespace

void unpackTar(TarSource source, int dirFd, kj::StringPtr what, const TreeLimits& limits) {
  Reader reader;
  UnpackBudget budget{limits, 0, 0};
  archive_read_support_format_tar(reader.archive);
  archive_read_support_format_empty(reader.archive);
  int rc;
  KJ_SWITCH_ONEOF(source) {
    KJ_CASE_ONEOF(bytes, kj::ArrayPtr<const kj::byte>) {
      budget.bytesLeft = bytes.size();
      rc = archive_read_open_memory(reader.archive, bytes.begin(), bytes.size());
    }
    KJ_CASE_ONEOF(fd, int) {
      struct stat st;
      KJ_SYSCALL(::fstat(fd, &st));
      budget.bytesLeft = st.st_size;
      KJ_SYSCALL(::lseek(fd, 0, SEEK_SET));
      rc = archive_read_open_fd(reader.archive, fd, READ_PIECE);
    }
  }
  if (rc != ARCHIVE_OK) SQUALL_FAIL(what, ": not a tar archive: ", reader.error());
  for (;;) {
    archive_entry* entry;
    rc = archive_read_next_header(reader.archive, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
      SQUALL_FAIL(what, ": not a valid tar archive: ", reader.error());
    }
    unpackEntry(reader, entry, dirFd, what, budget);
  }
}

}  // namespace squall
