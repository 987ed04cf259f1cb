// libFuzzer target: the client's tar reader (client/src/tar: untarInto),
// which unpacks dirs fetched from a governor (`squall get`, collected
// pipeline outputs). The input is the archive file; it is unpacked into a
// new directory below a scratch root, and nothing may appear beside it.
#include "fuzz-util.h"

#include <fstream>
#include <iterator>
#include <kj/debug.h>
#include <squall/client/client.h>
#include <tar.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& scratch = squall::fuzz::scratchDir("tar-client");
  auto archive = scratch / "in.tar";
  auto dest = scratch / "dest";
  {
    std::ofstream out(archive, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  squall::fuzz::expectingRefusals<squall::Error>([&]() { squall::client::untarInto(archive, dest); });
  KJ_ASSERT(std::distance(std::filesystem::directory_iterator(scratch), {}) <= 2,
            "an entry was unpacked outside the destination");
  std::filesystem::remove_all(dest);
  return 0;
}
