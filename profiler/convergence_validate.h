// Validating the convergence model on held-out cluster sizes (`spotdnn profile
// validate-convergence`): fit on runs of some sizes, predict the steps each other size needs to
// reach each target, and compare with what its runs took.
#ifndef SPOTDNN_PROFILER_CONVERGENCE_VALIDATE_H_
#define SPOTDNN_PROFILER_CONVERGENCE_VALIDATE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "profiler/convergence_fit.h"

namespace spotdnn::profiler {

// The global step at which a run first reaches `target` (at or above it when
// `higher_is_better`), interpolated linearly between the evaluation before and the first one that
// reaches it; nullopt when the run never does.
std::optional<double> StepsToReach(const ConvergenceRun& run, double target, bool higher_is_better);

// One held-out cluster size and target.
struct ConvergenceCheck {
  int workers = 0;
  double target = 0;
  int runs = 0;                    // runs of that size
  int reached = 0;                 // of them, runs that reached the target
  std::optional<double> observed;  // median over the runs that reached it (most must)
  predictor::StepQuantiles predicted;
  double error_pct = 0;  // |p50 - observed| / observed, when both exist
  bool inside = false;   // observed in [p10, p90]
};

struct ConvergenceValidation {
  std::vector<ConvergenceCheck> checks;
  std::vector<double> target_mape;  // per target, over the checks with both values
  double mape = 0;                  // over every such check
  int compared = 0;                 // checks with both values
  int inside = 0;                   // of them, observed inside the 80% interval
  std::vector<std::string> notes;   // the fits' notes (once each)
  bool in_sample = false;           // every size was fitted on, and checked as well
};

// Fits on the runs of `fit_sizes` and checks every other size; with `fit_sizes` empty, leaves
// each size out in turn (fits on all the others); when `fit_sizes` names every size, checks them
// all in sample (ConvergenceValidation::in_sample). INVALID_ARGUMENT when a size is unknown.
absl::StatusOr<ConvergenceValidation> ValidateConvergence(absl::Span<const ConvergenceRun> runs,
                                                          const std::vector<int>& fit_sizes,
                                                          const std::vector<double>& targets,
                                                          const ConvergenceFitOptions& options);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_CONVERGENCE_VALIDATE_H_
