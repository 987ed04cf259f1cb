// Tests of the data service over real TCP on 127.0.0.1, and of fetching
// from it. Test thread only.
#include "data-service.h"

#include "test-util.h"

#include <squall/proto/chunk-codec.h>

namespace squall {
namespace {

// Reassembles what a DataService pushes, decoding LZ4 chunks.
class CollectingSink final : public wire::ByteSink::Server {
 public:
  CollectingSink(kj::Vector<kj::byte>& bytes, size_t& compressedChunks, size_t& chunks)
      : bytes(bytes), compressedChunks(compressedChunks), chunks(chunks) {}
  kj::Promise<void> write(WriteContext context) override {
    auto params = context.getParams();
    chunks++;
    if (params.getRawSize() == 0) {
      bytes.addAll(params.getChunk());
    } else {
      compressedChunks++;
      bytes.addAll(decompressChunk(params.getChunk(), params.getRawSize()));
    }
    return kj::READY_NOW;
  }
  kj::Promise<void> done(DoneContext) override { return kj::READY_NOW; }

 private:
  kj::Vector<kj::byte>& bytes;
  size_t& compressedChunks;
  size_t& chunks;
};

kj::Array<const kj::byte> compressibleBytes(size_t size) {
  auto bytes = kj::heapArray<kj::byte>(size);
  for (size_t i = 0; i < size; i++) bytes[i] = "squall data plane "[i % 18] + (i / 4096) % 3;
  return kj::mv(bytes);
}

// KJ objects may throw from destructors; gtest fixtures must not, so the
// fixture holds them on the heap.
struct DataServiceMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::shared_ptr<spdlog::logger> logger = testLogger();
  TempDir dir;
  UvBridge bridge{io.unixEventPort, io.provider->getTimer(), *logger};
  ObjectStore store{bridge, dir.sub("served"), *logger, 1 << 20};
  DataServiceEnv env{store, *logger, kj::str("secret"), kj::str("gov-a")};
  kj::Own<RpcListener> listener;
  kj::Promise<void> listening = nullptr;
};

class DataServiceTest : public ::testing::Test {
 protected:
  std::unique_ptr<DataServiceMembers> members = std::make_unique<DataServiceMembers>();
  kj::AsyncIoContext& io = members->io;
  std::shared_ptr<spdlog::logger> logger = members->logger;
  TempDir& dir = members->dir;
  UvBridge& bridge = members->bridge;
  ObjectStore& store = members->store;
  DataServiceEnv& env = members->env;
  kj::Own<RpcListener>& listener = members->listener;
  kj::Promise<void>& listening = members->listening;
  kj::String address;

  void TearDown() override {
    listening = nullptr;
    listener = nullptr;
  }

  void SetUp() override {
    auto receiver = waitWithTimeout(io, listenOn(io.provider->getNetwork(), "127.0.0.1:0"));
    address = kj::str("127.0.0.1:", receiver->getPort());
    listener = kj::heap<RpcListener>(
        kj::mv(receiver),
        [this](kj::StringPtr) -> capnp::Capability::Client { return kj::heap<DataBootstrapImpl>(env); },
        *logger);
    listening = listener->run().eagerlyEvaluate(nullptr);
  }

