// main() of the end-to-end test programs: GoogleTest's, plus one check
// after every suite has torn down: each squall-server and squall-governor
// the tests' clusters stopped exited 0, and none ended with a sanitizer
// report (LocalCluster::stop()). A leak LeakSanitizer finds as a server
// exits at teardown thus fails the test that ran it.
#include <gtest/gtest.h>
#include <squall/tools/local-cluster.h>

#include <cstdlib>
#include <filesystem>
#include <stdlib.h>

namespace {

class CleanStopCheck final : public ::testing::Environment {
 public:
  void TearDown() override {
    for (auto& problem : squall::uncleanStops()) {
      ADD_FAILURE() << "a cluster's processes did not stop cleanly:\n" << problem;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // GoogleTest owns and deletes it.
  ::testing::AddGlobalTestEnvironment(new CleanStopCheck);
  // A state directory of the program's own: `squall start` makes its
  // token file there, and every part and client looks there, not in the
  // home of whoever runs the tests.
  auto state = (std::filesystem::temp_directory_path() / "squall-test-state-XXXXXX").string();
  if (mkdtemp(state.data()) == nullptr) {
    perror("mkdtemp");
    return 1;
  }
  setenv("XDG_STATE_HOME", state.c_str(), 1);
  int result = RUN_ALL_TESTS();
  std::error_code ec;
  std::filesystem::remove_all(state, ec);
  return result;
}
