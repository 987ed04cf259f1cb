// The live inputs and stream outputs of one run of a task that reads or
// writes streams while it runs: a program (execute-task.cpp: stdin, stdout
// or named pipes in its sandbox) or a function of a warm executor
// (call-task.cpp: pipe ends passed over the executor's socket). Both
// attach to the hub before the task starts, so bytes it writes at once find
// their readers' pipes and readers' pipes exist before it opens them.
//
// The life of a run's streams:
//   openStreamEnds()  pipes made and attached to the hub;
//   watchInputs()     while the task runs, a failing input kills it at once
//                     (it must never finish on a truncated input);
//   settleInputs()    after it ended: an input that reached its end waits
//                     for its producer's verdict (a reader succeeds only if
//                     its producer did); one that did not was closed early;
//   finish()          the outputs get the task's verdict, and the promise
//                     resolves once every reader has had the flow's end.
// Loop thread only.
#pragma once

#include "child-process.h"
#include "stream-hub.h"

#include <kj/async.h>
#include <kj/one-of.h>
#include <kj/vector.h>
#include <squall/wire/service.capnp.h>
#include <squall/proto/ids.h>

namespace squall {

// A live input as validated, before the task starts.
struct LiveInputSpec {
  Id stream;
  // Its named pipe, relative to the sandbox; nullptr: a plain pipe whose
  // read end the task gets (a program's stdin, a function's input).
  kj::Maybe<kj::String> fifo;
  bool earlyCloseIsError;
  // The producer's governor; nullptr: this one.
  kj::Maybe<kj::String> source;
};

// A stream output as validated.
struct StreamOutputSpec {
  uint index;  // into task.outputs
  Id stream;
  // The named pipe the program writes, relative to the sandbox; nullptr: a
  // plain pipe whose write end the task gets (a program's stdout, a
  // function's output).
  kj::Maybe<kj::String> fifo;
};

struct StreamEnds {
  kj::Vector<kj::Own<LiveInput>> inputs;
  // Parallel to the StreamOutputSpecs.
  kj::Vector<kj::Own<StreamOutput>> outputs;
  // The task's ends of the plain pipes, in the order of their specs: read
  // ends of live inputs, write ends of stream outputs. Whoever starts the
  // task hands them over and closes them here: ours would keep an output
  // from ending and an input from breaking.
  kj::Vector<kj::AutoCloseFd> taskInputEnds;
  kj::Vector<kj::AutoCloseFd> taskOutputEnds;
  // What the task fails with because a live input failed.
  kj::Maybe<kj::String> inputFailure;

  ~StreamEnds() noexcept(false);

  // While the task runs, a failing input calls `kill` (which ends the task's
  // process group: a program's, or an executor's while it runs the call).
  void watchInputs(kj::Function<void()> kill);
  // After the task ended (see above); call once.
  kj::Promise<void> settleInputs();
  // True once every reader of an output had gone and the governor closed
  // the task's pipe, so an EPIPE or SIGPIPE is the expected end.
  bool closedByReaders() const;
  // The outputs' verdict: `failure` is nullptr when the task succeeded,
  // else what readers are told ("exited with status 1"). Resolves once the
  // flow has ended for every reader; a cancel meanwhile fails the outputs.
  kj::Promise<kj::Array<StreamOutput::Result>> finish(kj::Maybe<kj::StringPtr> failure,
                                                      kj::Promise<void> whenCancelled);
  // Only the verdict, for a task that never started.
  void producerExited(kj::Maybe<kj::StringPtr> failure);

 private:
  kj::Vector<kj::Promise<void>> watches;
  kj::Maybe<kj::Function<void()>> kill;
  void inputFailed(kj::Exception&& e);
};

// Input `input` read live as the assignment's `location` says (no named
// pipe yet), or why it cannot be: this governor has no hub (`hasHub`), it is
// no stream, or it was asked to be writable.
kj::OneOf<LiveInputSpec, kj::String> liveInputSpec(bool hasHub, wire::TaskInput::Reader input,
                                                   wire::InputLocation::Reader location);

// `sandbox` holds the named pipes (unused when none is named).
kj::Own<StreamEnds> openStreamEnds(StreamHub& hub, kj::StringPtr sandbox, Id taskId,
                                   kj::ArrayPtr<const LiveInputSpec> inputs,
                                   kj::ArrayPtr<const StreamOutputSpec> outputs);

// The first output's error among `results` (a reader that closed early
// with earlyCloseIsError, the store refusing a persisted stream).
kj::Maybe<kj::StringPtr> firstStreamError(kj::ArrayPtr<const StreamOutput::Result> results);

}  // namespace squall
