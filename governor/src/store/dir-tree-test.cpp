// Tests of the tree walks (copy, seal, hash, remove, tar, untar) on deep
// trees: a few descriptors and no recursion whatever the depth, and the
// limits (tree-walk.h) that keep a dir object within bounds. Test thread only.
#include "dir-tree.h"
#include "safe-path.h"
#include "tar-archive.h"
#include "test-util.h"

#include <archive.h>
#include <archive_entry.h>
#include <cerrno>
#include <fcntl.h>
#include <kj/debug.h>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {
namespace {

constexpr rlim_t FEW_DESCRIPTORS = 64;

// Room for the deep trees these tests make.
TreeLimits roomy() {
  TreeLimits limits;
  limits.maxDepth = 100000;
  limits.maxPathLength = 100000;
  return limits;
}

bool exists(kj::StringPtr path) {
  struct stat st;
  return ::lstat(path.cStr(), &st) == 0;
}

// The description of what `run` throws ("" when it does not).
std::string failureOf(kj::Function<void()> run) {
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { run(); })) {
    return e->getDescription().cStr();
  }
  return "";
}

// Expects `run` to throw with `expected` in its description.
#define EXPECT_FAILS_WITH(expected, ...)                     \
  do {                                                       \
    auto failure = failureOf([&]() { __VA_ARGS__; });        \
    EXPECT_NE(failure.find(expected), std::string::npos) << failure; \
  } while (false)

class DirTreeTest : public ::testing::Test {
 protected:
  TempDir dir;
};

TEST_F(DirTreeTest, CopySealHashAndRemoveADeepTreeWithFewDescriptors) {
  auto src = dir.sub("src");
  KJ_SYSCALL(::mkdir(src.cStr(), 0755));
  makeDeepTree(src, 1500);
  auto srcHash = hashTree(openDirectory(src));
  {
    LowDescriptorLimit limit(FEW_DESCRIPTORS);
    auto source = openDirectory(src);
    auto parent = openDirectory(dir.path());
    copyTree(source, parent, "copy", FileCopy::COPY, "test tree", roomy());
    auto copied = openDirectory(dir.sub("copy"));
    auto sealed = sealTree(copied, "test tree", roomy());
    EXPECT_EQ(sealed.hash, srcHash.hash);
    EXPECT_EQ(sealed.size, 6u);
    EXPECT_EQ(measureDeepTree(dir.sub("copy")), std::make_pair(size_t(1500), true));
    removeTreeAt(parent, "copy");
    removeTree(src);
  }
  EXPECT_FALSE(exists(dir.sub("copy")));
  EXPECT_FALSE(exists(src));
}

TEST_F(DirTreeTest, TarRoundTripOfADeepTreeWithFewDescriptors) {
  auto src = dir.sub("src");
  KJ_SYSCALL(::mkdir(src.cStr(), 0755));
  makeDeepTree(src, 1500);
  auto dst = dir.sub("dst");
  KJ_SYSCALL(::mkdir(dst.cStr(), 0755));
  {
    LowDescriptorLimit limit(FEW_DESCRIPTORS);
    TarWriter writer(openDirectory(src));
    kj::Vector<kj::byte> tar;
    for (;;) {
      auto piece = writer.next(1 << 16);
      if (piece.size() == 0) break;
      tar.addAll(piece);
    }
    unpackTar(tar.asPtr().asConst(), openDirectory(dst), "constant 1/1", roomy());
  }
  EXPECT_EQ(measureDeepTree(dst), std::make_pair(size_t(1500), true));
}

// 20,000 levels: a walk that recursed per level would overflow the stack
// (or, with a descriptor per level, run out of descriptors first).
TEST_F(DirTreeTest, RemovesATwentyThousandDeepTree) {
  auto deep = dir.sub("deep");
  KJ_SYSCALL(::mkdir(deep.cStr(), 0755));
  makeDeepTree(deep, 20000);
  // Read-only levels, as a sealed tree or a program leaves them.
  KJ_SYSCALL(::chmod(deep.cStr(), 0555));
  {
    LowDescriptorLimit limit(FEW_DESCRIPTORS);
    removeTree(deep);
  }
  EXPECT_FALSE(exists(deep));
}

