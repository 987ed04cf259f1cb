// Every bound on what a client can make the server hold or a governor run,
// in one place: the defaults below, each settable with
// `squall-server --limit NAME=VALUE` (docs/guide.md, "Limits"). Each is
// checked before what it bounds is allocated, and a request past one is
// refused with an error naming the limit and its value; the session goes on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace squall {

struct Limits {
  // All messages of one submit, constants included (held until commit).
  uint64_t submitBytes = uint64_t(1) << 30;
  uint64_t submitTasks = 1'000'000;
  uint64_t submitObjects = 2'000'000;
  // Submits one client connection has open (sent, not yet committed).
  uint64_t clientSubmits = 16;
  // Bytes of every open submit of every client together.
  uint64_t pendingBytes = uint64_t(4) << 30;
  uint64_t sessionTasks = 10'000'000;
  uint64_t sessionObjects = 20'000'000;
  // One constant: it travels to a governor inside one message, whose
  // limit is 64 MiB (so at most MAX_CONSTANT_BYTES).
  uint64_t constantBytes = uint64_t(48) << 20;
  // One task as submitted: its program, arguments, environment, paths,
  // config and attributes (it travels inside every assignment).
  uint64_t taskBytes = uint64_t(4) << 20;
  uint64_t attributeBytes = uint64_t(1) << 20;
  // Nesting of a task's attributes (JSON arrays and objects).
  uint64_t attributeDepth = 64;
  // Each path in a task: sandbox paths, governor paths, slices.
  uint64_t pathBytes = 4096;
  // Each argument and each environment entry (Linux's own limit on one
  // string passed to a program is 128 KiB).
  uint64_t argBytes = 128 << 10;
  // Distinct ids in one wait or waitSome.
  uint64_t waitIds = 1'000'000;
  // A task's time limit (a longer one is a mistake, and would overflow the
  // governor's timer arithmetic).
  uint64_t timeLimitMs = uint64_t(366) * 24 * 3600 * 1000;

  static constexpr uint64_t MAX_CONSTANT_BYTES = uint64_t(56) << 20;

  // Every limit off: for what the server itself wrote (the session log's
  // submits, checked when they arrived).
  static Limits unbounded();

  // Sets one from "NAME=VALUE" (a number, with an optional K, M, G or T
  // suffix for powers of 1024 on byte limits). Returns the problem, if any.
  std::optional<std::string> set(const std::string& assignment);
  // "name=value" of one by its member (for error messages).
  std::string named(const uint64_t& member) const;
  // "(limit name=value)": how a refusal names the limit it hit.
  std::string note(const uint64_t& member) const { return "(limit " + named(member) + ")"; }

  struct Entry {
    const char* name;
    uint64_t Limits::*member;
    bool bytes;
    const char* what;
  };
  static const std::vector<Entry>& entries();
};

}  // namespace squall
