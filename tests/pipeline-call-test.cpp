// Functions in squall run: call steps in pipeline files and call stages in
// `squall run -c` (their checks, plans and dry runs without a server), then
// runs against governors that keep the test executor (testfn) warm.
#include "pipeline-test-support.h"

namespace squall {
namespace pipeline_test {
namespace {

const PlannedTask& taskNamed(const PipelinePlan& plan, const std::string& name) {
  for (auto& task : plan.tasks) {
    if (task.name == name) return task;
  }
  throw std::runtime_error("no task " + name + " in\n" + describePlan(plan));
}

// The producing task's name and output name of each of `task`'s inputs.
std::vector<std::string> sources(const PipelinePlan& plan, const PlannedTask& task) {
  std::vector<std::string> out;
  for (auto& in : task.inputs) {
    out.push_back(in.task == SIZE_MAX ? in.localPath
                                      : plan.tasks[in.task].name + "." + plan.tasks[in.task].outputs[in.output].name);
  }
  return out;
}

using Texts = std::vector<std::string>;

// ---- call steps: the parser and the planner ----

TEST(PipelineCallParseTest, BadCallStepsNameTheStepAndTheKey) {
  Workspace ws;
  const std::string gen = "[step.gen]\ncommand = [\"seq\", \"3\"]\nstdout = true\n";
  expectPlanErrors(ws.dir, {
      {"[step.a]\ncall = \"\"\n",
       "p.toml:2:8: step 'a': call \"\" does not name a function: write EXECUTOR/FUNCTION, e.g. \"text/wordcount\""},
      {"[step.a]\ncall = \"wordcount\"\n", "p.toml:2:8: step 'a': call \"wordcount\" does not name a function"},
      {"[step.a]\ncall = \"te xt/wc\"\n",
       "p.toml:2:8: step 'a': call \"te xt/wc\" has a bad executor name 'te xt': use 1 to 128 letters, digits, "
       "'-', '_' and '.'"},
      {"[step.a]\ncall = \"text/\"\n", "p.toml:2:8: step 'a': call \"text/\" has a bad function name ''"},
      {"[step.a]\ncall = \"a/b/c\"\n", "p.toml:2:8: step 'a': call \"a/b/c\" has a bad function name 'b/c'"},
      {"[step.a]\ncall = \"a/{item}\"\nvalues = [1]\n", "p.toml:2:8: step 'a': call \"a/{item}\" has a bad function name"},
      {"[step.a]\ncall = [\"a/b\"]\n", "p.toml:2:8: 'step.a.call' must be a string, not an array"},
      {"[step.a]\ncall = \"a/b\"\nshell = \"true\"\n", "p.toml:3:1: step 'a' has both 'call' and 'shell'; a step does one thing"},
      {"[step.a]\ncall = \"a/b\"\nconfig = \"x\"\nconfig_file = \"data/words.txt\"\n",
       "p.toml:4:1: step 'a' has both 'config' and 'config_file'; give its config one way"},
      {"[step.a]\ncall = \"a/b\"\nconfig_file = \"\"\n", "p.toml:3:15: 'config_file' is empty: give a local file"},
      {"[step.a]\ncall = \"a/b\"\nconfig = 7\n", "p.toml:3:10: 'step.a.config' must be a string, not an integer"},
      {"[step.a]\ncall = \"a/b\"\ninputs = { x = \"data/words.txt\" }\n",
       "p.toml:3:10: 'inputs' of call step 'a' must be a list [SOURCE, ...], not a table: a function takes its "
       "inputs by position"},
      {"[step.a]\ncall = \"a/b\"\ninputs = [\"data/words.txt\", 1]\n",
       "p.toml:3:29: 'step.a.inputs[1]' must be a string, not an integer"},
      {"[step.a]\ncall = \"a/b\"\ninputs = [{ label = \"x\" }]\n", "p.toml:3:11: input 0 has no 'from'"},
      {"[step.a]\ncall = \"a/b\"\ninputs = [{ from = \"data/words.txt\", arg = true }]\n",
       "p.toml:3:38: unknown key 'arg' in input 0 (it takes from, label, stream)"},
      {gen + "[step.a]\ncall = \"a/b\"\ninputs = [{ from = \"@gen\", stream = true, broken_pipe = \"error\" }]\n",
       "p.toml:6:43: unknown key 'broken_pipe' in input 0 (it takes from, label, stream)"},
      {"[step.a]\ncall = \"a/b\"\ninputs = [{ from = \"data/words.txt\", label = 1 }]\n",
       "p.toml:3:46: 'step.a.inputs[0].label' must be a string, not an integer"},
      {"[step.a]\ncall = \"a/b\"\noutputs = { x = \"x\" }\n",
       "p.toml:3:11: 'outputs' of call step 'a' must be a list of names [\"NAME\", ...] in the function's order "
       "(a name ending in '/' is a dir output), not a table"},
      {"[step.a]\ncall = \"a/b\"\noutputs = [\"a b\"]\n",
       "p.toml:3:12: output name 'a b' must be letters, digits, '_' and '-' (ending in '/' for a dir output)"},
      {"[step.a]\ncall = \"a/b\"\noutputs = [\"x\", \"x/\"]\n", "p.toml:3:17: step 'a' has two outputs named 'x'"},
      {"[step.a]\ncall = \"a/b\"\noutputs = [\"/\"]\n", "p.toml:3:12: output name '' must be letters"},
      {"[step.a]\ncall = \"a/b\"\nstdin = \"data/words.txt\"\n",
       "p.toml:3:1: 'stdin' does not apply to a call step (only to command and shell steps); a function takes its "
       "inputs as inputs = [SOURCE, ...]"},
      {"[step.a]\ncall = \"a/b\"\nstdout = true\n",
       "p.toml:3:1: 'stdout' does not apply to a call step (only to command and shell steps); a function names its "
       "outputs as outputs = [\"NAME\", ...]"},
      {"[step.a]\ncall = \"a/b\"\nenv = { A = \"1\" }\n", "p.toml:3:1: 'env' does not apply to a call step"},
      {"[step.a]\nshell = \"true\"\nconfig = \"x\"\n",
       "p.toml:3:1: 'config' does not apply to a shell step (only to call steps)"},
      {"[step.a]\nload = \"/x\"\ninputs = [\"data/words.txt\"]\n",
       "p.toml:3:1: 'inputs' does not apply to a load step (only to command, shell and call steps)"},
      {"[step.a]\ncall = \"a/b\"\nconfig_file = \"no/such.txt\"\n", "p.toml:3:15: cannot read config_file '"},
      {"[step.a]\ncall = \"a/b\"\nconfig_file = \"data/chapters\"\n",
       "p.toml:3:15: config_file '"},
      {"[step.a]\ncall = \"a/b\"\nconfig = \"n={item}\"\n",
       "p.toml:3:10: config 'n={item}' uses a placeholder, but step 'a' is not an array step"},
      {"[step.a]\ncall = \"a/b\"\ninputs = [{ from = \"data/words.txt\", label = \"{index}\" }]\n",
       "p.toml:3:11: label '{index}' uses a placeholder, but step 'a' is not an array step"},
      {"[step.a]\ncall = \"a/b\"\ninputs = [\"no/such.txt\"]\n", "p.toml:3:11: no such local file or directory '"},
      {"[step.s]\ncall = \"a/b\"\noutputs = [\"x\", \"y\"]\ncollect = \"o.txt\"\n",
       "p.toml:4:11: step 's' has 2 outputs: collect = { OUTPUT = \"path\" } names which"},
      {"[step.s]\ncall = \"a/b\"\n[step.t]\ncall = \"a/b\"\ninputs = [\"@s.nosuch\"]\n",
       "p.toml:5:11: step 's' has no output 'nosuch' (its outputs: out)"},
      {"[step.s]\ncall = \"a/b\"\noutputs = [\"t/\"]\n[step.t]\ncall = \"a/b\"\ninputs = [{ from = \"@s\", stream = true }]\n",
       "p.toml:6:20: '@s' is a directory output; a stream carries bytes"},
      {"[step.s]\nrange = \"1-3\"\ncall = \"a/b\"\n[step.t]\nrange = \"1-2\"\ncall = \"a/b\"\ninputs = [\"@s\"]\n",
       "p.toml:7:11: step 't' has 2 items but reads array step 's', which has 3"},
      {gen + "[step.a]\ncall = \"a/b\"\ninputs = [{ from = \"@gen\", stream = true }]\nretries = 1\n",
       "p.toml:4:7: step 'a' is joined to other steps by stream edges, so it cannot have retries"},
  });
}

TEST(PipelineCallPlanTest, InputsKeepTheirOrderLabelsAndTheConfigBytes) {
  Workspace ws;
  // Bytes no text config could hold.
  writeFile(ws.dir / "config.bin", std::string("\x00\x01 binary\n", 10));
  auto plan = planText(ws.dir,
                       "[step.gen]\ncommand = [\"seq\", \"3\"]\nstdout = true\n"
                       "[step.halves]\ncall = \"testfn/split\"\ninputs = [\"data/words.txt\"]\n"
                       "outputs = [\"head\", \"tail\"]\ncollect = { tail = \"out/tail.txt\" }\n"
                       "[step.mix]\ncall = \"testfn/echo\"\n"
                       "inputs = [\"@halves.tail\", { from = \"@gen\", label = \"numbers\" }, \"data/chapters\", "
                       "{ from = \"@halves.head\" }]\n"
                       "config_file = \"config.bin\"\noutputs = [\"text\", \"tree/\"]\ncpus = 3\nretries = 2\n"
                       "time_limit = \"5s\"\nexpected = \"2m\"\nallow_failure = true\n"
                       "[step.plain]\ncall = \"testfn/wordcount\"\ninputs = [\"@mix.text\"]\nconfig = \"a b\"\n"
                       "collect = \"out/count.txt\"\n"
                       "[step.none]\ncall = \"testfn/pid\"\n");
  auto& halves = taskNamed(plan, "halves");
  EXPECT_EQ(halves.kind, PlannedTask::Kind::CALL);
  EXPECT_EQ(halves.function, "testfn/split");
  ASSERT_EQ(halves.outputs.size(), 2u);
  EXPECT_EQ(halves.outputs[1].name, "tail");
  EXPECT_EQ(halves.outputs[1].collect, (ws.dir / "out/tail.txt").string());
  EXPECT_EQ(halves.outputs[0].collect, "");

  auto& mix = taskNamed(plan, "mix");
  EXPECT_EQ(sources(plan, mix), (Texts{"halves.tail", "gen.stdout", (ws.dir / "data/chapters").string(), "halves.head"}));
  EXPECT_EQ(mix.inputs[1].label, "numbers");
  EXPECT_EQ(mix.inputs[0].label, "");
  EXPECT_TRUE(mix.inputs[2].localIsDir);
  for (auto& in : mix.inputs) {
    EXPECT_EQ(in.path, "");
    EXPECT_FALSE(in.isStdin || in.stream || in.arg || in.writable);
  }
  EXPECT_EQ(mix.config, std::string("\x00\x01 binary\n", 10));
  EXPECT_EQ(mix.configFile, (ws.dir / "config.bin").string());
  ASSERT_EQ(mix.outputs.size(), 2u);
  EXPECT_EQ(mix.outputs[0].kind, ObjectKind::BLOB);
  EXPECT_EQ(mix.outputs[1].name, "tree");
  EXPECT_EQ(mix.outputs[1].kind, ObjectKind::DIR);
  EXPECT_EQ(mix.cpus, 3u);
  EXPECT_EQ(mix.retries, 2u);
  EXPECT_EQ(mix.timeLimit, std::chrono::seconds(5));
  EXPECT_TRUE(mix.allowFailure);

  auto& plain = taskNamed(plan, "plain");
  EXPECT_EQ(plain.config, "a b");
  EXPECT_EQ(plain.configFile, "");
  EXPECT_FALSE(plain.cpus.has_value());
  ASSERT_EQ(plain.outputs.size(), 1u);  // one, named out, by default
  EXPECT_EQ(plain.outputs[0].name, "out");
  EXPECT_EQ(plain.outputs[0].kind, ObjectKind::BLOB);
  EXPECT_EQ(plain.outputs[0].collect, (ws.dir / "out/count.txt").string());
  auto& none = taskNamed(plan, "none");
  EXPECT_TRUE(none.inputs.empty());
  EXPECT_EQ(none.config, "");

  auto text = describePlan(plan);
  EXPECT_NE(text.find("mix (call) cpus=3 retries=2 allow_failure time_limit=5s expected=2m\n"
                      "  call    testfn/echo\n"
                      "  config  10 bytes from local file " + (ws.dir / "config.bin").string() + "\n"
                      "  input   0 <- halves.tail\n"
                      "  input   1 (label numbers) <- gen.stdout\n"
                      "  input   2 <- local dir " + (ws.dir / "data/chapters").string() + "\n"
                      "  input   3 <- halves.head\n"
                      "  output  text\n"
                      "  output  tree (dir)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("plain (call)\n  call    testfn/wordcount\n  config  'a b'\n  input   0 <- mix.text\n"
                      "  output  out => " + (ws.dir / "out/count.txt").string() + "\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("none (call)\n  call    testfn/pid\n  output  out\n"), std::string::npos) << text;
}

TEST(PipelineCallPlanTest, ArraysOfCallsZipGatherAndSubstituteTheirPlaceholders) {
  Workspace ws;
  writeFile(ws.dir / "configs" / "ann.txt", "config of ann");
  writeFile(ws.dir / "configs" / "bob.txt", "config of bob");
  auto plan = planText(ws.dir,
                       "[step.greet]\nvalues = [\"ann\", \"bob\"]\nshell = \"echo hello {item}\"\nstdout = true\n"
                       "[step.count]\nvalues = [\"ann\", \"bob\"]\ncall = \"testfn/wordcount\"\n"
                       "inputs = [\"@greet\", { from = \"data/words.txt\", label = \"{item}-{index}\" }]\n"
                       "config = \"for {item}\"\ncollect = \"out/{item}.txt\"\n"
                       "[step.filed]\nvalues = [\"ann\", \"bob\"]\ncall = \"testfn/echo\"\n"
                       "config_file = \"configs/{item}.txt\"\n"
                       "[step.shout]\nvalues = [\"x\", \"y\"]\ncommand = [\"tr\", \"a-z\", \"A-Z\"]\nstdin = \"@count\"\n"
                       "stdout = true\n"
                       "[step.all]\ncall = \"testfn/echo\"\ninputs = [{ from = \"@count\", label = \"{name}\" }, \"@greet\"]\n");
  // Zip: item i reads item i.
  auto& count1 = taskNamed(plan, "count[1]");
  EXPECT_EQ(sources(plan, count1), (Texts{"greet[1].stdout", (ws.dir / "data/words.txt").string()}));
  EXPECT_EQ(count1.inputs[1].label, "bob-1");
  EXPECT_EQ(count1.config, "for bob");
  EXPECT_EQ(count1.outputs[0].collect, (ws.dir / "out/bob.txt").string());
  EXPECT_EQ(taskNamed(plan, "filed[0]").config, "config of ann");
  EXPECT_EQ(taskNamed(plan, "filed[1]").config, "config of bob");
  EXPECT_EQ(taskNamed(plan, "filed[1]").configFile, (ws.dir / "configs/bob.txt").string());
  // A program array reading a call array, item by item.
  EXPECT_EQ(sources(plan, taskNamed(plan, "shout[0]")), (Texts{"count[0].out"}));
  // A plain call takes all items of each array step it reads, as inputs in
  // item order; placeholders in a label name the producing item.
  auto& all = taskNamed(plan, "all");
  EXPECT_EQ(sources(plan, all), (Texts{"count[0].out", "count[1].out", "greet[0].stdout", "greet[1].stdout"}));
  EXPECT_EQ(all.inputs[0].label, "ann");
  EXPECT_EQ(all.inputs[1].label, "bob");
  EXPECT_EQ(all.inputs[2].label, "");
}

TEST(PipelineCallPlanTest, StreamEdgesGoIntoAndOutOfCalls) {
  Workspace ws;
  auto plan = planText(ws.dir,
                       "[step.gen]\ncommand = [\"seq\", \"10\"]\nstdout = true\n"
                       "[step.count]\ncall = \"testfn/wordcount\"\ninputs = [{ from = \"@gen\", stream = true }]\n"
                       "[step.shout]\ncommand = [\"cat\"]\nstdin = { from = \"@count\", stream = true }\nstdout = true\n"
                       "[step.twice]\ncall = \"testfn/wordcount\"\ninputs = [{ from = \"@count\", stream = true, label = \"n\" }]\n"
                       "[step.later]\ncall = \"testfn/echo\"\ninputs = [\"@gen\"]\n"
                       "[step.dir]\ncall = \"testfn/tree\"\ninputs = [\"@count\"]\noutputs = [\"t/\"]\n");
  EXPECT_EQ(taskNamed(plan, "gen").outputs[0].kind, ObjectKind::STREAM);
  auto& count = taskNamed(plan, "count");
  EXPECT_EQ(count.outputs[0].kind, ObjectKind::STREAM);  // shout and twice read it live
  EXPECT_TRUE(count.inputs[0].stream);
  EXPECT_EQ(sources(plan, count), (Texts{"gen.stdout"}));
  auto& shout = taskNamed(plan, "shout");
  EXPECT_TRUE(shout.inputs[0].stream && shout.inputs[0].isStdin);
  auto& twice = taskNamed(plan, "twice");
  EXPECT_TRUE(twice.inputs[0].stream);
  EXPECT_EQ(twice.inputs[0].label, "n");
  // A call that reads a stream without stream = true gets it once it has
  // ended, through the stream's stored copy, as a program would.
  EXPECT_EQ(sources(plan, taskNamed(plan, "later")), (Texts{"gen.stdout.stored.out"}));
  EXPECT_FALSE(taskNamed(plan, "later").inputs[0].stream);
  EXPECT_EQ(sources(plan, taskNamed(plan, "dir")), (Texts{"count.out.stored.out"}));
  auto text = describePlan(plan);
  EXPECT_NE(text.find("count (call)\n  call    testfn/wordcount\n  input   0 <- gen.stdout (stream)\n"
                      "  output  out (stream)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  input   stdin <- count.out (stream)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  input   0 (label n) <- count.out (stream)\n"), std::string::npos) << text;

  // Array to array, item by item, as for programs.
  plan = planText(ws.dir,
                  "[step.g]\nrange = \"1-2\"\ncommand = [\"seq\", \"{item}\"]\nstdout = true\n"
                  "[step.h]\nrange = \"1-2\"\ncall = \"testfn/wordcount\"\ninputs = [{ from = \"@g\", stream = true }]\n");
  EXPECT_EQ(sources(plan, taskNamed(plan, "h[1]")), (Texts{"g[1].stdout"}));
  EXPECT_TRUE(taskNamed(plan, "h[1]").inputs[0].stream);
}

TEST(PipelineCallCliTest, DryRunShowsCallStepsAndSubmitsNothing) {
  Workspace ws;
  for (auto& example : docExamples()) {
    if (example.file == "functions.toml") writeFile(ws.dir / example.file, example.text);
  }
  auto run = squall(ws.dir, "127.0.0.1:1", "run --dry-run functions.toml");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out.rfind("pipeline functions: 6 steps, 8 tasks\n", 0), 0u) << run.out;
  // As docs/pipelines.md shows it.
  EXPECT_NE(run.out.find("summary (call)\n"
                         "  call    testfn/echo\n"
                         "  config  'per chapter, then the book'\n"
                         "  input   0 (label ch1.txt) <- chapter[0].out\n"
                         "  input   1 (label ch2.txt) <- chapter[1].out\n"
                         "  input   2 (label ch3.txt) <- chapter[2].out\n"
                         "  input   3 <- count.out\n"
                         "  output  out => " + (ws.dir / "out/functions/summary.txt").string() + "\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("chapter[1] (call)\n  call    testfn/wordcount\n  input   0 <- local file " +
                         (ws.dir / "data/chapters/ch2.txt").string() + "\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("keep (call)\n  call    testfn/tree\n  input   0 <- shout.stdout\n  output  tree (dir) => "),
            std::string::npos)
      << run.out;
  EXPECT_FALSE(fs::exists(ws.dir / "out"));
  // A bad call step: exit 2, nothing submitted (nothing listens on port 1).
  writeFile(ws.dir / "bad.toml", "[step.a]\ncall = \"testfn\"\n");
  run = squall(ws.dir, "127.0.0.1:1", "run bad.toml");
  EXPECT_EQ(run.status, 2);
  EXPECT_EQ(run.err, "squall run: bad.toml:2:8: step 'a': call \"testfn\" does not name a function: write "
                     "EXECUTOR/FUNCTION, e.g. \"text/wordcount\"\n");
}

// ---- call stages in squall run -c ----

TEST(PipelineCallCommandTest, ACallStageTakesItsWordsAsTheConfig) {
  auto stages = splitShellPipe("seq 3 | call testfn/echo  a 'b  c'\\ d \"e\\\"f\" # a comment | wc -l");
  ASSERT_EQ(stages.size(), 2u);  // the comment runs to the end of the line
  EXPECT_EQ(stages[0].function, "");
  EXPECT_EQ(stages[1].function, "testfn/echo");
  EXPECT_EQ(stages[1].config, "a b  c d e\"f");
  EXPECT_TRUE(stages[1].words.empty());  // a config, not local files
  EXPECT_EQ(splitShellPipe("call testfn/pid")[0].config, "");
  EXPECT_EQ(splitShellPipe("call testfn/echo '{\"k\": 1}'")[0].config, "{\"k\": 1}");
}

TEST(PipelineCallCommandTest, BadCallStagesNameTheColumn) {
  expectLineErrors({
      {"seq 3 | call", "-c: column 9: stage 2 calls no function: write call EXECUTOR/FUNCTION [CONFIG...]"},
      {"call testfn", "-c: column 6: stage 1: call \"testfn\" does not name a function"},
      {"seq 3 | call a/b/c x", "-c: column 14: stage 2: call \"a/b/c\" has a bad function name 'b/c'"},
      {"call testfn/echo $HOME",
       "-c: column 18: stage 1 calls a function, which no shell runs: '$' would not be expanded (quote it, '\\$', "
       "to pass it on)"},
      {"call testfn/echo \"a `b`\"", "-c: column 21: stage 1 calls a function, which no shell runs: '`' would not be "
                                    "expanded (write '\\`' to pass it on)"},
      {"call testfn/echo < /etc/hosts", "-c: column 18: stage 1 calls a function, which no shell runs: its input is "
                                        "the stage before it (or --stdin) and its output goes to the stage after it, "
                                        "so a redirection does not apply"},
      {"seq 3 | call testfn/echo 2>/dev/null", "-c: column 27: stage 2 calls a function, which no shell runs: its input"},
      {"call testfn/echo '{\"k\": 1}' (x)", "-c: column 29: stage 1 calls a function, which no shell runs: quote '(' to "
                                           "pass it on"},
  });
}

TEST(PipelineCallCommandTest, ACallStageReadsTheStageBeforeAndFeedsTheNext) {
  CommandOptions options;
  options.env = {{"LC_ALL", "C"}};
  options.cpus = 2;
  auto plan = planCommand(splitShellPipe("seq 3 | call testfn/wordcount per line | cat"), options);
  ASSERT_EQ(plan.tasks.size(), 3u);
  auto& call = plan.tasks[1];
  EXPECT_EQ(call.kind, PlannedTask::Kind::CALL);
  EXPECT_EQ(call.name, "2-testfn.wordcount");
  EXPECT_EQ(call.function, "testfn/wordcount");
  EXPECT_EQ(call.config, "per line");
  EXPECT_EQ(call.cpus, 2u);
  EXPECT_TRUE(call.env.empty());
  ASSERT_EQ(call.inputs.size(), 1u);
  EXPECT_EQ(call.inputs[0].task, 0u);
  EXPECT_TRUE(call.inputs[0].stream);
  EXPECT_FALSE(call.inputs[0].isStdin);
  ASSERT_EQ(call.outputs.size(), 1u);
  EXPECT_EQ(call.outputs[0].kind, ObjectKind::STREAM);  // cat reads it live
  EXPECT_EQ(describePlan(plan),
            "command command: 3 stages, 3 tasks\n"
            "1-seq (execute) cpus=2\n"
            "  run     sh -c 'seq 3'\n"
            "  env     LC_ALL=C\n"
            "  output  stdout (stream) <- stdout\n"
            "2-testfn.wordcount (call) cpus=2\n"
            "  call    testfn/wordcount\n"
            "  config  'per line'\n"
            "  input   0 <- 1-seq.stdout (stream)\n"
            "  output  out (stream)\n"
            "3-cat (execute) cpus=2\n"
            "  run     sh -c cat\n"
            "  env     LC_ALL=C\n"
            "  input   stdin <- 2-testfn.wordcount.out (stream)\n"
            "  output  stdout (stream) <- stdout => standard output\n");

  // Alone, fed --stdin: a file in, its output (read by no stage) a blob.
  options = CommandOptions();
  options.stdinFile = "/tmp/in.txt";
  options.outputFile = "/tmp/out.txt";
  plan = planCommand(splitShellPipe("call testfn/wordcount"), options);
  ASSERT_EQ(plan.tasks.size(), 1u);
  EXPECT_EQ(plan.tasks[0].inputs.at(0).localPath, "/tmp/in.txt");
  EXPECT_FALSE(plan.tasks[0].inputs.at(0).stream);
  EXPECT_EQ(plan.tasks[0].outputs[0].kind, ObjectKind::BLOB);
  EXPECT_EQ(plan.tasks[0].outputs[0].collect, "/tmp/out.txt");
  // Without --stdin a first call stage has no input.
  EXPECT_TRUE(planCommand(splitShellPipe("call testfn/pid | cat"), CommandOptions()).tasks[0].inputs.empty());
}

// ---- against a cluster (its governors keep testfn warm) ----

TEST_F(PipelineRunTest, CallStepsMixWithProgramsAndTheirOutputsAreCollected) {
  Workspace ws;
  writeFile(ws.dir / "config.txt", "from a file\n");
  writeFile(ws.dir / "calls.toml",
            "[step.gen]\nshell = \"printf 'one two three four'\"\nstdout = true\n"
            "[step.count]\ncall = \"testfn/wordcount\"\ninputs = [\"@gen\"]\ncollect = \"out/count.txt\"\n"
            "[step.halves]\ncall = \"testfn/split\"\ninputs = [\"@gen\"]\noutputs = [\"head\", \"tail\"]\n"
            "[step.shout]\ncommand = [\"tr\", \"a-z\", \"A-Z\"]\nstdin = \"@halves.tail\"\nstdout = true\n"
            "[step.keep]\ncall = \"testfn/tree\"\ninputs = [\"@shout\"]\noutputs = [\"t/\"]\ncollect = \"out/tree\"\n"
            "[step.list]\ncall = \"testfn/list\"\ninputs = [\"@keep\"]\ncollect = \"out/list.txt\"\n"
            "[step.report]\ncall = \"testfn/echo\"\n"
            "inputs = [{ from = \"@halves.head\", label = \"head\" }, \"@count\", { from = \"data/words.txt\", "
            "label = \"words\" }]\n"
            "config_file = \"config.txt\"\ncollect = \"out/report.txt\"\n");
  auto result = run(ws.dir, "run calls.toml");
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("done calls: 7 finished, 0 failed"), std::string::npos) << result.out;
  auto out = ws.dir / "out";
  EXPECT_EQ(slurp(out / "count.txt"), "4");
  EXPECT_EQ(slurp(out / "tree" / "copy.txt"), "HREE FOUR");  // the second half of 18 bytes, shouted
  EXPECT_EQ(slurp(out / "list.txt"), "copy.txt\n");
  EXPECT_EQ(slurp(out / "report.txt"),
            "head=one two t\n=4\nwords=pear\napple\nfig\nbanana\napple\n\nfrom a file\n");
}

TEST_F(PipelineRunTest, AnArrayCallStepRunsOneCallPerItem) {
  Workspace ws;
  writeFile(ws.dir / "array.toml",
            "[step.count]\nfiles = \"data/chapters/*.txt\"\ncall = \"testfn/echo\"\n"
            "inputs = [{ from = \"{item}\", label = \"{stem}\" }]\nconfig = \"#{index}\"\n"
            "collect = \"out/{stem}.txt\"\n"
            "[step.words]\nfiles = \"data/chapters/*.txt\"\ncall = \"testfn/wordcount\"\ninputs = [\"{item}\"]\n"
            "[step.sum]\nshell = \"for f in n/*; do cat $f; echo; done | awk '{s += $1} END {print s}'\"\n"
            "inputs = { \"n/{index}\" = \"@words\" }\nstdout = true\ncollect = \"out/sum.txt\"\n");
  auto result = run(ws.dir, "run array.toml");
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_EQ(slurp(ws.dir / "out" / "ch1.txt"), "ch1=Call me Ishmael.\n\n#0");
  EXPECT_EQ(slurp(ws.dir / "out" / "ch3.txt"), "ch3=Happy families are all alike.\n\n#2");
  EXPECT_EQ(slurp(ws.dir / "out" / "sum.txt"), "16\n");
}

TEST_F(PipelineRunTest, AFailingFunctionFailsTheRunWithItsMessage) {
  Workspace ws;
  struct Case {
    std::string pipeline;
    std::string message;
  };
  const Case cases[] = {
      {"[step.bad]\ncall = \"testfn/fail\"\nconfig = \"no good\"\n"
       "[step.after]\ncall = \"testfn/wordcount\"\ninputs = [\"@bad\"]\ncollect = \"after.txt\"\n",
       "(bad) failed: function testfn/fail failed: asked to fail: no good"},
      // The number of outputs is the function's: refused at submit, naming it.
      {"[step.halves]\ncall = \"testfn/split\"\ninputs = [\"data/words.txt\"]\n",
       "function testfn/split makes 2 output(s) (head, tail); the task has 1"},
      {"[step.a]\ncall = \"testfn/nosuch\"\n", "no governor offers the function testfn/nosuch"},
  };
  for (auto& c : cases) {
    writeFile(ws.dir / "fail.toml", c.pipeline);
    auto result = run(ws.dir, "run fail.toml");
    EXPECT_EQ(result.status, 1) << c.pipeline << result.out << result.err;
    EXPECT_NE(result.err.find(c.message), std::string::npos) << c.pipeline << "\n" << result.err;
  }
  EXPECT_FALSE(fs::exists(ws.dir / "after.txt"));
  // allow_failure: the run goes on and succeeds.
  writeFile(ws.dir / "allowed.toml",
            "[step.bad]\ncall = \"testfn/fail\"\nallow_failure = true\n"
            "[step.fine]\ncall = \"testfn/wordcount\"\ninputs = [\"data/words.txt\"]\ncollect = \"fine.txt\"\n");
  auto result = run(ws.dir, "run allowed.toml");
  EXPECT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("FAILED bad"), std::string::npos) << result.out;
  EXPECT_EQ(slurp(ws.dir / "fine.txt"), "5");
}

TEST_F(PipelineRunTest, CommandLineCallStages) {
  Workspace ws;
  auto result = run(ws.dir, "run -c 'call testfn/wordcount' --stdin data/words.txt");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "5");
  result = run(ws.dir, "run -c 'call testfn/echo  with  \"a config\"' --stdin data/words.txt -o out/echo.txt");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(slurp(ws.dir / "out" / "echo.txt"), "=pear\napple\nfig\nbanana\napple\n\nwith a config");
  // A failing function: exit 1 with its message.
  result = run(ws.dir, "run -c 'call testfn/fail oh no'");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find("squall run: stage 1 (1-testfn.fail) failed: function testfn/fail failed: asked to fail: "
                            "oh no"),
            std::string::npos)
      << result.err;
  // A call stage in the middle of a streamed pipe: it reads the stage
  // before as that is written and writes the next one's input.
  result = run(ws.dir, "run -c 'cat | call testfn/upper | sort -u' --stdin data/words.txt");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "APPLE\nBANANA\nFIG\nPEAR\n");
  result = run(ws.dir, "run -c 'call testfn/lines | head -n 2'");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "line 1\nline 2\n");
  // A function of two outputs cannot be a stage: the server says why.
  result = run(ws.dir, "run -c 'call testfn/split' --stdin data/words.txt");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("function testfn/split makes 2 output(s) (head, tail); the task has 1"), std::string::npos)
      << result.err;
}

