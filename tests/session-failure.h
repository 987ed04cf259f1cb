// What a session's failure says, for the end-to-end tests that check a
// task fails with a clear message. Test thread only.
#pragma once

#include <squall/client/client.h>

#include <string>

namespace squall {

// Submits what `session` holds and waits for all of it; the message of the
// error that raises, or "" when everything finished.
inline std::string failureOf(Session& session) {
  try {
    session.submit();
    session.waitAll();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace squall
