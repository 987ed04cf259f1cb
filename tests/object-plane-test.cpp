// The store's memory tier and same-machine moves (issue 39) with real
// processes: a governor whose tier is smaller than what it is given spills
// the least recently used objects to disk and every object still reads
// back right (fetched, and read by tasks through paths handed out before
// a spill); its figures reach /metrics; a client on the governor's machine
// writes uploads into the governor's file and reads blobs from it, and a
// bad local upload keeps nothing.
#include "http-get.h"
#include "store-files.h"
#include "test-executor.h"
#include "upload-peer.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/client/client.h>
#include <squall/proto/local-file.h>
#include <squall/proto/rpc.h>
#include <squall/tools/local-cluster.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>
#include <xxhash.h>

#include <chrono>
#include <fcntl.h>
#include <fstream>
#include <regex>
#include <thread>
#include <unistd.h>

namespace squall {
namespace {

using namespace std::chrono_literals;

// The value of the metric line starting `prefix` in /metrics; -1 if none.
double metric(const std::string& http, const std::string& prefix) {
  auto text = httpGet(http, "/metrics").body;
  auto at = text.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  auto value = at + 1 + prefix.size();
  return std::stod(text.substr(value, text.find('\n', value) - value));
}

TEST(ObjectPlaneTest, ASmallMemoryTierSpillsAndEveryObjectReadsBackRight) {
  ClusterOptions options;
  options.governors = 1;
  options.cpus = 2;
  options.governorArgs = {"--store-memory", "64M"};
  // Heartbeats (which carry the store's figures) every second.
  options.serverArgs = {"--governor-timeout", "3"};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("spill");
  std::vector<std::string> values;
  std::vector<DataObject> blobs;
  std::vector<Task> copies;
  for (int i = 0; i < 6; i++) {
    values.push_back(pattern(20 << 20, i));
    // Uploaded before blob() returns: the tier fills as they come.
    blobs.push_back(session.blob(std::vector<std::string_view>{values.back()}));
    blobs.back().keep();
  }
  // Read by tasks once every upload is in: the first ones were spilled
  // by then; each task reads its input through the path it was given.
  for (auto& blob : blobs) {
    copies.push_back(session.execute(Program::shell("cat in").input(blob, "in").stdoutOutput()));
    copies.back().output().keep();
  }
  session.submit();
  for (size_t i = 0; i < values.size(); i++) {
    EXPECT_TRUE(blobs[i].fetch() == values[i]) << "blob " << i << " came back changed";
    EXPECT_TRUE(copies[i].output().fetch() == values[i]) << "task " << i << " read other bytes";
  }
  // The figures reach /metrics with the next heartbeat.
  const std::string label = "{governor=\"governor-0\"} ";
  // Spills go on until the tier is below its line (80%).
  double spilled = -1, inMemory = -1;
  for (int i = 0; i < 100 && (spilled < 1 || inMemory < 0 || inMemory > 0.8 * (64 << 20)); i++) {
    std::this_thread::sleep_for(100ms);
    spilled = metric(cluster.httpAddress(), "squall_governor_store_spilled_objects_total" + label);
    inMemory = metric(cluster.httpAddress(), "squall_governor_store_memory_bytes" + label);
  }
  EXPECT_GE(spilled, 1) << "120 MiB through a 64 MiB tier spilled nothing";
  EXPECT_GT(inMemory, 0);
  EXPECT_LE(inMemory, 0.8 * (64 << 20));
  EXPECT_EQ(metric(cluster.httpAddress(), "squall_governor_store_memory_capacity_bytes" + label), 64 << 20);
  EXPECT_EQ(metric(cluster.httpAddress(), "squall_governor_store_spilled_bytes_total" + label), spilled * (20 << 20));
  // Closing the session leaves nothing in either tier.
  session.close();
  size_t left = 0;
  for (int i = 0; i < 200 && (left = storeEntries(cluster, 0).size()) > 0; i++) std::this_thread::sleep_for(50ms);
  EXPECT_EQ(left, 0u);
}

TEST(ObjectPlaneTest, ALocalUploadIsCheckedAndABlobIsReadFromTheGovernorsFile) {
  ClusterOptions options;
  options.governors = 1;
  LocalCluster cluster(options);
  cluster.start();
  auto bytes = pattern(3 << 20, 9);
  std::string dataAddress;
  {
    // A real client's uploads take this way and come back equal.
    Client client(cluster.serverAddress());
    dataAddress = client.governors().at(0).dataAddress;
    auto session = client.newSession("local client");
    auto blob = session.blob(std::vector<std::string_view>{bytes});
    blob.keep();
    auto length = session.execute(Program::shell("wc -c < in").input(blob, "in").stdoutOutput());
    length.output().keep();
    session.submit();
    EXPECT_TRUE(blob.fetch() == bytes);
    EXPECT_EQ(length.output().fetch(), std::to_string(bytes.size()) + "\n");
    auto fetched = std::string(cluster.workDir()) + "/fetched.bin";
    blob.fetchToFile(fetched);
    std::ifstream in(fetched, std::ios::binary);
    std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_TRUE(back == bytes);
  }
  RawPeer peer(cluster.serverAddress(), dataAddress, "", "");
  // Other bytes than the hash says, or fewer: refused, nothing kept.
  auto damaged = bytes;
  damaged[12345] ^= 1;
  auto said = peer.uploadLocally(5, damaged, bytes);
  EXPECT_NE(said.find("arrived with another hash"), std::string::npos) << said;
  // Bytes of its own: a warm file (the first blob's, once its session
  // closed: warm-files.h) holds the first blob's, which a short write of
  // `bytes` would leave in place and so pass. Into a new file a short write
  // shows as short; into a warm file, which has its full size from the
  // start, only the hash tells. Refused either way.
  auto shortOne = pattern(3 << 20, 10);
  said = peer.uploadLocally(6, shortOne.substr(0, 1000), shortOne);
  EXPECT_TRUE(said.find("ended after 1000 of the") != std::string::npos ||
              said.find("arrived with another hash") != std::string::npos)
      << said;
  EXPECT_EQ(peer.uploadLocally(7, bytes, bytes), "");
  // Saying how far it wrote lets the governor hash behind the writer: in
  // order and within the size, or refused.
  EXPECT_EQ(peer.uploadLocally(8, bytes, bytes, {1 << 20, 2 << 20}), "");
  said = peer.uploadLocally(9, bytes, bytes, {2 << 20, 1 << 20});
  EXPECT_NE(said.find("said it wrote up to byte 1048576 out of order"), std::string::npos) << said;
  said = peer.uploadLocally(10, bytes, bytes, {bytes.size() + 1});
  EXPECT_NE(said.find("out of order"), std::string::npos) << said;
  said = peer.uploadLocally(11, damaged, bytes, {1 << 20});
  EXPECT_NE(said.find("arrived with another hash"), std::string::npos) << said;
  // Claimed by the first read; read from the governor's file.
  auto req = peer.service.readLocalRequest();
  req.initId().setSession(peer.session);
  req.getId().setN(7);
  auto answer = req.send().wait(peer.io.waitScope);
  EXPECT_EQ(answer.getSize(), bytes.size());
  auto fd = KJ_ASSERT_NONNULL(openLocalFile(answer.getFile(), O_RDONLY));
  std::string read(bytes.size(), '\0');
  EXPECT_EQ(::pread(fd, read.data(), read.size(), 0), static_cast<ssize_t>(bytes.size()));
  EXPECT_TRUE(read == bytes);
  // The same file described as on another machine does not open.
  capnp::MallocMessageBuilder message;
  auto other = message.initRoot<wire::LocalFile>();
  other.setPid(answer.getFile().getPid());
  other.setPath(answer.getFile().getPath());
  other.setDevice(answer.getFile().getDevice());
  other.setInode(answer.getFile().getInode());
  other.setBootId("another-machine");
  EXPECT_TRUE(openLocalFile(other.asReader(), O_RDONLY) == nullptr);
  other.setBootId(machineBootId());
  other.setInode(answer.getFile().getInode() + 1);
  EXPECT_TRUE(openLocalFile(other.asReader(), O_RDONLY) == nullptr);
  // An object not held as a file (unknown here) is refused.
  auto unknown = peer.service.readLocalRequest();
  unknown.initId().setSession(peer.session);
  unknown.getId().setN(99);
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { unknown.send().wait(peer.io.waitScope); })) {
    std::string message = e->getDescription().cStr();
    EXPECT_NE(message.find("is not held by governor"), std::string::npos) << message;
  } else {
    ADD_FAILURE() << "an unknown object was described";
  }
}

