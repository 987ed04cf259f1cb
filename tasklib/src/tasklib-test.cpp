// tasklib's executor side against a governor's side of the protocol: the
// executor serves on its own thread (its own KJ loop) over a socketpair,
// the test calls it as a governor would. Files in a temp dir.
#include <squall/tasklib/tasklib.h>

#include <capnp/rpc-twoparty.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <squall/proto/errors.h>
#include <squall/wire/executor.capnp.h>
#include <sys/socket.h>
#include <thread>

namespace squall {
namespace {

namespace fs = std::filesystem;

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeFile(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// An executor serving on its own thread, and the governor's end of it.
class Served {
 public:
  explicit Served(Executor& executor) : io(kj::setupAsyncIo()) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    thread = std::thread([&executor, fd = fds[1]]() { executor.serveFd(fd); });
    stream = io.lowLevelProvider->wrapSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    client = kj::heap<capnp::TwoPartyClient>(*stream);
    cap = client->bootstrap().castAs<wire::Executor>();
  }
  ~Served() {
    // Closing the governor's end ends serveFd().
    cap = nullptr;
    client = nullptr;
    stream = nullptr;
    thread.join();
  }

  kj::AsyncIoContext io;
  std::thread thread;
  kj::Own<kj::AsyncIoStream> stream;
  kj::Own<capnp::TwoPartyClient> client;
  wire::Executor::Client cap = nullptr;
};

class TasklibTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/squall-tasklib-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir = pattern;
  }
  void TearDown() override { fs::remove_all(dir); }

  // A fresh, empty output directory for one call.
  std::string outputDir() {
    auto path = dir / ("out-" + std::to_string(calls++));
    fs::create_directory(path);
    return path.string();
  }

  struct In {
    wire::ObjectKind kind = wire::ObjectKind::BLOB;
    std::string path;  // or
    std::string data;
    std::string label;
  };

  // Calls `function` and waits for the answer (or the error, rethrown).
  capnp::Response<wire::Executor::CallResults> call(Served& served, const std::string& function,
                                                  const std::vector<In>& inputs,
                                                  const std::vector<wire::ObjectKind>& outputs,
                                                  const std::string& out, const std::string& config = "") {
    auto request = served.cap.callRequest();
    request.setFunction(function);
    request.setConfig(kj::arrayPtr(reinterpret_cast<const kj::byte*>(config.data()), config.size()));
    auto list = request.initInputs(inputs.size());
    for (uint i = 0; i < inputs.size(); i++) {
      list[i].setKind(inputs[i].kind);
      list[i].setLabel(inputs[i].label);
      if (inputs[i].path.empty()) {
        list[i].setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(inputs[i].data.data()), inputs[i].data.size()));
        list[i].setSize(inputs[i].data.size());
      } else {
        list[i].setPath(inputs[i].path);
      }
    }
    auto kinds = request.initOutputKinds(outputs.size());
    for (uint i = 0; i < outputs.size(); i++) kinds.set(i, outputs[i]);
    request.setOutputDir(out);
    return request.send().wait(served.io.waitScope);
  }

  // The message a call that must fail fails with ("" if it succeeded).
  std::string refusal(Served& served, const std::string& function, const std::vector<wire::ObjectKind>& outputs) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { call(served, function, {}, outputs, outputDir()); })) {
      return userMessage(*e).cStr();
    }
    return "";
  }

  fs::path dir;
  int calls = 0;
};

TEST_F(TasklibTest, DescribeNamesTheExecutorAndItsFunctions) {
  Executor ex("text");
  ex.add("wordcount", [](Call&) {});
  ex.add("split", [](Call&) {}, std::vector<std::string>{"head", "tail"});
  Served served(ex);
  auto answer = served.cap.describeRequest().send().wait(served.io.waitScope);
  EXPECT_EQ(answer.getVersion(), wire::EXECUTOR_PROTOCOL_VERSION);
  EXPECT_EQ(answer.getName(), "text");
  auto functions = answer.getFunctions();
  ASSERT_EQ(functions.size(), 2u);
  EXPECT_EQ(functions[0].getName(), "split");
  EXPECT_TRUE(functions[0].getNamed());
  ASSERT_EQ(functions[0].getOutputs().size(), 2u);
  EXPECT_EQ(functions[0].getOutputs()[1], "tail");
  EXPECT_EQ(functions[1].getName(), "wordcount");
  EXPECT_FALSE(functions[1].getNamed());
  EXPECT_EQ(functions[1].getOutputs().size(), 1u);
}

