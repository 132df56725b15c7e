// Steps to a target as a function of the global batch, for a synchronous workload whose global
// batch follows its cluster (a profile's "global_batch": "scale"): the critical-batch law of
// McCandlish et al. ("An empirical model of large-batch training", 2018),
//   S(B) = S_min (1 + B_crit / B),
// below B_crit doubling the batch nearly halves the steps, above it the steps stop falling. Fitted
// per metric from runs at several global batches (Pollux's validation-<B>.csv): one S_min per
// target, one B_crit for all of them. Checked by leaving each batch out in turn.
#ifndef SPOTDNN_PROFILER_BATCH_SCALING_H_
#define SPOTDNN_PROFILER_BATCH_SCALING_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "profiler/convergence_fit.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// One run's curve and the global batch it trained at.
struct BatchRun {
  double global_batch = 0;
  ConvergenceRun run;
};

// The runs of `samples` for `metric` (ConvergenceRunsOf), each with its samples' batch_size as its
// global batch; runs without one are left out.
std::vector<BatchRun> BatchRunsOf(absl::Span<const Sample> samples, absl::string_view metric);

struct BatchScalingFit {
  double critical_batch = 0;                     // B_crit, samples
  std::vector<std::optional<double>> min_steps;  // S_min per target; nullopt: too few batches
  int points = 0;                                // (batch, target) pairs fitted
  double rmse_log = 0;                           // of log steps
  // The steps to targets[i] at global batch `batch`; nullopt without S_min for it.
  std::optional<double> StepsAt(size_t target, double batch) const;
};

// Fits the law to the steps at which each batch's runs (their median) first reach each target
// (StepsToReach). A target needs two batches that reach it; B_crit is searched over [smallest
// batch / 100, largest x 100] on a log grid and refined. FAILED_PRECONDITION with fewer than two
// batches that reach some target.
absl::StatusOr<BatchScalingFit> FitBatchScaling(absl::Span<const BatchRun> runs,
                                                const std::vector<double>& targets,
                                                bool higher_is_better);

// One left-out batch and target.
struct BatchCheck {
  double global_batch = 0;
  double target = 0;
  std::optional<double> observed;   // steps its runs took (median), nullopt: never reached
  std::optional<double> predicted;  // from the fit on the other batches
  double critical_batch = 0;        // of that fit
  double error_pct = 0;             // |predicted - observed| / observed, when both exist
};

struct BatchValidation {
  std::vector<BatchCheck> checks;
  std::vector<double> target_mape;  // per target, over its checks with both values
  double mape = 0;                  // over every such check
  int compared = 0;
};

// Leaves each global batch out in turn: fits on the others, predicts its steps to each target.
// INVALID_ARGUMENT without targets; FAILED_PRECONDITION with fewer than three batches.
absl::StatusOr<BatchValidation> ValidateBatchScaling(absl::Span<const BatchRun> runs,
                                                     const std::vector<double>& targets,
                                                     bool higher_is_better);

// The levels at which the critical batch is fitted when no targets are given: 60%, 80%, 90% and
// 95% of the way from where the runs start (the median first value) to the value every global
// batch's runs reach (the worst of the batches' best values). Empty when the runs do not improve.
std::vector<double> BatchScalingTargets(absl::Span<const BatchRun> runs, bool higher_is_better);

struct FitQuality;

// The convergence models of a synchronous workload (profile fit on synchronous samples), one per
// metric the runs log. A synchronous step at global batch B is one step at B, so every run is one
// worker. The runs are the jobs with synchronous samples (their global batch: local batch x
// ranks) and the jobs of one worker (imported curves, validation-<B>.csv); parameter-server runs
// of several workers are left out. By the global batches the runs trained at:
// - two or more, with a target (BatchScalingTargets) that two of them reach: the critical-batch
//   law's B_crit is fitted across them (FitBatchScaling), every run's steps are carried to the
//   reference batch (the median of the batches, the lower of the two middle ones) by the law,
//   S x (1 + B_crit / B_ref) / (1 + B_crit / B), and the model is fitted on them all: its
//   critical_batch and reference_global_batch say so, and its spread holds the law's misfit;
// - one (or no law fits): the model of that batch's runs (the reference's), reference_global_batch
//   that batch, no critical_batch;
// - none known: the model of every run, reference_global_batch 0 (steps independent of B).
// One FitQuality row per metric ("convergence[validation]"), and one for the law
// ("critical_batch[validation]": RMSE of log steps, the batches and targets in the note).
std::vector<predictor::ConvergenceModel> FitSyncConvergences(
    absl::Span<const Sample> samples, absl::Span<const predictor::ConvergenceModel> declared,
    std::vector<FitQuality>* quality);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_BATCH_SCALING_H_
