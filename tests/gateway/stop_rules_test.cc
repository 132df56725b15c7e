// The rules that end a running job (services/gateway/job/stop_rules.h), each on its own: what
// finishes a job, what gives it up, and what keeps it going.
#include "services/gateway/job/stop_rules.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::job {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Kind = StopDecision::Kind;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);

TEST(TargetRule, FinishesWhenTheSmoothedLossReachesTheTargetLoss) {
  JobSpec spec;
  spec.target_loss = 0.5;
  JobRecord job;
  job.target_iterations = 1000;
  job.iterations_done = 10;  // far from the plan's iterations: the loss decides
  job.loss = 0.6;
  EXPECT_EQ(TargetRule().Check(job, spec).kind, Kind::kGoOn);
  job.loss = 0.5;
  EXPECT_EQ(TargetRule().Check(job, spec).kind, Kind::kFinish);
}

TEST(TargetRule, WithoutAReportedLossFinishesAtThePlannedIterations) {
  JobSpec spec;
  spec.target_loss = 0.5;
  JobRecord job;
  job.target_iterations = 1000;
  job.iterations_done = 999;
  EXPECT_FALSE(TargetRule().Check(job, spec).Stops());
  job.iterations_done = 1000;
  EXPECT_EQ(TargetRule().Check(job, spec).kind, Kind::kFinish);
}

TEST(TargetRule, NoTargetIterationsNeverFinishesOnIterations) {
  JobSpec spec;
  JobRecord job;
  job.iterations_done = 1e9;
  EXPECT_FALSE(TargetRule().Check(job, spec).Stops());
}

TEST(OutlookRule, GivesUpOnlyWhenTheOutlookIsHopelessAndSaysWhatToDo) {
  Outlook outlook;
  outlook.why = "the loss does not fall";
  EXPECT_FALSE(OutlookRule().Check(outlook).Stops());
  outlook.hopeless = true;
  const StopDecision d = OutlookRule().Check(outlook);
  EXPECT_EQ(d.kind, Kind::kGiveUp);
  EXPECT_THAT(d.why, HasSubstr("the loss does not fall"));
  EXPECT_THAT(d.why, HasSubstr("spotdnn profile fit"));
}

TEST(OutlookRule, AHopelessEstimateOfTheOutlookGivesUp) {
  // A loss that does not fall at all over the window, with a deadline: hopeless (job_outlook.h).
  std::vector<LossPoint> flat;
  for (int i = 1; i <= 10; ++i)
    flat.push_back({.elapsed_s = 1.0 * i, .iterations = 10.0 * i, .loss = 3.0});
  const Outlook o = EstimateOutlook({.target_loss = 1.0,
                                     .deadline_s = 60,
                                     .planned_iterations = 50,
                                     .iterations_done = 100,
                                     .elapsed_s = 10,
                                     .history = flat});
  ASSERT_TRUE(o.hopeless) << o.why;
  EXPECT_EQ(OutlookRule().Check(o).kind, Kind::kGiveUp);
}

TEST(StallRule, GivesUpAfterTheTimeoutWithoutANewIteration) {
  StallRule stall(absl::Minutes(10), 5, kStart, "; the instances' output is in /tmp/out");
  EXPECT_FALSE(stall.Check(5, 100, kStart + absl::Minutes(10)).Stops());  // not past it yet
  const StopDecision d = stall.Check(5, 100, kStart + absl::Minutes(10) + absl::Seconds(1));
  EXPECT_EQ(d.kind, Kind::kGiveUp);
  EXPECT_THAT(d.why, HasSubstr("no worker reported a new iteration for 10m"));
  EXPECT_THAT(d.why, HasSubstr("(5 of 100 done)"));
  EXPECT_THAT(d.why, HasSubstr("$SPOTDNN_PROFILER"));
  EXPECT_THAT(d.why, HasSubstr("output is in /tmp/out"));
}

TEST(StallRule, AnAdvanceRestartsTheTimeout) {
  StallRule stall(absl::Minutes(1), 0, kStart, "");
  EXPECT_FALSE(stall.Check(1, 100, kStart + absl::Seconds(50)).Stops());
  // 70 s after the start but 20 s after the advance.
  EXPECT_FALSE(stall.Check(1, 100, kStart + absl::Seconds(70)).Stops());
  EXPECT_TRUE(stall.Check(1, 100, kStart + absl::Seconds(111)).Stops());
}

TEST(StallRule, AFallingCountIsNoAdvance) {
  // Steps a parameter-server takeover undid lower the count: that is no progress.
  StallRule stall(absl::Minutes(1), 10, kStart, "");
  EXPECT_FALSE(stall.Check(8, 100, kStart + absl::Seconds(30)).Stops());
  EXPECT_TRUE(stall.Check(9, 100, kStart + absl::Seconds(61)).Stops());
}

TEST(StallRule, ANonPositiveTimeoutNeverGivesUp) {
  StallRule off(absl::ZeroDuration(), 0, kStart, "");
  EXPECT_FALSE(off.Check(0, 100, kStart + absl::Hours(100)).Stops());
  StallRule negative(-absl::Seconds(1), 0, kStart, "");
  EXPECT_FALSE(negative.Check(0, 100, kStart + absl::Hours(100)).Stops());
}

TEST(WorkersLeftRule, GivesUpWithNoWorkerAndNoPendingTakeover) {
  const WorkersLeftRule rule("python train.py", "; the instances' output is in /tmp/out");
  EXPECT_FALSE(rule.Check(2, false).Stops());
  EXPECT_FALSE(rule.Check(0, true).Stops());  // a takeover will launch workers
  const StopDecision d = rule.Check(0, false);
  EXPECT_EQ(d.kind, Kind::kGiveUp);
  EXPECT_THAT(d.why, HasSubstr("no worker is left running and no takeover is pending"));
  EXPECT_THAT(d.why, HasSubstr("(worker command: python train.py)"));
  EXPECT_THAT(d.why, HasSubstr("output is in /tmp/out"));
}

TEST(WorkersLeftRule, AFailedCommandsLastLinesAreInTheMessage) {
  const WorkersLeftRule rule("python train.py", "");
  const WorkerExit failed{.instance = "i-1",
                          .status = 1,
                          .how = "exit status 1",
                          .last_lines = {"Traceback (most recent call last):", "KeyError: 'x'"}};
  EXPECT_FALSE(rule.Check(1, false, &failed).Stops());
  const StopDecision d = rule.Check(0, false, &failed);
  EXPECT_THAT(d.why, HasSubstr("The command on i-1 ended with exit status 1; its last lines:\n"
                               "  Traceback (most recent call last):\n  KeyError: 'x'"));
  // A command that ended well says nothing more.
  const WorkerExit done{.instance = "i-2", .status = 0, .how = "exit status 0"};
  EXPECT_THAT(rule.Check(0, false, &done).why, Not(HasSubstr("i-2")));
}

TEST(StopDecision, OnlyGoOnKeepsTheJobRunning) {
  EXPECT_FALSE(StopDecision::GoOn().Stops());
  EXPECT_TRUE(StopDecision::Finish().Stops());
  EXPECT_TRUE(StopDecision::GiveUp("why").Stops());
  EXPECT_EQ(StopDecision::GiveUp("why").why, "why");
}

}  // namespace
}  // namespace spotdnn::job