// ---- actors: [actor.NAME] and method steps ----

TEST(PipelineActorParseTest, BadActorsAndMethodStepsNameThePlace) {
  Workspace ws;
  const std::string tally = "[actor.t]\ntype = \"testfn/Tally\"\n";
  expectPlanErrors(ws.dir, {
      {"[actor.t]\nconfig = \"1\"\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:1:8: actor 't' has no type: give it type = \"EXECUTOR/Type\""},
      {"[actor.t]\ntype = \"testfn/Ta.lly\"\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:2:8: actor 't': type \"testfn/Ta.lly\" does not name an actor type: write EXECUTOR/Type"},
      {"[actor.t]\ntype = \"testfn\"\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:2:8: actor 't': type \"testfn\" does not name an actor type"},
      {tally + "typo = 1\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:3:1: unknown key 'typo' in actor 't' (did you mean 'type'?)"},
      {tally, "p.toml: no steps: add at least one [step.NAME] table"},
      {"actor = 3\n[step.a]\nshell = \"true\"\n",
       "p.toml:1:9: 'actor' must hold one table per actor, written [actor.NAME] (it is an integer)"},
      {tally + "[step.t]\nmethod = \"t.add\"\n",
       "p.toml:3:7: 't' names both a step and an actor (line 1); steps and actors share one set of names"},
      {tally + "[step.a]\nmethod = \"u.add\"\n",
       "p.toml:4:10: step 'a' calls a method of 'u', which is no actor of this file (did you mean 't'?)"},
      {"[step.x]\nshell = \"true\"\n[step.a]\nmethod = \"x.add\"\n",
       "p.toml:4:10: step 'a' calls a method of 'x', which is a step, not an actor (declare it as [actor.x])"},
      {tally + "[step.a]\nmethod = \"tadd\"\n",
       "p.toml:4:10: step 'a': method \"tadd\" does not name an actor's method: write ACTOR.METHOD"},
      {tally + "[step.a]\nmethod = \"t.a.b\"\n", "p.toml:4:10: step 'a': method \"t.a.b\" has a bad method name 'a.b'"},
      {tally + "[step.a]\nmethod = \"t.add\"\ncall = \"testfn/echo\"\n",
       "p.toml:5:1: step 'a' has both 'method' and 'call'; a step does one thing"},
      {tally + "[step.a]\nmethod = \"t.add\"\ncpus = 2\n",
       "p.toml:5:1: 'cpus' does not apply to a method step; a method runs on what its actor holds"},
      {tally + "[step.a]\nmethod = \"t.add\"\nretries = 2\n",
       "p.toml:5:1: 'retries' does not apply to a method step; a call running when its actor's process died is "
       "retried by the actor's max_call_retries"},
      {tally + "[step.a]\nmethod = \"t.add\"\ntime_limit = 5\n", "p.toml:5:1: 'time_limit' does not apply to a method step"},
      {tally + "[step.a]\nmethod = \"t.add\"\ninputs = { x = \"data/words.txt\" }\n",
       "p.toml:5:10: 'inputs' of method step 'a' must be a list [SOURCE, ...]"},
      {tally + "[step.a]\nmethod = \"t.add\"\n[step.b]\nshell = \"cat\"\nstdin = \"@t\"\n",
       "p.toml:7:9: '@t' names actor 't', which has no outputs: read a method step's (method = \"t.METHOD\")"},
      {tally + "[step.a]\nmethod = \"t.add\"\n[step.b]\nshell = \"cat\"\nstdin = { from = \"@a\", stream = true }\n",
       "p.toml:7:18: '@a' is made by method step 'a'; an actor's methods write blobs and dirs, not streams"},
      {tally + "[step.a]\nmethod = \"t.add\"\ninputs = [{ from = \"data/words.txt\", stream = true }]\n",
       "p.toml:5:47: step 'a': a method reads its inputs once they have ended (drop stream = true)"},
      {"[actor.t]\ntype = \"testfn/Tally\"\ninputs = [{ from = \"@a\", stream = true }]\n"
       "[step.a]\nshell = \"echo 1\"\nstdout = true\n",
       "p.toml:3:35: actor 't': a constructor reads its inputs once they have ended (drop stream = true)"},
      {tally + "inputs = [\"@a\"]\n[step.a]\nmethod = \"t.add\"\n", "p.toml:4:7: steps form a cycle: t -> a -> t"},
      {tally + "named = \"a b\"\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:3:9: actor 't': named \"a b\": use 1 to 128 letters"},
      {tally + "max_restarts = -1\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:3:16: 'actor.t.max_restarts' must be between 0 and 1000 (got -1)"},
      {tally + "config = \"1\"\nconfig_file = \"data/words.txt\"\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:4:15: actor 't' has both 'config' and 'config_file'; give its config one way"},
      {tally + "resources = { gpus = 0 }\n[step.a]\nmethod = \"t.add\"\n", "p.toml:3:22: 'actor.t.resources.gpus' is 0"},
      {tally + "config = \"{item}\"\n[step.a]\nmethod = \"t.add\"\n",
       "p.toml:3:10: config '{item}' uses a placeholder, but an actor is one instance, not an array"},
  });
}

