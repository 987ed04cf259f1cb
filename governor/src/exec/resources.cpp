#include "resources.h"

#include <algorithm>
#include <cctype>
#include <dirent.h>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace squall {

namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> splitList(const std::string& s, char by) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, by)) parts.push_back(trim(part));
  if (!s.empty() && s.back() == by) parts.push_back("");
  return parts;
}

std::vector<std::string> countedIds(uint64_t n) {
  std::vector<std::string> ids;
  for (uint64_t i = 0; i < n; i++) ids.push_back(std::to_string(i));
  return ids;
}

// A device list as CUDA and ROCm read it: ids up to the first invalid one.
std::vector<std::string> visibleDevices(const char* value) {
  std::vector<std::string> ids;
  if (value == nullptr) return ids;
  for (auto& id : splitList(value, ',')) {
    if (id.empty() || id == "-1" || id == "NoDevFiles") break;
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

ResourcePool cpusPool(uint32_t n) {
  ResourcePool pool;
  pool.name = "cpus";
  pool.ids = countedIds(n);
  return pool;
}

ResourcePool parseResourcePool(const std::string& flag) {
  auto eq = flag.find('=');
  if (eq == std::string::npos) {
    throw std::invalid_argument("--resource '" + flag + "' is not NAME=[ID,...], NAME=COUNT or NAME=sum(AMOUNT)");
  }
  ResourcePool pool;
  pool.name = trim(flag.substr(0, eq));
  std::string value = trim(flag.substr(eq + 1));
  if (!isResourceName(pool.name)) {
    throw std::invalid_argument("--resource '" + flag + "': " + RESOURCE_NAME_RULE);
  }
  if (pool.name == "cpus") throw std::invalid_argument("--resource cpus: cpus are given with --cpus");
  if (value.size() >= 2 && value.front() == '[' && value.back() == ']') {
    pool.ids = splitList(value.substr(1, value.size() - 2), ',');
    std::set<std::string> seen;
    for (auto& id : pool.ids) {
      if (id.empty() || id.find_first_of(" \t=") != std::string::npos) {
        throw std::invalid_argument("--resource '" + flag + "': an id is empty or has a space or '='");
      }
      if (!seen.insert(id).second) throw std::invalid_argument("--resource '" + flag + "': id " + id + " twice");
    }
    if (pool.ids.empty()) throw std::invalid_argument("--resource '" + flag + "' lists no ids");
    return pool;
  }
  if (value.size() > 5 && value.compare(0, 4, "sum(") == 0 && value.back() == ')') {
    pool.indexed = false;
    try {
      pool.total = parseAmount(trim(value.substr(4, value.size() - 5)));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--resource '" + flag + "': " + e.what());
    }
    if (pool.total == 0) throw std::invalid_argument("--resource '" + flag + "' is empty");
    return pool;
  }
  if (!value.empty() && value.size() <= 6 &&
      std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
    auto n = std::stoull(value);
    if (n == 0) throw std::invalid_argument("--resource '" + flag + "' has no items");
    pool.ids = countedIds(n);
    return pool;
  }
  throw std::invalid_argument("--resource '" + flag +
                              "': the value is not [ID,...], a count of items or sum(AMOUNT)");
}

std::vector<ResourcePool> detectResources(const std::string& procRoot,
                                          const std::function<const char*(const char*)>& getenv) {
  std::vector<ResourcePool> found;
  {
    std::ifstream meminfo(procRoot + "/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    std::string line;
    while (std::getline(meminfo, line)) {
      std::istringstream fields(line);
      if (fields >> key >> kb && key == "MemTotal:" && kb > 0) {
        ResourcePool mem;
        mem.name = "mem";
        mem.indexed = false;
        mem.total = kb * 1024 * RESOURCE_UNIT;
        found.push_back(mem);
        break;
      }
    }
  }
  ResourcePool gpus;
  gpus.name = "gpus";
  if (const char* visible = getenv("CUDA_VISIBLE_DEVICES")) {
    // What the job was given, not every GPU of the machine.
    gpus.ids = visibleDevices(visible);
  } else if (DIR* dir = opendir((procRoot + "/driver/nvidia/gpus").c_str())) {
    uint64_t n = 0;
    while (auto* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') n++;
    }
    closedir(dir);
    gpus.ids = countedIds(n);
  }
  if (!gpus.ids.empty()) found.push_back(gpus);
  ResourcePool amd;
  amd.name = "amd_gpus";
  amd.ids = visibleDevices(getenv("ROCR_VISIBLE_DEVICES"));
  if (!amd.ids.empty()) found.push_back(amd);
  return found;
}

// ------------------------------------------------------------ the allocator

ResourceAllocator::ResourceAllocator(std::vector<ResourcePool> pools) : all(std::move(pools)) {
  for (auto& pool : all) {
    if (pool.indexed) {
      free.emplace_back(pool.ids.size(), RESOURCE_UNIT);
    } else {
      free.emplace_back(1, pool.total);
    }
  }
}

std::optional<size_t> ResourceAllocator::find(const std::string& name) const {
  for (size_t i = 0; i < all.size(); i++) {
    if (all[i].name == name) return i;
  }
  return std::nullopt;
}

uint64_t ResourceAllocator::freeUnits(const std::string& name) const {
  auto at = find(name);
  if (!at) return 0;
  uint64_t sum = 0;
  for (auto units : free[*at]) sum += units;
  return sum;
}

std::optional<std::string> ResourceAllocator::impossible(const std::vector<ResourceNeed>& needs) const {
  for (auto& need : needs) {
    auto at = find(need.name);
    if (!at) return "it has no " + need.name;
    auto& pool = all[*at];
    if (need.all) continue;
    if (need.units > pool.capacity()) {
      return "it has " + formatAmount(pool.capacity()) + " " + need.name + ", not " + formatAmount(need.units);
    }
    if (pool.indexed && need.units > RESOURCE_UNIT && need.units % RESOURCE_UNIT != 0) {
      return formatAmount(need.units) + " " + need.name + " is more than one item but not whole ones";
    }
  }
  return std::nullopt;
}

std::optional<ResourceGrant> ResourceAllocator::take(const std::vector<ResourceNeed>& needs) {
  ResourceGrant grant;
  auto fail = [&]() -> std::optional<ResourceGrant> {
    give(grant);
    return std::nullopt;
  };
  for (auto& need : needs) {
    auto at = find(need.name);
    if (!at) return fail();
    auto& pool = all[*at];
    auto& units = free[*at];
    ResourceGrant::Part part;
    part.pool = *at;
    if (!pool.indexed) {
      uint64_t wanted = need.all ? pool.total : need.units;
      if (units[0] < wanted || (need.all && units[0] != pool.total)) return fail();
      units[0] -= wanted;
      part.units = wanted;
    } else if (need.all) {
      for (auto u : units) {
        if (u != RESOURCE_UNIT) return fail();
      }
      for (size_t i = 0; i < units.size(); i++) {
        units[i] = 0;
        part.items.emplace_back(i, RESOURCE_UNIT);
      }
    } else if (need.units == 0) {
      continue;
    } else if (need.units < RESOURCE_UNIT) {
      // A share of one item: the fullest one it fits in, so that whole
      // items stay free for whole requests.
      std::optional<size_t> best;
      for (size_t i = 0; i < units.size(); i++) {
        if (units[i] >= need.units && (!best || units[i] < units[*best])) best = i;
      }
      if (!best) return fail();
      units[*best] -= need.units;
      part.items.emplace_back(*best, need.units);
    } else {
      uint64_t whole = need.units / RESOURCE_UNIT;
      std::vector<size_t> chosen;
      for (size_t i = 0; i < units.size() && chosen.size() < whole; i++) {
        if (units[i] == RESOURCE_UNIT) chosen.push_back(i);
      }
      if (chosen.size() < whole) return fail();
      for (auto i : chosen) {
        units[i] = 0;
        part.items.emplace_back(i, RESOURCE_UNIT);
      }
    }
    grant.parts.push_back(std::move(part));
  }
  return grant;
}

void ResourceAllocator::give(const ResourceGrant& grant) {
  for (auto& part : grant.parts) {
    auto& units = free[part.pool];
    if (!all[part.pool].indexed) {
      units[0] += part.units;
      continue;
    }
    for (auto& [item, share] : part.items) units[item] += share;
  }
}

std::vector<std::string> ResourceAllocator::environment(const ResourceGrant& grant) const {
  std::vector<std::string> vars;
  std::set<std::string> granted;
  uint64_t cpuUnits = 0;
  for (auto& part : grant.parts) {
    auto& pool = all[part.pool];
    granted.insert(pool.name);
    if (!pool.indexed) continue;
    std::string ids;
    for (auto& [item, share] : part.items) ids += (ids.empty() ? "" : ",") + pool.ids[item];
    vars.push_back("SQUALL_RESOURCE_" + upper(pool.name) + "=" + ids);
    if (pool.name == "gpus") vars.push_back("CUDA_VISIBLE_DEVICES=" + ids);
    if (pool.name == "amd_gpus") vars.push_back("ROCR_VISIBLE_DEVICES=" + ids);
    if (pool.name == "cpus") {
      for (auto& [item, share] : part.items) cpuUnits += share;
    }
  }
  // A task that asked for no GPUs of a governor that has some sees none,
  // rather than all of them.
  for (auto& pool : all) {
    if (granted.count(pool.name)) continue;
    if (pool.name == "gpus") vars.push_back("CUDA_VISIBLE_DEVICES=");
    if (pool.name == "amd_gpus") vars.push_back("ROCR_VISIBLE_DEVICES=");
  }
  uint64_t threads = std::max<uint64_t>(1, (cpuUnits + RESOURCE_UNIT - 1) / RESOURCE_UNIT);
  vars.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
  return vars;
}

}  // namespace squall
