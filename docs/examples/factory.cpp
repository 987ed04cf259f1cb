// A Program used as a factory, failure policies and task information.
#include <squall/client/client.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

int main() {
  squall::Client client;
  // guide:begin
  auto session = client.newSession("factory");
  // One program, called once per input: the slot "in" is bound per call.
  auto upper = squall::Program::shell("tr a-z A-Z < in.txt").inputSlot("in", "in.txt")
                   .stdoutOutput().name("upper");
  std::vector<squall::Task> calls;
  for (const char* word : {"ant", "bee", "cow"}) {
    calls.push_back(session.execute(upper, {{"in", session.blob(word)}}));
    calls.back().name(std::string("upper/") + word).output().keep();
  }
  // A flaky step: retried (SQUALL_ATTEMPT says which run it is).
  auto flaky = session.execute(
      squall::Program::shell("[ \"$SQUALL_ATTEMPT\" -ge 2 ] && echo ok").stdoutOutput());
  flaky.name("flaky").retries(2).output().keep();
  // A step allowed to fail: the session carries on, dependents are skipped.
  auto optional = session.execute(squall::Program::shell("echo broken >&2; exit 4").stdoutOutput());
  optional.name("optional").allowFailure();
  auto dependent = session.concat({optional.output()});
  dependent.name("needs-optional");
  // A step with a time limit (killed if it runs longer).
  auto quick = session.sleep(std::chrono::milliseconds(10));
  quick.name("quick").timeLimit(std::chrono::seconds(30));
  session.submit();
  session.waitAll();

  for (auto& call : calls) std::printf("%s\n", call.output().fetch().c_str());
  auto info = flaky.info();
  std::printf("flaky: %s on attempt %u", info.state.c_str(), info.attempt);
  std::printf(", said %s", flaky.output().fetch().c_str());
  auto failed = optional.info();
  std::printf("optional: %s, exit %d, stderr %s", failed.state.c_str(), failed.exitStatus,
              failed.stderrTail.c_str());
  std::printf("needs-optional: %s\n", dependent.info().state.c_str());
  // guide:end
  return 0;
}
