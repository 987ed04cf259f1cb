// Live streams: registry, flow, readers. Loop thread only (persist writes
// and LZ4 of chunks run on the libuv pool). See stream-hub.h for the life
// of a stream and why the flow is built the way it is.
#include "stream-hub.h"

#include "data-service.h"

#include <cerrno>
#include <fcntl.h>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <unistd.h>
#include <xxhash.h>

namespace squall {

kj::Maybe<CompressStreams> parseCompressStreams(kj::StringPtr text) {
  if (text == "auto") return CompressStreams::AUTO;
  if (text == "on") return CompressStreams::ON;
  if (text == "off") return CompressStreams::OFF;
  return nullptr;
}

bool isLoopbackAddress(kj::StringPtr address) {
  kj::String host = kj::str(address);
  KJ_IF_MAYBE(colon, address.findLast(':')) {
    // "host:port"; "[::1]:port"; a bare "::1" has no port.
    if (address.startsWith("[") || address.findFirst(':') == *colon) {
      host = kj::str(address.slice(0, *colon));
    }
  }
  if (host.startsWith("[") && host.endsWith("]")) host = kj::str(host.slice(1, host.size() - 1));
  return host == "localhost" || host.startsWith("127.") || host == "::1" ||
         host.startsWith("::ffff:127.");
}

bool shouldCompress(CompressStreams mode, kj::StringPtr producerAddress) {
  switch (mode) {
    case CompressStreams::ON: return true;
    case CompressStreams::OFF: return false;
    case CompressStreams::AUTO: return !isLoopbackAddress(producerAddress);
  }
  return false;
}

namespace {

// One chunk of a stream, shared by the sinks it is handed to (pool jobs
// among them) and reused once they let go.
struct ChunkBuffer final : public kj::AtomicRefcounted {
  explicit ChunkBuffer(size_t capacity) : bytes(kj::heapArray<kj::byte>(capacity)) {}
  // Written only by the pump while no sink holds the buffer.
  mutable kj::Array<kj::byte> bytes;
  mutable size_t size = 0;
  kj::ArrayPtr<const kj::byte> data() const { return bytes.slice(0, size); }
};

kj::Exception failed(kj::String message) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::mv(message));
}

// How a reader going early (or never coming: its task ended before it
// attached) is told to the producer's side: FAILED when its edge says
// earlyCloseIsError (the producer's task then fails with exactly this
// text), DISCONNECTED otherwise. Remote readers' sinks throw the same (see
// FeedSinkImpl), which is how the edge's flag crosses governors.
kj::Exception readerClosed(Id reader, Id stream, bool earlyCloseIsError) {
  auto text = kj::str("reader task ", reader, " closed its end of stream ", stream, " early");
  if (earlyCloseIsError) return failed(kj::str(text, " (broken pipe)"));
  return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::mv(text));
}

}  // namespace

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

class StreamHub::Stream::ProducerHandle final : public StreamOutput {
 public:
  explicit ProducerHandle(Stream& stream) : stream(stream) { stream.handle = *this; }
  ~ProducerHandle() noexcept(false) {
    KJ_IF_MAYBE(s, stream) {
      s->handle = nullptr;
      if (!exited) {
        s->failProducer(kj::str("was stopped by governor ", s->hub.governorName,
                                " before its program ended"));
      }
    }
  }
  bool closedByReaders() const override {
    KJ_IF_MAYBE(s, stream) { return s->closedByReaders; }
    return false;
  }
  void producerExited(kj::Maybe<kj::String> reason) override {
    exited = true;
    KJ_IF_MAYBE(s, stream) { s->producerExited(kj::mv(reason)); }
  }
  void fail(kj::StringPtr reason) override {
    exited = true;
    KJ_IF_MAYBE(s, stream) { s->failProducer(reason); }
  }
  kj::Promise<Result> settled() override {
    KJ_IF_MAYBE(s, stream) { return s->whenSettled(); }
    return Result{0, 0, kj::str("the stream was dropped")};
  }

  kj::Maybe<Stream&> stream;
  bool exited = false;
};

StreamHub::Stream::~Stream() noexcept(false) {
  pumping = nullptr;
  for (auto& slot : slots) {
    slot->inFlight = nullptr;
    if (slot->sink != nullptr) slot->sink->stream = nullptr;
  }
  KJ_IF_MAYBE(s, persistSlot) { (*s)->inFlight = nullptr; }
  KJ_IF_MAYBE(h, handle) { h->stream = nullptr; }
}

void StreamHub::Sink::detachFromStream(kj::Exception why) {
  if (stream != nullptr) {
    auto* s = stream;
    stream = nullptr;
    s->detach(slot, why);
  }
}

size_t StreamHub::Stream::liveCount() const {
  size_t n = 0;
  for (auto& slot : slots) {
    if (!slot->closed && slot->sink != nullptr) n++;
  }
  return n;
}

void StreamHub::Stream::expect(Id producerId, kj::StringPtr name, uint32_t readers, bool persistIt) {
  expected = true;
  producer = producerId;
  producerName = kj::str(name);
  readerCount = readers;
  persist = persistIt;
  appearTimeout = nullptr;
  maybeStart();
}

