#include "resource-fit.h"

#include <squall/proto/resource-amounts.h>

namespace squall {

uint64_t unitsOf(const ResourceAsk& ask, const PoolState& pool) { return ask.all ? pool.capacity : ask.units; }

std::optional<std::string> neverFits(const Pools& pools, const std::vector<ResourceAsk>& asks) {
  for (auto& ask : asks) {
    auto it = pools.find(ask.name);
    if (it == pools.end()) return "no " + ask.name;
    auto& pool = it->second;
    if (unitsOf(ask, pool) > pool.capacity) {
      return formatAmount(pool.capacity) + " " + ask.name + ", not " + formatAmount(ask.units);
    }
    if (pool.indexed && !ask.all && ask.units > RESOURCE_UNIT && ask.units % RESOURCE_UNIT != 0) {
      return "its " + ask.name + " in whole items only: " + formatAmount(ask.units) +
             " is more than one and not whole";
    }
  }
  return std::nullopt;
}

bool fitsNow(const Pools& pools, const std::vector<ResourceAsk>& asks) {
  for (auto& ask : asks) {
    auto it = pools.find(ask.name);
    if (it == pools.end()) return false;
    auto& pool = it->second;
    if (pool.used + unitsOf(ask, pool) > pool.capacity) return false;
  }
  return true;
}

void account(Pools& pools, const std::vector<ResourceAsk>& asks, int sign) {
  for (auto& ask : asks) {
    auto it = pools.find(ask.name);
    if (it == pools.end()) continue;
    auto units = unitsOf(ask, it->second);
    it->second.used = sign > 0 ? it->second.used + units : it->second.used - std::min(units, it->second.used);
  }
}

}  // namespace squall
