// The executor side of tasklib: the Executor RPC service (proto/
// executor.capnp) over the socket its governor handed over, calling the
// registered functions, and the methods of the one actor it may hold, on
// the process's one thread (detached calls end from any: Call::detach).
// What a program registers, and serve()'s command line, are registry.cpp;
// Input, Output and Call are call.cpp.
#include "call-ends.h"
#include "internal.h"

#include <chrono>
#include <deque>
#include <optional>
#include <thread>
#include <unordered_map>
#include <squall/client/shared-loop.h>

#include <capnp/rpc-twoparty.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <kj/async-io.h>
#include <kj/io.h>
#include <squall/proto/call-states.h>
#include <squall/proto/errors.h>
#include <squall/proto/rpc.h>
#include <squall/proto/spec-names.h>
#include <squall/wire/executor.capnp.h>
#include <stdexcept>
#include <csignal>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {

// The most stream pipe ends one call may carry (the kernel's limit per
// message is 253).
constexpr uint MAX_PIPES_PER_CALL = 128;

// What the governor gave as SQUALL_OUTPUT_MARK (governor/src/exec/
// process-output.h): written to standard output and error after each
// function call received (run, failed or dropped), so that the governor
// gives what the process printed to the right call. Empty: none.
std::string outputMark;

void writeMark() {
  if (outputMark.empty()) return;
  fflush(stdout);
  for (int fd : {STDOUT_FILENO, STDERR_FILENO}) {
    // A full or closed pipe loses its mark: the output then goes to the
    // call before, which is all that can happen to it.
    (void)detail::writeFully(fd, outputMark);
  }
}

}  // namespace

using namespace detail;

// ------------------------------------------------------------ the service

// Functions run here, outside the event loop's callbacks: a function may
// wait on its session (docs/nested.md), which runs the loop. The RPC
// handlers queue them; serveFd() runs them in the order queued.
class TopLevel {
 public:
  // `state`: the call's entry in the table of call states (0: none; it
  // runs whatever). `answersItself`: the body writes its own answer (a call
  // over the calls channel), so no turn of the loop is needed after it to
  // send one. `marks`: a function call, whose end (run or taken back)
  // writes the output mark (writeMark).
  kj::Promise<void> later(uint32_t state, kj::Function<void()> body, bool answersItself = false,
                          bool marks = false) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    queue.push_back(Item{kj::mv(body), kj::mv(paf.fulfiller), state, answersItself, marks});
    KJ_IF_MAYBE(w, wake) {
      (*w)->fulfill();
      wake = nullptr;
    }
    return kj::mv(paf.promise);
  }
  // Resolves when something is queued.
  kj::Promise<void> whenQueued() {
    if (!queue.empty()) return kj::READY_NOW;
    auto paf = kj::newPromiseAndFulfiller<void>();
    wake = kj::mv(paf.fulfiller);
    return kj::mv(paf.promise);
  }
  bool empty() const { return queue.empty(); }
  // Each call's answer goes out before the next call runs (an actor's
  // process: a crash in a method then takes no answer but its own).
  // Otherwise the answers of the calls run back to back go out together
  // once the queue is empty (one write, one wake-up of the governor).
  bool answerEach = false;
  // Runs the first one queued (not from a callback); what it throws
  // rejects its call. True when its answer needs a turn of the loop to go
  // out (an RPC call's Return), false when it wrote its own.
  bool runOne() {
    auto item = kj::mv(queue.front());
    queue.pop_front();
    KJ_DEFER(if (item.marks) writeMark());
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
          if (item.state != 0 && !mayStart(item.state)) {
            // Not an error of the process: it stays in service.
            kj::throwFatalException(KJ_EXCEPTION(FAILED, "taken back by the governor before it ran"));
          }
          item.body();
        })) {
      item.done->reject(kj::mv(*e));
    } else {
      item.done->fulfill();
    }
    return !item.answersItself;
  }

  // The table of call states (Executor.callStates), once the governor sent it.
  void useCallStates(kj::Own<CallStates> table) { states = kj::mv(table); }

 private:
  struct Item {
    kj::Function<void()> body;
    kj::Own<kj::PromiseFulfiller<void>> done;
    uint32_t state = 0;
    bool answersItself = false;
    bool marks = false;
  };
  std::deque<Item> queue;
  kj::Own<CallStates> states;

  // Claims the call of `state` for running here; false when the governor
  // took it back first.
  bool mayStart(uint32_t state) {
    SQUALL_REQUIRE(states.get() != nullptr, "a call names call state ", state, " before the table came");
    return states->start(state);
  }
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> wake;
};

