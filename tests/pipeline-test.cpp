// Pipeline files: the parser and planner alone (no server), `squall run`'s
// checks that need no server (bad files, --dry-run), then whole runs against
// a real server with two governors. The examples in docs/pipelines.md are
// extracted and run here, so the documentation cannot drift from the code.
#include "pipeline-progress.h"
#include "pipeline-test-support.h"

namespace squall {
namespace pipeline_test {
namespace {

TEST(PipelineParseTest, SubstitutesOnlyItsPlaceholders) {
  ArrayItem item{"data/a.txt", "a.txt", "a"};
  EXPECT_EQ(substitutePlaceholders("awk '{print $1}' {item} {index} {name} {stem} {{item}} {nope}", &item, 7),
            "awk '{print $1}' data/a.txt 7 a.txt a {item} {nope}");
  EXPECT_TRUE(hasPlaceholder("x/{index}"));
  EXPECT_FALSE(hasPlaceholder("awk '{print $1}'"));
}

TEST(PipelineParseTest, PlansArraysSlicesAndGathers) {
  Workspace ws;
  auto text = docExampleText("wordfreq.toml");
  ASSERT_FALSE(text.empty());
  auto plan = planText(ws.dir, text, "wordfreq.toml");
  EXPECT_EQ(plan.name, "wordfreq");
  EXPECT_EQ(plan.steps, 6u);
  std::vector<std::string> names;
  for (auto& task : plan.tasks) names.push_back(task.name);
  // split, 4 slices of its parts dir, 4 counts, merge, report, top, save.
  ASSERT_EQ(plan.tasks.size(), 13u) << describePlan(plan);
  EXPECT_EQ(names[0], "split");
  EXPECT_NE(std::find(names.begin(), names.end(), "split.parts/part-03"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "count[3]"), names.end());
  auto& merge = *std::find_if(plan.tasks.begin(), plan.tasks.end(), [](auto& t) { return t.name == "merge"; });
  ASSERT_EQ(merge.inputs.size(), 4u);
  EXPECT_EQ(merge.inputs[2].path, "counts/2");
  EXPECT_EQ(plan.tasks[merge.inputs[2].task].name, "count[2]");
  auto& report = *std::find_if(plan.tasks.begin(), plan.tasks.end(), [](auto& t) { return t.name == "report"; });
  EXPECT_EQ(report.inputs.size(), 5u);
  EXPECT_EQ(report.outputs[0].collect, (ws.dir / "out/report").string());
  // Producers always come before their consumers.
  for (size_t i = 0; i < plan.tasks.size(); i++) {
    for (auto& in : plan.tasks[i].inputs) {
      if (in.task != SIZE_MAX) {
        EXPECT_LT(in.task, i) << plan.tasks[i].name;
      }
    }
  }
}

// [env] (issue 41: tasks get the governor's environment, so a tool of the
// caller's PATH needs the pipeline to say where tools are).
TEST(PipelineParseTest, ThePipelinesEnvGoesToEveryProgramStepAndAStepsOwnWins) {
  Workspace ws;
  auto plan = planText(ws.dir,
                       "[env]\nPATH = \"/opt/tools/bin:/usr/bin:/bin\"\nLANG = \"C\"\n"
                       "[step.a]\ncommand = [\"mytool\"]\n"
                       "[step.b]\nshell = \"echo $LANG\"\nenv = { LANG = \"de_DE.UTF-8\" }\n");
  ASSERT_EQ(plan.tasks.size(), 2u);
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(plan.tasks[0].env, (Env{{"PATH", "/opt/tools/bin:/usr/bin:/bin"}, {"LANG", "C"}}));
  EXPECT_EQ(plan.tasks[1].env, (Env{{"PATH", "/opt/tools/bin:/usr/bin:/bin"}, {"LANG", "de_DE.UTF-8"}}));
  EXPECT_NE(describePlan(plan).find("  env     PATH=/opt/tools/bin:/usr/bin:/bin\n  env     LANG=C\n"),
            std::string::npos)
      << describePlan(plan);
  EXPECT_EQ(planError(ws.dir, "env = \"PATH=/bin\"\n[step.a]\ncommand = [\"true\"]\n"),
            "p.toml:1:7: 'env' must be a table, not a string");
  EXPECT_EQ(planError(ws.dir, "[evn]\nPATH = \"/bin\"\n[step.a]\ncommand = [\"true\"]\n"),
            "p.toml:1:2: unknown key 'evn' (did you mean 'env'?); a pipeline has 'name', [env], [step.NAME] "
            "and [actor.NAME] tables");
}

TEST(PipelineParseTest, DocumentedErrorsAreTheOnesGiven) {
  Workspace ws;
  size_t checked = 0;
  for (auto& example : docExamples()) {
    if (example.error.empty()) continue;
    checked++;
    EXPECT_EQ(planError(ws.dir, example.text), "p.toml:" + example.error) << example.file;
  }
  EXPECT_GE(checked, 4u);
}

TEST(PipelineParseTest, BadFilesNameTheLineAndTheProblem) {
  Workspace ws;
  expectPlanErrors(ws.dir, {
      {"[step.a]\ncommand = [\"x\"\n", "p.toml:2:16: Error while parsing array"},  // TOML syntax (toml++'s words)
      {"nme = \"x\"\n[step.a]\nshell = \"true\"\n",
       "p.toml:1:1: unknown key 'nme' (did you mean 'name'?); a pipeline has 'name', [env], [step.NAME] and "
       "[actor.NAME] tables"},
      {"[[step]]\nshell = \"true\"\n", "p.toml:1:1: 'step' must hold one table per step, written [step.NAME]"},
      {"[step.a]\nshell = \"true\"\ncpus = \"two\"\n", "p.toml:3:8: 'step.a.cpus' must be an integer, not a string"},
      {"[step.a]\nshell = \"true\"\ncpus = 0\n", "p.toml:3:8: 'step.a.cpus' must be between 1 and 4096 (got 0)"},
      {"[step.a]\ncommand = [\"true\"]\nshell = \"true\"\n",
       "p.toml:3:1: step 'a' has both 'command' and 'shell'; a step does one thing"},
      {"[step.a]\nstdout = true\n", "p.toml:1:7: step 'a' has nothing to do"},
      {"[step.a]\ncommand = [\"cat\"]\nstdin = \"no/such.txt\"\n",
       "p.toml:3:9: no such local file or directory '"},
      {"[step.a]\ncommand = [\"true\"]\nstdout = true\n[step.b]\ncommand = [\"cat\"]\nstdin = \"@a.out\"\n",
       "p.toml:6:9: step 'a' has no output 'out' (its outputs: stdout)"},
      {"[step.a]\nshell = \"echo {item}\"\n", "p.toml:2:9: shell line 'echo {item}' uses a placeholder, but step 'a' is not an array step"},
      {"[step.a]\nrange = \"1-3\"\nshell = \"true\"\nstdout = true\ncollect = \"out.txt\"\n",
       "p.toml:5:11: step 'a' has 3 items; put {index}"},
      {"[step.a]\nrange = \"1-3\"\nshell = \"true\"\nstdout = true\n[step.b]\nrange = \"1-2\"\nshell = \"cat\"\nstdin = \"@a\"\n",
       "p.toml:8:9: step 'b' has 2 items but reads array step 'a', which has 3"},
      {"[step.a]\nrange = \"3-1\"\nshell = \"true\"\n", "p.toml:2:9: 'range' must be \"FIRST-LAST\""},
      {"[step.a]\nfiles = \"data/*.nothing\"\nshell = \"true\"\n",
       "p.toml:2:9: 'files' gives no items, so step 'a' would run nothing"},
      {"[step.a]\nload = \"relative.txt\"\n", "p.toml:2:8: load path 'relative.txt' must be absolute"},
      {"[step.a]\nshell = \"true\"\nstdout = true\n[step.b]\nslice = \"@a/x.txt\"\n",
       "p.toml:5:9: '@a/x.txt' takes a path inside output 'a.stdout', which is a file, not a directory"},
      {"[step.a]\nshell = \"true\"\ntime_limit = \"soon\"\n", "p.toml:3:14: 'step.a.time_limit' must be a duration"},
      {"[step.a]\nshell = \"true\"\nexpected = \"soon\"\n", "p.toml:3:12: 'step.a.expected' must be a duration"},
      {"[step.a]\nshell = \"true\"\ntime_limit = \"1e300s\"\n", "p.toml:3:14: 'step.a.time_limit' must be at most 365 days"},
      {"[step.a]\nshell = \"true\"\ntime_limit = \"infh\"\n", "p.toml:3:14: 'step.a.time_limit' must be at most 365 days"},
      {"[step.a]\nshell = \"true\"\ntime_limit = 31536001\n", "p.toml:3:14: 'step.a.time_limit' must be between 1 and 31536000"},
      {"[step.a]\nshell = \"true\"\ninputs = { \"../x\" = \"data/words.txt\" }\n",
       "p.toml:3:12: input: path '../x' contains '..' and would escape the sandbox"},
      {"[step.a]\nshell = \"true\"\noutputs = { o = \"../o\" }\n",
       "p.toml:3:17: output 'o': path '../o' contains '..' and would escape the sandbox"},
      {"[step.a]\nshell = \"true\"\noutputs = { o = \"/tmp/o\" }\n",
       "p.toml:3:17: output 'o': path '/tmp/o' is absolute"},
      {"[step.a]\nstore = { from = \"data/words.txt\" }\n", "p.toml:2:9: store needs 'path'"},
      {"[step.a]\nshell = \"true\"\nstdout = true\ncollect = \".\"\n", "p.toml:4:11: collect path '"},
      {"[step.a]\nshell = \"seq 3\"\nstdout = true\n[step.b]\nshell = \"cat s\"\n"
       "inputs = { s = { from = \"@a\", stream = true, writable = true } }\n",
       "p.toml:6:57: a stream edge cannot be writable: the program reads '@a' from a named pipe while it is "
       "written (drop stream = true to get a copy it may change)"},
      {"[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"data/words.txt\", writable = true }\n",
       "p.toml:3:36: unknown key 'writable' in stdin (it takes from, stream, broken_pipe)"},
      {"[step.a]\nmake_dir = { x = { from = \"data/words.txt\", writable = true } }\n",
       "p.toml:2:45: unknown key 'writable' in make_dir entry 'x'"},
  });
}

// What the pipeline fuzz target found (fuzz/regressions/pipeline/, see
// docs/testing.md): each file is refused with a message naming the place,
// never undefined behaviour or a crash.
TEST(PipelineParseTest, FuzzFindingsAreRefusedWithAClearError) {
  Workspace ws;
  const std::map<std::string, std::string> expected = {
      {"time-limit-beyond-int64.toml", "p.toml:9:14: 'step.flaky-ok.time_limit' must be at most 365 days"},
  };
  size_t seen = 0;
  for (auto& entry : fs::directory_iterator(fs::path(SQUALL_SOURCE_DIR) / "fuzz/regressions/pipeline")) {
    auto name = entry.path().filename().string();
    auto it = expected.find(name);
    ASSERT_NE(it, expected.end()) << name << ": say here what it must be refused with";
    auto error = planError(ws.dir, slurp(entry.path()));
    EXPECT_EQ(error.rfind(it->second, 0), 0u) << name << ": " << error;
    seen++;
  }
  EXPECT_EQ(seen, expected.size());
}

// ---- squall run without a server ----

TEST(PipelineCliTest, BadFileExitsWith2BeforeConnecting) {
  Workspace ws;
  writeFile(ws.dir / "bad.toml", "[step.a]\ncommand = [\"true\"]\nretries = -1\n");
  // Port 1: nothing listens, so a connect attempt would say so instead.
  auto run = squall(ws.dir, "127.0.0.1:1", "run bad.toml");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("bad.toml:3:11: 'step.a.retries' must be between 0 and 100 (got -1)"),
            std::string::npos) << run.err;
  run = squall(ws.dir, "127.0.0.1:1", "run missing.toml");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("missing.toml: cannot read"), std::string::npos) << run.err;
  // An output that would leave the sandbox is the file's fault, like an
  // input's: exit 2, nothing submitted.
  writeFile(ws.dir / "escape.toml", "[step.a]\nshell = \"true\"\noutputs = { o = \"../o\" }\n");
  run = squall(ws.dir, "127.0.0.1:1", "run escape.toml");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("escape.toml:3:17: output 'o': path '../o' contains '..'"), std::string::npos)
      << run.err;
}

