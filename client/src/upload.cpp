// Big constants straight to a governor (see client.h: Session::blob,
// fileBlob; docs/decisions.md, "Big constants skip the server"): before a
// submit, the server places them (placeData) and each is streamed to its
// governor's data service in chunks, hashed as it goes; a refused submit
// discards them. Thread: the one that created the Client.
#include "client-impl.h"

#include <cerrno>
#include <cstring>
#include <map>
#include <squall/proto/errors.h>
#include <xxhash.h>

namespace squall {
namespace client {

void SessionImpl::uploadConstants() {
  std::vector<LocalObject*> big;
  for (auto& o : objects) {
    if (o.constant && o.kind == ObjectKind::BLOB && o.placedOn.empty() && o.size() > INLINE_CONSTANT_BYTES) {
      big.push_back(&o);
    }
  }
  if (big.empty()) return;
  auto places = client.retrying([&]() {
    auto req = client.svc().placeDataRequest();
    name(req);
    auto sizes = req.initSizes(big.size());
    for (size_t i = 0; i < big.size(); i++) sizes.set(i, big[i]->size());
    auto response = req.send().wait(client.waitScope());
    std::vector<std::pair<std::string, std::string>> out;
    for (auto place : response.getPlaces()) out.emplace_back(place.getGovernor().cStr(), place.getAddress().cStr());
    return out;
  });
  if (places.size() != big.size()) throw Error("the server placed " + std::to_string(places.size()) + " of " +
                                               std::to_string(big.size()) + " constants");
  for (size_t i = 0; i < big.size(); i++) upload(*big[i], places[i].first, places[i].second);
}

void SessionImpl::upload(LocalObject& o, const std::string& governor, const std::string& address) {
  uint64_t size = o.size();
  auto fail = [&](const std::string& why) {
    return Error("cannot upload constant " + std::to_string(o.n) + " (" + std::to_string(size) +
                 " bytes) to governor " + governor + " at " + address + ": " + why);
  };
  FILE* file = nullptr;
  if (!o.path.empty()) {
    file = fopen(o.path.c_str(), "rb");
    if (file == nullptr) throw Error("cannot read '" + o.path + "': " + strerror(errno));
  }
  KJ_DEFER(if (file != nullptr) fclose(file));
  XXH3_state_t* hash = XXH3_createState();
  KJ_ASSERT(hash != nullptr);
  KJ_DEFER(XXH3_freeState(hash));
  XXH3_64bits_reset(hash);
  try {
    auto& ws = client.waitScope();
    auto req = client.dataService(address).uploadRequest();
    setId(req.initObject(), id, o.n);
    req.setSize(size);
    req.setIncarnation(incarnation);
    auto sink = req.send().getSink();
    auto buffer = file != nullptr ? kj::heapArray<kj::byte>(UPLOAD_CHUNK_BYTES) : kj::Array<kj::byte>();
    for (uint64_t offset = 0; offset < size; offset += UPLOAD_CHUNK_BYTES) {
      size_t len = std::min<uint64_t>(UPLOAD_CHUNK_BYTES, size - offset);
      const kj::byte* bytes = reinterpret_cast<const kj::byte*>(o.data.data()) + offset;
      if (file != nullptr) {
        if (fread(buffer.begin(), 1, len, file) != len) {
          throw fail("'" + o.path + "' is shorter than the " + std::to_string(size) + " bytes it had");
        }
        bytes = buffer.begin();
      }
      XXH3_64bits_update(hash, bytes, len);
      auto write = sink.writeRequest(capnp::MessageSize{len / sizeof(capnp::word) + 16, 0});
      write.setChunk(kj::arrayPtr(bytes, len));
      // Resolves once the stream's window has room: a few chunks in flight.
      write.send().wait(ws);
    }
    auto finish = sink.finishRequest();
    finish.setHash(XXH3_64bits_digest(hash));
    finish.send().wait(ws);
  } catch (const kj::Exception& e) {
    throw fail(client.describe(e));
  }
  o.placedOn = governor;
  o.placedAddress = address;
  o.placedHash = XXH3_64bits_digest(hash);
}

void SessionImpl::discardUploads() {
  std::map<std::string, std::vector<uint64_t>> byAddress;
  for (auto& o : objects) {
    if (!o.placedOn.empty()) byAddress[o.placedAddress].push_back(o.n);
  }
  for (auto& [address, ns] : byAddress) {
    try {
      auto req = client.dataService(address).discardUploadsRequest();
      auto list = req.initObjects(ns.size());
      for (size_t i = 0; i < ns.size(); i++) setId(list[i], id, ns[i]);
      req.send().wait(client.waitScope());
    } catch (const kj::Exception&) {
      // Gone: its uploads went with it, or go once their time runs out.
    }
  }
}

}  // namespace client
}  // namespace squall
