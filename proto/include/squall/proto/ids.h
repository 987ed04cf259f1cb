// Object and task ids as hashable values. Header-only; no threading rules.
#pragma once

#include <cstdint>
#include <functional>
#include <kj/string.h>
#include <squall/wire/common.capnp.h>

namespace squall {

// (session, n): `n` is chosen by the client and unique within its session
// across tasks and objects.
struct Id {
  uint64_t session = 0;
  uint64_t n = 0;

  bool operator==(const Id&) const = default;
  auto operator<=>(const Id&) const = default;

  static Id from(wire::Id::Reader r) { return Id{r.getSession(), r.getN()}; }
  void to(wire::Id::Builder b) const {
    b.setSession(session);
    b.setN(n);
  }
};

inline kj::String KJ_STRINGIFY(const Id& id) { return kj::str(id.session, "/", id.n); }

struct IdHash {
  size_t operator()(const Id& id) const {
    // splitmix-style mix of both halves; ids are dense small numbers.
    uint64_t x = id.session * 0x9E3779B97F4A7C15ull ^ id.n;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return static_cast<size_t>(x);
  }
};

}  // namespace squall
