// A single-node Slurm of the test's own: munged, slurmctld and slurmd
// (Debian's packages) started in a temp dir on free loopback ports, as
// children of the test, and stopped with it. What works here and why is in
// docs/deploy.md ("Slurm", "How the tests run a real Slurm"). The
// daemons run as root (SlurmUser=root): unavailable() says why a machine
// cannot, for a GTEST_SKIP. Test thread only.
#pragma once

#include "command-output.h"

#include <squall/tools/local-cluster.h>

#include <arpa/inet.h>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/in.h>
#include <optional>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace squall {

class SlurmCluster {
 public:
  // Why Slurm's daemons cannot run here, or nullopt.
  static std::optional<std::string> unavailable() {
    if (geteuid() != 0) return "Slurm's daemons run as root in these tests (SlurmUser=root); run them as root";
    for (auto program : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd"}) {
      if (access(program, X_OK) != 0) {
        return std::string("no ") + program + ": install Debian's slurmctld slurmd slurm-client munge "
                                              "(tools/setup.sh does)";
      }
    }
    for (auto command : {"sbatch", "srun", "squeue", "scancel", "sinfo"}) {
      if (commandOutput(std::string("command -v ") + command).second != 0) {
        return std::string("no ") + command + " on PATH: install Debian's slurm-client (tools/setup.sh does)";
      }
    }
    return std::nullopt;
  }

  // Starts the daemons and returns once the node takes jobs; sets
  // $SLURM_CONF for this process and the programs it starts. Throws
  // std::runtime_error with the daemons' logs when they do not come up.
  SlurmCluster() {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "squall-slurm-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    root = tmpl;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
    lifelineRead = fds[0];
    lifelineWrite = fds[1];
    try {
      start();
    } catch (...) {
      stop();
      throw;
    }
  }

  ~SlurmCluster() { stop(); }

  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // A directory every job may write to (job output files).
  std::string jobsDir() const { return (root / "jobs").string(); }
  const std::string& nodeName() const { return node; }
  // What the daemons logged, for a failure message.
  std::string logs() const {
    std::string all;
    for (auto name : {"munged", "slurmctld", "slurmd"}) {
      auto [text, status] = commandOutput("tail -n 20 '" + (root / (std::string(name) + ".log")).string() + "'");
      all += std::string("--- ") + name + " ---\n" + text;
    }
    return all;
  }
  // The state Slurm gives job `id` ("" when it has forgotten it).
  std::string jobState(uint64_t id) const {
    auto [state, status] =
        commandOutput("squeue --noheader --states=all --jobs=" + std::to_string(id) + " --format=%T 2>/dev/null");
    while (!state.empty() && state.back() == '\n') state.pop_back();
    return state;
  }

 private:
  std::filesystem::path root;
  std::string conf;
  std::string node;
  int lifelineRead = -1;
  int lifelineWrite = -1;
  std::unique_ptr<ChildProcess> munged, slurmctld, slurmd;

  void start() {
    namespace fs = std::filesystem;
    // munged wants every directory on the way to its socket searchable by
    // all, and its key owner-only.
    fs::permissions(root, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
    for (auto dir : {"munge", "state", "spool", "jobs"}) fs::create_directories(root / dir);
    fs::permissions(root / "jobs", fs::perms::all);
    std::string key(1024, '\0');
    {
      std::ifstream random("/dev/urandom", std::ios::binary);
      random.read(key.data(), key.size());
    }
    writeFile(root / "munge" / "munge.key", key);
    fs::permissions(root / "munge" / "munge.key", fs::perms::owner_read);
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    node = std::string(host).substr(0, std::string(host).find('.'));
    conf = (root / "slurm.conf").string();
    writeFile(conf, config(freePort(), freePort()));
    // slurmd 22.05 loads its cgroup plugin whatever the configuration, and
    // the default (autodetect) fails where nothing is mounted on
    // /sys/fs/cgroup (a chroot, a fresh root): "Unable to initialize cgroup
    // plugin". Naming the v1 plugin skips the detection; with
    // proctrack/linuxproc and task/none nothing then uses cgroups.
    writeFile(root / "cgroup.conf", "CgroupPlugin=cgroup/v1\n");
    setenv("SLURM_CONF", conf.c_str(), 1);

    auto m = (root / "munge").string();
    munged = daemon("munged", {"/usr/sbin/munged", "--foreground", "--socket=" + m + "/socket",
                               "--key-file=" + m + "/munge.key", "--pid-file=" + m + "/munged.pid",
                               "--seed-file=" + m + "/seed", "--log-file=" + m + "/munged.log"});
    waitFor("munged's socket", [&]() { return fs::exists(root / "munge" / "socket"); });
    slurmctld = daemon("slurmctld", {"/usr/sbin/slurmctld", "-D", "-i", "-f", conf});
    slurmd = daemon("slurmd", {"/usr/sbin/slurmd", "-D", "-N", node, "-f", conf});
    waitFor("the node to be idle", [&]() {
      auto [state, status] = commandOutput("sinfo --noheader --Node --format=%T 2>/dev/null");
      return status == 0 && state.rfind("idle", 0) == 0;
    });
  }

  void stop() {
    // Each daemon's wrapper kills it at the lifeline's end of file.
    if (lifelineWrite >= 0) close(lifelineWrite);
    lifelineWrite = -1;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (auto* process : {&slurmd, &slurmctld, &munged}) {
      if (*process && !(*process)->waitExit(deadline)) (*process)->stop();
    }
    if (lifelineRead >= 0) close(lifelineRead);
    lifelineRead = -1;
    std::error_code ec;
    std::filesystem::remove_all(root, ec);
  }

  static void writeFile(const std::filesystem::path& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary);
    out << text;
    if (!out) throw std::runtime_error("cannot write " + path.string());
  }

