// Live streams: the registry (StreamHub) and the readers' ends (local
// pipes, other governors' sinks, reads of streams produced elsewhere); the
// flow is in stream-flow.cpp. Loop thread only (LZ4 of chunks on the libuv
// pool). See stream-hub.h for the life of a stream.
#include "stream-flow.h"

#include <cerrno>
#include <fcntl.h>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <unistd.h>

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
kj::String reasonOf(bool ok, kj::StringPtr error) {
  if (ok) return kj::str("finished without producing it");
  if (error == "cancelled") return kj::str("was cancelled");
  return kj::str("failed: ", error);
}
}  // namespace

void StreamHub::taskEnded(wire::Assignment::Reader assignment, bool ok, kj::StringPtr error) {
  auto task = assignment.getTask();
  Id taskId = Id::from(task.getId());
  auto kinds = assignment.getOutputKinds();
  auto outputs = task.getOutputs();
  for (uint i = 0; i < outputs.size() && i < kinds.size(); i++) {
    if (kinds[i] != wire::ObjectKind::STREAM) continue;
    auto it = streams.find(Id::from(outputs[i]));
    if (it == streams.end()) continue;
    auto& s = *it->second;
    if (s.expected && s.producer == taskId && !s.isProducing()) s.failProducer(reasonOf(ok, error));
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
