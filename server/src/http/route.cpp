#include "route.h"

#include <kj/compat/url.h>
#include <kj/debug.h>

namespace squall {

namespace {

// Decimal, 1 to 19 digits, no sign: ids, offsets, limits.
bool parseNumber(kj::StringPtr text, uint64_t& out) {
  if (text.size() == 0 || text.size() > 19) return false;
  uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + static_cast<uint64_t>(c - '0');
  }
  out = value;
  return true;
}

RouteError badRequest(std::string message) { return {400, std::move(message)}; }
RouteError notFound(std::string message) { return {404, std::move(message)}; }

std::variant<Route, RouteError> taskQuery(Route route, const kj::Url& url) {
  for (auto& param : url.query) {
    kj::StringPtr value = param.value == nullptr ? kj::StringPtr("") : param.value.asPtr();
    if (param.name == "state") {
      size_t start = 0;
      std::string all(value.cStr());
      while (start <= all.size() && !all.empty()) {
        auto end = all.find(',', start);
        if (end == std::string::npos) end = all.size();
        auto name = all.substr(start, end - start);
        auto* state = parseTaskState(name);
        if (state == nullptr) {
          return badRequest("unknown task state '" + name +
                            "' (waiting, ready, running, finished, failed, cancelled, skipped)");
        }
        route.query.states.push_back(*state);
        start = end + 1;
      }
    } else if (param.name == "name") {
      if (value.size() > 200) return badRequest("name filter longer than 200 characters");
      route.query.name = value.cStr();
    } else if (param.name == "offset") {
      uint64_t offset;
      if (!parseNumber(value, offset) || offset > 1000000000) {
        return badRequest("offset must be a number from 0 to 1000000000");
      }
      route.query.offset = offset;
    } else if (param.name == "limit") {
      uint64_t limit;
      if (!parseNumber(value, limit) || limit < 1 || limit > MAX_TASK_PAGE) {
        return badRequest("limit must be a number from 1 to " + std::to_string(MAX_TASK_PAGE));
      }
      route.query.limit = limit;
    } else {
      return badRequest(std::string("unknown parameter '") + param.name.cStr() +
                        "' (state, name, offset, limit)");
    }
  }
  return route;
}

}  // namespace

std::variant<Route, RouteError> parseRoute(kj::StringPtr target) {
  if (target.size() == 0 || target[0] != '/' || target.size() > 4096) {
    return badRequest("bad request target");
  }
  kj::Url url;
  KJ_IF_MAYBE(parsed, kj::Url::tryParse(target, kj::Url::HTTP_REQUEST)) {
    url = kj::mv(*parsed);
  } else {
    return badRequest("bad request target");
  }
  auto& path = url.path;
  auto is = [&](std::initializer_list<const char*> parts) {
    if (path.size() != parts.size()) return false;
    size_t i = 0;
    for (auto* part : parts) {
      if (path[i++] != part) return false;
    }
    return true;
  };
  auto noQuery = [&](Route route) -> std::variant<Route, RouteError> {
    if (url.query.size() > 0) {
      return badRequest(std::string("unknown parameter '") + url.query[0].name.cStr() + "'");
    }
    return route;
  };
  auto id = [&](size_t i, uint64_t& out, const char* what) -> kj::Maybe<RouteError> {
    if (!parseNumber(path[i], out) || out == 0) {
      return badRequest(std::string("bad ") + what + " id '" + path[i].cStr() +
                        "' (a positive number)");
    }
    return nullptr;
  };
  Route route{Route::Kind::PAGE};

  if (path.size() == 0) return noQuery(route);
  if (path[0] == "metrics" && path.size() == 1) return noQuery({Route::Kind::METRICS});
  if (path[0] == "assets" && path.size() == 2) {
    route.kind = Route::Kind::ASSET;
    route.asset = path[1].cStr();
    return route;  // query strings (cache busting) are allowed on assets
  }
  if (path[0] == "sessions" && (path.size() == 2 || (path.size() == 4 && path[2] == "tasks"))) {
    // Pages of the app; the app reads the ids itself. Checked here all the
    // same so that a bad link gets its error at once.
    KJ_IF_MAYBE(e, id(1, route.session, "session")) { return *e; }
    if (path.size() == 4) {
      KJ_IF_MAYBE(e, id(3, route.task, "task")) { return *e; }
    }
    return noQuery(route);
  }
  if (path[0] != "api") return notFound("no page at this path");

  if (is({"api", "overview"})) return noQuery({Route::Kind::OVERVIEW});
  if (is({"api", "governors"})) return noQuery({Route::Kind::GOVERNORS});
  if (is({"api", "sessions"})) return noQuery({Route::Kind::SESSIONS});
  if (is({"api", "events"})) {
    route.kind = Route::Kind::EVENTS;
    for (auto& param : url.query) {
      if (param.name != "session") {
        return badRequest(std::string("unknown parameter '") + param.name.cStr() + "' (session)");
      }
      if (param.value == nullptr || !parseNumber(param.value, route.session) || route.session == 0) {
        return badRequest("session must be a positive number");
      }
    }
    return route;
  }
  if (path.size() >= 3 && path[1] == "sessions") {
    KJ_IF_MAYBE(e, id(2, route.session, "session")) { return *e; }
    if (path.size() == 3) {
      route.kind = Route::Kind::SESSION;
      return noQuery(route);
    }
    if (path.size() == 4 && path[3] == "tasks") {
      route.kind = Route::Kind::TASKS;
      return taskQuery(kj::mv(route), url);
    }
    if (path.size() == 5 && path[3] == "tasks") {
      KJ_IF_MAYBE(e, id(4, route.task, "task")) { return *e; }
      route.kind = Route::Kind::TASK;
      return noQuery(route);
    }
    if (path.size() == 4 && path[3] == "graph") {
      route.kind = Route::Kind::GRAPH;
      return noQuery(route);
    }
    if (path.size() == 4 && path[3] == "timeline") {
      route.kind = Route::Kind::TIMELINE;
      return noQuery(route);
    }
  }
  return notFound("no API at this path (see docs/status-page.md)");
}

}  // namespace squall
