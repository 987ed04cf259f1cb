// Non-blocking pipes of live streams. Loop thread only.
#include "stream-pipe.h"

#include "safe-path.h"

#include <cerrno>
#include <fcntl.h>
#include <kj/debug.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

void enlargePipe(int fd) { (void)::fcntl(fd, F_SETPIPE_SZ, static_cast<int>(PIPE_BUFFER_SIZE)); }

void setNonBlocking(int fd) {
  int flags;
  KJ_SYSCALL(flags = ::fcntl(fd, F_GETFL));
  if ((flags & O_NONBLOCK) == 0) {
    KJ_SYSCALL(::fcntl(fd, F_SETFL, flags | O_NONBLOCK));
  }
}

PipeFds makePipe() {
  int fds[2];
  KJ_SYSCALL(::pipe2(fds, O_CLOEXEC));
  PipeFds pipe{kj::AutoCloseFd(fds[0]), kj::AutoCloseFd(fds[1])};
  enlargePipe(fds[0]);
  return pipe;
}

namespace {
kj::UnixEventPort::FdObserver::Flags observeFlags(PipeEnd::Direction direction) {
  return direction == PipeEnd::Direction::READ ? kj::UnixEventPort::FdObserver::OBSERVE_READ
                                               : kj::UnixEventPort::FdObserver::OBSERVE_WRITE;
}
}  // namespace

PipeEnd::PipeEnd(kj::UnixEventPort& eventPort, kj::AutoCloseFd fd, Direction direction)
    : ownedFd((setNonBlocking(fd), kj::mv(fd))),
      descriptor(ownedFd.get()),
      observer(eventPort, descriptor, observeFlags(direction)) {}

PipeEnd::~PipeEnd() noexcept(false) {
  canceler.cancel(kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__,
                                kj::str("the pipe was closed")));
}

kj::Promise<size_t> PipeEnd::read(kj::ArrayPtr<kj::byte> buffer) { return canceler.wrap(readSome(buffer)); }

kj::Promise<size_t> PipeEnd::readSome(kj::ArrayPtr<kj::byte> buffer) {
  for (;;) {
    ssize_t n = ::read(descriptor, buffer.begin(), buffer.size());
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      return observer.whenBecomesReadable().then([this, buffer]() { return readSome(buffer); });
    }
    KJ_FAIL_SYSCALL("read(pipe)", errno);
  }
}

kj::Promise<void> PipeEnd::writeAll(kj::ArrayPtr<const kj::byte> bytes) {
  return canceler.wrap(writeRest(bytes));
}

