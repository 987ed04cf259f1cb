// Every C++ example in docs/guide.md is a program in docs/examples/ that is
// built and run here against a real cluster, its output compared with the
// .out file beside it; and the guide shows exactly the tested lines.
#include <gtest/gtest.h>
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

std::vector<std::string> exampleNames() {
  std::vector<std::string> names;
  for (auto& entry : fs::directory_iterator(EXAMPLES)) {
    if (entry.path().extension() == ".cpp") names.push_back(entry.path().stem());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(GuideTest, EveryCppBlockIsATestedExample) {
  auto guide = lines(slurp(SOURCE / "docs" / "guide.md"));
  const std::string marker = "<!-- example: docs/examples/";
  std::set<std::string> shown;
  for (size_t i = 0; i < guide.size(); i++) {
    if (guide[i] != "```cpp") continue;
    ASSERT_GT(i, 0u);
    ASSERT_EQ(guide[i - 1].rfind(marker, 0), 0u)
        << "guide.md line " << i + 1 << ": a cpp block without an example marker above it";
    auto file = guide[i - 1].substr(marker.size());
    file = file.substr(0, file.find(' '));
    std::string block;
    size_t j = i + 1;
    for (; j < guide.size() && guide[j] != "```"; j++) block += guide[j] + "\n";
    ASSERT_LT(j, guide.size()) << "unclosed block at guide.md line " << i + 1;
    EXPECT_EQ(block, shownPart(EXAMPLES / file)) << "guide.md line " << i + 1 << " differs from "
                                                 << file;
    shown.insert(fs::path(file).stem());
  }
  for (auto& name : exampleNames()) {
    EXPECT_TRUE(shown.count(name)) << "docs/examples/" << name << ".cpp is not in the guide";
  }
}

class GuideExampleTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    cluster = startCluster(2, 2);
    setenv("SQUALL_SERVER", cluster->serverAddress().c_str(), 1);
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  static LocalCluster* cluster;
};
LocalCluster* GuideExampleTest::cluster = nullptr;

TEST_P(GuideExampleTest, PrintsWhatItsOutFileSays) {
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

INSTANTIATE_TEST_SUITE_P(Examples, GuideExampleTest, ::testing::ValuesIn(exampleNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace squall
