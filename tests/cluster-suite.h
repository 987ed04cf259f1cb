// A test suite sharing one local cluster (a server and two governors with
// two cpus each) across its tests; every test must leave all of it running.
#pragma once

#include <gtest/gtest.h>
#include <squall/tools/local-cluster.h>

namespace squall {

// `Suite` only makes each suite's cluster its own.
template <typename Suite>
class ClusterSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster = startCluster(2, 2); }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void TearDown() override {
    EXPECT_TRUE(cluster->server().running());
    for (size_t i = 0; i < cluster->governorCount(); i++) {
      EXPECT_TRUE(cluster->governor(i).running()) << "governor " << i;
    }
  }
  static inline LocalCluster* cluster = nullptr;
};

}  // namespace squall
