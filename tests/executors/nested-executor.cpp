// The executor the nested-submit end-to-end tests run (tests/nested-test.cpp),
// as "tree": a function that submits copies of itself into its own session
// (a tree of tasks), one that calls an actor whose handle it is given, and
// the Counter actor type it calls. Every node leaves a marker file named by
// its place in the tree, made exclusively: a node run twice says so in the
// file "again".
#include <squall/tasklib/tasklib.h>

#include <cerrno>
#include <cstring>
#include <chrono>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unistd.h>

namespace {

// "DEPTH FANOUT DIR PATH [LEAF_MS] [block]".
struct NodeConfig {
  int depth = 0;
  int fanout = 0;
  std::string dir;
  std::string path;
  int leafMs = 0;
  bool block = false;

  static NodeConfig parse(std::string_view text) {
    std::istringstream in{std::string(text)};
    NodeConfig c;
    std::string word;
    if (!(in >> c.depth >> c.fanout >> c.dir >> c.path)) {
      throw std::invalid_argument("config '" + std::string(text) + "': want DEPTH FANOUT DIR PATH [LEAF_MS] [block]");
    }
    if (in >> c.leafMs && in >> word) c.block = word == "block";
    return c;
  }
  std::string child(int i) const {
    return std::to_string(depth - 1) + " " + std::to_string(fanout) + " " + dir + " " + path + "." +
           std::to_string(i) + " " + std::to_string(leafMs) + (block ? " block" : "");
  }
};

// Marks this node as run; a second run of it is written down in "again".
void mark(const NodeConfig& c) {
  int fd = open((c.dir + "/" + c.path).c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    close(fd);
    return;
  }
  if (errno != EEXIST) throw std::runtime_error("cannot mark " + c.path + ": " + strerror(errno));
  std::ofstream(c.dir + "/again", std::ios::app) << c.path << "\n";
}

// A node: a leaf outputs 1 (after LEAF_MS, or, with "block", once the
// file DIR/release exists: at most 60 s); an inner node submits FANOUT
// children one level down, waits for them and outputs the sum of theirs.
void node(squall::Call& call) {
  auto c = NodeConfig::parse(call.config());
  mark(c);
  if (c.depth == 0) {
    if (c.block) {
      for (int i = 0; i < 6000 && !std::filesystem::exists(c.dir + "/release"); i++) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    } else if (c.leafMs > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(c.leafMs));
    }
    call.output(0).write("1");
    return;
  }
  auto& session = call.session();
  std::vector<squall::Task> children;
  for (int i = 0; i < c.fanout; i++) {
    children.push_back(session.call("tree/node", {}, c.child(i)).name("node " + c.path + "." + std::to_string(i)));
    children.back().output().keep();
  }
  session.submit();
  session.waitAll();
  long sum = 0;
  std::vector<squall::DataObject> read;
  for (auto& child : children) {
    sum += std::stol(child.output().fetch());
    read.push_back(child.output());
  }
  session.unkeep(read);
  call.output(0).write(std::to_string(sum));
}

// Calls "add" with the config's amount on the actor whose task id is
// input 0's text (a handle passed in as data); output 0: the total it
// returned.
void addThrough(squall::Call& call) {
  uint64_t actor = std::stoull(std::string(call.input(0).text()));
  auto& session = call.session();
  auto added = session.actorHandle(actor).call("add", {}, std::string(call.config()));
  added.output().keep();
  session.submit();
  call.output(0).write(added.output().fetch());
}

class Counter {
 public:
  explicit Counter(squall::Call&) {}
  void add(squall::Call& call) {
    total += std::stol(std::string(call.config()));
    call.output(0).write(std::to_string(total));
  }
  void read(squall::Call& call) { call.output(0).write(std::to_string(total)); }

 private:
  long total = 0;
};

}  // namespace

int main(int argc, char** argv) {
  squall::Executor ex("tree");
  ex.add("node", node);
  ex.add("addThrough", addThrough);
  ex.actor<Counter>("Counter").method("add", &Counter::add).method("read", &Counter::read);
  return ex.serve(argc, argv);
}