TEST_F(TasklibTest, AFileInputIsMappedAndOutputsComeBackInlineOrAsFiles) {
  std::string big(3 << 20, 'x');
  big[12345] = 'y';
  writeFile(dir / "input", big);
  Executor ex("text");
  ex.add(
      "stats",
      [](Call& call) {
        auto bytes = call.input(0).bytes();
        call.output(0).write(std::to_string(bytes.size()) + " " + std::string(1, bytes[12345]));
        // Beyond the inline limit: travels as a file.
        call.output(1).write(std::string(Executor::INLINE_LIMIT + 1, 'z'));
      },
      2);
  Served served(ex);
  auto out = outputDir();
  auto answer = call(served, "stats", {{wire::ObjectKind::BLOB, (dir / "input").string()}},
                     {wire::ObjectKind::BLOB, wire::ObjectKind::BLOB}, out);
  auto outputs = answer.getOutputs();
  ASSERT_EQ(outputs.size(), 2u);
  ASSERT_TRUE(outputs[0].isData());
  auto data = outputs[0].getData();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(data.begin()), data.size()), "3145728 y");
  ASSERT_TRUE(outputs[1].isFile());
  EXPECT_EQ(readFile(fs::path(out) / outputs[1].getFile().cStr()), std::string(Executor::INLINE_LIMIT + 1, 'z'));
}

TEST_F(TasklibTest, DataInputsConfigAndNamedOutputsReachTheFunction) {
  Executor ex("text");
  ex.add(
      "join",
      [](Call& call) {
        std::string joined;
        for (size_t i = 0; i < call.inputCount(); i++) {
          joined += call.input(i).label() + "=" + std::string(call.input(i).text()) + ";";
        }
        call.output("joined").write(joined);
        call.output("config").write(call.config());
      },
      std::vector<std::string>{"joined", "config"});
  Served served(ex);
  auto answer = call(served, "join", {{wire::ObjectKind::BLOB, "", "one", "a"}, {wire::ObjectKind::BLOB, "", "", "b"}},
                     {wire::ObjectKind::BLOB, wire::ObjectKind::BLOB}, outputDir(), "cfg");
  auto outputs = answer.getOutputs();
  auto text = [](capnp::Data::Reader d) { return std::string(reinterpret_cast<const char*>(d.begin()), d.size()); };
  EXPECT_EQ(text(outputs[0].getData()), "a=one;b=;");
  EXPECT_EQ(text(outputs[1].getData()), "cfg");
}

TEST_F(TasklibTest, ADirInputIsAPathAndADirOutputADirectoryToFill) {
  fs::create_directory(dir / "tree");
  writeFile(dir / "tree" / "a.txt", "hello");
  Executor ex("files");
  ex.add("copy-a", [](Call& call) {
    EXPECT_THROW(call.input(0).bytes(), std::logic_error);
    auto target = fs::path(call.output(0).dir()) / "copy.txt";
    fs::copy_file(fs::path(call.input(0).path()) / "a.txt", target);
  });
  ex.add("file-out", [](Call& call) {
    std::ofstream(call.output(0).file()) << "written through a path";
  });
  Served served(ex);
  auto out = outputDir();
  auto answer = call(served, "copy-a", {{wire::ObjectKind::DIR, (dir / "tree").string()}}, {wire::ObjectKind::DIR}, out);
  ASSERT_TRUE(answer.getOutputs()[0].isFile());
  EXPECT_EQ(readFile(fs::path(out) / answer.getOutputs()[0].getFile().cStr() / "copy.txt"), "hello");
  auto out2 = outputDir();
  auto second = call(served, "file-out", {}, {wire::ObjectKind::BLOB}, out2);
  ASSERT_TRUE(second.getOutputs()[0].isFile());
  EXPECT_EQ(readFile(fs::path(out2) / second.getOutputs()[0].getFile().cStr()), "written through a path");
}

TEST_F(TasklibTest, AThrownExceptionFailsTheCallWithItsMessageAndTheExecutorGoesOn) {
  Executor ex("text");
  ex.add("fails", [](Call&) { throw std::runtime_error("no words in this input"); });
  ex.add("ok", [](Call& call) { call.output(0).write("fine"); });
  Served served(ex);
  EXPECT_EQ(refusal(served, "fails", {wire::ObjectKind::BLOB}), "no words in this input");
  auto answer = call(served, "ok", {}, {wire::ObjectKind::BLOB}, outputDir());
  EXPECT_TRUE(answer.getOutputs()[0].isData());
}

