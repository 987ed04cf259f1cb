// Serving and fetching object bytes. Loop thread only.
#include "data-service.h"
#include "pool-chain.h"


#include <fcntl.h>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <squall/proto/local-file.h>
#include <squall/proto/spec-names.h>
#include <squall/proto/token.h>
#include <xxhash.h>

namespace squall {

// ----------------------------------------------------------------- serving

kj::Promise<void> DataBootstrapImpl::open(OpenContext context) {
  auto params = context.getParams();
  if (params.getVersion() != wire::PROTOCOL_VERSION) {
    gate->refuse(kj::str("protocol version ", params.getVersion()));
    return SQUALL_EXCEPTION(FAILED, "protocol version mismatch: governor ", env.governorName,
                        " speaks version ", wire::PROTOCOL_VERSION, ", the peer speaks version ",
                        params.getVersion());
  }
  if (env.token.size() > 0 && !tokensEqual(params.getToken(), env.token.cStr())) {
    // Logged by the listener (rate-limited); the connection closes.
    gate->refuse(params.getToken().size() == 0 ? "no token" : "wrong token");
    return SQUALL_EXCEPTION(FAILED, "invalid token for the data service of governor ", env.governorName);
  }
  gate->admit();
  context.getResults().setService(kj::heap<DataServiceImpl>(env));
  return kj::READY_NOW;
}

namespace {

struct ReadState {
  kj::Own<ObjectReader> reader;
  wire::ByteSink::Client sink;
  bool compress;
};

// Sends the chunk `current` covering bytes from `offset`, reading the next
// chunk while this one is on its way.
kj::Promise<void> sendChunks(ReadState& state, uint64_t offset,
                             kj::Promise<ObjectReader::Chunk> current) {
  return current.then([&state, offset](ObjectReader::Chunk chunk) -> kj::Promise<void> {
    if (chunk.covers == 0) return state.sink.doneRequest().send().ignoreResult();
    uint64_t nextOffset = offset + chunk.covers;
    auto next = state.reader->isStreamed() || nextOffset < state.reader->info().size
                    ? state.reader->readChunk(nextOffset, CHUNK_SIZE, state.compress)
                    : kj::Promise<ObjectReader::Chunk>(ObjectReader::Chunk());
    auto request = state.sink.writeRequest(capnp::MessageSize{chunk.bytes.size() / 8 + 16, 0});
    request.setChunk(chunk.bytes);
    request.setRawSize(chunk.rawSize);
    return request.send().then([&state, nextOffset, next = kj::mv(next)]() mutable {
      return sendChunks(state, nextOffset, kj::mv(next));
    });
  });
}

}  // namespace

kj::Promise<void> DataServiceImpl::callActor(CallActorContext context) {
  KJ_IF_MAYBE(port, env.directCalls) {
    // A client that goes does not stop its call: like a submitted one, it
    // runs and is reported.
    return port->callActor(context.getParams().getCall()).then([context](DirectCallPort::Answer answer) mutable {
      auto results = context.getResults();
      if (answer.refused.size() > 0) {
        results.setRefused(answer.refused);
      } else {
        results.setResult(answer.result->getRoot<wire::TaskResult>().asReader());
      }
    });
  }
  context.getResults().setRefused(kj::str("governor ", env.governorName, " takes no direct actor calls"));
  return kj::READY_NOW;
}

kj::Promise<void> DataServiceImpl::heldCalls(HeldCallsContext context) {
  std::vector<Id> held;
  KJ_IF_MAYBE(port, env.directCalls) {
    for (auto task : context.getParams().getTasks()) {
      if (port->holds(Id::from(task))) held.push_back(Id::from(task));
    }
  }
  auto list = context.getResults().initHeld(held.size());
  for (uint i = 0; i < list.size(); i++) held[i].to(list[i]);
  return kj::READY_NOW;
}

kj::Promise<void> DataServiceImpl::upload(UploadContext context) {
  auto params = context.getParams();
  KJ_IF_MAYBE(uploads, env.uploads) {
    auto results = context.getResults();
    kj::Maybe<wire::LocalFile::Builder> local;
    if (params.getLocal()) local = results.initFile();
    results.setSink(uploads->begin(Id::from(params.getObject()), params.getSize(), params.getIncarnation(), local));
    return kj::READY_NOW;
  }
  return SQUALL_EXCEPTION(FAILED, "governor ", env.governorName, " takes no uploads");
}

kj::Promise<void> DataServiceImpl::discardUploads(DiscardUploadsContext context) {
  KJ_IF_MAYBE(uploads, env.uploads) {
    std::vector<Id> ids;
    for (auto id : context.getParams().getObjects()) ids.push_back(Id::from(id));
    uploads->discard(kj::arrayPtr(ids.data(), ids.size()));
  }
  return kj::READY_NOW;
}

void DataServiceImpl::claimIfUploaded(Id id) {
  KJ_IF_MAYBE(uploads, env.uploads) {
    // A finished upload whose claim has not come yet: the server names
    // this governor as its place only once the submit was applied, and
    // the reader (another governor, a client) may be faster than the
    // claim sent on the control connection. The claim then finds it held.
    if (env.store.find(id) == nullptr) uploads->claim(kj::arrayPtr(&id, 1));
  }
}

kj::Promise<void> DataServiceImpl::readLocal(ReadLocalContext context) {
  Id id = Id::from(context.getParams().getId());
  claimIfUploaded(id);
  auto meta = env.store.find(id);
  auto data = env.store.data(id);
  if (meta == nullptr || data == nullptr) {
    return SQUALL_EXCEPTION(FAILED, "object ", id, " is not held by governor ", env.governorName);
  }
  auto& held = KJ_ASSERT_NONNULL(data);
  if (KJ_ASSERT_NONNULL(meta).kind != wire::ObjectKind::BLOB || !held.is<kj::String>()) {
    return SQUALL_EXCEPTION(FAILED, "object ", id, " is not held as a file by governor ", env.governorName);
  }
  auto& path = held.get<kj::String>();
  // open() of a local file is a short metadata operation.
  int fd = ::open(path.cStr(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    return SQUALL_EXCEPTION(FAILED, "object ", id, " cannot be opened on governor ", env.governorName, ": ",
                            strerror(errno));
  }
  kj::AutoCloseFd owned(fd);
  auto results = context.getResults();
  describeLocalFile(fd, path, results.initFile());
  results.setSize(KJ_ASSERT_NONNULL(meta).size);
  return kj::READY_NOW;
}

kj::Promise<void> DataServiceImpl::read(ReadContext context) {
  auto params = context.getParams();
  Id id = Id::from(params.getId());
  uint64_t offset = params.getOffset();
  claimIfUploaded(id);
  KJ_IF_MAYBE(reader, env.store.openReader(id)) {
    auto meta = (*reader)->info();
    if ((*reader)->isStreamed() && offset != 0) {
      return SQUALL_EXCEPTION(FAILED, "offset ", offset, " is not allowed for object ", id,
                              ": it is a dir, sent as a tar archive from offset 0");
    }
    if (!(*reader)->isStreamed() && offset > meta.size) {
      return SQUALL_EXCEPTION(FAILED, "offset ", offset, " is beyond the end of object ", id, " (",
                          meta.size, " bytes)");
    }
    env.logger.debug("event=data-read object={} offset={} size={} compress={}", kj::str(id).cStr(),
                     offset, meta.size, params.getCompress());
    auto state = kj::heap<ReadState>(ReadState{kj::mv(*reader), params.getSink(), params.getCompress()});
    auto first = state->reader->readChunk(offset, CHUNK_SIZE, state->compress);
    context.releaseParams();
    auto sending = sendChunks(*state, offset, kj::mv(first));
    auto& stateRef = *state;
    return sending.then([context, meta, &stateRef]() mutable {
      auto results = context.getResults();
      // For a dir: the length of the tar archive, known now that it is sent.
      results.setSize(stateRef.reader->isStreamed() ? stateRef.reader->position() : meta.size);
      results.setKind(meta.kind);
    }).attach(kj::mv(state));
  }
  if (!params.getLive()) {
    // A fetch of stored bytes: nothing to wait for.
    return SQUALL_EXCEPTION(FAILED, "object ", id, " is not held by governor ", env.governorName);
  }
  KJ_IF_MAYBE(streams, env.streams) {
    // A live stream: the read lasts as long as the stream flows, and ends
    // (cancelling this reader) when the caller drops it.
    if (offset != 0) {
      return SQUALL_EXCEPTION(FAILED, "offset ", offset, " is not allowed for a live read of stream ", id,
                              " on governor ", env.governorName, ": a live reader reads from offset 0");
    }
    context.allowCancellation();
    auto sink = params.getSink();
    bool compress = params.getCompress();
    context.releaseParams();
    return streams->serve(id, kj::mv(sink), compress).then([context](uint64_t size) mutable {
      auto results = context.getResults();
      results.setSize(size);
      results.setKind(wire::ObjectKind::STREAM);
    });
  }
  return SQUALL_EXCEPTION(FAILED, "stream ", id, " cannot be read live: governor ", env.governorName,
                          " serves no live streams");
}

// ---------------------------------------------------------------- fetching

namespace {

// Collects one object's bytes: in memory while small, then in a temp file of
// the store written on the pool. Writes are chained so they land in order.
class FetchSink final : public kj::Refcounted {
 public:
  FetchSink(UvBridge& bridge, ObjectStore& store) : store(store), writes(bridge) {
    hashState = XXH3_createState();
    KJ_ASSERT(hashState != nullptr);
    XXH3_64bits_reset(hashState);
  }
  ~FetchSink() noexcept(false) { XXH3_freeState(hashState); }

  kj::Promise<void> write(kj::Array<const kj::byte> bytes) {
    KJ_IF_MAYBE(e, writes.failed()) { return kj::cp(*e); }
    XXH3_64bits_update(hashState, bytes.begin(), bytes.size());
    uint64_t offset = received;
    received += bytes.size();
    if (file == nullptr && received <= SMALL_OBJECT_SIZE) {
      small.addAll(bytes);
      return kj::READY_NOW;
    }
    if (file == nullptr) {
      // Grew past the in-memory limit: move to a file.
      auto temp = TempFile(store.newTempPath(store.placeFor(received)));
      fd = kj::atomicRefcounted<SharedFd>(openOrThrow(temp.path(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
      file = kj::mv(temp);
      if (small.size() > 0) {
        auto head = kj::heapArray<const kj::byte>(small.asPtr());
        small.clear();
        queueWrite(kj::mv(head), 0);
      }
    }
    queueWrite(kj::mv(bytes), offset);
    return writes.done();
  }

  // Resolves once every write landed.
  kj::Promise<void> drained() { return writes.done(); }

  uint64_t size() const { return received; }

  // Puts the bytes into the store as `id`; a dir's bytes are a tar archive,
  // unpacked (on the pool) into a tree.
  kj::Promise<ObjectMeta> commit(Id id, wire::ObjectKind kind, kj::StringPtr source) {
    HashedSize hashed{received, XXH3_64bits_digest(hashState)};
    if (kind == wire::ObjectKind::DIR) {
      auto what = kj::str("object ", id, " fetched from ", source);
      KJ_IF_MAYBE(f, file) {
        fd = nullptr;
        return store.putTar(id, f->release(), kj::mv(what));
      }
      auto bytes = kj::heapArray<const kj::byte>(small.asPtr());
      small.clear();
      return store.putTar(id, kj::mv(bytes), kj::mv(what));
    }
    KJ_IF_MAYBE(f, file) {
      fd = nullptr;
      return store.adoptFile(id, kind, f->release(), hashed);
    }
    auto bytes = kj::heapArray<const kj::byte>(small.asPtr());
    small.clear();
    return store.putBytes(id, kind, kj::mv(bytes));
  }

 private:
  ObjectStore& store;
  XXH3_state_t* hashState;
  uint64_t received = 0;
  kj::Vector<kj::byte> small;
  kj::Maybe<TempFile> file;
  kj::Own<const SharedFd> fd;
  PoolChain writes;

  void queueWrite(kj::Array<const kj::byte> bytes, uint64_t offset) {
    writes.add([fd = kj::atomicAddRef(*fd), bytes = kj::mv(bytes), offset]() { pwriteAll(fd->fd, bytes, offset); });
  }
};

class FetchByteSinkImpl final : public wire::ByteSink::Server {
 public:
  explicit FetchByteSinkImpl(kj::Own<FetchSink> sink) : sink(kj::mv(sink)) {}

  kj::Promise<void> write(WriteContext context) override {
    auto params = context.getParams();
    auto chunk = params.getChunk();
    uint32_t rawSize = params.getRawSize();
    kj::Array<const kj::byte> bytes =
        rawSize == 0 ? kj::heapArray<const kj::byte>(chunk) : decompressChunk(chunk, rawSize);
    context.releaseParams();
    return sink->write(kj::mv(bytes));
  }

  // The sender's last call: answered once every write has landed.
  kj::Promise<void> done(DoneContext) override { return sink->drained(); }

 private:
  kj::Own<FetchSink> sink;
};

}  // namespace

struct DataFetcher::Peer {
  kj::Maybe<kj::Own<RpcClient>> client;
  wire::DataService::Client service = nullptr;
};

DataFetcher::DataFetcher(kj::Network& network, UvBridge& bridge, ObjectStore& store, kj::String token,
                         spdlog::logger& logger)
    : network(network), bridge(bridge), store(store), token(kj::mv(token)), logger(logger), tasks(*this) {}

DataFetcher::~DataFetcher() noexcept(false) {}

void DataFetcher::taskFailed(kj::Exception&& exception) {
  logger.debug("event=peer-watch-failed error=\"{}\"", exception.getDescription().cStr());
}

wire::DataService::Client DataFetcher::serviceAt(kj::StringPtr address) {
  std::string key(address.cStr());
  auto it = peers.find(key);
  if (it != peers.end()) return it->second->service;

  auto peer = kj::heap<Peer>();
  Peer* raw = peer.get();
  logger.debug("event=peer-connect address={}", key);
  auto connected = connectTo(network, address).then([this, raw, key](kj::Own<RpcClient> client) {
    auto bootstrap = client->bootstrap<wire::DataBootstrap>();
    auto request = bootstrap.openRequest();
    request.setVersion(wire::PROTOCOL_VERSION);
    request.setToken(token);
    auto service = request.send().getService();
    tasks.add(client->onDisconnect().then([this, raw, key]() {
      // Later, not from inside the connection's own disconnect callback.
      return kj::evalLater([this, raw, key]() {
        auto it = peers.find(key);
        if (it != peers.end() && it->second.get() == raw) {
          logger.debug("event=peer-disconnected address={}", key);
          peers.erase(it);
        }
      });
    }));
    raw->client = kj::mv(client);
    return service;
  });
  peer->service = wire::DataService::Client(kj::mv(connected));
  auto service = peer->service;
  peers.emplace(key, kj::mv(peer));
  return service;
}

kj::Promise<void> DataFetcher::fetch(Id id, wire::ObjectKind kind, kj::StringPtr address) {
  if (store.find(id) != nullptr) return kj::READY_NOW;
  KJ_IF_MAYBE(arriving, store.whenArrived(id)) { return kj::mv(*arriving); }
  store.expectArrival(id, transfer(id, kind, kj::str(address)));
  return KJ_ASSERT_NONNULL(store.whenArrived(id));
}

kj::Promise<uint64_t> DataFetcher::readLive(Id id, kj::StringPtr address, bool compress,
                                            wire::ByteSink::Client sink) {
  auto request = serviceAt(address).readRequest();
  id.to(request.initId());
  request.setOffset(0);
  request.setCompress(compress);
  request.setSink(kj::mv(sink));
  request.setLive(true);
  return request.send().then(
      [](auto response) -> kj::Promise<uint64_t> { return response.getSize(); },
      [this, address = kj::str(address)](kj::Exception&& e) -> kj::Promise<uint64_t> {
        if (e.getType() == kj::Exception::Type::DISCONNECTED) {
          tasks.add(kj::evalLater([this, key = std::string(address.cStr())]() { peers.erase(key); }));
        }
        return kj::mv(e);
      });
}

kj::Promise<void> DataFetcher::transfer(Id id, wire::ObjectKind expected, kj::String address) {
  auto sink = kj::refcounted<FetchSink>(bridge, store);
  auto request = serviceAt(address).readRequest();
  id.to(request.initId());
  request.setOffset(0);
  request.setCompress(false);
  request.setSink(kj::heap<FetchByteSinkImpl>(kj::addRef(*sink)));
  logger.debug("event=fetch-start object={} source={}", kj::str(id).cStr(), address.cStr());
  return request.send()
      .then([this, sink = kj::mv(sink), id, expected, source = kj::str(address)](auto response) mutable {
        uint64_t size = response.getSize();
        wire::ObjectKind actualKind = response.getKind();
        // read() returned after our done(): every chunk has landed.
        return sink->drained().then([this, sink = kj::mv(sink), id, size, actualKind, expected,
                                     source = kj::mv(source)]() mutable {
          KJ_REQUIRE(sink->size() == size, "received a different number of bytes than announced",
                     sink->size(), size);
          if (actualKind != expected) {
            return kj::Promise<void>(SQUALL_EXCEPTION(
                FAILED, "the source holds object ", id, " as a ", kindName(actualKind),
                ", but a ", kindName(expected), " was expected"));
          }
          return sink->commit(id, actualKind, source).then([this, id](ObjectMeta meta) {
            logger.debug("event=fetch-done object={} size={}", kj::str(id).cStr(), meta.size);
          });
        });
      })
      .catch_([this, id, address = kj::mv(address)](kj::Exception&& e) -> kj::Promise<void> {
        if (e.getType() == kj::Exception::Type::DISCONNECTED) {
          // A refused or broken connection is not reused; the next fetch
          // connects afresh. Dropped later, not from inside its own call.
          tasks.add(kj::evalLater([this, key = std::string(address.cStr())]() {
            peers.erase(key);
          }));
        }
        return kj::Exception(e.getType(), __FILE__, __LINE__,
                             kj::str("cannot fetch object ", id, " from ", address, ": ",
                                     userMessage(e)));
      });
}

}  // namespace squall
