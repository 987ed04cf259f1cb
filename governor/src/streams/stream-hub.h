// Live streams on this governor: the registry of streams whose producers
// run (or will run) here, the flow of each one's bytes from the producer's
// pipe to all of its readers (fan-out), and the readers' ends (local pipes,
// other governors' sinks, reads of streams produced elsewhere). Loop thread
// only; persisting to the store writes on the libuv pool.
//
// Life of a stream:
//   expect()   at assignment: its producer task, reader count, persist flag.
//   attach()   each reader, local or (serve()) remote, before or after
//              expect(): a reader that comes first waits for expect(), at
//              most `attachTimeout`. A reader task that ends before it
//              attached (failed, cancelled) counts as a reader that closed
//              early (taskEnded()), and so do readers that gave up waiting
//              if the producer comes while the stream is still remembered:
//              the producer never waits for them.
//   produce()  once the program is started: the pipe the governor reads.
//   flow       once every reader has attached (so each gets every byte):
//              producer pipe -> every reader (+ the store when persisted).
//   end        at end of file: every reader gets its end of file (pipe
//              closed, remote done() acknowledged), the persisted file is
//              written; then producerExited() gives the verdict, readers
//              learn it, the stream is settled and its producer reported.
// A reader that goes before the end closes early: the stream goes on for
// the others; when none is left and nothing is persisted, the producer's
// pipe is closed (it gets SIGPIPE/EPIPE, which counts as success unless the
// reader's edge says earlyCloseIsError).
//
// A reader's verdict: end of file reaches it as soon as the producer's pipe
// ends, but a reader task succeeds only once its producer has: if the
// producer then fails, the reader is killed (process group) and fails with
// "input stream S failed: producer task P (name) exited with status 1" (or
// was cancelled, killed by signal N, could not start, ...). A reader that
// closed early is judged by its own exit alone.
//
// With earlyCloseIsError, the producer's task fails with "reader task R
// closed its end of stream S early (broken pipe)" (its other readers with
// "input stream S failed: producer task P (name) fails because reader task
// R closed ..."). Across governors the reader's edge flag travels as the
// exception type of its sink's write(): FAILED with that text when
// earlyCloseIsError, DISCONNECTED otherwise (see readerClosed()).
//
// Flow design (decided by measurement on this 2-core VM, under a load of
// 8-12 from other work, so ranges; `squall-bench --streams-only` measures
// a stream on one governor and across two against a `dd | dd` pipe):
//   2 GiB through one relay process, `dd bs=1M | relay | dd bs=1M`: splice
//   0.5-1.1 s, read/write with a 1 MiB buffer 1.6-2.9 s, an epoll-driven
//   non-blocking splice 0.6-0.8 s; the plain `dd | dd` 0.8-1.4 s. A plain
//   `head -c 2G /dev/zero | wc -c` takes 4-14 s (small writes on a 64 KiB
//   pipe), which every relay with 1 MiB pipes beats.
//   * exactly one local reader, nothing persisted: splice(2) from the
//     producer's pipe into the reader's, no copy through user space.
//     Through a governor (task start and reporting included): dd|dd 2 GiB
//     0.8-1.5 s against 0.8-1.6 s for the shell pipe (58-155%, noise);
//     head|wc 6.4-6.9 s against 13-14 s.
//   * exactly one remote reader, nothing persisted, no LZ4: read straight
//     into the next capnp message's chunk (then truncated), no buffer of
//     ours. dd|dd 2 GiB between two governor loops: 4.2-6.1 s, where a
//     minimal C relay over loopback TCP (4 processes) takes 2.9-4.6 s: on
//     two cores the copies through TCP are the limit. head|wc: 8.2-8.4 s,
//     twice the shell pipe's speed. Peak RSS of both governors ~20-30 MiB.
//   * otherwise: read up to 1 MiB from the producer's pipe into a buffer and
//     hand that chunk to every sink (local pipes written without blocking,
//     remote sinks by awaited capnp streaming writes, LZ4 on the pool, the
//     persist file by a pool job), reading the next chunk meanwhile: at
//     most two chunks per stream in memory, and the slowest reader sets the
//     pace.
//   Handing the producer's pipe straight to a single local reader would
//   cost nothing at all, but then the governor could not count the bytes,
//   hold back a late reader, or tell an early close from the end.
//   Pipes are enlarged to 1 MiB (F_SETPIPE_SZ); main() keeps freed heap so
//   1 MiB messages do not fault in fresh pages (300 -> 550 MB/s remote).
#pragma once

#include "data-service.h"
#include "object-store.h"
#include "stream-pipe.h"
#include "uv-bridge.h"

#include <kj/async-unix.h>
#include <kj/timer.h>
#include <map>
#include <spdlog/logger.h>
#include <squall/proto/ids.h>
#include <squall/wire/data.capnp.h>
#include <squall/wire/service.capnp.h>
#include <unordered_map>

namespace squall {

// --compress-streams: whether a reader asks the producer's governor for LZ4
// chunks. AUTO: unless the producer's address is a loopback one.
enum class CompressStreams { AUTO, ON, OFF };
kj::Maybe<CompressStreams> parseCompressStreams(kj::StringPtr text);
bool isLoopbackAddress(kj::StringPtr address);
bool shouldCompress(CompressStreams mode, kj::StringPtr producerAddress);

// The producing task's handle on one of its stream outputs. Dropping it
// before producerExited() fails the stream.
class StreamOutput {
 public:
  virtual ~StreamOutput() noexcept(false) = default;

