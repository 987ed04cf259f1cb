#include "process-sets.h"

#include "child-process.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sstream>
#include <string>
#include <unistd.h>

namespace squall {

namespace {

// A whole small file (/proc, cgroupfs), or null when it cannot be read.
kj::Maybe<kj::String> readSmallFile(kj::StringPtr path, size_t max = 1 << 20) {
  int fd = ::open(path.cStr(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  kj::AutoCloseFd owned(fd);
  kj::Vector<char> text;
  char buffer[4096];
  while (text.size() < max) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return nullptr;
    if (n == 0) break;
    text.addAll(buffer, buffer + n);
  }
  text.add('\0');
  return kj::String(text.releaseAsArray());
}

// Writes `text` to a cgroup file; 0 or an errno.
int writeCgroupFile(kj::StringPtr path, kj::StringPtr text) {
  int fd = ::open(path.cStr(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  kj::AutoCloseFd owned(fd);
  if (::write(fd, text.cStr(), text.size()) < 0) return errno;
  return 0;
}

// Every child of this process (of each of its threads: an orphan is given
// to one of them).
kj::Vector<int> childrenOfSelf() {
  kj::Vector<int> pids;
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return pids;
  KJ_DEFER(::closedir(dir));
  while (auto* entry = ::readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    KJ_IF_MAYBE(text, readSmallFile(kj::str("/proc/self/task/", entry->d_name, "/children"))) {
      const char* p = text->cStr();
      while (*p != '\0') {
        char* end;
        long pid = strtol(p, &end, 10);
        if (end == p) break;
        if (pid > 0) pids.add(static_cast<int>(pid));
        p = end;
      }
    }
  }
  return pids;
}

// The state letter of /proc/PID/stat ('Z': a zombie), or 0 when gone.
char processState(int pid) {
  KJ_IF_MAYBE(text, readSmallFile(kj::str("/proc/", pid, "/stat"), 4096)) {
    // "pid (comm) S ...": comm may hold anything, so from the last ')'.
    KJ_IF_MAYBE(close, text->findLast(')')) {
      if (*close + 2 < text->size()) return (*text)[*close + 2];
    }
  }
  return 0;
}

// The value of `name` in the environment `pid` was started with, if any.
kj::Maybe<kj::String> environmentValue(int pid, kj::StringPtr name) {
  KJ_IF_MAYBE(text, readSmallFile(kj::str("/proc/", pid, "/environ"))) {
    kj::Maybe<kj::String> found;
    size_t start = 0;
    for (size_t i = 0; i < text->size(); i++) {
      if ((*text)[i] != '\0') continue;
      kj::StringPtr entry(text->begin() + start, i - start);
      if (entry.startsWith(name) && entry.size() > name.size() && entry[name.size()] == '=') {
        found = kj::str(entry.slice(name.size() + 1));
      }
      start = i + 1;
    }
    return found;
  }
  return nullptr;
}

// The task cgroups (task-N) in `dir`.
kj::Vector<kj::String> taskCgroupsIn(kj::StringPtr dir) {
  kj::Vector<kj::String> found;
  if (DIR* entries = ::opendir(dir.cStr())) {
    KJ_DEFER(::closedir(entries));
    while (auto* entry = ::readdir(entries)) {
      if (strncmp(entry->d_name, "task-", 5) == 0) found.add(kj::str(dir, "/", entry->d_name));
    }
  }
  return found;
}

// Removes each of `cgroups`, killing what is in those that are not empty
// (cgroup.kill) and looking again every 10 ms, `rounds` times at most: no
// event says that a cgroup has emptied but its cgroup.events (poll). Those
// left, and how many were killed.
struct Removed {
  kj::Vector<kj::String> left;
  size_t killed = 0;
};
Removed removeCgroups(kj::Vector<kj::String> cgroups, int rounds) {
  Removed out;
  for (auto& dir : cgroups) {
    if (::rmdir(dir.cStr()) == 0) continue;
    if (writeCgroupFile(kj::str(dir, "/cgroup.kill"), "1") == 0) out.killed++;
    out.left.add(kj::mv(dir));
  }
  for (int round = 0; round < rounds && out.left.size() > 0; round++) {
    struct timespec pause = {0, 10 * 1000 * 1000};
    ::nanosleep(&pause, nullptr);
    kj::Vector<kj::String> busy;
    for (auto& dir : out.left) {
      if (::rmdir(dir.cStr()) < 0 && errno == EBUSY) busy.add(kj::mv(dir));
    }
    out.left = kj::mv(busy);
  }
  return out;
}

bool contains(const kj::Vector<int>& pids, int pid) {
  for (int p : pids) {
    if (p == pid) return true;
  }
  return false;
}

}  // namespace

ProcessSets::ProcessSets(UvBridge& bridge, kj::Timer& timer, spdlog::logger& logger, Options options)
    : bridge(bridge), timer(timer), logger(logger), options(options), description(kj::str()), base(nullptr),
      tasks(*this) {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) < 0) {
    logger.warn("event=subreaper-refused error=\"{}\"", strerror(errno));
  }
  if (options.cgroups) {
    findCgroup();
  } else {
    description = kj::str("mark (cgroups turned off)");
  }
  tasks.add(tick());
}

void ProcessSets::taskFailed(kj::Exception&& e) {
  logger.warn("event=process-sweep-failed error=\"{}\"", e.getDescription().cStr());
}

ProcessSets::~ProcessSets() noexcept(false) {
  if (base == nullptr) return;
  // Every task has ended by now; cgroups whose removal was still queued,
  // or that a kill left populated, go here.
  auto left = removeCgroups(taskCgroupsIn(base), 300).left;
  for (auto& dir : left) logger.warn("event=cgroup-not-removed dir={}", dir.cStr());
  if (::rmdir(base.cStr()) < 0 && errno != ENOENT) {
    logger.warn("event=cgroup-not-removed dir={} error=\"{}\"", base.cStr(), strerror(errno));
  }
}

void ProcessSets::findCgroup() {
  // The governor's own cgroup: "0::PATH" in /proc/self/cgroup (cgroup v2),
  // under the cgroup2 mount whose root PATH is in (/proc/self/mountinfo).
  std::string own;
  KJ_IF_MAYBE(text, readSmallFile(options.procSelfCgroup)) {
    std::istringstream lines(text->cStr());
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("0::", 0) == 0) own = line.substr(3);
    }
  }
  if (own.empty()) return disableCgroups("no cgroup v2 (unified) hierarchy");
  std::string dir;
  KJ_IF_MAYBE(text, readSmallFile(options.mountInfo)) {
    std::istringstream lines(text->cStr());
    for (std::string line; dir.empty() && std::getline(lines, line);) {
      // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
      auto dash = line.find(" - ");
      if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
      std::istringstream fields(line.substr(0, dash));
      std::string id, parent, device, root, mountPoint;
      if (!(fields >> id >> parent >> device >> root >> mountPoint)) continue;
      if (mountPoint.find('\\') != std::string::npos) continue;  // escaped names: not ours to guess
      if (root == "/") {
        dir = mountPoint + (own == "/" ? "" : own);
      } else if (own.rfind(root, 0) == 0 && (own.size() == root.size() || own[root.size()] == '/')) {
        dir = mountPoint + own.substr(root.size());
      }
    }
  }
  if (dir.empty()) return disableCgroups(kj::str("no cgroup2 mount holds its cgroup ", own.c_str()));
  auto candidate = kj::str(dir.c_str(), "/squall-governor-", getpid());
  if (::mkdir(candidate.cStr(), 0755) < 0 && errno != EEXIST) {
    return disableCgroups(kj::str("cannot make a cgroup in ", dir.c_str(), ": ", strerror(errno)));
  }
  // Moving a process needs write access to the cgroup.procs of both
  // cgroups and of their common ancestor (ours); cgroup.kill needs 5.14.
  const char* missing = nullptr;
  if (::access((dir + "/cgroup.procs").c_str(), W_OK) < 0) {
    missing = "its own cgroup's cgroup.procs is not writable";
  } else if (::access(kj::str(candidate, "/cgroup.procs").cStr(), W_OK) < 0) {
    missing = "the cgroup.procs of a cgroup it made is not writable";
  } else if (::access(kj::str(candidate, "/cgroup.kill").cStr(), W_OK) < 0) {
    missing = "no cgroup.kill (Linux before 5.14)";
  }
  if (missing != nullptr) {
    ::rmdir(candidate.cStr());
    return disableCgroups(kj::str(missing, " in ", dir.c_str()));
  }
  base = kj::mv(candidate);
  description = kj::str("cgroup ", base);
  removeStale(dir.c_str());
}