void StreamHub::Stream::startWaitingForProducer() {
  auto timeout = hub.attachTimeout;
  appearTimeout = hub.timer.afterDelay(timeout)
                      .then([this, timeout]() {
                        if (expected || isSettled()) return;
                        double seconds = timeout / kj::MILLISECONDS / 1000.0;
                        settleFailed(failed(kj::str("input stream ", id, " failed: its producer did "
                                                    "not appear on governor ", hub.governorName,
                                                    " within ", seconds, " s")),
                                     kj::str("no producer"));
                      })
                      .eagerlyEvaluate(nullptr);
}

kj::Own<StreamOutput> StreamHub::Stream::produce(kj::AutoCloseFd sourceFd, kj::AutoCloseFd keepOpenFd) {
  KJ_REQUIRE(!producing, "stream produced twice", id);
  producing = true;
  auto output = kj::heap<ProducerHandle>(*this);
  if (isSettled()) return output;  // failed before the program started
  source = kj::heap<PipeEnd>(hub.eventPort, kj::mv(sourceFd), PipeEnd::Direction::READ);
  keepOpen = kj::mv(keepOpenFd);
  maybeStart();
  return output;
}

kj::Exception StreamHub::Stream::lateReader() const {
  KJ_IF_MAYBE(f, failure) { return kj::cp(*f); }
  return failed(kj::str("input stream ", id, " failed: it had already ",
                        phase == Phase::SETTLED ? "ended" : "started to flow", " on governor ",
                        hub.governorName, " when this reader attached"));
}

void StreamHub::Stream::attachSink(Sink& sink) {
  auto slot = kj::heap<Slot>();
  slot->sink = &sink;
  sink.stream = this;
  sink.slot = slots.size();
  if (phase != Phase::WAITING) {
    // Too late to get every byte (or the stream failed): told at once.
    slot->closed = true;
    slots.add(kj::mv(slot));
    sink.settle(lateReader(), 0);
    return;
  }
  slots.add(kj::mv(slot));
  maybeStart();
}

void StreamHub::Stream::attachClosed(const kj::Exception& why) {
  // A flow under way waits for nobody; a stream that gave up on its
  // producer still counts its readers for when it comes (countReadersOf()).
  if (phase != Phase::WAITING && expected) return;
  auto slot = kj::heap<Slot>();
  slot->closed = true;
  if (why.getType() == kj::Exception::Type::FAILED) earlyCloseErrors.add(kj::str(userMessage(why)));
  slots.add(kj::mv(slot));
  maybeStart();
}

void StreamHub::Stream::countReadersOf(const Stream& old) {
  KJ_ASSERT(!expected && phase == Phase::WAITING && slots.size() == 0);
  for (size_t i = 0; i < old.slots.size(); i++) {
    auto slot = kj::heap<Slot>();
    slot->closed = true;
    slots.add(kj::mv(slot));
  }
  for (auto& error : old.earlyCloseErrors) earlyCloseErrors.add(kj::str(error));
}

void StreamHub::Stream::detach(size_t index, const kj::Exception& why) {
  auto& slot = *slots[index];
  readerGone(index, why);
  slot.sink = nullptr;
  if (slot.pending) {
    // Its operation referred to the sink: dropped, and counted as done.
    slot.inFlight = nullptr;
    opDone(slot);
  }
}

void StreamHub::Stream::readerGone(size_t index, const kj::Exception& why) {
  auto& slot = *slots[index];
  if (slot.closed || slot.ended || phase == Phase::SETTLED) return;
  slot.closed = true;
  hub.logger.debug("event=stream-reader-gone stream={} reason=\"{}\"", kj::str(id).cStr(),
                   userMessage(why).cStr());
  if (why.getType() == kj::Exception::Type::FAILED) earlyCloseErrors.add(kj::str(userMessage(why)));
  if (slot.sink != nullptr) slot.sink->closed(why);
  if (phase == Phase::FLOWING && liveCount() == 0 && persistSink == nullptr) closeByReaders();
}

void StreamHub::Stream::maybeStart() {
  if (phase != Phase::WAITING || !expected || source == nullptr) return;
  if (slots.size() < readerCount) return;
  if (slots.size() > readerCount) {
    hub.logger.warn("event=stream-extra-readers stream={} expected={} attached={}", kj::str(id).cStr(),
                    readerCount, slots.size());
  }
  phase = Phase::FLOWING;
  if (persist) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  persistSink = kj::heap<PersistSink>(hub.bridge, hub.store);
                })) {
      storeFailed(*e);
      return;
    }
    persistSlot = kj::heap<Slot>();
  }
  size_t live = liveCount();
  hub.logger.debug("event=stream-flow stream={} readers={} live={} persist={}", kj::str(id).cStr(),
                   slots.size(), live, persist);
  if (live == 0 && persistSink == nullptr && slots.size() > 0) {
    // Every reader went before the first byte.
    closeByReaders();
    return;
  }
  // A single reader is fed without a buffer of ours: spliced into its
  // pipe, or read straight into its next message.
  kj::Maybe<size_t> only;
  if (live == 1 && persistSink == nullptr) {
    for (size_t i = 0; i < slots.size(); i++) {
      if (!slots[i]->closed && slots[i]->sink != nullptr) only = i;
    }
  }
  KJ_IF_MAYBE(i, only) {
    auto& sink = *slots[*i]->sink;
    if (sink.splicePipe() != nullptr) {
      pumping = pumpSplice(*i);
    } else if (sink.writesDirect()) {
      pumping = pumpDirect(*i);
    } else {
      pumping = pumpChunks();
    }
  } else {
    pumping = pumpChunks();
  }
  pumping = pumping.eagerlyEvaluate([this](kj::Exception&& e) { pumpFailed(kj::mv(e)); });
}

