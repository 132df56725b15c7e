// JobLockKeeper: a job's lock that may be lost (its database connection dropped) is taken again,
// and a gateway whose job another gateway took meanwhile stops driving it.
#include "services/gateway/job/job_lock_keeper.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace spotdnn::job {
namespace {

using ::spotdnn::testing_util::Eventually;

class FakeLock final : public db::HeldLock {
 public:
  explicit FakeLock(std::atomic<bool>& held) : held_(held) {}
  absl::Status Check() override {
    return held_ ? absl::OkStatus() : absl::UnavailableError("lock \"job/j\": connection lost");
  }

 private:
  std::atomic<bool>& held_;
};

TEST(JobLockKeeper, ALostLockIsTakenAgainUntilAnotherGatewayHasTheJob) {
  std::atomic<bool> held{true};
  std::atomic<int> takes{0};
  std::atomic<int> outcome{0};  // 0: unreachable, 1: granted, 2: another gateway holds it
  std::atomic<int> detached{0};
  JobLockKeeper keeper(
      std::make_unique<FakeLock>(held),
      [&]() -> absl::StatusOr<std::unique_ptr<db::HeldLock>> {
        ++takes;
        if (outcome == 1) {
          held = true;
          return std::make_unique<FakeLock>(held);
        }
        if (outcome == 2) {
          return absl::FailedPreconditionError("job \"j\" is being run by another gateway");
        }
        return absl::UnavailableError("the database is unreachable");
      },
      [&] { ++detached; }, absl::Milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(takes, 0);  // held: nothing to do
  // The lock's connection drops while the database is away: tried again and again, job kept.
  held = false;
  ASSERT_TRUE(Eventually([&] { return takes >= 3; }, absl::Seconds(5)));
  EXPECT_EQ(detached, 0);
  // The database is back: taken again, and kept.
  outcome = 1;
  ASSERT_TRUE(Eventually([&] { return held.load(); }, absl::Seconds(5)));
  const int after = takes;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(takes, after);
  EXPECT_EQ(keeper.lost(), "");
  // Lost again, and another gateway took the job meanwhile: this one stops driving it.
  outcome = 2;
  held = false;
  ASSERT_TRUE(Eventually([&] { return detached == 1; }, absl::Seconds(5)));
  EXPECT_NE(keeper.lost().find("another gateway"), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(detached, 1);
}

}  // namespace
}  // namespace spotdnn::job
