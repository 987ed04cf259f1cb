#include "call-ends.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <kj/io.h>
#include <mutex>
#include <stdexcept>
#include <sys/eventfd.h>
#include <unistd.h>
#include <utility>
#include <vector>

namespace squall {
namespace detail {

struct CallEnds::Queue {
  Queue() : fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (fd.get() < 0) throw std::runtime_error(std::string("eventfd: ") + strerror(errno));
  }
  void add(uint64_t serial, kj::Maybe<std::string> error) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ends.emplace_back(serial, kj::mv(error));
    }
    uint64_t one = 1;
    // Fails only when the counter is full, which a read empties.
    (void)!::write(fd.get(), &one, sizeof one);
  }
  std::vector<std::pair<uint64_t, kj::Maybe<std::string>>> take() {
    std::lock_guard<std::mutex> lock(mutex);
    return std::exchange(ends, {});
  }
  kj::AutoCloseFd fd;
  std::mutex mutex;
  std::vector<std::pair<uint64_t, kj::Maybe<std::string>>> ends;
};

class CallEnds::QueuedEnd final : public CallEnd {
 public:
  QueuedEnd(std::shared_ptr<Queue> queue, uint64_t serial) : queue(kj::mv(queue)), serial(serial) {}
  ~QueuedEnd() override {
    if (!done.exchange(true)) {
      queue->add(serial, std::string("the method detached its call and dropped it without finish() or fail()"));
    }
  }
  void finish() override {
    if (!done.exchange(true)) queue->add(serial, nullptr);
  }
  void fail(std::string error) override {
    if (!done.exchange(true)) queue->add(serial, kj::mv(error));
  }

 private:
  std::shared_ptr<Queue> queue;
  uint64_t serial;
  std::atomic<bool> done{false};
};

CallEnds::CallEnds(kj::LowLevelAsyncIoProvider& io, Ended ended)
    : queue(std::make_shared<Queue>()), stream(io.wrapInputFd(queue->fd.get())), ended(std::move(ended)) {
  reading = readOn().eagerlyEvaluate([](kj::Exception&& e) {
    fprintf(stderr, "executor: reading the ends of detached calls failed: %s\n", e.getDescription().cStr());
    _exit(1);
  });
}

CallEnds::~CallEnds() noexcept(false) = default;

std::shared_ptr<CallEnd> CallEnds::endFor(uint64_t serial) { return std::make_shared<QueuedEnd>(queue, serial); }

kj::Promise<void> CallEnds::readOn() {
  return stream->tryRead(&counter, sizeof counter, sizeof counter).then([this](size_t) {
    for (auto& [serial, error] : queue->take()) ended(serial, kj::mv(error));
    return readOn();
  });
}

}  // namespace detail
}  // namespace squall
