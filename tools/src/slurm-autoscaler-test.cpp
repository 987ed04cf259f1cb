// The autoscaler's rules against a fake Slurm and a clock the test moves.
#include "slurm-autoscaler.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>

namespace squall::slurm {
namespace {

using namespace std::chrono_literals;

// Jobs live in a map the test changes: submit() adds a PENDING one.
class FakeSlurm final : public SlurmJobs {
 public:
  uint64_t submit() override {
    if (!sbatchError.empty()) throw std::runtime_error(sbatchError);
    uint64_t id = nextId++;
    jobs[id] = "PENDING";
    submitted.push_back(id);
    return id;
  }
  std::vector<JobStatus> status(const std::vector<uint64_t>& ids) override {
    std::vector<JobStatus> known;
    for (auto id : ids) {
      if (jobs.count(id)) known.push_back({id, jobs[id], jobs[id] == "FAILED" ? "NonZeroExitCode" : "None"});
    }
    return known;
  }
  void cancel(uint64_t id) override {
    cancelled.push_back(id);
    jobs[id] = "CANCELLED";
  }
  std::string lastWords(uint64_t id) override { return "squall slurm governor: cannot run /bad: job " + std::to_string(id); }

  std::map<uint64_t, std::string> jobs;
  std::vector<uint64_t> submitted;
  std::vector<uint64_t> cancelled;
  std::string sbatchError;
  uint64_t nextId = 100;
};

class AutoscalerTest : public ::testing::Test {
 protected:
  AutoscalerTest() : logger("test", std::make_shared<spdlog::sinks::null_sink_mt>()) {
    policy.maxJobs = 2;
    policy.idleTimeout = 10s;
    policy.backoff = 5s;
    policy.backoffMax = 20s;
    policy.minRun = 30s;
    scaler = std::make_unique<Autoscaler>(policy, slurm, logger, [this](const std::string& line) { said.push_back(line); });
  }

  void tick(ServerLoad load) { scaler->tick(now, load); }
  static ServerLoad ready(uint64_t n, std::vector<ServerLoad::Governor> governors = {}) {
    return ServerLoad{n, std::move(governors)};
  }
  static ServerLoad::Governor busy(uint64_t job) { return {governorNamePrefix(job) + "node1", 1, 0}; }
  static ServerLoad::Governor idle(uint64_t job, uint64_t objects = 0) {
    return {governorNamePrefix(job) + "node1", 0, objects};
  }
  // Job 100, submitted for one ready task, runs and its governor is busy.
  void runBusyJob() {
    tick(ready(1));
    slurm.jobs[100] = "RUNNING";
    now += 1s;
    tick(ready(0, {busy(100)}));
  }
  bool saidSomething(const std::string& part) const {
    for (auto& line : said) {
      if (line.find(part) != std::string::npos) return true;
    }
    return false;
  }

