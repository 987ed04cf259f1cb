// Tests of the client's tar writer and reader on deep trees. Test thread
// only.
#include "tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <cstdlib>
#include <fcntl.h>
#include <filesystem>
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <string>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall::client {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/squall-tar-test-XXXXXX";
    EXPECT_NE(mkdtemp(pattern.data()), nullptr);
    path = pattern;
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

// `depth` directories "d" nested below `root`, "f" at the bottom; made a
// level at a time (no long paths).
void makeDeepTree(const std::string& root, size_t depth) {
  int dir = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(dir, 0);
  for (size_t i = 0; i < depth; i++) {
    ASSERT_EQ(mkdirat(dir, "d", 0755), 0);
    int next = openat(dir, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(next, 0);
    close(dir);
    dir = next;
  }
  int file = openat(dir, "f", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_EQ(write(file, "bottom", 6), 6);
  close(file);
  close(dir);
}

size_t measureDeepTree(const std::string& root) {
  int dir = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t depth = 0;
  for (;;) {
    int next = openat(dir, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (next < 0) break;
    close(dir);
    dir = next;
    depth++;
  }
  struct stat st;
  bool file = fstatat(dir, "f", &st, 0) == 0 && st.st_size == 6;
  close(dir);
  return file ? depth : 0;
}

// A walk holding a descriptor per level fails with EMFILE under 64.
TEST(ClientTarTest, ADeepTreeRoundTripsWithFewDescriptors) {
  TempDir dir;
  auto src = dir.path + "/src";
  ASSERT_EQ(mkdir(src.c_str(), 0755), 0);
  makeDeepTree(src, 1500);
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::string failure;
  try {
    auto tar = tarDirectory(src, 1 << 30);
    auto file = dir.path + "/tree.tar";
    FILE* out = fopen(file.c_str(), "wb");
    fwrite(tar.data(), 1, tar.size(), out);
    fclose(out);
    untarInto(file, dir.path + "/dst");
  } catch (const std::exception& e) {
    failure = e.what();
  }
  setrlimit(RLIMIT_NOFILE, &saved);
  EXPECT_EQ(failure, "");
  EXPECT_EQ(measureDeepTree(dir.path + "/dst"), 1500u);
}

TEST(ClientTarTest, ASparseEntryIsNotUnpacked) {
  TempDir dir;
  auto file = dir.path + "/sparse.tar";
  struct archive* writer = archive_write_new();
  archive_write_set_format_pax(writer);
  ASSERT_EQ(archive_write_open_filename(writer, file.c_str()), ARCHIVE_OK);
  archive_entry* entry = archive_entry_new();
  archive_entry_set_pathname(entry, "holes");
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_perm(entry, 0644);
  archive_entry_set_size(entry, 1 << 30);
  archive_entry_sparse_add_entry(entry, 0, 5);
  ASSERT_EQ(archive_write_header(writer, entry), ARCHIVE_OK);
  archive_write_data(writer, "hello", 5);
  archive_entry_free(entry);
  archive_write_close(writer);
  archive_write_free(writer);
  try {
    untarInto(file, dir.path + "/dst");
    ADD_FAILURE() << "a sparse entry was unpacked";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sparse entry 'holes'"), std::string::npos) << e.what();
  }
  struct stat st;
  if (stat((dir.path + "/dst/holes").c_str(), &st) == 0) {
    EXPECT_LE(st.st_size, 5);
  }
}

}  // namespace
}  // namespace squall::client