TEST(PipelineCliTest, DryRunPrintsTheTasksAndRunsNothing) {
  Workspace ws;
  for (auto& example : docExamples()) {
    if (example.file != "arrays.toml") continue;
    writeFile(ws.dir / example.file, example.text);
  }
  auto run = squall(ws.dir, "127.0.0.1:1", "run --dry-run arrays.toml");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out.rfind("pipeline arrays: 7 steps, ", 0), 0u) << run.out;
  EXPECT_NE(run.out.find("greet[2] (execute)\n  run     sh -c 'echo hello cy'\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("all-greetings (execute)\n  run     cat greetings/0 greetings/1 greetings/2\n"),
            std::string::npos) << run.out;
  EXPECT_NE(run.out.find("  input   greetings/1 <- greet[1].stdout\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("sum.stdin (concat)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("=> " + (ws.dir / "out/squares/4.txt").string()), std::string::npos) << run.out;
  EXPECT_FALSE(fs::exists(ws.dir / "out"));

  // Inputs changed in place show as writable.
  for (auto& example : docExamples()) {
    if (example.file == "in-place.toml") writeFile(ws.dir / example.file, example.text);
  }
  run = squall(ws.dir, "127.0.0.1:1", "run --dry-run in-place.toml");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("  input   words.txt <- local file " + (ws.dir / "data/words.txt").string() +
                         " (writable)\n  output  words <- words.txt"),
            std::string::npos) << run.out;
  EXPECT_NE(run.out.find("  input   book <- local dir " + (ws.dir / "data/chapters").string() + " (writable)\n"),
            std::string::npos) << run.out;
  EXPECT_NE(run.out.find("  input   words.txt <- fix.words (writable)\n"), std::string::npos) << run.out;
}

