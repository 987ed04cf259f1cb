// The governor's object store. Loop thread only; big file work on the pool.
#include "object-store.h"

#include "dir-tree.h"
#include "safe-path.h"

#include <cerrno>
#include <squall/proto/chunk-codec.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {
ObjectReader::Chunk makeChunk(kj::Array<kj::byte> raw, bool compress) {
  ObjectReader::Chunk chunk;
  chunk.covers = raw.size();
  if (compress) {
    KJ_IF_MAYBE(packed, compressChunk(raw)) {
      chunk.bytes = kj::mv(*packed);
      chunk.rawSize = raw.size();
      return chunk;
    }
  }
  chunk.bytes = kj::mv(raw);
  return chunk;
}
}  // namespace

kj::Promise<ObjectReader::Chunk> ObjectReader::readChunk(uint64_t offset, size_t max,
                                                         bool compress) {
  KJ_REQUIRE(max <= CHUNK_SIZE, "chunk too large", max);
  if (source.is<kj::Own<const TarStream>>()) {
    KJ_REQUIRE(offset == streamed, "a dir's tar archive is read in order", offset, streamed);
    auto& tar = source.get<kj::Own<const TarStream>>();
    return bridge
        .runOnPool<Chunk>([tar = kj::atomicAddRef(*tar), max, compress]() {
          return makeChunk(tar->writer.next(max), compress);
        })
        .then([this](Chunk chunk) {
          streamed += chunk.covers;
          return kj::mv(chunk);
        });
  }
  if (offset >= meta.size) return Chunk();
  size_t n = kj::min(static_cast<uint64_t>(max), meta.size - offset);
  KJ_SWITCH_ONEOF(source) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
      // In-memory objects are small (SMALL_OBJECT_SIZE): cheap on the loop.
      auto raw = kj::heapArray<kj::byte>(n);
      memcpy(raw.begin(), blob->bytes.begin() + offset, n);
      return makeChunk(kj::mv(raw), compress);
    }
    KJ_CASE_ONEOF(tar, kj::Own<const TarStream>) { KJ_UNREACHABLE; }
    KJ_CASE_ONEOF(fd, kj::Own<const SharedFd>) {
      return bridge.runOnPool<Chunk>([fd = kj::atomicAddRef(*fd), offset, n, compress]() {
        auto raw = preadUpTo(fd->fd, offset, n);
        KJ_REQUIRE(raw.size() == n, "object file is shorter than recorded", raw.size(), n);
        return makeChunk(kj::mv(raw), compress);
      });
    }
  }
  KJ_UNREACHABLE;
}

void ObjectStore::ErrorLogger::taskFailed(kj::Exception&& e) {
  logger.warn("event=store-cleanup-failed error=\"{}\"", e.getDescription().cStr());
}

ObjectStore::ObjectStore(UvBridge& bridge, kj::String dirParam, spdlog::logger& logger,
                         uint64_t memoryBudget, TreeLimits limits)
    : bridge(bridge),
      dir(kj::mv(dirParam)),
      logger(logger),
      memoryBudget(memoryBudget),
      limits(limits),
      errorLogger(logger),
      background(errorLogger),
      warm(bridge, background, logger) {
  KJ_IF_MAYBE(left, freshDirectory(dir)) {
    logger.warn("event=leftover-not-removed dir={} moved_to={} error=\"{}\"", dir.cStr(),
                left->movedTo.cStr(), left->error.cStr());
  }
}

ObjectStore::~ObjectStore() noexcept(false) {}

kj::String ObjectStore::pathFor(Id id, Tier tier) const {
  return kj::str(directoryOf(tier), "/", id.session, "-", id.n);
}

kj::String ObjectStore::newTempPath(Tier tier) { return kj::str(directoryOf(tier), "/.tmp-", ++tempCounter); }

kj::String ObjectStore::newFilePath(Tier tier, uint64_t size) {
  auto path = newTempPath(tier);
  if (tier == Tier::MEMORY && tierDir.size() > 0) warm.take(size, path);
  return path;
}

