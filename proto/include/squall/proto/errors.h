// Errors with a message meant for users. KJ_REQUIRE prefixes its message
// with the failed expression; these carry exactly the words given, which
// travel to the client unchanged. No threading rules.
#pragma once

#include <kj/exception.h>
#include <kj/string.h>

// Throws FAILED with the concatenated message unless `cond` holds.
#define SQUALL_REQUIRE(cond, ...)                                                        \
  do {                                                                                   \
    if (KJ_UNLIKELY(!(cond))) {                                                          \
      ::kj::throwFatalException(::kj::Exception(::kj::Exception::Type::FAILED, __FILE__, \
                                                __LINE__, ::kj::str(__VA_ARGS__)));      \
    }                                                                                    \
  } while (false)

#define SQUALL_FAIL(...)                                                               \
  ::kj::throwFatalException(::kj::Exception(::kj::Exception::Type::FAILED, __FILE__, \
                                            __LINE__, ::kj::str(__VA_ARGS__)))

namespace squall {

// The exception's description without the "remote exception: " prefix
// capnp adds on the receiving side.
inline kj::StringPtr userMessage(const kj::Exception& e) {
  kj::StringPtr text = e.getDescription();
  constexpr kj::StringPtr PREFIX = "remote exception: "_kj;
  return text.startsWith(PREFIX) ? text.slice(PREFIX.size()) : text;
}

}  // namespace squall