// ---- squall run against a cluster ----
// ---- squall run against a cluster ----

TEST_F(PipelineRunTest, DocumentedExamplesRun) {
  Workspace ws;
  writeFile(*governorRoot / "incoming" / "words.txt", "pear\napple\nfig\n");
  size_t ran = 0;
  for (auto& example : docExamples()) {
    if (!example.error.empty()) continue;
    ran++;
    writeExample(ws.dir, example);
    auto result = run(ws.dir, "run " + example.file);
    EXPECT_EQ(result.status, 0) << example.file << "\n" << result.out << result.err;
    EXPECT_NE(result.out.find("done "), std::string::npos) << result.out;
  }
  EXPECT_EQ(ran, 11u);
  auto out = ws.dir / "out";
  EXPECT_EQ(slurp(out / "hello.txt"), "hello, squall\n");
  EXPECT_EQ(slurp(out / "count.txt"), "4\n");
  EXPECT_EQ(slurp(out / "shouted.txt"), "APPLE\nBANANA\nFIG\nPEAR\n");
  EXPECT_EQ(slurp(out / "listing.txt"), "ch1.txt\nch2.txt\nch3.txt\n");
  EXPECT_EQ(slurp(out / "greetings.txt"), "hello ann\nhello bob\nhello cy\n");
  EXPECT_EQ(slurp(out / "squares" / "3.txt"), "9\n");
  EXPECT_EQ(slurp(out / "sum.txt"), "30\n");
  EXPECT_EQ(slurp(out / "sizes" / "ch2.txt"), "35\n");
  EXPECT_EQ(slurp(out / "labels" / "ch1.txt"), "ch1.txt: 17 bytes\n");
  EXPECT_EQ(slurp(out / "cities" / "2-Oslo.txt"), "Oslo has 4 letters\n");
  EXPECT_EQ(slurp(out / "env-sorted.txt"), "apple\napple\nbanana\nfig\npear\n");
  EXPECT_EQ(slurp(*governorRoot / "archive" / "sorted.txt"), "apple\nfig\npear\n");
  EXPECT_TRUE(fs::exists(out / "report" / "totals.txt"));
  EXPECT_EQ(slurp(out / "in-place" / "words.txt"), "pear\nAPPLE\nfig\nbanana\nAPPLE\nkiwi\n");
  EXPECT_EQ(slurp(out / "in-place" / "book" / "all.txt"),
            "Call me Ishmael.\nIt was a bright cold day in April.\nHappy families are all alike.\n");
  EXPECT_FALSE(fs::exists(out / "in-place" / "book" / "ch3.txt"));
  EXPECT_EQ(slurp(out / "in-place" / "book" / "ch1.txt"), "Call me Ishmael.\n");
  EXPECT_EQ(slurp(out / "in-place" / "first.txt"), "APPLE\n");
  EXPECT_EQ(slurp(ws.dir / "data" / "words.txt"), "pear\napple\nfig\nbanana\napple\n");
  // functions.toml, against the test executor.
  EXPECT_EQ(slurp(out / "functions" / "count.txt"), "1544");
  EXPECT_EQ(slurp(out / "functions" / "tail.txt"), "\nbanana\napple\n");  // 14 of 28 bytes
  EXPECT_EQ(slurp(out / "functions" / "tree" / "copy.txt"), "PEAR\nAPPLE\nFIG");
  EXPECT_EQ(slurp(out / "functions" / "words" / "ch2.txt"), "8");
  EXPECT_EQ(slurp(out / "functions" / "summary.txt"),
            "ch1.txt=3\nch2.txt=8\nch3.txt=5\n=1544\nper chapter, then the book");
  // actors.toml: one Tally, its calls in the run's order.
  EXPECT_EQ(slurp(out / "actors" / "total-ch1.txt"), "103");
  EXPECT_EQ(slurp(out / "actors" / "total-ch3.txt"), "116");
  EXPECT_EQ(slurp(out / "actors" / "log.txt"), "3\n8\n5\n");
}

