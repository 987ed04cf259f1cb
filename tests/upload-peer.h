// Pieces of the upload tests (tests/upload-test.cpp, tests/object-plane-
// test.cpp): bytes that do not compress or repeat, and a raw peer of the
// server and of a governor's data service. Test thread only.
#pragma once

#include <kj/async-io.h>
#include <squall/proto/errors.h>
#include <squall/proto/local-file.h>
#include <squall/proto/rpc.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>
#include <xxhash.h>

#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

namespace squall {

// `n` bytes that do not repeat in any short period (an LCG's high bytes).
inline std::string pattern(size_t n, uint64_t seed) {
  std::string out(n, '\0');
  uint64_t x = seed;
  for (size_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<char>(x >> 56);
  }
  return out;
}

// A raw client: a session of the server (registered with `serverToken`)
// and a governor's data service opened with `dataToken`.
struct RawPeer {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  kj::Own<RpcClient> server;
  kj::Own<RpcClient> data;
  uint64_t session = 0;
  uint64_t incarnation = 0;

  RawPeer(const std::string& serverAddress, const std::string& dataAddress, const std::string& serverToken,
          const std::string& dataToken) {
    server = connectTo(io.provider->getNetwork(), serverAddress).wait(io.waitScope);
    auto reg = server->bootstrap<wire::Bootstrap>().registerClientRequest();
    reg.setVersion(wire::PROTOCOL_VERSION);
    reg.setToken(serverToken);
    auto open = reg.send().getService().newSessionRequest();
    open.setName("raw");
    auto opened = open.send().wait(io.waitScope);
    session = opened.getSession();
    incarnation = opened.getIncarnation();
    data = connectTo(io.provider->getNetwork(), dataAddress).wait(io.waitScope);
    auto dataOpen = data->bootstrap<wire::DataBootstrap>().openRequest();
    dataOpen.setVersion(wire::PROTOCOL_VERSION);
    dataOpen.setToken(dataToken);
    service = dataOpen.send().getService();
  }

  // Uploads `bytes` as object `n`; the error's message, empty when it worked.
  std::string upload(uint64_t n, const std::string& bytes, uint64_t incarnationGiven, uint64_t size) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
      auto req = service.uploadRequest();
      req.initObject().setSession(session);
      req.getObject().setN(n);
      req.setSize(size);
      req.setIncarnation(incarnationGiven);
      auto sink = req.send().getSink();
      auto write = sink.writeRequest();
      write.setChunk(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
      write.send().wait(io.waitScope);
      auto finish = sink.finishRequest();
      finish.setHash(XXH3_64bits(bytes.data(), bytes.size()));
      finish.send().wait(io.waitScope);
    })) {
      return userMessage(*e).cStr();
    }
    return "";
  }


  // Uploads object `n` by writing `written` into the governor's file,
  // saying it wrote up to each of `says` (UploadSink.wrote), and finishing
  // with the hash of `claimed`; the error, empty when it worked.
  std::string uploadLocally(uint64_t n, const std::string& written, const std::string& claimed,
                            const std::vector<uint64_t>& says = {}) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
      auto req = service.uploadRequest();
      req.initObject().setSession(session);
      req.getObject().setN(n);
      req.setSize(claimed.size());
      req.setIncarnation(incarnation);
      req.setLocal(true);
      auto answer = req.send().wait(io.waitScope);
      KJ_ASSERT(answer.hasFile(), "no file offered");
      auto fd = KJ_ASSERT_NONNULL(openLocalFile(answer.getFile(), O_WRONLY), "the governor's file did not open");
      KJ_ASSERT(::write(fd, written.data(), written.size()) == static_cast<ssize_t>(written.size()));
      for (auto upTo : says) {
        auto wrote = answer.getSink().wroteRequest();
        wrote.setUpTo(upTo);
        wrote.send().wait(io.waitScope);
      }
      auto finish = answer.getSink().finishRequest();
      finish.setHash(XXH3_64bits(claimed.data(), claimed.size()));
      finish.send().wait(io.waitScope);
    })) {
      return e->getDescription().cStr();
    }
    return "";
  }

  wire::DataService::Client service = nullptr;
};

}  // namespace squall
