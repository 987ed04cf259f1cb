// tasklib's Input, Output and Call (tasklib.h), and the helpers its
// sources share (internal.h).
#include "internal.h"

#include <squall/proto/errors.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <kj/io.h>
#include <stdexcept>
#include <sys/mman.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace squall {

namespace detail {
std::string errnoText(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + strerror(errno);
}

// Maps a store file read-only. The mapping lives as long as the returned
// pointer's last copy. (Each error's text reads errno before the throw
// unwinds and closes the descriptor.)
std::shared_ptr<void> mapFile(const std::string& path, uint64_t& size) {
  kj::AutoCloseFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw std::runtime_error(errnoText("cannot open input", path));
  struct stat st;
  if (fstat(fd, &st) < 0) throw std::runtime_error(errnoText("cannot stat input", path));
  size = static_cast<uint64_t>(st.st_size);
  if (size == 0) return nullptr;
  void* at = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (at == MAP_FAILED) throw std::runtime_error(errnoText("cannot map input", path));
  return std::shared_ptr<void>(at, [size](void* p) { munmap(p, size); });
}

// The call's output directory: the governor names it, the first output
// that needs it makes it.
void ensureDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) < 0 && errno != EEXIST) {
    throw std::runtime_error(errnoText("cannot create the output directory", path));
  }
}

// Writes all of `bytes` to `fd`; false with errno set when it cannot.
bool writeFully(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

namespace {
void writeOpened(const std::string& path, std::string_view bytes, int flags, const char* opening) {
  kj::AutoCloseFd fd(open(path.c_str(), O_WRONLY | O_CLOEXEC | flags, 0644));
  if (fd.get() < 0) throw std::runtime_error(errnoText(opening, path));
  if (!writeFully(fd, bytes)) throw std::runtime_error(errnoText("cannot write output", path));
  if (close(fd.release()) < 0) throw std::runtime_error(errnoText("cannot write output", path));
}
}  // namespace

void writeAll(const std::string& path, std::string_view bytes) {
  writeOpened(path, bytes, O_CREAT | O_TRUNC, "cannot create output");
}

void writeOver(const std::string& path, std::string_view bytes) { writeOpened(path, bytes, 0, "cannot open output"); }

bool LentFiles::take(uint64_t size, const std::string& path) {
  std::lock_guard<std::mutex> hold(lock);
  File* best = nullptr;
  for (auto& f : files) {
    if (f.taken) continue;
    bool fits = f.size >= size;
    if (best == nullptr || (fits && (best->size < size || f.size < best->size)) ||
        (!fits && best->size < size && f.size > best->size)) {
      best = &f;
    }
  }
  if (best == nullptr) return false;
  best->taken = true;
  // Not ours to write (another user's governor): a new file instead.
  if (access(best->path.c_str(), W_OK) < 0) return false;
  if (rename(best->path.c_str(), path.c_str()) < 0) return false;
  if (truncate(path.c_str(), static_cast<off_t>(size)) < 0) {
    throw std::runtime_error(errnoText("cannot size output", path));
  }
  return true;
}

std::shared_ptr<LentFiles> lentFiles(capnp::List<wire::WarmFile>::Reader files) {
  if (files.size() == 0) return nullptr;
  auto lent = std::make_shared<LentFiles>();
  for (auto f : files) lent->files.push_back({std::string(f.getPath().cStr(), f.getPath().size()), f.getSize()});
  return lent;
}

DataKind dataKind(wire::ObjectKind kind) {
  switch (kind) {
    case wire::ObjectKind::DIR: return DataKind::DIR;
    case wire::ObjectKind::STREAM: return DataKind::STREAM;
    default: return DataKind::BLOB;
  }
}

const char* kindName(DataKind kind) {
  switch (kind) {
    case DataKind::BLOB: return "a blob";
    case DataKind::DIR: return "a dir";
    case DataKind::STREAM: return "a live stream";
  }
  return "?";
}

CallEnvironment::CallEnvironment(const std::vector<std::string>& vars) {
  for (auto& var : vars) {
    auto eq = var.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    std::string name = var.substr(0, eq);
    const char* before = getenv(name.c_str());
    saved.emplace_back(name, before != nullptr ? std::optional<std::string>(before) : std::nullopt);
    setenv(name.c_str(), var.c_str() + eq + 1, 1);
  }
}

CallEnvironment::~CallEnvironment() {
  for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
    if (it->second) {
      setenv(it->first.c_str(), it->second->c_str(), 1);
    } else {
      unsetenv(it->first.c_str());
    }
  }
}

}  // namespace detail

using namespace detail;

// ------------------------------------------------------------ Input, Output, Call

std::string_view Input::bytes() const {
  if (kind_ == DataKind::STREAM) {
    // Read to its end once, for a function that wants all of it.
    if (!drained_) {
      char buffer[1 << 16];
      for (size_t n; (n = read(buffer, sizeof buffer)) > 0;) drainedBytes_.append(buffer, n);
      drained_ = true;
    }
    return drainedBytes_;
  }
  if (kind_ != DataKind::BLOB) {
    throw std::logic_error("input " + (label_.empty() ? std::string("(no label)") : label_) + " is " +
                           kindName(kind_) + ": read it through path()");
  }
  return std::string_view(data_ == nullptr ? "" : data_, size_);
}

size_t Input::read(char* buffer, size_t size) const {
  if (kind_ != DataKind::STREAM) {
    throw std::logic_error("input " + (label_.empty() ? std::string("(no label)") : label_) + " is " +
                           kindName(kind_) + ", not a live stream: use " +
                           (kind_ == DataKind::DIR ? "path()" : "bytes()"));
  }
  for (;;) {
    ssize_t n = ::read(fd_, buffer, size);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) throw std::runtime_error(std::string("cannot read stream input: ") + strerror(errno));
  }
}