class ExecutorService final : public wire::Executor::Server, public Call::Host {
 public:
  // `transport`: the connection's message stream while it serves (null
  // in tests that serve without one). `client`: the process's Client for
  // functions' sessions, made on first use.
  ExecutorService(const Executor& executor, BufferedMessageStream* const& transport, TopLevel& topLevel,
                  kj::AsyncIoProvider& provider, kj::LowLevelAsyncIoProvider& lowLevel, kj::WaitScope& waitScope,
                  std::unique_ptr<Client>& client)
      : executor(executor), transport(transport), topLevel(topLevel), provider(provider), lowLevel(lowLevel),
        waitScope(waitScope), client(client), loopExecutor(kj::getCurrentThreadExecutor()),
        loopThread(std::this_thread::get_id()) {}

  kj::Promise<void> host(HostContext context) override {
    governor = context.getParams().getHost();
    return kj::READY_NOW;
  }

  kj::Promise<void> callStates(CallStatesContext context) override {
    // Its descriptor came with this message: taken now, before the calls
    // behind it in the connection are queued.
    auto hook = capnp::ClientHook::from(context.getParams().getTable());
    KJ_IF_MAYBE(fd, hook->getFd()) {
      topLevel.useCallStates(CallStates::map(*fd));
      return kj::READY_NOW;
    }
    SQUALL_FAIL("the call states came without their descriptor");
  }