void ProcessSets::removeStale(kj::StringPtr dir) {
  // A governor killed with SIGKILL removes nothing: the next one started in
  // the same cgroup kills what its tasks left and removes their cgroups.
  DIR* entries = ::opendir(dir.cStr());
  if (entries == nullptr) return;
  KJ_DEFER(::closedir(entries));
  while (auto* entry = ::readdir(entries)) {
    kj::StringPtr name = entry->d_name;
    if (!name.startsWith("squall-governor-")) continue;
    char* end;
    long pid = strtol(name.cStr() + 16, &end, 10);
    if (*end != '\0' || pid <= 0 || pid == getpid()) continue;
    // Only where no process has the pid: a live one may be that governor
    // (whatever its program's name); a pid taken since merely delays this.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    auto stale = kj::str(dir, "/", name);
    // What is in its task cgroups is killed; they are removed once empty
    // (a bounded look; else by the next start).
    size_t killed = removeCgroups(taskCgroupsIn(stale), 50).killed;
    bool removed = ::rmdir(stale.cStr()) == 0;
    logger.info("event=stale-cgroup dir={} tasks_killed={} removed={}", stale.cStr(), killed, removed);
  }
}

void ProcessSets::disableCgroups(kj::StringPtr why) {
  base = nullptr;
  description = kj::str("mark (", why, ")");
}

