// Dir objects end to end inside one governor: make_dir, slice_dir, load,
// load_dir, store, execute with dir inputs and outputs, the safe-path rules
// against planted symbolic links and malicious tar archives, time limits,
// stdout tails and SQUALL_ATTEMPT. Real files, real programs; tasks go
// through TaskQueue as the server's assignments do. Test thread only.
#include "dir-tree.h"
#include "safe-path.h"
#include "task-queue.h"
#include "test-util.h"

#include <archive.h>
#include <archive_entry.h>
#include <capnp/message.h>
#include <fcntl.h>
#include <map>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace squall {
namespace {

using Kind = wire::ObjectKind;

struct In {
  Id object;
  std::string path = {};
  bool writable = false;
};

struct Out {
  Id object;
  Kind kind = Kind::BLOB;
  std::string path = {};  // execute: empty means stdout
};

struct TaskMembers {
  kj::AsyncIoContext io = kj::setupAsyncIo();
  std::shared_ptr<spdlog::logger> logger = testLogger();
  TempDir dir;
  UvBridge bridge{io.unixEventPort, io.provider->getTimer(), *logger};
  ObjectStore store{bridge, dir.sub("objects"), *logger, 64 << 20};
  TaskEnv env{bridge, io.provider->getTimer(), store, *logger, dir.sub("tasks"), kj::str("gov-test"),
              captureEnvironment()};
  DataFetcher fetcher{io.provider->getNetwork(), bridge, store, kj::str(""), *logger};
  kj::Own<TaskQueue> queue;
  std::map<Id, TaskOutcome> results;
  kj::Maybe<std::pair<Id, kj::Own<kj::PromiseFulfiller<void>>>> awaited;
};

class DirTasksTest : public ::testing::Test {
 protected:
  std::unique_ptr<TaskMembers> members = std::make_unique<TaskMembers>();
  kj::AsyncIoContext& io = members->io;
  TempDir& dir = members->dir;
  ObjectStore& store = members->store;
  TaskEnv& env = members->env;
  uint64_t nextTask = 1000;

  void SetUp() override {
    makeDirs(env.tasksDir);
    members->queue = kj::heap<TaskQueue>(env, members->fetcher, 2, std::vector<ResourcePool>{}, [this](TaskOutcome outcome) {
      Id id = outcome.id;
      members->results.emplace(id, kj::mv(outcome));
      KJ_IF_MAYBE(a, members->awaited) {
        if (a->first == id) {
          a->second->fulfill();
          members->awaited = nullptr;
        }
      }
    });
  }

  void TearDown() override {
    waitWithTimeout(io, members->queue->shutdown());
    members->queue = nullptr;
  }

  void allow(kj::StringPtr root) {
    auto roots = kj::heapArray<kj::String>(1);
    roots[0] = kj::str(root);
    env.allowedRoots = AllowedRoots(roots);
  }

  // Assigns one task (filled by `config`) and waits for its outcome.
  TaskOutcome run(const std::vector<In>& inputs, const std::vector<Out>& outputs,
                  kj::Function<void(wire::TaskSpec::Config::Builder)> config,
                  uint64_t timeLimitMs = 0, uint32_t attempt = 1) {
    capnp::MallocMessageBuilder message;
    auto a = message.initRoot<wire::Assignment>();
    Id id{1, nextTask++};
    auto task = a.initTask();
    id.to(task.initId());
    task.initResources().setCpus(1);
    task.initPolicy().setTimeLimitMs(timeLimitMs);
    a.setAttempt(attempt);
    auto in = task.initInputs(inputs.size());
    a.initInputs(inputs.size());
    for (size_t i = 0; i < inputs.size(); i++) {
      inputs[i].object.to(in[i].initObject());
      in[i].setPath(inputs[i].path);
      in[i].setWritable(inputs[i].writable);
    }
    auto out = task.initOutputs(outputs.size());
    auto kinds = a.initOutputKinds(outputs.size());
    for (size_t i = 0; i < outputs.size(); i++) {
      outputs[i].object.to(out[i]);
      kinds.set(i, outputs[i].kind);
    }
    config(task.getConfig());
    auto paf = kj::newPromiseAndFulfiller<void>();
    members->awaited = std::make_pair(id, kj::mv(paf.fulfiller));
    members->queue->assign(a.asReader());
    if (members->results.find(id) == members->results.end()) waitWithTimeout(io, kj::mv(paf.promise));
    members->awaited = nullptr;
    auto it = members->results.find(id);
    TaskOutcome result = kj::mv(it->second);
    members->results.erase(it);
    return result;
  }

