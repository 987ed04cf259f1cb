// What tasklib's sources share (not public): files, kinds, a call's
// environment. The Executor's registry is registry.cpp, Input, Output and
// Call call.cpp, the RPC service executor.cpp.
#pragma once

#include <squall/tasklib/tasklib.h>

#include <cstdint>
#include <kj/array.h>
#include <memory>
#include <mutex>
#include <optional>
#include <squall/wire/executor.capnp.h>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace squall {
namespace detail {

std::string errnoText(const std::string& what, const std::string& path);
// Maps a store file read-only. The mapping lives as long as the returned
// pointer's last copy.
std::shared_ptr<void> mapFile(const std::string& path, uint64_t& size);
// The call's output directory: the governor names it, the first output
// that needs it makes it.
void ensureDir(const std::string& path);
// Writes all of `bytes` to `fd`; false with errno set when it cannot.
bool writeFully(int fd, std::string_view bytes);
void writeAll(const std::string& path, std::string_view bytes);
// Writes `bytes` over the start of the file at `path` (no O_TRUNC: a lent
// file keeps its pages; Output::placeFile sized it).
void writeOver(const std::string& path, std::string_view bytes);

// The warm files the governor lent one call (executor.capnp WarmFile),
// taken by its outputs (Output::fileOfSize) from any of its threads.
struct LentFiles {
  struct File {
    std::string path;
    uint64_t size;
    bool taken = false;
  };
  std::mutex lock;
  std::vector<File> files;
  // Renames the smallest untaken file of at least `size` bytes (else the
  // largest) to `path` at `size` bytes; false when none could be.
  bool take(uint64_t size, const std::string& path);
};
// The call's lent files; null when none.
std::shared_ptr<LentFiles> lentFiles(capnp::List<wire::WarmFile>::Reader files);
DataKind dataKind(wire::ObjectKind kind);
// For kj::str(), which takes no std::string_view.
inline kj::ArrayPtr<const char> chars(std::string_view text) { return kj::arrayPtr(text.data(), text.size()); }
const char* kindName(DataKind kind);

// Sets a call's NAME=VALUE variables in the process's environment for the
// length of the call, then puts back what was there.
class CallEnvironment {
 public:
  explicit CallEnvironment(const std::vector<std::string>& vars);
  ~CallEnvironment();
  CallEnvironment(const CallEnvironment&) = delete;
  CallEnvironment& operator=(const CallEnvironment&) = delete;

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
};

}  // namespace detail
}  // namespace squall
