// The guide's first example: two programs, one feeding the other.
#include <squall/client/client.h>

#include <cstdio>

int main() {
  // guide:begin
  squall::Client client;                        // $SQUALL_SERVER or 127.0.0.1:7210
  auto session = client.newSession("words");
  auto text = session.blob("pear\napple\nfig\n");
  auto sorted = session.execute(
      squall::Program({"sort"}).stdinFrom(text).stdoutOutput().name("sort"));
  auto counted = session.execute(
      squall::Program::shell("wc -l < in.txt > n.txt")
          .input(sorted.output(), "in.txt")    // a read-only file in the sandbox
          .output("n.txt")                     // a file the program writes
          .name("count"));
  sorted.output().keep();
  counted.output().keep();
  session.submit();                             // the whole graph, in one go
  session.waitAll();                            // throws TaskFailed on failure
  std::printf("%s", sorted.output().fetch().c_str());   // apple fig pear
  std::printf("lines: %s", counted.output().fetch().c_str());  // 3
  // guide:end
  return 0;
}