TEST(PipelineActorPlanTest, AnActorComesBeforeItsCallsWhichKeepTheRunsOrder) {
  Workspace ws;
  auto text = docExampleText("actors.toml");
  ASSERT_FALSE(text.empty());
  auto plan = planText(ws.dir, text, "actors.toml");
  EXPECT_EQ(plan.steps, 3u);
  EXPECT_EQ(plan.actors, 1u);
  auto& tally = taskNamed(plan, "tally");
  EXPECT_EQ(tally.kind, PlannedTask::Kind::ACTOR);
  EXPECT_EQ(tally.function, "testfn/Tally");
  EXPECT_EQ(tally.config, "100");
  EXPECT_TRUE(tally.outputs.empty());
  // Calls in item order, then log; each names its actor's task.
  std::vector<std::string> calls;
  for (size_t i = 0; i < plan.tasks.size(); i++) {
    if (plan.tasks[i].actor == SIZE_MAX) continue;
    EXPECT_EQ(plan.tasks[plan.tasks[i].actor].name, "tally");
    EXPECT_LT(plan.tasks[i].actor, i);
    calls.push_back(plan.tasks[i].name + " " + plan.tasks[i].method);
  }
  EXPECT_EQ(calls, (Texts{"add[0] add", "add[1] add", "add[2] add", "log log"}));
  EXPECT_EQ(sources(plan, taskNamed(plan, "add[1]")), Texts{"words[1].out"});

  // A method step before, in the file, the step it reads from comes after
  // it; an actor reads other steps' outputs as a call does.
  plan = planText(ws.dir,
                  "[actor.t]\ntype = \"testfn/Tally\"\ninputs = [\"@start\"]\nmax_restarts = 2\nnamed = \"shared\"\n"
                  "cpus = 2\nresources = { gpus = 1 }\n"
                  "[step.late]\nmethod = \"t.add\"\ninputs = [\"@gen\"]\n"
                  "[step.early]\nmethod = \"t.add\"\nconfig = \"5\"\noutputs = [\"total\"]\n"
                  "[step.start]\nshell = \"echo 1\"\nstdout = true\n"
                  "[step.gen]\nshell = \"echo 2\"\nstdout = true\n");
  std::vector<std::string> order;
  for (auto& task : plan.tasks) order.push_back(task.name);
  EXPECT_EQ(order, (Texts{"start", "t", "early", "gen", "late"}));
  // File order stands even where a step's inner key has a later step's
  // name (the parser once took that key's position for the step's).
  auto keyed = planText(ws.dir,
                        "[step.gen]\nshell = \"echo 1 > total\"\noutputs = { total = \"total\" }\n"
                        "[actor.t]\ntype = \"testfn/Tally\"\n"
                        "[step.add]\nmethod = \"t.add\"\ninputs = [\"@gen.total\"]\n"
                        "[step.total]\nmethod = \"t.log\"\n");
  order.clear();
  for (auto& task : keyed.tasks) order.push_back(task.name);
  EXPECT_EQ(order, (Texts{"gen", "t", "add", "total"}));
  auto& t = taskNamed(plan, "t");
  EXPECT_EQ(sources(plan, t), Texts{"start.stdout"});
  EXPECT_EQ(t.maxRestarts, 2u);
  EXPECT_EQ(t.actorName, "shared");
  EXPECT_EQ(t.cpus, std::optional<uint32_t>(2));
  EXPECT_EQ(t.resources, (std::vector<std::pair<std::string, std::string>>{{"gpus", "1"}}));
  auto described = describePlan(plan);
  EXPECT_EQ(described.rfind("pipeline p: 4 steps, 1 actor, 5 tasks\n", 0), 0u) << described;
  EXPECT_NE(described.find("t (actor) cpus=2 gpus=1\n  actor   testfn/Tally named shared max_restarts=2\n"
                           "  input   0 <- start.stdout\n"),
            std::string::npos)
      << described;
  EXPECT_NE(described.find("early (method)\n  method  t.add\n  config  5\n  output  total\n"), std::string::npos)
      << described;
}

