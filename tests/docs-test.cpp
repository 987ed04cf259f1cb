// Every C++ block of the docs (docs/*.md: the guide, tasklib.md) is a
// program in docs/examples/, built and shown exactly as tested: the client
// programs (docs/examples/*.cpp) run here against a real cluster whose
// governors keep the word count's executor (docs/examples/tasklib/) warm,
// their output compared with the .out file beside them, which a page may
// show too.
#include "session-failure.h"

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/wait.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

const fs::path SOURCE = SQUALL_SOURCE_DIR;
const fs::path EXAMPLES = SOURCE / "docs" / "examples";

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The lines between "// guide:begin" and "// guide:end", less the common
// indentation.
std::string shownPart(const fs::path& example) {
  std::vector<std::string> shown;
  bool inside = false;
  for (auto& line : lines(slurp(example))) {
    auto mark = line.find_first_not_of(' ');
    auto trimmed = mark == std::string::npos ? "" : line.substr(mark);
    if (trimmed == "// guide:begin") {
      inside = true;
    } else if (trimmed == "// guide:end") {
      inside = false;
    } else if (inside) {
      shown.push_back(line);
    }
  }
  size_t indent = std::string::npos;
  for (auto& line : shown) {
    auto first = line.find_first_not_of(' ');
    if (first != std::string::npos) indent = std::min(indent, first);
  }
  std::string text;
  for (auto& line : shown) text += (line.size() >= indent ? line.substr(indent) : "") + "\n";
  return text;
}

// The client programs the test runs: docs/examples/*.cpp, by stem.
std::vector<std::string> exampleNames() {
  std::vector<std::string> names;
  for (auto& entry : fs::directory_iterator(EXAMPLES)) {
    if (entry.path().extension() == ".cpp") names.push_back(entry.path().stem());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Every example source, clients and executors: docs/examples/**/*.cpp,
// relative to docs/examples.
std::set<std::string> exampleSources() {
  std::set<std::string> files;
  for (auto& entry : fs::recursive_directory_iterator(EXAMPLES)) {
    if (entry.path().extension() == ".cpp") files.insert(fs::relative(entry.path(), EXAMPLES).string());
  }
  return files;
}

// The file a "<!-- KIND: docs/examples/FILE ... -->" line names, or "" when
// the line is no such marker.
std::string markedFile(const std::string& line, const std::string& kind) {
  const std::string marker = "<!-- " + kind + ": docs/examples/";
  if (line.rfind(marker, 0) != 0) return "";
  auto file = line.substr(marker.size());
  return file.substr(0, file.find(' '));
}

// The fenced block opening at page[open], without its fences; fails the
// test when it is not closed.
std::string blockAt(const std::vector<std::string>& page, size_t open, const std::string& where) {
  std::string block;
  size_t i = open + 1;
  for (; i < page.size() && page[i] != "```"; i++) block += page[i] + "\n";
  EXPECT_LT(i, page.size()) << where << ": the block is not closed";
  return block;
}

TEST(DocsTest, EveryCppBlockIsATestedExampleAndEveryExampleIsShown) {
  std::set<std::string> shown;
  std::vector<fs::path> pages;
  for (auto& entry : fs::directory_iterator(SOURCE / "docs")) {
    if (entry.path().extension() == ".md") pages.push_back(entry.path());
  }
  ASSERT_FALSE(pages.empty());
  for (auto& path : pages) {
    auto page = lines(slurp(path));
    for (size_t i = 0; i < page.size(); i++) {
      auto where = path.filename().string() + " line " + std::to_string(i + 1);
      if (page[i] == "```cpp") {
        auto file = i > 0 ? markedFile(page[i - 1], "example") : "";
        if (file.empty()) {
          ADD_FAILURE() << where << ": a cpp block without an example marker above it";
          continue;
        }
        EXPECT_EQ(blockAt(page, i, where), shownPart(EXAMPLES / file)) << where << " differs from " << file;
        shown.insert(file);
      }
      // A program's output shown as it prints it.
      auto out = markedFile(page[i], "output");
      if (!out.empty()) {
        ASSERT_LT(i + 1, page.size()) << where;
        ASSERT_EQ(page[i + 1].rfind("```", 0), 0u) << where << ": no block below the output marker";
        EXPECT_EQ(blockAt(page, i + 1, where), slurp(EXAMPLES / out)) << where << " differs from " << out;
      }
    }
  }
  for (auto& file : exampleSources()) {
    EXPECT_TRUE(shown.count(file)) << "docs/examples/" << file << " is shown in no page of docs/";
  }
}

// One cluster a suite: a server and two governors of two cpus, each
// keeping the word count's executor warm.
class DocsCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ClusterOptions options;
    options.governors = 2;
    options.cpus = 2;
    // GPUs and scratch space for docs/resources.md (bookkeeping only).
    options.governorArgs = {"--executor", std::string("text=") + GUIDE_BIN_DIR + "/guide-wordcount-executor",
                            "--executor", std::string("stats=") + GUIDE_BIN_DIR + "/guide-stats-executor",
                            "--executor", std::string("range=") + GUIDE_BIN_DIR + "/guide-range-executor",
                            "--resource", "gpus=[0,1]", "--resource", "scratch=sum(10G)"};
    cluster = new LocalCluster(options);
    cluster->start();
    setenv("SQUALL_SERVER", cluster->serverAddress().c_str(), 1);
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  static inline LocalCluster* cluster = nullptr;
};

class DocsExampleTest : public DocsCluster, public ::testing::WithParamInterface<std::string> {};

TEST_P(DocsExampleTest, PrintsWhatItsOutFileSays) {
  auto name = GetParam();
  ChildProcess example(std::string(GUIDE_BIN_DIR) + "/guide-" + name, {});
  std::string out;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto line = example.readLine(std::chrono::seconds(60));
    if (!line) break;
    out += *line + "\n";
  }
  ASSERT_TRUE(example.waitExit(deadline)) << name << " did not finish";
  auto status = example.poll();
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << name << " failed: " << *status;
  EXPECT_EQ(out, slurp(EXAMPLES / (name + ".out")));
}

