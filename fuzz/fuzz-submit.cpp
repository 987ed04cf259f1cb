// libFuzzer target: a submitted graph as the server's submit path receives
// it (server/src/submit: PendingSubmit.add for each Submission.add chunk,
// then commit with its validation, then SessionTable::submitted, as
// services.cpp does). The input is a sequence of flat capnp messages, each
// a Submission.AddParams of session 1 (fuzz/seeds.cpp writes the seeds);
// a tail too short for a message is ignored.
#include "fuzz-util.h"

#include <capnp/serialize.h>
#include <cstring>
#include <session-table.h>
#include <spdlog/sinks/null_sink.h>
#include <submit.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static auto logger =
      std::make_shared<spdlog::logger>("fuzz", std::make_shared<spdlog::sinks::null_sink_st>());
  // Words, aligned, as the RPC layer hands messages over.
  auto words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  memcpy(words.begin(), data, words.asBytes().size());

  squall::SessionTable table(*logger);
  int owner = 0;
  auto& session = table.open("fuzz", &owner);
  squall::PendingSubmit pending(session.id, squall::Limits{});
  squall::fuzz::expectingRefusals([&]() {
    kj::ArrayPtr<const capnp::word> rest = words;
    while (rest.size() > 0) {
      capnp::FlatArrayMessageReader reader(rest);
      pending.add(reader.getRoot<squall::wire::Submission::AddParams>());
      rest = kj::arrayPtr(reader.getEnd(), rest.end());
    }
    pending.flatChunks();
    table.submitted(session, pending.commit(session, squall::ClusterCapacity{8, 4}));
  });
  table.close(session.id);
  return 0;
}
