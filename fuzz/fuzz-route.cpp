// libFuzzer target: the status page's request router (server/src/http/route:
// parseRoute), which reads the URL of every request to the status port:
// the path, and for /api/sessions/N/tasks its query (state, name, offset,
// limit). The input is the request target as kj-http hands it over. A
// route is either refused with a status and a message, or its numbers and
// page size are within bounds.
#include "fuzz-util.h"

#include <route.h>
#include <kj/debug.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto url = kj::heapString(reinterpret_cast<const char*>(data), size);
  auto result = squall::parseRoute(url);
  if (auto* error = std::get_if<squall::RouteError>(&result)) {
    KJ_ASSERT(error->status == 400 || error->status == 404, error->status);
    KJ_ASSERT(!error->message.empty());
  } else {
    auto& route = std::get<squall::Route>(result);
    KJ_ASSERT(route.query.limit <= squall::MAX_TASK_PAGE, route.query.limit);
  }
  return 0;
}
