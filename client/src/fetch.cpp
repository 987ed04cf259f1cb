// Fetching objects' bytes (see client.h: DataObject::fetch, fetchToFile,
// Session::fetchAll): where the server says an object is (its bytes
// inline for a constant), then a read from the governor's data service
// that holds it. fetchAll keeps every request of a batch in flight at
// once. Thread: the one that created the Client.
#include "client-impl.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <sys/mman.h>
#include <squall/proto/chunk-codec.h>
#include <squall/proto/errors.h>

namespace squall {
namespace client {

namespace {

// Makes room for `size` fetched bytes in `text`. Big ones land in memory
// first touched here; huge pages (THP in "madvise" mode) make those first
// touches cheap: on the VMs we run on a 4 KiB page costs 16-20 us to
// fault in, 0.15 GB/s (docs/decisions-ray.md, "Python values without copies").
void reserveFor(std::string& text, uint64_t size) {
  constexpr uintptr_t HUGE_PAGE = 2 << 20;
  text.reserve(size);
  if (size < 2 * HUGE_PAGE) return;
  auto at = reinterpret_cast<uintptr_t>(text.data());
  uintptr_t begin = (at + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
  uintptr_t end = (at + size) & ~(HUGE_PAGE - 1);
  // Advice only: where it is refused, pages come 4 KiB at a time.
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

// Receives fetched bytes into a string or a file.
class SinkImpl final : public wire::ByteSink::Server {
 public:
  SinkImpl(std::string* text, FILE* file, uint64_t& received)
      : text(text), file(file), received(received) {}

  kj::Promise<void> write(WriteContext context) override {
    auto params = context.getParams();
    auto chunk = params.getChunk();
    kj::Array<kj::byte> decoded;
    kj::ArrayPtr<const kj::byte> bytes = chunk;
    if (params.getRawSize() != 0) {
      decoded = decompressChunk(chunk, params.getRawSize());
      bytes = decoded;
    }
    received += bytes.size();
    if (text != nullptr) text->append(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
    if (file != nullptr) {
      SQUALL_REQUIRE(fwrite(bytes.begin(), 1, bytes.size(), file) == bytes.size(),
                     "cannot write fetched data: ", strerror(errno));
    }
    return kj::READY_NOW;
  }

  // Writes are handled synchronously above, so all have landed by now.
  kj::Promise<void> done(DoneContext) override { return kj::READY_NOW; }

 private:
  std::string* text;
  FILE* file;
  uint64_t& received;
};

// Hands bytes held here (inline in an answer) to a fetch: into `text`,
// `file` or both.
void deliver(kj::ArrayPtr<const kj::byte> bytes, std::string* text, FILE* file) {
  if (text) text->assign(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  if (file) {
    SQUALL_REQUIRE(fwrite(bytes.begin(), 1, bytes.size(), file) == bytes.size(),
                   "cannot write fetched data: ", strerror(errno));
  }
}

}  // namespace

void SessionImpl::fetch(uint64_t n, std::string* text, FILE* file, std::optional<ObjectKind> expect) {
  checkOpen();
  if (directOf(n) != nullptr) {
    wait({n}, false, nullptr);
    // A small blob its answer carried; else, once recorded, the server
    // has it too.
    if (auto* bytes = answeredBytes(n)) {
      SQUALL_REQUIRE(!expect || *expect == ObjectKind::BLOB, "object ", n, " is a blob, not a dir");
      deliver(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes->data()), bytes->size()), text, file);
      return;
    }
    recordNamed({n});
  }
  // It waits for an object not yet made: a function gives its cpus back
  // meanwhile, as in wait().
  if (client.aroundWait) client.aroundWait(true);
  KJ_DEFER(if (client.aroundWait) client.aroundWait(false));
  whileOpen([&]() { client.guard([&]() {
    auto response = client.retrying([&]() {
      auto req = client.svc().fetchRequest();
      name(req);
      req.setObject(n);
      return client.block(req.send());
    });
    auto location = response.getLocation();
    // Never made: its task failed, allowed to (or was skipped).
    if (location.isFailed()) throw taskFailed(location.getFailed());
    if (expect) {
      bool isDir = location.getKind() == wire::ObjectKind::DIR;
      SQUALL_REQUIRE(isDir == (*expect == ObjectKind::DIR), "object ", n, " is a ",
                     isDir ? "dir" : "blob", ", not a ", isDir ? "blob" : "dir");
    }
    if (location.isData()) {
      deliver(location.getData(), text, file);
      return;
    }
    std::string where = location.getGovernor().cStr();
    // Its size is known: the bytes land in one allocation, never moved.
    if (text != nullptr) reserveFor(*text, location.getSize());
    if (client.readLocal(where, location.getId(), location.getSize(), text, file)) return;
    uint64_t received = 0;
    auto read = client.dataService(where).readRequest();
    read.setId(location.getId());
    read.setOffset(0);
    read.setCompress(false);
    read.setSink(kj::heap<SinkImpl>(text, file, received));
    auto result = client.block(read.send());
    SQUALL_REQUIRE(received == result.getSize(), "fetch of object ", n, " from governor ", where,
                   " was cut short: ", received, " of ", result.getSize(), " bytes");
  }); });
}

std::vector<ObjectBytes> SessionImpl::fetchAll(const std::vector<uint64_t>& all, bool map) {
  // At most FETCH_BATCH requests in flight: the answers of a batch queue
  // on the server's side of the connection until this thread reads them
  // (and a peer that does not read is cut at 4,096 queued writes).
  constexpr size_t FETCH_BATCH = 1000;
  if (all.size() > FETCH_BATCH) {
    std::vector<ObjectBytes> values;
    values.reserve(all.size());
    for (size_t at = 0; at < all.size(); at += FETCH_BATCH) {
      std::vector<uint64_t> slice(all.begin() + at, all.begin() + std::min(all.size(), at + FETCH_BATCH));
      for (auto& value : fetchAll(slice, map)) values.push_back(std::move(value));
    }
    return values;
  }
  checkOpen();
  std::vector<ObjectBytes> values(all.size());
  // Those the server is asked for, and where each goes in `values`.
  std::vector<uint64_t> ids;
  std::vector<size_t> at;
  std::vector<uint64_t> direct;
  std::copy_if(all.begin(), all.end(), std::back_inserter(direct), [&](uint64_t n) { return directOf(n); });
  if (!direct.empty()) wait(direct, false, nullptr);
  for (size_t i = 0; i < all.size(); i++) {
    // Small blobs their direct calls' answers carried are here already.
    if (auto* bytes = answeredBytes(all[i])) {
      values[i].text_ = *bytes;
      continue;
    }
    ids.push_back(all[i]);
    at.push_back(i);
  }
  if (ids.empty()) return values;
  // Made by direct calls: once recorded, the server has them too.
  recordNamed(ids);
  if (client.aroundWait) client.aroundWait(true);
  KJ_DEFER(if (client.aroundWait) client.aroundWait(false));
  whileOpen([&]() { client.guard([&]() {
    using Answer = capnp::Response<wire::ClientService::FetchResults>;
    std::vector<kj::Maybe<Answer>> answers(ids.size());
    client.retrying([&]() {
      kj::Vector<kj::Promise<void>> asked;
      for (size_t i = 0; i < ids.size(); i++) {
        auto req = client.svc().fetchRequest();
        name(req);
        req.setObject(ids[i]);
        asked.add(req.send().then([&answers, i](Answer&& answer) { answers[i] = kj::mv(answer); }));
      }
      client.block(kj::joinPromises(asked.releaseAsArray()));
    });
    // The first never made, in the order asked, as its fetch would throw.
    for (auto& answer : answers) {
      KJ_IF_MAYBE(a, answer) {
        if (a->getLocation().isFailed()) throw taskFailed(a->getLocation().getFailed());
      }
    }
    std::vector<uint64_t> received(ids.size(), 0);
    kj::Vector<kj::Promise<void>> reads;
    std::vector<uint64_t> sizes(ids.size(), 0);
    for (size_t i = 0; i < ids.size(); i++) {
      auto location = KJ_ASSERT_NONNULL(answers[i]).getLocation();
      if (location.isData()) {
        auto data = location.getData();
        values[at[i]].text_.assign(reinterpret_cast<const char*>(data.begin()), data.size());
        continue;
      }
      if (map && client.readLocal(location.getGovernor().cStr(), location.getId(), location.getSize(), nullptr,
                                  nullptr, &values[at[i]])) {
        sizes[i] = received[i] = location.getSize();
        continue;
      }
      reserveFor(values[at[i]].text_, location.getSize());
      if (client.readLocal(location.getGovernor().cStr(), location.getId(), location.getSize(), &values[at[i]].text_,
                           nullptr)) {
        sizes[i] = received[i] = location.getSize();
        continue;
      }
      auto read = client.dataService(location.getGovernor().cStr()).readRequest();
      read.setId(location.getId());
      read.setOffset(0);
      read.setCompress(false);
      read.setSink(kj::heap<SinkImpl>(&values[at[i]].text_, nullptr, received[i]));
      reads.add(read.send().then([&sizes, i](auto&& result) { sizes[i] = result.getSize(); }));
    }
    client.block(kj::joinPromises(reads.releaseAsArray()));
    for (size_t i = 0; i < ids.size(); i++) {
      auto location = KJ_ASSERT_NONNULL(answers[i]).getLocation();
      if (location.isData()) continue;
      SQUALL_REQUIRE(received[i] == sizes[i], "fetch of object ", ids[i], " from governor ",
                     location.getGovernor().cStr(), " was cut short: ", received[i], " of ", sizes[i], " bytes");
    }
  }); });
  return values;
}

}  // namespace client

std::vector<ObjectBytes> Session::fetchEach(const std::vector<DataObject>& objects, bool map) {
  // By session, as waits: outputs of calls on another session's actor.
  std::vector<ObjectBytes> values(objects.size());
  std::map<client::SessionImpl*, std::vector<size_t>> byOwner;
  for (size_t i = 0; i < objects.size(); i++) byOwner[objects[i].session].push_back(i);
  for (auto& [owner, indexes] : byOwner) {
    std::vector<uint64_t> ids;
    for (auto i : indexes) ids.push_back(objects[i].id());
    auto fetched = owner->fetchAll(ids, map);
    for (size_t k = 0; k < indexes.size(); k++) values[indexes[k]] = std::move(fetched[k]);
  }
  return values;
}

std::vector<std::string> Session::fetchAll(const std::vector<DataObject>& objects) {
  std::vector<std::string> values;
  values.reserve(objects.size());
  for (auto& bytes : fetchEach(objects, false)) values.push_back(bytes.take());
  return values;
}

std::vector<ObjectBytes> Session::fetchAllMapped(const std::vector<DataObject>& objects) {
  return fetchEach(objects, true);
}

ObjectBytes::ObjectBytes(ObjectBytes&& other) noexcept
    : text_(std::move(other.text_)), mapped_(other.mapped_), length_(other.length_) {
  other.mapped_ = nullptr;
  other.length_ = 0;
}

ObjectBytes& ObjectBytes::operator=(ObjectBytes&& other) noexcept {
  if (this != &other) {
    if (mapped_ != nullptr) ::munmap(mapped_, length_);
    text_ = std::move(other.text_);
    mapped_ = other.mapped_;
    length_ = other.length_;
    other.mapped_ = nullptr;
    other.length_ = 0;
  }
  return *this;
}

ObjectBytes::~ObjectBytes() {
  if (mapped_ != nullptr) ::munmap(mapped_, length_);
}

std::string ObjectBytes::take() {
  if (mapped_ == nullptr) return std::move(text_);
  std::string copy(static_cast<const char*>(mapped_), length_);
  ::munmap(mapped_, length_);
  mapped_ = nullptr;
  length_ = 0;
  return copy;
}

}  // namespace squall