kj::Maybe<WarmLoan> ObjectStore::lendWarm(kj::StringPtr producer, kj::StringPtr outDir) {
  // Every call asks: nothing is made unless there is something to lend.
  uint64_t want = warm.lastMade(producer);
  if (want == 0 || warm.count() == 0 || !inTier(outDir)) return nullptr;
  auto path = kj::str(outDir, ".lent");
  uint64_t size = warm.lend(want, path);
  if (size == 0) return nullptr;
  return WarmLoan{kj::mv(path), size};
}

StoreTemp::~StoreTemp() noexcept(false) {
  for (auto& loan : loans) store.giveBack(kj::mv(loan.path), loan.size);
  if (tempPath.size() > 0) store.removeLater(kj::mv(tempPath));
}

void StoreTemp::lend(kj::StringPtr producer) {
  KJ_IF_MAYBE(loan, store.lendWarm(producer, tempPath)) { loans.add(kj::mv(*loan)); }
}

void ObjectStore::tierChanged() { warm.limit(tierCapacity > tierBytes ? tierCapacity - tierBytes : 0); }

void ObjectStore::useMemoryTier(kj::String tierDirParam, uint64_t capacity) {
  KJ_REQUIRE(objects.empty() && tierDir.size() == 0, "the memory tier is set once, before any object");
  tierDir = kj::mv(tierDirParam);
  tierCapacity = capacity;
  tierChanged();
}

StoreStats ObjectStore::stats() const {
  StoreStats out;
  out.objects = objects.size();
  out.memoryBytes = tierBytes;
  out.memoryCapacity = tierCapacity;
  out.memoryObjects = byLastUse.size();
  out.spilledBytes = spilledBytes;
  out.spilledObjects = spilledObjects;
  out.warmBytes = warm.bytes();
  out.warmFiles = warm.count();
  return out;
}

Tier ObjectStore::placeFor(uint64_t size, uint64_t pending) const {
  // The newest objects are the likeliest read next: one goes to memory
  // when it fits below the spill line once older ones have spilled, and
  // the tier stays within a quarter over its capacity while spills catch
  // up (they start when it is stored).
  if (tierDir.size() == 0 || size * 100 > tierCapacity * SPILL_PERCENT ||
      tierBytes + pending + size > tierCapacity + tierCapacity / 4) {
    return Tier::DISK;
  }
  return Tier::MEMORY;
}

kj::StringPtr ObjectStore::directoryOf(Tier tier) const {
  return tier == Tier::MEMORY && tierDir.size() > 0 ? tierDir.asPtr() : dir.asPtr();
}

bool ObjectStore::inTier(kj::StringPtr path) const {
  return tierDir.size() > 0 && path.startsWith(tierDir) && path.size() > tierDir.size() &&
         path[tierDir.size()] == '/';
}

void ObjectStore::touch(const Entry& entry) const {
  if (!entry.inMemory) return;
  auto it = byLastUse.find(entry.lastUse);
  KJ_ASSERT(it != byLastUse.end());
  Id id = it->second;
  byLastUse.erase(it);
  entry.lastUse = ++useCounter;
  byLastUse.emplace(entry.lastUse, id);
}

kj::Maybe<const ObjectMeta&> ObjectStore::find(Id id) const {
  auto it = objects.find(id);
  if (it == objects.end()) return nullptr;
  return it->second.meta;
}

kj::Maybe<ObjectData> ObjectStore::data(Id id) const {
  auto it = objects.find(id);
  if (it == objects.end()) return nullptr;
  touch(it->second);
  KJ_SWITCH_ONEOF(it->second.data) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) { return ObjectData(kj::atomicAddRef(*blob)); }
    KJ_CASE_ONEOF(path, kj::String) { return ObjectData(kj::str(path)); }
  }
  KJ_UNREACHABLE;
}

