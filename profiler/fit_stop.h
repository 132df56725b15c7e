// The stop check of the fit running on this thread (FitWorkload's and ValidateFit's `stop`):
// every Ceres solve of that fit (fitting.cc, speed_curve.cc, cluster_fit.cc) polls it at each
// iteration, so a fit honours its caller's deadline without every sub-fit carrying it. And the
// one set of solve options those solves share. Internal to the profiler library.
#ifndef SPOTDNN_PROFILER_FIT_STOP_H_
#define SPOTDNN_PROFILER_FIT_STOP_H_

#include <functional>

#include "absl/status/status.h"
#include "ceres/ceres.h"

namespace spotdnn::profiler {

// Installs `stop` (may be empty) as this thread's fit stop check for the scope's lifetime; the
// previous one (an enclosing fit's) is restored on exit.
class FitStopScope {
 public:
  explicit FitStopScope(const std::function<absl::Status()>& stop);
  ~FitStopScope();
  FitStopScope(const FitStopScope&) = delete;
  FitStopScope& operator=(const FitStopScope&) = delete;

 private:
  const std::function<absl::Status()>* previous_stop_;
  absl::Status previous_stopped_;
};

// Polls this thread's stop check (once it said stop, it is not asked again) and returns what it
// said: OK to go on, or the status that ends the fit. OK without a scope or a check.
absl::Status PollFitStop();

// What the stop check said last (OK when it has not said stop): a solve that ended early because
// of it is a stopped fit, not a failed one.
absl::Status FitStopStatus();

// Adds the stop check to a solve's options (nothing when this thread's fit has none).
void AddFitStopCallback(ceres::Solver::Options& options);

// The one set of solve options every fit of the profiler uses (dense QR, silent, one thread, this
// thread's stop check), with at most `max_num_iterations` iterations.
ceres::Solver::Options FitSolverOptions(int max_num_iterations);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_FIT_STOP_H_
