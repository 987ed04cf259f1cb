#include "slurm.h"

#include <gtest/gtest.h>
#include <map>

namespace squall::slurm {
namespace {

using std::chrono::seconds;

TEST(SlurmTimeLimitTest, ReadsEverySlurmFormat) {
  EXPECT_EQ(parseTimeLimit("30"), seconds(30 * 60));
  EXPECT_EQ(parseTimeLimit("5:30"), seconds(5 * 60 + 30));
  EXPECT_EQ(parseTimeLimit("1:00:00"), seconds(3600));
  EXPECT_EQ(parseTimeLimit("2-0"), seconds(2 * 86400));
  EXPECT_EQ(parseTimeLimit("1-2:30"), seconds(86400 + 2 * 3600 + 30 * 60));
  EXPECT_EQ(parseTimeLimit("1-00:00:05"), seconds(86400 + 5));
  EXPECT_EQ(parseTimeLimit("UNLIMITED"), std::nullopt);
  EXPECT_EQ(parseTimeLimit("infinite"), std::nullopt);
}

TEST(SlurmTimeLimitTest, RefusesWhatSlurmWouldMisread) {
  for (auto bad : {"", "1h", "1:2:3:4", "-5", "1-", "a:00", "1::00", "0", "0:00", "99999999999"}) {
    EXPECT_THROW(parseTimeLimit(bad), std::invalid_argument) << bad;
  }
  try {
    parseTimeLimit("1h");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'1h'"), std::string::npos) << e.what();
  }
}

TEST(SlurmDurationTest, ReadsSecondsAndUnits) {
  EXPECT_EQ(parseDuration("90"), Duration(90000));
  EXPECT_EQ(parseDuration("0.5"), Duration(500));
  EXPECT_EQ(parseDuration("250ms"), Duration(250));
  EXPECT_EQ(parseDuration("2s"), Duration(2000));
  EXPECT_EQ(parseDuration("5m"), Duration(300000));
  EXPECT_EQ(parseDuration("2h"), Duration(7200000));
  for (auto bad : {"", "-1", "s", "1.2.3", "5 m", "1d", "1e3", "."}) {
    EXPECT_THROW(parseDuration(bad), std::invalid_argument) << bad;
  }
  EXPECT_EQ(describeDuration(Duration(300)), "0.3 s");
  EXPECT_EQ(describeDuration(Duration(45000)), "45 s");
  EXPECT_EQ(describeDuration(Duration(600000)), "10 min");
}

TEST(SubmitBackoffTest, DoublesUpToTheCapAndClearsOnSuccess) {
  SubmitBackoff backoff(seconds(10), seconds(60));
  EXPECT_EQ(backoff.failed(), seconds(10));
  EXPECT_EQ(backoff.failed(), seconds(20));
  EXPECT_EQ(backoff.failed(), seconds(40));
  EXPECT_EQ(backoff.failed(), seconds(60));
  EXPECT_EQ(backoff.failed(), seconds(60));
  EXPECT_EQ(backoff.failures(), 5u);
  backoff.succeeded();
  EXPECT_EQ(backoff.failures(), 0u);
  EXPECT_EQ(backoff.failed(), seconds(10));
}

TEST(SubmitBackoffTest, ManyFailuresStayAtTheCap) {
  SubmitBackoff backoff(seconds(1), seconds(600));
  Duration last{};
  for (int i = 0; i < 200; i++) last = backoff.failed();
  EXPECT_EQ(last, seconds(600));
}

TEST(GovernorJobScriptTest, ExecsTheGovernorWrapperWithEveryArgumentQuoted) {
  auto script = governorJobScript({"/opt/squall/bin/squall", "/opt/squall/bin/squall-governor",
                                   {"--server", "head:7210", "--token-file", "/home/a b/it's/token"}});
  EXPECT_EQ(script.rfind("#!/bin/sh\n", 0), 0u);
  EXPECT_NE(script.find("\nexec '/opt/squall/bin/squall' slurm governor --program "
                        "'/opt/squall/bin/squall-governor' -- '--server' 'head:7210' '--token-file' "
                        "'/home/a b/it'\\''s/token'\n"),
            std::string::npos)
      << script;
}

TEST(SlurmOutputTest, ReadsSbatchAndSqueue) {
  EXPECT_EQ(parseSbatchOutput("1234\n"), 1234u);
  EXPECT_EQ(parseSbatchOutput("77;cluster\n"), 77u);
  EXPECT_THROW(parseSbatchOutput("sbatch: error: invalid partition\n"), std::invalid_argument);
  EXPECT_THROW(parseSbatchOutput(""), std::invalid_argument);

  auto jobs = parseSqueue("12|RUNNING|None\n13|PENDING|Resources\n14_2|RUNNING|None\ngarbage\n15|FAILED|NonZeroExitCode\n");
  ASSERT_EQ(jobs.size(), 3u);
  EXPECT_EQ(jobs[0].id, 12u);
  EXPECT_EQ(jobs[0].state, "RUNNING");
  EXPECT_EQ(jobs[1].reason, "Resources");
  EXPECT_EQ(jobs[2].id, 15u);
  EXPECT_EQ(jobs[2].state, "FAILED");
  for (auto state : {"PENDING", "RUNNING", "CONFIGURING", "SUSPENDED", "REQUEUED"}) EXPECT_FALSE(jobEnded(state));
  for (auto state : {"COMPLETED", "COMPLETING", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                     "BOOT_FAIL", "ENDED"}) {
    EXPECT_TRUE(jobEnded(state)) << state;
  }
}

TEST(GovernorArgsInJobTest, TakesTheJobsCpusNameAndNode) {
  std::map<std::string, std::string> vars = {
      {"SLURM_JOB_ID", "42"}, {"SLURM_CPUS_ON_NODE", "16"}, {"SLURMD_NODENAME", "node07"}};
  auto env = [&vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
  EXPECT_EQ(governorArgsInJob(env, "node07.cluster"),
            (std::vector<std::string>{"--cpus", "16", "--name", "slurm-42-node07", "--listen", "node07.cluster:0"}));
  EXPECT_EQ(governorNamePrefix(42), "slurm-42-");

  vars.erase("SLURM_CPUS_ON_NODE");  // the governor then counts them itself
  vars.erase("SLURMD_NODENAME");
  EXPECT_EQ(governorArgsInJob(env, "n1"),
            (std::vector<std::string>{"--name", "slurm-42-n1", "--listen", "n1:0"}));

  vars.erase("SLURM_JOB_ID");
  EXPECT_THROW(governorArgsInJob(env, "n1"), std::invalid_argument);
}

}  // namespace
}  // namespace squall::slurm
