// Tests of LocalFile: a described file opens on this machine by its
// description, relative paths included; another machine's, another
// inode's, or a link at the path does not.
#include <squall/proto/local-file.h>

#include <capnp/message.h>
#include <cstdlib>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {
namespace {

struct Dir {
  std::string path;
  Dir() {
    char pattern[] = "/tmp/local-file-test-XXXXXX";
    path = mkdtemp(pattern);
  }
  ~Dir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

TEST(LocalFileTest, ADescribedFileOpensHereAndOnlyAsItself) {
  Dir dir;
  auto file = dir.path + "/object";
  int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "bytes", 5), 5);
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(::chdir(dir.path.c_str()), 0);
  capnp::MallocMessageBuilder message;
  auto described = message.initRoot<wire::LocalFile>();
  // Described by a path relative to the describer's working directory.
  describeLocalFile(fd, "object", described);
  ASSERT_EQ(::chdir(cwd), 0);
  ::close(fd);
  EXPECT_EQ(std::string(described.getPath().cStr()), file);
  EXPECT_EQ(described.getPid(), static_cast<uint32_t>(::getpid()));
  ASSERT_GT(machineBootId().size(), 0u);
  {
    auto opened = KJ_ASSERT_NONNULL(openLocalFile(described.asReader(), O_RDONLY));
    char back[8] = {};
    EXPECT_EQ(::pread(opened, back, sizeof(back), 0), 5);
    EXPECT_EQ(std::string(back), "bytes");
  }
  // Another machine's, another file's, a link where the file was.
  described.setBootId("0000-another-machine");
  EXPECT_TRUE(openLocalFile(described.asReader(), O_RDONLY) == nullptr);
  described.setBootId(machineBootId());
  described.setInode(described.getInode() + 1);
  EXPECT_TRUE(openLocalFile(described.asReader(), O_RDONLY) == nullptr);
  described.setInode(described.getInode() - 1);
  ASSERT_EQ(::rename(file.c_str(), (file + ".moved").c_str()), 0);
  ASSERT_EQ(::symlink((file + ".moved").c_str(), file.c_str()), 0);
  EXPECT_TRUE(openLocalFile(described.asReader(), O_RDONLY) == nullptr);
  described.setPath("relative/path");
  EXPECT_TRUE(openLocalFile(described.asReader(), O_RDONLY) == nullptr);
}

}  // namespace
}  // namespace squall
