// What the governor's tests assign (execute and built-in task assignments,
// live inputs and stream outputs included) and a fake server upstream that
// collects the outcomes. Test thread only.
#pragma once

#include <kj/async.h>
#include <map>
#include <squall/proto/ids.h>
#include <squall/wire/service.capnp.h>
#include <string>
#include <vector>

namespace squall {

struct Result {
  bool ok = false;
  std::string error;
  int32_t exitStatus = -1;
  int32_t signal = 0;
  std::vector<std::pair<Id, std::pair<uint64_t, uint64_t>>> outputs;  // id, size, hash
  std::string stderrTail;
  uint64_t startTimeUs = 0;
  bool inputUnavailable = false;
};

// The server's side of GovernorUpstream: keeps every result, checks none
// comes twice.
class FakeUpstream final : public wire::GovernorUpstream::Server {
 public:
  std::map<Id, Result> results;
  size_t updates = 0;
  // What update() answers (a server with a session log says false and
  // confirms later), and the number of the last update.
  bool durable = true;
  uint64_t lastNumber = 0;
  // Updates that said the governor's queue ran dry.
  size_t dryUpdates = 0;

  kj::Promise<void> update(UpdateContext context) override;
  // Resolves once `count` results have come in.
  kj::Promise<void> waitFor(size_t count);
  // Resolves once every one of `ids` has a result.
  kj::Promise<void> waitForAll(std::vector<Id> ids);

 private:
  std::vector<Id> waitingIds;
  size_t waiting = 0;
  kj::Maybe<kj::Own<kj::PromiseFulfiller<void>>> fulfiller;
  void check();
};

struct InputSpec {
  Id object = {};
  std::string path = {};
  std::vector<std::string> sources = {};
  // A stream read while its producer runs.
  bool live = false;
  bool earlyCloseIsError = false;
};

struct OutputSpec {
  Id object = {};
  std::string path = {};  // empty: stdout
  // For a stream output.
  bool stream = false;
  uint32_t liveReaders = 0;
  bool persist = false;
};

struct ExecSpec {
  Id id = {};
  std::vector<std::string> args = {};
  bool shell = false;
  int32_t stdinInput = -1;
  std::vector<InputSpec> inputs = {};
  std::vector<OutputSpec> outputs = {};
  std::vector<std::pair<std::string, std::string>> env = {};
  uint32_t cpus = 1;
  std::string name = {};
};

// Task id, inputs (live ones as streams), blob outputs, cpus.
void fillCommon(wire::Assignment::Builder a, Id id, const std::vector<InputSpec>& inputs,
                const std::vector<Id>& outputs, uint32_t cpus);
void fillExec(wire::Assignment::Builder a, const ExecSpec& spec);

std::string bytesOf(kj::ArrayPtr<const kj::byte> bytes);

}  // namespace squall
