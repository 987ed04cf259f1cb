// Cap'n Proto messages over a byte stream, in fewer system calls than
// capnp 0.9.2's own AsyncIoMessageStream: the transport of every RPC
// connection squall makes (TCP, TLS and the executors' Unix sockets).
//
// What capnp's stream does per message: reads its first word (8 bytes),
// then the rest, each a read() of its own, and writes it with a writev()
// of its own. A governor feeding a warm executor sends Call and Finish
// messages and reads Returns by the thousand a second, so those system
// calls, and the wake-ups of a reader that gets one message at a time, were
// most of what a trivial call cost (docs/benchmarks.md, tasklib).
//
// - Reads fill a buffer with whatever the socket has (up to 64 KiB) and
//   cut messages out of it; a message is copied into its own words before
//   it is handed on (an RPC call keeps its message as long as it runs), and
//   one larger than the buffer is read straight into them.
// - Writes are gathered: a message is copied into the batch being built and
//   the write "completes" at once; the batch goes out in one write when the
//   event loop has nothing else to do (kj::evalLast), so the Returns of
//   every call an executor ran in one go leave together. A message of
//   64 KiB or more is not copied: the batch and it go out in one write and
//   its promise resolves once written. While more than 1 MiB waits to be
//   written, a message's promise resolves only when its batch has gone, so
//   capnp's write queue, which waits on it, holds the sender back. A peer
//   that reads nothing cannot make that queue grow without bound: past
//   MAX_UNWRITTEN_BYTES, or MAX_WAITING_WRITES writes queued, the
//   connection is cut (DISCONNECTED), both ways. (A queue of 250,000
//   waiting writes once took a server's stack down as it was torn down,
//   one frame a link.)
// - Before its peer has authenticated (gateReads), a listener's connection
//   reads only a few small messages; a later or larger one waits, unread,
//   until openGate().
// - Clean-up messages wait for the next message: a Finish for a call
//   whose Return has come, and a Release, only let the peer free what it
//   keeps for us, so they go out with the next other message written
//   (or once MAX_HELD_MESSAGES of them wait) instead of in a write of
//   their own, which woke the peer for nothing: the peer of every call
//   made and answered (an executor after each call, a server after each
//   update) woke once more for the Finish. In order as always, so the
//   peer sees them before anything that follows; a Finish that cancels a
//   call still running goes at once. Not with blocking writes (an
//   executor's connection).
// - File descriptors (SCM_RIGHTS, Unix sockets only): a message with
//   descriptors is written alone, after the batch before it, in one
//   sendmsg(), as capnp's stream writes it. Linux ends a read() at the
//   buffer that carried descriptors, and a sender's descriptors ride on the
//   first buffer of its sendmsg(), so the descriptors a read returns belong
//   to the message holding the last byte it read. That is how they are
//   matched to messages here, from this writer or capnp's.
//
// Loop thread only; `stream` must outlive it.
#pragma once

#include <capnp/serialize-async.h>
#include <deque>
#include <kj/async-io.h>
#include <kj/vector.h>
#include <unordered_set>

namespace squall {

class BufferedMessageStream final : public capnp::MessageStream {
 public:
  explicit BufferedMessageStream(kj::AsyncIoStream& stream);
  // Carries file descriptors as well (a Unix socket).
  explicit BufferedMessageStream(kj::AsyncCapabilityStream& stream);
  ~BufferedMessageStream() noexcept(false);
  KJ_DISALLOW_COPY(BufferedMessageStream);

  static constexpr size_t READ_BUFFER_BYTES = 64 * 1024;
  // A message at least this large is written from the caller's segments.
  static constexpr size_t COPY_LIMIT_BYTES = 64 * 1024;
  // Bytes handed over and not yet written past which writes wait.
  static constexpr size_t HIGH_WATER_BYTES = 1024 * 1024;
  // Clean-up messages held for the next other message, at most.
  static constexpr size_t MAX_HELD_MESSAGES = 64;
  // Past either, a peer that does not read is cut off (see the header).
  static constexpr size_t MAX_UNWRITTEN_BYTES = 256 * 1024 * 1024;
  static constexpr size_t MAX_WAITING_WRITES = 4096;

  // Until openGate(): at most `messages` more messages are read, each of at
  // most `words` words; the read of any other waits for openGate().
  void gateReads(size_t messages, size_t words);
  void openGate();
  // Writes what the batch holds; resolves once every message handed over
  // so far is written (rejects as the write that failed).
  kj::Promise<void> drain();

  kj::Promise<kj::Maybe<capnp::MessageReaderAndFds>> tryReadMessage(
      kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions options = capnp::ReaderOptions(),
      kj::ArrayPtr<capnp::word> scratchSpace = nullptr) override;
  kj::Promise<void> writeMessage(kj::ArrayPtr<const int> fds,
                                 kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments) override;
  kj::Promise<void> writeMessages(
      kj::ArrayPtr<kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>>> messages) override;
  kj::Maybe<int> getSendBufferSize() override;
  kj::Promise<void> end() override;