void Output::write(std::string_view bytes) {
  if (kind_ == DataKind::STREAM) {
    if (!writeFully(fd_, bytes)) {
      if (errno == EPIPE) throw StreamClosed("output " + name_ + ": every reader of the stream has gone");
      throw std::runtime_error("cannot write stream output " + name_ + ": " + strerror(errno));
    }
    return;
  }
  if (kind_ != DataKind::BLOB) throw std::logic_error("output " + name_ + " is a dir: fill dir() instead");
  if (usedPath_) throw std::logic_error("output " + name_ + " is written through file(): not write() as well");
  usedBuffer_ = true;
  buffer_.append(bytes);
}

const std::string& Output::file() {
  if (kind_ != DataKind::BLOB) {
    throw std::logic_error("output " + name_ + " is " + kindName(kind_) +
                           (kind_ == DataKind::DIR ? ": use dir()" : ": use write() or fd()"));
  }
  if (usedBuffer_) throw std::logic_error("output " + name_ + " is written through write(): not file() as well");
  if (!usedPath_) {
    ensureDir(dirPath_);
    path_ = dirPath_ + "/" + entry_;
    writeAll(path_, {});
    usedPath_ = true;
  }
  return path_;
}

const std::string& Output::fileOfSize(uint64_t size) {
  if (kind_ != DataKind::BLOB) {
    throw std::logic_error("output " + name_ + " is " + kindName(kind_) +
                           (kind_ == DataKind::DIR ? ": use dir()" : ": use write() or fd()"));
  }
  if (usedBuffer_) throw std::logic_error("output " + name_ + " is written through write(): not file() as well");
  return placeFile(size);
}

const std::string& Output::placeFile(uint64_t size) {
  if (!usedPath_) {
    ensureDir(dirPath_);
    path_ = dirPath_ + "/" + entry_;
    if (lent_ == nullptr || !lent_->take(size, path_)) {
      writeAll(path_, {});
      if (size > 0 && truncate(path_.c_str(), static_cast<off_t>(size)) < 0) {
        throw std::runtime_error(errnoText("cannot size output", path_));
      }
    }
    usedPath_ = true;
  }
  return path_;
}

const std::string& Output::dir() {
  if (kind_ != DataKind::DIR) {
    throw std::logic_error("output " + name_ + " is " + kindName(kind_) +
                           (kind_ == DataKind::BLOB ? ": use write() or file()" : ": use write() or fd()"));
  }
  if (!usedPath_) {
    ensureDir(dirPath_);
    path_ = dirPath_ + "/" + entry_;
    if (mkdir(path_.c_str(), 0755) < 0) throw std::runtime_error(errnoText("cannot create output", path_));
    usedPath_ = true;
  }
  return path_;
}

Call::~Call() {
  session_.reset();
  for (int fd : ownedFds_) close(fd);
}

Session& Call::session() {
  if (session_ == nullptr) {
    if (host_ != nullptr && std::this_thread::get_id() != thread_) {
      throw std::logic_error("session(): on the executor's thread only (not from a detached call's own thread)");
    }
    if (host_ == nullptr || sessionId_ == 0) {
      throw std::logic_error("this call has no session: its governor did not say which task it runs for");
    }
    recordWithServer();
    session_ = std::make_unique<Session>(host_->processClient(sessionId_, taskId_).attachChild(sessionId_, taskId_));
  }
  return *session_;
}

std::pair<void*, void*> Call::eventLoop() const {
  if (host_ == nullptr) return {nullptr, nullptr};
  return host_->eventLoop();
}

void Call::waiting(bool waiting) {
  if (host_ != nullptr) host_->waiting(sessionId_, taskId_, waiting);
}

void Call::recordWithServer() {
  if (host_ == nullptr || sessionId_ == 0) return;
  try {
    host_->recordCall(sessionId_, taskId_);
  } catch (const kj::Exception& e) {
    // A governor older than ExecutorHost.record records direct calls only
    // with their results: nothing to wait for (a submit naming such a call
    // is refused by the server, saying so).
    if (e.getType() == kj::Exception::Type::UNIMPLEMENTED) return;
    throw Error(std::string("cannot record the call with the server: ") + userMessage(e).cStr());
  }
}

void Call::allowConcurrentCalls(uint32_t n) {
  if (!constructor_) throw std::logic_error("allowConcurrentCalls(): only in an actor's constructor");
  concurrency_ = n > 1 ? n : 1;
}

std::shared_ptr<CallEnd> Call::detach() {
  if (!detachable_ || host_ == nullptr) {
    throw std::logic_error(
        "detach(): only in a method of an actor whose constructor allowed concurrent calls "
        "(Call::allowConcurrentCalls), while the method runs");
  }
  if (detached_) throw std::logic_error("detach(): this call was detached already");
  detached_ = true;
  return host_->detach(*this);
}

const Input& Call::input(size_t i) const {
  if (i >= inputs_.size()) {
    throw std::out_of_range("input " + std::to_string(i) + " asked for; the task has " +
                            std::to_string(inputs_.size()));
  }
  return inputs_[i];
}

Output& Call::output(size_t i) {
  if (i >= outputs_.size()) {
    throw std::out_of_range("output " + std::to_string(i) + " asked for; the function has " +
                            std::to_string(outputs_.size()));
  }
  return outputs_[i];
}

Output& Call::output(std::string_view name) {
  for (auto& o : outputs_) {
    if (o.name_ == name) return o;
  }
  throw std::out_of_range("no output named " + std::string(name));
}


}  // namespace squall