// The acceptance test: split, count the parts in parallel, merge, make a
// dir, slice, store; the result must be what plain shell tools make.
TEST_F(PipelineRunTest, WordFrequencyMatchesPlainShellByteForByte) {
  Workspace ws;
  writeExample(ws.dir, "wordfreq.toml");
  auto result = run(ws.dir, "run wordfreq.toml");
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("[13/13] 13 finished, 0 failed, 0 skipped"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("finished count["), std::string::npos) << result.out;  // no line per task
  EXPECT_NE(result.out.find("collected report -> " + (ws.dir / "out/report").string()), std::string::npos);

  // The same job with the same tools, by hand.
  ASSERT_EQ(shell(ws.dir,
                  "export LC_ALL=C; mkdir expected && cd expected && "
                  "tr -cs 'A-Za-z' '\\n' < ../data/book.txt | tr 'A-Z' 'a-z' | awk 'NF' | sort | uniq -c "
                  "| awk '{n[$2] += $1} END {for (w in n) print n[w], w}' | sort -k1,1nr -k2,2 > totals.txt && "
                  "split -n l/4 -d ../data/book.txt part- && "
                  "for i in 0 1 2 3; do tr -cs 'A-Za-z' '\\n' < part-0$i | tr 'A-Z' 'a-z' | awk 'NF' "
                  "| sort | uniq -c > $i.txt; done"),
            0);
  auto expected = slurp(ws.dir / "expected" / "totals.txt");
  ASSERT_GT(expected.size(), 100u);
  EXPECT_EQ(slurp(ws.dir / "out" / "report" / "totals.txt"), expected);
  EXPECT_EQ(slurp(*governorRoot / "results" / "totals.txt"), expected);
  for (int i = 0; i < 4; i++) {
    auto part = std::to_string(i) + ".txt";
    EXPECT_EQ(slurp(ws.dir / "out" / "report" / "parts" / part), slurp(ws.dir / "expected" / part)) << part;
  }
  size_t entries = 0;
  for (auto& entry : fs::recursive_directory_iterator(ws.dir / "out" / "report")) entries += entry.is_regular_file();
  EXPECT_EQ(entries, 5u);

  // Run again: a collected dir merges into the directory there (issue 41
  // point 7: `collect` wiped a user's file): its files replace theirs, the
  // user's own stay, and the dry run says so.
  auto report = ws.dir / "out" / "report";
  writeFile(report / "precious.txt", "mine");
  writeFile(report / "totals.txt", "old");
  auto dry = squall(ws.dir, "127.0.0.1:1", "run --dry-run wordfreq.toml");
  EXPECT_NE(dry.out.find(report.string() + " (a directory is there: merged into it, nothing of it removed)"),
            std::string::npos)
      << dry.out << dry.err;
  result = run(ws.dir, "run wordfreq.toml");
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_EQ(slurp(report / "precious.txt"), "mine");
  EXPECT_EQ(slurp(report / "totals.txt"), expected);
  // Where a file of the output would replace a directory of the user's,
  // the collect is refused and nothing there changes.
  fs::remove(report / "totals.txt");
  writeFile(report / "totals.txt" / "keep.txt", "kept");
  writeFile(report / "parts" / "0.txt", "old part");
  result = run(ws.dir, "run wordfreq.toml");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("totals.txt' is a directory; it is not replaced by a file"), std::string::npos)
      << result.err;
  EXPECT_EQ(slurp(report / "totals.txt" / "keep.txt"), "kept");
  EXPECT_EQ(slurp(report / "parts" / "0.txt"), "old part");
  EXPECT_EQ(slurp(report / "precious.txt"), "mine");
  EXPECT_FALSE(fs::exists(report.string() + ".squall-partial"));
}

