// Tests of the store's memory tier: placement, spilling by last use, links
// left for paths handed out, removal during a spill; and the tier's
// directory (stale ones, sizes). Test thread only.
#include "memory-tier.h"
#include "object-store.h"

#include "dir-tree.h"
#include "safe-path.h"
#include "test-util.h"

#include <squall/proto/chunk-codec.h>

#include <algorithm>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace squall {
namespace {

constexpr uint64_t MIB = 1 << 20;

struct TierMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::shared_ptr<spdlog::logger> logger = testLogger();
  TempDir dir;
  UvBridge bridge{io.unixEventPort, io.provider->getTimer(), *logger};
  ObjectStore store{bridge, dir.sub("objects"), *logger, 1 << 20};
};

class MemoryTierTest : public ::testing::Test {
 protected:
  std::unique_ptr<TierMembers> members = std::make_unique<TierMembers>();
  kj::AsyncIoContext& io = members->io;
  TempDir& dir = members->dir;
  ObjectStore& store = members->store;

  void SetUp() override {
    auto tier = dir.sub("objects/memory");
    KJ_SYSCALL(::mkdir(tier.cStr(), 0700));
    store.useMemoryTier(kj::mv(tier), 10 * MIB);
  }

  static std::string bytesOf(uint64_t size, char fill) { return std::string(size, fill); }

  // Writes a file of `size` bytes where the store places it and adopts it.
  void put(Id id, uint64_t size, char fill) {
    auto path = store.newTempPath(store.placeFor(size));
    auto bytes = bytesOf(size, fill);
    writeFile(path, kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()), 0644);
    store.adoptFile(id, wire::ObjectKind::BLOB, kj::mv(path), hashFile(path));
  }

  static std::string contents(kj::StringPtr path) {
    auto fd = openOrThrow(path, O_RDONLY);
    struct stat st;
    KJ_SYSCALL(::fstat(fd, &st));
    auto bytes = preadUpTo(fd, 0, st.st_size);
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  }

  kj::String pathOf(Id id) {
    auto data = KJ_ASSERT_NONNULL(store.data(id));
    return kj::mv(data.get<kj::String>());
  }

  bool inTier(Id id) { return pathOf(id).startsWith(dir.sub("objects/memory/")); }

  std::vector<std::string> tierFiles() {
    auto names = listDir(openDirectory(dir.sub("objects/memory")));
    std::vector<std::string> out(names.begin(), names.end());
    std::sort(out.begin(), out.end());
    return out;
  }

  // Gives the loop (spills copy on the pool) until `done`, 10 s at most.
  template <typename Done>
  bool within(Done&& done) {
    for (int i = 0; i < 500 && !done(); i++) {
      waitWithTimeout(io, io.provider->getTimer().afterDelay(20 * kj::MILLISECONDS));
    }
    return done();
  }
};

TEST_F(MemoryTierTest, BlobsGoToMemoryWhileTheyFitAndTheLeastRecentlyReadSpill) {
  put(Id{1, 1}, 3 * MIB, 'a');
  put(Id{1, 2}, 3 * MIB, 'b');
  EXPECT_TRUE(inTier(Id{1, 1}));
  EXPECT_TRUE(inTier(Id{1, 2}));
  EXPECT_EQ(store.stats().memoryBytes, 6 * MIB);
  auto handedOut = pathOf(Id{1, 2});
  // 1 read after 2: 2 is the least recently read when 3 takes the tier
  // past 80% of its 10 MiB.
  pathOf(Id{1, 1});
  put(Id{1, 3}, 3 * MIB, 'c');
  ASSERT_TRUE(within([&]() { return store.stats().spilledObjects == 1; }));
  auto stats = store.stats();
  EXPECT_EQ(stats.memoryBytes, 6 * MIB);
  EXPECT_EQ(stats.memoryObjects, 2u);
  EXPECT_EQ(stats.spilledBytes, 3 * MIB);
  EXPECT_TRUE(inTier(Id{1, 1}));
  EXPECT_TRUE(inTier(Id{1, 3}));
  EXPECT_FALSE(inTier(Id{1, 2}));
  EXPECT_EQ(contents(pathOf(Id{1, 2})), bytesOf(3 * MIB, 'b'));
  // The path handed out before the spill still opens the object.
  struct stat st;
  KJ_SYSCALL(::lstat(handedOut.cStr(), &st));
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(contents(handedOut), bytesOf(3 * MIB, 'b'));
  // A blob past the spill line of an empty tier goes to disk at once; so
  // does one that would take the tier a quarter past its capacity.
  put(Id{1, 4}, 9 * MIB, 'd');
  EXPECT_FALSE(inTier(Id{1, 4}));
  put(Id{1, 5}, 7 * MIB, 'e');
  EXPECT_FALSE(inTier(Id{1, 5}));
  EXPECT_EQ(store.placeFor(4 * MIB), Tier::MEMORY);
  EXPECT_EQ(store.placeFor(4 * MIB, 3 * MIB), Tier::DISK);
  // Removing the spilled object removes its link and its copy.
  auto copy = pathOf(Id{1, 2});
  store.remove(Id{1, 2});
  EXPECT_NE(::lstat(handedOut.cStr(), &st), 0);
  ASSERT_TRUE(within([&]() { return ::access(copy.cStr(), F_OK) != 0; }));
  store.remove(Id{1, 1});
  store.remove(Id{1, 3});
  EXPECT_EQ(store.stats().memoryBytes, 0u);
  EXPECT_EQ(store.stats().memoryObjects, 0u);
}

