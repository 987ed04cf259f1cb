// Pipes between the governor and the programs of live streams: the
// producer's end the governor reads (its stdout or a named pipe it writes),
// and a reader's end the governor writes (its stdin or a named pipe it
// reads). Non-blocking descriptors watched by KJ (edge-triggered: every
// operation goes on until EAGAIN before it waits). Loop thread only.
#pragma once

#include <kj/async-unix.h>
#include <kj/io.h>
#include <kj/string.h>
#include <kj/timer.h>

namespace squall {

// Pipes are enlarged to this (the default, and the most an unprivileged
// process may ask for, in /proc/sys/fs/pipe-max-size): fewer wake-ups.
constexpr size_t PIPE_BUFFER_SIZE = 1 << 20;

// Asks the kernel for a PIPE_BUFFER_SIZE buffer; a refusal (over the
// user's pipe quota) keeps the default and is not an error.
void enlargePipe(int fd);
void setNonBlocking(int fd);

struct PipeFds {
  kj::AutoCloseFd readEnd;
  kj::AutoCloseFd writeEnd;
};
// pipe2(O_CLOEXEC), enlarged; both ends blocking (one goes to a program).
PipeFds makePipe();

// One non-blocking pipe descriptor of the governor's and its KJ watcher.
// Its promises may outlive it (a reader's pipe is dropped when its program
// exits, while the stream's pump still waits on a write): they then reject
// DISCONNECTED "the pipe was closed", and nothing of theirs runs after.
class PipeEnd {
 public:
  enum class Direction { READ, WRITE };
  PipeEnd(kj::UnixEventPort& eventPort, kj::AutoCloseFd fd, Direction direction);
  ~PipeEnd() noexcept(false);
  KJ_DISALLOW_COPY(PipeEnd);

  int fd() const { return descriptor; }

  // Up to buffer.size() bytes, at least one; 0 at end of file.
  kj::Promise<size_t> read(kj::ArrayPtr<kj::byte> buffer);
  // All of `bytes`. A reader that has gone (EPIPE) rejects DISCONNECTED
  // "broken pipe". `bytes` must stay valid until the promise resolves.
  kj::Promise<void> writeAll(kj::ArrayPtr<const kj::byte> bytes);

  // Waits, after an operation met EAGAIN, for a change worth retrying.
  kj::Promise<void> whenReadable() { return canceler.wrap(observer.whenBecomesReadable()); }
  kj::Promise<void> whenWritable() { return canceler.wrap(observer.whenBecomesWritable()); }

 private:
  // Declared first, closed last: the watcher leaves epoll before the close.
  kj::AutoCloseFd ownedFd;
  int descriptor;
  kj::UnixEventPort::FdObserver observer;
  // Declared last, so cancelled first: the continuations of read() and
  // writeAll() hold `this`, and one already scheduled (the descriptor became
  // writable) would otherwise run on a destroyed end.
  kj::Canceler canceler;

  kj::Promise<size_t> readSome(kj::ArrayPtr<kj::byte> buffer);
  kj::Promise<void> writeRest(kj::ArrayPtr<const kj::byte> bytes);
};

// Result of one spliceSome(): bytes moved, or why none were.
struct SpliceStep {
  enum class Kind { MOVED, END_OF_INPUT, OUTPUT_GONE, WOULD_BLOCK };
  Kind kind;
  size_t bytes = 0;
};

// Moves up to `max` bytes from the pipe `from` to the pipe `to` inside the
// kernel (splice(2), no copy through user space). WOULD_BLOCK does not say
// which side would block: wait for either to change.
SpliceStep spliceSome(PipeEnd& from, PipeEnd& to, size_t max);

// The end the governor writes of a reader program's input: the write end of
// its stdin pipe, or a named pipe in its sandbox. A FIFO is held open for
// reading too, so that bytes written before the program opens it are kept;
// end-of-file (close()) is delivered only once the program has it open
// (checked by reopening it for writing through /proc/self/fd, which fails
// with ENXIO while no reader has it open), or its bytes would be lost.
class ConsumerPipe {
 public:
  // A pipe's write end.
  ConsumerPipe(kj::UnixEventPort& eventPort, kj::AutoCloseFd writeEnd);
  // A FIFO opened by the governor at both ends.
  ConsumerPipe(kj::UnixEventPort& eventPort, kj::AutoCloseFd fifoRead, kj::AutoCloseFd fifoWrite);
  KJ_DISALLOW_COPY(ConsumerPipe);

  PipeEnd& end() { return *writer; }
  bool isFifo() const { return fifoRead != nullptr; }

  // Delivers end-of-file: closes the governor's ends (a FIFO's once the
  // program has opened it and read what the FIFO holds, polling with
  // `timer` until then).
  kj::Promise<void> close(kj::Timer& timer);
  // The governor's write end is gone: the program gets end of file.
  bool closed() const { return writer.get() == nullptr; }
  // Closes at once (the reader has gone).
  void drop();

 private:
  kj::Own<PipeEnd> writer;
  kj::Maybe<kj::AutoCloseFd> fifoRead;

  kj::Promise<void> closeWhenOpened(kj::Timer& timer, kj::Duration wait);
};

// Opens the FIFO `rel` below `dirFd` (the sandbox, before the program
// starts) without following links: for a reader program, a ConsumerPipe;
// for a producer program, the read end the governor pumps from plus a
// write end kept open until the program has exited (so that the read end
// does not see end-of-file before the program opens the FIFO).
kj::Own<ConsumerPipe> openConsumerFifo(kj::UnixEventPort& eventPort, int dirFd, kj::StringPtr rel);
struct ProducerFifo {
  kj::AutoCloseFd readEnd;
  kj::AutoCloseFd keepOpen;
};
ProducerFifo openProducerFifo(int dirFd, kj::StringPtr rel);

}  // namespace squall
