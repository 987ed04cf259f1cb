#include "private-file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <squall/proto/errors.h>
#include <squall/proto/make-dirs.h>

namespace squall {

namespace {

// 0600 on `path` if it exists and allows more.
void narrow(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT) return;
    SQUALL_FAIL("cannot open ", path.c_str(), ": ", strerror(errno));
  }
  struct stat st;
  int rc = ::fstat(fd, &st);
  if (rc == 0 && (st.st_mode & 077) != 0) rc = ::fchmod(fd, st.st_mode & 0700);
  int error = errno;
  ::close(fd);
  if (rc < 0) SQUALL_FAIL("cannot make ", path.c_str(), " private (0600): ", strerror(error));
}

}  // namespace

void preparePrivateDatabase(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) makeDirs(kj::heapString(path.data(), slash), 0700);
  int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) SQUALL_FAIL("session log ", path.c_str(), ": cannot open: ", strerror(errno));
  ::close(fd);
}

void narrowPrivateDatabase(const std::string& path) {
  for (auto suffix : {"", "-wal", "-shm"}) narrow(path + suffix);
}

}  // namespace squall
