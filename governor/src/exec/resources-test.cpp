#include "resources.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <map>
#include <random>

namespace squall {
namespace {

namespace fs = std::filesystem;

uint64_t units(double items) { return static_cast<uint64_t>(items * RESOURCE_UNIT + 0.5); }

TEST(ResourcesTest, PoolsAreParsedFromTheirFlags) {
  auto gpus = parseResourcePool("gpus=[0, 1,7]");
  EXPECT_EQ(gpus.name, "gpus");
  EXPECT_TRUE(gpus.indexed);
  EXPECT_EQ(gpus.ids, (std::vector<std::string>{"0", "1", "7"}));
  EXPECT_EQ(gpus.capacity(), 3 * RESOURCE_UNIT);
  auto fpga = parseResourcePool("fpga=2");
  EXPECT_EQ(fpga.ids, (std::vector<std::string>{"0", "1"}));
  auto scratch = parseResourcePool("scratch=sum(200G)");
  EXPECT_FALSE(scratch.indexed);
  EXPECT_EQ(scratch.total, 200ull * 1024 * 1024 * 1024 * RESOURCE_UNIT);
  EXPECT_EQ(parseResourcePool("licences=sum(2.5)").total, units(2.5));
}

TEST(ResourcesTest, BadFlagsAreRefusedSayingWhy) {
  auto message = [](const std::string& flag) {
    try {
      parseResourcePool(flag);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(message("gpus").find("is not NAME=[ID,...]"), std::string::npos);
  EXPECT_NE(message("GPUs=2").find(RESOURCE_NAME_RULE), std::string::npos);
  EXPECT_NE(message("cpus=4").find("--cpus"), std::string::npos);
  EXPECT_NE(message("gpus=[]").find("lists no ids"), std::string::npos);
  EXPECT_NE(message("gpus=[a,,b]").find("an id is empty"), std::string::npos);
  EXPECT_NE(message("gpus=[0,0]").find("id 0 twice"), std::string::npos);
  EXPECT_NE(message("gpus=0").find("no items"), std::string::npos);
  EXPECT_NE(message("mem=sum(lots)").find("is not a number"), std::string::npos);
  EXPECT_NE(message("mem=sum(0)").find("empty"), std::string::npos);
  EXPECT_NE(message("mem=plenty").find("not [ID,...]"), std::string::npos);
}

class FakeProc {
 public:
  FakeProc() : root(fs::temp_directory_path() / ("squall-proc-" + std::to_string(getpid()))) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  ~FakeProc() { fs::remove_all(root); }
  void write(const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text;
  }
  fs::path root;
};

std::vector<ResourcePool> detect(const FakeProc& proc, std::map<std::string, std::string> env) {
  return detectResources(proc.root.string(), [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

const ResourcePool* pool(const std::vector<ResourcePool>& pools, const std::string& name) {
  for (auto& p : pools) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

TEST(ResourcesTest, DetectionReadsMemoryAndGpusFromProcAndTheEnvironment) {
  FakeProc proc;
  proc.write("meminfo", "MemFree:         1000 kB\nMemTotal:       16384 kB\n");
  proc.write("driver/nvidia/gpus/0000:3b:00.0/information", "Model: A100\n");
  proc.write("driver/nvidia/gpus/0000:5e:00.0/information", "Model: A100\n");
  auto found = detect(proc, {});
  ASSERT_NE(pool(found, "mem"), nullptr);
  EXPECT_EQ(pool(found, "mem")->total, 16384ull * 1024 * RESOURCE_UNIT);
  ASSERT_NE(pool(found, "gpus"), nullptr);
  EXPECT_EQ(pool(found, "gpus")->ids, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(pool(found, "amd_gpus"), nullptr);

  // The job's own GPUs, not the machine's.
  found = detect(proc, {{"CUDA_VISIBLE_DEVICES", "1"}, {"ROCR_VISIBLE_DEVICES", "0,2"}});
  EXPECT_EQ(pool(found, "gpus")->ids, (std::vector<std::string>{"1"}));
  EXPECT_EQ(pool(found, "amd_gpus")->ids, (std::vector<std::string>{"0", "2"}));
  // Set and empty, or invalid first: none.
  EXPECT_EQ(pool(detect(proc, {{"CUDA_VISIBLE_DEVICES", ""}}), "gpus"), nullptr);
  EXPECT_EQ(pool(detect(proc, {{"CUDA_VISIBLE_DEVICES", "-1,0"}}), "gpus"), nullptr);
  // No /proc entries at all: nothing but what is there.
  FakeProc empty;
  EXPECT_TRUE(detect(empty, {}).empty());
}

TEST(ResourcesTest, FractionsShareAnItemAndWholeRequestsTakeFreeItems) {
  ResourceAllocator allocator({parseResourcePool("gpus=[a,b]")});
  auto half1 = allocator.take({{"gpus", units(0.5)}});
  auto half2 = allocator.take({{"gpus", units(0.5)}});
  ASSERT_TRUE(half1 && half2);
  // Both on one GPU: the other stays whole.
  EXPECT_EQ(half1->parts[0].items[0].first, half2->parts[0].items[0].first);
  auto whole = allocator.take({{"gpus", units(1)}});
  ASSERT_TRUE(whole);
  EXPECT_FALSE(allocator.take({{"gpus", units(0.25)}}));
  EXPECT_EQ(allocator.freeUnits("gpus"), 0u);
  allocator.give(*half1);
  EXPECT_FALSE(allocator.take({{"gpus", units(1)}}));
  EXPECT_TRUE(allocator.take({{"gpus", units(0.5)}}));
}

TEST(ResourcesTest, AllTakesTheWholePoolOnlyWhenNothingOfItIsUsed) {
  ResourceAllocator allocator({parseResourcePool("gpus=2"), parseResourcePool("mem=sum(8G)")});
  auto some = allocator.take({{"mem", parseAmount("1G")}});
  ASSERT_TRUE(some);
  EXPECT_FALSE(allocator.take({{"mem", 0, true}}));
  allocator.give(*some);
  auto everything = allocator.take({{"mem", 0, true}, {"gpus", 0, true}});
  ASSERT_TRUE(everything);
  EXPECT_EQ(allocator.freeUnits("mem"), 0u);
  EXPECT_EQ(allocator.freeUnits("gpus"), 0u);
  // All or nothing: a request that fails on its second need holds nothing.
  allocator.give(*everything);
  EXPECT_FALSE(allocator.take({{"gpus", units(1)}, {"mem", parseAmount("9G")}}));
  EXPECT_EQ(allocator.freeUnits("gpus"), 2 * RESOURCE_UNIT);
}

TEST(ResourcesTest, ImpossibleRequestsNameTheResource) {
  ResourceAllocator allocator({parseResourcePool("gpus=2")});
  EXPECT_EQ(allocator.impossible({{"gpus", units(2)}}), std::nullopt);
  EXPECT_EQ(allocator.impossible({{"fpga", units(1)}}), "it has no fpga");
  EXPECT_EQ(allocator.impossible({{"gpus", units(3)}}), "it has 2 gpus, not 3");
  EXPECT_EQ(allocator.impossible({{"gpus", units(1.5)}}), "1.5 gpus is more than one item but not whole ones");
}

TEST(ResourcesTest, ATaskLearnsItsIdsFromItsEnvironment) {
  ResourceAllocator allocator({cpusPool(4), parseResourcePool("gpus=[4,5]"),
                               parseResourcePool("amd_gpus=[0]")});
  auto grant = allocator.take({{"cpus", units(2)}, {"gpus", units(0.5)}});
  ASSERT_TRUE(grant);
  auto env = allocator.environment(*grant);
  std::sort(env.begin(), env.end());
  EXPECT_EQ(env, (std::vector<std::string>{"CUDA_VISIBLE_DEVICES=4", "OMP_NUM_THREADS=2",
                                           "ROCR_VISIBLE_DEVICES=", "SQUALL_RESOURCE_CPUS=0,1",
                                           "SQUALL_RESOURCE_GPUS=4"}));
}

// 1,000 random requests taken and given back in random order: free amounts
// never go below zero or above the pool, and what is held always adds up.
TEST(ResourcesTest, NoOverCommitUnderManyMixedRequests) {
  std::vector<ResourcePool> pools{cpusPool(8), parseResourcePool("gpus=3"),
                                  parseResourcePool("mem=sum(64G)")};
  ResourceAllocator allocator(pools);
  std::mt19937 random(7);
  std::vector<ResourceGrant> held;
  std::map<std::string, uint64_t> heldUnits;
  auto add = [&](const ResourceGrant& g, int sign) {
    for (auto& part : g.parts) {
      uint64_t sum = part.units;
      for (auto& [item, share] : part.items) sum += share;
      heldUnits[pools[part.pool].name] += sign * sum;
    }
  };
  int granted = 0;
  for (int i = 0; i < 1000; i++) {
    if (!held.empty() && random() % 3 == 0) {
      size_t k = random() % held.size();
      add(held[k], -1);
      allocator.give(held[k]);
      held.erase(held.begin() + k);
    }
    std::vector<ResourceNeed> needs{{"cpus", (1 + random() % 3) * RESOURCE_UNIT}};
    switch (random() % 4) {
      case 0: needs.push_back({"gpus", units(0.25) * (1 + random() % 3)}); break;
      case 1: needs.push_back({"gpus", RESOURCE_UNIT * (1 + random() % 2)}); break;
      case 2: needs.push_back({"mem", parseAmount(std::to_string(1 + random() % 20) + "G")}); break;
      default: break;
    }
    if (auto grant = allocator.take(needs)) {
      granted++;
      add(*grant, 1);
      held.push_back(*grant);
    }
    for (auto& p : pools) {
      ASSERT_LE(heldUnits[p.name], p.capacity()) << p.name << " over-committed at request " << i;
      ASSERT_EQ(allocator.freeUnits(p.name) + heldUnits[p.name], p.capacity()) << p.name;
    }
  }
  EXPECT_GT(granted, 300);
  for (auto& g : held) allocator.give(g);
  for (auto& p : pools) EXPECT_EQ(allocator.freeUnits(p.name), p.capacity()) << p.name;
}

}  // namespace
}  // namespace squall
