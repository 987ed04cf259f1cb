// docs/tasklib.md's streamed pipe: `cat book | text/words | sort | uniq -c |
// sort -rn | head -n 5` with a warm function as the second stage, each
// stage reading the one before while it runs. Needs governors started with
// --executor text=PROGRAM (docs/examples/tasklib/wordcount-executor.cpp).
// The book: argv[1], or the one the build names.
#include <squall/client/client.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : SQUALL_EXAMPLE_BOOK;
  squall::Client client;
  // guide:begin
  using squall::ObjectKind;
  using squall::Program;
  auto session = client.newSession("words, streamed");
  auto book = session.fileBlob(path);
  auto text = session.execute(Program({"cat"}).stdinFrom(book).stdoutOutput(ObjectKind::STREAM).name("cat"));
  // The function's input is a stream (its producer has not started), so it
  // reads it as it is written; its output is one too.
  auto words = session.call("text/words", {text.output()}, "", {ObjectKind::STREAM});
  auto top = session.execute(Program::shell("sort | uniq -c | sort -k1,1nr -k2 | head -n 5")
                                 .stdinFrom(words.output())
                                 .env("LC_ALL", "C")
                                 .stdoutOutput()
                                 .name("top"));
  top.output().keep();
  session.submit();
  std::printf("%s", top.output().fetch().c_str());
  // guide:end
  return 0;
}
