// A task's sandbox on a real governor, in both input isolation modes
// (squall-governor --input-isolation mount|copy): nothing a program does to
// its inputs reaches their objects, inputs still behave as files and trees,
// writable inputs and outputs in place, and the governor's own files out of
// reach.
#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include "isolation-probe.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <sys/wait.h>
#include <tuple>
#include <unistd.h>
#include <xxhash.h>

namespace squall {
namespace {

namespace fs = std::filesystem;

// One governor per mode (so that every task meets the very files its
// inputs' objects are stored in), started on first use.
LocalCluster& clusterFor(const std::string& mode) {
  static std::map<std::string, std::unique_ptr<LocalCluster>> clusters;
  auto& cluster = clusters[mode];
  if (!cluster) {
    ClusterOptions options;
    options.governors = 1;
    options.cpus = 2;
    options.governorArgs = {"--input-isolation", mode};
    cluster = std::make_unique<LocalCluster>(options);
    cluster->start();
  }
  return *cluster;
}

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void writeFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// Every entry below `root`, sorted: "path/" for a directory, "path=bytes"
// for a file.
std::string describe(const fs::path& root) {
  std::vector<std::string> entries;
  for (auto& entry : fs::recursive_directory_iterator(root)) {
    auto rel = fs::relative(entry.path(), root).string();
    entries.push_back(entry.is_directory() ? rel + "/" : rel + "=" + readFile(entry.path()));
  }
  std::sort(entries.begin(), entries.end());
  std::string out;
  for (auto& e : entries) out += e + "\n";
  return out;
}

// Bigger than what a governor keeps in memory: a file in its store.
const std::string BIG(100000, 'a');

class TempTree {
 public:
  TempTree() {
    char pattern[] = "/tmp/squall-sandbox-test-XXXXXX";
    EXPECT_NE(mkdtemp(pattern), nullptr);
    root = pattern;
  }
  ~TempTree() { fs::remove_all(root); }
  fs::path root;
};

class InputIsolationTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "mount" && !mountIsolationProblem().empty()) {
      GTEST_SKIP() << "no mount mode here (a chroot, or not root and no user namespaces): "
                   << mountIsolationProblem();
    }
    try {
      cluster = &clusterFor(GetParam());
    } catch (const std::exception& e) {
      FAIL() << e.what();
    }
    // The sample tree: files at two depths.
    writeFile(local.root / "tree/f", "top\n");
    writeFile(local.root / "tree/sub/g", "gee\n");
  }
  bool mountMode() const { return GetParam() == "mount"; }

  // A file-held blob and the sample tree, kept so that they can be fetched
  // again after tasks have had them as inputs.
  struct Inputs {
    DataObject blob;
    DataObject tree;
  };
  Inputs keptInputs(Session& session) {
    Inputs inputs{session.blob(BIG), session.directory(local.root / "tree")};
    inputs.blob.keep();
    inputs.tree.keep();
    return inputs;
  }
  // Both objects still hold what they were made of.
  void expectUnchanged(const Inputs& inputs) {
    EXPECT_TRUE(inputs.blob.fetch() == BIG) << "the blob changed";
    auto unpacked = local.root / "fetched-again";
    fs::remove_all(unpacked);
    inputs.tree.fetchDir(unpacked.string());
    EXPECT_EQ(describe(unpacked), describe(local.root / "tree"));
  }

  LocalCluster* cluster = nullptr;
  TempTree local;
};

