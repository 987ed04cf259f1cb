// Whether this test program is built with AddressSanitizer
// (SQUALL_SANITIZE=address,undefined; see docs/testing.md), for the few
// checks that mean nothing under it.
#pragma once

namespace squall {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool UNDER_ASAN = true;
#else
constexpr bool UNDER_ASAN = false;
#endif

}  // namespace squall
