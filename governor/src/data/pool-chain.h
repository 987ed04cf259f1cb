// Pool jobs that run one after another in the order they were queued (the
// writes of an upload or a fetch, and the hashes between them): each starts
// once the one before ended. The first failure is kept; later jobs do not
// run and done() fails with it. Loop thread; the jobs on the pool.
#pragma once

#include "uv-bridge.h"

#include <kj/async.h>
#include <kj/function.h>

namespace squall {

class PoolChain {
 public:
  explicit PoolChain(UvBridge& bridge) : bridge(bridge) {}
  KJ_DISALLOW_COPY(PoolChain);

  void add(kj::Function<void()> work) {
    tail = tail.addBranch()
               .then([this, work = kj::mv(work)]() mutable { return bridge.runOnPool<void>(kj::mv(work)); })
               .catch_([this](kj::Exception&& e) -> kj::Promise<void> {
                 if (failure == nullptr) failure = kj::cp(e);
                 return kj::mv(e);
               })
               .fork();
  }

  // Resolves once every job queued so far ended.
  kj::Promise<void> done() { return tail.addBranch(); }

  // Why a job failed, once one did.
  const kj::Maybe<kj::Exception>& failed() const { return failure; }

 private:
  UvBridge& bridge;
  kj::ForkedPromise<void> tail = kj::Promise<void>(kj::READY_NOW).fork();
  kj::Maybe<kj::Exception> failure;
};

}  // namespace squall
