// docs/actors.md: a Counter actor; its increments run one at a time, in
// the order they were made, and its state lives between them. Needs
// governors keeping docs/examples/actors/stats-executor.cpp as "stats".
#include <squall/client/client.h>

#include <cstdio>
#include <vector>

int main() {
  squall::Client client;
  auto session = client.newSession("counter");
  // guide:begin
  auto counter = session.actor("stats/Counter", {}, "10");   // starts at 10
  std::vector<squall::Task> increments;
  for (int i = 0; i < 5; i++) increments.push_back(counter.call("increment"));
  auto value = counter.call("get");
  for (auto& increment : increments) increment.output().keep();
  value.output().keep();
  session.submit();
  for (auto& increment : increments) std::printf("%s ", increment.output().fetch().c_str());
  std::printf("-> %s\n", value.output().fetch().c_str());
  counter.kill();   // or leave it to the session's end
  // guide:end
  return 0;
}