void StreamHub::Stream::pumpFailed(kj::Exception&& e) {
  // Waits end in an exception when what they watched was closed under
  // them (the stream settled, the reader went): nothing to do then.
  if (phase != Phase::FLOWING && phase != Phase::ENDING) return;
  hub.logger.warn("event=stream-pump-failed stream={} error=\"{}\"", kj::str(id).cStr(),
                  e.getDescription().cStr());
  failStream(kj::str("governor ", hub.governorName, " could not pass it on: ", e.getDescription()),
             kj::str("governor ", hub.governorName, " could not pass stream ", id, " on: ",
                     e.getDescription()));
}

kj::Own<ChunkBuffer> StreamHub::Stream::takeBuffer() {
  for (auto& buffer : buffers) {
    if (!buffer->isShared()) return kj::atomicAddRef(*buffer);
  }
  buffers.add(kj::atomicRefcounted<ChunkBuffer>(CHUNK_SIZE));
  return kj::atomicAddRef(*buffers.back());
}

kj::Promise<void> StreamHub::Stream::pumpChunks() {
  if (phase != Phase::FLOWING) return kj::READY_NOW;
  auto& from = *KJ_ASSERT_NONNULL(source);
  auto buffer = takeBuffer();
  auto target = buffer->bytes.asPtr();
  return from.read(target).then([this, buffer = kj::mv(buffer)](size_t n) mutable -> kj::Promise<void> {
    if (phase != Phase::FLOWING) return kj::READY_NOW;
    if (n == 0) {
      return whenDelivered().then([this]() -> kj::Promise<void> {
        return phase == Phase::FLOWING ? endOfInput() : kj::READY_NOW;
      });
    }
    buffer->size = n;
    flowed += n;
    return whenDelivered().then([this, buffer = kj::mv(buffer)]() mutable -> kj::Promise<void> {
      if (phase != Phase::FLOWING) return kj::READY_NOW;
      deliver(kj::mv(buffer));
      // The next chunk is read while this one is delivered.
      return pumpChunks();
    });
  });
}

kj::Promise<void> StreamHub::Stream::pumpSplice(size_t index) {
  for (;;) {
    if (phase != Phase::FLOWING) return kj::READY_NOW;
    auto& slot = *slots[index];
    if (slot.closed || slot.sink == nullptr) return kj::READY_NOW;  // closeByReaders() ran
    auto& from = *KJ_ASSERT_NONNULL(source);
    auto& to = KJ_ASSERT_NONNULL(slot.sink->splicePipe());
    auto step = spliceSome(from, to, PIPE_BUFFER_SIZE);
    switch (step.kind) {
      case SpliceStep::Kind::MOVED:
        flowed += step.bytes;
        continue;
      case SpliceStep::Kind::END_OF_INPUT:
        return endOfInput();
      case SpliceStep::Kind::OUTPUT_GONE:
        readerGone(index, slot.sink->goneReason());
        return kj::READY_NOW;
      case SpliceStep::Kind::WOULD_BLOCK:
        // Either side may be the one that would block, and splice does not
        // say which: wait for whichever changes first (both watchers are
        // edge-triggered, so a change after the EAGAIN is not missed), then
        // look again from the top (the reader may have gone meanwhile).
        return from.whenReadable().exclusiveJoin(to.whenWritable()).then([this, index]() {
          return pumpSplice(index);
        });
    }
  }
}

kj::Promise<void> StreamHub::Stream::pumpDirect(size_t index) {
  if (phase != Phase::FLOWING) return kj::READY_NOW;
  auto& slot = *slots[index];
  if (slot.closed || slot.sink == nullptr) return kj::READY_NOW;  // closeByReaders() ran
  auto direct = KJ_ASSERT_NONNULL(slot.sink->directWrite(CHUNK_SIZE));
  auto space = direct.space;
  return KJ_ASSERT_NONNULL(source)->read(space).then(
      [this, index, direct = kj::mv(direct)](size_t n) mutable -> kj::Promise<void> {
        if (phase != Phase::FLOWING) return kj::READY_NOW;
        if (n == 0) {
          return whenDelivered().then([this]() -> kj::Promise<void> {
            return phase == Phase::FLOWING ? endOfInput() : kj::READY_NOW;
          });
        }
        flowed += n;
        // Sent once the one before is on its way; the next is read meanwhile.
        return whenDelivered().then([this, index, n, direct = kj::mv(direct)]() mutable -> kj::Promise<void> {
          if (phase != Phase::FLOWING) return kj::READY_NOW;
          auto& slot = *slots[index];
          if (slot.closed || slot.sink == nullptr) return kj::READY_NOW;
          startOp(slot, direct.commit(n), false);
          return pumpDirect(index);
        });
      });
}

