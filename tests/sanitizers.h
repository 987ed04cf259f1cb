// Whether this test program is built with a sanitizer
// (SQUALL_SANITIZE=address,undefined or thread; see docs/testing.md), for
// the few checks that mean nothing under one and for the sizes that CI's
// time cannot pay for three times over (docs/testing.md, "Time").
#pragma once

// gcc defines __SANITIZE_*__; clang answers __has_feature.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) && !defined(__SANITIZE_ADDRESS__)
#define __SANITIZE_ADDRESS__ 1
#endif
#if __has_feature(thread_sanitizer) && !defined(__SANITIZE_THREAD__)
#define __SANITIZE_THREAD__ 1
#endif
#endif

namespace squall {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool UNDER_ASAN = true;
#else
constexpr bool UNDER_ASAN = false;
#endif

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool SANITIZED = true;
#else
constexpr bool SANITIZED = false;
#endif

// A size for a test that runs whole in the plain tree and smaller under a
// sanitizer: the sanitizers look for memory and thread errors, which the
// smaller run meets on the same paths.
template <typename T>
constexpr T plainOrSanitized(T plain, T sanitized) {
  return SANITIZED ? sanitized : plain;
}

}  // namespace squall