  // From now on, writes (without descriptors) are made before flush
  // returns, blocking while the socket is full, on `fd` (the stream's own
  // descriptor), instead of waiting in the event loop. For an executor,
  // which has nothing to do while its governor does not read: it needs
  // writeNow() to be able to finish. Call before the first write.
  void useBlockingWrites(int fd) { blockingFd = fd; }
  // With blocking writes: writes what the batch holds now (the answers of
  // the calls run so far) before returning. An executor calls it before it
  // runs an actor's method, so that a crash in the method cannot take the
  // answers of the calls before it (docs/decisions.md, Actors). Throws
  // DISCONNECTED when the peer has gone.
  void writeNow();
  // With blocking writes: writes what the batch holds and then `segments`,
  // one message, before returning (no flush is scheduled for it). An
  // actor's answer on its calls channel (executor.capnp). Throws as
  // writeNow().
  void writeNow(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments);

  // The messages are not RPC messages (an actor's calls channel,
  // executor.capnp): none is a clean-up message to hold back, and the
  // Returns read are not looked for. Call before the first message.
  void usePlainMessages() { rpcMessages = false; }

  // System calls made, for tests and benchmarks.
  struct Counts {
    uint64_t reads = 0;
    uint64_t writes = 0;
    uint64_t messagesIn = 0;
    uint64_t messagesOut = 0;
  };
  const Counts& counts() const { return counts_; }

 private:
  using MessageReaderAndFds = capnp::MessageReaderAndFds;

  kj::AsyncIoStream& stream;
  kj::AsyncCapabilityStream* capStream = nullptr;
  Counts counts_;

  // ---- reading
  kj::Array<capnp::word> buffer;
  // Bytes of `buffer` not handed on yet: [begin, end).
  size_t begin = 0;
  size_t end_ = 0;
  // The stream offset of buffer[0].
  uint64_t base = 0;
  bool eof = false;
  // Descriptors received, and the stream offset of the last byte of the
  // read that brought them.
  struct FdBundle {
    uint64_t lastByte;
    kj::Array<kj::AutoCloseFd> fds;
  };
  std::deque<FdBundle> fdBundles;
  // Where each read's descriptors land (readSome).
  kj::Array<kj::AutoCloseFd> fdScratch;

  size_t available() const { return end_ - begin; }
  kj::byte* bytes() { return reinterpret_cast<kj::byte*>(buffer.begin()); }
  // Resolves once `n` bytes (at most the buffer) are buffered, or at the
  // end of the stream with fewer.
  kj::Promise<void> fill(size_t n, size_t maxFds);
  // Reads into `to` (`min` to `max` bytes), keeping the descriptors.
  kj::Promise<size_t> readSome(kj::byte* to, size_t min, size_t max, size_t maxFds);
  // The message of `words` words whose header starts at `begin`.
  kj::Promise<kj::Maybe<MessageReaderAndFds>> readBody(size_t headerBytes, size_t words,
                                                      kj::ArrayPtr<kj::AutoCloseFd> fdSpace,
                                                      capnp::ReaderOptions options);
  MessageReaderAndFds deliver(kj::Array<capnp::word> message, uint64_t start,
                              kj::ArrayPtr<kj::AutoCloseFd> fdSpace, capnp::ReaderOptions options);

  // The gate (gateReads): messages left to read, and the largest.
  struct Gate {
    size_t messagesLeft;
    size_t maxWords;
    kj::Own<kj::PromiseFulfiller<void>> opener;
    kj::ForkedPromise<void> opened;
  };
  kj::Maybe<Gate> gate;
  // Resolves once a message of `words` words (0: not known yet) may be read.
  kj::Promise<void> mayRead(size_t words);

  // ---- writing
  // Writes queued and not done (the non-blocking path).
  size_t waitingWrites = 0;
  // Fails every later write and both directions of the stream.
  kj::Exception cutOff();
  // The batch being built.
  kj::Vector<kj::byte> batch;
  // Bytes handed over and not yet written (the batch's included).
  size_t unwritten = 0;
  // Writes in order: each waits for the one before.
  kj::Promise<void> writes = kj::READY_NOW;
  kj::Maybe<kj::Exception> writeError;
  bool flushScheduled = false;
  kj::Promise<void> scheduledFlush = nullptr;
  // Clean-up messages in the batch with no flush scheduled.
  size_t held = 0;
  // Our questions the peer has answered (Return read) and we have not
  // finished yet.
  std::unordered_set<uint32_t> answered;
  // Whether a message we write only cleans up (see the header), and the
  // Returns among those we read.
  bool cleanUpOnly(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments);
  void noteRead(capnp::MessageReader& message);
  // RPC messages (see usePlainMessages).
  bool rpcMessages = true;
  // Blocking writes on this descriptor (useBlockingWrites); -1: none.
  int blockingFd = -1;

  // Writes `pieces` on blockingFd before it returns.
  void writeBlocking(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces);

  // Appends one message's framing and words to the batch.
  void append(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments);
  // Queues the batch (and `more`, written from the caller's memory, and
  // `fds`) as one write; resolves once written.
  kj::Promise<void> flush(kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> more = nullptr,
                          kj::ArrayPtr<const int> fds = nullptr);
  void scheduleFlush();
};

}  // namespace squall
