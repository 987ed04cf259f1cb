// Streams in squall run: `squall run -c LINE` (the line splitter and
// planner alone, the command without a server, then real runs compared
// with /bin/sh byte for byte) and stream edges in pipeline files (their
// checks, plans and runs).
#include "pipeline-command.h"
#include "pipeline-test-support.h"

#include <memory>

namespace squall {
namespace pipeline_test {
namespace {

std::vector<std::string> stageTexts(const std::string& line) {
  std::vector<std::string> texts;
  for (auto& stage : splitShellPipe(line)) texts.push_back(stage.text);
  return texts;
}

using Texts = std::vector<std::string>;

// ---- the line splitter ----

TEST(CommandSplitTest, SplitsOnlyOnPipesAtTheTopOfTheLine) {
  EXPECT_EQ(stageTexts("zcat /data/big.gz | grep ERROR | sort | uniq -c"),
            (Texts{"zcat /data/big.gz", "grep ERROR", "sort", "uniq -c"}));
  EXPECT_EQ(stageTexts("  grep 'a|b' /x|tr a b  "), (Texts{"grep 'a|b' /x", "tr a b"}));
  EXPECT_EQ(stageTexts("grep \"a|b\\\"|c\" /x | cat"), (Texts{"grep \"a|b\\\"|c\" /x", "cat"}));
  EXPECT_EQ(stageTexts("echo a\\|b | cat"), (Texts{"echo a\\|b", "cat"}));
  EXPECT_EQ(stageTexts("echo $(seq 3 | wc -l) `echo a | cat` | cat"),
            (Texts{"echo $(seq 3 | wc -l) `echo a | cat`", "cat"}));
  EXPECT_EQ(stageTexts("echo \"$(echo \"a | b\")\" ${X:-a|b} | cat"),
            (Texts{"echo \"$(echo \"a | b\")\" ${X:-a|b}", "cat"}));
  EXPECT_EQ(stageTexts("seq 3 | ( grep 7 || true ) | { cat; echo end; } | cat"),
            (Texts{"seq 3", "( grep 7 || true )", "{ cat; echo end; }", "cat"}));
  EXPECT_EQ(stageTexts("seq 3 | while read x; do echo $x | tr 1 9; done | sort"),
            (Texts{"seq 3", "while read x; do echo $x | tr 1 9; done", "sort"}));
  EXPECT_EQ(stageTexts("for f in a b; do echo $f; done | if true; then cat; else wc; fi | cat"),
            (Texts{"for f in a b; do echo $f; done", "if true; then cat; else wc; fi", "cat"}));
  EXPECT_EQ(stageTexts("echo b | case x in a|x) cat;; *) wc;; esac | cat"),
            (Texts{"echo b", "case x in a|x) cat;; *) wc;; esac", "cat"}));
  EXPECT_EQ(stageTexts("echo $((1 | 2)) | cat"), (Texts{"echo $((1 | 2))", "cat"}));
  EXPECT_EQ(stageTexts("seq 3 | { f() { sed s/1/x/; }; f; } | cat"), (Texts{"seq 3", "{ f() { sed s/1/x/; }; f; }", "cat"}));
  // A new line after '|' or a backslash goes on; a comment runs to the end.
  EXPECT_EQ(stageTexts("seq 3 |\n  sort -r \\\n  -n | cat # the end | not a stage"),
            (Texts{"seq 3", "sort -r \\\n  -n", "cat # the end | not a stage"}));
  EXPECT_EQ(stageTexts("echo one#two | cat"), (Texts{"echo one#two", "cat"}));
  EXPECT_EQ(stageTexts("sort /etc/hosts"), (Texts{"sort /etc/hosts"}));
}

TEST(CommandSplitTest, AllowsRedirectionsThatKeepThePipe) {
  EXPECT_EQ(stageTexts("< /etc/hosts sort 2>/dev/null | uniq 2>&1 >&2 | cat > /tmp/x 3>&-"),
            (Texts{"< /etc/hosts sort 2>/dev/null", "uniq 2>&1 >&2", "cat > /tmp/x 3>&-"}));
  EXPECT_EQ(stageTexts("grep x \"$HOME/a b\" 2>\"$TMPDIR/err\" | wc -l >~/n"),
            (Texts{"grep x \"$HOME/a b\" 2>\"$TMPDIR/err\"", "wc -l >~/n"}));
  // Inside a group, the group's own business.
  EXPECT_EQ(stageTexts("seq 3 | { cat > /dev/null; echo x < /etc/hosts; } | cat"),
            (Texts{"seq 3", "{ cat > /dev/null; echo x < /etc/hosts; }", "cat"}));
  auto stages = splitShellPipe("< /etc/hosts sort | uniq");
  EXPECT_EQ(stages[0].stdinRedirectColumn, 1u);
  EXPECT_EQ(stages[1].stdinRedirectColumn, 0u);
}

TEST(CommandSplitTest, BadLinesNameTheColumnAndTheProblem) {
  expectLineErrors({
      {"", "-c: the command line is empty"},
      {"  \n ", "-c: the command line is empty"},
      {"grep a || true", "-c: column 8: '||' joins two pipelines; squall run -c runs one"},
      {"a && b | c", "-c: column 3: '&&' joins two pipelines"},
      {"a | b; c", "-c: column 6: ';' ends the pipeline; squall run -c runs one"},
      {"a | b &", "-c: column 7: '&' would run the pipeline in the background"},
      {"a &> /tmp/x", "-c: column 3: '&>' is bash"},
      {"a |& b", "-c: column 3: '|&' is bash for '2>&1 |'"},
      {"| a", "-c: column 1: the line starts with '|': the first stage is missing"},
      {"a | | b", "-c: column 5: nothing between this '|' and the one before"},
      {"a | b |  ", "-c: column 7: the line ends with '|': the last stage is missing"},
      {"echo 'a | b", "-c: column 6: the \"'\" here is never closed"},
      {"echo \"a | b", "-c: column 6: the '\"' here is never closed"},
      {"echo `a | b", "-c: column 6: the '`' here is never closed"},
      {"echo ${a | b", "-c: column 6: the '${' here is never closed"},
      {"echo $(a | b", "-c: column 6: the '$(' here is never closed by ')'"},
      {"( a | b", "-c: column 1: the '(' here is never closed by ')'"},
      {"a ) | b", "-c: column 3: this ')' closes nothing"},
      {"a | { b; c", "-c: column 5: the '{' here has no '}'"},
      {"if true; then a; | b", "-c: column 1: the 'if' here has no 'fi'"},
      {"a | while true; do b", "-c: column 5: the 'while' here has no 'done'"},
      {"case x in a) b;;", "-c: column 1: the 'case' here has no 'esac'"},
      {"a\nb", "-c: line 1, column 2: a new line ends the pipeline here"},
      {"seq 3 |\nsort\ncat", "-c: line 2, column 5: a new line ends the pipeline here"},
      {"a <<EOF", "-c: column 3: here-documents ('<<') are not supported by squall run -c"},
      {"a | b < /etc/hosts", "-c: column 7: stage 2 reads its stdin from a file, but its stdin is the output of stage 1"},
      {"cat < data.txt | sort", "-c: column 7: 'data.txt' is a relative path; each stage runs in a sandbox"},
      {"a | sort > out.txt", "-c: column 12: 'out.txt' is a relative path; each stage runs in a sandbox on a "
                             "governor that is removed when it ends, so name files by absolute path (write "
                             "the last stage's output here with -o FILE)"},
      {"a 2>err.txt | b", "-c: column 5: 'err.txt' is a relative path"},
      {"a | b >", "-c: column 7: this redirection has no file name"},
  });
}

// ---- the plan of a line ----

TEST(CommandPlanTest, EachStageReadsTheOneBeforeAsAStream) {
  CommandOptions options;
  options.cpus = 2;
  options.env = {{"LC_ALL", "C"}};
  auto plan = planCommand(splitShellPipe("LC_ALL=C zcat /d/big.gz | /bin/grep ERROR | (sort) | uniq -c"), options);
  EXPECT_EQ(plan.name, "command");
  ASSERT_EQ(plan.tasks.size(), 4u);
  std::vector<std::string> names;
  for (auto& task : plan.tasks) names.push_back(task.name);
  EXPECT_EQ(names, (Texts{"1-zcat", "2-grep", "3-sh", "4-uniq"}));
  for (size_t i = 0; i < 4; i++) {
    auto& task = plan.tasks[i];
    EXPECT_TRUE(task.shell);
    EXPECT_EQ(task.cpus, 2u);
    ASSERT_EQ(task.outputs.size(), 1u);
    EXPECT_EQ(task.outputs[0].kind, ObjectKind::STREAM);
    EXPECT_EQ(task.outputs[0].collect, i == 3 ? "-" : "");
    EXPECT_EQ(task.env, options.env);
    if (i == 0) {
      EXPECT_TRUE(task.inputs.empty());  // /dev/null
    } else {
      ASSERT_EQ(task.inputs.size(), 1u);
      EXPECT_TRUE(task.inputs[0].isStdin);
      EXPECT_TRUE(task.inputs[0].stream);
      EXPECT_EQ(task.inputs[0].task, i - 1);
    }
  }
  EXPECT_EQ(plan.tasks[2].args, (Texts{"(sort)"}));

  options = CommandOptions();
  options.name = "logs";
  options.stdinFile = "/tmp/in.txt";
  options.outputFile = "/tmp/out.txt";
  plan = planCommand(splitShellPipe("sort | uniq"), options);
  EXPECT_EQ(plan.tasks[0].inputs.at(0).localPath, "/tmp/in.txt");
  EXPECT_FALSE(plan.tasks[0].inputs.at(0).stream);
  EXPECT_EQ(plan.tasks[1].outputs[0].collect, "/tmp/out.txt");
  EXPECT_EQ(describePlan(plan),
            "command logs: 2 stages, 2 tasks\n"
            "1-sort (execute)\n"
            "  run     sh -c sort\n"
            "  input   stdin <- local file /tmp/in.txt\n"
            "  output  stdout (stream) <- stdout\n"
            "2-uniq (execute)\n"
            "  run     sh -c uniq\n"
            "  input   stdin <- 1-sort.stdout (stream)\n"
            "  output  stdout (stream) <- stdout => /tmp/out.txt\n");
  // --stdin - reads squall's own stdin; a '<' and --stdin cannot both feed stage 1.
  options.stdinFile = "-";
  EXPECT_EQ(planCommand(splitShellPipe("sort"), options).tasks[0].inputs.at(0).localPath, "/dev/stdin");
  try {
    planCommand(splitShellPipe("sort < /etc/hosts | uniq"), options);
    ADD_FAILURE() << "no error";
  } catch (const PipelineError& e) {
    EXPECT_EQ(std::string(e.what()), "-c: column 6: stage 1 reads its stdin from a file, and --stdin gives it one too");
  }
}

TEST(CommandPlanTest, NamesLocalFilesThatAreRelative) {
  Workspace ws;
  writeFile(ws.dir / "big.gz", "x");
  fs::create_directories(ws.dir / "bin");
  auto found = relativeLocalPaths(
      splitShellPipe("zcat big.gz /etc/hosts | grep -e big.gz X=big.gz \"big.gz\" | ./bin/filter | data/words.txt | sort"),
      ws.dir.string());
  EXPECT_EQ(found, (Texts{"stage 1: 'big.gz'", "stage 2: 'big.gz'", "stage 4: 'data/words.txt'"}));
}

// ---- squall run -c without a server ----

TEST(CommandCliTest, BadLinesAndFlagsExitWith2BeforeConnecting) {
  Workspace ws;
  auto run = squall(ws.dir, "127.0.0.1:1", "run -c 'seq 3 | sort; echo'");
  EXPECT_EQ(run.status, 2);
  EXPECT_EQ(run.err, "squall run: -c: column 13: ';' ends the pipeline; squall run -c runs one (group commands "
                     "in one stage: '{ a; b; }' or '( a; b )')\n");
  run = squall(ws.dir, "127.0.0.1:1", "run -c 'sort' --stdin nothing-here.txt");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("--stdin: 'nothing-here.txt' is not a readable file"), std::string::npos) << run.err;
  // 48 MiB and one byte: too big to upload; the message says what to do.
  {
    std::ofstream big(ws.dir / "big.txt", std::ios::binary);
    big.seekp((48 << 20));
    big.put('x');
  }
  run = squall(ws.dir, "127.0.0.1:1", "run -c 'sort' --stdin big.txt");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("larger than 48 MiB"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("name it by absolute path in the first stage"), std::string::npos) << run.err;
  run = squall(ws.dir, "127.0.0.1:1", "run -c 'sort' --keep-going");
  EXPECT_EQ(run.status, 2);
  run = squall(ws.dir, "127.0.0.1:1", "run p.toml -c 'sort'");
  EXPECT_NE(run.status, 0);
  run = squall(ws.dir, "127.0.0.1:1", "run --stdin data/words.txt p.toml");
  EXPECT_NE(run.status, 0);
  run = squall(ws.dir, "127.0.0.1:1", "run");
  EXPECT_EQ(run.status, 2);
  EXPECT_NE(run.err.find("give a pipeline file"), std::string::npos) << run.err;
}

TEST(CommandCliTest, DryRunPrintsTheStagesAndTheirStreams) {
  Workspace ws;
  auto run = squall(ws.dir, "127.0.0.1:1",
                    "run -n -c 'zcat /data/big.gz | grep ERROR | sort | uniq -c' -o counts.txt --cpus 2");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out.rfind("command command: 4 stages, 4 tasks\n1-zcat (execute) cpus=2\n", 0), 0u) << run.out;
  EXPECT_NE(run.out.find("2-grep (execute) cpus=2\n  run     sh -c 'grep ERROR'\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("  input   stdin <- 3-sort.stdout (stream)\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("  output  stdout (stream) <- stdout => " + (ws.dir / "counts.txt").string()),
            std::string::npos) << run.out;
  EXPECT_EQ(run.err, "");
  // A relative name that is a local file is worth a warning.
  run = squall(ws.dir, "127.0.0.1:1", "run -n -c 'sort data/words.txt | uniq'");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.err.find("warning: stage 1: 'data/words.txt' is a file here"), std::string::npos) << run.err;
}

// ---- stream edges in pipeline files ----

TEST(StreamPlanTest, StreamEdgesMakeStreamsAndLiveInputs) {
  Workspace ws;
  auto plan = planText(ws.dir,
                       "[step.gen]\ncommand = [\"seq\", \"10\"]\nstdout = true\ncollect = \"gen.txt\"\n"
                       "[step.pipe]\nshell = \"cat > fifo\"\noutputs = { fifo = \"fifo\" }\n"
                       "[step.a]\ncommand = [\"wc\", \"-l\"]\nstdin = { from = \"@gen\", stream = true }\n"
                       "[step.b]\ncommand = [\"cat\"]\n"
                       "inputs = { n = { from = \"@gen\", stream = true, arg = true, broken_pipe = \"error\" },"
                       " f = { from = \"@pipe\", stream = true, broken_pipe = \"error\" } }\n"
                       "[step.c]\ncommand = [\"cat\", \"n\"]\ninputs = { n = \"@gen\" }\n"
                       "[step.d]\ncommand = [\"cat\", \"n\"]\ninputs = { n = \"@gen\" }\n"
                       "[step.e]\nmake_dir = { n = \"@gen\" }\n"
                       "[step.items]\nrange = \"1-2\"\nshell = \"head -n {item}\"\n"
                       "stdin = { from = \"@gen\", stream = true }\nstdout = true\n");
  auto find = [&](const std::string& name) -> const PlannedTask& {
    for (auto& task : plan.tasks) {
      if (task.name == name) return task;
    }
    throw std::runtime_error("no task " + name);
  };
  auto& gen = find("gen");
  EXPECT_EQ(gen.outputs[0].kind, ObjectKind::STREAM);
  EXPECT_EQ(gen.outputs[0].collect, (ws.dir / "gen.txt").string());
  EXPECT_EQ(find("pipe").outputs[0].kind, ObjectKind::STREAM);
  auto& a = find("a");
  EXPECT_TRUE(a.inputs[0].stream && a.inputs[0].isStdin);
  EXPECT_FALSE(a.brokenPipeIsError);
  auto& b = find("b");
  EXPECT_TRUE(b.inputs[0].stream && b.inputs[0].arg);
  EXPECT_TRUE(b.brokenPipeIsError);
  // Programs that read the stream without stream = true get it once it has
  // ended, through one stored copy; a built-in reads it as it is.
  auto& c = find("c");
  auto& stored = plan.tasks[c.inputs[0].task];
  EXPECT_EQ(stored.name, "gen.stdout.stored");
  EXPECT_EQ(stored.kind, PlannedTask::Kind::CONCAT);
  EXPECT_FALSE(c.inputs[0].stream);
  EXPECT_EQ(find("d").inputs[0].task, c.inputs[0].task);
  EXPECT_EQ(plan.tasks[find("e").inputs[0].task].name, "gen");
  EXPECT_TRUE(find("items[1]").inputs[0].stream);
  auto text = describePlan(plan);
  EXPECT_NE(text.find("gen (execute)\n  run     seq 10\n  output  stdout (stream) <- stdout => "), std::string::npos)
      << text;
  EXPECT_NE(text.find("  input   stdin <- gen.stdout (stream)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  input   n <- gen.stdout (stream; stopping early fails it)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  input   n <- gen.stdout.stored.out\n"), std::string::npos) << text;

  // Array to array, item by item.
  plan = planText(ws.dir,
                  "[step.g]\nrange = \"1-3\"\ncommand = [\"seq\", \"{item}\"]\nstdout = true\n"
                  "[step.h]\nrange = \"1-3\"\ncommand = [\"wc\", \"-l\"]\nstdin = { from = \"@g\", stream = true }\n");
  EXPECT_EQ(plan.tasks.size(), 6u);
  EXPECT_EQ(plan.tasks[plan.tasks[4].inputs[0].task].name, "g[1]");
}

TEST(StreamPlanTest, BadStreamEdgesNameTheLineAndTheRule) {
  Workspace ws;
  const std::string gen = "[step.gen]\ncommand = [\"seq\", \"3\"]\nstdout = true\n";
  expectPlanErrors(ws.dir, {
      {"[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"data/words.txt\", stream = true }\n",
       "p.toml:3:18: 'data/words.txt' is a local file; stream = true reads another step's output while that "
       "step runs (drop it to upload the file)"},
      {"[step.l]\nload = \"/srv/x\"\n[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"@l\", stream = true }\n",
       "p.toml:5:18: '@l' is made by load step 'l'; only a program step's stdout or file output, or a call "
       "step's output, can be a stream"},
      {"[step.d]\nshell = \"mkdir d\"\noutputs = { d = \"d/\" }\n"
       "[step.a]\ncommand = [\"ls\"]\ninputs = { d = { from = \"@d\", stream = true } }\n",
       "p.toml:6:25: '@d' is a directory output; a stream carries bytes"},
      {gen + "[step.m]\nmake_dir = { x = { from = \"@gen\", stream = true } }\n",
       "p.toml:5:35: a make_dir entry 'x' cannot be read as a stream: make_dir is a built-in step"},
      {gen + "[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"@gen\", broken_pipe = \"error\" }\n",
       "p.toml:6:40: broken_pipe is about a stream edge; add stream = true to read '@gen' while it is written"},
      {gen + "[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"@gen\", stream = true, broken_pipe = \"fail\" }\n",
       "p.toml:6:55: 'step.a.stdin.broken_pipe' must be \"ignore\" (the default: the producer carries on when this "
       "reader stops early) or \"error\" (it fails), not \"fail\""},
      {gen + "[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"@gen\", streams = true }\n",
       "p.toml:6:26: unknown key 'streams' in stdin (did you mean 'stream'?) (it takes from, stream, broken_pipe)"},
      {gen + "[step.a]\ncommand = [\"cat\"]\nstdin = { stream = true }\n", "p.toml:6:9: stdin has no 'from'"},
      {gen + "[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"@gen\", stream = 1 }\n",
       "p.toml:6:35: 'step.a.stdin.stream' must be a boolean, not an integer"},
      {"[step.g]\nrange = \"1-2\"\nshell = \"seq {item}\"\nstdout = true\n"
       "[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"@g\", stream = true }\n",
       "p.toml:7:18: '@g' is array step 'g': a plain step cannot read all its items as streams"},
      {gen + "[step.a]\ncommand = [\"cat\", \"x\"]\n"
             "inputs = { x = { from = \"@gen\", stream = true } }\n"
             "stdin = { from = \"@gen\", stream = true, broken_pipe = \"error\" }\n",
       "p.toml:7:55: step 'a' reads its streams with broken_pipe = \"error\" and with \"ignore\""},
      {gen + "[step.a]\ncommand = [\"cat\", \"x\"]\ninputs = { x = \"@gen\" }\n"
             "stdin = { from = \"@gen\", stream = true }\n",
       "p.toml:6:16: step 'a' runs at the same time as step 'gen' (stream edges join them), so it cannot also "
       "wait for '@gen' to end (read it with stream = true)"},
      {gen + "[step.a]\ncommand = [\"cat\"]\nstdin = { from = \"@gen\", stream = true }\nretries = 2\n",
       "p.toml:4:7: step 'a' is joined to other steps by stream edges, so it cannot have retries"},
      // b runs with a and waits for d's end; d runs with c, which waits for a's end.
      {"[step.a]\ncommand = [\"seq\", \"3\"]\nstdout = true\n"
       "[step.b]\ncommand = [\"cat\", \"x\"]\nstdin = { from = \"@a\", stream = true }\ninputs = { x = \"@d\" }\n"
       "[step.c]\ncommand = [\"cat\", \"x\"]\ninputs = { x = \"@a\" }\nstdout = true\n"
       "[step.d]\ncommand = [\"cat\"]\nstdin = { from = \"@c\", stream = true }\nstdout = true\n",
       "p.toml:10:16: steps joined by stream edges start together, so these would never start: a+b waits for "
       "the end of c+d, which waits for the end of a+b"},
  });
}

// ---- against a cluster ----

// Issue 4's acceptance test: the same pipe gives the same bytes in /bin/sh
// and in squall run -c, its four stages spread over two governors.
TEST_F(PipelineRunTest, CommandLineMatchesTheShellByteForByte) {
  Workspace ws;
  // A few MB of log lines, some of them errors, gzipped.
  ASSERT_EQ(shell(ws.dir,
                  "awk 'BEGIN { srand(4); for (i = 0; i < 120000; i++) { r = int(rand() * 50); "
                  "printf \"2026-11-%02d %s worker-%d %s\\n\", i % 28 + 1, (r < 3 ? \"ERROR\" : \"INFO\"), "
                  "r % 7, (r < 3 ? \"disk \" r \" failed\" : \"request \" i \" ok\") } }' | gzip > logs.gz"),
            0);
  ASSERT_GT(fs::file_size(ws.dir / "logs.gz"), 300000u);  // about 5 MB of lines
  auto logs = (ws.dir / "logs.gz").string();
  std::string line = "zcat " + logs + " | grep ERROR | sort | uniq -c";
  ASSERT_EQ(shell(ws.dir, line + " > expected.txt"), 0);
  auto expected = slurp(ws.dir / "expected.txt");
  ASSERT_GT(expected.size(), 100u);

  auto result = run(ws.dir, "run -c '" + line + "'");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, expected);
  EXPECT_EQ(result.err, "");

