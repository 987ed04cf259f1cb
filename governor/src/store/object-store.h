// The objects this governor holds: outputs of its tasks, constants it was
// sent and copies fetched from other governors. Loop thread only; file work
// goes to the libuv thread pool.
//
// Storage policy: an object of at most SMALL_OBJECT_SIZE bytes that arrives
// as bytes (constants, fetched or built-in outputs) is kept in memory while
// the in-memory total stays under the budget; everything else is a file
// `<dir>/<session>-<n>`, read-only (0444). Files that programs wrote are
// renamed into the store, never copied.
//
// The memory tier (useMemoryTier, --store-memory): blobs that arrive as
// files (uploads, fetches, functions' results) are written into a tmpfs
// directory while the tier holds less than its capacity, else on disk. Past
// SPILL_PERCENT of the capacity the least recently read blobs are copied to
// the disk store, one at a time on the pool; the memory file is then
// replaced by a symbolic link to the disk copy, so a path handed out before
// still opens the object (its pages go once the last reader closes them).
// A spilled object is read from disk (through the page cache); it is not
// copied back.
//
// A dir object is a real directory tree `<dir>/<session>-<n>/`, sealed
// (read-only, see dir-tree.h) before it is adopted; its data() is that path.
// Trees are built in a fresh `<dir>/.tmp-N` (same parent, so adopting is a
// rename that needs no write permission on the sealed tree) and removed on
// the pool. A dir is read as a tar archive produced while it is sent.
#pragma once

#include "blob.h"
#include "file-ops.h"
#include "tar-archive.h"
#include "uv-bridge.h"
#include "warm-files.h"

#include <kj/async.h>
#include <kj/one-of.h>
#include <squall/proto/ids.h>
#include <squall/proto/tree-walk.h>
#include <squall/wire/common.capnp.h>
#include <map>
#include <unordered_map>
#include <unordered_set>

namespace squall {

constexpr size_t SMALL_OBJECT_SIZE = 64 * 1024;

struct ObjectMeta {
  wire::ObjectKind kind = wire::ObjectKind::BLOB;
  // Blob: its bytes. Dir: the sum of its regular files' sizes.
  uint64_t size = 0;
  // xxh3-64 of the bytes; of a dir, the tree hash (dir-tree.h).
  uint64_t hash = 0;
};

// Where an object's bytes are: in memory, or the path of its file (of its
// directory for a dir).
using ObjectData = kj::OneOf<kj::Own<const Blob>, kj::String>;

// A dir's tar archive while it is produced. Pool jobs take turns (each
// readChunk waits for the previous one), so the writer is never used by
// two threads at once; the last reference (job or reader) frees it.
struct TarStream final : public kj::AtomicRefcounted {
  explicit TarStream(kj::AutoCloseFd root) : writer(kj::mv(root)) {}
  mutable TarWriter writer;
};

// Reads one object's bytes. Keeps a blob readable while alive even if the
// store drops the object meanwhile (holds the blob or an open descriptor).
// A dir is read as a tar archive produced on the fly: strictly in order from
// offset 0, its length known only at the end (an empty chunk). A dir
// removed from the store while it is read fails the read.
class ObjectReader {
 public:
  using Source = kj::OneOf<kj::Own<const Blob>, kj::Own<const SharedFd>, kj::Own<const TarStream>>;
  ObjectReader(UvBridge& bridge, ObjectMeta meta, Source source)
      : bridge(bridge), meta(meta), source(kj::mv(source)) {}
  const ObjectMeta& info() const { return meta; }
  // True for a dir's tar: read until an empty chunk, not up to info().size.
  bool isStreamed() const { return source.is<kj::Own<const TarStream>>(); }
  // Bytes of the tar produced so far (all of it once an empty chunk came).
  uint64_t position() const { return streamed; }
  struct Chunk {
    // Raw bytes, or one LZ4 block when rawSize > 0.
    kj::Array<kj::byte> bytes;
    uint32_t rawSize = 0;
    // How many bytes of the object this chunk covers.
    size_t covers = 0;
  };
  // Up to `max` (<= CHUNK_SIZE) bytes from `offset` (fewer only at the end),
  // LZ4-compressed when `compress` is set and that pays. File reads and
  // compression of big chunks run on the thread pool.
  kj::Promise<Chunk> readChunk(uint64_t offset, size_t max, bool compress);

