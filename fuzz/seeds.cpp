// squall-fuzz-seeds DIR: writes the seeds no one can write by hand into
// DIR/<target>/ (DIR is fuzz/corpus): Submission.add and appendData calls
// as framed flat capnp messages (submit), real session logs with 512-byte
// pages (session-log) and LZ4 chunks made by the codec (chunk). Run once
// when the formats change; the output is committed. Not part of any
// product.
#include <capnp/serialize.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <governor-pool.h>
#include <kj/debug.h>
#include <session-history.h>
#include <session-log.h>
#include <session-table.h>
#include <spdlog/sinks/null_sink.h>
#include <sqlite3.h>
#include <string_view>
#include <squall/proto/chunk-codec.h>
#include <test-graph.h>

namespace {

using squall::testing::TestGraph;
using squall::testing::TestTask;
namespace fs = std::filesystem;

void writeFile(const fs::path& path, kj::ArrayPtr<const kj::byte> bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.begin()), static_cast<std::streamsize>(bytes.size()));
  KJ_ASSERT(out.good(), path.c_str());
}

kj::Array<capnp::word> flat(TestGraph& graph) {
  capnp::MallocMessageBuilder message;
  message.setRoot(graph.build());
  return capnp::messageToFlatArray(message);
}

// One call of a submit seed (fuzz-submit.cpp's frame): a Submission.add or
// a Submission.appendData, as a flat message.
struct SubmitCall {
  bool append;
  kj::Array<capnp::word> message;
};

SubmitCall add(TestGraph& graph) { return {false, flat(graph)}; }

SubmitCall appendData(uint64_t object, std::string_view bytes) {
  capnp::MallocMessageBuilder message;
  auto params = message.initRoot<squall::wire::Submission::AppendDataParams>();
  params.setObject(object);
  params.setData(kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size()));
  return {true, capnp::messageToFlatArray(message)};
}

// The submit seeds, all of session 1 (the fuzz target's): each the calls of
// one submit, one after the other, each behind its 8-byte frame header
// (first byte 0: add, 1: appendData).
void writeSubmitSeeds(const fs::path& dir) {
  size_t n = 0;
  auto write = [&](std::initializer_list<SubmitCall> calls) {
    kj::Vector<kj::byte> bytes;
    for (auto& call : calls) {
      capnp::word header;
      memset(&header, 0, sizeof(header));
      reinterpret_cast<kj::byte*>(&header)[0] = call.append ? 1 : 0;
      bytes.addAll(kj::arrayPtr(&header, 1).asBytes());
      bytes.addAll(call.message.asBytes());
    }
    writeFile(dir / ("graph-" + std::to_string(n++)), bytes);
  };
  {
    TestGraph g(1);
    g.constant(1, "hello ").constant(2, "world").output(3, true).task({4, {1, 2}, {3}});
    write({add(g)});
  }
  {
    TestGraph g(1);
    g.constant(1, "x").output(2).output(3, true);
    g.task(squall::testing::executeTask(10, {1}, {2}, {"in/a.txt"}, {"out.txt"}));
    TestTask second{11, {2}, {3}, {"wc", "-l"}, {"data"}};
    second.name = "count[3]";
    second.attributes = R"({"sample":"A1","lane":3})";
    second.retries = 2;
    second.cpus = 2;
    g.task(second);
    write({add(g)});
  }
  {
    // A live stream between two programs, stdin fed from the first.
    TestGraph g(1);
    g.constant(1, "x").object({2, "", false, false, squall::wire::ObjectKind::STREAM}).output(3, true);
    g.task({20, {1}, {2}, {"cat"}, {"in"}});
    TestTask reader{21, {2}, {3}, {"sort"}, {"in"}};
    reader.stdinInput = 0;
    g.task(reader);
    write({add(g)});
  }
  {
    // Two chunks: the second reads what the first declared.
    TestGraph first(1), second(1);
    first.constant(1, "a").object({2, "", false, false, squall::wire::ObjectKind::DIR});
    // The dir is taken from a path: a dir cannot come from stdout.
    TestTask mkdir = squall::testing::executeTask(3, {1}, {2}, {"f"}, {"d"});
    mkdir.args = {"mkdir", "d"};
    first.task(mkdir);
    second.output(4, true).task({5, {2}, {4}, {"ls"}, {"d"}});
    write({add(first), add(second)});
  }
  {
    // Refused: a cycle.
    TestGraph g(1);
    g.output(1).output(2).task({3, {1}, {2}}).task({4, {2}, {1}});
    write({add(g)});
  }
  {
    // Constants too large for one message, as the client sends them: every
    // add first, then each declared constant's bytes in pieces, appended to
    // what the add carried inline (none for 1, "head " for 2).
    TestGraph constants(1), tasks(1);
    constants.object({1, "", true}).constant(2, "head ");
    tasks.output(3, true).task({4, {1, 2}, {3}});
    write({add(constants), add(tasks), appendData(1, "a large "), appendData(1, "constant in "),
           appendData(1, "three pieces"), appendData(2, "and tail")});
  }
  {
    // Pieces the server refuses, each on its own (the submit stays open):
    // before the add that declares the constant, for an object that is a
    // task's output, for an object never declared.
    TestGraph g(1);
    g.object({1, "", true}).output(2, true).task({3, {1}, {2}});
    write({appendData(1, "too early"), add(g), appendData(1, "first "), appendData(1, "second"),
           appendData(2, "an output"), appendData(9, "nobody's")});
  }
}