  // Into a file with -o; stage 1 fed a local file with --stdin.
  writeFile(ws.dir / "in.txt", "b\na\nb\n");
  result = run(ws.dir, "run -c 'sort | uniq -c' --stdin in.txt -o out/counts.txt");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(slurp(ws.dir / "out" / "counts.txt"), "      1 a\n      2 b\n");
  result = run(ws.dir, "run -c 'tr a-z A-Z' --stdin - < in.txt");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "B\nA\nB\n");
}

TEST_F(PipelineRunTest, CommandLineFailsWithTheFailingStage) {
  Workspace ws;
  auto result = run(ws.dir, "run -c 'seq 1 100 | { echo middle broke >&2; exit 3; } | cat'");
  EXPECT_EQ(result.status, 3) << result.out << result.err;
  EXPECT_EQ(result.out, "");
  EXPECT_NE(result.err.find("squall run: stage 2 (2-sh) failed: "), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("  | middle broke\n"), std::string::npos) << result.err;
  // A stage that writes to stderr and succeeds: its words are passed on.
  result = run(ws.dir, "run -c '{ echo note >&2; echo out; }'");
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "out\n");
  EXPECT_EQ(result.err, "note\n");
  // A program that is not there.
  result = run(ws.dir, "run -c 'seq 3 | no-such-program-xyz'");
  EXPECT_EQ(result.status, 127) << result.out << result.err;
  EXPECT_NE(result.err.find("stage 2 (2-no-such-program-xyz) failed"), std::string::npos) << result.err;
}

