// docs/actors.md: a parameter server. One actor holds the weights of a
// line y = w0 + w1 * x; in each round four workers (calls of a function)
// compute gradients on their shards of the data from the weights the
// actor gives, and push them to it. Needs governors keeping
// docs/examples/actors/stats-executor.cpp as "stats".
#include <squall/client/client.h>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  squall::Client client;
  auto session = client.newSession("parameter server");
  // Points on y = 3 + 2x, in four shards.
  std::vector<squall::DataObject> shards;
  for (int shard = 0; shard < 4; shard++) {
    std::string points;
    for (int i = 0; i < 25; i++) {
      double x = (shard * 25 + i) / 100.0;
      points += std::to_string(x) + " " + std::to_string(3 + 2 * x) + "\n";
    }
    shards.push_back(session.blob(points));
  }
  // guide:begin
  auto server = session.actor("stats/ParameterServer", {}, "0.1 0 0");   // rate, w0, w1
  for (int round = 0; round < 200; round++) {
    auto weights = server.call("get").output();
    for (auto& shard : shards) {
      auto gradient = session.call("stats/gradient", {weights, shard});
      server.call("push", {gradient.output()});   // applied in the order made
    }
  }
  auto final = server.call("get");
  final.output().keep();
  session.submit();
  // guide:end
  double w0 = 0, w1 = 0;
  std::sscanf(final.output().fetch().c_str(), "%lf %lf", &w0, &w1);
  std::printf("y = %.2f + %.2f x\n", w0, w1);
  return 0;
}