kj::Maybe<kj::Own<ObjectReader>> ObjectStore::openReader(Id id) {
  auto it = objects.find(id);
  if (it == objects.end()) return nullptr;
  auto& entry = it->second;
  touch(entry);
  KJ_SWITCH_ONEOF(entry.data) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) {
      return kj::heap<ObjectReader>(bridge, entry.meta, kj::atomicAddRef(*blob));
    }
    KJ_CASE_ONEOF(path, kj::String) {
      // open() of a local file is a short metadata operation.
      int fd = ::open(path.cStr(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW |
                                       (entry.meta.kind == wire::ObjectKind::DIR ? O_DIRECTORY : 0));
      if (fd < 0) {
        logger.error("event=object-file-missing object={} path={} error=\"{}\"",
                     kj::str(id).cStr(), path.cStr(), strerror(errno));
        return nullptr;
      }
      if (entry.meta.kind == wire::ObjectKind::DIR) {
        kj::Own<const TarStream> tar = kj::atomicRefcounted<TarStream>(kj::AutoCloseFd(fd));
        return kj::heap<ObjectReader>(bridge, entry.meta, kj::mv(tar));
      }
      kj::Own<const SharedFd> shared = kj::atomicRefcounted<SharedFd>(kj::AutoCloseFd(fd));
      return kj::heap<ObjectReader>(bridge, entry.meta, kj::mv(shared));
    }
  }
  KJ_UNREACHABLE;
}

kj::Maybe<kj::Promise<void>> ObjectStore::whenArrived(Id id) {
  auto it = arriving.find(id);
  if (it == arriving.end()) return nullptr;
  return it->second.addBranch();
}

void ObjectStore::expectArrival(Id id, kj::Promise<void> arrival) {
  KJ_REQUIRE(arriving.find(id) == arriving.end(), "object is already arriving", id);
  auto forked = arrival.fork();
  // Cleanup runs in its own branch: erasing the fork from inside the
  // arrival's own continuation would destroy the running node.
  auto cleanup = forked.addBranch().then([]() { return true; },
                                         [](kj::Exception&&) { return false; });
  arriving.emplace(id, kj::mv(forked));
  background.add(cleanup.then([this, id](bool arrived) {
    arriving.erase(id);
    if (removeOnArrival.erase(id) > 0 && arrived) remove(id);
  }));
}

kj::Promise<ObjectMeta> ObjectStore::putBytes(Id id, wire::ObjectKind kind,
                                              kj::Array<const kj::byte> bytes) {
  if (bytes.size() <= SMALL_OBJECT_SIZE && memoryBytes + bytes.size() <= memoryBudget) {
    ObjectMeta meta{kind, bytes.size(), hashBytes(bytes)};
    insert(id, Entry{meta, kj::Own<const Blob>(kj::atomicRefcounted<Blob>(kj::mv(bytes)))});
    return meta;
  }
  auto temp = kj::heap<TempFile>(newTempPath());
  auto path = kj::str(temp->path());
  return bridge
      .runOnPool<HashedSize>([path = kj::mv(path), bytes = kj::mv(bytes)]() {
        writeFile(path, bytes, 0444);
        return HashedSize{bytes.size(), hashBytes(bytes)};
      })
      .then([this, id, kind, temp = kj::mv(temp)](HashedSize hashed) mutable {
        return adoptFile(id, kind, temp->release(), hashed);
      });
}

ObjectMeta ObjectStore::adoptFile(Id id, wire::ObjectKind kind, kj::String path,
                                  HashedSize sizeAndHash) {
  KJ_SYSCALL(::chmod(path.cStr(), 0444), path);
  return adopt(id, kj::mv(path), ObjectMeta{kind, sizeAndHash.size, sizeAndHash.hash});
}

ObjectMeta ObjectStore::adoptDir(Id id, kj::String path, HashedSize sizeAndHash) {
  return adopt(id, kj::mv(path), ObjectMeta{wire::ObjectKind::DIR, sizeAndHash.size, sizeAndHash.hash});
}

ObjectMeta ObjectStore::adopt(Id id, kj::String path, ObjectMeta meta) {
  // The object held before goes first: its path is the one taken.
  auto it = objects.find(id);
  if (it != objects.end()) {
    discard(it->second);
    objects.erase(it);
  }
  bool memory = inTier(path);
  auto finalPath = pathFor(id, memory ? Tier::MEMORY : Tier::DISK);
  KJ_SYSCALL(::rename(path.cStr(), finalPath.cStr()), path, finalPath);
  Entry entry{meta, kj::mv(finalPath)};
  entry.inMemory = memory;
  insert(id, kj::mv(entry));
  return meta;
}

