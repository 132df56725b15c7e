// base::Clock: the real clock's waits, and the fake clock's time, sleeps and waiters.
#include "base/clock.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace spotdnn::base {
namespace {

using ::spotdnn::testing_util::Eventually;

TEST(RealClock, WaitForReturnsThePredicateAtItsTimeoutOrWhenNotified) {
  RealClock& clock = RealClock::Get();
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::unique_lock<std::mutex> lock(mu);
  const absl::Duration before = clock.SteadyNow();
  EXPECT_FALSE(clock.WaitFor(lock, cv, absl::Milliseconds(5), [&] { return ready; }));
  EXPECT_GE(clock.SteadyNow() - before, absl::Milliseconds(5));
  std::thread setter([&] {
    std::lock_guard<std::mutex> g(mu);
    ready = true;
    cv.notify_all();
  });
  EXPECT_TRUE(clock.WaitFor(lock, cv, absl::Seconds(10), [&] { return ready; }));
  lock.unlock();
  setter.join();
  EXPECT_GT(clock.NowUnixMs(), 1'600'000'000'000);
}

TEST(FakeClock, MovesOnlyWhenTold) {
  FakeClock clock(absl::FromUnixSeconds(1000));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(1000));
  EXPECT_EQ(clock.NowUnixMs(), 1'000'000);
  EXPECT_EQ(clock.SteadyMs(), 0);
  clock.Advance(absl::Milliseconds(250));
  clock.Sleep(absl::Milliseconds(750));  // a sleep advances it
  clock.Advance(-absl::Seconds(5));      // never backwards
  EXPECT_EQ(clock.NowUnixMs(), 1'001'000);
  EXPECT_EQ(clock.SteadyMs(), 1000);
}

TEST(FakeClock, AWaiterTimesOutWhenTheTimeReachesItsDeadline) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    std::unique_lock<std::mutex> lock(mu);
    result = clock.WaitFor(lock, cv, absl::Seconds(10), [] { return false; }) ? 1 : 0;
  });
  ASSERT_TRUE(Eventually([&] { return clock.waiters() == 1; }));
  clock.Advance(absl::Seconds(9));  // not yet: it waits on
  {
    // Once the advance has notified it (under its mutex), the waiter is blocked again.
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(result, -1);
  }
  clock.Advance(absl::Seconds(1));
  waiter.join();
  EXPECT_EQ(result, 0);
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClock, AWaiterWakesWhenNotifiedWithoutTimePassing) {
  FakeClock clock;
  std::mutex mu;
  std::condition_variable cv;
  bool ready = false;
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    std::unique_lock<std::mutex> lock(mu);
    result = clock.WaitFor(lock, cv, absl::Hours(1), [&] { return ready; }) ? 1 : 0;
  });
  ASSERT_TRUE(Eventually([&] { return clock.waiters() == 1; }));
  {
    std::lock_guard<std::mutex> lock(mu);
    ready = true;
  }
  cv.notify_all();
  waiter.join();
  EXPECT_EQ(result, 1);
  EXPECT_EQ(clock.SteadyMs(), 0);
}

}  // namespace
}  // namespace spotdnn::base