TEST_P(InputIsolationTest, WritingThroughAnInputNeverChangesItsObject) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("attack");
  auto inputs = keptInputs(session);
  auto& blob = inputs.blob;
  auto& tree = inputs.tree;
  session.submit();
  session.wait({blob, tree});
  auto blobBefore = blob.info();
  auto treeBefore = tree.info();
  EXPECT_EQ(blobBefore.hash, XXH3_64bits(BIG.data(), BIG.size()));

  // What a careless program running as root (as in CI) does. Each attempt
  // says whether the write went through (to a private copy) or was refused.
  auto attempt = [](const std::string& what, const std::string& line) {
    return "if (" + line + ") 2>/dev/null; then echo " + what + ":written; else echo " + what + ":refused; fi; ";
  };
  // A blob small enough for the governor to keep in memory.
  auto small = session.blob("small\n").keep();
  auto attack = session.execute(
      Program::shell(attempt("file", "chmod u+w in; echo x >> in") +
                     attempt("truncate", ": > in") +
                     attempt("tree", "chmod -R u+w d; echo y >> d/sub/g") +
                     attempt("stdin", "echo z >> /dev/stdin") +
                     attempt("small", "chmod u+w s; echo x >> s"))
          .input(blob, "in")
          .input(tree, "d")
          .stdinFrom(blob)
          .input(small, "s")
          .stdoutOutput());
  attack.output().keep();
  // The same, plainly: in mount mode the write fails (EROFS) and so the task.
  auto plain = session.execute(Program::shell("chmod u+w in; echo x >> in").input(blob, "in"));
  plain.allowFailure();
  session.submit();
  session.waitAll();  // an allowed failure does not end the session
  auto expected = mountMode() ? "file:refused\ntruncate:refused\ntree:refused\nstdin:refused\nsmall:refused\n"
                              : "file:written\ntruncate:written\ntree:written\nstdin:written\nsmall:written\n";
  EXPECT_EQ(attack.output().fetch(), expected);
  auto plainInfo = plain.info();
  if (mountMode()) {
    EXPECT_EQ(plainInfo.state, "failed");
    EXPECT_NE(plainInfo.stderrTail.find("Read-only file system"), std::string::npos) << plainInfo.stderrTail;
  } else {
    EXPECT_EQ(plainInfo.state, "finished") << plainInfo.error;
  }

  // The objects are as they were: fetched again, as recorded, and as a
  // later task reads them.
  expectUnchanged(inputs);
  auto blobAfter = blob.info();
  EXPECT_EQ(blobAfter.size, blobBefore.size);
  EXPECT_EQ(blobAfter.hash, blobBefore.hash);
  EXPECT_EQ(tree.info().hash, treeBefore.hash);
  EXPECT_EQ(small.fetch(), "small\n");
  auto reader = session.execute(Program({"cat", "in", "d/f", "d/sub/g"}).input(blob, "in").input(tree, "d")
                                    .stdoutOutput());
  reader.output().keep();
  session.submit();
  EXPECT_TRUE(reader.output().fetch() == BIG + "top\ngee\n") << "a later reader saw other bytes";
}

TEST_P(InputIsolationTest, InputsStillBehaveAsFilesAndTrees) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("inputs");
  auto blob = session.blob(BIG);
  auto small = session.blob("x\n");
  auto tree = session.directory(local.root / "tree");
  auto task = session.execute(
      Program::shell(
          // Files: read, tested, removed, replaced, renamed.
          "test -f a && wc -c < a && cat a | wc -c && rm a && echo new > a && cat a && "
          "sed -i s/x/y/ s && cat s && mv b b2 && wc -c < b2 && "
          // A dir: a real tree for find, du and tar.
          "test -d d && find d | sort && du -s d > /dev/null && tar cf out.tar d && "
          "tar tvf out.tar | cut -c1 | sort | uniq -c | tr -s ' '")
          .input(blob, "a")
          .input(blob, "b")
          .input(small, "s")
          .input(tree, "d")
          .stdoutOutput());
  task.output().keep();
  session.submit();
  EXPECT_EQ(task.output().fetch(),
            "100000\n100000\nnew\ny\n100000\n"
            "d\nd/f\nd/sub\nd/sub/g\n"
            " 2 -\n 2 d\n");
}

TEST_P(InputIsolationTest, InputsMovedOrCopiedIntoOutputsKeepTheirBytes) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("moved");
  auto blob = session.blob(BIG);
  auto tree = session.directory(local.root / "tree");
  auto task = session.execute(Program::shell("mv a moved && mkdir o && cp -a b o/ && cp -a d o/ && cp -r d o/r")
                                  .input(blob, "a")
                                  .input(blob, "b")
                                  .input(tree, "d")
                                  .output("moved")
                                  .output("o", ObjectKind::DIR));
  task.output(0).keep();
  task.output(1).keep();
  session.submit();
  EXPECT_TRUE(task.output(0).fetch() == BIG) << "the moved input lost its bytes";
  auto unpacked = local.root / "o";
  task.output(1).fetchDir(unpacked.string());
  EXPECT_TRUE(readFile(unpacked / "b") == BIG) << "the copied input lost its bytes";
  fs::remove(unpacked / "b");
  EXPECT_EQ(describe(unpacked), "d/\nd/f=top\n\nd/sub/\nd/sub/g=gee\n\nr/\nr/f=top\n\nr/sub/\nr/sub/g=gee\n\n");
}

TEST_P(InputIsolationTest, StreamInputsStayNamedPipes) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("streams");
  auto producer = session.execute(Program::shell("seq 1 1000").stdoutOutput(ObjectKind::STREAM));
  auto reader = session.execute(Program::shell("test -p s && wc -l < s").input(producer.output(), "s").stdoutOutput());
  reader.output().keep();
  session.submit();
  EXPECT_EQ(reader.output().fetch(), "1000\n");
}

TEST_P(InputIsolationTest, AWritableInputIsAPrivateCopy) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("writable");
  auto inputs = keptInputs(session);
  auto task = session.execute(Program::shell("stat -c %a f d && echo more >> f && wc -c < f && "
                                             "echo new > d/new && rm d/f && ls d")
                                  .writableInput(inputs.blob, "f")
                                  .input(inputs.tree, "d", {.writable = true})
                                  .stdoutOutput());
  task.output().keep();
  session.submit();
  EXPECT_EQ(task.output().fetch(), "644\n755\n100005\nnew\nsub\n");
  expectUnchanged(inputs);
}

