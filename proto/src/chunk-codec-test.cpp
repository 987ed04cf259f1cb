#include <squall/proto/chunk-codec.h>

#include <gtest/gtest.h>
#include <kj/exception.h>
#include <random>

namespace squall {
namespace {

TEST(ChunkCodecTest, CompressibleChunkRoundTrips) {
  auto raw = kj::heapArray<kj::byte>(100000);
  for (size_t i = 0; i < raw.size(); i++) raw[i] = "squall "[i % 7];
  auto maybeBlock = compressChunk(raw);
  KJ_IF_MAYBE(block, maybeBlock) {
    EXPECT_LT(block->size(), raw.size() / 2);
    auto back = decompressChunk(*block, raw.size());
    ASSERT_EQ(back.size(), raw.size());
    EXPECT_EQ(0, memcmp(back.begin(), raw.begin(), raw.size()));
  } else {
    FAIL() << "repetitive text should compress";
  }
}

TEST(ChunkCodecTest, IncompressibleChunkIsSentRaw) {
  std::mt19937_64 rng(42);
  auto raw = kj::heapArray<kj::byte>(65536);
  for (auto& b : raw) b = static_cast<kj::byte>(rng());
  EXPECT_TRUE(compressChunk(raw) == nullptr);
}

TEST(ChunkCodecTest, CorruptBlockIsRejected) {
  auto raw = kj::heapArray<kj::byte>(4096);
  memset(raw.begin(), 'a', raw.size());
  auto maybeBlock = compressChunk(raw);
  KJ_IF_MAYBE(block, maybeBlock) {
    EXPECT_ANY_THROW(decompressChunk(*block, raw.size() + 1));
    auto truncated = kj::heapArray<kj::byte>(block->slice(0, block->size() / 2));
    EXPECT_ANY_THROW(decompressChunk(truncated, raw.size()));
  } else {
    FAIL();
  }
  EXPECT_ANY_THROW(decompressChunk(raw, 0));
}

}  // namespace
}  // namespace squall
