// Tests of the object store. Test thread only.
#include "object-store.h"

#include "dir-tree.h"
#include "safe-path.h"
#include "test-util.h"

#include <squall/proto/chunk-codec.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>

namespace squall {
namespace {

struct StoreMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::shared_ptr<spdlog::logger> logger = testLogger();
  TempDir dir;
  UvBridge bridge{io.unixEventPort, io.provider->getTimer(), *logger};
};

class ObjectStoreTest : public ::testing::Test {
 protected:
  // KJ objects may throw from destructors; gtest fixtures must not.
  std::unique_ptr<StoreMembers> members = std::make_unique<StoreMembers>();
  kj::AsyncIoContext& io = members->io;
  std::shared_ptr<spdlog::logger> logger = members->logger;
  TempDir& dir = members->dir;
  UvBridge& bridge = members->bridge;
};

kj::Array<const kj::byte> pattern(size_t size) {
  auto bytes = kj::heapArray<kj::byte>(size);
  for (size_t i = 0; i < size; i++) bytes[i] = static_cast<kj::byte>((i * 7919) >> 3);
  return kj::mv(bytes);
}

// A governor killed mid-collect leaves a temporary tree of whatever depth
// the task made; the next start must clear it, with few descriptors.
TEST_F(ObjectStoreTest, StartRemovesADeepLeftoverTree) {
  auto leftover = dir.sub("objects/.tmp-3");
  makeDirs(leftover);
  makeDeepTree(leftover, 1500);
  KJ_SYSCALL(::chmod(leftover.cStr(), 0555));  // sealed half-way
  {
    LowDescriptorLimit limit(64);
    ObjectStore store(bridge, dir.sub("objects"), *logger, 1 << 20);
    EXPECT_EQ(listDir(openDirectory(store.directory())).size(), 0u);
  }
  EXPECT_EQ(listDir(openDirectory(dir.path())), std::vector<std::string>{"objects"});
}

// The store is the governor's alone: made 0700, parents it makes too, and
// an earlier run's store (0755) made private again.
TEST_F(ObjectStoreTest, StoreDirectoryIsPrivate) {
  struct stat st;
  {
    ObjectStore store(bridge, dir.sub("work/objects"), *logger, 1 << 20);
    KJ_SYSCALL(::stat(store.directory().cStr(), &st));
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    KJ_SYSCALL(::stat(dir.sub("work").cStr(), &st));
    EXPECT_EQ(st.st_mode & 07777, 0700u);
  }
  KJ_SYSCALL(::chmod(dir.sub("work/objects").cStr(), 0755));
  ObjectStore again(bridge, dir.sub("work/objects"), *logger, 1 << 20);
  KJ_SYSCALL(::stat(again.directory().cStr(), &st));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
}

// makeDirs gives every directory it makes the mode asked for (it ignored
// it: 0755 whatever was asked) and leaves existing ones alone.
TEST_F(ObjectStoreTest, MakeDirsGivesTheModeToWhatItMakes) {
  struct stat st;
  makeDirs(dir.sub("a"), 0755);
  makeDirs(dir.sub("a/b/c"));
  for (auto sub : {"a/b", "a/b/c"}) {
    KJ_SYSCALL(::stat(dir.sub(sub).cStr(), &st));
    EXPECT_EQ(st.st_mode & 07777, 0700u) << sub;
  }
  KJ_SYSCALL(::stat(dir.sub("a").cStr(), &st));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  makeDirs(kj::str(dir.sub("a/b/c"), "/"), 0711);  // all there: nothing changes
  KJ_SYSCALL(::stat(dir.sub("a/b/c").cStr(), &st));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  writeText(dir.sub("a/file"), "x");
  EXPECT_ANY_THROW(makeDirs(dir.sub("a/file/d")));
}

// Sets or clears the immutable flag of `path` (chattr +i); false where the
// file system or the process's capabilities do not allow it.
bool setImmutable(kj::StringPtr path, bool on) {
  int fd = ::open(path.cStr(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  kj::AutoCloseFd file(fd);
  int flags;
  if (::ioctl(fd, FS_IOC_GETFLAGS, &flags) < 0) return false;
  flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
  return ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
}

// What cannot be removed (here an immutable file) is moved aside and the
// store starts empty all the same.
TEST_F(ObjectStoreTest, StartsAnywayWhenALeftoverCannotBeRemoved) {
  auto stuck = dir.sub("objects/.tmp-1/stuck");
  writeText(stuck, "x");
  if (!setImmutable(stuck, true)) GTEST_SKIP() << "cannot make a file immutable here";
  KJ_DEFER(setImmutable(stuck, false));
  ObjectStore store(bridge, dir.sub("objects"), *logger, 1 << 20);
  EXPECT_EQ(listDir(openDirectory(store.directory())).size(), 0u);
  auto names = listDir(openDirectory(dir.path()));
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "objects");
  EXPECT_EQ(names[1].rfind("objects.stale-", 0), 0u) << names[1];
  // Where the flag is cleared (KJ_DEFER above) so the test can clean up.
  stuck = kj::str(dir.path(), "/", names[1].c_str(), "/.tmp-1/stuck");
}

// A dir whose temporary tree is dropped (a failed collect) goes entirely.
TEST_F(ObjectStoreTest, ADroppedDeepTemporaryTreeIsRemoved) {
  ObjectStore store(bridge, dir.sub("objects"), *logger, 1 << 20);
  {
    StoreTemp temp(store);
    makeDirs(temp.path());
    makeDeepTree(temp.path(), 1500);
  }
  LowDescriptorLimit limit(64);
  // The removal runs on the pool: give it the loop until the store is empty.
  for (int i = 0; i < 600 && listDir(openDirectory(store.directory())).size() > 0; i++) {
    waitWithTimeout(io, io.provider->getTimer().afterDelay(50 * kj::MILLISECONDS));
  }
  EXPECT_EQ(listDir(openDirectory(store.directory())).size(), 0u);
}

TEST_F(ObjectStoreTest, SmallObjectsLiveInMemoryAndLargeOnesInFiles) {
  ObjectStore store(bridge, dir.sub("objects"), *logger, 1 << 20);
  auto small = pattern(1000);
  uint64_t smallHash = hashBytes(small);
  auto meta = waitWithTimeout(io, store.putBytes(Id{1, 1}, wire::ObjectKind::BLOB, kj::mv(small)));
  EXPECT_EQ(meta.size, 1000u);
  EXPECT_EQ(meta.hash, smallHash);
  EXPECT_EQ(store.memoryUsed(), 1000u);
  EXPECT_TRUE(KJ_ASSERT_NONNULL(store.data(Id{1, 1})).is<kj::Own<const Blob>>());

  auto large = pattern(3 * CHUNK_SIZE + 5);
  uint64_t largeHash = hashBytes(large);
  meta = waitWithTimeout(io, store.putBytes(Id{1, 2}, wire::ObjectKind::BLOB, kj::mv(large)));
  EXPECT_EQ(meta.size, 3 * CHUNK_SIZE + 5);
  EXPECT_EQ(meta.hash, largeHash);
  auto data = KJ_ASSERT_NONNULL(store.data(Id{1, 2}));
  ASSERT_TRUE(data.is<kj::String>());
  auto path = kj::mv(data.get<kj::String>());
  struct stat st;
  ASSERT_EQ(stat(path.cStr(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
  EXPECT_EQ(hashFile(path).hash, largeHash);

  // A reader keeps working after the object is dropped from the store.
  auto reader = KJ_ASSERT_NONNULL(store.openReader(Id{1, 2}));
  store.remove(Id{1, 2});
  store.remove(Id{9, 9});  // unknown: fine
  EXPECT_TRUE(store.find(Id{1, 2}) == nullptr);
  auto chunk = waitWithTimeout(io, reader->readChunk(CHUNK_SIZE, CHUNK_SIZE, false));
  EXPECT_EQ(chunk.covers, CHUNK_SIZE);
  EXPECT_EQ(chunk.rawSize, 0u);
  auto expected = pattern(3 * CHUNK_SIZE + 5);
  EXPECT_EQ(memcmp(chunk.bytes.begin(), expected.begin() + CHUNK_SIZE, CHUNK_SIZE), 0);
  auto tail = waitWithTimeout(io, reader->readChunk(3 * CHUNK_SIZE, CHUNK_SIZE, false));
  EXPECT_EQ(tail.covers, 5u);

  store.remove(Id{1, 1});
  EXPECT_EQ(store.memoryUsed(), 0u);
  EXPECT_EQ(store.count(), 0u);
}

TEST_F(ObjectStoreTest, MemoryBudgetSendsSmallObjectsToDisk) {
  ObjectStore store(bridge, dir.sub("objects"), *logger, 1500);
  waitWithTimeout(io, store.putBytes(Id{1, 1}, wire::ObjectKind::BLOB, pattern(1000)));
  waitWithTimeout(io, store.putBytes(Id{1, 2}, wire::ObjectKind::BLOB, pattern(1000)));
  EXPECT_EQ(store.memoryUsed(), 1000u);
  EXPECT_TRUE(KJ_ASSERT_NONNULL(store.data(Id{1, 2})).is<kj::String>());
}

TEST_F(ObjectStoreTest, ArrivalsCanBeAwaitedAndRemovedOnArrival) {
  ObjectStore store(bridge, dir.sub("objects"), *logger, 1 << 20);
  store.expectArrival(Id{2, 1}, store.putBytes(Id{2, 1}, wire::ObjectKind::BLOB, pattern(CHUNK_SIZE)).ignoreResult());
  auto arrived = KJ_ASSERT_NONNULL(store.whenArrived(Id{2, 1}));
  waitWithTimeout(io, kj::mv(arrived));
  EXPECT_TRUE(store.find(Id{2, 1}) != nullptr);

  store.expectArrival(Id{2, 2}, store.putBytes(Id{2, 2}, wire::ObjectKind::BLOB, pattern(CHUNK_SIZE)).ignoreResult());
  auto second = KJ_ASSERT_NONNULL(store.whenArrived(Id{2, 2}));
  store.remove(Id{2, 2});
  waitWithTimeout(io, kj::mv(second));
  // The removal is applied once the arrival's bookkeeping ran.
  waitWithTimeout(io, io.provider->getTimer().afterDelay(0 * kj::MILLISECONDS));
  EXPECT_TRUE(store.find(Id{2, 2}) == nullptr);
}

TEST(SafePathTest, RelativePathRules) {
  EXPECT_TRUE(relativePathProblem("a") == nullptr);
  EXPECT_TRUE(relativePathProblem("a/b.txt") == nullptr);
  EXPECT_TRUE(relativePathProblem("a//b/./c/") == nullptr);  // normalised
  EXPECT_EQ(KJ_ASSERT_NONNULL(relativePathProblem("")), "it is empty");
  EXPECT_EQ(KJ_ASSERT_NONNULL(relativePathProblem("/etc/passwd")), "it is absolute");
  EXPECT_EQ(KJ_ASSERT_NONNULL(relativePathProblem("..")), "it contains '..'");
  EXPECT_EQ(KJ_ASSERT_NONNULL(relativePathProblem("a/../b")), "it contains '..'");
  EXPECT_EQ(KJ_ASSERT_NONNULL(relativePathProblem("./")), "it names no file");
  EXPECT_EQ(KJ_ASSERT_NONNULL(relativePathProblem(kj::StringPtr("a\0b", 3))), "it contains a NUL byte");
  auto parts = pathComponents("a//b/./c/");
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(joinPath(parts, 3), "a/b/c");
}

}  // namespace
}  // namespace squall
