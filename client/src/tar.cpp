#include "tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <squall/client/client.h>
#include <sys/stat.h>

namespace squall::client {

namespace fs = std::filesystem;

namespace {

struct ArchiveDeleter {
  void operator()(struct archive* a) const { archive_free(a); }
};
using ArchivePtr = std::unique_ptr<struct archive, ArchiveDeleter>;

[[noreturn]] void fail(struct archive* a, const std::string& what) {
  const char* why = a ? archive_error_string(a) : nullptr;
  throw Error(what + (why ? std::string(": ") + why : std::string()));
}

struct MemorySink {
  std::string bytes;
  uint64_t maxBytes;
  bool overflow = false;
};

la_ssize_t appendToMemory(struct archive*, void* data, const void* buffer, size_t length) {
  auto* sink = static_cast<MemorySink*>(data);
  if (sink->bytes.size() + length > sink->maxBytes) {
    sink->overflow = true;
    return -1;
  }
  sink->bytes.append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

}  // namespace

std::string tarDirectory(const std::string& dir, uint64_t maxBytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("'" + dir + "' is not a directory");
  MemorySink sink{{}, maxBytes};
  ArchivePtr out(archive_write_new());
  archive_write_set_format_pax_restricted(out.get());
  if (archive_write_open(out.get(), &sink, nullptr, appendToMemory, nullptr) != ARCHIVE_OK) {
    fail(out.get(), "cannot start a tar archive");
  }
  ArchivePtr disk(archive_read_disk_new());
  archive_read_disk_set_symlink_physical(disk.get());  // links stay links
  archive_read_disk_set_standard_lookup(disk.get());
  if (archive_read_disk_open(disk.get(), dir.c_str()) != ARCHIVE_OK) {
    fail(disk.get(), "cannot read directory '" + dir + "'");
  }
  fs::path root = fs::path(dir).lexically_normal();
  while (true) {
    struct archive_entry* entry = archive_entry_new();
    int rc = archive_read_next_header2(disk.get(), entry);
    if (rc == ARCHIVE_EOF) {
      archive_entry_free(entry);
      break;
    }
    if (rc != ARCHIVE_OK) {
      archive_entry_free(entry);
      fail(disk.get(), "cannot read directory '" + dir + "'");
    }
    archive_read_disk_descend(disk.get());
    fs::path full = fs::path(archive_entry_sourcepath(entry)).lexically_normal();
    fs::path relative = full.lexically_relative(root);
    if (relative.empty() || relative == ".") {
      archive_entry_free(entry);
      continue;  // the root itself
    }
    archive_entry_set_pathname(entry, relative.c_str());
    auto type = archive_entry_filetype(entry);
    if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      std::string name = relative.string();
      archive_entry_free(entry);
      throw Error("'" + (fs::path(dir) / name).string() +
                  "' is not a regular file, directory or symlink; it cannot be uploaded");
    }
    if (archive_write_header(out.get(), entry) != ARCHIVE_OK) {
      archive_entry_free(entry);
      if (sink.overflow) break;
      fail(out.get(), "cannot archive '" + full.string() + "'");
    }
    if (type == AE_IFREG) {
      FILE* file = fopen(full.c_str(), "rb");
      if (file == nullptr) {
        archive_entry_free(entry);
        throw Error("cannot read '" + full.string() + "': " + strerror(errno));
      }
      char buffer[65536];
      size_t n;
      while ((n = fread(buffer, 1, sizeof(buffer), file)) > 0) {
        if (archive_write_data(out.get(), buffer, n) < 0) break;
      }
      fclose(file);
    }
    archive_entry_free(entry);
    if (sink.overflow) break;
  }
  if (sink.overflow) {
    throw Error("directory '" + dir + "' is larger than the limit of " + std::to_string(maxBytes) +
                " bytes for a constant (read it on a governor with loadDir instead)");
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) fail(out.get(), "cannot finish the tar archive");
  return std::move(sink.bytes);
}

void untarInto(const std::string& archive, const std::string& dest) {
  std::error_code ec;
  fs::create_directories(dest, ec);
  if (ec) throw Error("cannot create '" + dest + "': " + ec.message());
  if (!fs::is_empty(dest, ec)) throw Error("'" + dest + "' is not empty");
  ArchivePtr in(archive_read_new());
  archive_read_support_format_tar(in.get());
  archive_read_support_format_gnutar(in.get());
  if (archive_read_open_filename(in.get(), archive.c_str(), 1 << 16) != ARCHIVE_OK) {
    fail(in.get(), "cannot read the fetched archive");
  }
  ArchivePtr out(archive_write_disk_new());
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                                ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  // Names are checked above (relative, no ".."); the destination prefix
  // itself may be absolute, so libarchive's absolute-path guard stays off.
  struct archive_entry* entry;
  int rc;
  while ((rc = archive_read_next_header(in.get(), &entry)) == ARCHIVE_OK) {
    std::string name = archive_entry_pathname(entry);
    fs::path relative = fs::path(name).lexically_normal();
    if (relative.is_absolute() || relative.empty() || *relative.begin() == "..") {
      throw Error("the fetched archive has an unsafe path '" + name + "'");
    }
    auto type = archive_entry_filetype(entry);
    if (archive_entry_hardlink(entry) != nullptr ||
        (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)) {
      throw Error("the fetched archive has an entry of a kind that is not unpacked: '" + name + "'");
    }
    archive_entry_set_pathname(entry, (fs::path(dest) / relative).c_str());
    // Every byte a file declares must be in the archive, in order: a
    // sparse entry would make a file of any size from a few bytes.
    if (type == AE_IFREG && archive_entry_sparse_count(entry) > 0) {
      throw Error("the fetched archive has a sparse entry '" + name + "'; sparse entries are not unpacked");
    }
    // The disk writer would extend a short file to its declared size (with
    // a hole), even as the archive fails: the size is checked here instead.
    int64_t declared = archive_entry_size_is_set(entry) ? archive_entry_size(entry) : -1;
    archive_entry_unset_size(entry);
    if (archive_write_header(out.get(), entry) != ARCHIVE_OK) {
      fail(out.get(), "cannot unpack '" + name + "'");
    }
    const void* block;
    size_t size;
    la_int64_t offset;
    uint64_t written = 0;
    while ((rc = archive_read_data_block(in.get(), &block, &size, &offset)) == ARCHIVE_OK) {
      if (offset < 0 || static_cast<uint64_t>(offset) != written) {
        throw Error("the fetched archive has a sparse entry '" + name + "'; sparse entries are not unpacked");
      }
      if (archive_write_data_block(out.get(), block, size, offset) != ARCHIVE_OK) {
        fail(out.get(), "cannot write '" + name + "'");
      }
      written += size;
    }
    if (rc != ARCHIVE_EOF) fail(in.get(), "corrupt archive at '" + name + "'");
    if (type == AE_IFREG && declared >= 0 && static_cast<uint64_t>(declared) != written) {
      throw Error("the fetched archive's entry '" + name + "' declares " + std::to_string(declared) +
                  " bytes but holds " + std::to_string(written));
    }
    archive_write_finish_entry(out.get());
  }
  if (rc != ARCHIVE_EOF) fail(in.get(), "corrupt archive");
  archive_write_close(out.get());
}

}  // namespace squall::client
