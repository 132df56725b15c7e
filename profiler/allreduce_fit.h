// Fitting the synchronous all-reduce step-time model (predictor/allreduce.h) from synchronous
// runs, Pollux's form beside it (Qiao et al., OSDI'21, adaptdl goodput.py) for comparison, and the
// check that fits on small runs and predicts the larger ones.
#ifndef SPOTDNN_PROFILER_ALLREDUCE_FIT_H_
#define SPOTDNN_PROFILER_ALLREDUCE_FIT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/types.h"
#include "profiler/fitting.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// One synchronous configuration: a placement, a local batch and its measured times.
struct AllReduceRun {
  std::vector<int> gpus_per_instance;
  double local_batch = 0;
  double step_s = 0;
  double sync_s = 0;  // the all-reduce's share of the step; 0 when not measured
  // The run lists only its instances and ranks (a scalability row): its ranks spread as evenly as
  // they go, whatever the split.
  bool spread_evenly = false;
  int Ranks() const;
  int Instances() const { return static_cast<int>(gpus_per_instance.size()); }
  // Every instance has the same GPUs, or the run says it spread them evenly.
  bool Even() const;
  // "4x2" for 2 instances of 4, "1+1+3+4" otherwise.
  std::string Describe() const;
};

// The synchronous samples of `gpu_type` as runs: one per (job, placement, local batch), with the
// median step and all-reduce times of its samples.
std::vector<AllReduceRun> AllReduceRunsOf(absl::Span<const Sample> samples,
                                          const std::string& gpu_type);

// The all-reduce model of `gpu_type` fitted to `runs` in two stages: the compute (a_c, b_c, d)
// from step minus all-reduce time (from single-rank runs when no run measured its all-reduce),
// then the all-reduce terms and gamma on the log step time of the multi-rank runs, from several
// starts. A term the runs do not determine (a placement the runs never vary) stays 0 and its
// FitQuality note says which and why; without a run on more than one instance the model has no
// cross-instance terms (cross_instance = false). FAILED_PRECONDITION with no usable run.
// The spread of each fitted term is its standard error (1 sigma) from the fit's Jacobian at the
// optimum, scaled by the residuals' variance; a term left 0 or held (not identified) has none.
// The worst residuals are the kWorstResiduals runs the model fits worst, by relative error.
struct AllReduceFit {
  predictor::AllReduceModel model;
  std::vector<FitQuality> quality;
  std::vector<ParameterSpread> spread;  // "allreduce[T4].a_c", ... in AllReduceModel's order
  std::vector<FitResidual> worst;       // largest |error| first
};
absl::StatusOr<AllReduceFit> FitAllReduce(const std::string& gpu_type,
                                          absl::Span<const AllReduceRun> runs);

// Pollux's step time: T_comp = alpha_c + beta_c b; T_net = alpha + beta max(R - 2, 0) with
// (alpha_r, beta_r) on one instance and (alpha_n, beta_n) on several; T = (T_comp^gamma +
// T_net^gamma)^(1/gamma), fitted jointly on the log step time with Pollux's regularisers.
struct PolluxModel {
  double alpha_c = 0, beta_c = 0, alpha_r = 0, beta_r = 0, alpha_n = 0, beta_n = 0, gamma = 1;
  double StepTime(const AllReduceRun& run) const;
};
absl::StatusOr<PolluxModel> FitPollux(absl::Span<const AllReduceRun> runs);

// Fit on the runs of at most `max_gpus` ranks, predict every larger run spread evenly over its
// instances: observed against both models' predictions.
struct AllReduceCheckRow {
  AllReduceRun run;
  double predicted_s = 0;
  double pollux_s = 0;
};
struct AllReduceCheck {
  std::string gpu_type;
  int fitted_runs = 0;
  std::vector<AllReduceCheckRow> rows;
  double mape = 0;         // %, this model
  double pollux_mape = 0;  // %, Pollux's form
  predictor::AllReduceModel model;
};
// FAILED_PRECONDITION when no run is small enough to fit on or none is left to predict.
absl::StatusOr<AllReduceCheck> CheckAllReduce(const std::string& gpu_type,
                                              absl::Span<const AllReduceRun> runs, int max_gpus);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_ALLREDUCE_FIT_H_
