// Tests of the data service over real TCP on 127.0.0.1, and of fetching
// from it. Test thread only.
#include "data-service.h"

#include "test-util.h"

#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>
#include <unistd.h>

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
        [this](kj::Own<PeerGate> gate) -> capnp::Capability::Client {
          return kj::heap<DataBootstrapImpl>(env, kj::mv(gate));
        },
        io.provider->getTimer(), *logger);
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
  // What read() of {3, 4} answers, plain or live.
  auto readError = [&](bool live) {
    kj::Vector<kj::byte> received;
    size_t compressed = 0, chunks = 0;
    auto request = service.readRequest();
    Id{3, 4}.to(request.initId());
    request.setLive(live);
    request.setSink(kj::heap<CollectingSink>(received, compressed, chunks));
    return waitWithTimeout(io, request.send().then([](auto) { return std::string("no error"); },
                                                   [](kj::Exception&& e) { return std::string(userMessage(e).cStr()); }));
  };
  EXPECT_EQ(readError(false), "object 3/4 is not held by governor gov-a");
  // This service has no live streams to wait for either.
  EXPECT_EQ(readError(true), "stream 3/4 cannot be read live: governor gov-a serves no live streams");
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

TEST_F(DataServiceTest, DirTravelsAsATarArchiveAndIsUnpackedIntoAnotherStore) {
  auto src = dir.sub("src");
  writeText(kj::str(src, "/a.txt"), "alpha\n");
  auto big = compressibleBytes(3 * CHUNK_SIZE + 7);
  makeDirs(kj::str(src, "/deep/er"));
  writeFile(kj::str(src, "/deep/er/big.bin"), big, 0755);
  makeDirs(kj::str(src, "/empty"));
  ASSERT_EQ(::symlink("/", kj::str(src, "/root").cStr()), 0);
  ASSERT_EQ(::symlink("deep/er/big.bin", kj::str(src, "/rel").cStr()), 0);
  auto meta = putTree(store, Id{9, 1}, src);
  EXPECT_EQ(meta.size, 6 + big.size());

  // Read directly: a tar archive in chunks; `size` is the bytes sent.
  kj::Own<RpcClient> client;
  auto service = open(client, "secret");
  for (bool compress : {false, true}) {
    kj::Vector<kj::byte> received;
    size_t compressed = 0, chunks = 0;
    auto request = service.readRequest();
    Id{9, 1}.to(request.initId());
    request.setCompress(compress);
    request.setSink(kj::heap<CollectingSink>(received, compressed, chunks));
    auto response = waitWithTimeout(io, request.send());
    EXPECT_EQ(response.getKind(), wire::ObjectKind::DIR);
    EXPECT_EQ(response.getSize(), received.size());
    EXPECT_GT(received.size(), big.size());
    EXPECT_GE(chunks, 4u);
    EXPECT_EQ(memcmp(received.begin() + 257, "ustar", 5), 0);  // a tar header
  }
  auto atOffset = service.readRequest();
  Id{9, 1}.to(atOffset.initId());
  atOffset.setOffset(10);
  kj::Vector<kj::byte> ignored;
  size_t c1 = 0, c2 = 0;
  atOffset.setSink(kj::heap<CollectingSink>(ignored, c1, c2));
  auto error = waitWithTimeout(io, atOffset.send().then([](auto) { return kj::str("no error"); },
                                                       [](kj::Exception&& e) { return kj::str(e.getDescription()); }));
  EXPECT_NE(std::string(error.cStr()).find("offset 10 is not allowed for object 9/1: it is a dir"), std::string::npos)
      << error.cStr();

  // Fetched by another governor's store: the same tree, size and hash.
  ObjectStore local(bridge, dir.sub("local"), *logger, 1 << 20);
  DataFetcher fetcher(io.provider->getNetwork(), bridge, local, kj::str("secret"), *logger);
  waitWithTimeout(io, fetcher.fetch(Id{9, 1}, wire::ObjectKind::DIR, address));
  auto fetched = KJ_ASSERT_NONNULL(local.find(Id{9, 1}));
  EXPECT_EQ(fetched.kind, wire::ObjectKind::DIR);
  EXPECT_EQ(fetched.size, meta.size);
  EXPECT_EQ(fetched.hash, meta.hash);
  auto data = KJ_ASSERT_NONNULL(local.data(Id{9, 1}));
  auto path = kj::mv(data.get<kj::String>());
  EXPECT_EQ(describeTree(path), describeTree(src));
  struct stat st;
  ASSERT_EQ(::stat(kj::str(path, "/deep/er/big.bin").cStr(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0555u);  // mode kept, sealed read-only

  // Asking for the wrong kind is an error, not a silent conversion.
  ObjectStore other(bridge, dir.sub("other"), *logger, 1 << 20);
  DataFetcher otherFetcher(io.provider->getNetwork(), bridge, other, kj::str("secret"), *logger);
  auto wrong = waitWithTimeout(io, otherFetcher.fetch(Id{9, 1}, wire::ObjectKind::BLOB, address)
                                       .then([]() { return kj::str("no error"); },
                                             [](kj::Exception&& e) { return kj::str(e.getDescription()); }));
  EXPECT_NE(std::string(wrong.cStr()).find("holds object 9/1 as a dir, but a blob was expected"), std::string::npos)
      << wrong.cStr();
}

}  // namespace
}  // namespace squall
