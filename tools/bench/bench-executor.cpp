// The executor squall-bench --functions-only keeps warm: "bench/noop", a
// function that does nothing and makes one empty blob, to measure what a
// call task costs against a built-in task and a `true` program.
#include <squall/tasklib/tasklib.h>

int main(int argc, char** argv) {
  squall::Executor ex("bench");
  ex.add("noop", [](squall::Call&) {});
  return ex.serve(argc, argv);
}
