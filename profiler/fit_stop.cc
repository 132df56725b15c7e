#include "profiler/fit_stop.h"

#include <utility>

namespace spotdnn::profiler {
namespace {

thread_local const std::function<absl::Status()>* fit_stop = nullptr;
thread_local absl::Status fit_stopped;

class StopCallback final : public ceres::IterationCallback {
 public:
  ceres::CallbackReturnType operator()(const ceres::IterationSummary&) override {
    return PollFitStop().ok() ? ceres::SOLVER_CONTINUE : ceres::SOLVER_ABORT;
  }
};

}  // namespace

FitStopScope::FitStopScope(const std::function<absl::Status()>& stop)
    : previous_stop_(fit_stop), previous_stopped_(std::move(fit_stopped)) {
  fit_stop = stop ? &stop : nullptr;
  fit_stopped = absl::OkStatus();
}

FitStopScope::~FitStopScope() {
  fit_stop = previous_stop_;
  fit_stopped = std::move(previous_stopped_);
}

absl::Status PollFitStop() {
  if (fit_stop != nullptr && fit_stopped.ok()) fit_stopped = (*fit_stop)();
  return fit_stopped;
}

absl::Status FitStopStatus() { return fit_stopped; }

void AddFitStopCallback(ceres::Solver::Options& options) {
  if (fit_stop == nullptr) return;
  thread_local StopCallback callback;
  options.callbacks.push_back(&callback);
}

ceres::Solver::Options FitSolverOptions(int max_num_iterations) {
  ceres::Solver::Options options;
  options.linear_solver_type = ceres::DENSE_QR;
  options.max_num_iterations = max_num_iterations;
  options.logging_type = ceres::SILENT;
  options.minimizer_progress_to_stdout = false;
  options.num_threads = 1;
  AddFitStopCallback(options);
  return options;
}

}  // namespace spotdnn::profiler
