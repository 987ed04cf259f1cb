// Resources beyond cpus on the server's side (docs/resources.md): what a
// task asks for, what a governor's pools hold and have handed out, and
// whether one fits the other — ever (checked at submit) or now (placement).
// The governor allocates the items themselves and never over-commits; the
// server only places where the amounts fit. Loop thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace squall {

struct ResourceAsk {
  std::string name;
  uint64_t units = 0;  // RESOURCE_UNIT per item or unit
  bool all = false;
};

struct PoolState {
  bool indexed = true;
  uint64_t capacity = 0;
  uint64_t used = 0;
};
using Pools = std::map<std::string, PoolState>;

// The units `ask` takes of `pool` (all: the whole of it).
uint64_t unitsOf(const ResourceAsk& ask, const PoolState& pool);
// Why `asks` can never be met by `pools`, naming the resource, or nullopt.
std::optional<std::string> neverFits(const Pools& pools, const std::vector<ResourceAsk>& asks);
// Whether `asks` fit in what `pools` have not handed out.
bool fitsNow(const Pools& pools, const std::vector<ResourceAsk>& asks);
// Hands out (sign 1) or takes back (-1) what `asks` take of `pools`.
void account(Pools& pools, const std::vector<ResourceAsk>& asks, int sign);

}  // namespace squall
