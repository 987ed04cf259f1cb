// `squall start` and `squall demo`: a local cluster in the foreground.
#include "commands.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
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

int runStart(ClusterOptions options) {
  if (!resolveExecutors(options.executors)) return 2;
  if (!useDefaultToken(options, "squall start")) return 1;
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

  std::vector<struct pollfd> fds;
  fds.push_back({sfd, POLLIN, 0});
  fds.push_back({cluster.server().exitFd(), POLLIN, 0});
  for (size_t i = 0; i < cluster.governorCount(); i++) {
    fds.push_back({cluster.governor(i).exitFd(), POLLIN, 0});
  }
  int status = 0;
  while (true) {
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
    bool died = false;
    for (size_t i = 1; i < fds.size(); i++) {
      if (fds[i].revents) {
        fprintf(stderr, "squall start: %s exited unexpectedly; stopping everything\n",
                i == 1 ? "the server" : ("governor-" + std::to_string(i - 2)).c_str());
        died = true;
      }
    }
    if (died) {
      status = 1;
      break;
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
