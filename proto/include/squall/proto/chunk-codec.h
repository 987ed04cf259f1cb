// The LZ4 chunk codec used on the data plane. Pure functions; any thread.
#pragma once

#include <cstdint>
#include <kj/array.h>
#include <kj/common.h>

namespace squall {

// Chunks on the wire are at most this many raw bytes.
constexpr size_t CHUNK_SIZE = 1 << 20;

// LZ4-compresses `raw` when that saves at least an eighth of it; otherwise
// returns nullptr and the caller sends the raw bytes (rawSize 0 on the wire).
kj::Maybe<kj::Array<kj::byte>> compressChunk(kj::ArrayPtr<const kj::byte> raw);

// Decodes one LZ4 block that must expand to exactly `rawSize` bytes (at most
// CHUNK_SIZE). Throws FAILED on corrupt input.
kj::Array<kj::byte> decompressChunk(kj::ArrayPtr<const kj::byte> block, uint32_t rawSize);

}  // namespace squall
