// A 100,000-task session for tools/bench/status-page.sh: built-in `sleep`
// tasks (no processes, so the machine stays free for the browser being
// measured) in groups of names, submitted at once, then waited for. The
// session runs for minutes with states changing all the time.
// usage: status-page-session SERVER TASKS SLEEP_MS
#include <squall/client/client.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: status-page-session SERVER TASKS SLEEP_MS\n");
    return 2;
  }
  int tasks = atoi(argv[2]);
  std::chrono::milliseconds pause(atoi(argv[3]));
  try {
    squall::Client client(argv[1]);
    auto session = client.newSession("big");
    // A map-reduce shape: parts in ten named groups, then one merge per group.
    const int groups = 10;
    std::vector<std::vector<squall::DataObject>> outputs(groups);
    for (int i = 0; i < tasks - groups; i++) {
      auto task = session.sleep(pause, session.blob("x"));
      task.name("part-" + std::to_string(i % groups) + "/" + std::to_string(i));
      outputs[i % groups].push_back(task.output());
    }
    for (int g = 0; g < groups; g++) session.concat(outputs[g]).name("merge-" + std::to_string(g));
    session.submit();
    printf("submitted tasks=%d\n", tasks);
    fflush(stdout);
    session.waitAll();
  } catch (const std::exception& e) {
    fprintf(stderr, "status-page-session: %s\n", e.what());
    return 1;
  }
  return 0;
}
