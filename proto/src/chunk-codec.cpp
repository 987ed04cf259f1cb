#include <squall/proto/chunk-codec.h>

#include <kj/debug.h>
#include <lz4.h>

namespace squall {

kj::Maybe<kj::Array<kj::byte>> compressChunk(kj::ArrayPtr<const kj::byte> raw) {
  KJ_REQUIRE(raw.size() <= CHUNK_SIZE, "chunk too large", raw.size());
  if (raw.size() < 64) return nullptr;
  size_t bound = LZ4_compressBound(raw.size());
  auto out = kj::heapArray<kj::byte>(bound);
  int n = LZ4_compress_default(reinterpret_cast<const char*>(raw.begin()),
                               reinterpret_cast<char*>(out.begin()), raw.size(), bound);
  if (n <= 0 || static_cast<size_t>(n) > raw.size() - raw.size() / 8) return nullptr;
  auto result = kj::heapArray<kj::byte>(n);
  memcpy(result.begin(), out.begin(), n);
  return kj::mv(result);
}

kj::Array<kj::byte> decompressChunk(kj::ArrayPtr<const kj::byte> block, uint32_t rawSize) {
  KJ_REQUIRE(rawSize > 0 && rawSize <= CHUNK_SIZE, "bad chunk size", rawSize);
  auto out = kj::heapArray<kj::byte>(rawSize);
  int n = LZ4_decompress_safe(reinterpret_cast<const char*>(block.begin()),
                              reinterpret_cast<char*>(out.begin()), block.size(), rawSize);
  KJ_REQUIRE(n == static_cast<int>(rawSize), "corrupt LZ4 chunk", n, rawSize);
  return out;
}

}  // namespace squall
