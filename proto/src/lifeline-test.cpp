#include <squall/proto/lifeline.h>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <kj/async-io.h>
#include <unistd.h>

namespace squall {
namespace {

struct Pipe {
  int readEnd = -1;
  int writeEnd = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(::pipe(fds), 0);
    readEnd = fds[0];
    writeEnd = fds[1];
  }
};

TEST(LifelineTest, CutOnceEveryWriteEndIsClosed) {
  auto io = kj::setupAsyncIo();
  Pipe pipe;
  int copy = ::dup(pipe.writeEnd);
  auto lifeline = adoptLifeline(pipe.readEnd);
  // Not inherited by the programs this process starts.
  EXPECT_NE(::fcntl(lifeline, F_GETFD) & FD_CLOEXEC, 0);

  auto cut = lifelineCut(io.unixEventPort, lifeline).fork();
  // A byte (never sent in practice) is not an end.
  ASSERT_EQ(::write(pipe.writeEnd, "x", 1), 1);
  ::close(pipe.writeEnd);
  EXPECT_FALSE(cut.addBranch().poll(io.waitScope)) << "cut while a write end is still open";
  ::close(copy);
  io.provider->getTimer().timeoutAfter(10 * kj::SECONDS, cut.addBranch()).wait(io.waitScope);
}

TEST(LifelineTest, AStarterGoneBeforeTheWatchStartsIsSeen) {
  auto io = kj::setupAsyncIo();
  Pipe pipe;
  ::close(pipe.writeEnd);
  auto lifeline = adoptLifeline(pipe.readEnd);
  io.provider->getTimer()
      .timeoutAfter(10 * kj::SECONDS, lifelineCut(io.unixEventPort, lifeline))
      .wait(io.waitScope);
}

TEST(LifelineTest, RefusesWhatIsNotTheReadEndOfAPipe) {
  Pipe pipe;
  try {
    adoptLifeline(pipe.writeEnd);
    ADD_FAILURE() << "took a write end";
  } catch (const kj::Exception& e) {
    EXPECT_EQ(e.getDescription(), kj::str("bad --lifeline-fd ", pipe.writeEnd, ": not the read end of a pipe"));
  }
  int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(devNull, 0);
  try {
    adoptLifeline(devNull);
    ADD_FAILURE() << "took /dev/null";
  } catch (const kj::Exception& e) {
    EXPECT_EQ(e.getDescription(), kj::str("bad --lifeline-fd ", devNull, ": not a pipe"));
  }
  ::close(devNull);
  ::close(pipe.writeEnd);
  ::close(pipe.readEnd);
  // Closed now: no descriptor by that number.
  try {
    adoptLifeline(pipe.readEnd);
    ADD_FAILURE() << "took a closed descriptor";
  } catch (const kj::Exception& e) {
    EXPECT_EQ(e.getDescription(), kj::str("bad --lifeline-fd ", pipe.readEnd, ": not an open descriptor"));
  }
}

}  // namespace
}  // namespace squall
