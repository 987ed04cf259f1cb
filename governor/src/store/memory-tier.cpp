// The memory tier's directory: a tmpfs in the governor's own mount
// namespace, or a directory in /dev/shm.
#include "memory-tier.h"

#include "dir-tree.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <kj/debug.h>
#include <kj/vector.h>
#include <squall/proto/errors.h>
#include <squall/proto/make-dirs.h>
#include <squall/proto/resource-amounts.h>
#include <stdexcept>
#include <sstream>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

namespace squall {

namespace {
constexpr char SHM_PREFIX[] = "squall-store-";
}  // namespace

kj::Maybe<uint64_t> parseStoreMemory(kj::StringPtr text) {
  try {
    // Whole bytes of the amount, as a `mem` resource is written.
    return parseAmount(text.cStr()) / RESOURCE_UNIT;
  } catch (const std::invalid_argument&) {
    return nullptr;
  }
}

uint64_t defaultStoreMemory(kj::StringPtr procRoot) {
  std::ifstream meminfo(std::string(procRoot.cStr()) + "/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kb = 0;
    if (fields >> key >> kb && key == "MemAvailable:") return kb * 1024 / 10 * 3;
  }
  return 0;
}

MemoryTierDir::MemoryTierDir(kj::StringPtr storeDir, bool ownNamespace, kj::StringPtr shmRoot,
                             spdlog::logger& logger)
    : logger(logger) {
  if (ownNamespace) {
    auto at = kj::str(storeDir, "/memory");
    if (::mkdir(at.cStr(), 0700) < 0 && errno != EEXIST) {
      SQUALL_FAIL("cannot make ", at, ": ", strerror(errno));
    }
    // Huge pages (where the kernel has them): on the VMs measured, a tmpfs
    // of 4 KiB pages was read through a mapping 8x slower than the page
    // cache, one of 2 MiB pages as fast (docs/decisions-ray.md).
    for (auto options : {"mode=0700,huge=within_size", "mode=0700"}) {
      if (::mount("squall-store", at.cStr(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, options) == 0) {
        dir = kj::mv(at);
        mounted = true;
        hugePages = kj::StringPtr(options).endsWith("within_size");
        return;
      }
    }
    int error = errno;
    ::rmdir(at.cStr());
    // Not /dev/shm then: the store view (a mount of the store) would not
    // show it to the governor's tasks.
    SQUALL_FAIL("mounting a tmpfs at ", at, " failed: ", strerror(error));
  }
  removeStale(shmRoot, logger);
  auto at = kj::str(shmRoot, "/", SHM_PREFIX, ::getpid());
  KJ_IF_MAYBE(left, freshDirectory(at)) {
    logger.warn("event=leftover-not-removed dir={} moved_to={} error=\"{}\"", at.cStr(), left->movedTo.cStr(),
                left->error.cStr());
  }
  dir = kj::mv(at);
}

MemoryTierDir::~MemoryTierDir() noexcept(false) {
  if (mounted) {
    if (::umount2(dir.cStr(), MNT_DETACH) < 0) {
      logger.warn("event=memory-tier-not-unmounted dir={} error=\"{}\"", dir.cStr(), strerror(errno));
      return;
    }
    ::rmdir(dir.cStr());
    return;
  }
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([this]() { removeTree(dir); })) {
    logger.warn("event=memory-tier-not-removed dir={} error=\"{}\"", dir.cStr(), e->getDescription().cStr());
  }
}

size_t MemoryTierDir::removeStale(kj::StringPtr shmRoot, spdlog::logger& logger) {
  DIR* listing = ::opendir(shmRoot.cStr());
  if (listing == nullptr) return 0;
  kj::Vector<kj::String> stale;
  while (auto* entry = ::readdir(listing)) {
    kj::StringPtr name = entry->d_name;
    if (!name.startsWith(SHM_PREFIX)) continue;
    char* end = nullptr;
    long pid = strtol(name.cStr() + strlen(SHM_PREFIX), &end, 10);
    if (pid <= 0 || *end != '\0' || pid == ::getpid()) continue;
    auto path = kj::str(shmRoot, "/", name);
    struct stat st;
    if (::lstat(path.cStr(), &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    stale.add(kj::mv(path));
  }
  ::closedir(listing);
  for (auto& path : stale) {
    KJ_IF_MAYBE(e, kj::runCatchingExceptions([&]() { removeTree(path); })) {
      logger.warn("event=stale-memory-tier-not-removed dir={} error=\"{}\"", path.cStr(), e->getDescription().cStr());
      continue;
    }
    logger.info("event=stale-memory-tier-removed dir={}", path.cStr());
  }
  return stale.size();
}

}  // namespace squall
