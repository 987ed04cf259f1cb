// tasklib's executor side against a governor's side of the protocol: the
// executor serves on its own thread (its own KJ loop) over a socketpair,
// the test calls it as a governor would. Files in a temp dir.
#include <squall/tasklib/tasklib.h>

#include <atomic>
#include <capnp/rpc-twoparty.h>
#include <capnp/serialize.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <memory>
#include <kj/async-io.h>
#include <kj/io.h>
#include <squall/proto/errors.h>
#include <squall/wire/executor.capnp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

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

// An executor serving on its own thread, and the governor's end of it
// (which sends pipe ends, as a governor does).
class Served {
 public:
  explicit Served(Executor& executor) : io(kj::setupAsyncIo()) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    thread = std::thread([&executor, fd = fds[1]]() { executor.serveFd(fd); });
    stream = io.lowLevelProvider->wrapUnixSocketFd(fds[0], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    client = kj::heap<capnp::TwoPartyClient>(*stream, 4);
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
  kj::Own<kj::AsyncCapabilityStream> stream;
  kj::Own<capnp::TwoPartyClient> client;
  wire::Executor::Client cap = nullptr;
};

// A pipe end travelling with a call, as the governor's does: its
// descriptor goes along with the message.
class PipeEndCap final : public wire::PipeEnd::Server {
 public:
  explicit PipeEndCap(int fd) : fd(fd) {}
  kj::Maybe<int> getFd() override { return fd.get(); }

 private:
  kj::AutoCloseFd fd;
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
    // A live stream's read end (kind stream), given away with the call.
    int stream = -1;
  };