kj::Own<ProcessSet> ProcessSets::open() {
  uint64_t number = nextSet++;
  open_.insert(number);
  kj::Maybe<kj::String> cgroup;
  if (base != nullptr) cgroup = kj::str(base, "/task-", number);
  return kj::heap<ProcessSet>(*this, number, kj::mv(cgroup));
}

void ProcessSets::ended(uint64_t set, kj::Maybe<kj::String> cgroup, kj::Maybe<kj::Promise<void>> moving) {
  open_.erase(set);
  KJ_IF_MAYBE(dir, cgroup) {
    // After the move (a move still queued is dropped): mostly the cgroup
    // is empty by now (a task that started nothing that outlives it).
    kj::Promise<void> moved = kj::READY_NOW;
    KJ_IF_MAYBE(m, moving) { moved = kj::mv(*m); }
    tasks.add(moved.then([this, dir = kj::str(*dir)]() mutable {
      return bridge.runOnPool<int>([dir = kj::str(dir)]() -> int {
        if (::rmdir(dir.cStr()) == 0 || errno == ENOENT) return 0;
        if (errno != EBUSY) return errno;
        int error = writeCgroupFile(kj::str(dir, "/cgroup.kill"), "1");
        return error == 0 ? EBUSY : error;
      }).then([this, dir = kj::mv(dir)](int result) mutable {
        if (result == EBUSY) {
          logger.info("event=task-leftovers-killed cgroup={}", dir.cStr());
          toRemove.add(kj::mv(dir));
          requestSweep();
        } else if (result != 0) {
          logger.warn("event=cgroup-not-removed dir={} error=\"{}\"", dir.cStr(), strerror(result));
        }
      });
    }));
  }
  requestSweep();
}

void ProcessSets::requestSweep() {
  if (sweepSoon) return;
  sweepSoon = true;
  // Soon, not now: the task's group was just killed; its members die and
  // hand their children over to us within moments.
  tasks.add(timer.afterDelay(20 * kj::MILLISECONDS).then([this]() {
    sweepSoon = false;
    sweep();
  }));
}

kj::Promise<void> ProcessSets::tick() {
  return timer.afterDelay(options.sweepInterval).then([this]() {
    sweep();
    return tick();
  });
}