TEST_F(MemoryTierTest, AReaderOpenedBeforeASpillReadsOnAndARemovalDuringOneLeavesNothing) {
  put(Id{2, 1}, 5 * MIB, 'x');
  auto reader = KJ_ASSERT_NONNULL(store.openReader(Id{2, 1}));
  put(Id{2, 2}, 4 * MIB, 'y');  // past the line: 2/1 spills
  // Removed while (or before) its copy is made: the spill leaves nothing.
  store.remove(Id{2, 2});
  ASSERT_TRUE(within([&]() { return store.stats().spilledObjects == 1; }));
  auto chunk = waitWithTimeout(io, reader->readChunk(MIB, CHUNK_SIZE, false));
  EXPECT_EQ(chunk.covers, CHUNK_SIZE);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(chunk.bytes.begin()), 16), std::string(16, 'x'));
  store.remove(Id{2, 1});
  auto left = [&]() {
    size_t n = 0;
    for (auto& name : listDir(openDirectory(dir.sub("objects")))) n += name != "memory";
    // What a removed object leaves warm (the test below) is no object.
    for (auto& name : tierFiles()) n += name.rfind(".warm-", 0) != 0;
    return n;
  };
  EXPECT_TRUE(within([&]() { return left() == 0; })) << left();
}

// Warm files (warm-files.h): a removed object's file in the tier is kept
// when nothing else holds it, and the next upload of a size near it is
// written into it, in place, with its old pages.
TEST_F(MemoryTierTest, ARemovedObjectsFileIsWrittenIntoByTheNextUploadWhenNothingElseHoldsIt) {
  put(Id{3, 1}, 4 * MIB, 'a');
  struct stat before;
  KJ_SYSCALL(::stat(pathOf(Id{3, 1}).cStr(), &before));
  store.remove(Id{3, 1});
  ASSERT_TRUE(within([&]() { return store.stats().warmFiles == 1; }));
  EXPECT_EQ(store.stats().warmBytes, 4 * MIB);
  EXPECT_EQ(tierFiles(), std::vector<std::string>{".warm-1"});
  // Taken by a smaller object: the same inode, cut to its size, writable.
  auto path = store.newFilePath(Tier::MEMORY, 3 * MIB);
  struct stat after;
  KJ_SYSCALL(::stat(path.cStr(), &after));
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_size, static_cast<off_t>(3 * MIB));
  EXPECT_EQ(after.st_mode & 0777, 0644u);
  EXPECT_EQ(store.stats().warmBytes, 0u);
  {
    auto fd = openOrThrow(path, O_WRONLY | O_CLOEXEC);
    auto bytes = bytesOf(3 * MIB, 'b');
    pwriteAll(fd, kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()), 0);
  }
  store.adoptFile(Id{3, 2}, wire::ObjectKind::BLOB, kj::str(path), hashFile(path));
  EXPECT_EQ(contents(pathOf(Id{3, 2})), bytesOf(3 * MIB, 'b'));
  // None kept: a fresh path, no file yet.
  auto fresh = store.newFilePath(Tier::MEMORY, MIB);
  EXPECT_NE(::access(fresh.cStr(), F_OK), 0);
  // On disk, never.
  store.remove(Id{3, 2});
  ASSERT_TRUE(within([&]() { return store.stats().warmFiles == 1; }));
  auto onDisk = store.newFilePath(Tier::DISK, 3 * MIB);
  EXPECT_NE(::access(onDisk.cStr(), F_OK), 0);
  EXPECT_EQ(store.stats().warmFiles, 1u);
}