  kj::Promise<void> describe(DescribeContext context) override {
    auto results = context.getResults();
    results.setVersion(wire::EXECUTOR_PROTOCOL_VERSION);
    results.setName(executor.name());
    size_t count = executor.functions().size();
    for (auto& [type, actor] : executor.actors()) count += 1 + actor.methods.size();
    auto list = results.initFunctions(count);
    uint i = 0;
    auto describeOne = [&list, &i](const std::string& name, const std::vector<std::string>& outputs, bool named) {
      auto f = list[i++];
      f.setName(name);
      f.setNamed(named);
      auto names = f.initOutputs(outputs.size());
      for (uint j = 0; j < outputs.size(); j++) names.set(j, outputs[j]);
      return f;
    };
    for (auto& [name, entry] : executor.functions()) describeOne(name, entry.outputs, entry.named);
    for (auto& [type, actor] : executor.actors()) {
      describeOne(type, {}, false).setActor(true);
      for (auto& [name, method] : actor.methods) describeOne(type + "." + name, method.outputs, method.named);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> call(CallContext context) override {
    auto params = context.getParams();
    Pipes pipes;
    Prepared prepared;
    // A call refused before it is queued ends here: its mark goes now.
    KJ_ON_SCOPE_FAILURE(writeMark());
    prepared = prepare(params.getFunction(), params.getConfig(), params.getInputs(), params.getOutputKinds(),
                       params.getOutputDir(), params.getContext(), params.getOutputStreams(), pipes);
    lend(*prepared.call, params.getWarmFiles());
    return whenPipesArrive(
        kj::mv(prepared.call), kj::mv(pipes),
        [this, body = kj::mv(prepared.body), context](Call& call) mutable {
          uint64_t runUs = runBody(body, call);
          auto results = context.getResults(answerSize(call));
          results.setRunUs(runUs);
          fillOutputs(call, results.initOutputs(call.outputs_.size()));
        },
        params.getState(), true);
  }

  // The actor's calls channel (executor.capnp, openCalls): its MethodCalls
  // queue like call()'s, in the order they come.
  kj::Promise<void> openCalls(OpenCallsContext context) override {
    SQUALL_REQUIRE(channel.get() == nullptr, "this process has its calls channel already");
    return context.getParams().getChannel().getFd().then([this](kj::Maybe<int> received) {
      int end = KJ_REQUIRE_NONNULL(received, "the calls channel came without its descriptor");
      // The descriptor is the RPC system's until the params go.
      int fd;
      KJ_SYSCALL(fd = fcntl(end, F_DUPFD_CLOEXEC, 0));
      auto opened = kj::heap<Channel>(lowLevel.wrapSocketFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP));
      opened->messages.useBlockingWrites(fd);
      opened->messages.usePlainMessages();
      channel = kj::mv(opened);
      channel->reading = readCalls(*channel).eagerlyEvaluate([](kj::Exception&& e) {
        // The governor sees the channel end and the process's exit.
        fprintf(stderr, "executor: the calls channel failed: %s\n", e.getDescription().cStr());
        _exit(1);
      });
    });
  }

  kj::Promise<void> construct(ConstructContext context) override {
    auto params = context.getParams();
    std::string_view typeName(params.getType().cStr(), params.getType().size());
    auto found = executor.actors().find(typeName);
    if (found == executor.actors().end()) {
      std::string known;
      for (auto& [name, actor] : executor.actors()) known += (known.empty() ? "" : ", ") + name;
      SQUALL_FAIL("executor ", executor.name(), " has no actor type ", params.getType(), " (it has ",
                  known.empty() ? "none" : known, ")");
    }
    KJ_IF_MAYBE(h, held) { SQUALL_FAIL("this process already holds actor ", h->type); }
    auto call = kj::heap<Call>();
    call->constructor_ = true;
    Pipes pipes;
    setUpInputs(*call, params.getConfig(), params.getInputs(), pipes);
    setUpContext(*call, params.getContext());

    auto& entry = found->second;
    uint64_t attempt = ++constructs;
    held = Held{found->first, nullptr, attempt};
    topLevel.answerEach = true;
    auto body = [this, &entry, attempt, context](Call& init) mutable {
      answersOut();
      auto began = std::chrono::steady_clock::now();
      auto instance = runReporting([&]() {
        // Released at once, so that the next construct finds none.
        KJ_ON_SCOPE_FAILURE(held = nullptr);
        return entry.make(init);
      });
      KJ_IF_MAYBE(h, held) {
        KJ_ASSERT(h->construct == attempt, "another construct took this one's place");
        h->instance = kj::mv(instance);
      }
      concurrency = init.concurrency_;
      auto results = context.getResults();
      results.setRunUs(sinceUs(began));
      results.setConcurrency(concurrency);
    };
    return kj::evalNow([&]() { return whenPipesArrive(kj::mv(call), kj::mv(pipes), kj::mv(body)); })
        .catch_([this, attempt](kj::Exception&& e) {
          // A failure before the constructor ran (a pipe end that did not
          // come) releases the place too.
          KJ_IF_MAYBE(h, held) {
            if (h->construct == attempt && h->instance == nullptr) held = nullptr;
          }
          kj::throwFatalException(kj::mv(e));
        });
  }

 private:
  const Executor& executor;
  BufferedMessageStream* const& transport;
  TopLevel& topLevel;
  kj::AsyncIoProvider& provider;
  kj::LowLevelAsyncIoProvider& lowLevel;
  kj::WaitScope& waitScope;
  std::unique_ptr<Client>& client;
  const kj::Executor& loopExecutor;
  std::thread::id loopThread;
  // The governor's side (ExecutorHost), once it said.
  kj::Maybe<wire::ExecutorHost::Client> governor;
  // The session and task of the call whose function made the last session.
  std::pair<uint64_t, uint64_t> running;

  // Before an actor's constructor or method runs: the answers of the calls
  // run before it leave the process first, so that a crash in it takes no
  // answer but its own, and the governor knows which call was running
  // (governor/src/exec/actor-host.h, docs/decisions.md).
  void answersOut() {
    if (transport != nullptr) transport->writeNow();
  }

  // The one actor this process holds, from its construct on; `instance`
  // is null while the constructor has not yet run.
  struct Held {
    std::string type;
    std::shared_ptr<void> instance;
    // Which construct made it (they are counted).
    uint64_t construct;
  };
  kj::Maybe<Held> held;
  uint64_t constructs = 0;

  // A request's stream pipe ends (they come as descriptors attached to the
  // message), and the fd_ of the input or output each one fills.
  struct Pipes {
    kj::Vector<kj::Promise<kj::Maybe<int>>> ends;
    std::vector<int*> fds;
  };

  // A call's function (or method, "Type.method", bound to this process's
  // instance) and its Call, from what call() or a MethodCall carries; a
  // stream's pipe end goes into `pipes`. The Call refers to the params'
  // bytes: it must not outlive them.
  struct Prepared {
    kj::Own<Call> call;
    kj::Function<void(Call&)> body;
    std::string outputDir;
  };
  Prepared prepare(capnp::Text::Reader functionName, capnp::Data::Reader config,
                   capnp::List<wire::CallInput>::Reader inputs, capnp::List<wire::ObjectKind>::Reader kinds,
                   capnp::Text::Reader outputDirName, wire::CallContext::Reader context,
                   kj::Maybe<capnp::List<wire::PipeEnd>::Reader> outputStreams, Pipes& pipes) {
    std::string_view function(functionName.cStr(), functionName.size());
    const std::vector<std::string>* outputNames = nullptr;
    Prepared prepared;
    auto found = executor.functions().find(function);
    if (found != executor.functions().end()) {
      auto& entry = found->second;
      outputNames = &entry.outputs;
      prepared.body = [&entry](Call& call) { entry.fn(call); };
    } else if (auto dot = function.find('.'); dot != std::string_view::npos) {
      auto& method = findMethod(function.substr(0, dot), function.substr(dot + 1));
      outputNames = &method.outputs;
      // Looked up when it runs: the construct queued before it has run by then.
      prepared.body = [this, &method, type = std::string(function.substr(0, dot)),
                       name = std::string(function)](Call& call) {
        answersOut();
        auto instance = heldInstance(type, name);
        method.fn(instance.get(), call);
      };
    } else {
      SQUALL_REQUIRE(executor.actors().count(function) == 0, functionName, " is an actor type of executor ",
                     executor.name(), ": construct it, then call its methods as ", functionName, ".method");
      std::string known;
      for (auto& [name, entry] : executor.functions()) known += (known.empty() ? "" : ", ") + name;
      SQUALL_FAIL("executor ", executor.name(), " has no function ", functionName, " (it has ", known, ")");
    }
    SQUALL_REQUIRE(kinds.size() == outputNames->size(), found != executor.functions().end() ? "function " : "method ",
                   executor.name(), "/", functionName, " makes ", outputNames->size(), " outputs; the task has ",
                   kinds.size());
    prepared.outputDir = std::string(outputDirName.cStr(), outputDirName.size());
    prepared.call = kj::heap<Call>();
    auto& call = *prepared.call;
    setUpInputs(call, config, inputs, pipes);
    setUpContext(call, context);
    uint nextStream = 0;
    call.outputs_.resize(kinds.size());
    for (uint i = 0; i < kinds.size(); i++) {
      auto& output = call.outputs_[i];
      output.kind_ = dataKind(kinds[i]);
      if (output.kind_ == DataKind::STREAM) {
        auto streams = KJ_REQUIRE_NONNULL(outputStreams, "stream output ", i, " came without its pipe");
        SQUALL_REQUIRE(nextStream < streams.size(), "stream output ", i, " came without its pipe");
        pipes.ends.add(streams[nextStream++].getFd());
        pipes.fds.push_back(&output.fd_);
      }
      output.name_ = (*outputNames)[i];
      output.dirPath_ = prepared.outputDir;
      output.entry_ = std::to_string(i);
    }
    return prepared;
  }

  // The warm files the governor lent the call, for its outputs to take.
  static void lend(Call& call, capnp::List<wire::WarmFile>::Reader files) {
    auto lent = lentFiles(files);
    for (auto& output : call.outputs_) output.lent_ = lent;
  }

  // ---- the calls channel (openCalls)

  struct Channel {
    explicit Channel(kj::Own<kj::AsyncIoStream> stream) : stream(kj::mv(stream)), messages(*this->stream) {}
    kj::Own<kj::AsyncIoStream> stream;
    BufferedMessageStream messages;
    kj::Promise<void> reading = nullptr;
  };
  kj::Own<Channel> channel;

  // Queues each MethodCall read, until the governor closes the channel.
  kj::Promise<void> readCalls(Channel& ch) {
    return ch.messages.tryReadMessage(nullptr, readerOptions())
        .then([this, &ch](kj::Maybe<capnp::MessageReaderAndFds> read) -> kj::Promise<void> {
          KJ_IF_MAYBE(message, read) {
            auto reader = kj::mv(message->reader);
            // Its end is its answer, written by the call itself.
            topLevel
                .later(0, [this, &ch, reader = kj::mv(reader)]() mutable { runMethodCall(ch, kj::mv(reader)); }, true)
                .detach([](kj::Exception&&) {});
            return readCalls(ch);
          }
          return kj::READY_NOW;
        });
  }

  // Runs one MethodCall and writes its answer at once (before anything
  // else runs: what a crash in the next method must not take), unless the
  // method detached it (an actor allowing concurrent calls): then its
  // answer goes once its CallEnd says so.
  void runMethodCall(Channel& ch, kj::Own<capnp::MessageReader> message) {
    uint64_t serial = 0;
    kj::Own<Call> call;
    uint64_t runUs = 0;
    auto failure = kj::runCatchingExceptions([&]() {
      auto params = message->getRoot<wire::MethodCall>();
      serial = params.getSerial();
      Pipes pipes;
      auto prepared = prepare(params.getFunction(), params.getConfig(), params.getInputs(), params.getOutputKinds(),
                              params.getOutputDir(), params.getContext(), nullptr, pipes);
      lend(*prepared.call, params.getWarmFiles());
      SQUALL_REQUIRE(pipes.ends.size() == 0, "a method call over the calls channel carries no live streams");
      call = kj::mv(prepared.call);
      call->detachable_ = concurrency > 1;
      runningSerial = serial;
      runningBegan = std::chrono::steady_clock::now();
      KJ_DEFER(call->detachable_ = false);
      runUs = runBody(prepared.body, *call);
    });
    kj::Maybe<std::string> error;
    KJ_IF_MAYBE(e, failure) { error = std::string(userMessage(*e).cStr()); }
    if (call.get() != nullptr && call->detached_) {
      auto& handed = detached[serial];
      handed.message = kj::mv(message);
      handed.call = kj::mv(call);
      handed.returned = true;
      if (error != nullptr) {
        // It threw after it detached: the call fails now; the Call stays
        // until its CallEnd ends (another thread may still hold it).
        handed.answered = true;
        writeAnswer(ch, serial, nullptr, runUs, kj::mv(error));
      }
      if (handed.ended) detachedEnded(serial);
      return;
    }
    writeAnswer(ch, serial, call.get(), runUs, kj::mv(error));
  }

  // Writes a MethodAnswer: `call`'s outputs, or `error`.
  void writeAnswer(Channel& ch, uint64_t serial, Call* call, uint64_t runUs, kj::Maybe<std::string> error) {
    capnp::MallocMessageBuilder answer(call != nullptr && error == nullptr ? answerSize(*call).wordCount + 8 : 64);
    auto root = answer.initRoot<wire::MethodAnswer>();
    root.setSerial(serial);
    root.setRunUs(runUs);
    if (error == nullptr) {
      KJ_IF_MAYBE(e, kj::runCatchingExceptions(
                         [&]() { fillOutputs(*call, root.initOutputs(call->outputs_.size())); })) {
        error = std::string(userMessage(*e).cStr());
      }
    }
    KJ_IF_MAYBE(e, error) {
      root.disownOutputs();
      root.setFailed(true);
      root.setError(capnp::Text::Reader(e->c_str(), e->size()));
    }
    // Throws DISCONNECTED when the governor went: the process has nothing
    // left to do then.
    ch.messages.writeNow(answer.getSegmentsForOutput());
  }

  // ---- calls handed over (Call::detach)

  // A detached call until it ends; touched on the executor's thread only.
  struct Detached {
    // What the Call's inputs point into, and the Call (once its method
    // returned).
    kj::Own<capnp::MessageReader> message;
    kj::Own<Call> call;
    std::chrono::steady_clock::time_point began;
    bool returned = false;
    // Its CallEnd ended it (with `error`, or none); its answer went.
    bool ended = false;
    kj::Maybe<std::string> error;
    bool answered = false;
  };
  std::unordered_map<uint64_t, Detached> detached;
  // The construct's allowConcurrentCalls; the method call running now.
  uint32_t concurrency = 1;
  uint64_t runningSerial = 0;
  std::chrono::steady_clock::time_point runningBegan;

  // Where the CallEnds of detached calls report (made with the first).
  kj::Own<CallEnds> ends;

  // Call::Host: the method running now hands its call over.
  std::shared_ptr<CallEnd> detach(Call&) override {
    if (ends.get() == nullptr) {
      ends = kj::heap<CallEnds>(lowLevel, [this](uint64_t serial, kj::Maybe<std::string> error) {
        ended(serial, kj::mv(error));
      });
    }
    detached[runningSerial].began = runningBegan;
    return ends->endFor(runningSerial);
  }

  // A CallEnd ended the call of `serial`.
  void ended(uint64_t serial, kj::Maybe<std::string> error) {
    auto it = detached.find(serial);
    if (it == detached.end()) return;
    it->second.ended = true;
    it->second.error = kj::mv(error);
    if (it->second.returned) detachedEnded(serial);
  }

  // Answers (unless done already) and forgets a detached call whose
  // method returned and whose CallEnd ended it.
  void detachedEnded(uint64_t serial) {
    auto it = detached.find(serial);
    auto call = kj::mv(it->second);
    detached.erase(it);
    if (call.answered || channel.get() == nullptr) return;
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                  writeAnswer(*channel, serial, call.call.get(), sinceUs(call.began), kj::mv(call.error));
                })) {
      // The governor went: this process goes with it.
      (void)e;
    }
  }

  const Executor::MethodEntry& findMethod(std::string_view type, std::string_view name) {
    auto actor = executor.actors().find(type);
    if (actor == executor.actors().end()) {
      std::string known;
      for (auto& [function, entry] : executor.functions()) known += (known.empty() ? "" : ", ") + function;
      SQUALL_FAIL("executor ", executor.name(), " has no function ", chars(type), ".", chars(name), " (it has ", known,
                  ")");
    }
    auto method = actor->second.methods.find(name);
    if (method == actor->second.methods.end()) {
      std::string known;
      for (auto& [other, entry] : actor->second.methods) known += (known.empty() ? "" : ", ") + other;
      SQUALL_FAIL("actor type ", executor.name(), "/", chars(type), " has no method ", chars(name), " (it has ",
                  known.empty() ? "none" : known, ")");
    }
    return method->second;
  }

  // The instance of actor type `type` this process holds, for calling
  // `function` on it.
  std::shared_ptr<void> heldInstance(std::string_view type, std::string_view function) {
    KJ_IF_MAYBE(h, held) {
      SQUALL_REQUIRE(h->type == type, "this process holds actor ", h->type, ", not ", chars(type),
                     ": cannot call ", chars(function));
      SQUALL_REQUIRE(h->instance != nullptr, "actor ", chars(type), " is still being constructed: cannot call ",
                     chars(function), " yet");
      return h->instance;
    }
    SQUALL_FAIL("no actor ", chars(type), " was constructed in this process: cannot call ", chars(function));
  }

  // Fills `call`'s config and inputs from a call's or construct's params;
  // a stream input's pipe end goes into `pipes`. The call refers to the
  // params' bytes: it must not outlive them.
  static void setUpInputs(Call& call, capnp::Data::Reader config, capnp::List<wire::CallInput>::Reader inputs,
                          Pipes& pipes) {
    call.config_ = std::string_view(reinterpret_cast<const char*>(config.begin()), config.size());
    call.inputs_.resize(inputs.size());
    for (uint i = 0; i < inputs.size(); i++) {
      auto in = inputs[i];
      auto& input = call.inputs_[i];
      input.label_ = in.getLabel();
      input.size_ = in.getSize();
      input.kind_ = dataKind(in.getKind());
      if (input.kind_ == DataKind::STREAM) {
        SQUALL_REQUIRE(in.isStream(), "input ", i, " is a live stream without its pipe");
        pipes.ends.add(in.getStream().getFd());
        pipes.fds.push_back(&input.fd_);
      } else if (in.isData()) {
        SQUALL_REQUIRE(input.kind_ == DataKind::BLOB, "input ", i, " is a dir carried as data");
        auto data = in.getData();
        input.data_ = reinterpret_cast<const char*>(data.begin());
        input.size_ = data.size();
      } else {
        SQUALL_REQUIRE(in.isPath(), "input ", i, " is ", kindName(input.kind_), " without a path");
        input.path_ = in.getPath();
        if (input.kind_ == DataKind::BLOB) {
          input.mapping_ = runReporting([&]() { return mapFile(input.path_, input.size_); });
          input.data_ = static_cast<const char*>(input.mapping_.get());
        }
      }
    }
  }

  // The call's task, and how its function reaches the process's Client.
  void setUpContext(Call& call, wire::CallContext::Reader context) {
    call.sessionId_ = context.getSession();
    call.taskId_ = context.getTask();
    for (auto var : context.getEnv()) call.env_.emplace_back(var.cStr(), var.size());
    call.host_ = this;
    call.thread_ = std::this_thread::get_id();
  }

  // Call::Host.
  std::pair<void*, void*> eventLoop() override { return {&provider, &waitScope}; }
  void recordCall(uint64_t session, uint64_t task) override {
    auto send = [this, session, task]() -> kj::Promise<void> {
      KJ_IF_MAYBE(g, governor) {
        auto request = g->recordRequest();
        request.initContext().setSession(session);
        request.getContext().setTask(task);
        return request.send().ignoreResult();
      }
      return kj::READY_NOW;
    };
    if (std::this_thread::get_id() == loopThread) {
      send().wait(waitScope);
    } else {
      // A detached call's thread: the request goes from the loop's thread.
      loopExecutor.executeSync(kj::mv(send));
    }
  }
  void waiting(uint64_t session, uint64_t task, bool waiting) override {
    running = {session, task};
    aroundWait(waiting);
  }

  // The Client functions' sessions go through; a wait on one gives the
  // running call's cpus back to the governor meanwhile (ExecutorHost).
  Client& processClient(uint64_t session, uint64_t task) override {
    running = {session, task};
    if (client == nullptr) {
      ClientOptions options;
      options.aroundWait = [this](bool waiting) { aroundWait(waiting); };
      client = std::make_unique<Client>(options);
    }
    return *client;
  }

  void aroundWait(bool waiting) {
    KJ_IF_MAYBE(g, governor) {
      uint64_t session = running.first, task = running.second;
      if (waiting) {
        auto request = g->secedeRequest();
        request.initContext().setSession(session);
        request.getContext().setTask(task);
        request.send().wait(waitScope);
        return;
      }
      // Called as the wait ends, also when it throws: nothing may escape.
      KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() {
                    auto request = g->rejoinRequest();
                    request.initContext().setSession(session);
                    request.getContext().setTask(task);
                    request.send().wait(waitScope);
                  })) {
        // The governor went: this process goes with it.
        (void)e;
      }
    }
  }

  // Runs `body` on `call` at the top level (TopLevel), once its pipe ends
  // are in it.
  // `state` and `marks`: as TopLevel::later's; a call whose pipe ends
  // never come writes its mark when it fails (no call waits behind a call
  // with streams, so none can print in between).
  kj::Promise<void> whenPipesArrive(kj::Own<Call> call, Pipes pipes, kj::Function<void(Call&)> body,
                                    uint32_t state = 0, bool marks = false) {
    if (pipes.ends.size() == 0) {
      return topLevel.later(
          state, [call = kj::mv(call), body = kj::mv(body)]() mutable { body(*call); }, false, marks);
    }
    auto queued = std::make_shared<bool>(false);
    return kj::joinPromises(pipes.ends.releaseAsArray())
        .then([this, state, call = kj::mv(call), fds = std::move(pipes.fds), body = kj::mv(body), marks,
               queued](kj::Array<kj::Maybe<int>> received) mutable {
          for (uint i = 0; i < received.size(); i++) {
            // The descriptor is the RPC system's until the call's params
            // go: the function gets a copy of its own.
            int end = KJ_REQUIRE_NONNULL(received[i], "a stream's pipe end came without its descriptor");
            int fd;
            KJ_SYSCALL(fd = fcntl(end, F_DUPFD_CLOEXEC, 0));
            call->ownedFds_.push_back(fd);
            *fds[i] = fd;
          }
          *queued = true;
          return topLevel.later(
              state, [call = kj::mv(call), body = kj::mv(body)]() mutable { body(*call); }, false, marks);
        })
        .attach(kj::defer([queued, marks]() {
          if (marks && !*queued) writeMark();
        }));
  }

  static uint64_t sinceUs(std::chrono::steady_clock::time_point began) {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began).count());
  }

  // Calls the function (or method); how long it ran, in microseconds.
  // The streams' ends close after it: readers see end of file once the
  // RPC system's copies go with the call.
  static uint64_t runBody(kj::Function<void(Call&)>& body, Call& call) {
    CallEnvironment environment(call.env_);
    auto began = std::chrono::steady_clock::now();
    KJ_DEFER({
      for (int fd : call.ownedFds_) close(fd);
      call.ownedFds_.clear();
      // What it printed goes before its answer: the governor gives the
      // process's output to the call it runs until the answer comes.
      fflush(stdout);
    });
    runReporting([&]() {
      try {
        body(call);
      } catch (const StreamClosed&) {
        // Every reader of a stream output went: the end of a pipeline
        // stage, not an error (the governor knows if a reader said so).
      }
      return 0;
    });
    return sinceUs(began);
  }

  // The answer's outputs: where each of the call's outputs is.
  static void fillOutputs(Call& call, capnp::List<wire::CallOutput>::Builder outs) {
    for (uint i = 0; i < call.outputs_.size(); i++) {
      auto& output = call.outputs_[i];
      auto out = outs[i];
      runReporting([&]() {
        if (output.kind_ == DataKind::STREAM) {
          out.setStream();
        } else if (output.kind_ == DataKind::DIR) {
          output.dir();  // created empty if the function left it alone
          out.setFile(output.entry_);
        } else if (output.usedPath_) {
          struct stat st;
          if (lstat(output.path_.c_str(), &st) < 0 || !S_ISREG(st.st_mode)) {
            throw std::runtime_error("output " + output.name_ + ": " + output.path_ +
                                     " is not a regular file any more");
          }
          out.setFile(output.entry_);
        } else if (output.buffer_.size() <= Executor::INLINE_LIMIT) {
          out.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(output.buffer_.data()), output.buffer_.size()));
        } else {
          writeOver(output.placeFile(output.buffer_.size()), output.buffer_);
          out.setFile(output.entry_);
        }
        return 0;
      });
    }
  }

  // About how big the answer is, so that capnp makes its message that
  // size: without a hint it allocates, and zeroes, 8 KiB for every answer.
  static capnp::MessageSize answerSize(const Call& call) {
    uint64_t words = 4;
    for (auto& o : call.outputs_) {
      words += 4 + (o.entry_.size() + 8) / 8;
      if (!o.usedPath_ && o.buffer_.size() <= Executor::INLINE_LIMIT) words += (o.buffer_.size() + 7) / 8;
    }
    return capnp::MessageSize{words, 0};
  }

  // Runs `body`; what it throws becomes a FAILED exception carrying the
  // message alone (the governor names the task and function around it).
  template <typename Body>
  static auto runReporting(Body&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const kj::Exception&) {
      throw;
    } catch (const std::exception& e) {
      SQUALL_FAIL(e.what());
    } catch (...) {
      SQUALL_FAIL("the function threw something that is not a std::exception");
    }
  }
};

