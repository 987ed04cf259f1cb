// The read end of a lifeline pipe, watched on the loop. Loop thread only.
#include <squall/proto/errors.h>
#include <squall/proto/lifeline.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <kj/debug.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

kj::AutoCloseFd adoptLifeline(int fd) {
  struct stat st;
  SQUALL_REQUIRE(fd >= 0 && ::fstat(fd, &st) == 0, "bad --lifeline-fd ", fd, ": not an open descriptor");
  SQUALL_REQUIRE(S_ISFIFO(st.st_mode), "bad --lifeline-fd ", fd, ": not a pipe");
  int mode;
  KJ_SYSCALL(mode = ::fcntl(fd, F_GETFL));
  SQUALL_REQUIRE((mode & O_ACCMODE) == O_RDONLY, "bad --lifeline-fd ", fd,
                 ": not the read end of a pipe");
  KJ_SYSCALL(::fcntl(fd, F_SETFD, FD_CLOEXEC));
  KJ_SYSCALL(::fcntl(fd, F_SETFL, mode | O_NONBLOCK));
  return kj::AutoCloseFd(fd);
}

namespace {

// True once the pipe is at end of file (or broken); bytes, which the
// starter never writes, are read and ignored.
bool atEnd(int fd) {
  for (;;) {
    char buffer[64];
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n > 0) continue;
    if (n == 0) return true;
    if (errno == EINTR) continue;
    return errno != EAGAIN;
  }
}

kj::Promise<void> waitForEnd(kj::Own<kj::UnixEventPort::FdObserver> observer, int fd) {
  if (atEnd(fd)) return kj::READY_NOW;
  auto readable = observer->whenBecomesReadable();
  return readable.then([observer = kj::mv(observer), fd]() mutable {
    return waitForEnd(kj::mv(observer), fd);
  });
}

}  // namespace

kj::Promise<void> lifelineCut(kj::UnixEventPort& eventPort, int fd) {
  // Edge-triggered: atEnd() reads until EAGAIN before every wait.
  auto observer = kj::heap<kj::UnixEventPort::FdObserver>(
      eventPort, fd, kj::UnixEventPort::FdObserver::OBSERVE_READ);
  return waitForEnd(kj::mv(observer), fd);
}

}  // namespace squall
