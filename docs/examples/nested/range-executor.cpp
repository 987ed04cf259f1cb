// docs/nested.md: the executor "range", whose function `sum` adds up the
// numbers LO..HI by submitting two tasks for the halves of a long range
// into its own session and adding their results: a recursion that grows
// the graph while it runs, deeper than the cluster has cpus.
#include <squall/tasklib/tasklib.h>

#include <sstream>
#include <stdexcept>
#include <string>

namespace {

// guide:begin
// "LO HI" -> the sum of LO..HI.
void sum(squall::Call& call) {
  long lo = 0, hi = 0;
  std::istringstream config{std::string(call.config())};
  if (!(config >> lo >> hi) || lo > hi) throw std::invalid_argument("config: want LO HI, LO <= HI");
  if (hi - lo < 8) {
    long total = 0;
    for (long i = lo; i <= hi; i++) total += i;
    call.output(0).write(std::to_string(total));
    return;
  }
  // The task's own session: what is submitted here are its children.
  auto& session = call.session();
  long mid = lo + (hi - lo) / 2;
  auto left = session.call("range/sum", {}, std::to_string(lo) + " " + std::to_string(mid));
  auto right = session.call("range/sum", {}, std::to_string(mid + 1) + " " + std::to_string(hi));
  left.output().keep();
  right.output().keep();
  session.submit();
  // Fetching waits for them; meanwhile this call's cpu runs other tasks.
  long total = std::stol(left.output().fetch()) + std::stol(right.output().fetch());
  session.unkeep({left.output(), right.output()});
  call.output(0).write(std::to_string(total));
}
// guide:end

}  // namespace

int main(int argc, char** argv) {
  squall::Executor ex("range");
  ex.add("sum", sum);
  return ex.serve(argc, argv);
}