void StreamHub::Stream::deliver(kj::Own<ChunkBuffer> chunk) {
  for (auto& slot : slots) {
    if (slot->closed || slot->sink == nullptr) continue;
    startOp(*slot, slot->sink->write(kj::atomicAddRef(*chunk)), false);
  }
  KJ_IF_MAYBE(p, persistSink) {
    startOp(*KJ_ASSERT_NONNULL(persistSlot), (*p)->write(kj::atomicAddRef(*chunk)), true);
  }
}

void StreamHub::Stream::startOp(Slot& slot, kj::Promise<void> op, bool isPersist) {
  KJ_ASSERT(!slot.pending);
  slot.pending = true;
  pending++;
  slot.inFlight = op.then([this, &slot]() { opDone(slot); },
                          [this, &slot, isPersist](kj::Exception&& e) {
                            if (isPersist) {
                              storeFailed(e);
                            } else if (slot.sink != nullptr) {
                              readerGone(slot.sink->slot, e);
                            }
                            opDone(slot);
                          })
                      .eagerlyEvaluate(nullptr);
}

void StreamHub::Stream::opDone(Slot& slot) {
  if (!slot.pending) return;
  slot.pending = false;
  KJ_ASSERT(pending > 0);
  if (--pending == 0) {
    KJ_IF_MAYBE(f, deliveredFulfiller) {
      (*f)->fulfill();
      deliveredFulfiller = nullptr;
    }
  }
}

kj::Promise<void> StreamHub::Stream::whenDelivered() {
  if (pending == 0) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  deliveredFulfiller = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

kj::Promise<void> StreamHub::Stream::endOfInput() {
  phase = Phase::ENDING;
  source = nullptr;
  for (auto& slot : slots) {
    if (slot->closed || slot->sink == nullptr) continue;
    auto& ref = *slot;
    startOp(ref, ref.sink->finish().then([&ref]() { ref.ended = true; }), false);
  }
  KJ_IF_MAYBE(p, persistSink) { startOp(*KJ_ASSERT_NONNULL(persistSlot), (*p)->finish(), true); }
  return whenDelivered().then([this]() {
    if (phase != Phase::ENDING) return;
    phase = Phase::DRAINED;
    trySettle();
  });
}

void StreamHub::Stream::closeByReaders() {
  hub.logger.debug("event=stream-closed-by-readers stream={} flowed={}", kj::str(id).cStr(), flowed);
  closedByReaders = true;
  // The producer's next write meets EPIPE (SIGPIPE).
  source = nullptr;
  phase = Phase::DRAINED;
  trySettle();
}

void StreamHub::Stream::producerExited(kj::Maybe<kj::String> reason) {
  producerDone = true;
  // A FIFO's read end now sees end of file once the program's ends close.
  keepOpen = nullptr;
  KJ_IF_MAYBE(r, reason) {
    failProducer(*r);
  } else {
    trySettle();
  }
}

kj::String StreamHub::Stream::producerLabel() const {
  if (producerName.size() == 0) return kj::str("producer task ", producer);
  return kj::str("producer task ", producer, " (", producerName, ")");
}

void StreamHub::Stream::failProducer(kj::StringPtr reason) {
  failStream(kj::str(producerLabel(), " ", reason), kj::str(reason));
}

void StreamHub::Stream::failStream(kj::StringPtr readersReason, kj::String producerError) {
  if (isSettled()) return;
  settleFailed(failed(kj::str("input stream ", id, " failed: ", readersReason)), kj::mv(producerError));
}

void StreamHub::Stream::storeFailed(const kj::Exception& e) {
  failStream(kj::str("governor ", hub.governorName, " cannot store it: ", e.getDescription()),
             kj::str("governor ", hub.governorName, " cannot store stream ", id, ": ", e.getDescription()));
}

void StreamHub::Stream::trySettle() {
  if (phase != Phase::DRAINED || !producerDone) return;
  if (earlyCloseErrors.size() > 0) {
    failStream(kj::str(producerLabel(), " fails because ", earlyCloseErrors[0]), kj::str(earlyCloseErrors[0]));
    return;
  }
  StreamOutput::Result r;
  r.size = flowed;
  KJ_IF_MAYBE(p, persistSink) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { r = (*p)->adopt(id, hub.store); })) {
      storeFailed(*e);
      return;
    }
  }
  settleOk(kj::mv(r));
}

void StreamHub::Stream::settleOk(StreamOutput::Result r) {
  phase = Phase::SETTLED;
  hub.logger.debug("event=stream-ended stream={} size={}", kj::str(id).cStr(), r.size);
  for (auto& slot : slots) {
    if (!slot->closed && slot->sink != nullptr) slot->sink->settle(nullptr, r.size);
  }
  publish(kj::mv(r));
}

void StreamHub::Stream::publish(StreamOutput::Result r) {
  buffers.clear();
  KJ_IF_MAYBE(f, settledFulfiller) {
    (*f)->fulfill(kj::mv(r));
    settledFulfiller = nullptr;
  } else {
    result = kj::mv(r);
  }
  hub.forgetLater(id, serial);
}