 private:
  UvBridge& bridge;
  ObjectMeta meta;
  Source source;
  // Bytes of the tar produced so far.
  uint64_t streamed = 0;
};

// A warm file lent to one call (ObjectStore::lendWarm): where, how big.
struct WarmLoan {
  kj::String path;
  uint64_t size;
};

// Where a new object's file is written (ObjectStore::placeFor).
enum class Tier { DISK, MEMORY };

struct StoreStats {
  size_t objects = 0;
  // Bytes of the objects in the memory tier, and its capacity (0: no tier).
  uint64_t memoryBytes = 0;
  uint64_t memoryCapacity = 0;
  size_t memoryObjects = 0;
  // Since start: what was spilled from memory to disk.
  uint64_t spilledBytes = 0;
  uint64_t spilledObjects = 0;
  // Removed objects' files kept warm for new ones (warm-files.h).
  uint64_t warmBytes = 0;
  size_t warmFiles = 0;
};

class ObjectStore {
 public:
  static constexpr uint64_t SPILL_PERCENT = 80;

  // `dir` is emptied and created: objects from an earlier run are not
  // reported to the server, so they are not kept (freshDirectory(): what
  // cannot be removed is moved aside and logged). Dir objects are kept
  // within `limits`.
  ObjectStore(UvBridge& bridge, kj::String dir, spdlog::logger& logger, uint64_t memoryBudget,
              TreeLimits limits = TreeLimits());
  ~ObjectStore() noexcept(false);
  KJ_DISALLOW_COPY(ObjectStore);

  kj::StringPtr directory() const { return dir; }
  // Bounds on every dir object it holds (--max-dir-depth, --max-dir-entries):
  // a tree beyond them never becomes one.
  const TreeLimits& treeLimits() const { return limits; }
  size_t count() const { return objects.size(); }
  // Calls `visit(id, meta)` for every object held.
  template <typename Visit>
  void forEach(Visit&& visit) const {
    for (auto& [id, entry] : objects) visit(id, entry.meta);
  }
  uint64_t memoryUsed() const { return memoryBytes; }

  // Writes blobs into `tierDir` (an empty tmpfs directory) while
  // they stay within `capacity` bytes (memory-tier.h makes the directory).
  void useMemoryTier(kj::String tierDir, uint64_t capacity);
  StoreStats stats() const;
  // The tier a new file of `size` bytes (unknown: 0) goes to: memory when
  // there is one, the file fits below its spill line, and the tier would
  // not pass its capacity by more than a quarter (spills catch up).
  // `pending`: bytes on their way into the tier, not stored yet.
  Tier placeFor(uint64_t size, uint64_t pending = 0) const;
  // The directory files of `tier` are written in (its free space).
  kj::StringPtr directoryOf(Tier tier) const;

  kj::Maybe<const ObjectMeta&> find(Id id) const;
  // Bytes of a held object (a new reference to the blob, or the file path).
  kj::Maybe<ObjectData> data(Id id) const;
  kj::Maybe<kj::Own<ObjectReader>> openReader(Id id);

  // While an object is on its way (a constant being written, a fetch),
  // whenArrived() gives a promise that resolves once it is held (or rejects
  // with why it could not be). nullptr when nothing is on its way.
  kj::Maybe<kj::Promise<void>> whenArrived(Id id);
  // Registers `arrival` as the way `id` is coming. It must end with the
  // object put into the store (or fail).
  void expectArrival(Id id, kj::Promise<void> arrival);

  // Stores bytes: in memory when small and within budget, else written to a
  // file on the pool. Hashes off the loop when large.
  kj::Promise<ObjectMeta> putBytes(Id id, wire::ObjectKind kind, kj::Array<const kj::byte> bytes);

  // A fresh path in the directory of `tier` for a producer to write into;
  // the same filesystem as the object's, so adoptFile() is a rename.
  kj::String newTempPath(Tier tier = Tier::DISK);
  // The same for a file of `size` bytes: in the memory tier a warm file of
  // that size may be there already (its bytes are old ones: the producer
  // writes every byte; open it without O_TRUNC, which would free its pages).
  kj::String newFilePath(Tier tier, uint64_t size);
  // The finished file at `path` (size and hash known) becomes object `id`,
  // in the tier `path` is in.
  ObjectMeta adoptFile(Id id, wire::ObjectKind kind, kj::String path, HashedSize sizeAndHash);
  // The sealed tree at `path` (a newTempPath(), size and tree hash known)
  // becomes dir object `id`.
  ObjectMeta adoptDir(Id id, kj::String path, HashedSize sizeAndHash);

  // Unpacks a tar archive (bytes, or a file that is deleted afterwards) on
  // the pool into dir object `id`, with the safe-path rules of
  // tar-archive.h; `what` names it in errors ("constant 1/4").
  using TarInput = kj::OneOf<kj::Array<const kj::byte>, kj::String>;
  kj::Promise<ObjectMeta> putTar(Id id, TarInput tar, kj::String what);

