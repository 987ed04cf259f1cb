#include <squall/proto/make-dirs.h>

#include <cerrno>
#include <cstring>
#include <squall/proto/errors.h>
#include <sys/stat.h>

namespace squall {

void makeDirs(kj::StringPtr path, int mode) {
  SQUALL_REQUIRE(path.size() > 0, "cannot create a directory with an empty name");
  // Component by component, so each one made gets `mode` (the umask still
  // applies); one that exists is left as it is.
  auto partial = kj::heapString(path);
  for (size_t i = 1; i <= partial.size(); i++) {
    if (i < partial.size() && partial[i] != '/') continue;
    if (partial[i - 1] == '/') continue;
    char saved = partial.begin()[i];
    partial.begin()[i] = '\0';
    if (::mkdir(partial.cStr(), mode) < 0) {
      int error = errno;
      struct stat st;
      if (error != EEXIST || ::stat(partial.cStr(), &st) < 0 || !S_ISDIR(st.st_mode)) {
        SQUALL_FAIL("cannot create the directory ", partial.cStr(), ": ", strerror(error == EEXIST ? ENOTDIR : error));
      }
    }
    partial.begin()[i] = saved;
  }
}

}  // namespace squall