// A call's output directory is lent a warm file when its function made a
// big blob last time; what the executor did not take comes back.
TEST_F(MemoryTierTest, ACallIsLentAWarmFileForWhatItsFunctionMadeLastTime) {
  put(Id{6, 1}, 4 * MIB, 'a');
  store.remove(Id{6, 1});
  ASSERT_TRUE(within([&]() { return store.stats().warmFiles == 1; }));
  {
    // Nothing known of f yet: nothing lent.
    StoreTemp outDir(store, Tier::MEMORY);
    outDir.lend("ex/f");
    EXPECT_EQ(outDir.lent().size(), 0u);
  }
  store.rememberOutput("ex/f", 3 * MIB);
  store.rememberOutput("ex/small", 1000);  // too small to count
  {
    StoreTemp small(store, Tier::MEMORY);
    small.lend("ex/small");
    EXPECT_EQ(small.lent().size(), 0u);
    StoreTemp onDisk(store, Tier::DISK);
    onDisk.lend("ex/f");
    EXPECT_EQ(onDisk.lent().size(), 0u);
  }
  {
    StoreTemp outDir(store, Tier::MEMORY);
    outDir.lend("ex/f");
    ASSERT_EQ(outDir.lent().size(), 1u);
    EXPECT_EQ(outDir.lent()[0].size, 4 * MIB);
    EXPECT_EQ(contents(outDir.lent()[0].path).size(), 4 * MIB);
    EXPECT_EQ(store.stats().warmFiles, 0u);
  }
  // Not taken: back, warm again.
  ASSERT_TRUE(within([&]() { return store.stats().warmFiles == 1; }));
  {
    StoreTemp outDir(store, Tier::MEMORY);
    outDir.lend("ex/f");
    ASSERT_EQ(outDir.lent().size(), 1u);
    // Taken by an output (renamed away): nothing comes back.
    KJ_SYSCALL(::rename(outDir.lent()[0].path.cStr(), dir.sub("objects/memory/taken").cStr()));
  }
  EXPECT_TRUE(within([&]() { return tierFiles() == std::vector<std::string>{"taken"}; }));
  EXPECT_EQ(store.stats().warmFiles, 0u);
}

TEST_F(MemoryTierTest, AFileStillMappedOpenOrLinkedElsewhereIsNeverReused) {
  put(Id{4, 1}, 2 * MIB, 'm');
  put(Id{4, 2}, 2 * MIB, 'o');
  put(Id{4, 3}, 2 * MIB, 'l');
  // A mapping whose descriptor is closed (as a driver's array of a get).
  void* mapped;
  {
    auto fd = openOrThrow(pathOf(Id{4, 1}), O_RDONLY | O_CLOEXEC);
    mapped = ::mmap(nullptr, 2 * MIB, PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(mapped, MAP_FAILED);
  }
  KJ_DEFER(::munmap(mapped, 2 * MIB));
  auto open = openOrThrow(pathOf(Id{4, 2}), O_RDONLY | O_CLOEXEC);
  auto link = dir.sub("elsewhere");
  KJ_SYSCALL(::link(pathOf(Id{4, 3}).cStr(), link.cStr()));
  for (uint64_t n : {1, 2, 3}) store.remove(Id{4, n});
  // Each is unlinked: only the mapping, the descriptor and the link are left.
  ASSERT_TRUE(within([&]() { return tierFiles().empty(); })) << tierFiles().size();
  EXPECT_EQ(store.stats().warmFiles, 0u);
  EXPECT_EQ(std::string(static_cast<const char*>(mapped), 2 * MIB), bytesOf(2 * MIB, 'm'));
  EXPECT_EQ(preadUpTo(open, 0, 4)[0], 'o');
  EXPECT_EQ(contents(link), bytesOf(2 * MIB, 'l'));
}

TEST_F(MemoryTierTest, WarmFilesStayWithinTheTiersCapacityBesideItsObjects) {
  // 10 MiB tier: 3 + 3 MiB removed and kept warm.
  put(Id{5, 1}, 3 * MIB, 'a');
  put(Id{5, 2}, 3 * MIB, 'b');
  store.remove(Id{5, 1});
  store.remove(Id{5, 2});
  ASSERT_TRUE(within([&]() { return store.stats().warmFiles == 2; }));
  EXPECT_EQ(store.stats().warmBytes, 6 * MIB);
  // 5 MiB of new objects in fresh files: the warm bytes give way, the
  // largest first, so that objects and warm files stay within 10 MiB.
  auto path = store.newTempPath(Tier::MEMORY);
  auto bytes = bytesOf(5 * MIB, 'c');
  writeFile(path, kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()), 0644);
  store.adoptFile(Id{5, 3}, wire::ObjectKind::BLOB, kj::str(path), hashFile(path));
  EXPECT_EQ(store.stats().warmFiles, 1u);
  EXPECT_EQ(store.stats().warmBytes, 3 * MIB);
  ASSERT_TRUE(within([&]() { return tierFiles().size() == 2; }));
  // Small files are not kept.
  put(Id{5, 4}, MIB / 2, 'd');
  store.remove(Id{5, 4});
  ASSERT_TRUE(within([&]() { return tierFiles().size() == 2; }));
  EXPECT_EQ(store.stats().warmFiles, 1u);
}

