// The deadline guard's decisions, in fake time: on-demand while spot is short and the
// deadline needs it, waiting while the slack allows, probing spot at most once a probe interval
// with backoff, back to spot when a probe gets capacity. The policy is the one deadline_policy.h
// makes (a stub until the real policies land; these tests hold for any safe policy's choices
// here: no slack left, or plenty of it).
#include "services/gateway/job/deadline_guard.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::job {
namespace {

constexpr char kType[] = "p2.xlarge";

class DeadlineGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto guard = DeadlineGuard::Create("ours", {.probe_every = absl::Minutes(1),
                                                .probe_max = absl::Minutes(4),
                                                .check_every = absl::Seconds(5)});
    ASSERT_TRUE(guard.ok()) << guard.status();
    guard_ = *std::move(guard);
  }

  // The job at `at_s` seconds: `time_left_s` to the deadline, `work_left_s` of work.
  GuardNow Now(double at_s, double time_left_s, double work_left_s, int spot, int on_demand) {
    GuardNow now{.now = t0_ + absl::Seconds(at_s),
                 .time_left_s = time_left_s,
                 .work_left_s = work_left_s,
                 .changeover_s = 60};
    now.types[kType] = {.running_spot = spot,
                        .running_on_demand = on_demand,
                        .spot_price_per_hour = 0.27,
                        .on_demand_price_per_hour = 0.9};
    return now;
  }

  std::unique_ptr<DeadlineGuard> guard_;
  const absl::Time t0_ = absl::FromUnixSeconds(1'800'000'000);
};

TEST_F(DeadlineGuardTest, NothingHappensWhileSpotCoversTheJobOnItsLine) {
  EXPECT_TRUE(guard_->Tick(Now(0, 3600, 1800, 1, 0)).empty());
  EXPECT_FALSE(guard_->OnFallback());
}

TEST_F(DeadlineGuardTest, SpotGoneWithoutSlackLaunchesOnDemandAtOnce) {
  guard_->OnSpotShort(kType, 1, 0, t0_);
  EXPECT_TRUE(guard_->OnFallback());
  // 1 h of work, 1 h 1 min left: no time to wait.
  std::vector<GuardAction> actions = guard_->Tick(Now(0, 3660, 3600, 0, 0));
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].instance_type, kType);
  EXPECT_EQ(actions[0].trigger, "capacity");
  EXPECT_EQ(actions[0].launch_on_demand, 1);
  EXPECT_EQ(actions[0].launch_spot, 0);
  EXPECT_EQ(actions[0].input.spot_available, 0);
  EXPECT_EQ(actions[0].decision.on_demand, 1);
  EXPECT_FALSE(actions[0].decision.reason.empty());
}

TEST_F(DeadlineGuardTest, SpotGoneWithSlackWaitsThenFallsBackBeforeItIsTooLate) {
  guard_->OnSpotShort(kType, 1, 0, t0_);
  // 10 h left for 1 h of work: waiting for spot costs nothing yet.
  std::vector<GuardAction> first = guard_->Tick(Now(0, 36000, 3600, 0, 0));
  ASSERT_EQ(first.size(), 1u);  // the decision to wait is logged once
  EXPECT_EQ(first[0].launch_on_demand, 0);
  EXPECT_EQ(first[0].decision.on_demand, 0);
  EXPECT_TRUE(guard_->Tick(Now(6, 35994, 3600, 0, 0)).empty());  // same decision: not repeated
  // Later, nothing running and the slack gone: on-demand, whatever the probes said.
  bool launched = false;
  double left = 35994;
  for (double at = 12; at < 40000 && !launched; at += 6, left -= 6) {
    for (const GuardAction& a : guard_->Tick(Now(at, left, 3600, 0, 0))) {
      if (a.probe) guard_->OnSpotShort(kType, 1, 0, t0_ + absl::Seconds(at));
      if (a.launch_on_demand > 0) {
        launched = true;
        // Never later than the deadline allows: on-demand alone still meets it.
        EXPECT_GE(left, 3600 + 60) << "at " << at;
      }
    }
  }
  EXPECT_TRUE(launched);
}

