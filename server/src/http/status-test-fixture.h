// Test helper: a SessionTable and GovernorPool with sessions built from
// TestGraph, and task results reported by hand. Tests only.
#pragma once

#include "session-table.h"
#include "governor-pool.h"
#include "test-graph.h"
#include "status-view.h"

#include <gtest/gtest.h>
#include <kj/async.h>
#include <spdlog/sinks/null_sink.h>

namespace squall::testing {

class StatusFixture : public ::testing::Test {
 protected:
  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  SessionTable table{*logger};
  GovernorPool governors;
  SessionHistory history{HistoryLimits{}, *logger};
  StatusView view{table, governors, history, "test", 1000};

  StatusFixture() {
    table.onClose = [this](const Session& session) {
      history.keep(session, 5000, view.sessionClosed(session));
    };
  }

  GovernorState& governor(const char* name, uint32_t cpus) {
    return governors.add(name, "127.0.0.1:1", cpus, wire::GovernorControl::Client(nullptr));
  }

  Session& submit(TestGraph& graph, const char* name = "s") {
    auto& session = table.open(name, this);
    submitMore(session, graph);
    return session;
  }

  // A later submit into `session`.
  void submitMore(Session& session, TestGraph& graph) {
    PendingSubmit pending(session.id, Limits{});
    pending.add(graph.build());
    table.submitted(session, pending.commit(session));
    table.effects().ready.clear();
  }

  void run(Session& session, uint64_t task, GovernorState& on) {
    governors.hold(on, Id{session.id, task}, 1);
    table.assigned(session.tasks.at(task), on.id);
  }

  void report(Session& session, uint64_t task, bool ok, GovernorState& from,
              std::string stderrTail = "", uint64_t startUs = 1000000, uint64_t durationUs = 5000) {
    capnp::MallocMessageBuilder message;
    auto result = message.initRoot<wire::TaskResult>();
    Id{session.id, task}.to(result.initId());
    result.setOk(ok);
    result.setError(ok ? "" : "program exited with status 3");
    result.setExitStatus(ok ? 0 : 3);
    result.setStderrTail(stderrTail);
    result.setStartTimeUs(startUs);
    result.setDurationUs(durationUs);
    auto& node = session.tasks.at(task);
    auto infos = result.initOutputs(node.outputs.size());
    for (size_t i = 0; i < node.outputs.size(); i++) {
      node.outputs[i]->id.to(infos[i].initId());
      infos[i].setSize(100);
    }
    governors.release(from.id, Id{session.id, task});
    table.taskResult(result.asReader(), from.id, from.name);
  }
};

}  // namespace squall::testing
