// What a governor's object store holds on disk and in its memory tier, for
// tests that check what is left. The tier is a tmpfs in the governor's own
// mount namespace (seen here through /proc/PID/root while the governor
// runs) or /dev/shm/squall-store-PID (governor/src/store/memory-tier.h).
#pragma once

#include <squall/tools/local-cluster.h>

#include <filesystem>
#include <map>
#include <string>

namespace squall {

// Entries of governor `i`'s store, name → size (-1 for a directory); those
// in its memory tier named "memory/NAME". Warm files are not entries.
inline std::map<std::string, int64_t> storeEntries(LocalCluster& cluster, size_t i) {
  namespace fs = std::filesystem;
  std::map<std::string, int64_t> out;
  std::error_code ec;
  auto objects = fs::absolute(fs::path(cluster.workDir()) / ("governor-" + std::to_string(i)) / "objects", ec);
  auto list = [&](const fs::path& dir, const std::string& prefix) {
    std::error_code error;
    for (auto& entry : fs::directory_iterator(dir, error)) {
      auto name = entry.path().filename().string();
      if (prefix.empty() && name == "memory") continue;
      // Removed objects' files kept warm for new ones (governor/src/store/
      // warm-files.h): memory the tier holds, no object.
      if (name.rfind(".warm-", 0) == 0) continue;
      std::error_code sizeError;
      int64_t size = entry.is_directory(sizeError) ? -1 : static_cast<int64_t>(entry.file_size(sizeError));
      out[prefix + name] = sizeError ? 0 : size;
    }
  };
  list(objects, "");
  pid_t pid = cluster.governor(i).pid();
  auto root = fs::path("/proc") / std::to_string(pid) / "root";
  list(root / objects.relative_path() / "memory", "memory/");
  list(fs::path("/dev/shm") / ("squall-store-" + std::to_string(pid)), "memory/");
  return out;
}

}  // namespace squall