  static void setInputs(capnp::List<wire::CallInput>::Builder list, const std::vector<In>& inputs) {
    for (uint i = 0; i < inputs.size(); i++) {
      list[i].setKind(inputs[i].kind);
      list[i].setLabel(inputs[i].label);
      if (inputs[i].stream >= 0) {
        list[i].setStream(kj::heap<PipeEndCap>(inputs[i].stream));
      } else if (inputs[i].path.empty()) {
        list[i].setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(inputs[i].data.data()), inputs[i].data.size()));
        list[i].setSize(inputs[i].data.size());
      } else {
        list[i].setPath(inputs[i].path);
      }
    }
  }

  static kj::ArrayPtr<const kj::byte> bytes(const std::string& text) {
    return kj::arrayPtr(reinterpret_cast<const kj::byte*>(text.data()), text.size());
  }

  // Sends a call of `function` without waiting for it.
  kj::Promise<capnp::Response<wire::Executor::CallResults>> sendCall(Served& served, const std::string& function,
                                                                    const std::vector<In>& inputs,
                                                                    const std::vector<wire::ObjectKind>& outputs,
                                                                    const std::string& out,
                                                                    const std::string& config = "") {
    auto request = served.cap.callRequest();
    request.setFunction(function);
    request.setConfig(bytes(config));
    setInputs(request.initInputs(inputs.size()), inputs);
    auto kinds = request.initOutputKinds(outputs.size());
    for (uint i = 0; i < outputs.size(); i++) kinds.set(i, outputs[i]);
    request.setOutputDir(out);
    return request.send();
  }

  // Calls `function` and waits for the answer (or the error, rethrown).
  capnp::Response<wire::Executor::CallResults> call(Served& served, const std::string& function,
                                                  const std::vector<In>& inputs,
                                                  const std::vector<wire::ObjectKind>& outputs,
                                                  const std::string& out, const std::string& config = "") {
    return sendCall(served, function, inputs, outputs, out, config).wait(served.io.waitScope);
  }

  // Makes the executor's process the home of an actor of `type`; the
  // error, rethrown.
  capnp::Response<wire::Executor::ConstructResults> construct(Served& served, const std::string& type,
                                                            const std::string& config = "",
                                                            const std::vector<In>& inputs = {}) {
    auto request = served.cap.constructRequest();
    request.setType(type);
    request.setConfig(bytes(config));
    setInputs(request.initInputs(inputs.size()), inputs);
    return request.send().wait(served.io.waitScope);
  }

  // The message a construct that must fail fails with ("" if it succeeded).
  std::string constructRefusal(Served& served, const std::string& type, const std::string& config = "") {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { construct(served, type, config); })) {
      return userMessage(*e).cStr();
    }
    return "";
  }

  // A method call with one blob output and `config`: what it wrote.
  std::string callText(Served& served, const std::string& function, const std::string& config = "") {
    return text(call(served, function, {}, {wire::ObjectKind::BLOB}, outputDir(), config).getOutputs()[0].getData());
  }

  static std::string text(capnp::Data::Reader data) {
    return std::string(reinterpret_cast<const char*>(data.begin()), data.size());
  }

  // The message a call that must fail fails with ("" if it succeeded).
  std::string refusal(Served& served, const std::string& function, const std::vector<wire::ObjectKind>& outputs,
                      const std::string& config = "") {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { call(served, function, {}, outputs, outputDir(), config); })) {
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

// Files the governor lends a call (executor.capnp WarmFile): an output of
// known size takes the smallest that holds it, renamed and cut to its size,
// and writes every byte over the old ones; with none left, a new file.
TEST_F(TasklibTest, OutputsOfKnownSizeTakeTheFilesTheGovernorLentAndWriteEveryByte) {
  const size_t MIB = 1 << 20;
  writeFile(dir / "lent-big", std::string(4 * MIB, 'o'));
  writeFile(dir / "lent-small", std::string(MIB, 'p'));
  auto inode = [](const fs::path& path) {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  };
  auto big = inode(dir / "lent-big"), small = inode(dir / "lent-small");
  Executor ex("sized");
  ex.add(
      "two",
      [MIB](Call& call) {
        int fd = ::open(call.output(0).fileOfSize(3 * MIB).c_str(), O_WRONLY | O_CLOEXEC);
        ASSERT_GE(fd, 0);
        std::string bytes(3 * MIB, 'n');
        ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
        ::close(fd);
        // Past the inline limit: the executor writes it into a file itself,
        // once the function returned: the other lent file is gone by then.
        call.output(1).write(std::string(600 << 10, 'w'));
        std::ofstream(call.output(2).fileOfSize(1000), std::ios::in | std::ios::out) << std::string(1000, 'x');
      },
      3);
  Served served(ex);
  auto out = outputDir();
  auto request = served.cap.callRequest();
  request.setFunction("two");
  auto kinds = request.initOutputKinds(3);
  for (uint i = 0; i < 3; i++) kinds.set(i, wire::ObjectKind::BLOB);
  request.setOutputDir(out);
  auto lent = request.initWarmFiles(2);
  lent[0].setPath((dir / "lent-small").string());
  lent[0].setSize(MIB);
  lent[1].setPath((dir / "lent-big").string());
  lent[1].setSize(4 * MIB);
  auto answer = request.send().wait(served.io.waitScope);
  auto outputs = answer.getOutputs();
  ASSERT_EQ(outputs.size(), 3u);
  auto path = [&](uint i) { return fs::path(out) / outputs[i].getFile().cStr(); };
  EXPECT_EQ(inode(path(0)), big);
  EXPECT_EQ(readFile(path(0)), std::string(3 * MIB, 'n'));
  EXPECT_EQ(inode(path(2)), small);
  EXPECT_EQ(readFile(path(2)), std::string(1000, 'x'));
  // Nothing left to lend: a new file.
  EXPECT_NE(inode(path(1)), big);
  EXPECT_NE(inode(path(1)), small);
  EXPECT_EQ(readFile(path(1)), std::string(600 << 10, 'w'));
  EXPECT_FALSE(fs::exists(dir / "lent-big"));
  EXPECT_FALSE(fs::exists(dir / "lent-small"));
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

// ------------------------------------------------------------ actors

long number(std::string_view text) { return text.empty() ? 0 : std::stol(std::string(text)); }

// Counters destroyed (on the executor's thread; read on the test's, which
// sees no synchronisation through the socket: atomic).
std::atomic<int> countersDestroyed{0};

// A running total: starts at its constructor's config, `add` adds its
// call's config and writes the total.
struct Counter {
  explicit Counter(Call& init) : total(number(init.config())) {}
  ~Counter() { countersDestroyed++; }
  void add(Call& call) {
    total += number(call.config());
    call.output(0).write(std::to_string(total));
  }
  void get(Call& call) const { call.output(0).write(std::to_string(total)); }
  long total;
};

// Refuses any config but "good".
struct Picky {
  explicit Picky(Call& init) : config(init.config()) {
    if (config != "good") throw std::invalid_argument("Picky wants a good config, not '" + config + "'");
  }
  void get(Call& call) { call.output(0).write(config); }
  std::string config;
};

// What std::invalid_argument a registration throws ("" if none).
template <typename Register>
std::string misuse(Register&& doRegister) {
  try {
    doRegister();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST_F(TasklibTest, DescribeListsActorTypesAndTheirMethodsBesideFunctions) {
  Executor ex("stats");
  ex.add("mean", [](Call&) {});
  ex.actor<Counter>("Counter")
      .method("add", &Counter::add)
      .method("split", [](Counter&, Call&) {}, std::vector<std::string>{"head", "tail"})
      .method("reset", [](Counter& c, Call&) { c.total = 0; }, 0);
  Served served(ex);
  auto answer = served.cap.describeRequest().send().wait(served.io.waitScope);
  EXPECT_EQ(answer.getVersion(), wire::EXECUTOR_PROTOCOL_VERSION);
  auto functions = answer.getFunctions();
  ASSERT_EQ(functions.size(), 5u);
  std::vector<std::string> seen;
  for (auto f : functions) {
    std::string line = std::string(f.getName().cStr()) + (f.getActor() ? " actor" : "") + (f.getNamed() ? " named" : "");
    for (auto o : f.getOutputs()) line += " " + std::string(o.cStr());
    seen.push_back(line);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"mean 0", "Counter actor", "Counter.add 0", "Counter.reset",
                                            "Counter.split named head tail"}));

  char name[] = "stats-executor";
  char describe[] = "--squall-describe";
  char* argv[] = {name, describe, nullptr};
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(ex.serve(2, argv), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "stats/mean -> 1 output\n"
            "stats/Counter: actor type\n"
            "stats/Counter.add -> 1 output\n"
            "stats/Counter.reset -> 0 outputs\n"
            "stats/Counter.split -> 2 outputs (head, tail)\n");
}

// The governor sends an actor's calls while the one before runs: they run
// on the one instance, in the order sent. The instance goes with the
// process (here: when serving ends).
TEST_F(TasklibTest, AnActorKeepsItsStateAcrossCallsRunInTheOrderSent) {
  Executor ex("stats");
  ex.actor<Counter>("Counter")
      .method("add", &Counter::add)
      .method("get", &Counter::get)  // const: through std::function
      .method("slow-add", [](Counter& counter, Call& call) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        counter.add(call);
      });
  countersDestroyed = 0;
  {
    Served served(ex);
    auto made = construct(served, "Counter", "10");
    EXPECT_LT(made.getRunUs(), 30000000u);
    std::vector<std::pair<std::string, std::string>> sends{
        {"Counter.slow-add", "1"}, {"Counter.add", "2"}, {"Counter.add", "3"}, {"Counter.add", "4"}, {"Counter.get", ""}};
    kj::Vector<kj::Promise<capnp::Response<wire::Executor::CallResults>>> answers;
    for (auto& [function, config] : sends) {
      answers.add(sendCall(served, function, {}, {wire::ObjectKind::BLOB}, outputDir(), config));
    }
    auto done = kj::joinPromises(answers.releaseAsArray()).wait(served.io.waitScope);
    std::vector<std::string> totals;
    for (auto& answer : done) totals.push_back(text(answer.getOutputs()[0].getData()));
    EXPECT_EQ(totals, (std::vector<std::string>{"11", "13", "16", "20", "20"}));
    EXPECT_GE(done[0].getRunUs(), 30000u);
    EXPECT_EQ(countersDestroyed, 0);
  }
  EXPECT_EQ(countersDestroyed, 1);
}

// The governor's end of an actor's calls channel (executor.capnp,
// openCalls): MethodCalls written, MethodAnswers read, blocking, on this
// thread (the executor serves on its own).
class CallsChannel {
 public:
  explicit CallsChannel(Served& served) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
    ours = kj::AutoCloseFd(fds[0]);
    auto request = served.cap.openCallsRequest();
    request.setChannel(kj::heap<PipeEndCap>(fds[1]));
    request.send().wait(served.io.waitScope);
  }
  // Sends a call of `function` (one blob output, `config`) with `serial`.
  void send(uint64_t serial, const std::string& function, const std::string& config, const std::string& out) {
    capnp::MallocMessageBuilder message;
    auto call = message.initRoot<wire::MethodCall>();
    call.setSerial(serial);
    call.setFunction(function);
    call.setConfig(kj::arrayPtr(reinterpret_cast<const kj::byte*>(config.data()), config.size()));
    call.initOutputKinds(1).set(0, wire::ObjectKind::BLOB);
    call.setOutputDir(out);
    call.initContext().setSession(1);
    call.getContext().setTask(serial);
    capnp::writeMessageToFd(ours, message);
  }
  // The next answer: "serial:total", or "serial!error".
  std::string next() {
    capnp::StreamFdMessageReader reader(ours.get());
    auto answer = reader.getRoot<wire::MethodAnswer>();
    if (answer.getFailed()) return std::to_string(answer.getSerial()) + "!" + answer.getError().cStr();
    auto data = answer.getOutputs()[0].getData();
    return std::to_string(answer.getSerial()) + ":" + std::string(reinterpret_cast<const char*>(data.begin()), data.size());
  }
  kj::AutoCloseFd ours;
};

