#include "base/clock.h"

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"

namespace spotdnn::base {

absl::Time RealClock::Now() { return absl::Now(); }

absl::Duration RealClock::SteadyNow() {
  return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

void RealClock::Sleep(absl::Duration d) { absl::SleepFor(d); }

bool RealClock::WaitFor(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                        absl::Duration timeout, const std::function<bool()>& pred) {
  return cv.wait_for(lock, absl::ToChronoNanoseconds(std::max(timeout, absl::ZeroDuration())),
                     pred);
}

RealClock& RealClock::Get() {
  static RealClock* clock = new RealClock();  // lives as long as the process
  return *clock;
}

FakeClock::FakeClock(absl::Time start) : now_(start), steady_(absl::ZeroDuration()) {}

absl::Time FakeClock::Now() {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

absl::Duration FakeClock::SteadyNow() {
  std::lock_guard<std::mutex> lock(mu_);
  return steady_;
}

void FakeClock::Sleep(absl::Duration d) { Advance(d); }

void FakeClock::Advance(absl::Duration d) {
  std::vector<std::shared_ptr<Waiter>> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (d > absl::ZeroDuration()) {
      now_ += d;
      steady_ += d;
    }
    waiting = waiting_;
  }
  // Each waiter's own mutex is taken before it is notified: a waiter that read the old time
  // holds it until it blocks, so the notification cannot fall between its check and its wait.
  for (const std::shared_ptr<Waiter>& w : waiting) {
    std::lock_guard<std::mutex> lock(*w->mu);
    if (w->active) w->cv->notify_all();
  }
}

bool FakeClock::WaitFor(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                        absl::Duration timeout, const std::function<bool()>& pred) {
  auto w = std::make_shared<Waiter>(Waiter{lock.mutex(), &cv});
  absl::Duration deadline;
  {
    std::lock_guard<std::mutex> g(mu_);
    deadline = steady_ + timeout;
    waiting_.push_back(w);
  }
  bool result = pred();
  while (!result && SteadyNow() < deadline) {
    cv.wait(lock);
    result = pred();
  }
  w->active = false;  // under *lock.mutex(), as Advance reads it
  {
    std::lock_guard<std::mutex> g(mu_);
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), w));
  }
  return result;
}

int FakeClock::waiters() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(waiting_.size());
}

}  // namespace spotdnn::base
