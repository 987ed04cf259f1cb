// The status server's /metrics (Prometheus text format) from the same
// state as the page. Loop thread only.
#include "status-view.h"

#include <cstdio>
#include <squall/proto/resource-amounts.h>

namespace squall {

namespace {

// Prometheus label values: backslash, quote and newline escaped.
std::string label(std::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string StatusView::metrics(size_t eventClients) {
  auto& stats = sessions.stats();
  std::string out;
  auto line = [&](const std::string& text) {
    out += text;
    out += '\n';
  };
  auto header = [&](const char* name, const char* type, const char* help) {
    line(std::string("# HELP ") + name + " " + help);
    line(std::string("# TYPE ") + name + " " + type);
  };
  uint64_t counts[7] = {};
  uint64_t open = 0, failed = 0;
  for (auto& [id, session] : sessions.all()) {
    for (int i = 0; i < 7; i++) counts[i] += session.counts[i];
    (session.state == Session::State::FAILED ? failed : open)++;
  }
  header("squall_tasks", "gauge", "Tasks of the sessions not closed, by state.");
  for (int i = 0; i < 7; i++) {
    line(std::string("squall_tasks{state=\"") + TASK_STATE_NAMES[i] + "\"} " + std::to_string(counts[i]));
  }
  uint64_t actorsRunning = 0, actorsWaiting = 0, callsQueued = 0;
  for (auto& [id, session] : sessions.all()) {
    for (auto& [n, actor] : session.actors) {
      if (actor.task->state == TaskNode::State::ASSIGNED) actorsRunning++;
      if (actor.task->state == TaskNode::State::WAITING || actor.task->state == TaskNode::State::READY) {
        actorsWaiting++;
      }
      for (auto& [turn, call] : actor.calls) callsQueued += call->done() ? 0 : 1;
    }
  }
  header("squall_actors", "gauge", "Actors of the sessions not closed: placed (running) or waiting to be.");
  line("squall_actors{state=\"running\"} " + std::to_string(actorsRunning));
  line("squall_actors{state=\"waiting\"} " + std::to_string(actorsWaiting));
  header("squall_actor_calls_queued", "gauge", "Method calls on actors not finished yet (running or waiting their turn).");
  line("squall_actor_calls_queued " + std::to_string(callsQueued));
  header("squall_actor_calls_finished_total", "counter", "Method calls on actors that finished ok.");
  line("squall_actor_calls_finished_total " + std::to_string(stats.actorCallsFinished));
  header("squall_actor_calls_direct_total", "counter",
         "Method calls their clients sent to the actor's governor directly, skipping the server.");
  line("squall_actor_calls_direct_total " + std::to_string(stats.actorCallsDirect));
  header("squall_sessions", "gauge", "Sessions not closed, by state.");
  line("squall_sessions{state=\"open\"} " + std::to_string(open));
  line("squall_sessions{state=\"failed\"} " + std::to_string(failed));
  header("squall_tasks_finished_total", "counter", "Tasks that finished ok.");
  line("squall_tasks_finished_total " + std::to_string(stats.tasksFinished));
  header("squall_tasks_failed_total", "counter", "Tasks that failed for good (after retries).");
  line("squall_tasks_failed_total " + std::to_string(stats.tasksFailed));
  header("squall_task_retries_total", "counter", "Failed attempts that were retried.");
  line("squall_task_retries_total " + std::to_string(stats.taskRetries));
  header("squall_tasks_stolen_total", "counter", "Queued tasks governors gave back for idle ones (work stealing).");
  line("squall_tasks_stolen_total " + std::to_string(stats.tasksStolen));

  auto& all = governors.all();
  header("squall_governors", "gauge", "Governors connected.");
  line("squall_governors " + std::to_string(all.size()));
  header("squall_governor_cpus", "gauge", "Cpus a governor offers.");
  for (auto& [id, g] : all) line("squall_governor_cpus{governor=\"" + label(g.name) + "\"} " + std::to_string(g.cpus));
  header("squall_governor_cpus_used", "gauge", "Cpus held by tasks running on a governor.");
  for (auto& [id, g] : all) {
    line("squall_governor_cpus_used{governor=\"" + label(g.name) + "\"} " +
         std::to_string(std::min(g.load, g.cpus)));
  }
  // Resources besides cpus, in items (indexed pools) or units (sum pools:
  // bytes of mem).
  auto amount = [](uint64_t units) { return std::to_string(double(units) / double(RESOURCE_UNIT)); };
  header("squall_governor_resource", "gauge", "A resource pool a governor offers besides cpus.");
  for (auto& [id, g] : all) {
    for (auto& [name, pool] : g.pools) {
      line("squall_governor_resource{governor=\"" + label(g.name) + "\",resource=\"" + label(name) + "\"} " +
           amount(pool.capacity));
    }
  }
  header("squall_governor_resource_used", "gauge", "What the tasks assigned to a governor hold of a pool.");
  for (auto& [id, g] : all) {
    for (auto& [name, pool] : g.pools) {
      line("squall_governor_resource_used{governor=\"" + label(g.name) + "\",resource=\"" + label(name) +
           "\"} " + amount(pool.used));
    }
  }
  header("squall_governor_tasks", "gauge", "Tasks assigned to a governor (running or queued there).");
  for (auto& [id, g] : all) {
    line("squall_governor_tasks{governor=\"" + label(g.name) + "\"} " + std::to_string(g.assigned.size()));
  }

  // What their stores held at their last heartbeat (none before it).
  auto storeGauge = [&](const char* name, const char* type, const char* help, uint64_t GovernorStore::*field) {
    header(name, type, help);
    for (auto& [id, g] : all) {
      if (g.store.known) line(std::string(name) + "{governor=\"" + label(g.name) + "\"} " + std::to_string(g.store.*field));
    }
  };
  storeGauge("squall_governor_store_objects", "gauge", "Objects in a governor's store.", &GovernorStore::objects);
  storeGauge("squall_governor_store_memory_bytes", "gauge",
             "Bytes of the objects in a governor's memory tier (--store-memory).", &GovernorStore::memoryBytes);
  storeGauge("squall_governor_store_memory_capacity_bytes", "gauge",
             "The capacity of a governor's memory tier (0: none).", &GovernorStore::memoryCapacity);
  storeGauge("squall_governor_store_memory_objects", "gauge", "Objects in a governor's memory tier.",
             &GovernorStore::memoryObjects);
  storeGauge("squall_governor_store_spilled_bytes_total", "counter",
             "Bytes a governor spilled from its memory tier to disk.", &GovernorStore::spilledBytes);
  storeGauge("squall_governor_store_spilled_objects_total", "counter",
             "Objects a governor spilled from its memory tier to disk.", &GovernorStore::spilledObjects);
  storeGauge("squall_governor_store_warm_bytes", "gauge",
             "Bytes of removed objects' files a governor keeps in memory for new objects to be written into.",
             &GovernorStore::warmBytes);

  header("squall_bytes_moved_total", "counter",
         "Bytes moved to governors: inputs fetched from another governor (when their task ran, or sent ahead "
         "while it waited: prefetched), constants sent by the server.");
  line("squall_bytes_moved_total{kind=\"fetched\"} " + std::to_string(stats.bytesFetched));
  line("squall_bytes_moved_total{kind=\"prefetched\"} " + std::to_string(stats.bytesPrefetched));
  line("squall_bytes_moved_total{kind=\"constants\"} " + std::to_string(stats.bytesConstants));
  header("squall_bytes_produced_total", "counter", "Bytes of the objects tasks made.");
  line("squall_bytes_produced_total " + std::to_string(stats.bytesProduced));

  header("squall_scheduling_pass_seconds", "histogram", "Wall time of one scheduling pass.");
  uint64_t cumulative = 0;
  char value[64];
  for (int i = 0; i < ServerStats::PASS_BUCKETS; i++) {
    cumulative += stats.passBuckets[i];
    snprintf(value, sizeof(value), "%g", ServerStats::PASS_BOUNDS_US[i] / 1e6);
    line(std::string("squall_scheduling_pass_seconds_bucket{le=\"") + value + "\"} " +
         std::to_string(cumulative));
  }
  line("squall_scheduling_pass_seconds_bucket{le=\"+Inf\"} " + std::to_string(stats.passes));
  snprintf(value, sizeof(value), "%.6f", stats.passMicrosTotal / 1e6);
  line(std::string("squall_scheduling_pass_seconds_sum ") + value);
  line("squall_scheduling_pass_seconds_count " + std::to_string(stats.passes));
  header("squall_scheduling_pass_last_seconds", "gauge", "Wall time of the latest scheduling pass.");
  snprintf(value, sizeof(value), "%.6f", stats.passMicrosLast / 1e6);
  line(std::string("squall_scheduling_pass_last_seconds ") + value);

  header("squall_status_event_clients", "gauge", "Status pages receiving live updates.");
  line("squall_status_event_clients " + std::to_string(eventClients));
  return out;
}

}  // namespace squall