// ---- actors against the cluster ----

TEST_F(PipelineRunTest, ANamedActorOutlivesItsRunAndTheCommandLineReachesIt) {
  Workspace ws;
  auto name = "shared-" + std::to_string(getpid());
  writeFile(ws.dir / "named.toml", "[actor.t]\ntype = \"testfn/Tally\"\nnamed = \"" + name +
                                       "\"\nconfig = \"5\"\n[step.a]\nmethod = \"t.add\"\nconfig = \"1\"\n"
                                       "collect = \"a.txt\"\n");
  auto result = run(ws.dir, "run named.toml");
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("done named: 1 finished, 0 failed, 0 skipped, 0 not run"), std::string::npos)
      << result.out;
  EXPECT_EQ(slurp(ws.dir / "a.txt"), "6");
  // The run is over; its actor is not. A second run cannot take the name.
  result = run(ws.dir, "submit --method " + name + ".add --config 10");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "16");
  result = run(ws.dir, "run named.toml");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("an actor named '" + name + "' lives already"), std::string::npos) << result.err;
  // A method that throws fails its call, not the actor: it is another
  // session's, and lives on for its other users.
  result = run(ws.dir, "submit --method " + name + ".add --config x");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("stoll"), std::string::npos) << result.err;
  result = run(ws.dir, "submit --method " + name + ".log --output log.txt");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(slurp(ws.dir / "log.txt"), "1\n10\n");
  result = run(ws.dir, "submit --kill-actor " + name);
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "actor " + name + " killed\n");
  result = run(ws.dir, "submit --method " + name + ".log");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("no live actor is named '" + name + "' (the last one, task "), std::string::npos)
      << result.err;
  EXPECT_NE(result.err.find(" ended: killed)"), std::string::npos) << result.err;

  // Started from the command line, with a constructor input.
  writeFile(ws.dir / "seven.txt", "7");
  result = run(ws.dir, "submit --actor testfn/Tally --name cli." + name + " --input seven.txt");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out.rfind("actor cli." + name + " (testfn/Tally) submitted: task ", 0), 0u) << result.out;
  result = run(ws.dir, "submit --method cli." + name + ".add --config 3");
  EXPECT_EQ(result.out, "10") << result.err;
  result = run(ws.dir, "submit --method cli." + name + ".nope");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("actor type testfn/Tally has no method nope"), std::string::npos) << result.err;
  EXPECT_EQ(run(ws.dir, "submit --kill-actor cli." + name).status, 0);

  // A constructor that throws: the next call says why.
  result = run(ws.dir, "submit --actor testfn/Tally --name broken-" + name + " --config x");
  ASSERT_EQ(result.status, 0) << result.err;
  // The actor fails once its constructor ran; until then the call may
  // still find it (and fail with it): either way the reason is given.
  result = run(ws.dir, "submit --method broken-" + name + ".add --config 1");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("its constructor failed: stoll"), std::string::npos) << result.err;

  // What the command line refuses, saying why.
  const std::pair<std::string, std::string> refused[] = {
      {"--actor testfn/Tally", "--actor needs --name NAME"},
      {"--actor testfn/Tally --name x --output o.txt", "--actor: an actor has no outputs (its methods have)"},
      {"--actor testfn/Nope --name nope-" + name, "no governor offers the actor type testfn/Nope"},
      {"--method tally", "--method 'tally' is not NAME.METHOD"},
      {"--method " + name + ".add --input seven.txt", "--method: a named actor's method reads no files from here"},
      {"--method " + name + ".add --cpus 2", "--method: a method runs on what its actor holds"},
      {"--method x.add --call testfn/echo", "give one of --call, --actor, --method and --kill-actor"},
      {"--max-restarts 2 --call testfn/echo", "--max-restarts and --max-call-retries are for --actor"},
      {"--kill-actor nobody-" + name, "no live actor is named 'nobody-" + name + "'"},
      {"--actor testfn/Tally --name y -- true", "--actor runs no program: give none"},
  };
  for (auto& [args, message] : refused) {
    result = run(ws.dir, "submit " + args);
    EXPECT_EQ(result.status, 1) << args;
    EXPECT_NE(result.err.find(message), std::string::npos) << args << "\n" << result.err;
  }
}

TEST_F(PipelineRunTest, AnActorWhoseConstructorFailsFailsTheRunSayingWhy) {
  Workspace ws;
  writeFile(ws.dir / "bad.toml", "[actor.bad]\ntype = \"testfn/Tally\"\nconfig = \"not a number\"\n"
                                 "[step.a]\nmethod = \"bad.add\"\nconfig = \"1\"\ncollect = \"a.txt\"\n");
  auto result = run(ws.dir, "run bad.toml");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("(bad) failed: actor testfn/Tally (task "), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("its constructor failed: stoll"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find("FAILED bad: 0 finished"), std::string::npos) << result.out;
  EXPECT_FALSE(fs::exists(ws.dir / "a.txt"));
  // An actor type no governor offers: refused at submit.
  writeFile(ws.dir / "none.toml", "[actor.x]\ntype = \"testfn/Nope\"\n[step.a]\nmethod = \"x.add\"\n");
  result = run(ws.dir, "run none.toml");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("no governor offers the actor type testfn/Nope (offered: testfn/Tally)"),
            std::string::npos)
      << result.err;
}

}  // namespace
}  // namespace pipeline_test
}  // namespace squall
