// Constants (see client.h: Session::blob, fileBlob, directory) and the
// upload of big ones straight to a governor (docs/decisions-ray.md, "Big
// constants skip the server"): before a submit (a blob of parts: at once),
// the server places them (placeData) and each is streamed to its
// governor's data service in chunks, hashed as it goes; a refused submit
// discards them. Thread: the one that created the Client.
#include "client-impl.h"
#include "tar.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
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
  std::vector<uint64_t> sizes;
  for (auto* o : big) sizes.push_back(o->size());
  auto places = placeData(sizes);
  for (size_t i = 0; i < big.size(); i++) upload(*big[i], places[i].first, places[i].second, sizes[i]);
}

std::vector<std::pair<std::string, std::string>> SessionImpl::placeData(const std::vector<uint64_t>& sizes) {
  auto places = client.retrying([&]() {
    auto req = client.svc().placeDataRequest();
    name(req);
    auto list = req.initSizes(sizes.size());
    for (size_t i = 0; i < sizes.size(); i++) list.set(i, sizes[i]);
    auto response = req.send().wait(client.waitScope());
    std::vector<std::pair<std::string, std::string>> out;
    for (auto place : response.getPlaces()) out.emplace_back(place.getGovernor().cStr(), place.getAddress().cStr());
    return out;
  });
  if (places.size() != sizes.size()) throw Error("the server placed " + std::to_string(places.size()) + " of " +
                                                 std::to_string(sizes.size()) + " constants");
  return places;
}

void SessionImpl::uploadPieces(LocalObject& o, const std::vector<std::string_view>& parts, uint64_t size) {
  auto places = placeData({size});
  upload(o, places[0].first, places[0].second, size, &parts);
}

void SessionImpl::upload(LocalObject& o, const std::string& governor, const std::string& address, uint64_t size,
                         const std::vector<std::string_view>* parts) {
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
    // On the governor's machine the bytes go into its file directly.
    bool tryLocal = client.localData() && client.notLocal.count(address) == 0;
    req.setLocal(tryLocal);
    auto sent = req.send();
    auto sink = sent.getSink();
    kj::Maybe<kj::AutoCloseFd> local;
    if (tryLocal) {
      auto answer = sent.wait(ws);
      if (answer.hasFile()) local = client.openLocal(address, answer.getFile(), O_WRONLY);
    }
    // Into the governor's file when it opened (same machine), else
    // through the sink.
    uint64_t written = 0;
    // A local write says how far it got every LOCAL_PROGRESS_BYTES: the
    // governor hashes behind it (UploadSink.wrote) instead of all at finish.
    uint64_t said = 0;
    kj::Vector<kj::Promise<void>> progress;
    auto send = [&](const kj::byte* bytes, size_t len) {
      XXH3_64bits_update(hash, bytes, len);
      KJ_IF_MAYBE(fd, local) {
        writeLocal(fd->get(), bytes, len, written);
        written += len;
        if (written - said >= LOCAL_PROGRESS_BYTES && written < size) {
          auto wrote = sink.wroteRequest();
          wrote.setUpTo(written);
          progress.add(wrote.send());
          said = written;
          ws.poll();  // on its way now, not after the last write
        }
        return;
      }
      auto write = sink.writeRequest(capnp::MessageSize{len / sizeof(capnp::word) + 16, 0});
      write.setChunk(kj::arrayPtr(bytes, len));
      // Resolves once the stream's window has room: a few chunks in flight.
      write.send().wait(ws);
    };
    if (file != nullptr) {
      auto buffer = kj::heapArray<kj::byte>(UPLOAD_CHUNK_BYTES);
      for (uint64_t offset = 0; offset < size; offset += UPLOAD_CHUNK_BYTES) {
        size_t len = std::min<uint64_t>(UPLOAD_CHUNK_BYTES, size - offset);
        if (fread(buffer.begin(), 1, len, file) != len) {
          throw fail("'" + o.path + "' is shorter than the " + std::to_string(size) + " bytes it had");
        }
        send(buffer.begin(), len);
      }
    } else {
      std::vector<std::string_view> whole{o.data};
      for (auto part : parts != nullptr ? *parts : whole) {
        for (size_t offset = 0; offset < part.size(); offset += UPLOAD_CHUNK_BYTES) {
          send(reinterpret_cast<const kj::byte*>(part.data()) + offset,
               std::min<size_t>(UPLOAD_CHUNK_BYTES, part.size() - offset));
        }
      }
    }
    kj::joinPromises(progress.releaseAsArray()).wait(ws);
    auto finish = sink.finishRequest();
    finish.setHash(XXH3_64bits_digest(hash));
    finish.send().wait(ws);
  } catch (const kj::Exception& e) {
    throw fail(client.describe(e));
  } catch (const Error& e) {
    throw fail(e.what());
  }
  o.placedOn = governor;
  o.placedAddress = address;
  o.placedSize = size;
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

// ------------------------------------------------------------ Session

namespace {
constexpr uint64_t MAX_CONSTANT_BYTES = 48 << 20;

// A small file, or one whose size is not known ahead (a pipe).
std::string readLocalFile(const std::string& path) {
  FILE* file = fopen(path.c_str(), "rb");
  if (file == nullptr) throw Error("cannot read '" + path + "': " + strerror(errno));
  std::string data;
  char buffer[65536];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), file)) > 0) data.append(buffer, n);
  bool failed = ferror(file);
  fclose(file);
  if (failed) throw Error("cannot read '" + path + "'");
  return data;
}
}  // namespace

DataObject Session::blob(std::string data, std::string label) {
  impl->checkOpen();
  auto& object = impl->newObject();
  object.constant = true;
  object.data = std::move(data);
  object.label = std::move(label);
  return DataObject(impl.get(), object.n);
}

DataObject Session::blob(const std::vector<std::string_view>& parts, std::string label) {
  uint64_t size = 0;
  for (auto part : parts) size += part.size();
  if (size <= client::INLINE_CONSTANT_BYTES) {
    std::string data;
    data.reserve(size);
    for (auto part : parts) data.append(part);
    return blob(std::move(data), std::move(label));
  }
  impl->checkOpen();
  // The session's only once uploaded: a failed upload leaves nothing.
  client::LocalObject object;
  object.n = impl->takeId();
  object.constant = true;
  object.label = std::move(label);
  impl->uploadPieces(object, parts, size);
  return DataObject(impl.get(), impl->addObject(std::move(object)).n);
}

DataObject Session::fileBlob(const std::string& path, std::string label) {
  if (label.empty()) label = std::filesystem::path(path).filename().string();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
      static_cast<uint64_t>(st.st_size) > client::INLINE_CONSTANT_BYTES) {
    // Read at the submit, in pieces, straight to a governor.
    impl->checkOpen();
    auto& object = impl->newObject();
    object.constant = true;
    object.path = std::filesystem::absolute(path).string();
    object.fileSize = static_cast<uint64_t>(st.st_size);
    object.label = std::move(label);
    return DataObject(impl.get(), object.n);
  }
  return blob(readLocalFile(path), std::move(label));
}

DataObject Session::directory(const std::string& path) {
  impl->checkOpen();
  auto tar = client::tarDirectory(path, MAX_CONSTANT_BYTES);
  auto& object = impl->newObject(ObjectKind::DIR);
  object.constant = true;
  object.data = std::move(tar);
  object.label = std::filesystem::path(path).lexically_normal().filename().string();
  return DataObject(impl.get(), object.n);
}

}  // namespace squall
