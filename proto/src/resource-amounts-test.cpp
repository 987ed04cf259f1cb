#include <squall/proto/resource-amounts.h>

#include <gtest/gtest.h>
#include <stdexcept>

namespace squall {
namespace {

uint64_t units(double items) { return static_cast<uint64_t>(items * RESOURCE_UNIT + 0.5); }

TEST(ResourceAmountsTest, NamesAreLowerCaseWords) {
  for (auto good : {"gpus", "mem", "amd_gpus", "fpga2"}) EXPECT_TRUE(isResourceName(good)) << good;
  for (auto bad : {"", "GPUs", "2gpus", "gpus/amd", "a b", "_x"}) EXPECT_FALSE(isResourceName(bad)) << bad;
}

TEST(ResourceAmountsTest, AmountsAreFixedPointWithBinarySuffixes) {
  EXPECT_EQ(parseAmount("1"), RESOURCE_UNIT);
  EXPECT_EQ(parseAmount("0.25"), RESOURCE_UNIT / 4);
  EXPECT_EQ(parseAmount("0.0001"), 1u);
  EXPECT_EQ(parseAmount("2G"), 2ull * 1024 * 1024 * 1024 * RESOURCE_UNIT);
  EXPECT_EQ(parseAmount("1.5k"), 1536u * RESOURCE_UNIT);
  for (auto bad : {"", "-1", "0.00001", "1.", ".5", "1e3", "2GB", "99999999999999999"}) {
    EXPECT_THROW(parseAmount(bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(formatAmount(units(0.5)), "0.5");
  EXPECT_EQ(formatAmount(units(3)), "3");
  EXPECT_EQ(formatAmount(1), "0.0001");
}

}  // namespace
}  // namespace squall