  TaskOutcome exec(const std::string& line, const std::vector<In>& inputs, const std::vector<Out>& outputs,
                   uint64_t timeLimitMs = 0, uint32_t attempt = 1, int32_t stdinInput = -1) {
    return run(inputs, outputs, [&](wire::TaskSpec::Config::Builder c) {
      auto e = c.initExecute();
      e.initArgs(1).set(0, line);
      e.setShell(true);
      e.setStdinInput(stdinInput);
      auto mappings = e.initOutputs(outputs.size());
      for (size_t i = 0; i < outputs.size(); i++) {
        if (outputs[i].path.empty()) {
          mappings[i].setStdout();
        } else {
          mappings[i].setPath(outputs[i].path);
        }
      }
      e.initEnv(0);
    }, timeLimitMs, attempt);
  }

  void putBlob(Id id, const std::string& text) {
    waitWithTimeout(io, store.putBytes(id, Kind::BLOB,
                                       kj::heapArray(kj::arrayPtr(reinterpret_cast<const kj::byte*>(text.data()),
                                                                  text.size()))));
  }

  kj::String pathOf(Id id) {
    auto data = KJ_ASSERT_NONNULL(store.data(id));
    return kj::mv(data.get<kj::String>());
  }

  std::string blobText(Id id) {
    auto data = KJ_ASSERT_NONNULL(store.data(id));
    if (data.is<kj::String>()) return readWholeFile(data.get<kj::String>());
    auto& bytes = data.get<kj::Own<const Blob>>()->bytes;
    return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  }