TEST_F(PipelineRunTest, CommandLineStageThatStopsEarlyIsNormal) {
  Workspace ws;
  auto result = run(ws.dir, "run -c 'seq 1 1000000 | head -n 3'");
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "1\n2\n3\n");
  result = run(ws.dir, "run -c 'yes squall | head -c 100000 | wc -c'");
  EXPECT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, "100000\n");
}

// docs/pipelines.md's streams.toml: a fan-out of one stream to three live
// readers (one stops early), a reader of the same output after its end,
// and the stream itself collected.
TEST_F(PipelineRunTest, StreamEdgesFanOutAndAreReadAfterTheirEnd) {
  Workspace ws;
  writeExample(ws.dir, "streams.toml");
  auto result = run(ws.dir, "run streams.toml");
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  auto out = ws.dir / "out" / "streams";
  std::string numbers;
  for (int i = 1; i <= 100000; i++) numbers += std::to_string(i) + "\n";
  EXPECT_EQ(slurp(out / "numbers.txt"), numbers);
  EXPECT_EQ(slurp(out / "evens.txt"), "50000\n");
  EXPECT_EQ(slurp(out / "sum.txt"), "5000050000\n");
  EXPECT_EQ(slurp(out / "first.txt"), "1\n2\n3\n");
  EXPECT_EQ(slurp(out / "count.txt"), "100000\n");
}

