// The one backoff policy: ceilings, the three jitters, Retry-After as a floor (and its limit),
// attempt and total-wait bounds, and the options' validation.
#include "base/backoff.h"

#include <algorithm>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::base {
namespace {

using ::testing::HasSubstr;

BackoffOptions Fixed(double random, Jitter jitter = Jitter::kFull) {
  return {.max_attempts = 0,
          .initial = absl::Milliseconds(100),
          .max = absl::Seconds(1),
          .jitter = jitter,
          .random = [random] { return random; }};
}

TEST(BackoffPolicyTest, CeilingsDoubleFromInitialUpToTheCap) {
  const BackoffPolicy policy(Fixed(0.5));
  EXPECT_EQ(policy.Ceiling(1), absl::Milliseconds(100));
  EXPECT_EQ(policy.Ceiling(2), absl::Milliseconds(200));
  EXPECT_EQ(policy.Ceiling(4), absl::Milliseconds(800));
  EXPECT_EQ(policy.Ceiling(5), absl::Seconds(1));
  EXPECT_EQ(policy.Ceiling(5000), absl::Seconds(1));  // no overflow far past the cap
}

TEST(BackoffPolicyTest, JitterModes) {
  EXPECT_EQ(BackoffPolicy(Fixed(0.5, Jitter::kNone)).Delay(3), absl::Milliseconds(400));
  EXPECT_EQ(BackoffPolicy(Fixed(0.5, Jitter::kFull)).Delay(3), absl::Milliseconds(200));
  EXPECT_EQ(BackoffPolicy(Fixed(0.0, Jitter::kEqual)).Delay(3), absl::Milliseconds(200));
  EXPECT_EQ(BackoffPolicy(Fixed(0.5, Jitter::kEqual)).Delay(3), absl::Milliseconds(300));
}

TEST(BackoffPolicyTest, DefaultRandomIsFullJitterUnderTheCeiling) {
  const BackoffPolicy policy({.initial = absl::Milliseconds(100), .max = absl::Seconds(1)});
  std::vector<absl::Duration> seen;
  for (int i = 0; i < 200; ++i) {
    const absl::Duration d = policy.Delay(3);
    EXPECT_GE(d, absl::ZeroDuration());
    EXPECT_LE(d, absl::Milliseconds(400));
    EXPECT_LE(policy.Delay(30), absl::Seconds(1));
    seen.push_back(d);
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_GT(std::unique(seen.begin(), seen.end()) - seen.begin(), 100);  // jittered
}

TEST(BackoffPolicyTest, RetryAfterIsAFloorUpToTwiceTheCap) {
  const BackoffPolicy policy(Fixed(0.0));
  EXPECT_EQ(policy.Delay(1, absl::Milliseconds(700)), absl::Milliseconds(700));
  EXPECT_EQ(policy.Delay(1, absl::Hours(1)), absl::Seconds(2));
  EXPECT_EQ(BackoffPolicy(Fixed(1.0, Jitter::kNone)).Delay(2, absl::Milliseconds(50)),
            absl::Milliseconds(200));  // the backoff when it is longer
}

TEST(BackoffTest, StopsAfterMaxAttempts) {
  BackoffOptions options = Fixed(0.5);
  options.max_attempts = 3;
  const BackoffPolicy policy(options);
  Backoff backoff(policy);
  EXPECT_EQ(backoff.Failed(), absl::Milliseconds(50));
  EXPECT_EQ(backoff.Failed(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.Failed(), std::nullopt);
  EXPECT_EQ(backoff.attempts(), 3);
}

TEST(BackoffTest, RetryNowCountsAnAttemptWithoutWaiting) {
  BackoffOptions options = Fixed(0.5);
  options.max_attempts = 2;
  const BackoffPolicy policy(options);
  Backoff backoff(policy);
  EXPECT_TRUE(backoff.FailedRetryNow());
  EXPECT_EQ(backoff.waited(), absl::ZeroDuration());
  EXPECT_EQ(backoff.Failed(), std::nullopt);
}

TEST(BackoffTest, StopsWhenTheTotalWaitWouldPassTheLimit) {
  BackoffOptions options = Fixed(1.0, Jitter::kNone);
  options.max_total_wait = absl::Milliseconds(350);
  const BackoffPolicy policy(options);
  Backoff backoff(policy);
  EXPECT_EQ(backoff.Failed(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.Failed(), absl::Milliseconds(200));
  EXPECT_EQ(backoff.Failed(), std::nullopt);  // 300 ms waited, 400 more would pass 350
  EXPECT_EQ(backoff.waited(), absl::Milliseconds(300));
}

TEST(BackoffTest, SuccessRestartsFromTheFirstCeiling) {
  const BackoffPolicy policy(Fixed(1.0, Jitter::kNone));
  Backoff backoff(policy);
  (void)backoff.Failed();
  EXPECT_EQ(backoff.Failed(), absl::Milliseconds(200));
  backoff.Succeeded();
  EXPECT_EQ(backoff.Failed(), absl::Milliseconds(100));
}

TEST(BackoffPolicyTest, SleepUsesTheInjectedSleepAndSkipsZero) {
  std::vector<absl::Duration> slept;
  BackoffOptions options = Fixed(0.5);
  options.sleep = [&](absl::Duration d) { slept.push_back(d); };
  const BackoffPolicy policy(options);
  policy.Sleep(absl::ZeroDuration());
  policy.Sleep(absl::Milliseconds(3));
  EXPECT_EQ(slept, std::vector<absl::Duration>{absl::Milliseconds(3)});
}

TEST(ValidateBackoffTest, NamesTheFieldAndValue) {
  EXPECT_TRUE(ValidateBackoff({}).ok());
  absl::Status negative = ValidateBackoff({.max_attempts = -1}, "retry");
  EXPECT_TRUE(absl::IsInvalidArgument(negative));
  EXPECT_THAT(negative.message(), HasSubstr("retry.max_attempts = -1"));
  absl::Status inverted =
      ValidateBackoff({.initial = absl::Seconds(2), .max = absl::Seconds(1)}, "poller");
  EXPECT_THAT(inverted.message(), HasSubstr("poller.initial = 2s"));
  EXPECT_THAT(ValidateBackoff({.multiplier = 0.5}).message(), HasSubstr("multiplier = 0.5"));
}

}  // namespace
}  // namespace spotdnn::base
