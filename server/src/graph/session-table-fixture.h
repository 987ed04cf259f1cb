// A SessionTable on an event loop, with helpers to submit a TestGraph and
// report results as a governor would. Tests only.
#pragma once

#include "session-table.h"
#include "test-graph.h"

#include <gtest/gtest.h>
#include <kj/async.h>
#include <spdlog/sinks/null_sink.h>

namespace squall::testing {

class SessionTableTest : public ::testing::Test {
 protected:
  // Held by pointer: their destructors may throw, gtest's must not.
  std::unique_ptr<kj::EventLoop> loopHolder = std::make_unique<kj::EventLoop>();
  std::unique_ptr<kj::WaitScope> scopeHolder = std::make_unique<kj::WaitScope>(*loopHolder);
  kj::WaitScope& waitScope = *scopeHolder;
  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
  SessionTable table{*logger};

  Session& submit(TestGraph& graph, Session* existing = nullptr) {
    auto& session = existing ? *existing : table.open("s", this);
    PendingSubmit pending(session.id, Limits{});
    pending.add(graph.build());
    table.submitted(session, pending.commit(session));
    return session;
  }

  void report(Id task, bool ok, GovernorId from, std::vector<uint64_t> outputs = {},
              std::string error = "") {
    capnp::MallocMessageBuilder message;
    auto result = message.initRoot<wire::TaskResult>();
    task.to(result.initId());
    result.setOk(ok);
    result.setError(error);
    auto infos = result.initOutputs(outputs.size());
    for (size_t i = 0; i < outputs.size(); i++) {
      Id{task.session, outputs[i]}.to(infos[i].initId());
      infos[i].setSize(5);
    }
    table.taskResult(result.asReader(), from, "governor");
  }
};

}  // namespace squall::testing
