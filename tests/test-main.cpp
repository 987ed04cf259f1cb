// main() of the end-to-end test programs: GoogleTest's, plus one check
// after every suite has torn down: each squall-server and squall-governor
// the tests' clusters stopped exited 0, and none ended with a sanitizer
// report (LocalCluster::stop()). A leak LeakSanitizer finds as a server
// exits at teardown thus fails the test that ran it.
#include <gtest/gtest.h>
#include <squall/tools/local-cluster.h>

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
  return RUN_ALL_TESTS();
}
