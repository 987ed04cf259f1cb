// Uploads of big constants into the store. Loop thread only; each chunk is
// hashed and written by one pool job, the jobs chained so they run in order.
#include "uploads.h"

#include "pool-chain.h"

#include <fcntl.h>
#include <squall/proto/errors.h>
#include <squall/proto/local-file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <xxhash.h>

namespace squall {

namespace {

// The running hash of one upload. Pool jobs take turns (each waits for the
// one before), so it is never used by two threads at once.
struct UploadHash final : public kj::AtomicRefcounted {
  UploadHash() {
    state = XXH3_createState();
    KJ_ASSERT(state != nullptr);
    XXH3_64bits_reset(state);
  }
  ~UploadHash() noexcept(false) { XXH3_freeState(state); }
  XXH3_state_t* state;
};

// Adds bytes [from, to) of the file to the running hash.
void hashRange(int fd, XXH3_state_t* state, uint64_t from, uint64_t to) {
  constexpr size_t PIECE = 1 << 20;
  auto buffer = kj::heapArray<kj::byte>(PIECE);
  while (from < to) {
    size_t want = kj::min(static_cast<uint64_t>(PIECE), to - from);
    ssize_t n;
    KJ_SYSCALL(n = ::pread(fd, buffer.begin(), want, static_cast<off_t>(from)));
    KJ_REQUIRE(n > 0, "the upload's file ended early", from, to);
    XXH3_64bits_update(state, buffer.begin(), n);
    from += n;
  }
}

uint64_t freeBytes(kj::StringPtr dir) {
  struct statvfs fs;
  KJ_SYSCALL(::statvfs(dir.cStr(), &fs), dir);
  return static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
}

}  // namespace

// One upload's receiving end. Its temp file is removed unless the upload
// finished (handed to the table); the client dropping it mid-way (or the
// connection breaking) ends the upload with nothing kept.
class UploadTable::Sink final : public wire::UploadSink::Server {
 public:
  Sink(UploadTable& table, Id id, uint64_t size, Tier tier)
      : table(table), id(id), size(size), temp(table.store.newFilePath(tier, size)),
        // Not O_TRUNC: a warm file (newFilePath) keeps its pages; every
        // byte is written before finish() checks the hash of the whole.
        fd(kj::atomicRefcounted<SharedFd>(openOrThrow(temp, O_RDWR | O_CREAT | O_CLOEXEC, 0644))),
        hash(kj::atomicRefcounted<UploadHash>()),
        jobs(table.bridge) {}

  // The client writes the file itself (same machine): finish() hashes
  // what it holds.
  void describeForClient(wire::LocalFile::Builder out) {
    describeLocalFile(fd->fd, temp, out);
    writtenByClient = true;
  }

  ~Sink() noexcept(false) {
    if (temp.size() == 0) return;
    table.logger.info("event=upload-abandoned object={} received={} size={}", kj::str(id).cStr(), received, size);
    table.store.removeLater(kj::mv(temp));
    table.ended(id);
  }

  kj::Promise<void> write(WriteContext context) override {
    KJ_IF_MAYBE(e, jobs.failed()) { return kj::cp(*e); }
    auto chunk = context.getParams().getChunk();
    if (hashedTo > 0) {
      return SQUALL_EXCEPTION(FAILED, "the upload of object ", id, " to governor ", table.governorName,
                              " sent bytes after it said it wrote the file itself");
    }
    if (received + chunk.size() > size) {
      return SQUALL_EXCEPTION(FAILED, "the upload of object ", id, " to governor ", table.governorName,
                              " is longer than the ", size, " bytes announced");
    }
    auto bytes = kj::heapArray<const kj::byte>(chunk);
    context.releaseParams();
    uint64_t offset = received;
    received += bytes.size();
    jobs.add([fd = kj::atomicAddRef(*fd), hash = kj::atomicAddRef(*hash), bytes = kj::mv(bytes), offset]() {
      XXH3_64bits_update(hash->state, bytes.begin(), bytes.size());
      pwriteAll(fd->fd, bytes, offset);
    });
    return jobs.done();
  }

  kj::Promise<void> wrote(WroteContext context) override {
    KJ_IF_MAYBE(e, jobs.failed()) { return kj::cp(*e); }
    uint64_t upTo = context.getParams().getUpTo();
    if (!writtenByClient || received > 0 || upTo < hashedTo || upTo > size) {
      return SQUALL_EXCEPTION(FAILED, "the upload of object ", id, " to governor ", table.governorName,
                              " said it wrote up to byte ", upTo, " out of order (", hashedTo, " of ", size, ")");
    }
    hashLocal(upTo);
    return kj::READY_NOW;
  }

  kj::Promise<void> finish(FinishContext context) override {
    uint64_t expected = context.getParams().getHash();
    if (writtenByClient && received == 0) {
      // What the client said it wrote is hashed (or being hashed) on the
      // pool; the rest of the file now, then its size.
      struct stat st;
      KJ_SYSCALL(::fstat(fd->fd, &st));
      uint64_t end = static_cast<uint64_t>(st.st_size);
      if (end >= hashedTo) hashLocal(end);
      return jobs.done().then([this, expected, end]() {
        received = end;
        check(XXH3_64bits_digest(hash->state), expected);
      });
    }
    return jobs.done().then([this, expected]() { check(XXH3_64bits_digest(hash->state), expected); });
  }