void StreamHub::Stream::settleFailed(kj::Exception readers, kj::String producerError) {
  phase = Phase::SETTLED;
  hub.logger.debug("event=stream-failed stream={} error=\"{}\"", kj::str(id).cStr(),
                   readers.getDescription().cStr());
  source = nullptr;
  keepOpen = nullptr;
  // The persisted file is removed with its sink (a write under way holds
  // its own references).
  persistSink = nullptr;
  for (auto& slot : slots) {
    if (!slot->closed && slot->sink != nullptr) slot->sink->settle(readers, flowed);
  }
  failure = kj::mv(readers);
  StreamOutput::Result r;
  r.size = flowed;
  r.error = kj::mv(producerError);
  publish(kj::mv(r));
}

kj::Promise<StreamOutput::Result> StreamHub::Stream::whenSettled() {
  KJ_IF_MAYBE(r, result) {
    auto out = kj::mv(*r);
    result = nullptr;
    return kj::mv(out);
  }
  auto paf = kj::newPromiseAndFulfiller<StreamOutput::Result>();
  settledFulfiller = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

// ---------------------------------------------------------------- readers

namespace {

// A reader task on this governor reading a stream produced here: the
// stream writes (or splices) into the reader's pipe directly.
class LocalReader final : public StreamHub::Sink, public LiveInput {
 public:
  LocalReader(kj::Timer& timer, Id reader, Id streamId, bool earlyCloseIsError, kj::Own<ConsumerPipe> pipe)
      : timer(timer), reader(reader), streamId(streamId), earlyCloseIsError(earlyCloseIsError),
        pipe(kj::mv(pipe)) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    verdictFulfiller = kj::mv(paf.fulfiller);
    verdictPromise = paf.promise.fork();
  }
  ~LocalReader() noexcept(false) { detachFromStream(goneReason()); }

  // Sink
  kj::Promise<void> write(kj::Own<const ChunkBuffer> chunk) override {
    if (exited) return goneReason();
    auto bytes = chunk->data();
    return pipe->end().writeAll(bytes).attach(kj::mv(chunk)).catch_(
        [this](kj::Exception&&) -> kj::Promise<void> { return goneReason(); });
  }
  kj::Promise<void> finish() override {
    if (exited) return goneReason();
    finishing = true;
    return pipe->close(timer).then([this]() -> kj::Promise<void> {
      if (exited) return goneReason();
      ended = true;
      return kj::READY_NOW;
    });
  }
  void settle(kj::Maybe<const kj::Exception&> failure, uint64_t) override {
    KJ_IF_MAYBE(e, failure) {
      // The pipe stays open until the program is gone: it must not take
      // an end of file for the end of its input.
      verdictFulfiller->reject(kj::cp(*e));
    } else {
      verdictFulfiller->fulfill();
    }
  }
  kj::Maybe<PipeEnd&> splicePipe() override {
    if (exited) return nullptr;
    return pipe->end();
  }
  kj::Exception goneReason() const override { return readerClosed(reader, streamId, earlyCloseIsError); }

  // LiveInput
  kj::Promise<void> verdict() override { return verdictPromise.addBranch(); }
  // The pipe closes before the continuation above runs, and the program
  // can exit on that end of file before it does: a closed pipe counts.
  bool reachedEnd() const override { return ended || (finishing && pipe->closed()); }
  void readerExited() override {
    if (exited) return;
    exited = true;
    // Told before the pipe goes, so that a wait on the pipe ending in an
    // exception is not taken for a failure of the stream.
    if (stream != nullptr && !ended) stream->readerGone(slot, goneReason());
    pipe->drop();
  }

 private:
  kj::Timer& timer;
  Id reader;
  Id streamId;
  bool earlyCloseIsError;
  kj::Own<ConsumerPipe> pipe;
  bool finishing = false;  // finish() was called
  bool ended = false;
  bool exited = false;
  kj::Own<kj::PromiseFulfiller<void>> verdictFulfiller;
  kj::ForkedPromise<void> verdictPromise = nullptr;
};

// A reader on another governor (DataService.read): chunks go to its sink
// as capnp streaming writes, each awaited (the RPC flow-control window
// bounds what is in flight), LZ4-compressed on the pool when asked and
// worth it.
class RemoteSink final : public StreamHub::Sink {
 public:
  RemoteSink(UvBridge& bridge, wire::ByteSink::Client client, bool compress)
      : bridge(bridge), client(kj::mv(client)), compress(compress) {
    auto paf = kj::newPromiseAndFulfiller<uint64_t>();
    fulfiller = kj::mv(paf.fulfiller);
    promise = kj::mv(paf.promise);
  }
  ~RemoteSink() noexcept(false) {
    detachFromStream(kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                                   kj::str("a remote reader's read() was dropped")));
  }

  kj::Promise<uint64_t> result() { return kj::mv(promise); }

  kj::Promise<void> write(kj::Own<const ChunkBuffer> chunk) override {
    if (!compress) return send(chunk->data(), 0);
    return bridge
        .runOnPool<kj::Maybe<kj::Array<kj::byte>>>(
            [chunk = kj::atomicAddRef(*chunk)]() { return compressChunk(chunk->data()); })
        .then([this, chunk = kj::mv(chunk)](kj::Maybe<kj::Array<kj::byte>> packed) {
          KJ_IF_MAYBE(p, packed) { return send(*p, chunk->size); }
          return send(chunk->data(), 0);
        });
  }
  bool writesDirect() const override { return !compress; }
  kj::Maybe<DirectWrite> directWrite(size_t max) override {
    if (compress) return nullptr;
    // The bytes land in the request's own chunk, which is then cut to what
    // was read (it is the message's last object, so the message shrinks).
    auto request = kj::heap(client.writeRequest(capnp::MessageSize{max / sizeof(capnp::word) + 16, 0}));
    auto chunk = kj::heap(capnp::Orphanage::getForMessageContaining(
                              wire::ByteSink::WriteParams::Builder(*request))
                              .newOrphan<capnp::Data>(max));
    auto space = chunk->get().asBytes();
    return DirectWrite{space, [request = kj::mv(request), chunk = kj::mv(chunk)](size_t n) mutable {
                         chunk->truncate(n);
                         request->adoptChunk(kj::mv(*chunk));
                         request->setRawSize(0);
                         return request->send();
                       }};
  }
  kj::Promise<void> finish() override { return client.doneRequest().send().ignoreResult(); }
  void settle(kj::Maybe<const kj::Exception&> failure, uint64_t size) override {
    if (!fulfiller->isWaiting()) return;
    KJ_IF_MAYBE(e, failure) {
      fulfiller->reject(kj::cp(*e));
    } else {
      fulfiller->fulfill(kj::cp(size));
    }
  }
  void closed(const kj::Exception& why) override {
    // FAILED even when `why` is DISCONNECTED: the reader's governor must
    // not take this for a lost connection (it would drop it, and every
    // other read on it).
    if (fulfiller->isWaiting()) fulfiller->reject(failed(kj::str(userMessage(why))));
  }

 private:
  UvBridge& bridge;
  wire::ByteSink::Client client;
  bool compress;
  kj::Own<kj::PromiseFulfiller<uint64_t>> fulfiller;
  kj::Promise<uint64_t> promise = nullptr;

  kj::Promise<void> send(kj::ArrayPtr<const kj::byte> bytes, uint32_t rawSize) {
    auto request = client.writeRequest(capnp::MessageSize{bytes.size() / sizeof(capnp::word) + 16, 0});
    request.setChunk(bytes);
    request.setRawSize(rawSize);
    return request.send();
  }
};

