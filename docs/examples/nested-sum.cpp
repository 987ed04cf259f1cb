// docs/nested.md: one call of range/sum, which submits the rest of the
// tree itself. Needs governors keeping docs/examples/nested/range-executor.cpp
// as "range".
#include <squall/client/client.h>

#include <cstdio>

int main() {
  squall::Client client;
  auto session = client.newSession("nested sum");
  // guide:begin
  auto total = session.call("range/sum", {}, "1 1000");
  total.output().keep();
  session.submit();
  std::printf("sum of 1..1000 = %s\n", total.output().fetch().c_str());
  session.waitAll();   // the tasks the calls submitted are the session's too
  std::printf("%llu tasks\n", static_cast<unsigned long long>(session.state().finished));
  // guide:end
  return 0;
}
