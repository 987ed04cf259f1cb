// The governor's link to its server: connecting (retrying while the server
// starts), registering (after a lost connection with the inventory of what
// it still holds and runs, so a restarted server carries on with it),
// heartbeats, and registering again when the connection is lost. Loop
// thread only; it drives the loop itself (waits), called from main().
#pragma once

#include "direct-calls.h"
#include "executor-pool.h"
#include "object-store.h"
#include "result-batcher.h"
#include "task-queue.h"

#include <kj/async-io.h>
#include <kj/one-of.h>
#include <spdlog/logger.h>
#include <squall/proto/rpc.h>
#include <squall/wire/service.capnp.h>

namespace squall {

struct ServerLinkOptions {
  // The server's HOST:PORT.
  kj::String server;
  kj::String token;
  // What this governor registers as.
  kj::String name;
  kj::String dataAddress;
  uint32_t cpus = 0;
  // Its executors and their functions, announced at each registration.
  kj::Maybe<const ExecutorPool&> executors;
  // How long to keep retrying the first connection; how long to keep trying
  // to register again after losing it (tasks run on meanwhile).
  kj::Duration connectTimeout = 10 * kj::SECONDS;
  kj::Duration reconnectTimeout = 600 * kj::SECONDS;
  // How long the server has to answer a heartbeat before the connection
  // counts as lost; 0: only a dropped connection counts.
  kj::Duration serverTimeout = 30 * kj::SECONDS;
  // Actor calls clients sent here directly, told at each registration
  // (GovernorInfo.direct).
  kj::Maybe<const DirectCalls&> direct = nullptr;
  // Uploads of big constants: told the server's incarnation at each
  // registration, emptied when the governor starts over, claimed by the
  // server (GovernorControl.claimUploads).
  kj::Maybe<UploadTable&> uploads = nullptr;
  // What executor processes print, sent upstream while connected
  // (GovernorUpstream.output).
  kj::Maybe<TaskOutputs&> outputs = nullptr;
};

class ServerLink {
 public:
  ServerLink(kj::Network& network, kj::Timer& timer, ObjectStore& store, TaskQueue& queue,
             ResultBatcher& batcher, spdlog::logger& logger, ServerLinkOptions options);
  KJ_DISALLOW_COPY(ServerLink);

  // Connects (retrying refused connections until connectTimeout) and
  // registers for the first time: the governor id the server gave, or why
  // not ("cannot connect to the server at ...", "the server at ... refused
  // registration: ...").
  kj::OneOf<uint32_t, kj::String> connect(kj::WaitScope& waitScope);

  // Serves the link until `stop` resolves (then nullptr) or the server is
  // lost and cannot be registered with again within reconnectTimeout (then
  // why). A lost server is reconnected to, the inventory sent.
  kj::Maybe<kj::String> run(kj::WaitScope& waitScope, kj::ForkedPromise<void>& stop);

  // Drops the connection (before the services it calls into go).
  void disconnect() { server = nullptr; }

  // Records a direct call with the server now (GovernorUpstream.recordDirect);
  // nullptr when not connected.
  kj::Maybe<kj::Promise<void>> recordDirect(wire::Graph::Reader call);

 private:
  kj::Network& network;
  kj::Timer& timer;
  ObjectStore& store;
  TaskQueue& queue;
  ResultBatcher& batcher;
  spdlog::logger& logger;
  ServerLinkOptions options;
  kj::Own<RpcClient> server;
  // The server's side of this governor (for heartbeats), set by each
  // registration.
  kj::Maybe<wire::GovernorUpstream::Client> upstream;
  // Tells the server a task lent its cpus or took them again.
  void sendLend(Id task, bool lent);
  // The incarnation of the server registered with last (0: none yet).
  uint64_t serverIncarnation = 0;
  // About to register with a server of another incarnation: drops every
  // task, result and object held; resolves once the tasks have ended.
  kj::Promise<void> startOver(uint64_t incarnation);
  // registerGovernor, once authenticated.
  kj::Promise<uint32_t> sendRegistration(RpcClient& connection, bool again);
  class IgnoreErrors final : public kj::TaskSet::ErrorHandler {
   public:
    void taskFailed(kj::Exception&&) override {}
  };
  IgnoreErrors ignoreErrors;
  kj::TaskSet sends{ignoreErrors};

  // `again`: after a lost connection (the server restarted, or the network
  // failed): the governor tells what it still runs and holds.
  kj::Promise<uint32_t> registerWith(RpcClient& connection, bool again);
  // Resolves when the server is lost: the connection dropped, or (with a
  // serverTimeout) a heartbeat went unanswered.
  kj::Promise<void> lost();
  // After a loss: connects and registers again. False when told to stop
  // meanwhile; sets `failure` when it gave up.
  bool reconnect(kj::WaitScope& waitScope, kj::ForkedPromise<void>& stop, kj::Maybe<kj::String>& failure);
};

}  // namespace squall
