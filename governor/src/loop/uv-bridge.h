// Runs libuv inside the KJ event loop: the one place that calls uv_run.
// Everything here lives on the thread that owns the KJ loop, except the
// bodies given to runOnPool(), which run on libuv's thread pool.
#pragma once

#include <kj/async-unix.h>
#include <kj/debug.h>
#include <kj/function.h>
#include <kj/timer.h>
#include <spdlog/logger.h>
#include <type_traits>
#include <uv.h>

// Checks a libuv return code (negative errno on failure) and throws the
// matching KJ exception, naming the call and any extra context.
#define SQUALL_UV_CHECK(call, ...)                                         \
  do {                                                                     \
    int squallUvResult_ = (call);                                          \
    if (squallUvResult_ < 0) {                                             \
      KJ_FAIL_SYSCALL(#call, -squallUvResult_, ##__VA_ARGS__);             \
    }                                                                      \
  } while (false)

// A KJ exception whose description is exactly the concatenated arguments
// (KJ_EXCEPTION would add "; name = value" debug text to user-facing errors).
#define SQUALL_EXCEPTION(type, ...) \
  ::kj::Exception(::kj::Exception::Type::type, __FILE__, __LINE__, ::kj::str(__VA_ARGS__))

namespace squall {

// "no such file or directory" for UV_ENOENT, etc.
kj::String uvErrorText(int code);

namespace _ {
// A job on libuv's thread pool. Deletes itself on the loop thread once
// libuv reports it done (or cancelled).
class PoolJob {
 public:
  virtual ~PoolJob() noexcept(false) = default;
  // Runs on a pool thread; must only touch what the job owns.
  virtual void run() = 0;
  // Runs on the loop thread; `status` is 0, UV_ECANCELED or a queueing error.
  virtual void complete(int status) = 0;

  uv_work_t request;
  // Set while the promise for this job is alive; cleared by either side.
  class CancelGuard* guard = nullptr;
};

class CancelGuard {
 public:
  explicit CancelGuard(PoolJob* job) : job(job) { job->guard = this; }
  ~CancelGuard() noexcept(false);
  KJ_DISALLOW_COPY(CancelGuard);
  PoolJob* job;
};
}  // namespace _

// Owns the uv loop. Watches uv_backend_fd() with a KJ FdObserver and honours
// uv_backend_timeout() with a KJ timer, calling uv_run(UV_RUN_NOWAIT) when
// either fires. Code that starts libuv work (spawn, timers, pool jobs) from
// KJ code must call wake() afterwards, because libuv registers new fds and
// timers only inside uv_run (runOnPool does this itself).
//
// Teardown: owners close their handles first; the destructor then kills and
// closes any leftover process handles, waits for pool jobs already running,
// and closes the loop.
class UvBridge {
 public:
  UvBridge(kj::UnixEventPort& eventPort, kj::Timer& timer, spdlog::logger& logger);
  ~UvBridge() noexcept(false);
  KJ_DISALLOW_COPY(UvBridge);

  uv_loop_t* loop() { return &uvLoop; }

  // Makes the bridge run libuv soon. Cheap; safe to call from libuv callbacks.
  void wake();

  // Runs `work` on libuv's thread pool and resolves with its result (or its
  // exception) on the loop thread. `work` must own everything it touches.
  // Dropping the promise cancels the job if it has not started; a started
  // job runs to the end and its result is discarded.
  template <typename T>
  kj::Promise<T> runOnPool(kj::Function<T()> work);

 private:
  uv_loop_t uvLoop;
  kj::Timer& timer;
  spdlog::logger& logger;
  kj::Maybe<kj::Own<kj::UnixEventPort::FdObserver>> observer;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> wakeFulfiller;
  bool running = false;       // inside uv_run
  bool wokenWhileRunning = false;
  kj::Promise<void> pumping = nullptr;

  kj::Promise<void> pump();
  void queue(_::PoolJob* job);
};

// ---------------------------------------------------------------------------

template <typename T>
kj::Promise<T> UvBridge::runOnPool(kj::Function<T()> work) {
  using Value = kj::_::FixVoid<T>;
  struct Job final : public _::PoolJob {
    kj::Function<T()> work;
    kj::Maybe<Value> result;
    kj::Maybe<kj::Exception> error;
    kj::Own<kj::PromiseFulfiller<T>> fulfiller;

    void run() override {
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([this]() {
                    if constexpr (std::is_void_v<T>) {
                      work();
                      result = kj::_::Void();
                    } else {
                      result = work();
                    }
                  })) {
        error = kj::mv(*e);
      }
    }
    void complete(int status) override {
      if (status == UV_ECANCELED) {
        fulfiller->reject(SQUALL_EXCEPTION(DISCONNECTED, "pool job cancelled"));
      } else if (status < 0) {
        fulfiller->reject(SQUALL_EXCEPTION(FAILED, "cannot queue work on the libuv thread pool: ",
                                           uvErrorText(status)));
      } else KJ_IF_MAYBE(e, error) {
        fulfiller->reject(kj::mv(*e));
      } else KJ_IF_MAYBE(r, result) {
        fulfiller->fulfill(kj::mv(*r));
      } else {
        fulfiller->reject(SQUALL_EXCEPTION(FAILED, "pool job produced no result"));
      }
    }
  };
  auto paf = kj::newPromiseAndFulfiller<T>();
  auto* job = new Job();
  job->work = kj::mv(work);
  job->fulfiller = kj::mv(paf.fulfiller);
  auto guard = kj::heap<_::CancelGuard>(job);
  queue(job);
  return paf.promise.attach(kj::mv(guard));
}

}  // namespace squall
