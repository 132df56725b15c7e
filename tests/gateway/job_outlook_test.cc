// The pure rules of a running job's outlook: when a job is stopped for its loss, what it
// predicts once the plan's iterations are exceeded, and whether it is on the plan's line.
#include "services/gateway/job/job_outlook.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::job {
namespace {

using ::testing::HasSubstr;

// `n` points one second apart at `pace` iterations/s, the loss falling from `start` by `per_it`
// per iteration.
std::vector<LossPoint> Line(int n, double pace, double start, double per_it) {
  std::vector<LossPoint> out;
  for (int i = 1; i <= n; ++i) {
    out.push_back(
        {.elapsed_s = 1.0 * i, .iterations = pace * i, .loss = start - per_it * pace * i});
  }
  return out;
}

TEST(JobOutlook, ASlowlyFallingLossThatCanStillMakeTheDeadlineRunsOn) {
  // The job: 3.9 s into a 120 s deadline, far past 3x the 49 predicted iterations, the
  // loss falling: at 50 it/s and 0.001 per iteration from 3.0 it reaches 2.0 at 1000 iterations,
  // at 20 s.
  const auto history = Line(4, 50, 3.0, 0.001);
  const Outlook o = EstimateOutlook({.target_loss = 2.0,
                                     .deadline_s = 120,
                                     .planned_iterations = 49,
                                     .iterations_done = 200,
                                     .elapsed_s = 4,
                                     .history = history});
  EXPECT_FALSE(o.hopeless) << o.why;
  // Too few points to extrapolate yet: no re-prediction, nothing hopeless.
  const auto more = Line(10, 50, 3.0, 0.001);
  const Outlook p = EstimateOutlook({.target_loss = 2.0,
                                     .deadline_s = 120,
                                     .planned_iterations = 49,
                                     .iterations_done = 500,
                                     .elapsed_s = 10,
                                     .history = more});
  EXPECT_FALSE(p.hopeless) << p.why;
  ASSERT_TRUE(p.iterations_to_target.has_value());
  EXPECT_NEAR(*p.iterations_to_target, 1000, 1);
  EXPECT_NEAR(*p.seconds_to_target, 20, 0.1);
  EXPECT_NEAR(p.iterations_per_s, 50, 1e-9);
  // Re-predicted from the measurements, since the plan's 49 are exceeded.
  EXPECT_NEAR(p.predicted_iterations, 1000, 1);
  ASSERT_TRUE(p.eta_s.has_value());
  EXPECT_NEAR(*p.eta_s, 10, 0.1);
}

TEST(JobOutlook, StopsWhenEvenTheStraightLineMissesTheDeadline) {
  // 0.0001 per iteration at 50 it/s from 3.0: 2.0 at 10000 iterations, 200 s > 120 s.
  const auto history = Line(10, 50, 3.0, 0.0001);
  const Outlook o = EstimateOutlook({.target_loss = 2.0,
                                     .deadline_s = 120,
                                     .planned_iterations = 49,
                                     .iterations_done = 500,
                                     .elapsed_s = 10,
                                     .history = history});
  EXPECT_TRUE(o.hopeless);
  EXPECT_THAT(o.why, HasSubstr("past the 120 s deadline"));
  EXPECT_NEAR(*o.seconds_to_target, 200, 0.5);
}

TEST(JobOutlook, ALossThatDoesNotFallIsHopelessAndAPassedDeadlineToo) {
  const auto flat = Line(10, 50, 3.0, 0);
  const Outlook o = EstimateOutlook({.target_loss = 2.0,
                                     .deadline_s = 120,
                                     .planned_iterations = 49,
                                     .iterations_done = 500,
                                     .elapsed_s = 10,
                                     .history = flat});
  EXPECT_TRUE(o.hopeless);
  EXPECT_THAT(o.why, HasSubstr("has not fallen"));
  EXPECT_EQ(o.predicted_iterations, 0);  // exceeded, and nothing to extrapolate: unknown
  const Outlook late = EstimateOutlook({.target_loss = 2.0,
                                        .deadline_s = 5,
                                        .planned_iterations = 49,
                                        .iterations_done = 500,
                                        .elapsed_s = 10,
                                        .history = Line(2, 50, 3.0, 0.001)});
  EXPECT_TRUE(late.hopeless);
  EXPECT_THAT(late.why, HasSubstr("has passed"));
}

TEST(JobOutlook, NoisyLossesThatStillFallDoNotStopAJob) {
  // A loss falling 0.0005 per iteration with +-0.05 of noise, whose least-squares slope over the
  // window comes out flat or rising by chance: the optimistic end of the slope still falls fast
  // enough for the deadline, so the job runs on.
  std::vector<LossPoint> noisy;
  const double jitter[] = {0.05, -0.05, 0.04, -0.03, 0.05, -0.05, 0.05, -0.04};
  for (int i = 0; i < 8; ++i) {
    noisy.push_back({.elapsed_s = 1.0 * i,
                     .iterations = 10.0 * i,
                     .loss = 2.5 - 0.0005 * 10 * i + jitter[i] + (i >= 4 ? 0.06 : 0)});
  }
  const Outlook o = EstimateOutlook({.target_loss = 2.0,
                                     .deadline_s = 1000,
                                     .planned_iterations = 40,
                                     .iterations_done = 70,
                                     .elapsed_s = 7,
                                     .history = noisy});
  ASSERT_TRUE(o.loss_slope.has_value());
  EXPECT_GE(*o.loss_slope, 0);        // the point estimate says "not falling"...
  EXPECT_FALSE(o.hopeless) << o.why;  // ...but not beyond its noise
}

TEST(JobOutlook, NothingIsHopelessWithoutADeadlineALossTargetOrALoss) {
  const auto flat = Line(10, 50, 3.0, 0);
  EXPECT_FALSE(EstimateOutlook({.target_loss = 2.0,
                                .planned_iterations = 49,
                                .iterations_done = 500,
                                .elapsed_s = 10,
                                .history = flat})
                   .hopeless);
  EXPECT_FALSE(EstimateOutlook({.deadline_s = 5,
                                .planned_iterations = 49,
                                .iterations_done = 500,
                                .elapsed_s = 10,
                                .history = flat})
                   .hopeless);
  auto no_loss = Line(10, 50, 0, 0);
  const Outlook o = EstimateOutlook({.target_loss = 2.0,
                                     .deadline_s = 5,
                                     .planned_iterations = 600,
                                     .iterations_done = 500,
                                     .elapsed_s = 10,
                                     .history = no_loss});
  EXPECT_FALSE(o.hopeless);
  EXPECT_FALSE(o.loss_slope.has_value());
  EXPECT_EQ(o.predicted_iterations, 600);  // the plan's, not yet exceeded
  EXPECT_NEAR(*o.eta_s, 2, 1e-9);
}

TEST(JobOutlook, TheSmoothingIsTheNamedMovingAverage) {
  EXPECT_EQ(SmoothLoss(0, 0.2), 0.2);
  EXPECT_NEAR(SmoothLoss(0.2, 0.1), 0.15, 1e-12);
}

TEST(JobOutlook, OnTrackAgainstThePlansLine) {
  EXPECT_TRUE(OnTrack(50, 5, 100, 10));
  EXPECT_TRUE(OnTrack(46, 5, 100, 10));
  EXPECT_FALSE(OnTrack(30, 5, 100, 10));
  EXPECT_FALSE(OnTrack(99, 11, 100, 10));  // past the predicted end, not there
  EXPECT_TRUE(OnTrack(0, 0, 100, 10));
}

}  // namespace
}  // namespace spotdnn::job