// The reader's end of a stream read from another governor: what arrives at
// our FeedSinkImpl goes into the reader program's pipe; a write completes
// once it is in the pipe (the backpressure).
struct RemoteFeed final : public kj::Refcounted {
  RemoteFeed(kj::Timer& timer, Id reader, Id stream, bool earlyCloseIsError, kj::Own<ConsumerPipe> pipe)
      : timer(timer), reader(reader), stream(stream), earlyCloseIsError(earlyCloseIsError),
        pipe(kj::mv(pipe)) {}
  kj::Timer& timer;
  Id reader;
  Id stream;
  bool earlyCloseIsError;
  kj::Own<ConsumerPipe> pipe;
  bool ended = false;
  bool gone = false;
  uint64_t received = 0;
  // Set when what arrived cannot be passed on (a corrupt chunk).
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> brokenFulfiller;

  void leave() {
    gone = true;
    pipe->drop();
  }
  kj::Exception closedReason() const { return readerClosed(reader, stream, earlyCloseIsError); }
  void breakWith(kj::Exception e) {
    KJ_IF_MAYBE(f, brokenFulfiller) { (*f)->reject(kj::mv(e)); }
    brokenFulfiller = nullptr;
    leave();
  }
};

class FeedSinkImpl final : public wire::ByteSink::Server {
 public:
  explicit FeedSinkImpl(kj::Own<RemoteFeed> feed) : feed(kj::mv(feed)) {}

  kj::Promise<void> write(WriteContext context) override {
    if (feed->gone) return feed->closedReason();
    auto params = context.getParams();
    auto chunk = params.getChunk();
    uint32_t rawSize = params.getRawSize();
    kj::Array<kj::byte> unpacked;
    kj::ArrayPtr<const kj::byte> bytes = chunk;
    if (rawSize != 0) {
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { unpacked = decompressChunk(chunk, rawSize); })) {
        feed->breakWith(failed(kj::str("a chunk from the producer's governor is corrupt: ",
                                       e->getDescription())));
        return kj::mv(*e);
      }
      bytes = unpacked;
    }
    feed->received += bytes.size();
    // The params (and `unpacked`) live until the returned promise is done.
    return feed->pipe->end()
        .writeAll(bytes)
        .attach(kj::mv(unpacked))
        .catch_([this](kj::Exception&&) -> kj::Promise<void> {
          feed->gone = true;
          return feed->closedReason();
        });
  }

  kj::Promise<void> done(DoneContext) override {
    if (feed->gone) return feed->closedReason();
    return feed->pipe->close(feed->timer).then([this]() -> kj::Promise<void> {
      if (feed->gone) return feed->closedReason();
      feed->ended = true;
      return kj::READY_NOW;
    });
  }

 private:
  kj::Own<RemoteFeed> feed;
};

