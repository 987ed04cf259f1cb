// The libuv-in-KJ bridge. Loop thread only (pool job bodies excepted).
#include "uv-bridge.h"

#include "child-process.h"

#include <poll.h>

namespace squall {

kj::String uvErrorText(int code) { return kj::str(uv_strerror(code)); }

namespace _ {
CancelGuard::~CancelGuard() noexcept(false) {
  if (job != nullptr) {
    job->guard = nullptr;
    // Fails harmlessly (UV_EBUSY) once the job has started.
    uv_cancel(reinterpret_cast<uv_req_t*>(&job->request));
  }
}
}  // namespace _

UvBridge::UvBridge(kj::UnixEventPort& eventPort, kj::Timer& timer, spdlog::logger& logger)
    : timer(timer), logger(logger) {
  SQUALL_UV_CHECK(uv_loop_init(&uvLoop));
  observer = kj::heap<kj::UnixEventPort::FdObserver>(eventPort, uv_backend_fd(&uvLoop),
                                                     kj::UnixEventPort::FdObserver::OBSERVE_READ);
  pumping = kj::evalLater([this]() { return pump(); }).eagerlyEvaluate([this](kj::Exception&& e) {
    this->logger.error("event=uv-bridge-failed error=\"{}\"", e.getDescription().cStr());
  });
}

UvBridge::~UvBridge() noexcept(false) {
  // Stop pumping and leave KJ's epoll before the fd goes away.
  pumping = nullptr;
  wakeFulfiller = nullptr;
  observer = nullptr;

  // Whatever handles remain are closed here; a child still running is killed
  // with its process group so none outlives the governor.
  uv_walk(
      &uvLoop,
      [](uv_handle_t* handle, void* arg) {
        if (uv_is_closing(handle)) return;
        auto* self = static_cast<UvBridge*>(arg);
        if (handle->type == UV_POLL) {
          // Poll handles are child processes' pidfds (see child-process.h).
          self->logger.warn("event=uv-teardown-kill");
          ChildProcess::closeAtTeardown(reinterpret_cast<uv_poll_t*>(handle));
        } else {
          self->logger.warn("event=uv-teardown-close type={}", uv_handle_type_name(handle->type));
          uv_close(handle, nullptr);
        }
      },
      this);
  // Runs close callbacks and waits for pool jobs that already started (they
  // cannot be interrupted); their results go nowhere.
  uv_run(&uvLoop, UV_RUN_DEFAULT);
  int rc = uv_loop_close(&uvLoop);
  if (rc != 0) {
    logger.error("event=uv-loop-close-failed error=\"{}\"", uv_strerror(rc));
  }
}

void UvBridge::wake() {
  if (running) {
    wokenWhileRunning = true;
    return;
  }
  KJ_IF_MAYBE(f, wakeFulfiller) {
    (*f)->fulfill();
    wakeFulfiller = nullptr;
  }
}

kj::Promise<void> UvBridge::pump() {
  running = true;
  wokenWhileRunning = false;
  uv_run(&uvLoop, UV_RUN_NOWAIT);
  running = false;

  auto paf = kj::newPromiseAndFulfiller<void>();
  wakeFulfiller = kj::mv(paf.fulfiller);
  kj::Promise<void> next = kj::mv(paf.promise);

  if (wokenWhileRunning) {
    // Work started from a callback: run again, but let KJ poll its own fds
    // first (afterDelay(0), not evalLater, so RPC is not starved).
    next = timer.afterDelay(0 * kj::MILLISECONDS);
  } else if (uv_loop_alive(&uvLoop)) {
    int timeoutMs = uv_backend_timeout(&uvLoop);
    // KJ watches edge-triggered: events left over from the last uv_run give
    // no new edge, so look before sleeping.
    struct pollfd pfd = {uv_backend_fd(&uvLoop), POLLIN, 0};
    int ready;
    KJ_SYSCALL(ready = ::poll(&pfd, 1, 0));
    if (ready > 0) timeoutMs = 0;
    auto& obs = *KJ_ASSERT_NONNULL(observer);
    next = next.exclusiveJoin(obs.whenBecomesReadable());
    if (timeoutMs >= 0) {
      next = next.exclusiveJoin(timer.afterDelay(timeoutMs * kj::MILLISECONDS));
    }
  }
  // else: nothing alive in libuv; only wake() restarts it.
  return next.then([this]() { return pump(); });
}

void UvBridge::queue(_::PoolJob* job) {
  job->request.data = job;
  int rc = uv_queue_work(
      &uvLoop, &job->request,
      [](uv_work_t* request) { static_cast<_::PoolJob*>(request->data)->run(); },
      [](uv_work_t* request, int status) {
        auto* job = static_cast<_::PoolJob*>(request->data);
        if (job->guard != nullptr) job->guard->job = nullptr;
        job->complete(status);
        delete job;
      });
  if (rc < 0) {
    if (job->guard != nullptr) job->guard->job = nullptr;
    job->complete(rc);
    delete job;
    return;
  }
  wake();
}

}  // namespace squall
