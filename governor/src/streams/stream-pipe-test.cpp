#include "stream-pipe.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <unistd.h>

namespace squall {
namespace {

// Reads what is in the pipe now; returns the byte count.
size_t drain(int fd) {
  size_t total = 0;
  char buffer[65536];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n <= 0) return total;
    total += n;
  }
}

// The race the stream hub met (a reader's program exits and its pipe is
// dropped just as the pipe became writable again): the wake-up of a
// waiting writeAll() is scheduled, then the end is destroyed before it
// runs. The write must fail as the pipe's closing, not run on the freed
// end (ASan: heap-use-after-free in PipeEnd::writeAll).
TEST(PipeEndTest, AWriteWokenJustBeforeItsEndIsDestroyedFailsDisconnected) {
  auto io = kj::setupAsyncIo();
  auto fds = makePipe();
  setNonBlocking(fds.readEnd);
  int capacity = ::fcntl(fds.writeEnd, F_GETPIPE_SZ);
  ASSERT_GT(capacity, 0);
  auto writer = kj::heap<PipeEnd>(io.unixEventPort, kj::mv(fds.writeEnd), PipeEnd::Direction::WRITE);
  auto bytes = kj::heapArray<kj::byte>(2 * capacity);
  memset(bytes.begin(), 'x', bytes.size());

  // Fills the pipe and waits for room.
  auto write = writer->writeAll(bytes);
  EXPECT_EQ(drain(fds.readEnd), size_t(capacity));
  // The kernel says the pipe is writable; the loop schedules the wake-up
  // but has not run it (nothing has turned the loop).
  io.unixEventPort.poll();
  writer = nullptr;

  auto outcome = write.then([]() -> kj::Maybe<kj::Exception> { return nullptr; },
                            [](kj::Exception&& e) -> kj::Maybe<kj::Exception> { return kj::mv(e); })
                     .wait(io.waitScope);
  KJ_IF_MAYBE(e, outcome) {
    EXPECT_EQ(e->getType(), kj::Exception::Type::DISCONNECTED) << e->getDescription().cStr();
    EXPECT_EQ(e->getDescription(), "the pipe was closed");
  } else {
    ADD_FAILURE() << "the write finished on a destroyed end";
  }
  // Nothing more was written after the end went.
  EXPECT_EQ(drain(fds.readEnd), 0u);
}

// The same for a read woken just before its end goes.
TEST(PipeEndTest, AReadWokenJustBeforeItsEndIsDestroyedFailsDisconnected) {
  auto io = kj::setupAsyncIo();
  auto fds = makePipe();
  auto reader = kj::heap<PipeEnd>(io.unixEventPort, kj::mv(fds.readEnd), PipeEnd::Direction::READ);
  kj::byte buffer[16];
  auto read = reader->read(kj::arrayPtr(buffer, sizeof(buffer)));
  ASSERT_EQ(::write(fds.writeEnd, "data", 4), 4);
  io.unixEventPort.poll();
  reader = nullptr;

  auto outcome = read.then([](size_t) -> kj::Maybe<kj::Exception> { return nullptr; },
                           [](kj::Exception&& e) -> kj::Maybe<kj::Exception> { return kj::mv(e); })
                     .wait(io.waitScope);
  KJ_IF_MAYBE(e, outcome) {
    EXPECT_EQ(e->getType(), kj::Exception::Type::DISCONNECTED) << e->getDescription().cStr();
  } else {
    ADD_FAILURE() << "the read finished on a destroyed end";
  }
}

}  // namespace
}  // namespace squall