INSTANTIATE_TEST_SUITE_P(Examples, DocsExampleTest, ::testing::ValuesIn(exampleNames()),
                         [](const auto& info) {
                           // GoogleTest names: letters, digits and '_'.
                           auto name = info.param;
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

// The word count's executor refuses what it cannot read, saying what.
class DocsWordcountTest : public DocsCluster {
 protected:
  // The error the session of a lone call fails with.
  static std::string callFailure(const std::string& function, const std::string& input, const std::string& config) {
    Client client(cluster->serverAddress());
    auto session = client.newSession("wordcount errors");
    session.call(function, {session.blob(input)}, config);
    return failureOf(session);
  }
};

TEST_F(DocsWordcountTest, MalformedCountsAndABadTopConfigFailTheirCallSayingWhere) {
  auto merge = callFailure("text/merge", "mill 3\nriver\n", "");
  EXPECT_NE(merge.find("function text/merge failed: input 0 line 2 is not 'word count': 'river'"),
            std::string::npos)
      << merge;
  auto top = callFailure("text/top", "mill 3\n", "ten");
  EXPECT_NE(top.find("function text/top failed: the config 'ten' is not a number of lines"), std::string::npos)
      << top;
}

TEST_F(DocsWordcountTest, CountsSkipTheStopWordsMergesAddUpAndTopCuts) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("wordcount pieces");
  auto first = session.call("text/count", {session.blob("The mill, the MILL; the river.")}, "the");
  // No stop words now: "the" counts (a process that counted the first
  // part must not keep using its list).
  auto second = session.call("text/count", {session.blob("the River-mill wheel")}, "");
  auto merged = session.call("text/merge", {first.output(), second.output()});
  auto again = session.call("text/merge", {merged.output(), second.output()});
  auto top = session.call("text/top", {again.output()}, "2");
  for (auto* task : {&first, &second, &merged, &again, &top}) task->output().keep();
  session.submit();
  EXPECT_EQ(first.output().fetch(), "mill 2\nriver 1\n");
  EXPECT_EQ(second.output().fetch(), "mill 1\nriver 1\nthe 1\nwheel 1\n");
  EXPECT_EQ(merged.output().fetch(), "mill 3\nriver 2\nthe 1\nwheel 1\n");  // ties by word
  EXPECT_EQ(again.output().fetch(), "mill 4\nriver 3\nthe 2\nwheel 2\n");
  EXPECT_EQ(top.output().fetch(), "mill 4\nriver 3\n");
}

}  // namespace
}  // namespace squall