kj::Promise<void> PipeEnd::writeRest(kj::ArrayPtr<const kj::byte> bytes) {
  while (bytes.size() > 0) {
    ssize_t n = ::write(descriptor, bytes.begin(), bytes.size());
    if (n >= 0) {
      bytes = bytes.slice(n, bytes.size());
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {
      return observer.whenBecomesWritable().then([this, bytes]() { return writeRest(bytes); });
    }
    if (errno == EPIPE) {
      return kj::Exception(kj::Exception::Type::DISCONNECTED, __FILE__, __LINE__, kj::str("broken pipe"));
    }
    KJ_FAIL_SYSCALL("write(pipe)", errno);
  }
  return kj::READY_NOW;
}

SpliceStep spliceSome(PipeEnd& from, PipeEnd& to, size_t max) {
  for (;;) {
    ssize_t n = ::splice(from.fd(), nullptr, to.fd(), nullptr, max, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
    if (n > 0) return SpliceStep{SpliceStep::Kind::MOVED, static_cast<size_t>(n)};
    if (n == 0) return SpliceStep{SpliceStep::Kind::END_OF_INPUT};
    if (errno == EINTR) continue;
    if (errno == EPIPE) return SpliceStep{SpliceStep::Kind::OUTPUT_GONE};
    if (errno == EAGAIN) return SpliceStep{SpliceStep::Kind::WOULD_BLOCK};
    KJ_FAIL_SYSCALL("splice(pipe, pipe)", errno);
  }
}

ConsumerPipe::ConsumerPipe(kj::UnixEventPort& eventPort, kj::AutoCloseFd writeEnd)
    : writer(kj::heap<PipeEnd>(eventPort, kj::mv(writeEnd), PipeEnd::Direction::WRITE)) {}

ConsumerPipe::ConsumerPipe(kj::UnixEventPort& eventPort, kj::AutoCloseFd fifoReadEnd,
                           kj::AutoCloseFd fifoWriteEnd)
    : writer(kj::heap<PipeEnd>(eventPort, kj::mv(fifoWriteEnd), PipeEnd::Direction::WRITE)),
      fifoRead(kj::mv(fifoReadEnd)) {}

void ConsumerPipe::drop() {
  fifoRead = nullptr;
  writer = nullptr;
}

kj::Promise<void> ConsumerPipe::close(kj::Timer& timer) {
  if (writer.get() == nullptr) return kj::READY_NOW;
  if (fifoRead == nullptr) {
    writer = nullptr;
    return kj::READY_NOW;
  }
  // Our read end no longer counts as a reader; the program's does, if open.
  fifoRead = nullptr;
  return closeWhenOpened(timer, 2 * kj::MILLISECONDS);
}

kj::Promise<void> ConsumerPipe::closeWhenOpened(kj::Timer& timer, kj::Duration wait) {
  if (writer.get() == nullptr) return kj::READY_NOW;
  auto self = kj::str("/proc/self/fd/", writer->fd());
  int probe = ::open(self.cStr(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  if (probe >= 0) {
    ::close(probe);
    // Someone holds it open for reading. Close only once it has also read
    // what is in the FIFO: a reader seen here need not be the program (a
    // process that opened it for a moment, or the program before it opens
    // it again), and once our end is gone a later open would block for
    // good with the bytes lost. Until then, look again soon.
    int pending = 0;
    if (::ioctl(writer->fd(), FIONREAD, &pending) < 0 || pending == 0) {
      writer = nullptr;
      return kj::READY_NOW;
    }
    auto next = kj::min(wait, 20 * kj::MILLISECONDS);
    return timer.afterDelay(next).then([this, &timer, next]() {
      return closeWhenOpened(timer, kj::min(next * 2, 20 * kj::MILLISECONDS));
    });
  }
  int error = errno;
  if (error != ENXIO) {
    // Cannot tell (should not happen): closing is all that is left.
    writer = nullptr;
    return kj::READY_NOW;
  }
  // The program has not opened it (yet): its bytes stay in the FIFO while
  // our write end is open. Polled, as Linux has no event for "a FIFO got a
  // reader"; the wait grows to 100 ms. Ends when the reader's program exits
  // (drop()).
  return timer.afterDelay(wait).then([this, &timer, wait]() {
    return closeWhenOpened(timer, kj::min(wait * 2, 100 * kj::MILLISECONDS));
  });
}

namespace {
kj::AutoCloseFd openFifo(int dirFd, kj::StringPtr rel, int flags) {
  int fd = openNoSymlinks(dirFd, rel, flags | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) SQUALL_FAIL("cannot open the named pipe '", rel, "': ", strerror(-fd));
  kj::AutoCloseFd owned(fd);
  struct stat st;
  KJ_SYSCALL(::fstat(fd, &st));
  if (!S_ISFIFO(st.st_mode)) SQUALL_FAIL("'", rel, "' is not the named pipe the governor made");
  return owned;
}
}  // namespace

kj::Own<ConsumerPipe> openConsumerFifo(kj::UnixEventPort& eventPort, int dirFd, kj::StringPtr rel) {
  // Read end first: a non-blocking open for writing needs a reader.
  auto readEnd = openFifo(dirFd, rel, O_RDONLY);
  auto writeEnd = openFifo(dirFd, rel, O_WRONLY);
  enlargePipe(writeEnd);
  return kj::heap<ConsumerPipe>(eventPort, kj::mv(readEnd), kj::mv(writeEnd));
}

ProducerFifo openProducerFifo(int dirFd, kj::StringPtr rel) {
  auto readEnd = openFifo(dirFd, rel, O_RDONLY);
  auto keepOpen = openFifo(dirFd, rel, O_WRONLY);
  enlargePipe(readEnd);
  return ProducerFifo{kj::mv(readEnd), kj::mv(keepOpen)};
}

}  // namespace squall