void ProcessSets::sweep() {
  if (toRemove.size() > 0) {
    kj::Vector<kj::String> left;
    for (auto& dir : toRemove) {
      if (::rmdir(dir.cStr()) < 0 && errno == EBUSY) left.add(kj::mv(dir));
    }
    toRemove = kj::mv(left);
  }
  auto children = childrenOfSelf();
  if (children.size() == 0) return;
  auto own = ChildProcess::unreapedPids(bridge);
  auto prefix = kj::str(getpid(), ".");
  bool killed = false;
  for (int pid : children) {
    if (contains(own, pid)) continue;
    // Adopted: ours to reap, and to kill once its set has ended. It stays
    // our child until we reap it, so its pid cannot be another's meanwhile.
    char state = processState(pid);
    if (state == 'Z' || state == 'X') {
      int status;
      if (::waitpid(pid, &status, WNOHANG) == pid) logger.debug("event=adopted-reaped pid={}", pid);
      continue;
    }
    KJ_IF_MAYBE(mark, environmentValue(pid, MARK)) {
      if (!mark->startsWith(prefix)) continue;  // another governor's task (we run inside one)
      char* end;
      auto number = strtoull(mark->cStr() + prefix.size(), &end, 10);
      if (*end != '\0' || number == 0 || number >= nextSet || open_.count(number) > 0) continue;
      if (::kill(pid, SIGKILL) == 0) {
        logger.info("event=task-leftover-killed pid={} set={}", pid, mark->cStr());
        killed = true;
      }
    }
  }
  // Their zombies, and whatever they leave, on the next look.
  if (killed) requestSweep();
}

size_t ProcessSets::killAdoptedAtExit(spdlog::logger& logger, kj::Duration bound) {
  size_t count = 0;
  struct timespec start;
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    auto children = childrenOfSelf();
    if (children.size() == 0) break;
    for (int pid : children) {
      if (processState(pid) != 'Z' && ::kill(pid, SIGKILL) == 0) {
        logger.info("event=leftover-killed pid={}", pid);
        count++;
      }
    }
    for (int pid : children) ::waitpid(pid, nullptr, WNOHANG);
    struct timespec now;
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    auto elapsed = (now.tv_sec - start.tv_sec) * kj::SECONDS + (now.tv_nsec - start.tv_nsec) * kj::NANOSECONDS;
    if (elapsed >= bound) {
      logger.warn("event=leftovers-not-reaped count={}", childrenOfSelf().size());
      break;
    }
    // No event says that a process died or was handed to us: look again
    // in a moment, for at most `bound`.
    struct timespec pause = {0, 5 * 1000 * 1000};
    ::nanosleep(&pause, nullptr);
  }
  return count;
}

// ----------------------------------------------------------------- ProcessSet

ProcessSet::ProcessSet(ProcessSets& sets, uint64_t number, kj::Maybe<kj::String> cgroup)
    : sets(sets), number(number), entry(kj::str(ProcessSets::MARK, "=", getpid(), ".", number)),
      cgroup(kj::mv(cgroup)) {}

ProcessSet::~ProcessSet() noexcept(false) { sets.ended(number, kj::mv(cgroup), kj::mv(moving)); }

void ProcessSet::adopt(int pid) {
  KJ_IF_MAYBE(dir, cgroup) {
    // The pid is our child's, unreaped until its exit is seen: pids are
    // handed out in turn, so it is not another's before the counter wraps.
    moving = sets.bridge.runOnPool<int>([dir = kj::str(*dir), pid]() -> int {
                           if (::mkdir(dir.cStr(), 0755) < 0 && errno != EEXIST) return errno;
                           return writeCgroupFile(kj::str(dir, "/cgroup.procs"), kj::str(pid));
                         })
                 .then([&logger = sets.logger, pid](int error) {
                   // ESRCH: it has ended already.
                   if (error != 0 && error != ESRCH) {
                     logger.warn("event=cgroup-move-failed pid={} error=\"{}\" action=mark", pid,
                                      strerror(error));
                   }
                 });
  }
}

}  // namespace squall
