// `squall start` and `squall demo`: a local cluster in the foreground.
#include "commands.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <sys/file.h>
#include <filesystem>
#include <poll.h>
#include <squall/client/client.h>
#include <squall/proto/errors.h>
#include <squall/proto/token.h>
#include <stdexcept>
#include <sys/signalfd.h>
#include <unistd.h>

namespace squall {

int stopSignalFd() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  return signalfd(-1, &set, SFD_CLOEXEC);
}

bool useDefaultToken(ClusterOptions& options, const char* command) {
  if (!options.token.empty() || !options.tokenFile.empty()) return true;
  options.tokenFile = defaultTokenFile();
  if (options.tokenFile.empty()) return true;
  try {
    ensureTokenFile(options.tokenFile);
  } catch (const kj::Exception& e) {
    fprintf(stderr, "%s: %s\n", command, userMessage(e).cStr());
    return false;
  }
  return true;
}

namespace {

// Checks each --executor NAME=PROGRAM and makes a relative PROGRAM
// absolute (resolveExecutor). False (after saying why) when one is not
// NAME=PROGRAM.
bool resolveExecutors(std::vector<std::string>& executors) {
  for (auto& executor : executors) {
    try {
      executor = resolveExecutor(executor);
    } catch (const std::invalid_argument& e) {
      fprintf(stderr, "squall start: --executor %s\n", e.what());
      return false;
    }
  }
  return true;
}

}  // namespace

namespace {

// A part of the cluster that ends is started again, unless it ended
// RESTARTS_PER_WINDOW times within RESTART_WINDOW (it will not stay up:
// its log says why) or with a sanitizer's report (a bug to see, not hide).
constexpr size_t RESTARTS_PER_WINDOW = 5;
constexpr auto RESTART_WINDOW = std::chrono::seconds(60);

struct Part {
  std::string name;  // "the server", "governor-0"
  std::deque<std::chrono::steady_clock::time_point> ends;
  bool givenUp = false;
};

// Where `squall start` keeps its work dir when not told: beside the
// default token file (XDG_STATE_HOME/squall/start), so that the session
// log is where the next start finds it; empty when there is no home.
std::string defaultWorkDir() {
  auto token = defaultTokenFile();
  if (token.empty()) return "";
  return (std::filesystem::path(token).parent_path() / "start").string();
}

}  // namespace

// Holds `dir`/squall-start.lock (flock) for this process's life: one
// `squall start` a work dir (a second would wipe the first's governors'
// stores). -1 after saying why when another holds it.
int lockWorkDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(dir, ec)) {
    // The cluster's state (the session log, governors' objects): ours alone.
    fs::create_directories(dir, ec);
    fs::permissions(dir, fs::perms::owner_all, ec);
  }
  auto path = dir + "/squall-start.lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) {
    fprintf(stderr, "squall start: cannot open %s: %s\n", path.c_str(), strerror(errno));
    return -1;
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) < 0) {
    fprintf(stderr, "squall start: another squall start uses %s; give this one a --work-dir of its own\n",
            dir.c_str());
    ::close(fd);
    return -1;
  }
  return fd;
}