  // True once every reader had gone and the governor closed the producer's
  // pipe, so that a SIGPIPE (or a shell's status 141) is the expected end.
  virtual bool closedByReaders() const = 0;

  // The program has exited and the task's other outputs were taken:
  // `failure` is nullptr on success, else why ("exited with status 1"),
  // which readers are told.
  virtual void producerExited(kj::Maybe<kj::String> failure) = 0;
  // Fails the stream now (the task was cancelled while its readers were
  // still being served); `reason` as for producerExited().
  virtual void fail(kj::StringPtr reason) = 0;

  struct Result {
    // Bytes that flowed (persisted: the stored blob's size and hash; else
    // hash 0).
    uint64_t size = 0;
    uint64_t hash = 0;
    // Why the producer fails although its program succeeded (a reader with
    // earlyCloseIsError closed early, the store refused the bytes).
    kj::Maybe<kj::String> error;
  };
  // Resolves once the flow has ended for every reader (end of file given,
  // remote done() acknowledged), a persisted stream is held as a blob, and
  // the verdict is passed on to the readers. Call once.
  virtual kj::Promise<Result> settled() = 0;
};

// A reader task's handle on one of its live inputs. Dropping it counts as
// the reader going away (an early close unless the input had ended).
class LiveInput {
 public:
  virtual ~LiveInput() noexcept(false) = default;
  // Rejects (FAILED, with the message the reader task fails with) as soon
  // as the stream fails; resolves once the input has ended and its
  // producer has succeeded. May be called more than once.
  virtual kj::Promise<void> verdict() = 0;
  // True once end of file was delivered to the program.
  virtual bool reachedEnd() const = 0;
  // The program has exited: if the end was not reached, it closed early.
  virtual void readerExited() = 0;
};

class StreamHub final : public LiveStreams, private kj::TaskSet::ErrorHandler {
 public:
  // `attachTimeout`: how long a reader waits for its producer's stream to
  // be expected here, and how long a settled stream is remembered for
  // latecomers.
  StreamHub(kj::UnixEventPort& eventPort, kj::Timer& timer, UvBridge& bridge, ObjectStore& store,
            DataFetcher& fetcher, spdlog::logger& logger, kj::String governorName,
            CompressStreams compress, kj::Duration attachTimeout = 60 * kj::SECONDS);
  ~StreamHub() noexcept(false);
  KJ_DISALLOW_COPY(StreamHub);

  // --- producers (TaskQueue at assignment, execute tasks once started)

  // `producerName` names the producer in readers' errors.
  void expect(Id stream, Id producer, kj::StringPtr producerName, uint32_t readers, bool persist);
  // The program runs and writes the pipe whose read end is `source`;
  // `keepOpen` (a FIFO's write end, or null) is closed at producerExited().
  kj::Own<StreamOutput> produce(Id stream, kj::AutoCloseFd source, kj::AutoCloseFd keepOpen);

  // --- readers

  // Attaches a reader task's pipe to the stream: produced here when
  // `producerAddress` is nullptr, else read from that governor's data
  // service.
  kj::Own<LiveInput> attach(Id stream, Id reader, bool earlyCloseIsError, kj::Own<ConsumerPipe> pipe,
                            kj::Maybe<kj::StringPtr> producerAddress);

  // LiveStreams (data-service.h): a remote reader.
  kj::Promise<uint64_t> serve(Id stream, wire::ByteSink::Client sink, bool compress) override;

  // A task has been reported (any outcome: `ok`, else its `error`): its
  // streams that never started producing fail with that reason, and its
  // live inputs it never attached count as readers that closed at once (so
  // their producers do not wait for them).
  void taskEnded(wire::Assignment::Reader assignment, bool ok, kj::StringPtr error);

  // Streams not yet settled (tests: nothing is left behind).
  size_t activeCount() const;

  // For the pipes of readers' ConsumerPipes.
  kj::UnixEventPort& events() { return eventPort; }

  class Stream;
  class Sink;

 private:
  friend class Stream;
  kj::UnixEventPort& eventPort;
  kj::Timer& timer;
  UvBridge& bridge;
  ObjectStore& store;
  DataFetcher& fetcher;
  spdlog::logger& logger;
  kj::String governorName;
  CompressStreams compress;
  kj::Duration attachTimeout;
  uint64_t nextSerial = 1;
  std::unordered_map<Id, kj::Own<Stream>, IdHash> streams;
  // How many live inputs of (reader task, stream) attached through
  // attach(); see taskEnded().
  std::map<std::pair<Id, Id>, uint32_t> attachedReaders;
  kj::TaskSet tasks;

  Stream& streamFor(Id id);
  // The stream a reader joins; one nobody produces here yet waits for its
  // producer (at most attachTimeout).
  Stream& readerStream(Id id);
  void forgetLater(Id id, uint64_t serial);
  void abandon(Id stream, Id reader, bool earlyCloseIsError, kj::Maybe<kj::StringPtr> producerAddress);
  void taskFailed(kj::Exception&& exception) override;
};

}  // namespace squall
