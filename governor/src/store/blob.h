// Immutable bytes shared between the loop and pool jobs (a small object in
// the store's memory; a task's small output sent with its result).
#pragma once

#include <kj/array.h>
#include <kj/refcount.h>

namespace squall {

struct Blob final : public kj::AtomicRefcounted {
  explicit Blob(kj::Array<const kj::byte> bytes) : bytes(kj::mv(bytes)) {}
  kj::Array<const kj::byte> bytes;
};

}  // namespace squall