// What can only go wrong on a governor, each in its own run: the run exits
// 1 naming the task and the problem; the cluster and the bystander session
// carry on (TearDown).
TEST_F(PipelineRunTest, RunTimeErrorsNameTheTaskAndTheRule) {
  Workspace ws;
  struct Case {
    std::string pipeline;
    std::vector<std::string> messages;
  };
  std::vector<Case> cases = {
      {"[step.a]\ncommand = [\"no-such-program-xyz\"]\n",
       {"a", "program 'no-such-program-xyz' not found"}},
      {"[step.a]\nshell = \"ln -s /etc/passwd out.txt\"\noutputs = { out = \"out.txt\" }\n"
       "collect = { out = \"o.txt\" }\n",
       {"output 'out.txt' is a symbolic link"}},
      {"[step.a]\nshell = \"echo x\"\nstdout = true\n"
       "[step.b]\nstore = { from = \"@a\", path = \"/etc/squall-escape.txt\" }\n",
       {"store: path '/etc/squall-escape.txt' is outside the allowed roots"}},
      {"[step.a]\nload = \"" + governorRoot->string() + "/../etc/passwd\"\n"
       "[step.b]\ncommand = [\"cat\"]\nstdin = \"@a\"\n",
       {"load: path '" + governorRoot->string() + "/../etc/passwd'", "outside the allowed roots"}},
      {"[step.a]\nshell = \"mkdir d; echo x > d/f\"\noutputs = { d = \"d\" }\n",
       {"output 'd' is a directory, but output"}},
  };
  for (auto& c : cases) {
    writeFile(ws.dir / "e.toml", c.pipeline);
    auto result = run(ws.dir, "run e.toml");
    EXPECT_EQ(result.status, 1) << c.pipeline << result.out << result.err;
    for (auto& message : c.messages) {
      EXPECT_NE(result.err.find(message), std::string::npos) << c.pipeline << "\n" << result.err;
    }
  }
  EXPECT_FALSE(fs::exists("/etc/squall-escape.txt"));
}

