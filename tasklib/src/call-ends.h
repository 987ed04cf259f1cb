// The ends of detached calls (Call::detach), reported from any thread and
// handed to the executor's loop: queued under a lock and told through an
// eventfd. Reporting never blocks (the reporter may hold a lock the loop's
// thread waits for: Python's GIL). Loop thread, but for the CallEnds.
#pragma once

#include <squall/tasklib/tasklib.h>

#include <cstdint>
#include <functional>
#include <kj/async-io.h>
#include <memory>
#include <string>

namespace squall {
namespace detail {

class CallEnds {
 public:
  // `ended(serial, error)` runs on the loop for each call ended (error:
  // none for finish()).
  using Ended = std::function<void(uint64_t serial, kj::Maybe<std::string> error)>;
  CallEnds(kj::LowLevelAsyncIoProvider& io, Ended ended);
  ~CallEnds() noexcept(false);
  CallEnds(const CallEnds&) = delete;
  CallEnds& operator=(const CallEnds&) = delete;

  // The CallEnd of the call of `serial`: ends it once; one dropped
  // without an end fails its call (it would wait for ever otherwise).
  std::shared_ptr<CallEnd> endFor(uint64_t serial);

 private:
  struct Queue;
  class QueuedEnd;
  // Shared with the CallEnds, which may outlive this.
  std::shared_ptr<Queue> queue;
  kj::Own<kj::AsyncInputStream> stream;
  uint64_t counter = 0;
  Ended ended;
  kj::Promise<void> reading = nullptr;
  kj::Promise<void> readOn();
};

}  // namespace detail
}  // namespace squall