kj::Promise<ObjectMeta> ObjectStore::putTar(Id id, TarInput tar, kj::String what) {
  auto temp = kj::heap<StoreTemp>(*this);
  auto unpacked = bridge.runOnPool<HashedSize>([temp = kj::str(temp->path()), tar = kj::mv(tar),
                                                what = kj::mv(what), limits = limits]() mutable {
    KJ_DEFER(KJ_IF_MAYBE(file, tar.tryGet<kj::String>()) { ::unlink(file->cStr()); });
    KJ_SYSCALL(::mkdir(temp.cStr(), 0755), temp);
    HashedSize result;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
      auto root = openDirectory(temp);
      KJ_SWITCH_ONEOF(tar) {
        KJ_CASE_ONEOF(bytes, kj::Array<const kj::byte>) { unpackTar(bytes.asPtr(), root, what, limits); }
        KJ_CASE_ONEOF(file, kj::String) {
          auto fd = openOrThrow(file, O_RDONLY);
          unpackTar(fd.get(), root, what, limits);
        }
      }
      result = sealTree(root, what, limits);
    })) {
      removeTree(temp);
      kj::throwFatalException(kj::mv(*e));
    }
    return result;
  });
  return unpacked.then([this, id, temp = kj::mv(temp)](HashedSize hashed) mutable {
    return adoptDir(id, temp->release(), hashed);
  });
}

void ObjectStore::removeLater(kj::String path) {
  background.add(bridge.runOnPool<void>([path = kj::mv(path)]() { removeTree(path); }));
}

void ObjectStore::insert(Id id, Entry entry) {
  auto it = objects.find(id);
  if (it != objects.end()) {
    discard(it->second);
    objects.erase(it);
  }
  if (entry.data.is<kj::Own<const Blob>>()) memoryBytes += entry.meta.size;
  logger.debug("event=object-stored object={} size={} memory={} tier={}", kj::str(id).cStr(), entry.meta.size,
               entry.data.is<kj::Own<const Blob>>(), entry.inMemory ? "memory" : "disk");
  if (entry.inMemory) {
    tierBytes += entry.meta.size;
    entry.lastUse = ++useCounter;
    byLastUse.emplace(entry.lastUse, id);
    tierChanged();
  }
  objects.emplace(id, kj::mv(entry));
  spillIfFull();
}