TEST_F(PipelineRunTest, AFailingArrayItemFailsTheRunWithItsStderr) {
  Workspace ws;
  writeFile(ws.dir / "fail.toml",
            "[step.check]\n"
            "range = \"0-3\"\n"
            "shell = \"echo checking {item} >&2; test {item} != 2\"\n"
            "stdout = true\n"
            "[step.all]\n"
            "command = [\"cat\"]\n"
            "inputs = { \"r/{index}\" = { from = \"@check\", arg = true } }\n"
            "stdout = true\n"
            "collect = \"all.txt\"\n");
  auto result = run(ws.dir, "run fail.toml");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("FAILED check[2]"), std::string::npos) << result.out;
  EXPECT_NE(result.err.find("check[2]"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("exited with status 1"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("checking 2"), std::string::npos) << result.err;
  EXPECT_NE(result.out.find("FAILED fail:"), std::string::npos) << result.out;
  EXPECT_FALSE(fs::exists(ws.dir / "all.txt"));
  // Its stderr once, under the error (issue 41: it came three times), and
  // no task id in the progress line.
  auto all = result.out + result.err;
  EXPECT_EQ(all.find("\nchecking 2"), std::string::npos) << all;
  EXPECT_NE(result.err.find("  | checking 2\n"), std::string::npos) << result.err;
  EXPECT_EQ(all.find("| checking 2"), all.rfind("| checking 2")) << all;
  EXPECT_EQ(result.out.find("FAILED check[2]: task "), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("FAILED check[2]: program '"), std::string::npos) << result.out;
}

// Issue 41: Ctrl-C threw finished work away and said nothing. Now the run
// collects what finished, says what it leaves, and exits 128 + the signal.
TEST_F(PipelineRunTest, AnInterruptedRunCollectsWhatFinishedAndSaysWhatItLeft) {
  Workspace ws;
  auto started = (ws.dir / "slow-started").string();
  writeFile(ws.dir / "i.toml", "[step.fast]\nshell = \"echo quick\"\nstdout = true\ncollect = \"out/fast.txt\"\n"
                               "[step.slow]\nshell = \"touch '" + started + "'; sleep 60; cat in\"\n"
                               "inputs = { \"in\" = \"@fast\" }\nstdout = true\ncollect = \"out/slow.txt\"\n");
  ChildProcess run("/bin/sh", {"-c", "cd '" + ws.dir.string() + "' && SQUALL_SERVER=" + cluster->serverAddress() +
                                         " exec '" + findProgram("squall") + "' run i.toml 2>&1"});
  // slow reads fast's output: once it started, fast had finished.
  for (int i = 0; i < 300 && !fs::exists(started); i++) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(fs::exists(started));
  run.signal(SIGINT);
  std::string said;
  while (auto line = run.readLine(std::chrono::seconds(30))) said += *line + "\n";
  ASSERT_TRUE(run.waitExit(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  auto status = run.poll();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 130) << describeStatus(*status) << "\n" << said;
  EXPECT_NE(said.find("collected fast -> " + (ws.dir / "out/fast.txt").string()), std::string::npos) << said;
  EXPECT_NE(said.find("INTERRUPTED i (Interrupt): 1 finished and collected, 0 failed, 0 skipped, 1 cancelled"),
            std::string::npos)
      << said;
  EXPECT_EQ(slurp(ws.dir / "out/fast.txt"), "quick\n");
  EXPECT_FALSE(fs::exists(ws.dir / "out/slow.txt"));
}

TEST_F(PipelineRunTest, RetriesRerunAFailedItem) {
  Workspace ws;
  // Each item fails on its first attempt (it leaves a mark outside its
  // sandbox) and succeeds on the second.
  auto marks = ws.dir / "marks";
  fs::create_directories(marks);
  auto pipeline = [&](int retries) {
    return "[step.flaky]\n"
           "range = \"1-3\"\n"
           "shell = \"if [ -e " + marks.string() + "/{item} ]; then echo ok {item}; else touch " +
           marks.string() + "/{item}; echo first try >&2; exit 3; fi\"\n"
           "stdout = true\n"
           "retries = " + std::to_string(retries) + "\n"
           "collect = \"out/{item}.txt\"\n";
  };
  writeFile(ws.dir / "retry.toml", pipeline(1));
  auto result = run(ws.dir, "run retry.toml");
  EXPECT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_EQ(slurp(ws.dir / "out" / "2.txt"), "ok 2\n");
  EXPECT_TRUE(fs::exists(marks / "3"));
  // The summary says so (it said "0 failed" and nothing else).
  EXPECT_NE(result.out.find("done retry: 3 finished (3 after a retry), 0 failed"), std::string::npos) << result.out;

  // Without retries, the same first failure ends the run.
  fs::remove_all(marks);
  fs::create_directories(marks);
  fs::remove_all(ws.dir / "out");
  writeFile(ws.dir / "retry.toml", pipeline(0));
  result = run(ws.dir, "run retry.toml");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("exited with status 3"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("first try"), std::string::npos) << result.err;
}

TEST_F(PipelineRunTest, KeepGoingFinishesIndependentStepsAndSkipsDependents) {
  Workspace ws;
  writeFile(ws.dir / "k.toml",
            "[step.broken]\nshell = \"exit 5\"\nstdout = true\n"
            "[step.after]\ncommand = [\"cat\"]\nstdin = \"@broken\"\nstdout = true\ncollect = \"after.txt\"\n"
            "[step.fine]\nshell = \"echo fine\"\nstdout = true\ncollect = \"fine.txt\"\n"
            "[step.optional]\nshell = \"exit 1\"\nallow_failure = true\n");
  auto result = run(ws.dir, "run --keep-going k.toml");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_EQ(slurp(ws.dir / "fine.txt"), "fine\n");
  EXPECT_FALSE(fs::exists(ws.dir / "after.txt"));
  EXPECT_NE(result.out.find("skipped after"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("1 finished, 2 failed, 1 skipped"), std::string::npos) << result.out;

  // Only an allowed failure left: success.
  writeFile(ws.dir / "ok.toml",
            "[step.fine]\nshell = \"echo fine\"\nstdout = true\n"
            "[step.optional]\nshell = \"exit 1\"\nallow_failure = true\n");
  result = run(ws.dir, "run ok.toml");
  EXPECT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("FAILED optional"), std::string::npos) << result.out;
}

// What a plain (not a terminal) reporter prints while `drive` feeds it;
// the clock is the test's (`now`, moved by `drive`).
std::string plainReport(const std::function<void(ProgressReporter&, Clock::time_point& now)>& drive) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  Clock::time_point now{};
  {
    auto reporter = makeProgressReporter(out, false, std::chrono::seconds(5), [&now]() { return now; });
    drive(*reporter, now);
  }
  std::fclose(out);
  std::string text(buffer, size);
  free(buffer);
  return text;
}

// Without a terminal: the failures, and a summary line per interval (and
// at the end), not a line per task.
TEST(ProgressTest, WithoutATerminalItPrintsFailuresAndASummaryEveryIntervalNotEveryTask) {
  auto text = plainReport([](ProgressReporter& reporter, Clock::time_point& now) {
    reporter.start("big", 1000);
    for (int i = 0; i < 1000; i++) {
      now += std::chrono::milliseconds(20);
      if (i == 500) {
        reporter.failed("t500", "exited with status 1", false);
      } else {
        reporter.finished("t" + std::to_string(i));
      }
    }
    reporter.end();
  });
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 6u) << text;
  EXPECT_EQ(lines[0], "running big: 1000 tasks");
  EXPECT_EQ(lines[1], "[250/1000] 250 finished, 0 failed, 0 skipped (5.0s)");
  EXPECT_EQ(lines[3], "FAILED t500: exited with status 1");
  EXPECT_EQ(lines[5], "[1000/1000] 999 finished, 1 failed, 0 skipped (20.0s)");
}