// A reader that will never read: every write throws (the reader's task
// ended before it attached).
class ClosedSinkImpl final : public wire::ByteSink::Server {
 public:
  explicit ClosedSinkImpl(kj::Exception why) : why(kj::mv(why)) {}
  kj::Promise<void> write(WriteContext) override { return kj::cp(why); }
  kj::Promise<void> done(DoneContext) override { return kj::cp(why); }

 private:
  kj::Exception why;
};

class RemoteInput final : public LiveInput {
 public:
  RemoteInput(kj::TaskSet& orphans, kj::Own<RemoteFeed> feed, kj::Promise<void> call)
      : orphans(orphans), feed(kj::mv(feed)), call(call.fork()) {}
  ~RemoteInput() noexcept(false) {
    feed->leave();
    // The read() goes on until the producer's side notices (its next write
    // throws, telling it whether this early close is an error); cancelling
    // it would not.
    orphans.add(call.addBranch().catch_([](kj::Exception&&) {}));
  }
  kj::Promise<void> verdict() override { return call.addBranch(); }
  bool reachedEnd() const override { return feed->ended; }
  void readerExited() override { feed->leave(); }

 private:
  kj::TaskSet& orphans;
  kj::Own<RemoteFeed> feed;
  kj::ForkedPromise<void> call;
};

}  // namespace

// ---------------------------------------------------------------- hub

StreamHub::StreamHub(kj::UnixEventPort& eventPort, kj::Timer& timer, UvBridge& bridge,
                     ObjectStore& store, DataFetcher& fetcher, spdlog::logger& logger,
                     kj::String governorName, CompressStreams compress, kj::Duration attachTimeout)
    : eventPort(eventPort),
      timer(timer),
      bridge(bridge),
      store(store),
      fetcher(fetcher),
      logger(logger),
      governorName(kj::mv(governorName)),
      compress(compress),
      attachTimeout(attachTimeout),
      tasks(*this) {}

StreamHub::~StreamHub() noexcept(false) {}

void StreamHub::taskFailed(kj::Exception&& exception) {
  logger.debug("event=stream-task-failed error=\"{}\"", exception.getDescription().cStr());
}

size_t StreamHub::activeCount() const {
  size_t n = 0;
  for (auto& entry : streams) {
    if (!entry.second->isSettled()) n++;
  }
  return n;
}

StreamHub::Stream& StreamHub::streamFor(Id id) {
  auto it = streams.find(id);
  if (it != streams.end()) return *it->second;
  auto stream = kj::heap<Stream>(*this, id, nextSerial++);
  auto& ref = *stream;
  streams.emplace(id, kj::mv(stream));
  return ref;
}

StreamHub::Stream& StreamHub::readerStream(Id id) {
  auto& s = streamFor(id);
  if (!s.expected && !s.isSettled() && s.slotsEmpty()) s.startWaitingForProducer();
  return s;
}

void StreamHub::forgetLater(Id id, uint64_t serial) {
  // Kept a while for readers that come late (they learn how it ended).
  tasks.add(timer.afterDelay(attachTimeout).then([this, id, serial]() {
    auto it = streams.find(id);
    if (it != streams.end() && it->second->serial == serial && it->second->isSettled()) {
      streams.erase(it);
    }
  }));
}

void StreamHub::expect(Id stream, Id producer, kj::StringPtr producerName, uint32_t readers,
                       bool persist) {
  kj::Maybe<kj::Own<Stream>> gaveUp;
  auto it = streams.find(stream);
  if (it != streams.end() && !it->second->expected && it->second->isSettled()) {
    // Settled before its producer was assigned: its readers gave up
    // waiting (or their tasks ended before attaching). They still count.
    gaveUp = kj::mv(it->second);
    streams.erase(it);
  } else if (it != streams.end() && it->second->expected) {
    // A new attempt of its producer: the old run's stream is done with.
    streams.erase(it);
  }
  logger.debug("event=stream-expected stream={} producer={} readers={} persist={}",
               kj::str(stream).cStr(), kj::str(producer).cStr(), readers, persist);
  auto& s = streamFor(stream);
  KJ_IF_MAYBE(old, gaveUp) { s.countReadersOf(**old); }
  s.expect(producer, producerName, readers, persist);
}

kj::Own<StreamOutput> StreamHub::produce(Id stream, kj::AutoCloseFd source, kj::AutoCloseFd keepOpen) {
  auto it = streams.find(stream);
  KJ_REQUIRE(it != streams.end() && it->second->expected, "stream output not expected", stream);
  return it->second->produce(kj::mv(source), kj::mv(keepOpen));
}

