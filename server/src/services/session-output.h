// What the tasks of each session printed (docs/ray.md, "Output"): the
// chunks governors send (GovernorUpstream.output), kept per session as a
// bounded tail numbered from 1, for the session's watchers
// (ClientService.watchOutput), who ask from the number they got last and
// may wait for more. Nothing of it is logged: output is for watching, the
// tails that last are in each task's result. Loop thread only.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <kj/async.h>
#include <kj/timer.h>
#include <string>
#include <unordered_map>
#include <vector>
#include <squall/wire/service.capnp.h>

namespace squall {

class SessionOutput {
 public:
  // A session's tail: its oldest chunks go past this many bytes.
  static constexpr size_t MAX_SESSION_BYTES = 1 << 20;
  // One answer carries at most about this many bytes of text.
  static constexpr size_t MAX_ANSWER_BYTES = 256 << 10;
  // Watchers of one session waiting at once; more are answered at once.
  static constexpr size_t MAX_WAITERS = 16;
  // Sessions kept before those no longer open are forgotten.
  static constexpr size_t SWEEP_AFTER_SESSIONS = 64;

  // `isOpen(session)`: whether a session may still get output (a chunk for
  // another is dropped; its tail is forgotten once many are kept).
  // `firstNumber`: what each session's first chunk is numbered (0: the
  // wall clock's microseconds now, so that a watcher's number from a
  // server before a restart is older than every chunk of this one).
  explicit SessionOutput(std::function<bool(uint64_t)> isOpen, uint64_t firstNumber = 0);
  // Not explicit: a member left out of an aggregate's braces is made so.
  SessionOutput() : SessionOutput(nullptr) {}
  void setIsOpen(std::function<bool(uint64_t)> f) { isOpen = std::move(f); }

  // A governor's chunk for task `task` of `session`.
  void add(uint64_t session, uint64_t task, bool isStderr, kj::StringPtr label, kj::StringPtr governor,
           kj::StringPtr text);

  // Resolves once `session` has a chunk numbered `since` or later (0: any
  // it holds), or after `most` (at once when it has, or when too many
  // wait already).
  kj::Promise<void> whenPast(uint64_t session, uint64_t since, kj::Timer& timer, kj::Duration most);

  // The chunks from `since` on, as many as one answer carries; `next` and
  // `dropped` as watchOutput answers them.
  void fill(uint64_t session, uint64_t since, wire::ClientService::WatchOutputResults::Builder results) const;

  // Forgets a session's tail and wakes its watchers (it closed).
  void forget(uint64_t session);

  size_t sessionCount() const { return sessions.size(); }

 private:
  struct Chunk {
    uint64_t number;
    uint64_t task;
    bool isStderr;
    std::string label;
    std::string governor;
    std::string text;
  };
  struct Tail {
    std::deque<Chunk> chunks;
    size_t bytes = 0;
    // The number the next chunk gets.
    uint64_t next = 0;
    std::vector<kj::Own<kj::PromiseFulfiller<void>>> waiters;
  };
  std::function<bool(uint64_t)> isOpen;
  uint64_t firstNumber;
  std::unordered_map<uint64_t, Tail> sessions;
  Tail& tailOf(uint64_t session);

  void sweep();
};

}  // namespace squall