void ObjectStore::spillIfFull() {
  if (spilling || tierBytes * 100 <= tierCapacity * SPILL_PERCENT) return;
  // The least recently used blob; dirs stay where they are.
  for (auto& [lastUse, oldest] : byLastUse) {
    // A copy: lambdas below capture it (clang refuses structured bindings).
    Id id = oldest;
    auto& entry = objects.at(id);
    if (entry.meta.kind == wire::ObjectKind::DIR) continue;
    spilling = true;
    auto from = kj::str(entry.data.get<kj::String>());
    auto copy = newTempPath(Tier::DISK);
    logger.info("event=object-spill object={} size={} memory_used={} capacity={}", kj::str(id).cStr(),
                entry.meta.size, tierBytes, tierCapacity);
    auto copied = bridge
                      .runOnPool<void>([from = kj::str(from), copy = kj::str(copy)]() {
                        auto out = openOrThrow(copy, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
                        appendFile(out, from, nullptr);
                      })
                      .then([]() -> kj::Maybe<kj::Exception> { return nullptr; },
                            [](kj::Exception&& e) -> kj::Maybe<kj::Exception> { return kj::mv(e); });
    background.add(copied.then([this, id, from = kj::mv(from), copy = kj::mv(copy)](
                                   kj::Maybe<kj::Exception> failure) mutable {
      spilled(id, kj::mv(from), kj::mv(copy), kj::mv(failure));
    }));
    return;
  }
}

bool ObjectStore::stillInMemoryAt(Id id, kj::StringPtr path) const {
  auto it = objects.find(id);
  return it != objects.end() && it->second.inMemory && it->second.data.is<kj::String>() &&
         it->second.data.get<kj::String>() == path;
}

void ObjectStore::spilled(Id id, kj::String from, kj::String copy, kj::Maybe<kj::Exception> failure) {
  spilling = false;
  if (!stillInMemoryAt(id, from)) {
    // Removed (or replaced) while it was copied: whatever the copy did.
    removeLater(kj::mv(copy));
    spillIfFull();
    return;
  }
  KJ_IF_MAYBE(e, failure) {
    // Not retried before the next object arrives.
    removeLater(kj::mv(copy));
    logger.error("event=object-spill-failed object={} error=\"{}\"", kj::str(id).cStr(), e->getDescription().cStr());
    return;
  }
  auto& entry = objects.at(id);
  auto finalPath = pathFor(id, Tier::DISK);
  KJ_SYSCALL(::rename(copy.cStr(), finalPath.cStr()), copy, finalPath);
  // The memory file becomes a link to the copy (replaced at once, so its
  // name always opens the object); its pages go with its last reader. A
  // tier inside the store's directory links relatively, so a link seen in
  // the read-only store view leads to the copy in the view.
  auto link = kj::str(from, ".link");
  auto slash = KJ_ASSERT_NONNULL(tierDir.findLast('/'));
  auto target = tierDir.slice(0, slash) == dir ? kj::str("../", id.session, "-", id.n) : kj::str(finalPath);
  KJ_SYSCALL(::symlink(target.cStr(), link.cStr()), link);
  KJ_SYSCALL(::rename(link.cStr(), from.cStr()), link, from);
  byLastUse.erase(entry.lastUse);
  entry.inMemory = false;
  entry.data = kj::mv(finalPath);
  entry.memoryLink = kj::mv(from);
  tierBytes -= entry.meta.size;
  tierChanged();
  spilledBytes += entry.meta.size;
  spilledObjects++;
  logger.info("event=object-spilled object={} size={} memory_used={}", kj::str(id).cStr(), entry.meta.size,
              tierBytes);
  spillIfFull();
}

void ObjectStore::remove(Id id) {
  if (arriving.find(id) != arriving.end()) {
    removeOnArrival.insert(id);
    return;
  }
  auto it = objects.find(id);
  if (it == objects.end()) return;
  discard(it->second);
  objects.erase(it);
  logger.debug("event=object-removed object={}", kj::str(id).cStr());
}

void ObjectStore::discard(Entry& entry) {
  KJ_IF_MAYBE(link, entry.memoryLink) { ::unlink(link->cStr()); }
  if (entry.inMemory) {
    byLastUse.erase(entry.lastUse);
    tierBytes -= entry.meta.size;
    tierChanged();
  }
  KJ_SWITCH_ONEOF(entry.data) {
    KJ_CASE_ONEOF(blob, kj::Own<const Blob>) { memoryBytes -= entry.meta.size; }
    KJ_CASE_ONEOF(path, kj::String) {
      // Rename now (cheap) so the id's path is free at once; unlinking a big
      // file can take a while, so that happens on the pool.
      auto trash = newTempPath(entry.inMemory ? Tier::MEMORY : Tier::DISK);
      if (::rename(path.cStr(), trash.cStr()) < 0) {
        logger.warn("event=object-unlink-failed path={} error=\"{}\"", path.cStr(), strerror(errno));
        return;
      }
      if (entry.meta.kind == wire::ObjectKind::DIR) {
        removeLater(kj::mv(trash));
        return;
      }
      if (entry.inMemory) {
        // Its pages may serve the next object (when nothing else sees them).
        warm.offer(kj::mv(trash), entry.meta.size);
        return;
      }
      background.add(bridge.runOnPool<void>([trash = kj::mv(trash)]() { unlinkFile(trash); }));
    }
  }
}

void ObjectStore::putConstant(Id id, wire::ObjectKind kind, kj::ArrayPtr<const kj::byte> data) {
  if (find(id) != nullptr || whenArrived(id) != nullptr) return;
  auto bytes = kj::heapArray<const kj::byte>(data);
  if (kind == wire::ObjectKind::DIR) {
    expectArrival(id, putTar(id, kj::mv(bytes), kj::str("constant ", id)).ignoreResult());
  } else {
    expectArrival(id, putBytes(id, kind, kj::mv(bytes)).ignoreResult());
  }
}

}  // namespace squall
