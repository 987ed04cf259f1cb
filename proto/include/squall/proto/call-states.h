// Which of the calls a governor sent one executor process may still be
// taken back (executor.capnp, Executor.callStates): a table of 32-bit
// states in memory both processes map. The governor marks a call QUEUED
// before sending it; the executor moves it to STARTED just before running
// it, the governor to DROPPED when it gives it back; whichever moves it
// first decides, so a call given back never runs there too, whatever the
// executor is busy with when the governor decides.
#pragma once

#include <atomic>
#include <cstdint>
#include <kj/io.h>
#include <kj/memory.h>
#include <vector>

namespace squall {

class CallStates {
 public:
  enum State : uint32_t { FREE = 0, QUEUED = 1, STARTED = 2, DROPPED = 3 };
  // How many calls one process can have sent and unanswered with a state.
  static constexpr uint32_t SLOTS = 1024;

  // The governor's: a new table, all FREE (a memfd, sealed at its size).
  static kj::Own<CallStates> create();
  // The executor's: maps the table `fd` (the caller keeps `fd`); throws
  // if it is not one.
  static kj::Own<CallStates> map(int fd);
  ~CallStates();
  KJ_DISALLOW_COPY(CallStates);

  // The governor's copy of the table's descriptor, to send.
  kj::AutoCloseFd duplicateFd() const;

  // Governor: a free slot, now QUEUED; its number (1..SLOTS), or 0 when
  // every slot is taken (the call then cannot be taken back).
  uint32_t take();
  // Governor: the call of slot `n` was answered; the slot is free again
  // (nothing for 0).
  void release(uint32_t n);
  // Governor: QUEUED -> DROPPED. False when the executor started it first
  // (or for 0: a call without a state cannot be taken back).
  bool drop(uint32_t n);
  // Executor: QUEUED -> STARTED. False when the governor dropped it
  // first. Throws for a number outside the table.
  bool start(uint32_t n);

 private:
  CallStates(kj::AutoCloseFd fd, std::atomic<uint32_t>* states);
  std::atomic<uint32_t>& at(uint32_t n);

  kj::AutoCloseFd fd;
  std::atomic<uint32_t>* states;
  // The governor's free slots (unused in the executor).
  std::vector<uint32_t> free;
};

}  // namespace squall