  wire::DataService::Client open(kj::Own<RpcClient>& client, kj::StringPtr token) {
    client = waitWithTimeout(io, connectTo(io.provider->getNetwork(), address));
    auto request = client->bootstrap<wire::DataBootstrap>().openRequest();
    request.setVersion(wire::PROTOCOL_VERSION);
    request.setToken(token);
    return request.send().getService();
  }
};

TEST_F(DataServiceTest, ServesABlobThatTheClientReassembles) {
  auto original = compressibleBytes(5 * CHUNK_SIZE + 123);
  uint64_t hash = hashBytes(original);
  waitWithTimeout(io, store.putBytes(Id{1, 7}, wire::ObjectKind::BLOB, kj::heapArray(original.asPtr())));

  kj::Own<RpcClient> client;
  auto service = open(client, "secret");
  for (bool compress : {false, true}) {
    kj::Vector<kj::byte> received;
    size_t compressed = 0, chunks = 0;
    auto request = service.readRequest();
    Id{1, 7}.to(request.initId());
    request.setOffset(0);
    request.setCompress(compress);
    request.setSink(kj::heap<CollectingSink>(received, compressed, chunks));
    auto response = waitWithTimeout(io, request.send());
    EXPECT_EQ(response.getSize(), original.size());
    EXPECT_EQ(response.getKind(), wire::ObjectKind::BLOB);
    ASSERT_EQ(received.size(), original.size());
    EXPECT_EQ(hashBytes(received), hash);
    EXPECT_EQ(chunks, 6u);
    if (compress) {
      EXPECT_EQ(compressed, 6u);
    } else {
      EXPECT_EQ(compressed, 0u);
    }
  }

  // From an offset.
  kj::Vector<kj::byte> rest;
  size_t compressed = 0, chunks = 0;
  auto request = service.readRequest();
  Id{1, 7}.to(request.initId());
  request.setOffset(CHUNK_SIZE + 10);
  request.setSink(kj::heap<CollectingSink>(rest, compressed, chunks));
  waitWithTimeout(io, request.send());
  ASSERT_EQ(rest.size(), original.size() - CHUNK_SIZE - 10);
  EXPECT_EQ(memcmp(rest.begin(), original.begin() + CHUNK_SIZE + 10, rest.size()), 0);
}

TEST_F(DataServiceTest, UnknownObjectIsAClearError) {
  kj::Own<RpcClient> client;
  auto service = open(client, "secret");
  kj::Vector<kj::byte> received;
  size_t compressed = 0, chunks = 0;
  auto request = service.readRequest();
  Id{3, 4}.to(request.initId());
  request.setSink(kj::heap<CollectingSink>(received, compressed, chunks));
  auto error = waitWithTimeout(io, request.send().then([](auto) { return kj::str("no error"); },
                                                       [](kj::Exception&& e) { return kj::str(e.getDescription()); }));
  EXPECT_NE(std::string(error.cStr()).find(kj::str("object 3/4 is not held by governor gov-a").cStr()), std::string::npos) << error.cStr();
}

TEST_F(DataServiceTest, WrongTokenIsRefused) {
  kj::Own<RpcClient> client;
  auto service = open(client, "wrong");
  auto request = service.readRequest();
  Id{3, 4}.to(request.initId());
  auto error = waitWithTimeout(io, request.send().then([](auto) { return kj::str("no error"); },
                                                       [](kj::Exception&& e) { return kj::str(e.getDescription()); }));
  EXPECT_NE(std::string(error.cStr()).find(kj::str("invalid token").cStr()), std::string::npos) << error.cStr();
}

TEST_F(DataServiceTest, FetcherCopiesObjectsIntoAnotherStore) {
  auto big = compressibleBytes(3 * CHUNK_SIZE + 1);
  auto small = compressibleBytes(100);
  waitWithTimeout(io, store.putBytes(Id{5, 1}, wire::ObjectKind::BLOB, kj::heapArray(big.asPtr())));
  waitWithTimeout(io, store.putBytes(Id{5, 2}, wire::ObjectKind::BLOB, kj::heapArray(small.asPtr())));

  ObjectStore local(bridge, dir.sub("local"), *logger, 1 << 20);
  DataFetcher fetcher(io.provider->getNetwork(), bridge, local, kj::str("secret"), *logger);
  // Two fetches of one object share one transfer.
  auto first = fetcher.fetch(Id{5, 1}, wire::ObjectKind::BLOB, address);
  auto again = fetcher.fetch(Id{5, 1}, wire::ObjectKind::BLOB, address);
  auto other = fetcher.fetch(Id{5, 2}, wire::ObjectKind::BLOB, address);
  waitWithTimeout(io, kj::mv(first));
  waitWithTimeout(io, kj::mv(again));
  waitWithTimeout(io, kj::mv(other));
  auto meta = KJ_ASSERT_NONNULL(local.find(Id{5, 1}));
  EXPECT_EQ(meta.size, big.size());
  EXPECT_EQ(meta.hash, hashBytes(big));
  auto data = KJ_ASSERT_NONNULL(local.data(Id{5, 1}));
  auto path = kj::mv(data.get<kj::String>());
  EXPECT_EQ(hashFile(path).hash, hashBytes(big));
  EXPECT_EQ(KJ_ASSERT_NONNULL(local.find(Id{5, 2})).hash, hashBytes(small));

  auto error = waitWithTimeout(io, fetcher.fetch(Id{5, 3}, wire::ObjectKind::BLOB, address)
                                       .then([]() { return kj::str("no error"); },
                                             [](kj::Exception&& e) { return kj::str(e.getDescription()); }));
  EXPECT_NE(std::string(error.cStr()).find(kj::str("cannot fetch object 5/3 from 127.0.0.1:").cStr()), std::string::npos) << error.cStr();
  EXPECT_NE(std::string(error.cStr()).find(kj::str("not held by governor gov-a").cStr()), std::string::npos) << error.cStr();
}

TEST_F(DataServiceTest, FetchFromAnAddressNobodyListensOnFailsNamingIt) {
  uint port;
  {
    auto receiver = waitWithTimeout(io, listenOn(io.provider->getNetwork(), "127.0.0.1:0"));
    port = receiver->getPort();
  }
  ObjectStore local(bridge, dir.sub("local"), *logger, 1 << 20);
  DataFetcher fetcher(io.provider->getNetwork(), bridge, local, kj::str("secret"), *logger);
  auto where = kj::str("127.0.0.1:", port);
  auto error = waitWithTimeout(io, fetcher.fetch(Id{5, 3}, wire::ObjectKind::BLOB, where)
                                       .then([]() { return kj::str("no error"); },
                                             [](kj::Exception&& e) { return kj::str(e.getDescription()); }));
  EXPECT_NE(std::string(error.cStr()).find(kj::str(kj::str("cannot fetch object 5/3 from ", where)).cStr()), std::string::npos) << error.cStr();
}

}  // namespace
}  // namespace squall
