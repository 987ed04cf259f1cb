// Inside the streams room (not for other rooms): the stream and its sinks,
// shared by the registry and readers (stream-hub.cpp) and the flow
// (stream-flow.cpp). Loop thread only.
#pragma once

#include "stream-hub.h"

#include <fcntl.h>
#include <kj/async-io.h>
#include <xxhash.h>

namespace squall {

// One chunk of a stream, shared by the sinks it is handed to (pool jobs
// among them) and reused once they let go.
struct ChunkBuffer final : public kj::AtomicRefcounted {
  explicit ChunkBuffer(size_t capacity) : bytes(kj::heapArray<kj::byte>(capacity)) {}
  // Written only by the pump while no sink holds the buffer.
  mutable kj::Array<kj::byte> bytes;
  mutable size_t size = 0;
  kj::ArrayPtr<const kj::byte> data() const { return bytes.slice(0, size); }
};

inline kj::Exception failed(kj::String message) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::mv(message));
}

// How a reader going early (or never coming: its task ended before it
// attached) is told to the producer's side: FAILED when its edge says
// earlyCloseIsError (the producer's task then fails with exactly this
// text), DISCONNECTED otherwise. Remote readers' sinks throw the same (see
// FeedSinkImpl), which is how the edge's flag crosses governors.
inline kj::Exception readerClosed(Id reader, Id stream, bool earlyCloseIsError) {
  auto text = kj::str("reader task ", reader, " closed its end of stream ", stream, " early");
  if (earlyCloseIsError) return failed(kj::str(text, " (broken pipe)"));
  return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::mv(text));
}


// ---------------------------------------------------------------- sinks

// One destination of a stream's bytes. Owned by whoever reads (a reader
// task's LiveInput, a remote read() call) or by the stream (persisting);
// the stream points at it while attached.
class StreamHub::Sink {
 public:
  virtual ~Sink() noexcept(false) { KJ_ASSERT(stream == nullptr, "sink not detached"); }

  // Hands on one chunk; resolves once the sink can take the next. A
  // rejection means the reader has gone (see readerClosed()).
  virtual kj::Promise<void> write(kj::Own<const ChunkBuffer> chunk) = 0;
  // End of file.
  virtual kj::Promise<void> finish() = 0;
  // The verdict, for a reader that did not close early.
  virtual void settle(kj::Maybe<const kj::Exception&> failure, uint64_t size) = 0;
  // The stream counts this reader as gone.
  virtual void closed(const kj::Exception& why) { (void)why; }
  // A pipe the stream may splice into, and what its breaking means.
  virtual kj::Maybe<PipeEnd&> splicePipe() { return nullptr; }
  // Room for up to `max` bytes inside the sink's own next write (a message
  // being built), so that they are read from the producer straight into
  // it; `commit(n)` sends the first n. nullptr when the sink cannot.
  struct DirectWrite {
    kj::ArrayPtr<kj::byte> space;
    kj::Function<kj::Promise<void>(size_t)> commit;
  };
  virtual bool writesDirect() const { return false; }
  virtual kj::Maybe<DirectWrite> directWrite(size_t max) {
    (void)max;
    return nullptr;
  }
  virtual kj::Exception goneReason() const {
    return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str("the reader has gone"));
  }

  // Set while attached (Stream::attachSink / detach).
  Stream* stream = nullptr;
  size_t slot = 0;

 protected:
  // Derived destructors call this first: the stream stops using the sink
  // and, unless it had settled, counts it as a reader gone with `why`.
  void detachFromStream(kj::Exception why);
};