  // A constant that came with an assignment or a direct actor call: stored
  // (a dir's tar archive unpacked as putTar does) unless it is held or on
  // its way already; whenArrived() gives its end. A bad archive fails the
  // tasks that read it, naming the entry.
  void putConstant(Id id, wire::ObjectKind kind, kj::ArrayPtr<const kj::byte> data);

  // Removes a file or tree at `path` (one of ours) on the pool.
  void removeLater(kj::String path);

  // Warm files lent to calls (StoreTemp::lend): what `producer` made last
  // time; a file lent for that size, renamed beside the output directory
  // `outDir` (none when the producer made nothing big, or outDir is not in
  // the tier); and a lent file back (taken or not: a file no longer there
  // is no loss).
  void rememberOutput(kj::StringPtr producer, uint64_t size) { warm.remember(producer, size); }
  kj::Maybe<WarmLoan> lendWarm(kj::StringPtr producer, kj::StringPtr outDir);
  void giveBack(kj::String path, uint64_t size) { warm.offer(kj::mv(path), size); }

  // Drops an object; unknown ids are fine. An object still arriving is
  // dropped when it arrives.
  void remove(Id id);

 private:
  struct Entry {
    ObjectMeta meta;
    ObjectData data;
    // In the memory tier: its place in `byLastUse`.
    bool inMemory = false;
    mutable uint64_t lastUse = 0;
    // A spilled blob's old path in the memory tier (a link to the disk
    // copy), removed with the object.
    kj::Maybe<kj::String> memoryLink;
  };

  UvBridge& bridge;
  kj::String dir;
  spdlog::logger& logger;
  uint64_t memoryBudget;
  TreeLimits limits;
  uint64_t memoryBytes = 0;
  uint64_t tempCounter = 0;
  std::unordered_map<Id, Entry, IdHash> objects;
  std::unordered_map<Id, kj::ForkedPromise<void>, IdHash> arriving;
  std::unordered_set<Id, IdHash> removeOnArrival;

  // The memory tier: its directory (empty: none), capacity and bytes held.
  kj::String tierDir;
  uint64_t tierCapacity = 0;
  uint64_t tierBytes = 0;
  // Memory-tier objects by last use (oldest first): the spill order.
  mutable std::map<uint64_t, Id> byLastUse;
  mutable uint64_t useCounter = 0;
  bool spilling = false;
  uint64_t spilledBytes = 0;
  uint64_t spilledObjects = 0;

  struct ErrorLogger final : public kj::TaskSet::ErrorHandler {
    explicit ErrorLogger(spdlog::logger& logger) : logger(logger) {}
    void taskFailed(kj::Exception&& e) override;
    spdlog::logger& logger;
  } errorLogger;
  // Unlinks of dropped files.
  kj::TaskSet background;
  // Removed memory-tier files kept for new objects.
  WarmFiles warm;

  kj::String pathFor(Id id, Tier tier = Tier::DISK) const;
  bool inTier(kj::StringPtr path) const;
  void touch(const Entry& entry) const;
  // The finished file or tree at `path` becomes `id`, in the tier `path`
  // is in (adoptFile, adoptDir).
  ObjectMeta adopt(Id id, kj::String path, ObjectMeta meta);
  void insert(Id id, Entry entry);
  // After the tier's bytes changed: what the warm files may keep.
  void tierChanged();
  void discard(Entry& entry);
  // Starts spilling the least recently used memory blob when the tier is
  // past SPILL_PERCENT and no spill is under way; each spill's end starts
  // the next.
  void spillIfFull();
  // A spill's copy ended (`failure`: how it did not).
  void spilled(Id id, kj::String from, kj::String copy, kj::Maybe<kj::Exception> failure);
  // Whether `id` is still the memory-tier file at `path` (not removed or
  // replaced while a spill copied it).
  bool stillInMemoryAt(Id id, kj::StringPtr path) const;
};

// A fresh path in the store (newTempPath()) for a tree or file being built;
// removed on the pool when dropped unless released (adopted), so an
// abandoned or failed task leaves nothing behind. Loop thread only.
class StoreTemp {
 public:
  explicit StoreTemp(ObjectStore& store, Tier tier = Tier::DISK) : store(store), tempPath(store.newTempPath(tier)) {}
  ~StoreTemp() noexcept(false);
  KJ_DISALLOW_COPY(StoreTemp);
  kj::StringPtr path() const { return tempPath; }
  kj::String release() { return kj::mv(tempPath); }

  // A call's output directory in the tier: lends it a warm file when
  // `producer` made a big blob last time (executor.capnp WarmFile), given
  // back when this goes unless the executor took it for an output.
  void lend(kj::StringPtr producer);
  kj::ArrayPtr<const WarmLoan> lent() const { return loans; }

 private:
  ObjectStore& store;
  kj::String tempPath;
  kj::Vector<WarmLoan> loans;
};

}  // namespace squall
