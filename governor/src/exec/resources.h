// What a governor offers tasks besides their turn: named resource pools,
// and the bookkeeping that hands each starting task the items it asked
// for without ever over-committing (docs/resources.md).
//
// Two kinds of pool:
//   indexed  items with ids (cpus, gpus, any custom: --resource fpga=[a,b]);
//            a task gets items and learns their ids. A request below one
//            item takes a share of one (gpus=0.5: two such tasks on one
//            GPU); a request of one or more must be whole items.
//   sum      an amount (mem, any custom: --resource scratch=sum(200G)); a
//            task takes part of it.
// Amounts are fixed-point: RESOURCE_UNIT units are one item, or one of a
// sum pool's units (a byte of mem). `all` takes the whole pool.
//
// Detected by default (detectResources): memory (MemTotal of
// /proc/meminfo) as `mem`; NVIDIA GPUs as `gpus` (CUDA_VISIBLE_DEVICES when
// set, else /proc/driver/nvidia/gpus); AMD GPUs as `amd_gpus`
// (ROCR_VISIBLE_DEVICES). cpus come from --cpus (ids 0..N-1). Loop thread
// only; no I/O but detection.
#pragma once

#include <cstdint>
#include <functional>
#include <squall/proto/resource-amounts.h>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace squall {

struct ResourcePool {
  std::string name;
  bool indexed = true;
  std::vector<std::string> ids;  // indexed
  uint64_t total = 0;            // sum: units
  uint64_t capacity() const { return indexed ? ids.size() * RESOURCE_UNIT : total; }
};

// A --resource flag: NAME=[ID,ID,...] (indexed, those ids), NAME=N
// (indexed, ids 0..N-1) or NAME=sum(AMOUNT) (AMOUNT as parseAmount). Throws
// std::invalid_argument naming what is wrong.
ResourcePool parseResourcePool(const std::string& flag);

// The governor's cpus as a pool: ids 0..n-1.
ResourcePool cpusPool(uint32_t n);

// What a system offers. `procRoot` stands for /proc; `getenv` for the
// process's environment (tests give both).
std::vector<ResourcePool> detectResources(const std::string& procRoot,
                                          const std::function<const char*(const char*)>& getenv);

// One need of a task: `units` of pool `name`, or all of it.
struct ResourceNeed {
  std::string name;
  uint64_t units = 0;
  bool all = false;
};

// What a task holds: per need, its items and their shares (indexed), or
// its amount (sum).
struct ResourceGrant {
  struct Part {
    size_t pool;
    std::vector<std::pair<size_t, uint64_t>> items;  // item index, units
    uint64_t units = 0;                               // sum pools
  };
  std::vector<Part> parts;
};

class ResourceAllocator {
 public:
  explicit ResourceAllocator(std::vector<ResourcePool> pools);

  const std::vector<ResourcePool>& pools() const { return all; }
  // Why `needs` can never be met here (a pool it lacks, more than there is,
  // a fraction of more than one item), or nullopt.
  std::optional<std::string> impossible(const std::vector<ResourceNeed>& needs) const;
  // Takes what `needs` asks for if it is free now (all of it or nothing).
  std::optional<ResourceGrant> take(const std::vector<ResourceNeed>& needs);
  void give(const ResourceGrant& grant);
  // Units of pool `name` free now (0 for a pool it lacks).
  uint64_t freeUnits(const std::string& name) const;
  // The variables a task holding `grant` runs with: SQUALL_RESOURCE_<NAME>
  // (ids, comma-separated) for each indexed pool it holds,
  // CUDA_VISIBLE_DEVICES for gpus, ROCR_VISIBLE_DEVICES for amd_gpus,
  // OMP_NUM_THREADS for its cpus (at least 1).
  std::vector<std::string> environment(const ResourceGrant& grant) const;

 private:
  std::vector<ResourcePool> all;
  // Per pool: free units of each item (indexed) or of the pool (sum).
  std::vector<std::vector<uint64_t>> free;
  std::optional<size_t> find(const std::string& name) const;
};

}  // namespace squall