// A log as a server leaves it: an open session with a submit and finished
// work, a failed one, a governor to wait for, a closed session's history.
void writeLog(const fs::path& path, bool withHistory) {
  auto logger = std::make_shared<spdlog::logger>("seeds", std::make_shared<spdlog::sinks::null_sink_mt>());
  fs::remove(path);
  {
    squall::SessionLog log(path, *logger);
    squall::SessionTable table(*logger);
    squall::GovernorPool governors;
    squall::SessionHistory history(squall::HistoryLimits{}, *logger);
    table.useLog(&log);
    history.open(log);
    table.onClose = [&](const squall::Session& s) { history.keep(s, 5000, {"{}", "{}"}); };
    auto& governor = governors.add("g1", "127.0.0.1:1", 4, squall::wire::GovernorControl::Client(nullptr));
    log.governorSeen("g1");
    int owner = 0;

    auto submit = [&](squall::Session& session, TestGraph& graph) {
      squall::PendingSubmit pending(session.id, squall::Limits{});
      pending.add(graph.build());
      // Checked, written, then applied, as the server does.
      pending.commit(session, {}, false);
      auto chunks = pending.flatChunks();
      std::vector<kj::ArrayPtr<const uint8_t>> ptrs;
      for (auto& c : chunks) ptrs.push_back(c.asBytes());
      log.submitted(session.id, ptrs, {});
      table.submitted(session, pending.commit(session));
    };

    auto finish = [&](squall::Session& session, uint64_t task) {
      auto& node = session.tasks.at(task);
      table.assigned(node, governor.id);
      capnp::MallocMessageBuilder message;
      auto result = message.initRoot<squall::wire::TaskResult>();
      squall::Id{session.id, task}.to(result.initId());
      result.setOk(true);
      result.setStdoutTail("done\n");
      result.setStartTimeUs(1000000);
      result.setDurationUs(5000);
      auto infos = result.initOutputs(node.outputs.size());
      for (size_t i = 0; i < node.outputs.size(); i++) {
        node.outputs[i]->id.to(infos[i].initId());
        infos[i].setSize(100);
        infos[i].setHash(0x1234);
      }
      table.taskResult(result.asReader(), governor.id, governor.name);
    };

    auto& open = table.open("open", &owner, true);
    {
      TestGraph g(open.id);
      g.constant(1, "x").output(2).output(3, true);
      g.task(squall::testing::executeTask(10, {1}, {2}, {"in"}, {"out"}));
      TestTask second{11, {2}, {3}, {"wc"}, {"data"}};
      second.attributes = R"({"k":1})";
      g.task(second);
      submit(open, g);
    }
    finish(open, 10);

    if (withHistory) {
      auto& closed = table.open("closed", &owner);
      TestGraph g(closed.id);
      g.constant(1, "hello ").constant(2, "world").output(3, true).task({4, {1, 2}, {3}});
      submit(closed, g);
      finish(closed, 4);
      table.close(closed.id);

      auto& failed = table.open("failed", &owner);
      log.sessionFailed(failed.id, "task 3 failed");
    }
    log.flush();
    table.useLog(nullptr);
    history.detachLog();
  }
  // Small pages keep the seed small (the fuzzer mutates the whole file).
  sqlite3* db = nullptr;
  KJ_ASSERT(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  for (auto sql : {"PRAGMA journal_mode=DELETE", "PRAGMA page_size=512", "VACUUM"}) {
    KJ_ASSERT(sqlite3_exec(db, sql, nullptr, nullptr, nullptr) == SQLITE_OK, sql, sqlite3_errmsg(db));
  }
  sqlite3_close(db);
}

void writeChunkSeeds(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 200; i++) text += "line " + std::to_string(i % 17) + " of a repetitive file\n";
  std::vector<std::string> raws = {text, std::string(4096, '\0'), "abcabcabcabcabcabcabcabcabcabcabcabc"};
  size_t n = 0;
  for (auto& raw : raws) {
    auto bytes = kj::arrayPtr(reinterpret_cast<const kj::byte*>(raw.data()), raw.size());
    KJ_IF_MAYBE(block, squall::compressChunk(bytes)) {
      kj::Vector<kj::byte> seed;
      uint32_t rawSize = raw.size();
      seed.addAll(kj::arrayPtr(reinterpret_cast<const kj::byte*>(&rawSize), 4));
      seed.addAll(*block);
      writeFile(dir / ("lz4-" + std::to_string(n++)), seed);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: squall-fuzz-seeds DIR (fuzz/corpus)\n");
    return 2;
  }
  fs::path dir = argv[1];
  writeSubmitSeeds(dir / "submit");
  fs::create_directories(dir / "session-log");
  writeLog(dir / "session-log" / "log-open", false);
  writeLog(dir / "session-log" / "log-history", true);
  writeChunkSeeds(dir / "chunk");
  return 0;
}
