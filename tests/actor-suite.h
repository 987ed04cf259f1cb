// What the actor tests share (actor-test.cpp, actor-direct-test.cpp): the
// test actors' executor (tests/executors/actor-executor.cpp, "stats"), a
// cluster keeping it, and helpers to read errors and wait for processes.
#pragma once

#include <gtest/gtest.h>
#include <squall/client/client.h>
#include <squall/tools/local-cluster.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <signal.h>
#include <string>
#include <thread>

namespace squall {
namespace {

inline std::string actorExecutor() {
  const char* path = getenv("SQUALL_ACTOR_EXECUTOR");
  return path != nullptr ? path : "";
}

// A fresh directory for marker files, removed at the end.
struct TempDir {
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "squall-actor-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
};

// The message of the error `wait` throws ("" when it throws none).
template <typename Wait>
std::string errorOf(Wait wait) {
  try {
    wait();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The TaskFailed `wait` throws (none when it throws none, or another error).
template <typename Wait>
std::optional<TaskFailed> taskFailureOf(Wait wait) {
  try {
    wait();
  } catch (const TaskFailed& e) {
    return e;
  }
  return std::nullopt;
}

// Whether process `pid` is gone, waiting up to 10 s for it to go.
inline bool processGone(long pid) {
  for (int i = 0; i < 1000; i++) {
    if (kill(static_cast<pid_t>(pid), 0) != 0) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A cluster of `governors` governors of `cpus` cpus each, with the test
// actors' executor (logs at $SQUALL_TEST_LOG_LEVEL, if set).
inline ClusterOptions actorCluster(int governors, uint32_t cpus) {
  ClusterOptions options;
  options.governors = governors;
  options.cpus = cpus;
  options.governorArgs = {"--executor", "stats=" + actorExecutor()};
  if (const char* level = getenv("SQUALL_TEST_LOG_LEVEL")) options.logLevel = level;
  return options;
}

class ActorTest : public ::testing::Test {
 protected:
  // Two governors of 2 cpus each, the second offering one GPU.
  static void SetUpTestSuite() {
    auto options = actorCluster(2, 2);
    options.governorArgsEach = {{}, {"--resource", "gpus=[0]"}};
    if (const char* level = getenv("SQUALL_TEST_LOG_LEVEL")) options.logLevel = level;
    cluster = new LocalCluster(options);
    cluster->start();
  }
  static void TearDownTestSuite() {
    delete cluster;
    cluster = nullptr;
  }
  void TearDown() override {
    for (size_t i = 0; i < cluster->governorCount(); i++) {
      EXPECT_TRUE(cluster->governor(i).running()) << "governor " << i;
    }
  }
  static inline LocalCluster* cluster = nullptr;
};

}  // namespace
}  // namespace squall