TEST_F(PipelineRunTest, BrokenPipeCanBeTheProducersFailure) {
  Workspace ws;
  writeFile(ws.dir / "strict.toml",
            "[step.numbers]\ncommand = [\"seq\", \"1\", \"10000000\"]\nstdout = true\n"
            "[step.first]\ncommand = [\"head\", \"-n\", \"1\"]\n"
            "stdin = { from = \"@numbers\", stream = true, broken_pipe = \"error\" }\nstdout = true\n"
            "collect = \"first.txt\"\n");
  auto result = run(ws.dir, "run strict.toml");
  EXPECT_EQ(result.status, 1) << result.out << result.err;
  EXPECT_NE(result.err.find("numbers"), std::string::npos) << result.err;
  // The same without broken_pipe: fine.
  writeFile(ws.dir / "lenient.toml", replaceAll(slurp(ws.dir / "strict.toml"), ", broken_pipe = \"error\"", ""));
  result = run(ws.dir, "run lenient.toml");
  EXPECT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_EQ(slurp(ws.dir / "first.txt"), "1\n");
}

// A pipe runs on one core in a shell, and so in squall: its stages share
// one cpu unless they ask for their own.
TEST(OneCpuPipeTest, EightStagePipesRunOnASingleOneCpuGovernor) {
  std::unique_ptr<LocalCluster> cluster(startCluster(1, 1));
  Workspace ws;
  std::string line = "seq 1 5000 | cat | grep -v 7 | rev | sort | uniq | rev | wc -l";
  ASSERT_EQ(shell(ws.dir, line + " > expected.txt"), 0);
  auto result = squall(ws.dir, cluster->serverAddress(), "run -c '" + line + "'");
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.out, slurp(ws.dir / "expected.txt"));

  // The same as a pipeline file of stream edges.
  std::string file;
  const char* stages[] = {"seq 1 5000", "cat", "grep -v 7", "rev", "sort", "uniq", "rev", "wc -l"};
  for (int i = 0; i < 8; i++) {
    file += "[step.s" + std::to_string(i) + "]\nshell = \"" + stages[i] + "\"\nstdout = true\n";
    if (i > 0) file += "stdin = { from = \"@s" + std::to_string(i - 1) + "\", stream = true }\n";
  }
  file += "collect = \"count.txt\"\n";
  writeFile(ws.dir / "pipe.toml", file);
  result = squall(ws.dir, cluster->serverAddress(), "run pipe.toml");
  ASSERT_EQ(result.status, 0) << result.out << result.err;
  EXPECT_EQ(slurp(ws.dir / "count.txt"), slurp(ws.dir / "expected.txt"));

  // Stages that ask for a cpu each hold one each: 8 do not fit in 1.
  result = squall(ws.dir, cluster->serverAddress(), "run --cpus 1 -c '" + line + "'");
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.err.find("together they need 8 cpus but the governors have 1"), std::string::npos)
      << result.err;
  writeFile(ws.dir / "asks.toml", replaceAll(file, "stdout = true\n", "stdout = true\ncpus = 1\n"));
  result = squall(ws.dir, cluster->serverAddress(), "run asks.toml");
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.err.find("together they need 8 cpus but the governors have 1"), std::string::npos)
      << result.out << result.err;
}

}  // namespace
}  // namespace pipeline_test
}  // namespace squall
