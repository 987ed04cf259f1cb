// libFuzzer target: a submitted graph as the server's submit path receives
// it (server/src/submit: PendingSubmit.add for each Submission.add call and
// PendingSubmit.appendData for each Submission.appendData call, in the
// order they come, then commit with its validation, then
// SessionTable::submitted, as services.cpp's SubmissionImpl does).
//
// The input is a sequence of frames, all of session 1 (fuzz/seeds.cpp
// writes the seeds):
//
//   frame   = header message
//   header  = 8 bytes; the low bit of the first byte says what the message
//             is: 0 a Submission.AddParams, 1 a Submission.AppendDataParams
//             (the other 63 bits are ignored)
//   message = one flat capnp message (segment table, then segments), as
//             capnp::messageToFlatArray writes it
//
// The header is one word, so every message stays word-aligned, as the RPC
// layer hands them over. A tail shorter than a word is ignored. A call
// refused with a KJ exception (a limit, an undeclared constant, a message
// whose content does not parse) leaves the submit open, as in the server,
// and the next frame goes on; a segment table that does not parse ends the
// input without a commit (the next frame cannot be found). Nothing follows
// the commit, so SubmissionImpl's "already committed" check, made before
// each call, has nothing to refuse here.
// Every open submit's bytes are counted in one total, as the server counts
// them (Limits::pendingBytes); once the submit is gone, applied or refused,
// what it held must have been given back.
#include "fuzz-util.h"

#include <capnp/serialize.h>
#include <cstring>
#include <kj/debug.h>
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
  auto openBytes = std::make_shared<uint64_t>(0);
  {
    squall::PendingSubmit pending(session.id, squall::Limits{}, openBytes);
    squall::fuzz::expectingRefusals([&]() {
      kj::ArrayPtr<const capnp::word> rest = words;
      while (rest.size() > 0) {
        bool append = (rest.asBytes()[0] & 1) != 0;
        // Past the header, so each frame moves on by at least one word. A
        // segment table that does not parse ends the input uncommitted.
        capnp::FlatArrayMessageReader reader(rest.slice(1, rest.size()));
        rest = kj::arrayPtr(reader.getEnd(), rest.end());
        // A refused call leaves the submission open, as the server's does:
        // the client may go on and commit what was accepted.
        squall::fuzz::expectingRefusals([&]() {
          if (append) {
            auto params = reader.getRoot<squall::wire::Submission::AppendDataParams>();
            pending.appendData(params.getObject(), params.getData());
          } else {
            pending.add(reader.getRoot<squall::wire::Submission::AddParams>());
          }
        });
      }
      pending.flatChunks();
      table.submitted(session, pending.commit(session, squall::ClusterCapacity{8, 4}));
    });
  }
  KJ_ASSERT(*openBytes == 0, "a submit, gone, still holds bytes of the open submits' total", *openBytes);
  table.close(session.id);
  return 0;
}
