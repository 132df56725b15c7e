// Time as the domain code reads it, injected so that tests run in simulated time: the wall clock
// (Now), a monotonic reading for intervals (SteadyNow: leases, fences, pacing), sleeping, and a
// condition-variable wait with a timeout on this clock (what the detector's threads block in).
//
// RealClock is the system's clocks; FakeClock is time that moves only when told (Advance, or Sleep
// in a single-threaded simulation), and wakes the threads waiting on it when it does.
#ifndef SPOTDNN_BASE_CLOCK_H_
#define SPOTDNN_BASE_CLOCK_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/time/time.h"

namespace spotdnn::base {

// Time as the code sees it. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // The wall clock.
  virtual absl::Time Now() = 0;
  // A monotonic reading (its origin is arbitrary): what intervals are measured on. It never goes
  // backwards, whatever the wall clock does.
  virtual absl::Duration SteadyNow() = 0;
  // Waits `d` (a fake clock advances instead).
  virtual void Sleep(absl::Duration d) = 0;
  // Waits on `cv` (with `lock` held, as std::condition_variable::wait_for) until `pred` holds or
  // `timeout` has passed on this clock; returns pred(). Whoever makes `pred` true notifies `cv`.
  virtual bool WaitFor(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                       absl::Duration timeout, const std::function<bool()>& pred) = 0;

  // Now() in milliseconds since the Unix epoch.
  int64_t NowUnixMs() { return absl::ToUnixMillis(Now()); }
  // SteadyNow() in milliseconds.
  int64_t SteadyMs() { return absl::ToInt64Milliseconds(SteadyNow()); }
};

// The system's clocks: absl::Now and std::chrono::steady_clock.
class RealClock final : public Clock {
 public:
  absl::Time Now() override;
  absl::Duration SteadyNow() override;
  void Sleep(absl::Duration d) override;
  bool WaitFor(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
               absl::Duration timeout, const std::function<bool()>& pred) override;

  // The process's one real clock (never destroyed): the default where none is injected.
  static RealClock& Get();
};

// Time that moves only when told. Now() starts at `start`; SteadyNow() at zero and moves with it.
// Waiters (WaitFor) wake when the time reaches their deadline through Advance or Sleep, or when
// their condition variable is notified. A mutex and condition variable passed to WaitFor must
// outlive any Advance or Sleep that runs while that wait ends (tests advance from the thread that
// also destroys what waits).
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000));
  absl::Time Now() override;
  absl::Duration SteadyNow() override;
  // Advances the time by `d` (single-threaded simulations sleep through time this way).
  void Sleep(absl::Duration d) override;
  bool WaitFor(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
               absl::Duration timeout, const std::function<bool()>& pred) override;

  // Moves the time forward by `d` (nothing for a negative one) and wakes every waiter.
  void Advance(absl::Duration d);
  // Threads blocked in WaitFor now.
  int waiters();

 private:
  struct Waiter {
    std::mutex* mu;
    std::condition_variable* cv;
    bool active = true;  // guarded by *mu
  };
  std::mutex mu_;
  absl::Time now_;                                // guarded by mu_
  absl::Duration steady_;                         // guarded by mu_
  std::vector<std::shared_ptr<Waiter>> waiting_;  // guarded by mu_
};

}  // namespace spotdnn::base

#endif  // SPOTDNN_BASE_CLOCK_H_