 private:
  // Ends the upload: kept when `got` (the hash of what arrived) is the
  // client's and every byte came, else nothing is kept.
  void check(uint64_t got, uint64_t expected) {
    // A failed check keeps nothing, at once.
    KJ_ON_SCOPE_FAILURE({
      fd = nullptr;
      table.store.removeLater(kj::mv(temp));
      table.ended(id);
    });
    SQUALL_REQUIRE(received == size, "the upload of object ", id, " to governor ", table.governorName,
                   " ended after ", received, " of the ", size, " bytes announced");
    SQUALL_REQUIRE(got == expected, "the upload of object ", id, " to governor ", table.governorName,
                   " arrived with another hash than the client's (", got, " != ", expected, ")");
    fd = nullptr;
    table.done(id, kj::mv(temp), HashedSize{size, got});
  }

  // Queues the hash of the file's bytes [hashedTo, upTo) on the pool,
  // after the hashes queued before.
  void hashLocal(uint64_t upTo) {
    uint64_t from = hashedTo;
    hashedTo = upTo;
    if (upTo == from) return;
    jobs.add([fd = kj::atomicAddRef(*fd), hash = kj::atomicAddRef(*hash), from, upTo]() {
      hashRange(fd->fd, hash->state, from, upTo);
    });
  }

  UploadTable& table;
  Id id;
  uint64_t size;
  uint64_t received = 0;
  // Empty once handed to the table.
  kj::String temp;
  kj::Own<const SharedFd> fd;
  kj::Own<UploadHash> hash;
  // A local upload: the bytes hashed so far (or queued to be).
  uint64_t hashedTo = 0;
  // Writes (remote) or hashes (local), in order, on the pool.
  PoolChain jobs;
  bool writtenByClient = false;
};

UploadTable::UploadTable(UvBridge& bridge, ObjectStore& store, kj::Timer& timer, spdlog::logger& logger,
                         kj::String governorName, kj::Duration ttl)
    : bridge(bridge), store(store), timer(timer), logger(logger), governorName(kj::mv(governorName)),
      ttl(ttl), expiries(*this) {}

UploadTable::~UploadTable() noexcept(false) {}

void UploadTable::taskFailed(kj::Exception&& exception) {
  logger.warn("event=upload-expiry-failed error=\"{}\"", exception.getDescription().cStr());
}

wire::UploadSink::Client UploadTable::begin(Id id, uint64_t size, uint64_t incarnation,
                                            kj::Maybe<wire::LocalFile::Builder> local) {
  SQUALL_REQUIRE(serverIncarnation != 0 && incarnation == serverIncarnation, "governor ", governorName,
                 " takes no uploads of server incarnation ", kj::hex(incarnation),
                 serverIncarnation == 0 ? kj::str(" (it is not registered)")
                                        : kj::str(" (its server's is ", kj::hex(serverIncarnation), ")"));
  SQUALL_REQUIRE(store.find(id) == nullptr && store.whenArrived(id) == nullptr && writing.count(id) == 0,
                 "object ", id, " is held or being uploaded on governor ", governorName, " already");
  uint64_t reserved = 0;
  for (auto& [other, bytes] : writing) reserved += bytes;
  // In the store's memory tier when it fits beside what it holds, the other
  // uploads under way and those waiting for their submit.
  uint64_t unclaimed = 0;
  for (auto& [other, upload] : finished) unclaimed += upload.hashed.size;
  Tier tier = store.placeFor(size, reserved + unclaimed);
  uint64_t free = freeBytes(store.directoryOf(tier));
  SQUALL_REQUIRE(reserved + size <= free, "governor ", governorName, " cannot hold object ", id, " of ", size,
                 " bytes: its store has ", free, " bytes free and ", reserved,
                 " bytes of other uploads under way");
  auto old = finished.find(id);
  if (old != finished.end()) {
    store.removeLater(kj::mv(old->second.path));
    finished.erase(old);
  }
  auto sink = kj::heap<Sink>(*this, id, size, tier);
  KJ_IF_MAYBE(out, local) { sink->describeForClient(*out); }
  writing[id] = size;
  logger.debug("event=upload-start object={} size={}", kj::str(id).cStr(), size);
  return kj::mv(sink);
}

void UploadTable::ended(Id id) { writing.erase(id); }

void UploadTable::done(Id id, kj::String path, HashedSize hashed) {
  writing.erase(id);
  uint64_t generation = ++generations;
  finished[id] = Finished{kj::mv(path), hashed, generation};
  logger.info("event=upload-done object={} size={} hash={:016x}", kj::str(id).cStr(), hashed.size, hashed.hash);
  expiries.add(timer.afterDelay(ttl).then([this, id, generation]() {
    auto it = finished.find(id);
    if (it == finished.end() || it->second.generation != generation) return;
    logger.info("event=upload-expired object={} size={} reason=\"no submit claimed it\"", kj::str(id).cStr(),
                it->second.hashed.size);
    store.removeLater(kj::mv(it->second.path));
    finished.erase(it);
  }));
}

std::vector<Id> UploadTable::claim(kj::ArrayPtr<const Id> ids) {
  std::vector<Id> missing;
  for (auto id : ids) {
    auto it = finished.find(id);
    if (it == finished.end()) {
      // Claimed before (a claim sent again) is no loss.
      if (store.find(id) == nullptr) missing.push_back(id);
      continue;
    }
    store.adoptFile(id, wire::ObjectKind::BLOB, kj::mv(it->second.path), it->second.hashed);
    finished.erase(it);
    logger.debug("event=upload-claimed object={}", kj::str(id).cStr());
  }
  return missing;
}

void UploadTable::discard(kj::ArrayPtr<const Id> ids) {
  for (auto id : ids) {
    auto it = finished.find(id);
    if (it == finished.end()) continue;
    logger.info("event=upload-discarded object={}", kj::str(id).cStr());
    store.removeLater(kj::mv(it->second.path));
    finished.erase(it);
  }
}

void UploadTable::clear() {
  for (auto& [id, upload] : finished) store.removeLater(kj::mv(upload.path));
  finished.clear();
}

}  // namespace squall
