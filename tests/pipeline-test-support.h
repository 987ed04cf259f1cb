// What the pipeline tests share (tests/pipeline-test.cpp for pipeline
// files, tests/pipeline-command-test.cpp for squall run -c,
// tests/pipeline-call-test.cpp for functions in both): temp
// workspaces, running the squall program, the doc examples, and the
// PipelineRunTest fixture (one server and two governors for the suite,
// keeping the test executor warm).
#pragma once

#include "pipeline-command.h"
#include "pipeline.h"
#include "test-executor.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace squall {
namespace pipeline_test {

namespace fs = std::filesystem;

inline const fs::path SOURCE_DIR = SQUALL_SOURCE_DIR;
inline const fs::path FIXTURES = SOURCE_DIR / "tests" / "data" / "pipelines";
// docs/pipelines.md writes governor paths under this root; tests replace it
// by a temp dir their governors allow (--allow-path).
inline const std::string DOC_GOVERNOR_ROOT = "/srv/squall";

inline std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline void writeFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string replaceAll(std::string text, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = text.find(from, pos)) != std::string::npos; pos += to.size()) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

struct DocExample {
  std::string file;   // from its "# file: NAME" line
  std::string text;   // the whole block
  std::string error;  // from "# error: LINE:COL: message", if any
};

// The ```toml blocks of docs/pipelines.md.
inline std::vector<DocExample> docExamples() {
  auto doc = slurp(SOURCE_DIR / "docs" / "pipelines.md");
  std::vector<DocExample> examples;
  const std::string open = "```toml\n";
  for (size_t pos = 0; (pos = doc.find(open, pos)) != std::string::npos;) {
    pos += open.size();
    auto end = doc.find("```\n", pos);
    DocExample example;
    example.text = doc.substr(pos, end - pos);
    std::smatch match;
    if (std::regex_search(example.text, match, std::regex("^# file: (\\S+)\n"))) example.file = match[1];
    if (std::regex_search(example.text, match, std::regex("\n# error: ([^\n]+)\n"))) example.error = match[1];
    examples.push_back(example);
    pos = end;
  }
  return examples;
}

// The text of the doc example of that file name ("" if none is).
inline std::string docExampleText(const std::string& file) {
  for (auto& example : docExamples()) {
    if (example.file == file) return example.text;
  }
  return "";
}

// A temp dir holding a copy of tests/data/pipelines; removed at the end.
class Workspace {
 public:
  Workspace() {
    dir = fs::temp_directory_path() /
          ("squall-pipeline-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy(FIXTURES, dir, fs::copy_options::recursive);
  }
  ~Workspace() { fs::remove_all(dir); }
  fs::path dir;
};

struct RunResult {
  int status;
  std::string out;
  std::string err;
};

// Runs `squall ARGS` in `dir` through /bin/sh, stdout/stderr captured.
inline RunResult squall(const fs::path& dir, const std::string& server, const std::string& args) {
  std::string command = "cd '" + dir.string() + "' && SQUALL_SERVER=" + server + " '" +
                        findProgram("squall") + "' " + args + " >squall-out.txt 2>squall-err.txt";
  int status = std::system(command.c_str());
  RunResult result{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
                   slurp(dir / "squall-out.txt"), slurp(dir / "squall-err.txt")};
  fs::remove(dir / "squall-out.txt");
  fs::remove(dir / "squall-err.txt");
  return result;
}

// /bin/sh -c `script` in `dir`; returns its exit status.
inline int shell(const fs::path& dir, const std::string& script) {
  std::string command = "cd '" + dir.string() + "' && /bin/sh -c '" + replaceAll(script, "'", "'\\''") + "'";
  int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// ---- parser and planner ----

inline PipelinePlan planText(const fs::path& dir, const std::string& text, const std::string& name = "p.toml") {
  auto file = dir / name;
  writeFile(file, text);
  return planPipeline(parsePipelineFile(file.string()));
}

// The message planText() fails with, minus the directory.
inline std::string planError(const fs::path& dir, const std::string& text) {
  try {
    planText(dir, text);
  } catch (const PipelineError& e) {
    return replaceAll(e.what(), (dir / "").string(), "");
  }
  return "(no error)";
}

// A pipeline file and how the message it is refused with starts.
struct ErrorCase {
  std::string text;
  std::string error;
};

// Each case's file is refused with its message (the directory left out).
inline void expectPlanErrors(const fs::path& dir, const std::vector<ErrorCase>& cases) {
  for (auto& c : cases) {
    auto error = planError(dir, c.text);
    EXPECT_EQ(error.rfind(c.error, 0), 0u) << "file:\n" << c.text << "\nerror: " << error;
  }
}

// Each case's `squall run -c` line (its text) is refused by the splitter
// with its message.
inline void expectLineErrors(const std::vector<ErrorCase>& cases) {
  for (auto& c : cases) {
    std::string error = "(no error)";
    try {
      splitShellPipe(c.text);
    } catch (const PipelineError& e) {
      error = e.what();
    }
    EXPECT_EQ(error.rfind(c.error, 0), 0u) << "line: " << c.text << "\nerror: " << error;
  }
}

class PipelineRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    governorRoot = new fs::path(fs::temp_directory_path() / ("squall-pipeline-root-" + std::to_string(getpid())));
    fs::create_directories(*governorRoot);
    ClusterOptions options;
    options.governors = 2;
    options.cpus = 2;
    options.governorArgs = {"--allow-path", governorRoot->string()};
    // For call steps (docs/pipelines.md: Functions).
    options.executors = {"testfn=" + testExecutor()};
    cluster = new LocalCluster(options);
    cluster->start();
    // A session of someone else, which no run may disturb.
    client = new Client(cluster->serverAddress());
    bystander = new Session(client->newSession("bystander"));
    auto data = bystander->blob("still here");
    data.keep();
    bystanderObject = data.id();
    bystander->submit();
  }
  static void TearDownTestSuite() {
    delete bystander;
    delete client;
    delete cluster;
    fs::remove_all(*governorRoot);
    delete governorRoot;
  }
  void TearDown() override {
    EXPECT_TRUE(cluster->server().running());
    EXPECT_TRUE(cluster->governor(0).running());
    EXPECT_TRUE(cluster->governor(1).running());
    EXPECT_EQ(bystander->object(bystanderObject).fetch(), "still here");
  }

  RunResult run(const fs::path& dir, const std::string& args) {
    return squall(dir, cluster->serverAddress(), args);
  }
  // Writes a doc example into `dir`, governor paths moved to governorRoot.
  static void writeExample(const fs::path& dir, const DocExample& example) {
    writeFile(dir / example.file, replaceAll(example.text, DOC_GOVERNOR_ROOT, governorRoot->string()));
  }
  // The doc example of that file name.
  static void writeExample(const fs::path& dir, const std::string& file) {
    for (auto& example : docExamples()) {
      if (example.file == file) writeExample(dir, example);
    }
  }

  static inline LocalCluster* cluster = nullptr;
  static inline Client* client = nullptr;
  static inline Session* bystander = nullptr;
  static inline uint64_t bystanderObject = 0;
  static inline fs::path* governorRoot = nullptr;
};

}  // namespace pipeline_test
}  // namespace squall
