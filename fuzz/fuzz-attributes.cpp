// libFuzzer target: task attributes as the status page renders them
// (server/src/http/status-view: StatusView::task for an open session, and
// again from the history once it closed). Attributes are free text a
// client sets on a task (JSON by convention); the input is that text, set
// on the one task of a small graph submitted the normal way.
#include "fuzz-util.h"

#include <status-view.h>
#include <kj/debug.h>
#include <session-table.h>
#include <spdlog/sinks/null_sink.h>
#include <test-graph.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto logger =
      std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_st>());
  squall::SessionTable table(*logger);
  squall::GovernorPool governors;
  squall::SessionHistory history(squall::HistoryLimits{}, *logger);
  squall::StatusView view(table, governors, history, "fuzz", 1000);
  table.onClose = [&](const squall::Session& closing) {
    history.keep(closing, 5000, view.sessionClosed(closing));
  };

  int owner = 0;
  auto& session = table.open("fuzz", &owner);
  auto id = session.id;
  squall::testing::TestGraph graph(id);
  squall::testing::TestTask task{3, {1}, {2}, {"program"}, {"in"}};
  task.name = "fuzz";
  task.attributes.assign(reinterpret_cast<const char*>(data), size);
  graph.constant(1, "x").output(2, true).task(task);
  squall::PendingSubmit pending(id, squall::Limits{});
  pending.add(graph.build());
  // Attributes nesting deeper than the page parses are refused at submit
  // (submit.cpp): such a task never reaches the page.
  bool accepted = false;
  squall::fuzz::expectingRefusals([&]() {
    table.submitted(session, pending.commit(session));
    accepted = true;
  });
  if (!accepted) return 0;

  auto open = view.task(id, 3);
  KJ_ASSERT(!open.is_null());
  squall::jsonText(open);
  squall::jsonText(view.tasks(id, squall::TaskQuery{}));
  table.close(id);
  auto kept = view.task(id, 3);
  KJ_ASSERT(!kept.is_null());
  squall::jsonText(kept);
  return 0;
}
