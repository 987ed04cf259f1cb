// The data plane of a governor: serving held objects to other governors and
// clients (DataBootstrapImpl / DataServiceImpl), and fetching inputs from
// other governors (DataFetcher, with FetchSinkImpl receiving the bytes).
// Loop thread only; file reads, writes and LZ4 of big chunks on the pool.
#pragma once

#include "object-store.h"
#include "uploads.h"
#include "uv-bridge.h"

#include <kj/async-io.h>
#include <map>
#include <spdlog/logger.h>
#include <squall/proto/listener.h>
#include <squall/proto/rpc.h>
#include <squall/wire/data.capnp.h>
#include <string>

namespace squall {

// The live streams produced on this governor, as the data service reads
// them for other governors. The streams room implements it (StreamHub):
// streams sit above data (they read remote streams through DataFetcher), so
// the data service knows them only through this.
class LiveStreams {
 public:
  virtual ~LiveStreams() noexcept(false) = default;
  // A live DataService.read of stream `id` produced (or about to be) here:
  // one more remote reader. Resolves with the bytes sent once the producer
  // succeeded; rejects with the readers' error.
  virtual kj::Promise<uint64_t> serve(Id id, wire::ByteSink::Client sink, bool compress) = 0;
};

// Actor calls that clients send here directly (DataService.callActor). The
// exec room implements it (DirectCalls), above data: the data service knows
// it only through this.
class DirectCallPort {
 public:
  virtual ~DirectCallPort() noexcept(false) = default;
  // The answer to one call: its result (a TaskResult message), or why it
  // was refused (not run, never reported).
  struct Answer {
    kj::Own<capnp::MallocMessageBuilder> result;
    kj::String refused;
  };
  virtual kj::Promise<Answer> callActor(wire::Graph::Reader call) = 0;
  // Whether direct call `task` is here: queued, running, or ended with a
  // result the server may not have yet (DataService.heldCalls).
  virtual bool holds(Id task) const = 0;
};

// What the data service needs; owned by main(), outlives every connection.
struct DataServiceEnv {
  ObjectStore& store;
  spdlog::logger& logger;
  kj::String token;
  kj::String governorName;
  // Live streams produced here; without it only held objects are served.
  kj::Maybe<LiveStreams&> streams = nullptr;
  // Actor calls sent here directly; without it callActor refuses them.
  kj::Maybe<DirectCallPort&> directCalls = nullptr;
  // Big constants uploaded by clients; without it upload refuses them.
  kj::Maybe<UploadTable&> uploads = nullptr;
};

// One per accepted connection. open() checks the protocol version and the
// token before handing out the service.
class DataBootstrapImpl final : public wire::DataBootstrap::Server {
 public:
  // `gate`: the connection's (RpcListener), admitted by an open() with
  // the token and refused by any other.
  DataBootstrapImpl(DataServiceEnv& env, kj::Own<PeerGate> gate) : env(env), gate(kj::mv(gate)) {}
  kj::Promise<void> open(OpenContext context) override;

 private:
  DataServiceEnv& env;
  kj::Own<PeerGate> gate;
};

class DataServiceImpl final : public wire::DataService::Server {
 public:
  explicit DataServiceImpl(DataServiceEnv& env) : env(env) {}
  // Streams the object from `offset` in CHUNK_SIZE chunks, awaiting each
  // send for flow control; the next chunk is read while one is in flight.
  // An id the store does not hold fails at once, unless the read is `live`:
  // then it is a live stream's (see LiveStreams::serve) and the caller
  // becomes one of its readers. A finished upload not claimed yet is
  // claimed first (its reader outran the server's claim).
  kj::Promise<void> read(ReadContext context) override;
  // Hands the call to DataServiceEnv::directCalls; answers when it ends.
  kj::Promise<void> callActor(CallActorContext context) override;
  // Asks DataServiceEnv::directCalls (none held without it).
  kj::Promise<void> heldCalls(HeldCallsContext context) override;
  // Hands out an UploadTable sink (docs/decisions-ray.md, constants that skip
  // the server).
  kj::Promise<void> upload(UploadContext context) override;
  kj::Promise<void> discardUploads(DiscardUploadsContext context) override;
  // Where a blob held as a file is, for a client on this machine.
  kj::Promise<void> readLocal(ReadLocalContext context) override;

 private:
  DataServiceEnv& env;
  // A finished upload of `id` not claimed yet is claimed (its reader outran
  // the server's claim).
  void claimIfUploaded(Id id);
};

// Fetches objects from other governors' data services into the store. One
// connection per remote address, reused; dropped when it breaks.
class DataFetcher final : private kj::TaskSet::ErrorHandler {
 public:
  DataFetcher(kj::Network& network, UvBridge& bridge, ObjectStore& store, kj::String token,
              spdlog::logger& logger);
  ~DataFetcher() noexcept(false);
  KJ_DISALLOW_COPY(DataFetcher);

  // Resolves once `id` is held: at once if it is, joining a transfer already
  // under way, or fetching it from `address`. Rejects with a message naming
  // the object and the address.
  kj::Promise<void> fetch(Id id, wire::ObjectKind kind, kj::StringPtr address);

  // Reads the live stream `id` from the governor at `address` into `sink`
  // (DataService.read with `live` set: the producer's governor waits for
  // the producer to be assigned there); resolves with the bytes sent once
  // its producer succeeded. The connection is shared with fetches.
  kj::Promise<uint64_t> readLive(Id id, kj::StringPtr address, bool compress,
                                 wire::ByteSink::Client sink);

 private:
  struct Peer;

  kj::Network& network;
  UvBridge& bridge;
  ObjectStore& store;
  kj::String token;
  spdlog::logger& logger;
  std::map<std::string, kj::Own<Peer>> peers;
  kj::TaskSet tasks;

  wire::DataService::Client serviceAt(kj::StringPtr address);
  kj::Promise<void> transfer(Id id, wire::ObjectKind expected, kj::String address);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
