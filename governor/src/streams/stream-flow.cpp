// A stream's flow: from its producer's pipe to every reader (spliced,
// written straight into a remote reader's message, or chunked for many)
// and to the store when persisted; the end, the verdict and the settling.
// Loop thread only (persist writes and hashing on the libuv pool). See
// stream-hub.h for the life of a stream and why the flow is built the way
// it is.
#include "stream-flow.h"

#include <cerrno>
#include <fcntl.h>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <unistd.h>
#include <xxhash.h>

namespace squall {

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


}  // namespace squall
