// What a session's tasks print, for its client (Session::watchOutput,
// docs/ray.md "Output"): a chain of ClientService.watchOutput calls that
// wait at the server for more, running while the client waits for
// anything, and a last call that waits for nothing (drainOutput).
#include "client-impl.h"

namespace squall {

namespace client {

kj::Promise<void> SessionImpl::watchOutputFrom() {
  auto request = client.svc().watchOutputRequest();
  name(request);
  request.setSince(outputSince);
  request.setWait(true);
  return request.send().then([this](capnp::Response<wire::ClientService::WatchOutputResults> answer) {
    deliverOutput(answer);
    return watchOutputFrom();
  });
}

void SessionImpl::deliverOutput(wire::ClientService::WatchOutputResults::Reader answer) {
  auto chunks = answer.getChunks();
  uint64_t next = answer.getNext();
  // The answer's chunks are numbered up to `next`; those before
  // outputSince came in an earlier answer (a drain beside the watch).
  uint64_t first = next >= chunks.size() ? next - chunks.size() : 0;
  size_t skip = outputSince > first ? static_cast<size_t>(std::min<uint64_t>(outputSince - first, chunks.size())) : 0;
  if (next > outputSince) outputSince = next;
  if (skip == chunks.size() || !outputSink) return;
  std::vector<TaskOutput> batch;
  batch.reserve(chunks.size() - skip);
  for (size_t i = skip; i < chunks.size(); i++) {
    auto c = chunks[i];
    batch.push_back(TaskOutput{c.getTask(), c.getStderr(), c.getLabel(), c.getGovernor(), c.getText()});
  }
  try {
    outputSink(batch);
  } catch (...) {
    // The sink's trouble: this batch is lost, the watch goes on.
  }
}

void SessionImpl::startOutputWatch() {
  watchingOutput = true;
  outputWatchLost = false;
  outputWatch = watchOutputFrom().eagerlyEvaluate([this](kj::Exception&& e) {
    // The session went (it ends here), or the connection (the next call
    // starts it again).
    watchingOutput = false;
    outputWatchLost = e.getType() == kj::Exception::Type::DISCONNECTED;
  });
}

void SessionImpl::watchOutputAgain() {
  if (closed || watchingOutput || !outputSink || client.service == nullptr) return;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { startOutputWatch(); })) {
    // Not connected yet: the next call tries again.
    (void)e;
  }
}

}  // namespace client

void Session::watchOutput(std::function<void(const std::vector<TaskOutput>&)> sink) {
  impl->checkOpen();
  impl->outputSink = std::move(sink);
  if (impl->watchingOutput) return;
  impl->client.guard([&]() { impl->startOutputWatch(); });
}

void Session::drainOutput() {
  impl->checkOpen();
  if (!impl->outputSink) return;
  impl->client.retrying([&]() {
    auto request = impl->client.svc().watchOutputRequest();
    impl->name(request);
    request.setSince(impl->outputSince);
    request.setWait(false);
    impl->deliverOutput(request.send().wait(impl->client.waitScope()));
  });
  if (!impl->watchingOutput) impl->client.guard([&]() { impl->startOutputWatch(); });
}

}  // namespace squall