TEST_F(TasklibTest, AnUnknownFunctionOrAWrongOutputCountIsRefusedByName) {
  Executor ex("text");
  ex.add("wordcount", [](Call&) {});
  ex.add("lines", [](Call&) {});
  Served served(ex);
  EXPECT_EQ(refusal(served, "wordcont", {wire::ObjectKind::BLOB}),
            "executor text has no function wordcont (it has lines, wordcount)");
  EXPECT_EQ(refusal(served, "wordcount", {wire::ObjectKind::BLOB, wire::ObjectKind::BLOB}),
            "function text/wordcount makes 1 outputs; the task has 2");
}

TEST_F(TasklibTest, AFunctionKeepsItsStateBetweenCalls) {
  Executor ex("state");
  int loaded = 0;  // what a model load would be: done once, on first use
  int count = 0;
  ex.add("count", [&](Call& call) {
    if (loaded == 0) loaded++;
    call.output(0).write(std::to_string(++count));
  });
  Served served(ex);
  std::string last;
  for (int i = 0; i < 3; i++) {
    auto answer = call(served, "count", {}, {wire::ObjectKind::BLOB}, outputDir());
    auto d = answer.getOutputs()[0].getData();
    last = std::string(reinterpret_cast<const char*>(d.begin()), d.size());
  }
  EXPECT_EQ(last, "3");
  EXPECT_EQ(loaded, 1);
}

// The governor may send calls while one runs (executor-pool.h): they run
// one at a time, in the order sent, and each answer says how long its
// function ran.
TEST_F(TasklibTest, CallsSentWhileOneRunsRunInOrderAndSayHowLongTheyRan) {
  Executor ex("ordered");
  std::vector<std::string> seen;
  ex.add("note", [&](Call& call) {
    std::string config(call.config());
    if (config == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(30));
    seen.push_back(config);
  });
  Served served(ex);
  std::vector<std::string> configs{"slow", "a", "b", "c", "d"};
  kj::Vector<kj::Promise<capnp::Response<wire::Executor::CallResults>>> answers;
  for (auto& config : configs) {
    auto request = served.cap.callRequest();
    request.setFunction("note");
    request.setConfig(kj::arrayPtr(reinterpret_cast<const kj::byte*>(config.data()), config.size()));
    request.initOutputKinds(1).set(0, wire::ObjectKind::BLOB);
    request.setOutputDir(outputDir());
    answers.add(request.send());
  }
  auto done = kj::joinPromises(answers.releaseAsArray()).wait(served.io.waitScope);
  EXPECT_EQ(seen, configs);
  EXPECT_GE(done[0].getRunUs(), 30000u);
  EXPECT_LT(done[0].getRunUs(), 30000000u);
  for (uint i = 1; i < done.size(); i++) EXPECT_LT(done[i].getRunUs(), 30000u) << configs[i];
}

TEST_F(TasklibTest, MisuseIsANamedErrorNotACrash) {
  EXPECT_THROW(Executor("two words"), std::invalid_argument);
  EXPECT_THROW(Executor(""), std::invalid_argument);
  Executor ex("text");
  ex.add("f", [](Call&) {});
  EXPECT_THROW(ex.add("f", [](Call&) {}), std::invalid_argument);
  EXPECT_THROW(ex.add("a/b", [](Call&) {}), std::invalid_argument);
  EXPECT_THROW(ex.add("g", [](Call&) {}, std::vector<std::string>{"x", "x"}), std::invalid_argument);
  ex.add("both", [](Call& call) {
    call.output(0).write("a");
    call.output(0).file();  // a blob is either written or a file, not both
  });
  Served served(ex);
  EXPECT_EQ(refusal(served, "both", {wire::ObjectKind::BLOB}),
            "output 0 is written through write(): not file() as well");
}

TEST_F(TasklibTest, StartedByHandItExplainsWhatItIs) {
  Executor ex("text");
  ex.add("wordcount", [](Call&) {});
  char name[] = "text-executor";
  char* argv[] = {name, nullptr};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ex.serve(1, argv), 2);
  auto err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("a governor starts it (squall-governor --executor text=PROGRAM)"), std::string::npos) << err;
  char bad[] = "--squall-executor-fd=x";
  char* badArgv[] = {name, bad, nullptr};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ex.serve(2, badArgv), 2);
  ::testing::internal::GetCapturedStderr();
  char describe[] = "--squall-describe";
  char* describeArgv[] = {name, describe, nullptr};
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(ex.serve(2, describeArgv), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "text/wordcount -> 1 output\n");
}

}  // namespace
}  // namespace squall