kj::Own<LiveInput> StreamHub::attach(Id stream, Id reader, bool earlyCloseIsError,
                                     kj::Own<ConsumerPipe> pipe,
                                     kj::Maybe<kj::StringPtr> producerAddress) {
  attachedReaders[{reader, stream}]++;
  KJ_IF_MAYBE(address, producerAddress) {
    auto feed = kj::refcounted<RemoteFeed>(timer, reader, stream, earlyCloseIsError, kj::mv(pipe));
    auto broken = kj::newPromiseAndFulfiller<void>();
    feed->brokenFulfiller = kj::mv(broken.fulfiller);
    bool compressIt = shouldCompress(compress, *address);
    logger.debug("event=stream-attach-remote stream={} reader={} producer_governor={} compress={}",
                 kj::str(stream).cStr(), kj::str(reader).cStr(), address->cStr(), compressIt);
    auto& feedRef = *feed;
    auto call =
        fetcher.readLive(stream, *address, compressIt, kj::heap<FeedSinkImpl>(kj::addRef(*feed)))
            .then(
                [&feedRef, stream](uint64_t size) -> kj::Promise<void> {
                  if (!feedRef.ended || feedRef.received != size) {
                    return failed(kj::str("input stream ", stream, " failed: the producer's governor "
                                          "reported ", size, " bytes but ", feedRef.received,
                                          " arrived"));
                  }
                  return kj::READY_NOW;
                },
                [&feedRef, stream, address = kj::str(*address)](kj::Exception&& e) -> kj::Promise<void> {
                  // The program closed its input early (its pipe broke): what
                  // the stream did next is no concern of this reader's.
                  if (feedRef.gone && !feedRef.ended) return kj::READY_NOW;
                  if (e.getType() == kj::Exception::Type::DISCONNECTED) {
                    return failed(kj::str("input stream ", stream, " failed: lost the producer's governor ",
                                          address, " (", userMessage(e), ")"));
                  }
                  auto message = userMessage(e);
                  if (message.startsWith("input stream ")) return failed(kj::str(message));
                  return failed(kj::str("input stream ", stream, " failed: ", message));
                });
    // The feed is referenced by `call`'s continuation: kept alive with it.
    call = call.attach(kj::addRef(*feed)).exclusiveJoin(kj::mv(broken.promise));
    return kj::heap<RemoteInput>(tasks, kj::mv(feed), kj::mv(call));
  }
  logger.debug("event=stream-attach stream={} reader={}", kj::str(stream).cStr(), kj::str(reader).cStr());
  auto input = kj::heap<LocalReader>(timer, reader, stream, earlyCloseIsError, kj::mv(pipe));
  readerStream(stream).attachSink(*input);
  return kj::mv(input);
}

kj::Promise<uint64_t> StreamHub::serve(Id stream, wire::ByteSink::Client sink, bool compressIt) {
  logger.debug("event=stream-serve stream={} compress={}", kj::str(stream).cStr(), compressIt);
  auto remote = kj::heap<RemoteSink>(bridge, kj::mv(sink), compressIt);
  auto promise = remote->result();
  readerStream(stream).attachSink(*remote);
  return promise.attach(kj::mv(remote));
}

void StreamHub::abandon(Id stream, Id reader, bool earlyCloseIsError,
                        kj::Maybe<kj::StringPtr> producerAddress) {
  logger.debug("event=stream-abandon stream={} reader={}", kj::str(stream).cStr(), kj::str(reader).cStr());
  auto why = readerClosed(reader, stream, earlyCloseIsError);
  KJ_IF_MAYBE(address, producerAddress) {
    tasks.add(fetcher.readLive(stream, *address, false, kj::heap<ClosedSinkImpl>(kj::mv(why)))
                  .ignoreResult()
                  .catch_([](kj::Exception&&) {}));
    return;
  }
  readerStream(stream).attachClosed(why);
}

namespace {
kj::String reasonOf(const TaskOutcome& outcome) {
  if (outcome.ok) return kj::str("finished without producing it");
  if (outcome.error == "cancelled") return kj::str("was cancelled");
  return kj::str("failed: ", outcome.error);
}
}  // namespace

void StreamHub::taskEnded(wire::Assignment::Reader assignment, const TaskOutcome& outcome) {
  auto task = assignment.getTask();
  Id taskId = Id::from(task.getId());
  auto kinds = assignment.getOutputKinds();
  auto outputs = task.getOutputs();
  for (uint i = 0; i < outputs.size() && i < kinds.size(); i++) {
    if (kinds[i] != wire::ObjectKind::STREAM) continue;
    auto it = streams.find(Id::from(outputs[i]));
    if (it == streams.end()) continue;
    auto& s = *it->second;
    if (s.expected && s.producer == taskId && !s.isProducing()) s.failProducer(reasonOf(outcome));
  }
  auto inputs = task.getInputs();
  auto locations = assignment.getInputs();
  for (uint i = 0; i < inputs.size() && i < locations.size(); i++) {
    if (!locations[i].getLive()) continue;
    Id stream = Id::from(inputs[i].getObject());
    // One attachment per live input (a task may read a stream twice).
    auto attached = attachedReaders.find({taskId, stream});
    if (attached != attachedReaders.end()) {
      if (--attached->second == 0) attachedReaders.erase(attached);
      continue;
    }
    auto sources = locations[i].getSources();
    abandon(stream, taskId, inputs[i].getEarlyCloseIsError(),
            sources.size() > 0 ? kj::Maybe<kj::StringPtr>(sources[0]) : nullptr);
  }
}

}  // namespace squall