// Calls written back to back on the channel run in order on the instance;
// each answer leaves before the next method starts (a method that waits
// does not hold back the answers before it); a method that throws fails
// its call alone.
TEST_F(TasklibTest, MethodCallsOverTheCallsChannelAreAnsweredInOrderEachBeforeTheNextRuns) {
  int gate[2];
  ASSERT_EQ(pipe2(gate, O_CLOEXEC), 0);
  // Closed after the executor's thread has ended (served goes first).
  kj::AutoCloseFd gateRead(gate[0]), gateWrite(gate[1]);
  Executor ex("stats");
  ex.actor<Counter>("Counter")
      .method("add", &Counter::add)
      .method("wait-then-add",
              [&gate](Counter& counter, Call& call) {
                char byte;
                EXPECT_EQ(read(gate[0], &byte, 1), 1);
                counter.add(call);
              })
      .method("fail", [](Counter&, Call&) { throw std::runtime_error("refused on purpose"); });
  Served served(ex);
  construct(served, "Counter", "10");
  CallsChannel channel(served);
  channel.send(1, "Counter.add", "1", outputDir());
  channel.send(2, "Counter.add", "2", outputDir());
  channel.send(3, "Counter.wait-then-add", "3", outputDir());
  channel.send(4, "Counter.fail", "", outputDir());
  channel.send(5, "Counter.nope", "", outputDir());
  channel.send(6, "Counter.add", "4", outputDir());
  // Read while call 3 waits: it runs, so 1 and 2 were answered before it.
  EXPECT_EQ(channel.next(), "1:11");
  EXPECT_EQ(channel.next(), "2:13");
  ASSERT_EQ(write(gate[1], "g", 1), 1);
  EXPECT_EQ(channel.next(), "3:16");
  EXPECT_EQ(channel.next(), "4!refused on purpose");
  EXPECT_EQ(channel.next(), "5!actor type stats/Counter has no method nope (it has add, fail, wait-then-add)");
  EXPECT_EQ(channel.next(), "6:20");
}