  AutoscalerPolicy policy;
  FakeSlurm slurm;
  spdlog::logger logger;
  std::vector<std::string> said;
  std::unique_ptr<Autoscaler> scaler;
  TimePoint now = TimePoint() + 1000h;
};

TEST_F(AutoscalerTest, SubmitsNothingWhileNoTaskWaits) {
  for (int i = 0; i < 10; i++, now += 1s) tick(ready(0));
  EXPECT_TRUE(slurm.submitted.empty());
}

TEST_F(AutoscalerTest, StartsOneJobAtATimeUpToTheLimit) {
  tick(ready(50));
  ASSERT_EQ(slurm.submitted, std::vector<uint64_t>{100});
  // Still starting: however much waits, no second job yet.
  for (int i = 0; i < 5; i++, now += 1s) tick(ready(50));
  EXPECT_EQ(slurm.submitted.size(), 1u);
  slurm.jobs[100] = "RUNNING";
  now += 1s;
  tick(ready(49, {busy(100)}));
  ASSERT_EQ(slurm.submitted, (std::vector<uint64_t>{100, 101}));
  slurm.jobs[101] = "RUNNING";
  for (int i = 0; i < 5; i++, now += 1s) tick(ready(40, {busy(100), busy(101)}));
  EXPECT_EQ(slurm.submitted.size(), 2u) << "maxJobs is 2";
}

TEST_F(AutoscalerTest, AddsNoJobWhileAGovernorIdlesBesideReadyTasks) {
  tick(ready(3));
  slurm.jobs[100] = "RUNNING";
  // Ready tasks that its governor does not take do not fit one like it.
  for (int i = 0; i < 5; i++, now += 1s) tick(ready(3, {idle(100)}));
  EXPECT_EQ(slurm.submitted.size(), 1u);
}

TEST_F(AutoscalerTest, FailuresAtStartBackOffDoublingToTheCap) {
  std::vector<TimePoint> submittedAt;
  for (int i = 0; i < 400; i++, now += 500ms) {
    size_t before = slurm.submitted.size();
    tick(ready(1));
    if (slurm.submitted.size() > before) {
      submittedAt.push_back(now);
      slurm.jobs[slurm.submitted.back()] = "FAILED";  // its governor never comes up
    }
  }
  // 200 s of ticks: submissions after waits of 5, 10, 20, 20, ... s, never
  // a stream of jobs.
  ASSERT_GE(submittedAt.size(), 4u);
  EXPECT_LE(submittedAt.size(), 13u);
  std::vector<std::chrono::milliseconds> gaps;
  for (size_t i = 1; i < submittedAt.size(); i++) {
    gaps.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(submittedAt[i] - submittedAt[i - 1]));
  }
  // Each failure is seen one tick after its submission.
  EXPECT_EQ(gaps[0], 5500ms);
  EXPECT_EQ(gaps[1], 10500ms);
  EXPECT_EQ(gaps[2], 20500ms);
  EXPECT_EQ(gaps[3], 20500ms);
  EXPECT_EQ(scaler->failuresInARow(), submittedAt.size());
  EXPECT_TRUE(saidSomething("job 100 failed at start (FAILED, NonZeroExitCode, its governor never registered): "
                            "squall slurm governor: cannot run /bad: job 100; next governor job in 5.0 s"));
  EXPECT_TRUE(saidSomething("next governor job in 20 s"));
}

TEST_F(AutoscalerTest, AGovernorThatRegistersClearsTheBackoff) {
  tick(ready(1));
  slurm.jobs[100] = "FAILED";
  now += 1s;
  tick(ready(1));
  EXPECT_EQ(scaler->failuresInARow(), 1u);
  now += 5s;
  tick(ready(1));
  ASSERT_EQ(slurm.submitted.size(), 2u);
  slurm.jobs[101] = "RUNNING";
  now += 1s;
  tick(ready(0, {busy(101)}));
  EXPECT_EQ(scaler->failuresInARow(), 0u);
  EXPECT_FALSE(scaler->backoffUntil().has_value());
}

TEST_F(AutoscalerTest, AJobThatDiesSoonAfterRegisteringCountsAsFailed) {
  runBusyJob();
  now += 5s;
  slurm.jobs[100] = "NODE_FAIL";
  tick(ready(1));
  EXPECT_EQ(scaler->failuresInARow(), 1u);
  EXPECT_TRUE(saidSomething("job 100 failed at start (NODE_FAIL, 5.0 s after its governor registered)"));
}

TEST_F(AutoscalerTest, ASubmitThatSbatchRefusesBacksOffToo) {
  slurm.sbatchError = "sbatch: error: invalid partition specified: nope";
  tick(ready(1));
  EXPECT_TRUE(saidSomething("sbatch failed: sbatch: error: invalid partition specified: nope; next governor job in 5.0 s"));
  now += 4s;
  tick(ready(1));
  EXPECT_EQ(scaler->failuresInARow(), 1u) << "no second sbatch inside the back-off";
  now += 1s;
  tick(ready(1));
  EXPECT_EQ(scaler->failuresInARow(), 2u);
}

TEST_F(AutoscalerTest, ReleasesAGovernorIdleWithNoObjectsAfterTheTimeout) {
  runBusyJob();
  for (int i = 0; i < 9; i++, now += 1s) tick(ready(0, {idle(100)}));
  EXPECT_TRUE(slurm.cancelled.empty());
  now += 1s;
  tick(ready(0, {idle(100)}));
  EXPECT_EQ(slurm.cancelled, std::vector<uint64_t>{100});
  EXPECT_TRUE(saidSomething("job 100 released: its governor was idle for 10 s"));
  now += 1s;
  tick(ready(0));
  EXPECT_EQ(scaler->jobCount(), 0u);
  EXPECT_EQ(scaler->failuresInARow(), 0u) << "a job we let go did not fail";
}

TEST_F(AutoscalerTest, KeepsAGovernorThatHoldsObjects) {
  tick(ready(1));
  slurm.jobs[100] = "RUNNING";
  for (int i = 0; i < 60; i++, now += 1s) tick(ready(0, {idle(100, 3)}));
  EXPECT_TRUE(slurm.cancelled.empty());
  // Work in between restarts the idle clock.
  tick(ready(0, {idle(100)}));
  now += 9s;
  tick(ready(0, {busy(100)}));
  now += 9s;
  tick(ready(0, {idle(100)}));
  EXPECT_TRUE(slurm.cancelled.empty());
}

TEST_F(AutoscalerTest, CancelsAPendingJobOnceNoWorkWaits) {
  tick(ready(1));
  now += 5s;
  tick(ready(0));
  EXPECT_TRUE(slurm.cancelled.empty());
  now += 10s;
  tick(ready(0));
  EXPECT_EQ(slurm.cancelled, std::vector<uint64_t>{100});
  now += 1s;
  tick(ready(0));
  EXPECT_EQ(scaler->failuresInARow(), 0u);
}

TEST_F(AutoscalerTest, CancelAllCancelsEveryLiveJob) {
  runBusyJob();
  now += 1s;
  tick(ready(5, {busy(100)}));
  EXPECT_EQ(scaler->cancelAll(), (std::vector<uint64_t>{100, 101}));
}

}  // namespace
}  // namespace squall::slurm