  // A loopback port nobody listens on now (Slurm's own ports are fixed in
  // slurm.conf; two test programs running at once pick different ones).
  static int freePort() {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in address = {};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      close(fd);
      throw std::runtime_error("cannot find a free port");
    }
    close(fd);
    return ntohs(address.sin_port);
  }

  std::string config(int controllerPort, int nodePort) const {
    auto dir = root.string();
    auto cpus = std::thread::hardware_concurrency();
    return "# A single-node Slurm for squall's tests (tests/slurm-cluster.h).\n"
           "ClusterName=squalltest\n"
           "SlurmctldHost=" + node + "(127.0.0.1)\n"
           "SlurmctldPort=" + std::to_string(controllerPort) + "\n"
           "SlurmdPort=" + std::to_string(nodePort) + "\n"
           "SlurmUser=root\n"
           "SlurmdUser=root\n"
           "AuthType=auth/munge\n"
           "CredType=cred/munge\n"
           "AuthInfo=socket=" + dir + "/munge/socket\n"
           "StateSaveLocation=" + dir + "/state\n"
           "SlurmdSpoolDir=" + dir + "/spool\n"
           "SlurmctldPidFile=" + dir + "/slurmctld.pid\n"
           "SlurmdPidFile=" + dir + "/slurmd.pid\n"
           // No cgroups (none to delegate here): processes are tracked by
           // /proc and tasks are not pinned.
           "ProctrackType=proctrack/linuxproc\n"
           "TaskPlugin=task/none\n"
           "JobAcctGatherType=jobacct_gather/none\n"
           "AccountingStorageType=accounting_storage/none\n"
           "JobCompType=jobcomp/none\n"
           "SwitchType=switch/none\n"
           "MpiDefault=none\n"
           "MailProg=/bin/true\n"
           "SelectType=select/cons_tres\n"
           "SelectTypeParameters=CR_CPU\n"
           "SchedulerType=sched/backfill\n"
           "ReturnToService=2\n"
           // Ended jobs stay listed (squeue --states=all) for 5 minutes.
           "MinJobAge=300\n"
           // SIGTERM, then SIGKILL this much later: a governor stops in less.
           "KillWait=5\n"
           "InactiveLimit=0\n"
           "NodeName=" + node + " NodeAddr=127.0.0.1 CPUs=" + std::to_string(cpus > 0 ? cpus : 1) + " State=UNKNOWN\n"
           "PartitionName=squall Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  }

  // `argv` under a small shell that logs its output to ROOT/NAME.log and
  // kills it when the lifeline (its stdin) ends: the daemon dies with the
  // test however the test ends.
  std::unique_ptr<ChildProcess> daemon(const std::string& name, const std::vector<std::string>& argv) {
    auto log = (root / (name + ".log")).string();
    std::vector<std::string> args = {"-c", "\"$@\" >>\"$0\" 2>&1 </dev/null & child=$!; read -r _; kill $child; wait $child",
                                     log};
    args.insert(args.end(), argv.begin(), argv.end());
    return std::make_unique<ChildProcess>("/bin/sh", args, std::vector<int>{}, std::vector<std::string>{},
                                          lifelineRead);
  }

  template <typename Ready>
  void waitFor(const std::string& what, Ready ready) {
    // Bounded polling: Slurm says nothing when it is ready. Here it took
    // 1-3 s from start to an idle node.
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("Slurm did not come up (waited 60 s for " + what + "):\n" + logs());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
};

}  // namespace squall
