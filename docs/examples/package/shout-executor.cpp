// An executor built against the installed package (docs/install.md).
#include <squall/tasklib/tasklib.h>

#include <cctype>
#include <string>

// guide:begin
int main(int argc, char** argv) {
  squall::Executor shout("shout");
  shout.add("upper", [](squall::Call& call) {
    std::string text(call.input(0).text());
    for (auto& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    call.output(0).write(text);
  });
  return shout.serve(argc, argv);
}
// guide:end