int runStart(ClusterOptions options) {
  if (!resolveExecutors(options.executors)) return 2;
  if (!useDefaultToken(options, "squall start")) return 1;
  if (options.workDir.empty()) options.workDir = defaultWorkDir();
  int lock = -1;
  if (!options.workDir.empty() && (lock = lockWorkDir(options.workDir)) < 0) return 1;
  struct Unlock {
    int fd;
    ~Unlock() {
      if (fd >= 0) ::close(fd);
    }
  } unlock{lock};
  int sfd = stopSignalFd();
  LocalCluster cluster(options);
  try {
    cluster.start();
  } catch (const std::exception& e) {
    fprintf(stderr, "squall start: %s\n", e.what());
    cluster.stop();
    return 1;
  }
  printf("squall is running: server=%s governors=%zu work-dir=%s\n",
         cluster.serverAddress().c_str(), cluster.governorCount(), cluster.workDir().c_str());
  if (!options.workDir.empty()) {
    printf("session log: %s/server.sqlite (kept: squall start with this work dir carries on its sessions)\n",
           cluster.workDir().c_str());
  }
  if (!cluster.httpAddress().empty()) {
    printf("status page: http://%s/\n", cluster.httpAddress().c_str());
  }
  if (!options.tokenFile.empty()) {
    printf("token: %s (clients of this user here find it; give it to others with --token-file)\n",
           options.tokenFile.c_str());
  }
  printf("submit with: SQUALL_SERVER=%s squall submit -- PROGRAM ARGS...   (Ctrl-C stops)\n",
         cluster.serverAddress().c_str());
  fflush(stdout);

  std::vector<Part> parts(1 + cluster.governorCount());
  parts[0].name = "the server";
  for (size_t i = 0; i < cluster.governorCount(); i++) parts[i + 1].name = "governor-" + std::to_string(i);
  auto process = [&](size_t k) -> ChildProcess& { return k == 0 ? cluster.server() : cluster.governor(k - 1); };
  int status = 0;
  bool stopping = false;
  while (!stopping) {
    // Rebuilt each turn: a part started again has a new exit descriptor.
    std::vector<struct pollfd> fds{{sfd, POLLIN, 0}};
    std::vector<size_t> watched;
    for (size_t k = 0; k < parts.size(); k++) {
      if (parts[k].givenUp) continue;
      fds.push_back({process(k).exitFd(), POLLIN, 0});
      watched.push_back(k);
    }
    int rc = poll(fds.data(), fds.size(), -1);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) {
      perror("squall start: poll");
      status = 1;
      break;
    }
    if (fds[0].revents) {
      struct signalfd_siginfo info;
      if (read(sfd, &info, sizeof(info)) > 0) {
        fprintf(stderr, "squall start: stopping (%s)\n", strsignal(info.ssi_signo));
      }
      break;
    }
    for (size_t w = 0; w < watched.size(); w++) {
      if (!fds[w + 1].revents) continue;
      auto& part = parts[watched[w]];
      auto ended = process(watched[w]).poll();
      if (!ended) continue;  // readable before it was reaped
      auto how = describeStatus(*ended);
      auto now = std::chrono::steady_clock::now();
      part.ends.push_back(now);
      while (!part.ends.empty() && now - part.ends.front() > RESTART_WINDOW) part.ends.pop_front();
      if (WIFEXITED(*ended) && WEXITSTATUS(*ended) == SANITIZER_EXIT_CODE) {
        fprintf(stderr, "squall start: %s %s: a sanitizer report (above); stopping everything\n", part.name.c_str(),
                how.c_str());
        status = 1;
        stopping = true;
        break;
      }
      if (part.ends.size() > RESTARTS_PER_WINDOW) {
        fprintf(stderr, "squall start: %s %s, %zu times within %lld s: not starting it again (its log in %s says "
                        "why)\n",
                part.name.c_str(), how.c_str(), part.ends.size(),
                static_cast<long long>(RESTART_WINDOW.count()), cluster.workDir().c_str());
        part.givenUp = true;
        if (watched[w] == 0) {
          // Nothing works without it.
          fprintf(stderr, "squall start: stopping everything\n");
          status = 1;
          stopping = true;
          break;
        }
        continue;
      }
      fprintf(stderr, "squall start: %s %s; starting it again\n", part.name.c_str(), how.c_str());
      try {
        if (watched[w] == 0) {
          cluster.restartServer();
        } else {
          cluster.restartGovernor(watched[w] - 1);
        }
        fprintf(stderr, "squall start: %s is running again\n", part.name.c_str());
      } catch (const std::exception& e) {
        fprintf(stderr, "squall start: %s did not start again: %s\n", part.name.c_str(), e.what());
        part.givenUp = true;
        if (watched[w] == 0) {
          status = 1;
          stopping = true;
          break;
        }
      }
    }
  }
  auto problems = cluster.stop();
  if (!problems.empty()) {
    fprintf(stderr, "squall start: %s", problems.c_str());
    status = 1;
  }
  close(sfd);
  return status;
}

int runDemo(ClusterOptions options) {
  LocalCluster cluster(options);
  try {
    cluster.start();
    printf("squall demo: server %s with %zu governor(s)\n", cluster.serverAddress().c_str(),
           cluster.governorCount());
    if (!cluster.httpAddress().empty()) {
      printf("status page: http://%s/ (while the demo runs; `squall start` keeps one up)\n",
             cluster.httpAddress().c_str());
    }
    Client client(cluster.serverAddress(), options.token);
    auto session = client.newSession("demo");

    // Rain's hello world: two constants concatenated on a governor.
    auto hello = session.concat({session.blob("Hello "), session.blob("world!\n")});
    hello.output().keep();

    // A small shell pipeline: sort words, count them, shout them.
    auto words = session.blob("pear\napple\nfig\nbanana\napple\n", "words");
    auto sorted = session.execute(Program({"sort", "-u"}).stdinFrom(words).stdoutOutput().name("sort"));
    auto counted = session.execute(
        Program::shell("wc -l < words.txt > count.txt")
            .input(sorted.output(), "words.txt")
            .output("count.txt")
            .name("count"));
    auto shouted = session.execute(
        Program({"tr", "a-z", "A-Z"}).stdinFrom(sorted.output()).stdoutOutput().name("shout"));
    counted.output().keep();
    shouted.output().keep();
    session.submit();
    session.waitAll();

    printf("\n-- hello world (concat) --\n%s", hello.output().fetch().c_str());
    printf("-- unique words, shouted --\n%s", shouted.output().fetch().c_str());
    printf("-- how many --\n%s", counted.output().fetch().c_str());
    auto state = session.state();
    printf("\nsession %llu: %llu tasks finished, %llu failed\n",
           static_cast<unsigned long long>(state.id), static_cast<unsigned long long>(state.finished),
           static_cast<unsigned long long>(state.failed));
    session.close();
  } catch (const std::exception& e) {
    fprintf(stderr, "squall demo: %s\n", e.what());
    cluster.stop();
    return 1;
  }
  cluster.stop();
  return 0;
}

}  // namespace squall
