// libFuzzer target: the server's RPC surface before authentication, as a
// peer without the token meets it: the real Bootstrap (server/src/services,
// with a token set) behind capnp's RPC system over the listener's gated
// BufferedMessageStream (proto/src/message-stream, listener.h's limits).
// Structure-aware: the input is a list of records, each made into one
// thing the peer sends — Bootstrap, a call of one of Bootstrap's methods
// with a version and a token, a Finish, a Release, a call with params made
// of raw words, or raw bytes — so the fuzzer spends its time on the calls'
// contents and order rather than on capnp's framing. The server must
// refuse, never crash, and never read more than the gate lets through.
#include "fuzz-util.h"

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <context.h>
#include <dispatcher.h>
#include <kj/async-io.h>
#include <services.h>
#include <session-history.h>
#include <spdlog/sinks/null_sink.h>
#include <squall/proto/listener.h>
#include <squall/proto/rpc.h>

namespace {

struct Input {
  const uint8_t* data;
  size_t size;
  size_t at = 0;
  bool empty() const { return at >= size; }
  uint8_t byte() { return at < size ? data[at++] : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= static_cast<uint32_t>(byte()) << (8 * i);
    return v;
  }
  kj::ArrayPtr<const uint8_t> bytes(size_t n) {
    n = std::min(n, size - std::min(at, size));
    auto out = kj::arrayPtr(data + at, n);
    at += n;
    return out;
  }
};

void append(kj::Vector<kj::byte>& out, capnp::MessageBuilder& builder) {
  auto words = capnp::messageToFlatArray(builder);
  out.addAll(words.asBytes());
}

// The bytes of the records in `in`.
kj::Array<kj::byte> peerBytes(Input& in) {
  kj::Vector<kj::byte> out;
  uint32_t question = 0;
  // At most 64 records of at most ~1 KiB: all of it fits in the socket's
  // buffer, so writing it never waits on a server that stopped reading.
  for (int records = 0; !in.empty() && records < 64; records++) {
    capnp::MallocMessageBuilder builder;
    auto message = builder.initRoot<capnp::rpc::Message>();
    uint8_t kind = in.byte() % 6;
    switch (kind) {
      case 0:
        message.initBootstrap().setQuestionId(question++);
        append(out, builder);
        break;
      case 1: {
        // One of Bootstrap's methods on the bootstrap (or a question).
        auto call = message.initCall();
        call.setQuestionId(question++);
        call.initTarget().initPromisedAnswer().setQuestionId(in.byte() % 4);
        call.setInterfaceId(capnp::typeId<squall::wire::Bootstrap>());
        uint16_t method = in.byte() % 4;
        call.setMethodId(method);
        auto version = in.byte() % 2 ? squall::wire::PROTOCOL_VERSION : in.u32();
        auto tokenBytes = in.bytes(in.byte());
        auto token = kj::heapString(reinterpret_cast<const char*>(tokenBytes.begin()), tokenBytes.size());
        for (auto& c : token) c = c == 0 ? 'x' : c;
        auto content = call.initParams().getContent();
        if (method == 0) {
          auto p = content.initAs<squall::wire::Bootstrap::RegisterClientParams>();
          p.setVersion(version);
          p.setToken(token);
        } else if (method == 1) {
          auto p = content.initAs<squall::wire::Bootstrap::RegisterGovernorParams>();
          p.setVersion(version);
          p.setToken(token);
          auto info = p.initInfo();
          info.setName("fuzz");
          info.setDataAddress("127.0.0.1:1");
          info.initResources().setCpus(in.byte());
        } else {
          auto p = content.initAs<squall::wire::Bootstrap::AuthenticateParams>();
          p.setVersion(version);
          p.setToken(token);
        }
        append(out, builder);
        break;
      }
      case 2:
        message.initFinish().setQuestionId(in.byte() % 8);
        append(out, builder);
        break;
      case 3: {
        auto release = message.initRelease();
        release.setId(in.byte() % 4);
        release.setReferenceCount(in.byte());
        append(out, builder);
        break;
      }
      case 4: {
        // A call whose params are whatever words come next.
        auto call = message.initCall();
        call.setQuestionId(question++);
        call.initTarget().setImportedCap(in.byte() % 4);
        call.setInterfaceId(in.byte() % 2 ? capnp::typeId<squall::wire::Bootstrap>() : in.u32());
        call.setMethodId(in.byte() % 8);
        auto raw = in.bytes(8 * (in.byte() % 16));
        auto words = kj::heapArray<capnp::word>(raw.size() / 8 + 1);
        memset(words.begin(), 0, words.asBytes().size());
        memcpy(words.begin(), raw.begin(), raw.size());
        KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                      capnp::FlatArrayMessageReader reader(words);
                      call.initParams().getContent().set(reader.getRoot<capnp::AnyPointer>());
                    })) {
          (void)e;
        }
        append(out, builder);
        break;
      }
      default:
        out.addAll(in.bytes(in.byte()));
        break;
    }
  }
  return out.releaseAsArray();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto logger = std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_mt>());
  static auto io = kj::setupAsyncIo();
  Input in{data, size};
  auto bytes = peerBytes(in);

  squall::SessionTable sessions(*logger);
  squall::SessionHistory history(squall::HistoryLimits{}, *logger);
  squall::GovernorPool governors;
  squall::Scheduler scheduler(squall::SchedulerOptions{});
  squall::Dispatcher dispatcher(sessions, governors, scheduler, io.provider->getTimer(), *logger);
  squall::ServerContext context{sessions, history, governors, dispatcher, *logger, "the-token", {}};
  {
    auto pipe = io.provider->newTwoWayPipe();
    squall::ListenerOptions options;
    squall::BufferedMessageStream messages(*pipe.ends[1]);
    messages.gateReads(options.messagesBeforeAuth, options.wordsBeforeAuth);
    capnp::TwoPartyVatNetwork network(messages, capnp::rpc::twoparty::Side::SERVER, squall::readerOptions());
    auto gate = kj::refcounted<squall::PeerGate>(kj::str("fuzz"));
    auto rpc = capnp::makeRpcServer(network, squall::newBootstrap(context, kj::addRef(*gate)));
    auto disconnected = network.onDisconnect().eagerlyEvaluate(nullptr);
    squall::fuzz::expectingRefusals([&]() {
      pipe.ends[0]->write(bytes.begin(), bytes.size()).wait(io.waitScope);
      pipe.ends[0]->shutdownWrite();
    });
    io.waitScope.poll();
  }
  io.waitScope.poll();
  *context.running = false;
  return 0;
}