TEST_F(DirTreeTest, CopiesATwentyThousandDeepTree) {
  auto src = dir.sub("src");
  KJ_SYSCALL(::mkdir(src.cStr(), 0755));
  makeDeepTree(src, 20000);
  {
    LowDescriptorLimit limit(FEW_DESCRIPTORS);
    auto parent = openDirectory(dir.path());
    copyTree(openDirectory(src), parent, "copy", FileCopy::LINK, "test tree", TreeLimits::none());
  }
  EXPECT_EQ(measureDeepTree(dir.sub("copy")), std::make_pair(size_t(20000), true));
}

// What a task's dir output meets when it is collected: the default limits.
TEST_F(DirTreeTest, SealRefusesATreeDeeperThanTheLimitNamingIt) {
  auto fits = dir.sub("fits");
  KJ_SYSCALL(::mkdir(fits.cStr(), 0755));
  makeDeepTree(fits, 255);  // "f" at depth 256
  EXPECT_EQ(sealTree(openDirectory(fits), "output 'fits'", TreeLimits()).size, 6u);

  auto deep = dir.sub("deep");
  KJ_SYSCALL(::mkdir(deep.cStr(), 0755));
  makeDeepTree(deep, 1500);
  LowDescriptorLimit limit(FEW_DESCRIPTORS);
  EXPECT_FAILS_WITH(
      "output 'out': directory depth 257 exceeds the limit of 256 (--max-dir-depth) at 'd/d/d",
      sealTree(openDirectory(deep), "output 'out'", TreeLimits()));
}

TEST_F(DirTreeTest, SealRefusesMoreEntriesThanTheLimit) {
  TreeLimits limits;
  limits.maxEntries = 10;
  auto tree = dir.sub("tree");
  for (int i = 0; i < 9; i++) writeText(kj::str(tree, "/sub/", i), "x");
  EXPECT_EQ(sealTree(openDirectory(tree), "output 'tree'", limits).size, 9u);  // 10 entries

  auto more = dir.sub("more");
  for (int i = 0; i < 10; i++) writeText(kj::str(more, "/sub/", i), "x");
  EXPECT_FAILS_WITH("output 'more': the number of entries exceeds the limit of 10 (--max-dir-entries)",
                          sealTree(openDirectory(more), "output 'more'", limits));
}

TEST_F(DirTreeTest, SealRefusesAPathLongerThanTheLimit) {
  TreeLimits limits;
  limits.maxPathLength = 9;
  writeText(dir.sub("tree/abcd/efgh"), "x");  // 9 bytes
  EXPECT_EQ(sealTree(openDirectory(dir.sub("tree")), "output 'tree'", limits).size, 1u);
  writeText(dir.sub("long/abcd/efghi"), "x");
  EXPECT_FAILS_WITH("output 'long': path length 10 exceeds the limit of 9 bytes at 'abcd/efghi'",
                          sealTree(openDirectory(dir.sub("long")), "output 'long'", limits));
}

TEST_F(DirTreeTest, CopyRefusesASourceBeyondTheLimits) {
  auto src = dir.sub("src");
  KJ_SYSCALL(::mkdir(src.cStr(), 0755));
  makeDeepTree(src, 300);
  KJ_SYSCALL(::mkdir(dir.sub("to").cStr(), 0755));
  EXPECT_FAILS_WITH("load_dir: path '/x': directory depth 257 exceeds the limit of 256",
                          copyTreeContents(openDirectory(src), openDirectory(dir.sub("to")), FileCopy::COPY,
                                           "load_dir: path '/x'", TreeLimits()));
}

// ------------------------------------------------------------------------ tar

kj::Array<kj::byte> tarOf(kj::StringPtr root) {
  TarWriter writer(openDirectory(root));
  kj::Vector<kj::byte> tar;
  for (;;) {
    auto piece = writer.next(1 << 16);
    if (piece.size() == 0) break;
    tar.addAll(piece);
  }
  return tar.releaseAsArray();
}