// With same-machine moves off, a client's big constants and fetches take
// the connection (as on another machine) and come back equal: pieces of
// odd sizes, a file, and a fetch into a file.
TEST(ObjectPlaneTest, WithLocalMovesOffUploadsAndFetchesTakeTheConnection) {
  setenv("SQUALL_LOCAL_DATA", "0", 1);
  struct Unset {
    ~Unset() { unsetenv("SQUALL_LOCAL_DATA"); }
  } unset;
  ClusterOptions options;
  options.governors = 1;
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("remote-like");
  std::vector<std::string> pieces = {pattern((5 << 20) + 3, 1), pattern(7, 2), pattern(3 << 20, 3)};
  auto whole = pieces[0] + pieces[1] + pieces[2];
  auto blob = session.blob(std::vector<std::string_view>(pieces.begin(), pieces.end()));
  blob.keep();
  auto path = std::string(cluster.workDir()) + "/input.bin";
  {
    FILE* out = fopen(path.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    ASSERT_EQ(fwrite(whole.data(), 1, whole.size(), out), whole.size());
    fclose(out);
  }
  auto fromFile = session.fileBlob(path);
  fromFile.keep();
  auto copy = session.execute(Program::shell("cat a b").input(blob, "a").input(fromFile, "b").stdoutOutput());
  copy.output().keep();
  session.submit();
  EXPECT_TRUE(blob.fetch() == whole);
  EXPECT_TRUE(fromFile.fetch() == whole);
  auto fetched = std::string(cluster.workDir()) + "/fetched.bin";
  copy.output().fetchToFile(fetched);
  std::ifstream in(fetched, std::ios::binary);
  std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(back == whole + whole);
  // Nothing is mapped either: the bytes came through the connection.
  auto got = session.fetchAllMapped({blob});
  EXPECT_FALSE(got[0].mapped());
  EXPECT_TRUE(std::string_view(got[0].data(), got[0].size()) == whole);
}

// fetchAllMapped: a big blob held on this machine is a read-only mapping of
// the governor's file, equal to what was put, and still readable once the
// object is gone from the store; a small one is a copy; a task's output is
// mapped as well.
TEST(ObjectPlaneTest, ABigBlobOnThisMachineIsFetchedAsAMappingOfTheGovernorsFile) {
  ClusterOptions options;
  options.governors = 1;
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("mapped");
  auto big = pattern((6 << 20) + 5, 4), small = pattern(4096, 5);
  auto bigBlob = session.blob(std::vector<std::string_view>{big});
  auto smallBlob = session.blob(std::vector<std::string_view>{small});
  auto made = session.execute(Program::shell("head -c 3000000 /dev/zero").stdoutOutput());
  for (auto* o : {&bigBlob, &smallBlob}) o->keep();
  made.output().keep();
  session.submit();
  auto got = session.fetchAllMapped({bigBlob, smallBlob, made.output()});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(got[0].mapped());
  EXPECT_TRUE(std::string_view(got[0].data(), got[0].size()) == big);
  EXPECT_FALSE(got[1].mapped());
  EXPECT_TRUE(std::string_view(got[1].data(), got[1].size()) == small);
  EXPECT_TRUE(got[2].mapped());
  EXPECT_EQ(got[2].size(), 3000000u);
  EXPECT_EQ(std::string_view(got[2].data(), got[2].size()).find_first_not_of('\0'), std::string_view::npos);
  // Gone from the store (its session closed): the mapping still reads it.
  session.close();
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (std::chrono::steady_clock::now() < deadline && !storeEntries(cluster, 0).empty()) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(storeEntries(cluster, 0).empty());
  EXPECT_TRUE(std::string_view(got[0].data(), got[0].size()) == big);
  // A mapping moved keeps its bytes; taken, it becomes a string of its own.
  ObjectBytes moved = std::move(got[0]);
  EXPECT_FALSE(got[0].mapped());
  EXPECT_TRUE(moved.mapped());
  auto text = moved.take();
  EXPECT_FALSE(moved.mapped());
  EXPECT_TRUE(text == big);
}

// A one-governor cluster's warm bytes (/metrics: heartbeats carry them)
// once `done(bytes)` holds, 10 s at most: the last value read.
const std::string warmBytesMetric = "squall_governor_store_warm_bytes{governor=\"governor-0\"} ";
template <typename Done>
double warmBytesOnceThey(LocalCluster& cluster, Done&& done) {
  double bytes = -1;
  for (int i = 0; i < 100 && !done(bytes = metric(cluster.httpAddress(), warmBytesMetric)); i++) {
    std::this_thread::sleep_for(100ms);
  }
  return bytes;
}

// Warm memory (governor/src/store/warm-files.h): an upload after a removal
// is written into the removed object's file, with its pages, unless
// something still maps it (a driver's array of a get).
TEST(ObjectPlaneTest, AnUploadAfterARemovalTakesTheRemovedObjectsMemoryUnlessItIsStillMapped) {
  ClusterOptions options;
  options.governors = 1;
  options.governorArgs = {"--store-memory", "256M"};
  // Heartbeats (which carry the store's figures) every second.
  options.serverArgs = {"--governor-timeout", "3"};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("warm");
  auto warmBytesReach = [&](auto done) { return warmBytesOnceThey(cluster, done); };
  auto upload = [&](const std::string& bytes) {
    auto blob = session.blob(std::vector<std::string_view>{bytes});
    blob.keep();
    session.submit();
    return blob;
  };
  // Several progress marks and a tail.
  const size_t size = (40 << 20) + 12345;
  auto first = pattern(size, 1);
  auto a = upload(first);
  auto held = session.fetchAllMapped({a});
  ASSERT_TRUE(held[0].mapped());
  session.unkeep({a});
  // Mapped here: its file goes, its bytes stay this mapping's.
  auto second = pattern(size, 2);
  auto b = upload(second);
  EXPECT_TRUE(b.fetch() == second);
  EXPECT_TRUE(std::string_view(held[0].data(), held[0].size()) == first);
  EXPECT_EQ(warmBytesReach([](double bytes) { return bytes == 0; }), 0);
  // Nothing holds b's file once it is removed: it is kept warm...
  session.unkeep({b});
  EXPECT_EQ(warmBytesReach([&](double bytes) { return bytes == size; }), size);
  // ...and the next upload is written into it, every byte its own.
  auto third = pattern(size - 1000, 3);
  auto c = upload(third);
  EXPECT_EQ(warmBytesReach([](double bytes) { return bytes == 0; }), 0);
  auto copy = session.execute(Program::shell("cat in").input(c, "in").stdoutOutput());
  copy.output().keep();
  session.submit();
  EXPECT_TRUE(c.fetch() == third);
  EXPECT_TRUE(copy.output().fetch() == third);
  EXPECT_TRUE(std::string_view(held[0].data(), held[0].size()) == first);
}

// A function's output is written into warm memory too: its next call is
// lent the file its last output left once that was removed (StoreTemp::lend),
// and a big output of known size takes it.
TEST(ObjectPlaneTest, AFunctionsNextOutputIsWrittenIntoTheMemoryItsLastOneLeft) {
  ClusterOptions options;
  options.governors = 1;
  options.governorArgs = {"--store-memory", "256M", "--executor", "testfn=" + testExecutor()};
  options.serverArgs = {"--governor-timeout", "3"};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress());
  auto session = client.newSession("lent");
  const std::string warm = warmBytesMetric;
  auto warmBytesReach = [&](auto done) { return warmBytesOnceThey(cluster, done); };
  // "line 1\n" ... "line 300000\n": about 3.3 MB, written by the executor
  // from its buffer once the function returned.
  std::string expected;
  for (int n = 1; n <= 300000; n++) expected += "line " + std::to_string(n) + "\n";
  auto lines = [&]() {
    auto call = session.call("testfn/lines", {}, "300000");
    call.output().keep();
    session.submit();
    return call.output();
  };
  auto first = lines();
  EXPECT_TRUE(first.fetch() == expected);
  session.unkeep({first});
  EXPECT_EQ(warmBytesReach([&](double bytes) { return bytes == expected.size(); }), expected.size());
  // Lent to the next call and taken by its output: none left warm.
  auto second = lines();
  EXPECT_EQ(warmBytesReach([](double bytes) { return bytes == 0; }), 0);
  EXPECT_TRUE(second.fetch() == expected);
  // Another function made nothing big before: it is lent nothing.
  session.unkeep({second});
  EXPECT_EQ(warmBytesReach([&](double bytes) { return bytes == expected.size(); }), expected.size());
  auto count = session.call("testfn/wordcount", {session.blob("a b c")});
  count.output().keep();
  session.submit();
  EXPECT_EQ(count.output().fetch(), "3");
  EXPECT_EQ(metric(cluster.httpAddress(), warm), expected.size());
}

}  // namespace
}  // namespace squall