TEST_P(InputIsolationTest, AnOutputAtAnInputsPathChangesItInPlace) {
  Client client(cluster->serverAddress());
  auto session = client.newSession("in-place");
  auto inputs = keptInputs(session);
  auto& blob = inputs.blob;
  auto& tree = inputs.tree;
  // Neither input is marked writable: the outputs at (or inside) their
  // paths make them so.
  auto task = session.execute(Program::shell("sed -i s/a/b/g f && echo new > d/new && rm d/f && "
                                             "echo added > e/added")
                                  .input(blob, "f")
                                  .input(tree, "d")
                                  .input(tree, "e")
                                  .output("f")
                                  .output("./d/", ObjectKind::DIR)
                                  .output("e/added"));
  for (size_t i = 0; i < 3; i++) task.output(i).keep();
  session.submit();
  EXPECT_TRUE(task.output(0).fetch() == std::string(BIG.size(), 'b')) << "sed -i did not change f in place";
  auto changed = local.root / "changed";
  task.output(1).fetchDir(changed.string());
  EXPECT_EQ(describe(changed), "new=new\n\nsub/\nsub/g=gee\n\n");
  EXPECT_EQ(task.output(2).fetch(), "added\n");
  expectUnchanged(inputs);
}

INSTANTIATE_TEST_SUITE_P(Modes, InputIsolationTest, ::testing::Values("mount", "copy"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// The governor says once, at start, how it keeps inputs apart; a bad
// choice is a usage error.
TEST(SandboxTest, TheGovernorSaysHowItIsolatesInputs) {
  TempTree work;
  // Nothing listens on port 1: the governor stops (status 1) once it has
  // set itself up.
  auto start = [&](const std::string& args) -> std::pair<int, std::string> {
    auto log = work.root / "log";
    auto line = "'" + findProgram("squall-governor") + "' --server 127.0.0.1:1 --connect-timeout 0 --work-dir '" +
                (work.root / "w").string() + "' " + args + " > /dev/null 2> '" + log.string() + "'";
    int status = std::system(line.c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, readFile(log)};
  };
  auto [status, log] = start("--input-isolation copy");
  EXPECT_EQ(status, 1) << log;
  EXPECT_NE(log.find("info governor: event=input-isolation mode=copy reason=\"--input-isolation copy\""),
            std::string::npos)
      << log;
  std::tie(status, log) = start("--input-isolation mount");
  if (geteuid() == 0 && mountIsolationProblem().empty()) {
    EXPECT_EQ(status, 1) << log;
    EXPECT_NE(log.find("info governor: event=input-isolation mode=mount namespace=\"mount namespace\" view=" +
                       fs::canonical(work.root).string() + "/w/objects-ro"),
              std::string::npos)
        << log;
    EXPECT_FALSE(fs::exists(work.root / "w" / "objects-ro"));  // unmounted and removed at exit
  }
  std::tie(status, log) = start("--input-isolation sideways");
  EXPECT_EQ(status, 2) << log;
  EXPECT_NE(log.find("--input-isolation: sideways not in {auto,mount,copy}"), std::string::npos) << log;
}

// What the server refuses at submit, whatever the governors do.
TEST(SandboxTest, PathsThatCannotWorkAreRefusedAtSubmit) {
  Client client(clusterFor("copy").serverAddress());
  auto refused = [&](auto build) -> std::string {
    auto session = client.newSession("refused");
    build(session);
    try {
      session.submit();
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  auto error = refused([](Session& s) { s.execute(Program({"true"}).output("o").output("./o")); });
  EXPECT_NE(error.find("two outputs at path './o'"), std::string::npos) << error;
  TempTree local;
  writeFile(local.root / "f", "x");
  error = refused([&](Session& s) {
    s.execute(Program({"true"}).input(s.directory(local.root.string()), "d").output("d"));
  });
  EXPECT_NE(error.find("changes input"), std::string::npos) << error;
  EXPECT_NE(error.find("so it must be a dir like the input, not a blob"), std::string::npos) << error;
  error = refused([](Session& s) {
    auto producer = s.execute(Program({"seq", "3"}).stdoutOutput(ObjectKind::STREAM));
    s.execute(Program({"true"}).input(producer.output(), "s").output("s"));
  });
  EXPECT_NE(error.find("would change input 2 in place, but that input is a stream"), std::string::npos) << error;
  error = refused([](Session& s) { s.execute(Program({"true"}).input(s.blob("x"), ".squall-stdout")); });
  EXPECT_NE(error.find("input path '.squall-stdout' is reserved: names starting with '.squall-' belong to the "
                       "governor"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace squall
