// Streams: programs reading another program's output while it runs.
#include <squall/client/client.h>

#include <cstdio>

int main() {
  squall::Client client;
  // guide:begin
  auto session = client.newSession("streams");
  using squall::ObjectKind;
  // The producer's stdout is a stream: its readers start with it and read
  // the bytes as they are written (on another governor if need be).
  auto numbers = session.execute(
      squall::Program::shell("seq 1 100000").stdoutOutput(ObjectKind::STREAM).name("seq"));
  numbers.output().keep();  // also stored as it flows: fetchable afterwards
  // Two readers, each gets every byte; one passes a stream on.
  auto sevens = session.execute(squall::Program({"grep", "7"})
                                    .stdinFrom(numbers.output())
                                    .stdoutOutput(ObjectKind::STREAM)
                                    .name("grep"));
  auto count = session.execute(
      squall::Program({"wc", "-l"}).stdinFrom(sevens.output()).stdoutOutput().name("count"));
  // A reader that stops early (like `head`) just leaves; the rest carry on.
  // (Were it the last reader of an unstored stream, the producer would get
  // a broken pipe and still count as finished, as in a shell pipe.)
  auto first = session.execute(
      squall::Program({"head", "-n", "2"}).stdinFrom(numbers.output()).stdoutOutput());
  count.output().keep();
  first.output().keep();
  session.submit();  // the four start together, sharing one cpu as a pipe does
  session.waitAll();
  std::printf("numbers with a 7: %s", count.output().fetch().c_str());  // 40951
  std::printf("first: %s", first.output().fetch().c_str());             // 1 2
  std::printf("kept: %zu bytes\n", numbers.output().fetch().size());     // 588895
  // guide:end
  return 0;
}