  // A sample tree: files at two depths, an empty dir, a relative link.
  kj::String sampleTree(kj::StringPtr name) {
    auto root = dir.sub(name);
    writeText(kj::str(root, "/top.txt"), "top\n");
    writeText(kj::str(root, "/sub/inner.txt"), "inner\n");
    writeText(kj::str(root, "/sub/deeper/leaf.bin"), std::string(1000, 'z'));
    makeDirs(kj::str(root, "/empty"));
    EXPECT_EQ(::symlink("sub/inner.txt", kj::str(root, "/link").cStr()), 0);
    return root;
  }
};

uint64_t treeHash(kj::StringPtr path) { return hashTree(openDirectory(path)).hash; }

bool isReadOnly(kj::StringPtr path) {
  struct stat st;
  KJ_SYSCALL(lstat(path.cStr(), &st));
  return (st.st_mode & 0222) == 0;
}

// ------------------------------------------------------------------ make_dir

TEST_F(DirTasksTest, MakeDirPlacesBlobsAndDirsAtDeepPaths) {
  putBlob({1, 1}, "small\n");
  std::string big(3 << 20, 'b');
  putBlob({1, 2}, big);
  putTree(store, {1, 3}, sampleTree("tree"));
  auto r = run({{{1, 1}, "a/b/c.txt"}, {{1, 2}, "big.bin"}, {{1, 3}, "deep/er/tree"}},
               {{{1, 4}, Kind::DIR}}, [](auto c) { c.setMakeDir(); });
  ASSERT_TRUE(r.ok) << r.error.cStr();
  auto out = pathOf({1, 4});
  EXPECT_EQ(readWholeFile(kj::str(out, "/a/b/c.txt")), "small\n");
  EXPECT_EQ(readWholeFile(kj::str(out, "/big.bin")), big);
  EXPECT_EQ(describeTree(kj::str(out, "/deep/er/tree")), describeTree(dir.sub("tree")));
  EXPECT_TRUE(isReadOnly(out));
  EXPECT_TRUE(isReadOnly(kj::str(out, "/deep/er/tree/sub")));
  EXPECT_TRUE(isReadOnly(kj::str(out, "/a/b/c.txt")));
  ASSERT_EQ(r.outputs.size(), 1u);
  EXPECT_EQ(r.outputs[0].size, 6u + big.size() + 4 + 6 + 1000);
  EXPECT_EQ(r.outputs[0].hash, treeHash(out));
  auto meta = KJ_ASSERT_NONNULL(store.find({1, 4}));
  EXPECT_EQ(meta.kind, Kind::DIR);

  auto taken = run({{{1, 1}, "x"}, {{1, 2}, "x"}}, {{{1, 5}, Kind::DIR}}, [](auto c) { c.setMakeDir(); });
  EXPECT_FALSE(taken.ok);
  EXPECT_EQ(std::string(taken.error.cStr()), "make_dir: input path 'x' is already taken by an earlier input");

  auto bad = run({{{1, 1}, "../x"}}, {{{1, 6}, Kind::DIR}}, [](auto c) { c.setMakeDir(); });
  EXPECT_EQ(std::string(bad.error.cStr()), "make_dir: input path '../x' is not allowed: it contains '..'");
  auto through = run({{{1, 3}, "t"}, {{1, 1}, "t/link/x"}}, {{{1, 7}, Kind::DIR}},
                     [](auto c) { c.setMakeDir(); });
  EXPECT_EQ(std::string(through.error.cStr()),
            "make_dir: input path 't/link/x' is inside 't/link', which is a symbolic link");
  EXPECT_TRUE(store.find({1, 7}) == nullptr);
}

// ----------------------------------------------------------------- slice_dir

TEST_F(DirTasksTest, SliceDirTakesAFileOrADirectoryAndNeverFollowsLinks) {
  putTree(store, {2, 1}, sampleTree("tree"));
  auto file = run({{{2, 1}}}, {{{2, 2}, Kind::BLOB}}, [](auto c) { c.setSliceDir("sub/inner.txt"); });
  ASSERT_TRUE(file.ok) << file.error.cStr();
  EXPECT_EQ(blobText({2, 2}), "inner\n");
  EXPECT_EQ(file.outputs[0].hash, hashBytes(kj::StringPtr("inner\n").asBytes()));

  auto sub = run({{{2, 1}}}, {{{2, 3}, Kind::DIR}}, [](auto c) { c.setSliceDir("sub/"); });
  ASSERT_TRUE(sub.ok) << sub.error.cStr();
  EXPECT_EQ(describeTree(pathOf({2, 3})), describeTree(dir.sub("tree/sub")));
  EXPECT_EQ(sub.outputs[0].hash, treeHash(dir.sub("tree/sub")));

  auto missing = run({{{2, 1}}}, {{{2, 4}}}, [](auto c) { c.setSliceDir("nope.txt"); });
  EXPECT_EQ(std::string(missing.error.cStr()), "slice_dir: path 'nope.txt' does not exist in input 2/1");
  auto viaLink = run({{{2, 1}}}, {{{2, 5}}}, [](auto c) { c.setSliceDir("link"); });
  EXPECT_EQ(std::string(viaLink.error.cStr()),
            "slice_dir: path 'link' is or goes through a symbolic link in input 2/1; links are not followed");
  auto isDir = run({{{2, 1}}}, {{{2, 6}}}, [](auto c) { c.setSliceDir("sub"); });
  EXPECT_EQ(std::string(isDir.error.cStr()),
            "slice_dir: path 'sub' is a directory (end it with '/' to take a directory)");
  auto escape = run({{{2, 1}}}, {{{2, 7}}}, [](auto c) { c.setSliceDir("../tree/top.txt"); });
  EXPECT_EQ(std::string(escape.error.cStr()),
            "slice_dir: path '../tree/top.txt' is not allowed: it contains '..'");
  auto wrongKind = run({{{2, 1}}}, {{{2, 8}, Kind::BLOB}}, [](auto c) { c.setSliceDir("sub/"); });
  EXPECT_EQ(std::string(wrongKind.error.cStr()), "slice_dir: output 2/8 is a blob, but slice_dir makes a dir");
}

// ------------------------------------------------------- load, load_dir, store

TEST_F(DirTasksTest, LoadAndStoreStayInsideTheAllowedRoots) {
  auto allowed = dir.sub("allowed");
  auto outside = dir.sub("outside");
  writeText(kj::str(allowed, "/in.txt"), "inside\n");
  writeText(kj::str(outside, "/secret"), "secret\n");
  sampleTree("allowed/tree");
  ASSERT_EQ(::symlink(outside.cStr(), kj::str(allowed, "/escape").cStr()), 0);
  ASSERT_EQ(::symlink("in.txt", kj::str(allowed, "/alias").cStr()), 0);

  auto none = run({}, {{{3, 1}}}, [&](auto c) { c.setLoad(kj::str(allowed, "/in.txt")); });
  EXPECT_EQ(std::string(none.error.cStr()),
            "load: no paths are allowed on this governor (start it with --allow-path DIR)");

  allow(allowed);
  auto ok = run({}, {{{3, 2}}}, [&](auto c) { c.setLoad(kj::str(allowed, "/in.txt")); });
  ASSERT_TRUE(ok.ok) << ok.error.cStr();
  EXPECT_EQ(blobText({3, 2}), "inside\n");
  auto alias = run({}, {{{3, 3}}}, [&](auto c) { c.setLoad(kj::str(allowed, "/alias")); });
  ASSERT_TRUE(alias.ok) << alias.error.cStr();  // a link that stays inside the root

  auto out = run({}, {{{3, 4}}}, [&](auto c) { c.setLoad(kj::str(outside, "/secret")); });
  EXPECT_EQ(std::string(out.error.cStr()),
            std::string("load: path '") + outside.cStr() + "/secret' is outside the allowed roots (--allow-path " +
                allowed.cStr() + ")");
  auto dotdot = run({}, {{{3, 5}}}, [&](auto c) { c.setLoad(kj::str(allowed, "/../outside/secret")); });
  EXPECT_NE(std::string(dotdot.error.cStr()).find("is outside the allowed roots"), std::string::npos)
      << dotdot.error.cStr();
  auto viaLink = run({}, {{{3, 6}}}, [&](auto c) { c.setLoad(kj::str(allowed, "/escape/secret")); });
  EXPECT_EQ(std::string(viaLink.error.cStr()),
            std::string("load: path '") + allowed.cStr() + "/escape/secret' leads outside its allowed root " +
                allowed.cStr() + " through a symbolic link");
  auto passwd = run({}, {{{3, 7}}}, [&](auto c) { c.setLoad("/etc/passwd"); });
  EXPECT_NE(std::string(passwd.error.cStr()).find("load: path '/etc/passwd' is outside the allowed roots"),
            std::string::npos);
  auto relative = run({}, {{{3, 8}}}, [&](auto c) { c.setLoad("in.txt"); });
  EXPECT_EQ(std::string(relative.error.cStr()), "load: path 'in.txt' is not absolute");

  auto tree = run({}, {{{3, 9}, Kind::DIR}}, [&](auto c) { c.setLoadDir(kj::str(allowed, "/tree")); });
  ASSERT_TRUE(tree.ok) << tree.error.cStr();
  EXPECT_EQ(describeTree(pathOf({3, 9})), describeTree(kj::str(allowed, "/tree")));
  EXPECT_EQ(tree.outputs[0].hash, treeHash(kj::str(allowed, "/tree")));

  // store: parents created, no silent overwrite, links never lead out.
  putBlob({3, 20}, "first\n");
  putBlob({3, 21}, "second\n");
  auto target = kj::str(allowed, "/new/deep/out.txt");
  auto stored = run({{{3, 20}}}, {}, [&](auto c) { c.initStore().setPath(target); });
  ASSERT_TRUE(stored.ok) << stored.error.cStr();
  EXPECT_EQ(readWholeFile(target), "first\n");
  auto again = run({{{3, 21}}}, {}, [&](auto c) { c.initStore().setPath(target); });
  EXPECT_EQ(std::string(again.error.cStr()),
            std::string("store: path '") + target.cStr() + "' already exists (set overwrite to replace it)");
  EXPECT_EQ(readWholeFile(target), "first\n");
  auto replaced = run({{{3, 21}}}, {}, [&](auto c) {
    auto s = c.initStore();
    s.setPath(target);
    s.setOverwrite(true);
  });
  ASSERT_TRUE(replaced.ok) << replaced.error.cStr();
  EXPECT_EQ(readWholeFile(target), "second\n");
  auto leak = run({{{3, 20}}}, {}, [&](auto c) { c.initStore().setPath(kj::str(allowed, "/escape/planted")); });
  EXPECT_EQ(std::string(leak.error.cStr()),
            std::string("store: path '") + allowed.cStr() + "/escape/planted' leads outside its allowed root " +
                allowed.cStr() + " through a symbolic link");
  EXPECT_FALSE(access(kj::str(outside, "/planted").cStr(), F_OK) == 0);
  auto outsideStore = run({{{3, 20}}}, {}, [&](auto c) { c.initStore().setPath(kj::str(outside, "/x")); });
  EXPECT_NE(std::string(outsideStore.error.cStr()).find("is outside the allowed roots"), std::string::npos);

  // A dir object stored as a tree, then over an existing file with overwrite.
  auto treeTarget = kj::str(allowed, "/copy");
  auto dirStored = run({{{3, 9}}}, {}, [&](auto c) { c.initStore().setPath(treeTarget); });
  ASSERT_TRUE(dirStored.ok) << dirStored.error.cStr();
  EXPECT_EQ(describeTree(treeTarget), describeTree(kj::str(allowed, "/tree")));
  EXPECT_FALSE(isReadOnly(kj::str(treeTarget, "/top.txt")));  // the user's copy is writable
  auto dirOverFile = run({{{3, 9}}}, {}, [&](auto c) {
    auto s = c.initStore();
    s.setPath(target);
    s.setOverwrite(true);
  });
  ASSERT_TRUE(dirOverFile.ok) << dirOverFile.error.cStr();
  EXPECT_EQ(describeTree(target), describeTree(kj::str(allowed, "/tree")));
}

// ------------------------------------------------------------------- execute

TEST_F(DirTasksTest, ExecuteGetsADirInputAndProducesADirOutput) {
  putTree(store, {4, 1}, sampleTree("tree"));
  auto r = exec("cd data && stat -c %a in in/sub in/top.txt > ../modes && cp -a in out && "
                "chmod -R u+w out && mkdir -p out/made/here && echo hi > out/made/here/f",
                {{{4, 1}, "data/in"}}, {{{4, 2}, Kind::DIR, "data/out"}, {{4, 7}, Kind::BLOB, "modes"}});
  ASSERT_TRUE(r.ok) << r.error.cStr() << " stderr: " << r.stderrTail.cStr();
  EXPECT_EQ(blobText({4, 7}), "555\n555\n444\n");  // the input is read-only
  auto path = pathOf({4, 2});
  auto expectedTree = sampleTree("expected");
  writeText(kj::str(expectedTree, "/made/here/f"), "hi\n");
  auto expected = describeTree(expectedTree);
  EXPECT_EQ(describeTree(path), expected);
  EXPECT_EQ(r.outputs[0].hash, treeHash(path));
  EXPECT_TRUE(isReadOnly(kj::str(path, "/made/here/f")));
  EXPECT_TRUE(isReadOnly(kj::str(path, "/made")));

  auto wrong = exec("mkdir d", {}, {{{4, 4}, Kind::BLOB, "d"}});
  EXPECT_EQ(std::string(wrong.error.cStr()), "output 'd' is a directory, but output 4/4 is declared a blob");
  auto wrong2 = exec("echo > f", {}, {{{4, 5}, Kind::DIR, "f"}});
  EXPECT_EQ(std::string(wrong2.error.cStr()), "output 'f' is a file, but output 4/5 is declared a dir");
  auto missing = exec("true", {}, {{{4, 6}, Kind::DIR, "nothing"}});
  EXPECT_EQ(std::string(missing.error.cStr()), "output directory 'nothing' was not created");
}

TEST_F(DirTasksTest, PlantedSymlinksNeverLeadTheGovernorOutOfTheSandbox) {
  auto planted = exec("ln -s /etc/passwd out.txt", {}, {{{5, 1}, Kind::BLOB, "out.txt"}});
  EXPECT_FALSE(planted.ok);
  EXPECT_EQ(std::string(planted.error.cStr()), "output 'out.txt' is a symbolic link");
  EXPECT_TRUE(store.find({5, 1}) == nullptr);

  auto dirLink = exec("ln -s /etc out", {}, {{{5, 2}, Kind::DIR, "out"}});
  EXPECT_EQ(std::string(dirLink.error.cStr()), "output 'out' is a symbolic link");
  auto parentLink = exec("rmdir d && ln -s /etc d", {}, {{{5, 3}, Kind::BLOB, "d/passwd"}});
  EXPECT_EQ(std::string(parentLink.error.cStr()), "output 'd/passwd' is inside 'd', which is a symbolic link");

  // A dir output holding a link to '/': kept as a link, never followed.
  auto rootLink = exec("mkdir out && echo x > out/f && ln -s / out/root", {}, {{{5, 4}, Kind::DIR, "out"}});
  ASSERT_TRUE(rootLink.ok) << rootLink.error.cStr();
  auto path = pathOf({5, 4});
  EXPECT_EQ(describeTree(path), "f f x\n\nroot l /\n");
  EXPECT_EQ(rootLink.outputs[0].size, 2u);  // only out/f counts
  char target[16];
  ssize_t n = readlink(kj::str(path, "/root").cStr(), target, sizeof(target));
  ASSERT_EQ(n, 1);
  EXPECT_EQ(target[0], '/');
  EXPECT_FALSE(isReadOnly("/"));  // sealing did not walk through the link
  store.remove({5, 4});
  waitWithTimeout(io, io.provider->getTimer().afterDelay(0 * kj::MILLISECONDS));
}

TEST_F(DirTasksTest, TimeLimitKillsTheProgramAndSaysSo) {
  auto pidFile = dir.sub("pid");
  auto started = monotonicUs();
  auto r = exec(std::string("echo $$ > ") + pidFile.cStr() + "; sleep 100", {}, {}, 300);
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(r.timedOut);
  EXPECT_EQ(std::string(r.error.cStr()), "time limit of 0.3 s exceeded");
  EXPECT_LT(monotonicUs() - started, 20'000'000u);
  int pid = atoi(readWholeFile(pidFile).c_str());
  ASSERT_GT(pid, 0);
  EXPECT_TRUE(isGoneOrZombie(pid, 5));
  EXPECT_EQ(members->queue->freeCpus(), 2u);

  // A built-in is abandoned at its limit too.
  auto slept = run({}, {}, [](auto c) { c.initSleep().setMilliseconds(100'000); }, 50);
  EXPECT_TRUE(slept.timedOut);
  EXPECT_EQ(std::string(slept.error.cStr()), "time limit of 0.05 s exceeded");

  auto quick = exec("true", {}, {}, 10'000);
  EXPECT_TRUE(quick.ok) << quick.error.cStr();
  EXPECT_FALSE(quick.timedOut);
  EXPECT_EQ(std::string(timeLimitMessage(2000).cStr()), "time limit of 2 s exceeded");
  EXPECT_EQ(std::string(timeLimitMessage(1050).cStr()), "time limit of 1.05 s exceeded");
}

// Issue 19 point 8: a time limit of more than ~292 years wrapped round in
// kj's nanoseconds to a negative delay, and the task was killed at once.
TEST_F(DirTasksTest, AHugeTimeLimitOrSleepIsNoLimitNotAnInstantKill) {
  auto r = exec("sleep 0.2", {}, {}, UINT64_MAX);
  EXPECT_TRUE(r.ok) << r.error.cStr();
  EXPECT_FALSE(r.timedOut);
  auto slept = run({}, {}, [](auto c) { c.initSleep().setMilliseconds(100); }, UINT64_MAX / 1000);
  EXPECT_TRUE(slept.ok) << slept.error.cStr();
  EXPECT_EQ(taskMilliseconds(UINT64_MAX), taskMilliseconds(uint64_t(100) * 365 * 24 * 3600 * 1000));
  EXPECT_GT(taskMilliseconds(UINT64_MAX), 0 * kj::SECONDS);
}

TEST_F(DirTasksTest, StdoutTailAndAttemptReachTheResult) {
  auto r = exec("echo start; head -c 10000 /dev/zero | tr '\\0' b; echo; echo attempt=$SQUALL_ATTEMPT", {}, {},
                0, 3);
  ASSERT_TRUE(r.ok) << r.error.cStr();
  EXPECT_EQ(r.stdoutTail.size(), 4096u);
  std::string tail(r.stdoutTail.cStr());
  EXPECT_EQ(tail.substr(tail.size() - 10), "attempt=3\n");
  auto mapped = exec("echo out", {}, {{{6, 1}, Kind::BLOB, ""}});
  ASSERT_TRUE(mapped.ok) << mapped.error.cStr();
  EXPECT_EQ(std::string(mapped.stdoutTail.cStr()), "");
  EXPECT_EQ(blobText({6, 1}), "out\n");
  auto first = exec("printf %s \"$SQUALL_ATTEMPT\"", {}, {{{6, 2}, Kind::BLOB, ""}});
  EXPECT_EQ(blobText({6, 2}), "1");
}

// ------------------------------------------------- what programs do to inputs

// These run as the governor does without a store view (--input-isolation
// copy); the mount mode is tested end to end (tests/sandbox-test.cpp), as it
// needs the governor's own mount namespace.

// A blob big enough to be held as a file in the store (not in memory).
std::string bigText(char fill) { return std::string(SMALL_OBJECT_SIZE + 1000, fill); }

// The object's bytes, size and hash in the store are still those recorded.
void expectIntact(ObjectStore& store, Id id, const std::string& expected) {
  auto& meta = KJ_ASSERT_NONNULL(store.find(id));
  auto path = KJ_ASSERT_NONNULL(store.data(id)).get<kj::String>();
  EXPECT_TRUE(readWholeFile(path) == expected) << "object " << kj::str(id).cStr() << " changed";
  auto hashed = hashFile(path);
  EXPECT_EQ(hashed.size, meta.size);
  EXPECT_EQ(hashed.hash, meta.hash);
}

TEST_F(DirTasksTest, TheGovernorsFilesHaveNoNameATaskCanUse) {
  // Placed at the names the governor once gave the program's stdout and
  // stderr (opened with O_TRUNC: that emptied these objects).
  putBlob({8, 1}, bigText('o'));
  putBlob({8, 2}, bigText('e'));
  auto r = exec("ls -A; wc -c < .squall-stdout; echo err >&2",
                {{{8, 1}, ".squall-stdout"}, {{8, 2}, ".squall-stderr"}}, {{{8, 3}, Kind::BLOB, ""}});
  ASSERT_TRUE(r.ok) << r.error.cStr();
  EXPECT_EQ(blobText({8, 3}), ".squall-stderr\n.squall-stdout\n" + std::to_string(bigText('o').size()) + "\n");
  EXPECT_EQ(std::string(r.stderrTail.cStr()), "err\n");
  expectIntact(store, {8, 1}, bigText('o'));
  expectIntact(store, {8, 2}, bigText('e'));

  // Nothing but the task's own names in the sandbox, even with an input fed
  // on stdin only.
  putBlob({8, 4}, bigText('i'));
  auto only = exec("ls -A; wc -c", {{{8, 4}, ""}, {{8, 1}, "mine"}}, {{{8, 5}, Kind::BLOB, ""}}, 0, 1, 0);
  ASSERT_TRUE(only.ok) << only.error.cStr();
  EXPECT_EQ(blobText({8, 5}), "mine\n" + std::to_string(bigText('i').size()) + "\n");
  // Once the sandboxes are gone (the tasks' aftermath), nothing is left.
  waitWithTimeout(io, members->queue->shutdown());
  EXPECT_EQ(listDir(openDirectory(env.tasksDir)).size(), 0u);
}

TEST_F(DirTasksTest, WritesToCopiedInputsNeverReachTheirObjects) {
  putBlob({9, 1}, bigText('a'));
  putTree(store, {9, 2}, sampleTree("tree"));
  auto treeBefore = describeTree(pathOf({9, 2}));
  putBlob({9, 3}, bigText('s'));
  auto r = exec("stat -c %a in d d/top.txt > modes && chmod u+w in && echo x >> in && "
                "chmod -R u+w d && echo y >> d/top.txt && echo new > d/new && echo z >> /dev/stdin",
                {{{9, 1}, "in"}, {{9, 2}, "d"}, {{9, 3}, ""}}, {{{9, 4}, Kind::BLOB, "modes"}}, 0, 1, 2);
  ASSERT_TRUE(r.ok) << r.error.cStr() << " stderr: " << r.stderrTail.cStr();
  EXPECT_EQ(blobText({9, 4}), "444\n555\n444\n");  // read-only, as copies
  expectIntact(store, {9, 1}, bigText('a'));
  expectIntact(store, {9, 3}, bigText('s'));
  EXPECT_EQ(describeTree(pathOf({9, 2})), treeBefore);
  EXPECT_EQ(treeHash(pathOf({9, 2})), KJ_ASSERT_NONNULL(store.find({9, 2})).hash);
}

TEST_F(DirTasksTest, AnOutputAtAWritableInputsPathTakesItInPlace) {
  putBlob({10, 1}, bigText('a') + "\n");
  putTree(store, {10, 2}, sampleTree("tree"));
  auto treeBefore = describeTree(pathOf({10, 2}));
  auto r = exec("stat -c %a f d > modes && sed -i 's/a/b/g' f && echo new > d/new && rm d/top.txt && "
                "echo made > d/sub/made",
                {{{10, 1}, "f", true}, {{10, 2}, "d", true}},
                {{{10, 3}, Kind::BLOB, "f"}, {{10, 4}, Kind::DIR, "d"}, {{10, 5}, Kind::BLOB, "modes"}});
  ASSERT_TRUE(r.ok) << r.error.cStr() << " stderr: " << r.stderrTail.cStr();
  EXPECT_EQ(blobText({10, 5}), "644\n755\n");  // writable copies
  EXPECT_TRUE(blobText({10, 3}) == bigText('b') + "\n");
  expectIntact(store, {10, 1}, bigText('a') + "\n");
  auto expected = sampleTree("expected");
  writeText(kj::str(expected, "/new"), "new\n");
  writeText(kj::str(expected, "/sub/made"), "made\n");
  EXPECT_EQ(::unlink(kj::str(expected, "/top.txt").cStr()), 0);
  EXPECT_EQ(describeTree(pathOf({10, 4})), describeTree(expected));
  EXPECT_EQ(describeTree(pathOf({10, 2})), treeBefore);

  // An output inside a dir input makes it writable too (without the flag).
  auto inside = exec("echo added > d/added", {{{10, 2}, "d"}}, {{{10, 6}, Kind::BLOB, "d/added"}});
  ASSERT_TRUE(inside.ok) << inside.error.cStr();
  EXPECT_EQ(blobText({10, 6}), "added\n");
  EXPECT_EQ(describeTree(pathOf({10, 2})), treeBefore);
}

// --------------------------------------------------------------- tar archives

// A tar built entry by entry, as an attacker would.
class TarBuilder {
 public:
  TarBuilder() {
    a = archive_write_new();
    archive_write_set_format_pax_restricted(a);
    archive_write_open(a, this, nullptr, &TarBuilder::onWrite, nullptr);
  }
  ~TarBuilder() { archive_write_free(a); }
  TarBuilder& file(const char* path, const std::string& content) {
    auto* e = entry(path, AE_IFREG, content.size());
    archive_write_header(a, e);
    archive_write_data(a, content.data(), content.size());
    archive_entry_free(e);
    return *this;
  }
  TarBuilder& hardlink(const char* path, const char* target) {
    auto* e = entry(path, AE_IFREG, 0);
    archive_entry_set_hardlink(e, target);
    archive_write_header(a, e);
    archive_entry_free(e);
    return *this;
  }
  TarBuilder& symlink(const char* path, const char* target) {
    auto* e = entry(path, AE_IFLNK, 0);
    archive_entry_set_symlink(e, target);
    archive_write_header(a, e);
    archive_entry_free(e);
    return *this;
  }
  TarBuilder& fifo(const char* path) {
    auto* e = entry(path, AE_IFIFO, 0);
    archive_write_header(a, e);
    archive_entry_free(e);
    return *this;
  }
  kj::Array<const kj::byte> finish() {
    archive_write_close(a);
    return kj::heapArray<const kj::byte>(bytes.data(), bytes.size());
  }

 private:
  struct archive* a;
  std::vector<kj::byte> bytes;
  archive_entry* entry(const char* path, int type, size_t size) {
    auto* e = archive_entry_new();
    archive_entry_set_pathname(e, path);
    archive_entry_set_filetype(e, type);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, size);
    return e;
  }
  static la_ssize_t onWrite(struct archive*, void* self, const void* buffer, size_t size) {
    auto* b = static_cast<TarBuilder*>(self);
    b->bytes.insert(b->bytes.end(), static_cast<const kj::byte*>(buffer),
                    static_cast<const kj::byte*>(buffer) + size);
    return size;
  }
};

std::string tarError(kj::AsyncIoContext& io, ObjectStore& store, Id id, kj::Array<const kj::byte> tar) {
  return waitWithTimeout(io, store.putTar(id, kj::mv(tar), kj::str("constant ", id))
                                 .then([](ObjectMeta) { return std::string("no error"); },
                                       [](kj::Exception&& e) { return std::string(e.getDescription().cStr()); }));
}

TEST_F(DirTasksTest, MaliciousTarArchivesAreRefused) {
  EXPECT_EQ(tarError(io, store, {7, 1}, TarBuilder().file("ok.txt", "x").file("/etc/evil", "x").finish()),
            "constant 7/1: tar entry '/etc/evil' is not allowed: it is absolute");
  EXPECT_EQ(tarError(io, store, {7, 2}, TarBuilder().file("../x", "x").finish()),
            "constant 7/2: tar entry '../x' is not allowed: it contains '..'");
  EXPECT_EQ(tarError(io, store, {7, 3}, TarBuilder().file("a", "x").hardlink("b", "/etc/passwd").finish()),
            "constant 7/3: tar entry 'b' is a hard link; hard links are not allowed");
  EXPECT_EQ(tarError(io, store, {7, 4}, TarBuilder().fifo("p").finish()),
            "constant 7/4: tar entry 'p' is a fifo; only regular files, directories and symbolic links are "
            "allowed");
  // A link, then a file "through" it: nothing is written outside.
  auto outside = dir.sub("outside");
  makeDirs(outside);
  EXPECT_EQ(tarError(io, store, {7, 5},
                     TarBuilder().symlink("l", outside.cStr()).file("l/planted", "x").finish()),
            "constant 7/5: tar entry 'l/planted' is inside 'l', which is a symbolic link");
  EXPECT_NE(access(kj::str(outside, "/planted").cStr(), F_OK), 0);
  EXPECT_NE(access(dir.sub("x").cStr(), F_OK), 0);
  for (uint64_t n = 1; n <= 5; n++) EXPECT_TRUE(store.find({7, n}) == nullptr);

  // A good archive with "./" prefixes unpacks, links kept as links.
  auto meta = waitWithTimeout(
      io, store.putTar({7, 6}, TarBuilder().file("./a/b.txt", "hello").symlink("./a/l", "/").finish(),
                       kj::str("constant 7/6")));
  EXPECT_EQ(meta.kind, Kind::DIR);
  EXPECT_EQ(meta.size, 5u);
  EXPECT_EQ(describeTree(pathOf({7, 6})), "a d\na/b.txt f hello\na/l l /\n");
}

}  // namespace
}  // namespace squall
