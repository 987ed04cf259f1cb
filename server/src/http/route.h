// What a request to the status port asks for: the URL parsed and its
// parameters checked, before any state is read. Pure; any thread.
#pragma once

#include "status-view.h"

#include <kj/string.h>
#include <string>
#include <variant>

namespace squall {

struct Route {
  enum class Kind {
    PAGE,       // the app's HTML: /, /sessions/N, /sessions/N/tasks/M
    ASSET,      // /assets/NAME
    OVERVIEW,   // /api/overview
    GOVERNORS,  // /api/governors
    SESSIONS,   // /api/sessions
    SESSION,    // /api/sessions/N
    TASKS,      // /api/sessions/N/tasks?state=&name=&offset=&limit=
    TASK,       // /api/sessions/N/tasks/M
    GRAPH,      // /api/sessions/N/graph
    TIMELINE,   // /api/sessions/N/timeline
    EVENTS,     // /api/events[?session=N]: server-sent events
    METRICS,    // /metrics
  };
  Kind kind;
  uint64_t session = 0;
  uint64_t task = 0;
  std::string asset;
  TaskQuery query;
};

// A request the router refuses: 400 (bad parameter) or 404 (no such path).
struct RouteError {
  unsigned status;
  std::string message;
};

constexpr size_t MAX_TASK_PAGE = 500;

// `url` is the request target as HTTP gives it (path and query).
std::variant<Route, RouteError> parseRoute(kj::StringPtr url);

}  // namespace squall