// Writes a persisted stream's bytes into a temporary file of the store as
// they flow (pool jobs, one after another: the stream awaits each), hashing
// them on the way; adopted as a blob once the stream has ended well.
class PersistSink final : public StreamHub::Sink {
 public:
  PersistSink(UvBridge& bridge, ObjectStore& store) : bridge(bridge), temp(store) {
    file = kj::atomicRefcounted<File>(
        openOrThrow(temp.path(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  }
  ~PersistSink() noexcept(false) {}

  kj::Promise<void> write(kj::Own<const ChunkBuffer> chunk) override {
    return bridge.runOnPool<void>([file = kj::atomicAddRef(*file), chunk = kj::mv(chunk)]() {
      writeAll(file->fd, chunk->data());
      XXH3_64bits_update(file->hash, chunk->data().begin(), chunk->size);
      file->written += chunk->size;
    });
  }
  kj::Promise<void> finish() override { return kj::READY_NOW; }
  void settle(kj::Maybe<const kj::Exception&>, uint64_t) override {}

  // The file becomes blob `id` of the store. Loop thread, after finish().
  StreamOutput::Result adopt(Id id, ObjectStore& store) {
    HashedSize hashed{file->written, XXH3_64bits_digest(file->hash)};
    auto meta = store.adoptFile(id, wire::ObjectKind::BLOB, temp.release(), hashed);
    return StreamOutput::Result{meta.size, meta.hash, nullptr};
  }

 private:
  // Touched by one pool job at a time (each waits for the previous).
  struct File final : public kj::AtomicRefcounted {
    explicit File(kj::AutoCloseFd fd) : fd(kj::mv(fd)) {
      hash = XXH3_createState();
      KJ_ASSERT(hash != nullptr);
      XXH3_64bits_reset(hash);
    }
    ~File() noexcept(false) { XXH3_freeState(hash); }
    kj::AutoCloseFd fd;
    XXH3_state_t* hash;
    mutable uint64_t written = 0;
  };
  UvBridge& bridge;
  // Removed (on the pool) unless adopted.
  StoreTemp temp;
  kj::Own<File> file;
};


// ---------------------------------------------------------------- stream

class StreamHub::Stream {
 public:
  Stream(StreamHub& hub, Id id, uint64_t serial) : hub(hub), id(id), serial(serial) {}
  ~Stream() noexcept(false);
  KJ_DISALLOW_COPY(Stream);

  class ProducerHandle;

  StreamHub& hub;
  const Id id;
  const uint64_t serial;

  // From expect().
  bool expected = false;
  Id producer;
  kj::String producerName;
  uint32_t readerCount = 0;
  bool persist = false;

  bool isSettled() const { return phase == Phase::SETTLED; }
  bool slotsEmpty() const { return slots.size() == 0; }
  bool isProducing() const { return producing; }

  void expect(Id producerId, kj::StringPtr name, uint32_t readers, bool persistIt);
  void startWaitingForProducer();
  kj::Own<StreamOutput> produce(kj::AutoCloseFd source, kj::AutoCloseFd keepOpen);
  void attachSink(Sink& sink);
  // A reader that will never read (its task ended before attaching).
  void attachClosed(const kj::Exception& why);
  // Counts the readers of `old` (settled before its producer was expected:
  // they gave up waiting, or never attached) as readers gone before the
  // first byte, with their early-close errors. Before expect().
  void countReadersOf(const Stream& old);
  void detach(size_t slot, const kj::Exception& why);
  void readerGone(size_t slot, const kj::Exception& why);
  // The producer failed (or never ran): `reason` follows "producer task P
  // (name) " in readers' errors, and is the stream's error for the
  // producer's task (which reports its own failure first).
  void failProducer(kj::StringPtr reason);
  // The stream fails although its producer did not: readers are told
  // "input stream S failed: `readersReason`"; the producer's task fails
  // with `producerError`.
  void failStream(kj::StringPtr readersReason, kj::String producerError);
  // This governor could not store a persisted stream's bytes.
  void storeFailed(const kj::Exception& e);

 private:
  friend class ProducerHandle;
  enum class Phase { WAITING, FLOWING, ENDING, DRAINED, SETTLED };

  struct Slot {
    Sink* sink = nullptr;  // nullptr once its owner let go
    bool closed = false;   // gone early (or never attached)
    bool ended = false;    // end of file delivered
    bool pending = false;  // an operation is in flight
    kj::Promise<void> inFlight = nullptr;
  };

  Phase phase = Phase::WAITING;
  bool producing = false;
  bool producerDone = false;
  bool closedByReaders = false;
  kj::Maybe<kj::Own<PipeEnd>> source;
  kj::AutoCloseFd keepOpen;
  kj::Vector<kj::Own<Slot>> slots;
  kj::Maybe<kj::Own<PersistSink>> persistSink;
  kj::Maybe<kj::Own<Slot>> persistSlot;
  uint64_t flowed = 0;
  kj::Vector<kj::String> earlyCloseErrors;
  kj::Maybe<kj::Exception> failure;  // as readers are told
  kj::Maybe<StreamOutput::Result> result;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<StreamOutput::Result>>> settledFulfiller;
  kj::Maybe<ProducerHandle&> handle;
  size_t pending = 0;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> deliveredFulfiller;
  kj::Vector<kj::Own<ChunkBuffer>> buffers;
  kj::Promise<void> appearTimeout = nullptr;
  // Declared last: destroyed first, while everything it uses still exists.
  kj::Promise<void> pumping = nullptr;

  size_t liveCount() const;
  void maybeStart();
  kj::Promise<void> pumpChunks();
  kj::Promise<void> pumpSplice(size_t index);
  kj::Promise<void> pumpDirect(size_t index);
  void pumpFailed(kj::Exception&& e);
  kj::Own<ChunkBuffer> takeBuffer();
  void deliver(kj::Own<ChunkBuffer> chunk);
  void startOp(Slot& slot, kj::Promise<void> op, bool isPersist);
  void opDone(Slot& slot);
  kj::Promise<void> whenDelivered();
  kj::Promise<void> endOfInput();
  void closeByReaders();
  void producerExited(kj::Maybe<kj::String> reason);
  void trySettle();
  void settleOk(StreamOutput::Result r);
  void settleFailed(kj::Exception readers, kj::String producerError);
  // Hands the result to the producer and forgets the stream later.
  void publish(StreamOutput::Result r);
  kj::Promise<StreamOutput::Result> whenSettled();
  kj::Exception lateReader() const;
  // "producer task P (name)", as readers' errors name it.
  kj::String producerLabel() const;
};


}  // namespace squall