TEST(MemoryTierDirTest, AShmDirectoryIsTheGovernorsAndDeadGovernorsOnesGo) {
  TempDir dir;
  auto logger = testLogger();
  // A pid no process has now: a child's, reaped.
  pid_t gone = ::fork();
  if (gone == 0) _exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  auto stale = dir.sub(kj::str("squall-store-", gone).cStr());
  auto alive = dir.sub("squall-store-1");
  auto other = dir.sub("squall-store-x");
  for (auto& path : {kj::StringPtr(stale), kj::StringPtr(alive), kj::StringPtr(other)}) {
    KJ_SYSCALL(::mkdir(path.cStr(), 0700));
  }
  writeFile(kj::str(stale, "/1-1"), kj::arrayPtr(reinterpret_cast<const kj::byte*>("abc"), 3), 0444);
  {
    MemoryTierDir tier(dir.sub("objects"), false, dir.path(), *logger);
    EXPECT_EQ(tier.how(), "shm");
    EXPECT_EQ(tier.path(), dir.sub(kj::str("squall-store-", ::getpid()).cStr()));
    struct stat st;
    KJ_SYSCALL(::stat(tier.path().cStr(), &st));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_NE(::access(stale.cStr(), F_OK), 0);
    EXPECT_EQ(::access(alive.cStr(), F_OK), 0);
    EXPECT_EQ(::access(other.cStr(), F_OK), 0);
  }
  EXPECT_NE(::access(dir.sub(kj::str("squall-store-", ::getpid()).cStr()).cStr(), F_OK), 0);
}

TEST(MemoryTierDirTest, SizesAndTheDefault) {
  EXPECT_EQ(KJ_ASSERT_NONNULL(parseStoreMemory("0")), 0u);
  EXPECT_EQ(KJ_ASSERT_NONNULL(parseStoreMemory("4096")), 4096u);
  EXPECT_EQ(KJ_ASSERT_NONNULL(parseStoreMemory("512M")), 512 * MIB);
  EXPECT_EQ(KJ_ASSERT_NONNULL(parseStoreMemory("2g")), 2048 * MIB);
  EXPECT_EQ(KJ_ASSERT_NONNULL(parseStoreMemory("1T")), uint64_t(1) << 40);
  EXPECT_EQ(KJ_ASSERT_NONNULL(parseStoreMemory("1.5G")), 1536 * MIB);
  for (auto bad : {"", "M", "12MB", "-1", "99999999999999999999", "20000000T"}) {
    EXPECT_TRUE(parseStoreMemory(bad) == nullptr) << bad;
  }
  TempDir proc;
  writeFile(proc.sub("meminfo"),
            kj::StringPtr("MemTotal:       16384000 kB\nMemAvailable:    1000000 kB\n").asBytes(), 0644);
  EXPECT_EQ(defaultStoreMemory(proc.path()), 1000000ull * 1024 / 10 * 3);
  EXPECT_EQ(defaultStoreMemory(proc.sub("nowhere")), 0u);
}

}  // namespace
}  // namespace squall
