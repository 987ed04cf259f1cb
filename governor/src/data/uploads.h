// Constants that skip the server: a client uploads a big blob straight into
// this governor (DataService.upload, chosen by the server's placeData) and
// names it in its submit; the server claims it once the submit is applied
// (GovernorControl.claimUploads), and only then does it become an object of
// the store. Until then it is a finished temp file held here, removed when
// its time runs out or the client discards it, so an upload whose submit
// never comes leaves nothing behind. Loop thread only; writes and hashing
// on the pool.
#pragma once

#include "object-store.h"
#include "uv-bridge.h"

#include <kj/timer.h>
#include <spdlog/logger.h>
#include <squall/wire/data.capnp.h>
#include <unordered_map>

namespace squall {

class UploadTable final : private kj::TaskSet::ErrorHandler {
 public:
  // `ttl`: how long a finished upload waits for its claim. Owned by main(),
  // outlives every connection (and so every sink it hands out).
  UploadTable(UvBridge& bridge, ObjectStore& store, kj::Timer& timer, spdlog::logger& logger,
              kj::String governorName, kj::Duration ttl);
  ~UploadTable() noexcept(false);
  KJ_DISALLOW_COPY(UploadTable);

  // The server incarnation this governor is registered with (ServerLink);
  // uploads naming another are refused. 0: not registered yet.
  void setIncarnation(uint64_t incarnation) { serverIncarnation = incarnation; }

  // A sink for `size` bytes of `id`. Throws FAILED (naming sizes) when the
  // store's disk cannot hold them besides the uploads under way, when the
  // incarnation is not the server's, or when `id` is held or uploading.
  // With `local`, the client may write the temp file itself: it is
  // described there (local-file.h) and finish() reads back what it holds.
  wire::UploadSink::Client begin(Id id, uint64_t size, uint64_t incarnation,
                                 kj::Maybe<wire::LocalFile::Builder> local = nullptr);

  // Finished uploads become store objects; answers those not held finished.
  std::vector<Id> claim(kj::ArrayPtr<const Id> ids);
  // Removes finished, unclaimed uploads (a refused submit).
  void discard(kj::ArrayPtr<const Id> ids);
  // Drops every finished upload (the governor starts over).
  void clear();

  // Uploads under way and finished unclaimed, for tests and status.
  size_t inProgress() const { return writing.size(); }
  size_t unclaimed() const { return finished.size(); }

 private:
  class Sink;
  struct Finished {
    kj::String path;
    HashedSize hashed;
    // Bumped for each upload of an id, so that an old expiry does not drop a
    // newer upload.
    uint64_t generation;
  };

  UvBridge& bridge;
  ObjectStore& store;
  kj::Timer& timer;
  spdlog::logger& logger;
  kj::String governorName;
  kj::Duration ttl;
  uint64_t serverIncarnation = 0;
  uint64_t generations = 0;
  // Bytes announced by uploads under way, by id.
  std::unordered_map<Id, uint64_t, IdHash> writing;
  std::unordered_map<Id, Finished, IdHash> finished;
  kj::TaskSet expiries;

  // From Sink, on the loop.
  void ended(Id id);
  void done(Id id, kj::String path, HashedSize hashed);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
