// libFuzzer target: the data plane's LZ4 chunk codec (proto/src/chunk-codec),
// which decodes chunks a peer governor or client sends. The input is a
// 4-byte little-endian raw size (as DataChunk.rawSize says it) and an LZ4
// block; the block is also compressed and decoded again, which must give
// back exactly what went in.
#include "fuzz-util.h"

#include <cstring>
#include <kj/debug.h>
#include <squall/proto/chunk-codec.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  uint32_t rawSize = 0;
  memcpy(&rawSize, data, 4);  // little-endian hosts only, like the wire
  auto block = kj::arrayPtr(data + 4, size - 4);
  squall::fuzz::expectingRefusals([&]() { squall::decompressChunk(block, rawSize); });

  KJ_IF_MAYBE(compressed, squall::compressChunk(block)) {
    auto back = squall::decompressChunk(*compressed, block.size());
    KJ_ASSERT(back == block, "a compressed chunk did not decode to what it was made from");
  }
  return 0;
}
