// The status port: kj-http on the server's loop serving the status page,
// its JSON API, server-sent events and /metrics. Read-only: it only reads
// StatusView. Loop thread only.
//
// Live updates: one timer ticks (once a second by default); on each tick
// every event stream gets its topic's payload (the overview, or one
// session's summary) if it changed since what that stream last got. A
// payload is built once per tick per topic, however many pages watch it.
#pragma once

#include "route.h"
#include "status-view.h"

#include <kj/async-io.h>
#include <kj/compat/http.h>
#include <list>
#include <map>
#include <spdlog/logger.h>

namespace squall {

// The status page's default port (the RPC port is 7210).
constexpr unsigned STATUS_HTTP_PORT = 7222;

// "localhost", "127.x.y.z", "::1" or "[::1]" (no port).
bool isLoopbackHost(std::string_view host);

struct StatusServerOptions {
  kj::Duration tick = 1 * kj::SECONDS;
  // A stream with nothing new gets a comment this often, which also finds
  // pages that went away.
  kj::Duration keepalive = 15 * kj::SECONDS;
  size_t maxEventClients = 64;
  // Refuse requests whose Host is not a loopback name (DNS rebinding):
  // set when the port is bound to a loopback address.
  bool loopbackHostsOnly = true;
};

class StatusServer final : public kj::HttpService, private kj::TaskSet::ErrorHandler {
 public:
  StatusServer(StatusView& view, kj::Timer& timer, spdlog::logger& logger,
               StatusServerOptions options = {});
  ~StatusServer() noexcept(false);

  // Serves connections from `receiver` until the promise is dropped; the
  // ticker runs from construction.
  kj::Promise<void> listen(kj::ConnectionReceiver& receiver);
  size_t eventClients() const { return streams.size(); }
  // Loop time this server has spent building live updates and answering
  // requests, µs: what the page costs the server (in /metrics).
  uint64_t eventMicros() const { return eventUs; }
  uint64_t requestMicros() const { return requestUs; }

  kj::Promise<void> request(kj::HttpMethod method, kj::StringPtr url, const kj::HttpHeaders& headers,
                            kj::AsyncInputStream& requestBody, Response& response) override;

 private:
  struct EventStream {
    uint64_t session;  // 0: the overview
    kj::Own<kj::AsyncOutputStream> out;
    // Declared after `out`, so destroyed before it.
    kj::Maybe<kj::Promise<void>> writing;
    // A write is under way (the next one waits for a later tick); the page
    // is gone (a write failed).
    bool busy;
    bool gone;
    std::string last;
    kj::TimePoint lastWrite;
    // Resolves the request (ending the response) when the page is gone.
    kj::Own<kj::PromiseFulfiller<void>> done;
  };

  StatusView& view;
  kj::Timer& timer;
  spdlog::logger& logger;
  StatusServerOptions options;
  kj::Own<kj::HttpHeaderTable> headerTable;
  kj::HttpHeaderId contentType, cacheControl, contentSecurityPolicy, contentTypeOptions, frameOptions,
      allow, host;
  // Before `server`: streams leave this list when their request promise is
  // destroyed, which destroying `server` does.
  uint64_t eventUs = 0;
  uint64_t requestUs = 0;
  std::list<EventStream> streams;
  kj::TaskSet tasks;
  kj::HttpServer server;

  kj::Promise<void> tickLoop();
  void tick();
  void send(EventStream& stream, std::string text);
  kj::Promise<void> events(const Route& route, Response& response);
  kj::Promise<void> respond(Response& response, unsigned status, kj::StringPtr contentType,
                            std::string body, bool cacheable = false);
  kj::Promise<void> error(Response& response, bool api, unsigned status, const std::string& message);
  std::string payload(uint64_t session);
  uint64_t nowMs();
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
