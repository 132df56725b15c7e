// Keeps a job's lock (JobStore::HoldJob) while the job runs.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_JOB_LOCK_KEEPER_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_JOB_LOCK_KEEPER_H_

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/db/database.h"

namespace spotdnn::job {

// Keeps a job's lock while the job runs: checks it every `period`, takes it again when it may
// have been lost (the database restarted, or the lock's connection dropped) and, when another
// gateway has taken the job meanwhile, detaches the controller so that two gateways never drive
// one job.
class JobLockKeeper {
 public:
  using TakeAgain = std::function<absl::StatusOr<std::unique_ptr<db::HeldLock>>()>;

  // `take_again` is JobStore::HoldJob (thread-safe; the lock has its own connection):
  // FAILED_PRECONDITION when another gateway holds the job (then `on_taken_by_another` runs once
  // and the keeper stops), any other error (the database unreachable) is tried again next period.
  JobLockKeeper(std::unique_ptr<db::HeldLock> lock, TakeAgain take_again,
                std::function<void()> on_taken_by_another, absl::Duration period)
      : lock_(std::move(lock)),
        take_again_(std::move(take_again)),
        on_taken_(std::move(on_taken_by_another)) {
    thread_ = std::thread([this, period] {
      std::unique_lock<std::mutex> l(mu_);
      while (!cv_.wait_for(l, std::chrono::milliseconds(absl::ToInt64Milliseconds(period)),
                           [this] { return stop_; })) {
        if (lock_ != nullptr && lock_->Check().ok()) continue;
        lock_.reset();
        auto again = take_again_();
        if (again.ok()) {
          lock_ = *std::move(again);
        } else if (absl::IsFailedPrecondition(again.status())) {
          lost_ = std::string(again.status().message());
          on_taken_();
          return;
        }  // unreachable database: try again next round
      }
    });
  }
  ~JobLockKeeper() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Why the lock was lost to another gateway ("" while it was not).
  std::string lost() {
    std::lock_guard<std::mutex> l(mu_);
    return lost_;
  }

 private:
  std::unique_ptr<db::HeldLock> lock_;  // guarded by mu_
  TakeAgain take_again_;
  std::function<void()> on_taken_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string lost_;
  std::thread thread_;
};

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_JOB_LOCK_KEEPER_H_