// Inputs come as a call's do (a store file, bytes in the call, a live
// stream); the constructor copies what it keeps, since they go with the
// construct.
TEST_F(TasklibTest, AConstructorReadsItsInputsAndConfig) {
  struct Index {
    explicit Index(Call& init) : config(init.config()) {
      EXPECT_EQ(init.outputCount(), 0u);
      for (size_t i = 0; i < init.inputCount(); i++) {
        contents += init.input(i).label() + "=" + std::string(init.input(i).text()) + ";";
      }
    }
    void show(Call& call) {
      call.output("contents").write(contents);
      call.output("config").write(config);
    }
    std::string config;
    std::string contents;
  };
  writeFile(dir / "input", "from a file");
  int pipe[2];
  ASSERT_EQ(pipe2(pipe, O_CLOEXEC), 0);
  ASSERT_EQ(write(pipe[1], "streamed", 8), 8);
  close(pipe[1]);
  Executor ex("search");
  ex.actor<Index>("Index").method("show", &Index::show, std::vector<std::string>{"contents", "config"});
  Served served(ex);
  construct(served, "Index", "cfg",
            {{wire::ObjectKind::BLOB, (dir / "input").string(), "", "file"},
             {wire::ObjectKind::BLOB, "", "carried", "data"},
             {wire::ObjectKind::STREAM, "", "", "live", pipe[0]}});
  auto answer = call(served, "Index.show", {}, {wire::ObjectKind::BLOB, wire::ObjectKind::BLOB}, outputDir());
  EXPECT_EQ(text(answer.getOutputs()[0].getData()), "file=from a file;data=carried;live=streamed;");
  EXPECT_EQ(text(answer.getOutputs()[1].getData()), "cfg");
}

