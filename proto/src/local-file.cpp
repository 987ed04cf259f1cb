// Files a governor and a client on the same machine share by path.
#include <squall/proto/local-file.h>

#include <climits>
#include <fcntl.h>
#include <kj/debug.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

kj::StringPtr machineBootId() {
  static const kj::String id = []() {
    int fd = ::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kj::str();
    char buffer[64];
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    ::close(fd);
    if (n <= 0) return kj::str();
    while (n > 0 && (buffer[n - 1] == '\n' || buffer[n - 1] == ' ')) n--;
    return kj::heapString(buffer, n);
  }();
  return id;
}

void describeLocalFile(int fd, kj::StringPtr path, wire::LocalFile::Builder out) {
  struct stat st;
  KJ_SYSCALL(::fstat(fd, &st), path);
  out.setPid(static_cast<uint32_t>(::getpid()));
  if (path.startsWith("/")) {
    out.setPath(path);
  } else {
    // A relative work dir: the opener resolves from the root, not our cwd.
    char cwd[PATH_MAX];
    KJ_SYSCALL(::getcwd(cwd, sizeof(cwd)) == nullptr ? -1 : 0);
    out.setPath(kj::str(cwd, "/", path));
  }
  out.setDevice(st.st_dev);
  out.setInode(st.st_ino);
  out.setBootId(machineBootId());
}

kj::Maybe<kj::AutoCloseFd> openLocalFile(wire::LocalFile::Reader file, int flags) {
  auto boot = machineBootId();
  auto path = file.getPath();
  if (boot.size() == 0 || file.getBootId() != boot || path.size() == 0 || path[0] != '/') return nullptr;
  auto where = kj::str("/proc/", file.getPid(), "/root", path);
  int fd = ::open(where.cStr(), flags | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return nullptr;
  kj::AutoCloseFd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != file.getDevice() ||
      st.st_ino != file.getInode()) {
    return nullptr;
  }
  return kj::mv(owned);
}

}  // namespace squall
