#include "stream-ends.h"

#include "safe-path.h"
#include "stream-pipe.h"

#include <csignal>
#include <squall/proto/errors.h>

namespace squall {

StreamEnds::~StreamEnds() noexcept(false) {
  // Our watches go before the inputs they watch.
  watches.clear();
}

void StreamEnds::inputFailed(kj::Exception&& e) {
  if (inputFailure == nullptr) inputFailure = kj::str(userMessage(e));
  // Never let the task finish on a truncated input.
  KJ_IF_MAYBE(k, kill) { (*k)(); }
}

void StreamEnds::watchInputs(kj::Function<void()> killTask) {
  kill = kj::mv(killTask);
  for (auto& input : inputs) {
    watches.add(input->verdict()
                    .catch_([this](kj::Exception&& e) { inputFailed(kj::mv(e)); })
                    .eagerlyEvaluate(nullptr));
  }
}

kj::Promise<void> StreamEnds::settleInputs() {
  kill = nullptr;
  watches.clear();
  kj::Vector<kj::Promise<void>> waits;
  for (auto& input : inputs) {
    if (input->reachedEnd() && inputFailure == nullptr) {
      waits.add(input->verdict().catch_([this](kj::Exception&& e) {
        if (inputFailure == nullptr) inputFailure = kj::str(userMessage(e));
      }));
    } else {
      input->readerExited();
    }
  }
  return kj::joinPromises(waits.releaseAsArray());
}

bool StreamEnds::closedByReaders() const {
  for (auto& output : outputs) {
    if (output->closedByReaders()) return true;
  }
  return false;
}

void StreamEnds::producerExited(kj::Maybe<kj::StringPtr> failure) {
  for (auto& output : outputs) {
    output->producerExited(failure.map([](kj::StringPtr r) { return kj::str(r); }));
  }
}

kj::Promise<kj::Array<StreamOutput::Result>> StreamEnds::finish(kj::Maybe<kj::StringPtr> failure,
                                                                kj::Promise<void> whenCancelled) {
  producerExited(failure);
  // Cancelled while readers are still being served: they fail now.
  auto onCancel = whenCancelled
                      .then([this]() {
                        for (auto& output : outputs) output->fail("was cancelled");
                      })
                      .eagerlyEvaluate(nullptr);
  kj::Vector<kj::Promise<StreamOutput::Result>> all;
  for (auto& output : outputs) all.add(output->settled());
  return kj::joinPromises(all.releaseAsArray()).attach(kj::mv(onCancel));
}

kj::OneOf<LiveInputSpec, kj::String> liveInputSpec(bool hasHub, wire::TaskInput::Reader input,
                                                   wire::InputLocation::Reader location) {
  Id id = Id::from(input.getObject());
  if (!hasHub) return kj::str("input ", id, " is a live stream; this governor reads no live streams");
  if (location.getKind() != wire::ObjectKind::STREAM) {
    return kj::str("input ", id, " is to be read live, but it is not a stream");
  }
  if (input.getWritable()) return kj::str("input ", id, " is a stream read live, so it cannot be writable");
  auto sources = location.getSources();
  return LiveInputSpec{id, nullptr, input.getEarlyCloseIsError(),
                       sources.size() > 0 ? kj::Maybe<kj::String>(kj::str(sources[0])) : nullptr};
}

kj::Own<StreamEnds> openStreamEnds(StreamHub& hub, kj::StringPtr sandbox, Id taskId,
                                   kj::ArrayPtr<const LiveInputSpec> inputs,
                                   kj::ArrayPtr<const StreamOutputSpec> outputs) {
  auto ends = kj::heap<StreamEnds>();
  kj::Maybe<kj::AutoCloseFd> root;
  auto sandboxDir = [&]() -> int {
    if (root == nullptr) root = openDirectory(sandbox);
    return KJ_ASSERT_NONNULL(root).get();
  };
  for (auto& input : inputs) {
    kj::Own<ConsumerPipe> pipe;
    KJ_IF_MAYBE(rel, input.fifo) {
      pipe = openConsumerFifo(hub.events(), sandboxDir(), *rel);
    } else {
      auto fds = makePipe();
      ends->taskInputEnds.add(kj::mv(fds.readEnd));
      pipe = kj::heap<ConsumerPipe>(hub.events(), kj::mv(fds.writeEnd));
    }
    ends->inputs.add(hub.attach(input.stream, taskId, input.earlyCloseIsError, kj::mv(pipe),
                                input.source.map([](const kj::String& s) -> kj::StringPtr { return s; })));
  }
  for (auto& output : outputs) {
    KJ_IF_MAYBE(rel, output.fifo) {
      auto fifo = openProducerFifo(sandboxDir(), *rel);
      ends->outputs.add(hub.produce(output.stream, kj::mv(fifo.readEnd), kj::mv(fifo.keepOpen)));
    } else {
      auto fds = makePipe();
      ends->taskOutputEnds.add(kj::mv(fds.writeEnd));
      ends->outputs.add(hub.produce(output.stream, kj::mv(fds.readEnd), kj::AutoCloseFd()));
    }
  }
  return ends;
}

kj::Maybe<kj::StringPtr> firstStreamError(kj::ArrayPtr<const StreamOutput::Result> results) {
  for (auto& r : results) {
    KJ_IF_MAYBE(e, r.error) { return kj::StringPtr(*e); }
  }
  return nullptr;
}

}  // namespace squall
