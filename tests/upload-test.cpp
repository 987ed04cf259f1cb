// Big constants skip the server (issue 39, point 1): a blob bigger than
// the inline size goes from the client straight to a governor's store
// (DataService.upload, placed by ClientService.placeData), the submit
// carries its place, size and hash. Against a real server and governors:
// the bytes come back equal, the server never holds them, an upload cut by
// a dying governor fails clearly and leaves nothing, a refused submit and
// an upload never submitted leave nothing, and only an authenticated peer
// of this server's incarnation may upload at all.
#include "proc-status.h"
#include "sanitizers.h"
#include "store-files.h"
#include "upload-peer.h"

#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/client/client.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <squall/tools/local-cluster.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unistd.h>

namespace squall {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Regular files in governor `i`'s store (on disk and in its memory tier):
// objects and temp files.
std::vector<std::string> storeFiles(LocalCluster& cluster, int i) {
  std::vector<std::string> names;
  for (auto& [name, size] : storeEntries(cluster, i)) {
    if (size >= 0) names.push_back(name);
  }
  return names;
}

// Waits up to `limit` for governor `i`'s store to hold no regular file.
bool storeEmpties(LocalCluster& cluster, int i, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!storeFiles(cluster, i).empty()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

ClusterOptions uploadCluster(int governors) {
  ClusterOptions options;
  options.governors = governors;
  options.cpus = 1;
  options.token = "upload-token";
  return options;
}

TEST(UploadTest, AHundredMegabyteConstantSkipsTheServerAndComesBackEqual) {
  LocalCluster cluster(uploadCluster(2));
  cluster.start();
  Client client(cluster.serverAddress(), "upload-token");
  auto session = client.newSession("100 MB constant");
  const size_t size = 100'000'000;
  auto data = pattern(size, 39);
  uint64_t hash = XXH3_64bits(data.data(), data.size());
  auto constant = session.blob(data, "big");
  constant.keep();
  auto copy = session.execute(Program::shell("cp in out").input(constant, "in").output("out").name("copy"));
  copy.output().keep();
  session.submit();
  session.waitAll();

  auto info = constant.info();
  EXPECT_EQ(info.state, "finished");
  EXPECT_EQ(info.size, size);
  EXPECT_EQ(info.hash, hash);
  EXPECT_EQ(info.producer, 0u);
  ASSERT_EQ(info.locations.size(), 1u);
  EXPECT_EQ(copy.output().info().hash, hash);
  EXPECT_TRUE(copy.output().fetch() == data) << "the task read other bytes";
  EXPECT_TRUE(constant.fetch() == data) << "the governor holds other bytes";
  // The server never held the bytes (nor its session log: it has none).
  uint64_t serverPeak = procStatusKb(cluster.server().pid(), "VmHWM");
  std::printf("server peak RSS %llu kB\n", static_cast<unsigned long long>(serverPeak));
  if (!UNDER_ASAN) {
    EXPECT_LT(serverPeak, size / 1024 / 2) << "the server held the constant";
  }
}

TEST(UploadTest, AConstantOfPiecesIsUploadedAtOnceAndItsPiecesMayChangeAfter) {
  LocalCluster cluster(uploadCluster(1));
  cluster.start();
  Client client(cluster.serverAddress(), "upload-token");
  auto session = client.newSession("pieces");
  // Three pieces, one not a multiple of the upload's chunk size, joined in
  // order; a small one is copied at once.
  std::vector<std::string> pieces = {pattern(9u << 20, 1), pattern(5, 2), pattern(3u << 20, 3)};
  std::string whole = pieces[0] + pieces[1] + pieces[2];
  auto big = session.blob(std::vector<std::string_view>(pieces.begin(), pieces.end()), "big");
  std::string small = "sm", all = "all";
  auto tiny = session.blob(std::vector<std::string_view>{small, all}, "tiny");
  // Uploaded before blob() returned: the governor holds it (unclaimed).
  ASSERT_EQ(storeFiles(cluster, 0).size(), 1u);
  for (auto& piece : pieces) std::fill(piece.begin(), piece.end(), 'x');
  small = "XX";
  big.keep();
  tiny.keep();
  auto length = session.execute(Program::shell("wc -c < in").input(big, "in").stdoutOutput());
  length.output().keep();
  session.submit();
  EXPECT_TRUE(big.fetch() == whole) << "the governor holds other bytes";
  EXPECT_EQ(tiny.fetch(), "small");
  EXPECT_EQ(std::stoull(length.output().fetch()), whole.size());
  EXPECT_EQ(big.info().hash, XXH3_64bits(whole.data(), whole.size()));
}

TEST(UploadTest, AConstantOfPiecesThatCannotBeUploadedIsNotTheSessions) {
  LocalCluster cluster(uploadCluster(1));
  cluster.start();
  Client client(cluster.serverAddress(), "upload-token");
  auto session = client.newSession("pieces refused");
  cluster.governor(0).signal(SIGKILL);
  ASSERT_TRUE(cluster.governor(0).waitExit(std::chrono::steady_clock::now() + 30s));
  std::string piece(2u << 20, 'p');
  // No governor to place it on (or the placed one gone): a clear error,
  // and the session goes on without it.
  EXPECT_THROW(session.blob(std::vector<std::string_view>{piece}), Error);
  auto echo = session.execute(Program::shell("echo ok").stdoutOutput());
  echo.output().keep();
  cluster.addGovernor();
  session.submit();
  EXPECT_EQ(echo.output().fetch(), "ok\n");
}

TEST(UploadTest, AGovernorKilledDuringAnUploadFailsItClearlyAndKeepsNothing) {
  LocalCluster cluster(uploadCluster(1));
  cluster.start();
  Client client(cluster.serverAddress(), "upload-token");
  auto session = client.newSession("cut upload");
  // A sparse file: read fast, written for real by the governor.
  auto file = fs::path(cluster.workDir()) / "sparse";
  {
    std::ofstream out(file, std::ios::binary);
  }
  fs::resize_file(file, uint64_t(4) << 30);
  auto constant = session.fileBlob(file.string());
  session.execute(Program::shell("wc -c < in").input(constant, "in").stdoutOutput());
  // Killed once the upload has written something.
  std::atomic<bool> killed{false};
  std::thread killer([&]() {
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (auto& [name, size] : storeEntries(cluster, 0)) {
        if (name.find(".tmp-") != std::string::npos && size > (8 << 20)) {
          cluster.governor(0).signal(SIGKILL);
          killed = true;
          return;
        }
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  std::string message;
  try {
    session.submit();
  } catch (const Error& e) {
    message = e.what();
  }
  killer.join();
  ASSERT_TRUE(killed) << "the upload never started";
  EXPECT_NE(message.find("cannot upload constant"), std::string::npos) << message;
  EXPECT_NE(message.find("to governor governor-0"), std::string::npos) << message;
  // Nothing was submitted: the server knows no such object.
  EXPECT_ANY_THROW(session.objects({constant.id()}));
  // And the dead governor's store holds no object file of it (a temp file
  // may be left: a governor starting over empties its store).
  for (auto& name : storeFiles(cluster, 0)) EXPECT_NE(name.find(".tmp-"), std::string::npos) << name;
}

TEST(UploadTest, ARefusedSubmitLeavesNoUploadBehind) {
  auto options = uploadCluster(1);
  options.logLevel = "info";
  auto governorLog = fs::temp_directory_path() / ("upload-test-" + std::to_string(getpid()) + ".log");
  options.governorWrapEach = {{"sh", "-c", "exec \"$@\" 2>>'" + governorLog.string() + "'", "sh"}};
  LocalCluster cluster(options);
  cluster.start();
  Client client(cluster.serverAddress(), "upload-token");
  auto session = client.newSession("refused");
  auto constant = session.blob(pattern(3 << 20, 7));
  // No governor offers the function: refused at commit, after the upload.
  session.call("nowhere/fn", {constant});
  std::string message;
  try {
    session.submit();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("nowhere/fn"), std::string::npos) << message;
  EXPECT_TRUE(storeEmpties(cluster, 0, 5s)) << "left: " << storeFiles(cluster, 0).size() << " files";
  {
    // It was uploaded, then discarded.
    std::ifstream in(governorLog);
    std::string said((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(said.find("event=upload-done"), std::string::npos) << said;
    EXPECT_NE(said.find("event=upload-discarded"), std::string::npos) << said;
  }
  fs::remove(governorLog);
  // The same session goes on; the constant is uploaded again.
  auto again = session.blob(pattern(3 << 20, 7));
  auto count = session.execute(Program::shell("wc -c < in").input(again, "in").stdoutOutput());
  count.output().keep();
  session.submit();
  EXPECT_EQ(count.output().fetch(), std::to_string(3 << 20) + "\n");
}

TEST(UploadTest, OnlyAnAuthenticatedPeerOfThisServerUploadsAndAnUnclaimedUploadGoes) {
  auto options = uploadCluster(1);
  options.governorArgs = {"--upload-ttl", "1"};
  LocalCluster cluster(options);
  cluster.start();
  std::string dataAddress;
  {
    Client client(cluster.serverAddress(), "upload-token");
    dataAddress = client.governors().at(0).dataAddress;
  }
  std::string bytes = pattern(1 << 20, 3);
  {
    RawPeer stranger(cluster.serverAddress(), dataAddress, "upload-token", "a-guess");
    // Refused at open (the connection closes with the answer, maybe while
    // the chunk is still being written).
    auto said = stranger.upload(5, bytes, stranger.incarnation, bytes.size());
    EXPECT_TRUE(said.find("invalid token") != std::string::npos || said.find("reset by peer") != std::string::npos ||
                said.find("disconnected") != std::string::npos || said.find("Broken pipe") != std::string::npos)
        << said;
  }
  RawPeer peer(cluster.serverAddress(), dataAddress, "upload-token", "upload-token");
  auto said = peer.upload(5, bytes, peer.incarnation + 1, bytes.size());
  EXPECT_NE(said.find("takes no uploads of server incarnation"), std::string::npos) << said;
  said = peer.upload(6, bytes, peer.incarnation, uint64_t(1) << 50);
  EXPECT_NE(said.find("cannot hold object"), std::string::npos) << said;
  EXPECT_NE(said.find(std::to_string(uint64_t(1) << 50) + " bytes"), std::string::npos) << said;
  said = peer.upload(7, bytes, peer.incarnation, bytes.size() + 1);
  EXPECT_NE(said.find("ended after"), std::string::npos) << said;
  EXPECT_TRUE(storeEmpties(cluster, 0, 5s)) << "a refused upload left files";
  // A finished upload no submit claims goes after --upload-ttl.
  EXPECT_EQ(peer.upload(8, bytes, peer.incarnation, bytes.size()), "");
  EXPECT_FALSE(storeFiles(cluster, 0).empty());
  EXPECT_TRUE(storeEmpties(cluster, 0, 10s)) << "an unclaimed upload stayed";
}

}  // namespace
}  // namespace squall
