// What executor processes print (docs/ray.md, "Output"): their standard
// output and error are pipes the governor reads (ProcessOutput), and what
// comes belongs to the task the process works for at the time: the call
// it runs (the pool says which, executor-pool.h), or its actor (actor-
// host.h). TaskOutputs keeps each task's tails for its result and sends
// the lines upstream (GovernorUpstream.output) for the session's watchers.
// What a process prints while it works for nobody goes to the governor's
// standard error, as it did before. Loop thread only.
//
// Which call a line belongs to is exact, pipelined calls included: a pool
// process is told a mark (SQUALL_OUTPUT_MARK, a random string) that
// tasklib writes to its standard output and error after each call it
// received (run, or dropped), so the bytes before the n-th mark on each
// stream are the n-th call's, whenever the governor reads them. The
// executor writes a call's output and mark before its answer, and the
// pool drains the pipes when the answer comes, so a result's tails are
// complete. An actor's process is its actor's for life (no marks).
// Output is bounded: TAIL_BYTES of each task kept, MAX_PENDING_BYTES
// waiting to go upstream (more is dropped, and counted).
#pragma once

#include "task-outcome.h"

#include <kj/async-io.h>
#include <kj/function.h>
#include <kj/io.h>
#include <kj/timer.h>
#include <spdlog/logger.h>
#include <squall/proto/ids.h>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

namespace squall {

// Whom a process works for: a task, named as its output is prefixed.
struct OutputOwner {
  Id task;
  kj::String name;
};

class TaskOutputs final : private kj::TaskSet::ErrorHandler {
 public:
  // What a task's result keeps of each stream.
  static constexpr size_t TAIL_BYTES = 4096;
  // Chunks waiting to go upstream, at most (beyond: dropped, counted).
  static constexpr size_t MAX_PENDING_BYTES = 1 << 20;
  // Tasks whose tails are kept, at most (a call taken back and run
  // elsewhere never reports here).
  static constexpr size_t MAX_TAILS = 4096;
  // Output waits this long to go with what follows it.
  static constexpr kj::Duration SEND_AFTER = 20 * kj::MILLISECONDS;
  static constexpr size_t MAX_IN_FLIGHT = 8;

  struct Chunk {
    Id task;
    bool isStderr = false;
    kj::String label;
    kj::String text;
  };
  // Sends chunks upstream; resolves once the server took them. Null when
  // there is no connection (they wait, up to MAX_PENDING_BYTES).
  using Send = kj::Function<kj::Maybe<kj::Promise<void>>(kj::ArrayPtr<const Chunk>, uint64_t dropped)>;

  TaskOutputs(kj::Timer& timer, spdlog::logger& logger);
  KJ_DISALLOW_COPY(TaskOutputs);

  void sendWith(Send send);

  // Text the process `pid` printed for `owner`.
  void add(const OutputOwner& owner, int pid, bool isStderr, kj::ArrayPtr<const char> text);

  // Fills the outcome's tails (those it has none of) with what its task
  // printed, forgets them, and sends what waits (before the result goes).
  void finish(TaskOutcome& outcome);

  // Sends what waits now: when nothing is in flight, or (`ahead`: before
  // a result, which must not overtake its task's output) when fewer than
  // MAX_IN_FLIGHT sends are.
  void send(bool ahead = false);

  uint64_t droppedChunks() const { return dropped; }

 private:
  struct Tails {
    std::string out;
    std::string err;
  };
  kj::Timer& timer;
  spdlog::logger& logger;
  kj::Maybe<Send> sender;
  std::vector<Chunk> pending;
  size_t pendingBytes = 0;
  uint64_t dropped = 0;
  uint64_t droppedUnsent = 0;
  size_t inFlight = 0;
  bool timerSet = false;
  std::unordered_map<Id, Tails, IdHash> tails;
  // The timer and the send in flight; declared last, so destroyed first.
  kj::TaskSet tasks;
  void taskFailed(kj::Exception&& e) override;
};

// One process's standard output and error, read as they come.
class ProcessOutput {
 public:
  // `mark`: what the executor writes after each call (empty: none; the
  // owner is whom workFor() names).
  ProcessOutput(kj::LowLevelAsyncIoProvider& io, TaskOutputs& outputs, kj::StringPtr mark = nullptr);
  ~ProcessOutput() noexcept(false);
  KJ_DISALLOW_COPY(ProcessOutput);

  // The ends the child gets as its descriptors 1 and 2.
  int childStdout() const { return out.childEnd.get(); }
  int childStderr() const { return err.childEnd.get(); }
  // The child started (as `pid`): its ends close here, reading starts.
  void started(int pid);

  // From now on what it prints is `owner`'s (nullptr: nobody's). What it
  // printed before is its owner's until now (drain()). Without a mark.
  void workFor(kj::Maybe<OutputOwner> owner);
  // With a mark: a call was sent to it; what it prints up to the next
  // mark after the calls before is `owner`'s.
  void expect(OutputOwner owner);
  // Reads what it printed so far, for the owner it has now.
  void drain();

 private:
  struct Stream {
    bool isStderr = false;
    kj::AutoCloseFd ours;
    kj::AutoCloseFd childEnd;
    kj::Own<kj::AsyncInputStream> in;
    kj::Promise<void> reading = nullptr;
    // Read and not handed on: the start of a line not ended yet, and
    // (with a mark) what may be the start of a mark.
    std::string held;
    // With a mark: the marks seen, so the index of its owner in `owners`.
    uint64_t marks = 0;
    char buffer[16 << 10];
  };
  kj::LowLevelAsyncIoProvider& io;
  TaskOutputs& outputs;
  std::string mark;
  int pid = 0;
  kj::Maybe<OutputOwner> owner;
  // With a mark: the calls sent, from the one whose output either stream
  // may still be reading (`dropped` gone before it).
  std::deque<OutputOwner> owners;
  uint64_t dropped = 0;
  Stream out;
  Stream err;

  void open(Stream& stream, bool isStderr);
  kj::Promise<void> readOn(Stream& stream);
  // Bytes read: whole lines go to the owner (through each mark, the
  // owner before it), the rest waits for its end.
  void took(Stream& stream, kj::ArrayPtr<const char> bytes);
  // Hands on `text` of `stream`'s held bytes: whole lines, or all of them
  // (`all`: a mark or a new owner ends the line).
  void handOn(Stream& stream, size_t length, bool all);
  // Hands the partial line on (the owner changes, or it grew too long).
  void flushPartial(Stream& stream);
  // How many bytes at the end of `held` could begin a mark (0 without one).
  size_t markStartAtEnd(const std::string& held) const;
  kj::Maybe<const OutputOwner&> ownerOf(const Stream& stream) const;
  void give(Stream& stream, kj::ArrayPtr<const char> text);
};

}  // namespace squall
