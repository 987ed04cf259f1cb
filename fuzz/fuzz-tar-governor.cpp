// libFuzzer target: the governor's tar reader (governor/src/tar-archive:
// unpackTar, with the default TreeLimits), which unpacks dir constants a
// client sent and archives fetched from other governors. The input is the archive; it is unpacked
// into an empty directory below a scratch root, and nothing may appear
// beside that directory (no entry escapes it).
#include "fuzz-util.h"

#include <fcntl.h>
#include <iterator>
#include <kj/debug.h>
#include <tar-archive.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& scratch = squall::fuzz::scratchDir("tar-governor");
  auto dest = scratch / "dest";
  std::filesystem::create_directory(dest);
  {
    kj::AutoCloseFd dirFd(open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    KJ_ASSERT(dirFd.get() >= 0);
    squall::fuzz::expectingRefusals([&]() {
      squall::unpackTar(kj::ArrayPtr<const kj::byte>(data, size), dirFd, "constant 1/1", squall::TreeLimits{});
    });
  }
  KJ_ASSERT(std::distance(std::filesystem::directory_iterator(scratch), {}) == 1,
            "an entry was unpacked outside the destination");
  std::filesystem::remove_all(dest);
  return 0;
}
