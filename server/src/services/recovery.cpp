#include "recovery.h"

#include <chrono>
#include <squall/proto/errors.h>

namespace squall {

bool recoverSessions(SessionLog& log, SessionTable& sessions, GovernorPool& governors,
                     spdlog::logger& logger, std::FILE* report) {
  auto started = std::chrono::steady_clock::now();
  std::vector<SessionLog::SessionRecord> records;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                records = log.load();
                for (auto& name : log.loadGovernors()) governors.expect(name);
              })) {
    if (report != nullptr) fprintf(report, "squall-server: %s\n", userMessage(*e).cStr());
    return false;
  }
  size_t tasks = 0, restored = 0;
  for (auto& record : records) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  auto& session = sessions.restore(
                      record, [&](const std::string& name) { return governors.expect(name); });
                  tasks += session.tasks.size();
                  restored++;
                })) {
      logger.error("event=session-not-restored session={} error=\"{}\"", record.id,
                   e->getDescription().cStr());
      if (report != nullptr) {
        fprintf(report, "squall-server: session %llu in the log %s could not be restored: %s\n",
                static_cast<unsigned long long>(record.id), log.path().c_str(), userMessage(*e).cStr());
      }
      KJ_IF_MAYBE(partial, sessions.find(record.id)) { sessions.forget(partial->id); }
    }
  }
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - started).count();
  logger.info("event=recovered path={} incarnation={:016x} sessions={} tasks={} governors_expected={} ms={}",
              log.path(), sessions.incarnation(), restored, tasks, governors.expectedCount(), ms);
  return true;
}

}  // namespace squall