TEST_F(DeadlineGuardTest, ProbesAtMostOncePerIntervalAndBacksOffAfterARefusal) {
  guard_->OnSpotShort(kType, 1, 0, t0_);
  ASSERT_EQ(guard_->Tick(Now(0, 3660, 3600, 0, 0)).front().launch_on_demand, 1);
  std::vector<double> probes;
  for (double at = 5; at <= 600; at += 5) {
    for (const GuardAction& a : guard_->Tick(Now(at, 100000, 3600, 0, 1))) {
      if (!a.probe) continue;
      probes.push_back(at);
      EXPECT_EQ(a.launch_spot, 1);
      EXPECT_EQ(a.input.spot_available, -1);                      // unknown until the cloud answers
      guard_->OnSpotShort(kType, 1, 0, t0_ + absl::Seconds(at));  // refused
    }
  }
  // After 1 min, then 2 min later, then 4 (the most) and 4 again.
  EXPECT_EQ(probes, (std::vector<double>{60, 180, 420}));
}

TEST_F(DeadlineGuardTest, AProbeThatGetsSpotStopsOnDemandAndTheTypeLeavesFallback) {
  guard_->OnSpotShort(kType, 1, 0, t0_);
  ASSERT_EQ(guard_->Tick(Now(0, 3660, 3600, 0, 0)).front().launch_on_demand, 1);
  std::vector<GuardAction> probe = guard_->Tick(Now(60, 20000, 3000, 0, 1));
  ASSERT_EQ(probe.size(), 1u);
  EXPECT_TRUE(probe[0].probe);
  EXPECT_EQ(probe[0].launch_spot, 1);
  EXPECT_EQ(probe[0].stop_on_demand, 1);  // once the spot launch got it all
  EXPECT_EQ(probe[0].decision.spot, 1);
  EXPECT_EQ(probe[0].decision.on_demand, 0);
  guard_->OnSpotLaunched(kType);
  // Spot runs, on-demand stopped: nothing more to do, and the type is back on spot.
  EXPECT_TRUE(guard_->Tick(Now(61, 19999, 3000, 1, 0)).empty());
  EXPECT_FALSE(guard_->OnFallback());
}

TEST_F(DeadlineGuardTest, BehindThePlanAsksThePolicyWithoutLaunchingSpot) {
  GuardNow now = Now(100, 3660, 3600, 1, 0);
  now.behind = true;
  for (const GuardAction& a : guard_->Tick(now)) {
    EXPECT_EQ(a.trigger, "behind-plan");
    EXPECT_EQ(a.launch_spot, 0);  // spot gaps are the takeovers' to fill
  }
}

TEST_F(DeadlineGuardTest, AnUnknownPolicyIsRefused) {
  auto guard = DeadlineGuard::Create("clairvoyant", {});
  EXPECT_EQ(guard.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(guard.status().message(), ::testing::HasSubstr("clairvoyant"));
}

}  // namespace
}  // namespace spotdnn::job

namespace spotdnn::job {
namespace {

// A policy that would rather wait for spot than pay on-demand (0 spot, 0 on-demand) while spot is
// still gone: the on-demand worker is not stopped into a gap; it goes when spot replaces it.
class WaitingPolicyTest : public DeadlineGuardTest {};

TEST_F(WaitingPolicyTest, OnDemandIsNotStoppedUntilSpotCoversTheWorkers) {
  guard_->OnSpotShort(kType, 1, 0, t0_);
  ASSERT_EQ(guard_->Tick(Now(0, 3660, 3600, 0, 0)).front().launch_on_demand, 1);
  // Plenty of slack later, spot still short: whatever the policy says, nothing stops.
  for (double at = 5; at < 59; at += 5) {
    for (const GuardAction& a : guard_->Tick(Now(at, 100000, 600, 0, 1))) {
      EXPECT_EQ(a.stop_on_demand, 0) << "at " << at << ": " << a.decision.reason;
    }
  }
}

}  // namespace
}  // namespace spotdnn::job