TEST(ProgressTest, AShortRunWithoutATerminalEndsWithOneSummaryLine) {
  auto text = plainReport([](ProgressReporter& reporter, Clock::time_point&) {
    reporter.start("small", 3);
    for (int i = 0; i < 3; i++) reporter.finished("t" + std::to_string(i));
    reporter.end();
  });
  EXPECT_EQ(text, "running small: 3 tasks\n[3/3] 3 finished, 0 failed, 0 skipped (0.0s)\n");
}

TEST_F(PipelineRunTest, ATerminalGetsALiveProgressBar) {
  Workspace ws;
  writeFile(ws.dir / "bar.toml", "[step.n]\nrange = \"1-3\"\nshell = \"echo {item}\"\nstdout = true\n");
  // script(1) gives squall a pseudo-terminal as stdout.
  std::string command = "cd '" + ws.dir.string() + "' && SQUALL_SERVER=" + cluster->serverAddress() +
                        " script -qec \"'" + findProgram("squall") + "' run bar.toml\" /dev/null > tty.txt";
  int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp(ws.dir / "tty.txt");
  auto tty = slurp(ws.dir / "tty.txt");
  EXPECT_NE(tty.find("\r\033[Kbar (session "), std::string::npos) << tty;
  EXPECT_NE(tty.find("[##############################] 3/3"), std::string::npos) << tty;
  EXPECT_EQ(tty.find("[1/3] finished"), std::string::npos) << tty;  // no plain lines
  EXPECT_NE(tty.find("done bar: 3 finished"), std::string::npos) << tty;
}

TEST_F(PipelineRunTest, ServerProblemsAreClearErrors) {
  Workspace ws;
  writeFile(ws.dir / "p.toml", "[step.a]\nshell = \"true\"\n");
  auto result = squall(ws.dir, "127.0.0.1:1", "run p.toml");
  EXPECT_EQ(result.status, 1);
  EXPECT_NE(result.err.find("cannot connect"), std::string::npos) << result.err;
  // A store outside the governors' allowed roots fails on the governor.
  writeFile(ws.dir / "s.toml", "[step.s]\nstore = { from = \"data/words.txt\", path = \"/etc/squall-nope\" }\n");
  result = run(ws.dir, "run s.toml");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("allow"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace pipeline_test
}  // namespace squall
