#include "status-server.h"

#include "web-assets.h"

#include <arpa/inet.h>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <kj/debug.h>

namespace squall {

namespace {

const char* statusText(unsigned status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 503: return "Service Unavailable";
  }
  return "Internal Server Error";
}

const WebAsset* findAsset(kj::StringPtr name) {
  for (auto& asset : webAssets()) {
    if (name == asset.name) return &asset;
  }
  return nullptr;
}

// "localhost", "127.0.0.1", "[::1]", with or without a port.
bool loopbackHost(kj::StringPtr value) {
  std::string host(value.cStr());
  if (!host.empty() && host[0] == '[') {
    auto close = host.find(']');
    host = close == std::string::npos ? host : host.substr(0, close + 1);
  } else if (auto colon = host.rfind(':'); colon != std::string::npos) {
    host = host.substr(0, colon);
  }
  return isLoopbackHost(host);
}

}  // namespace

bool isLoopbackHost(std::string_view host) {
  std::string name(host);
  for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (name == "localhost") return true;
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  // A whole address, not a prefix: "127.evil.example" is a name anyone can
  // point anywhere (DNS rebinding).
  in_addr v4;
  if (inet_pton(AF_INET, name.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, name.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

StatusServer::StatusServer(StatusView& view, kj::Timer& timer, spdlog::logger& logger,
                           StatusServerOptions options)
    : view(view), timer(timer), logger(logger), options(options), tasks(*this),
      server(timer, *[this]() -> kj::HttpHeaderTable* {
        kj::HttpHeaderTable::Builder builder;
        contentType = builder.add("Content-Type");
        cacheControl = builder.add("Cache-Control");
        contentSecurityPolicy = builder.add("Content-Security-Policy");
        contentTypeOptions = builder.add("X-Content-Type-Options");
        frameOptions = builder.add("X-Frame-Options");
        allow = builder.add("Allow");
        host = builder.add("Host");
        headerTable = builder.build();
        return headerTable.get();
      }(), *this, [&options]() {
        kj::HttpServerSettings settings;
        // kj-http holds an idle connection this long after a response,
        // whatever the client asked (it ignores Connection: close).
        settings.pipelineTimeout = 5 * kj::SECONDS;
        // And a new one this long for its request's headers (kj's default
        // is 15 s): the listener lets so many connections be open at once
        // (RetryingReceiver), and an idle one holds its place meanwhile.
        settings.headerTimeout = 5 * kj::SECONDS;
        (void)options;
        return settings;
      }()) {
  tasks.add(tickLoop());
}

StatusServer::~StatusServer() noexcept(false) {}

kj::Promise<void> StatusServer::listen(kj::ConnectionReceiver& receiver) {
  return server.listenHttp(receiver);
}

uint64_t StatusServer::nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

kj::Promise<void> StatusServer::tickLoop() {
  return timer.afterDelay(options.tick).then([this]() {
    tick();
    return tickLoop();
  });
}

std::string StatusServer::payload(uint64_t session) {
  Json json = session == 0 ? view.overview() : view.sessionUpdate(session);
  return jsonText(json);
}

namespace {
// Adds the wall time of a scope on the loop to a counter.
struct Stopwatch {
  uint64_t& total;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~Stopwatch() {
    total += std::chrono::duration_cast<std::chrono::microseconds>(
                 std::chrono::steady_clock::now() - start)
                 .count();
  }
};
}  // namespace

void StatusServer::tick() {
  view.tick(nowMs());
  if (streams.empty()) return;
  Stopwatch stopwatch{eventUs};
  auto now = timer.now();
  // One payload per topic per tick, however many pages watch it.
  std::map<uint64_t, std::string> payloads;
  for (auto& stream : streams) {
    if (stream.gone || stream.busy) continue;
    auto it = payloads.find(stream.session);
    if (it == payloads.end()) it = payloads.emplace(stream.session, payload(stream.session)).first;
    if (it->second != stream.last) {
      stream.last = it->second;
      send(stream, "event: update\ndata: " + it->second + "\n\n");
    } else if (now - stream.lastWrite >= options.keepalive) {
      send(stream, ": keepalive\n\n");
    }
  }
}

void StatusServer::send(EventStream& stream, std::string text) {
  auto buffer = kj::heapString(text.data(), text.size());
  auto* target = &stream;
  stream.busy = true;
  stream.lastWrite = timer.now();
  stream.writing = stream.out->write(buffer.begin(), buffer.size())
                       .attach(kj::mv(buffer))
                       .then([target]() { target->busy = false; },
                             [this, target](kj::Exception&& e) {
                               // The page went away: end its request; the
                               // stream leaves the list when that does.
                               logger.debug("event=status-events-gone error=\"{}\"",
                                            e.getDescription().cStr());
                               target->busy = false;
                               target->gone = true;
                               target->done->fulfill();
                             })
                       .eagerlyEvaluate(nullptr);
}

kj::Promise<void> StatusServer::events(const Route& route, Response& response) {
  if (streams.size() >= options.maxEventClients) {
    return error(response, true, 503, "too many pages watching this server; close some");
  }
  auto first = payload(route.session);
  if (first == "null") {
    return error(response, true, 404, "no session " + std::to_string(route.session));
  }
  kj::HttpHeaders headers(*headerTable);
  headers.set(contentType, "text/event-stream");
  headers.set(cacheControl, "no-store");
  headers.set(contentTypeOptions, "nosniff");
  auto paf = kj::newPromiseAndFulfiller<void>();
  streams.push_back(EventStream{route.session, response.send(200, "OK", headers), nullptr, false,
                                false, first, timer.now(), kj::mv(paf.fulfiller)});
  auto it = std::prev(streams.end());
  logger.debug("event=status-events-open session={} clients={}", route.session, streams.size());
  // retry: how soon a browser reconnects after the server went away.
  send(*it, "retry: 2000\nevent: update\ndata: " + first + "\n\n");
  return paf.promise.attach(kj::defer([this, it]() {
    streams.erase(it);
    logger.debug("event=status-events-close clients={}", streams.size());
  }));
}

kj::Promise<void> StatusServer::respond(Response& response, unsigned status,
                                        kj::StringPtr type, std::string body, bool cacheable) {
  kj::HttpHeaders headers(*headerTable);
  headers.set(contentType, type);
  headers.set(cacheControl, cacheable ? "no-cache" : "no-store");
  headers.set(contentTypeOptions, "nosniff");
  headers.set(frameOptions, "DENY");
  headers.set(contentSecurityPolicy,
              "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'");
  auto owned = kj::heap<std::string>(std::move(body));
  auto stream = response.send(status, statusText(status), headers, owned->size());
  auto write = stream->write(owned->data(), owned->size());
  return write.attach(kj::mv(stream), kj::mv(owned));
}

kj::Promise<void> StatusServer::error(Response& response, bool api, unsigned status,
                                      const std::string& message) {
  if (api) {
    return respond(response, status, "application/json", jsonText({{"error", message}}) + "\n");
  }
  return respond(response, status, "text/plain; charset=utf-8",
                 std::to_string(status) + " " + statusText(status) + ": " + message + "\n");
}

kj::Promise<void> StatusServer::request(kj::HttpMethod method, kj::StringPtr url,
                                        const kj::HttpHeaders& headers, kj::AsyncInputStream&,
                                        Response& response) {
  Stopwatch stopwatch{requestUs};
  bool api = url.startsWith("/api/") || url == "/metrics";
  if (method != kj::HttpMethod::GET && method != kj::HttpMethod::HEAD) {
    kj::HttpHeaders out(*headerTable);
    out.set(allow, "GET, HEAD");
    out.set(contentType, "application/json");
    auto body = kj::str("{\"error\":\"the status page is read-only: GET and HEAD only\"}\n");
    auto stream = response.send(405, statusText(405), out, body.size());
    auto write = stream->write(body.begin(), body.size());
    return write.attach(kj::mv(stream), kj::mv(body));
  }
  if (options.loopbackHostsOnly) {
    // A request without a Host header cannot be told from a rebound one.
    KJ_IF_MAYBE(value, headers.get(host)) {
      if (!loopbackHost(*value)) {
        return error(response, api, 403,
                     "this status port answers to loopback names only (localhost, 127.0.0.1)");
      }
    } else {
      return error(response, api, 400, "a Host header is needed (localhost or 127.0.0.1)");
    }
  }
  auto parsed = parseRoute(url);
  if (auto* bad = std::get_if<RouteError>(&parsed)) {
    return error(response, api, bad->status, bad->message);
  }
  auto& route = std::get<Route>(parsed);
  auto json = [&](Json body, const char* missing) -> kj::Promise<void> {
    if (body.is_null()) return error(response, true, 404, missing);
    return respond(response, 200, "application/json", jsonText(body) + "\n");
  };
  auto unknownSession = "no session " + std::to_string(route.session) +
                        " (never opened, or closed and no longer remembered)";
  switch (route.kind) {
    case Route::Kind::PAGE:
    case Route::Kind::ASSET: {
      auto* asset = findAsset(route.kind == Route::Kind::PAGE ? kj::StringPtr("index.html")
                                                              : kj::StringPtr(route.asset.c_str()));
      if (asset == nullptr) return error(response, false, 404, "no such file");
      return respond(response, 200, asset->contentType,
                     std::string(reinterpret_cast<const char*>(asset->data), asset->size), true);
    }
    case Route::Kind::OVERVIEW: return json(view.overview(), "");
    case Route::Kind::GOVERNORS: return json(view.governorsJson(), "");
    case Route::Kind::SESSIONS: return json(view.sessionsJson(), "");
    case Route::Kind::SESSION: return json(view.session(route.session), unknownSession.c_str());
    case Route::Kind::TASKS: return json(view.tasks(route.session, route.query), unknownSession.c_str());
    case Route::Kind::TASK:
      if (view.session(route.session).is_null()) return error(response, true, 404, unknownSession);
      return json(view.task(route.session, route.task),
                  ("no task " + std::to_string(route.task) + " in session " +
                   std::to_string(route.session) + " (or its details were not kept after close)")
                      .c_str());
    case Route::Kind::GRAPH: return json(view.graph(route.session), unknownSession.c_str());
    case Route::Kind::TIMELINE: return json(view.timeline(route.session), unknownSession.c_str());
    case Route::Kind::EVENTS: return events(route, response);
    case Route::Kind::METRICS: {
      char own[512];
      snprintf(own, sizeof(own),
               "# HELP squall_status_seconds_total Loop time spent on the status page.\n"
               "# TYPE squall_status_seconds_total counter\n"
               "squall_status_seconds_total{kind=\"events\"} %.6f\n"
               "squall_status_seconds_total{kind=\"requests\"} %.6f\n",
               eventUs / 1e6, requestUs / 1e6);
      return respond(response, 200, "text/plain; version=0.0.4; charset=utf-8",
                     view.metrics(streams.size()) + own);
    }
  }
  return error(response, api, 404, "no page at this path");
}

void StatusServer::taskFailed(kj::Exception&& exception) {
  logger.error("event=status-ticker-failed error=\"{}\"", exception.getDescription().cStr());
}

}  // namespace squall