TEST_F(TasklibTest, AConstructorThatThrowsFailsWithItsMessageAndLeavesNoActor) {
  Executor ex("stats");
  ex.actor<Picky>("Picky").method("get", &Picky::get);
  Served served(ex);
  EXPECT_EQ(constructRefusal(served, "Picky", "bad"), "Picky wants a good config, not 'bad'");
  EXPECT_EQ(refusal(served, "Picky.get", {wire::ObjectKind::BLOB}),
            "no actor Picky was constructed in this process: cannot call Picky.get");
  EXPECT_EQ(constructRefusal(served, "Picky", "good"), "");
  EXPECT_EQ(callText(served, "Picky.get"), "good");
}

TEST_F(TasklibTest, MisdirectedActorRequestsAreRefusedByName) {
  Executor ex("stats");
  ex.add("mean", [](Call&) {});
  ex.actor<Counter>("Counter").method("add", &Counter::add);
  ex.actor<Picky>("Picky").method("get", &Picky::get);
  Served served(ex);
  EXPECT_EQ(refusal(served, "Counter.add", {wire::ObjectKind::BLOB}),
            "no actor Counter was constructed in this process: cannot call Counter.add");
  EXPECT_EQ(constructRefusal(served, "Countr"), "executor stats has no actor type Countr (it has Counter, Picky)");
  EXPECT_EQ(constructRefusal(served, "Counter", "1"), "");
  EXPECT_EQ(refusal(served, "Picky.get", {wire::ObjectKind::BLOB}),
            "this process holds actor Counter, not Picky: cannot call Picky.get");
  EXPECT_EQ(refusal(served, "Counter.ad", {wire::ObjectKind::BLOB}),
            "actor type stats/Counter has no method ad (it has add)");
  EXPECT_EQ(refusal(served, "Countr.add", {wire::ObjectKind::BLOB}),
            "executor stats has no function Countr.add (it has mean)");
  EXPECT_EQ(refusal(served, "Counter.add", {wire::ObjectKind::BLOB, wire::ObjectKind::BLOB}),
            "method stats/Counter.add makes 1 outputs; the task has 2");
  EXPECT_EQ(refusal(served, "Counter", {}),
            "Counter is an actor type of executor stats: construct it, then call its methods as Counter.method");
  EXPECT_EQ(constructRefusal(served, "Counter"), "this process already holds actor Counter");
  EXPECT_EQ(constructRefusal(served, "Picky", "good"), "this process already holds actor Counter");
  // None of that touched the actor.
  EXPECT_EQ(callText(served, "Counter.add", "1"), "2");
}

TEST_F(TasklibTest, AMethodThatThrowsFailsItsCallAndTheActorGoesOn) {
  Executor ex("stats");
  ex.actor<Counter>("Counter")
      .method("add", &Counter::add)
      .method("add-then-fail", [](Counter& counter, Call& call) {
        counter.total += number(call.config());
        throw std::runtime_error("the counter refuses after adding");
      });
  Served served(ex);
  construct(served, "Counter");
  EXPECT_EQ(callText(served, "Counter.add", "2"), "2");
  EXPECT_EQ(refusal(served, "Counter.add-then-fail", {wire::ObjectKind::BLOB}, "3"),
            "the counter refuses after adding");
  // The instance stays, with what the method left.
  EXPECT_EQ(callText(served, "Counter.add", "4"), "9");
}

TEST_F(TasklibTest, FunctionsWorkBesideAnActor) {
  Executor ex("stats");
  ex.add("echo", [](Call& call) { call.output(0).write(call.config()); });
  ex.actor<Counter>("Counter").method("add", &Counter::add);
  Served served(ex);
  EXPECT_EQ(callText(served, "echo", "before"), "before");
  construct(served, "Counter");
  kj::Vector<kj::Promise<capnp::Response<wire::Executor::CallResults>>> answers;
  answers.add(sendCall(served, "Counter.add", {}, {wire::ObjectKind::BLOB}, outputDir(), "1"));
  answers.add(sendCall(served, "echo", {}, {wire::ObjectKind::BLOB}, outputDir(), "between"));
  answers.add(sendCall(served, "Counter.add", {}, {wire::ObjectKind::BLOB}, outputDir(), "2"));
  auto done = kj::joinPromises(answers.releaseAsArray()).wait(served.io.waitScope);
  EXPECT_EQ(text(done[0].getOutputs()[0].getData()), "1");
  EXPECT_EQ(text(done[1].getOutputs()[0].getData()), "between");
  EXPECT_EQ(text(done[2].getOutputs()[0].getData()), "3");
}

