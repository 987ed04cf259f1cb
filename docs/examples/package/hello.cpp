// A client built against the installed package (docs/install.md): Rain's
// hello world, and a call of the executor beside it (shout-executor.cpp)
// when the governors keep it warm (the test passes --call).
#include <squall/client/client.h>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  try {
    // guide:begin
    squall::Client client;  // $SQUALL_SERVER or 127.0.0.1:7210
    auto session = client.newSession("hello");
    auto hello = session.concat({session.blob("Hello "), session.blob("world!\n")});
    hello.output().keep();
    session.submit();
    std::printf("%s", hello.output().fetch().c_str());
    // guide:end
    if (argc > 1 && std::strcmp(argv[1], "--call") == 0) {
      auto shouted = session.call("shout/upper", {hello.output()});
      shouted.output().keep();
      session.submit();
      std::printf("%s", shouted.output().fetch().c_str());
    }
  } catch (const squall::Error& e) {
    std::fprintf(stderr, "hello: %s\n", e.what());
    return 1;
  }
  return 0;
}