// A pax archive with one entry `name` built by `describe`, holding `data`.
kj::Array<kj::byte> handMadeTar(kj::Function<void(archive_entry*)> describe, kj::StringPtr data) {
  kj::Vector<kj::byte> out;
  struct archive* writer = archive_write_new();
  archive_write_set_format_pax(writer);
  archive_write_set_bytes_in_last_block(writer, 1);
  archive_write_open(
      writer, &out, nullptr,
      [](struct archive*, void* self, const void* buffer, size_t size) -> la_ssize_t {
        static_cast<kj::Vector<kj::byte>*>(self)->addAll(
            kj::arrayPtr(static_cast<const kj::byte*>(buffer), size));
        return size;
      },
      nullptr);
  archive_entry* entry = archive_entry_new();
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_perm(entry, 0644);
  describe(entry);
  EXPECT_EQ(archive_write_header(writer, entry), ARCHIVE_OK) << archive_error_string(writer);
  archive_write_data(writer, data.begin(), data.size());
  archive_entry_free(entry);
  archive_write_close(writer);
  archive_write_free(writer);
  return out.releaseAsArray();
}

TEST_F(DirTreeTest, UnpackRefusesATruncatedArchiveNamingTheEntry) {
  std::string big(100000, 'x');
  writeText(dir.sub("src/big"), big);
  auto tar = tarOf(dir.sub("src"));
  KJ_SYSCALL(::mkdir(dir.sub("dst").cStr(), 0755));
  // Cut in the middle of the file's bytes: its header says 100000.
  EXPECT_FAILS_WITH("constant 1/1: tar entry 'big' cannot be read",
                          unpackTar(tar.slice(0, 50000).asConst(), openDirectory(dir.sub("dst")),
                                    "constant 1/1", TreeLimits()));
}

TEST_F(DirTreeTest, UnpackRefusesASizeRunningPastTheEnd) {
  // The header declares a MiB (libarchive pads the data to it); the archive
  // is cut after the header and one block of data.
  auto tar = handMadeTar(
      [](archive_entry* entry) {
        archive_entry_set_pathname(entry, "huge");
        archive_entry_set_size(entry, 1 << 20);
      },
      "hello");
  KJ_SYSCALL(::mkdir(dir.sub("dst").cStr(), 0755));
  EXPECT_FAILS_WITH("constant 1/1: tar entry 'huge' cannot be read",
                    unpackTar(tar.slice(0, 1024).asConst(), openDirectory(dir.sub("dst")), "constant 1/1",
                              TreeLimits()));
  struct stat st;
  if (::stat(dir.sub("dst/huge").cStr(), &st) == 0) {
    EXPECT_LE(st.st_size, 512);
  }
}

// A sparse entry declares a size its archive does not hold: unpacked, it was
// a GiB file of holes, read and copied in full by everything after.
TEST_F(DirTreeTest, UnpackRefusesASparseEntry) {
  auto tar = handMadeTar(
      [](archive_entry* entry) {
        archive_entry_set_pathname(entry, "holes");
        archive_entry_set_size(entry, 1 << 30);
        archive_entry_sparse_add_entry(entry, 0, 5);
      },
      "hello");
  KJ_SYSCALL(::mkdir(dir.sub("dst").cStr(), 0755));
  EXPECT_FAILS_WITH("constant 1/1: tar entry 'holes' is a sparse file; sparse entries are not allowed",
                          unpackTar(tar.asPtr().asConst(), openDirectory(dir.sub("dst")), "constant 1/1", TreeLimits()));
  struct stat st;
  if (::stat(dir.sub("dst/holes").cStr(), &st) == 0) {
    EXPECT_LE(st.st_size, 5);
  }
}

TEST_F(DirTreeTest, UnpackRefusesAnEntryBeyondTheLimits) {
  auto src = dir.sub("src");
  KJ_SYSCALL(::mkdir(src.cStr(), 0755));
  makeDeepTree(src, 256);
  auto tar = tarOf(src);
  KJ_SYSCALL(::mkdir(dir.sub("dst").cStr(), 0755));
  EXPECT_FAILS_WITH("constant 1/1: directory depth 257 exceeds the limit of 256 (--max-dir-depth)",
                          unpackTar(tar.asPtr().asConst(), openDirectory(dir.sub("dst")), "constant 1/1", TreeLimits()));
  // One level less fits.
  removeTree(src);
  KJ_SYSCALL(::mkdir(src.cStr(), 0755));
  makeDeepTree(src, 255);
  auto fits = tarOf(src);
  KJ_SYSCALL(::mkdir(dir.sub("fits").cStr(), 0755));
  unpackTar(fits.asPtr().asConst(), openDirectory(dir.sub("fits")), "constant 1/1", TreeLimits());
  EXPECT_EQ(measureDeepTree(dir.sub("fits")), std::make_pair(size_t(255), true));
}

}  // namespace
}  // namespace squall