int Executor::serveFd(int fd) {
  auto io = kj::setupAsyncIo();
  // Functions' sessions (Call::session) run on this loop.
  client::shareThreadLoop(*io.provider, io.waitScope);
  KJ_DEFER(client::unshareThreadLoop());
  std::unique_ptr<Client> client;
  KJ_DEFER(client.reset());
  // Before the client and the loop go, however serving ends.
  KJ_DEFER(if (atStop_) atStop_());
  // A write to a stream whose readers went fails with EPIPE (StreamClosed)
  // instead of killing the process.
  signal(SIGPIPE, SIG_IGN);
  // Standard output is a pipe the governor reads for the call running
  // (docs/ray.md, "Output"): each line as it is printed, each call's end
  // marked.
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (const char* mark = getenv("SQUALL_OUTPUT_MARK")) outputMark = mark;
  auto stream = io.lowLevelProvider->wrapUnixSocketFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
  BufferedMessageStream* transport = nullptr;
  TopLevel topLevel;
  // Resolves once the governor closes its end.
  auto served = serveExecutorRpc(*stream, fd, MAX_PIPES_PER_CALL,
                                 kj::heap<ExecutorService>(*this, transport, topLevel, *io.provider, *io.lowLevelProvider,
                                                           io.waitScope, client),
                                 transport)
                    .fork();
  for (;;) {
    if (topLevel.empty()) {
      bool work = topLevel.whenQueued()
                      .then([]() { return true; })
                      .exclusiveJoin(served.addBranch().then([]() { return false; }))
                      .wait(io.waitScope);
      if (!work) break;
    }
    bool needsTurn = topLevel.runOne();
    if (topLevel.answerEach && needsTurn) io.waitScope.poll();
  }
  return 0;
}


}  // namespace squall