TEST_F(TasklibTest, ActorRegistrationMisuseIsANamedError) {
  Executor ex("stats");
  ex.add("mean", [](Call&) {});
  ex.add("Stats.x", [](Call&) {});
  auto counter = ex.actor<Counter>("Counter");
  counter.method("add", &Counter::add);
  EXPECT_EQ(misuse([&]() { ex.actor<Counter>("Counter"); }), "actor type Counter is added twice");
  EXPECT_EQ(misuse([&]() { ex.actor<Counter>("mean"); }), "actor type mean: a function has that name");
  EXPECT_EQ(misuse([&]() { ex.actor<Counter>("Stats"); }),
            "actor type Stats: the function Stats.x would be called as its method");
  EXPECT_EQ(misuse([&]() { ex.actor<Counter>("a.b"); }),
            "actor type name 'a.b': use 1 to 128 letters, digits, '-' and '_' (no '.': methods are called as "
            "Type.method)");
  EXPECT_NE(misuse([&]() { ex.actor<Counter>(""); }), "");
  EXPECT_EQ(misuse([&]() { ex.add("Counter", [](Call&) {}); }), "function Counter: an actor type has that name");
  EXPECT_EQ(misuse([&]() { ex.add("Counter.add", [](Call&) {}); }),
            "function Counter.add: Counter is an actor type, whose methods are called so");
  EXPECT_EQ(misuse([&]() { counter.method("add", &Counter::add); }), "method Counter.add is added twice");
  EXPECT_NE(misuse([&]() { counter.method("a.b", &Counter::add); }), "");
  EXPECT_NE(misuse([&]() { counter.method("a/b", &Counter::add); }), "");
  EXPECT_EQ(misuse([&]() { counter.method("pair", &Counter::add, std::vector<std::string>{"x", "x"}); }),
            "method Counter.pair names two outputs x");
  EXPECT_EQ(misuse([&]() { counter.method("none", std::function<void(Counter&, Call&)>()); }),
            "method Counter.none has no body");
  // What was refused left nothing behind.
  EXPECT_EQ(ex.actors().size(), 1u);
  EXPECT_EQ(ex.actors().at("Counter").methods.size(), 1u);
}

}  // namespace
}  // namespace squall

namespace squall {
namespace {

// The call's resource variables are the process's environment while it
// runs (what a library reading CUDA_VISIBLE_DEVICES sees), and go back
// after: the next call of another grant sees its own, or what was there.
TEST_F(TasklibTest, ACallsEnvironmentHoldsWhileItRunsAndGoesBackAfter) {
  setenv("SQUALL_TEST_BEFORE", "kept", 1);
  unsetenv("SQUALL_TEST_GRANTED");
  Executor ex("env");
  ex.add("get", [](Call& call) {
    std::string out;
    for (const char* name : {"SQUALL_TEST_GRANTED", "SQUALL_TEST_BEFORE"}) {
      const char* value = getenv(name);
      out += std::string(name) + "=" + (value != nullptr ? value : "(unset)") + ";";
    }
    out += "env=" + std::to_string(call.environment().size());
    call.output(0).write(out);
  });
  // Set before the executor's thread starts and unset after it ends.
  auto served = std::make_unique<Served>(ex);
  auto withEnv = [&](std::vector<std::string> vars) {
    auto request = served->cap.callRequest();
    request.setFunction("get");
    request.initOutputKinds(1).set(0, wire::ObjectKind::BLOB);
    request.setOutputDir(outputDir());
    auto env = request.initContext().initEnv(vars.size());
    for (uint i = 0; i < vars.size(); i++) env.set(i, vars[i]);
    return text(request.send().wait(served->io.waitScope).getOutputs()[0].getData());
  };
  EXPECT_EQ(withEnv({"SQUALL_TEST_GRANTED=0,1", "SQUALL_TEST_BEFORE=changed"}),
            "SQUALL_TEST_GRANTED=0,1;SQUALL_TEST_BEFORE=changed;env=2");
  EXPECT_EQ(withEnv({}), "SQUALL_TEST_GRANTED=(unset);SQUALL_TEST_BEFORE=kept;env=0");
  EXPECT_EQ(withEnv({"SQUALL_TEST_GRANTED="}), "SQUALL_TEST_GRANTED=;SQUALL_TEST_BEFORE=kept;env=1");
  // Malformed entries are skipped.
  EXPECT_EQ(withEnv({"=x", "NOEQUALS"}), "SQUALL_TEST_GRANTED=(unset);SQUALL_TEST_BEFORE=kept;env=2");
  served = nullptr;
  unsetenv("SQUALL_TEST_BEFORE");
}

}  // namespace
}  // namespace squall
