// Convergence you can plan on: how many global steps a cluster needs to reach a target in any
// metric with a direction (a loss <= L, an accuracy >= A), through the job's learning-rate
// schedule, with the run-to-run spread as an 80% interval.
//
// The model works on the metric's error e: the loss itself, 1 - accuracy for an accuracy, and
// ceiling - value for another higher-is-better metric. The error's mean over runs is
//   e(j) = base(j_w) * m(j),
// where j is the global step, j_w = max(0, j - warm-up / 2), base is the curve at the schedule's
// first learning rate (kSaturating: floor N^floor_exp + amplitude exp(-j / (scale N^scale_exp)),
// N workers; kEq3: the paper's eq. 3 in the error), and m(j) scales it by the learning rate: for
// step decay the product over the drops J_i <= j of (rho_i + (1 - rho_i) exp(-(j - J_i) / tau))
// (each drop takes the error to rho_i of what it was, within `drop_time_steps` = tau), for cosine
// rho + (1 - rho) lr(j - tau) / lr0 (rho: what is left of the error once the rate is near 0).
// A run is seen only when it evaluates (every `eval_interval_steps`), each evaluation off the mean
// by Gaussian noise of sd noise_sd N^noise_exp (before the first drop) or noise_sd_after
// N^noise_exp_after (after it). Of that noise's variance, the share `noise_run_share` is the run's
// own offset, drawn once per run (a run above the mean stays above: runs of one size differ in
// their hardware, parameter servers and data order), the rest fresh at each evaluation. The steps
// to a target are the first evaluation that reaches it, interpolated linearly from the one before
// (as a person reading the curve would): their median and 10th/90th percentiles over runs are the
// prediction's p50 and 80% interval.
#ifndef SPOTDNN_PREDICTOR_CONVERGENCE_H_
#define SPOTDNN_PREDICTOR_CONVERGENCE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::predictor {

// Most step drops one schedule may have.
inline constexpr int kMaxScheduleDrops = 64;

// A learning-rate schedule, as a profile declares it or the fit detects it.
struct LrSchedule {
  enum class Kind { kConstant, kStepDecay, kCosine };
  Kind kind = Kind::kConstant;
  std::vector<double> drop_steps;    // kStepDecay: global steps of the drops, increasing
  std::vector<double> drop_factors;  // kStepDecay: the rate is multiplied by each, in (0, 1]
  double cosine_horizon_steps = 0;   // kCosine: the rate falls as cos to 0 at this global step
  double warmup_steps = 0;           // linear warm-up before the schedule (any kind); 0 = none
  bool detected = false;             // the fit found the drops in the curves (not declared)

  // The rate at global step j relative to the first rate (1 before any drop; 0 <= r <= 1 after
  // warm-up).
  double RateAt(double step) const;
  // INVALID_ARGUMENT naming the field unless the numbers are usable.
  absl::Status Validate() const;
};

// Parses "constant", "step:32000*0.1,48000*0.1" (drops at those global steps, by those
// factors; "step:32000" means a factor of 0.1), "cosine:64000", each optionally preceded by
// "warmup:500+" ("warmup:500+cosine:64000"). INVALID_ARGUMENT names the part and the value.
absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view text);
// The text ParseLrSchedule reads back.
std::string LrScheduleText(const LrSchedule& schedule);

// The convergence of one metric (see the file comment).
struct ConvergenceModel {
  std::string metric = "loss";    // "loss", "accuracy", or a sample's metric name
  bool higher_is_better = false;  // accuracy and the like
  double ceiling = 1;             // higher-is-better: error = ceiling - value (accuracy: 1)

  enum class Form { kSaturating, kEq3 };
  Form form = Form::kSaturating;
  // kSaturating: base(j) = floor N^floor_exp + amplitude exp(-(j / (scale N^scale_exp))^shape).
  double floor = 0, floor_exp = 0, amplitude = 0, scale = 1, scale_exp = 0, shape = 1;
  // kEq3: base(j) = g3 sqrt((R + g4) N) / (j + g1) + g5 (g2 = 0: one batch), R of eq. 5.
  double g1 = 0, g3 = 0, g4 = 0, g5 = 0;

  LrSchedule schedule;
  std::vector<double> drop_ratios;  // kStepDecay: rho_i per drop (as schedule.drop_steps), (0, 1]
  double rho = 1;                   // kCosine: error left of base when the rate is ~0, in (0, 1]
  double drop_time_steps = 0;       // tau: how fast the error follows the rate, global steps
  // How the ratios change with the cluster size: logit(rho_i(N)) = logit(rho_i) + this x ln N
  // (rho_i is the ratio of one worker; staler clusters keep more of their error).
  double drop_ratio_exp = 0;

  // Run-to-run spread of one evaluation about the mean, in the error's unit.
  double noise_sd = 0, noise_exp = 0;              // before the first drop
  double noise_sd_after = 0, noise_exp_after = 0;  // after it
  // Of the noise's variance, the share that is a run's own and persists from one evaluation to
  // the next (the correlation of a run's deviations from the mean), in [0, 0.99]; 0 = every
  // evaluation draws afresh.
  double noise_run_share = 0;
  // The runs' evaluation interval in global steps, interval + per_worker N for N workers (an
  // asynchronous cluster's global step runs ahead of its chief's count by about a step per worker
  // at each evaluation); 0 = every step (no gaps).
  double eval_interval_steps = 0;
  double eval_interval_per_worker_steps = 0;

  int runs = 0;           // runs the fit used
  int points = 0;         // evaluations the fit used
  std::string fitted_on;  // what the fit saw, e.g. "283 runs, 1-8 workers"
  // The best value any evaluation of the fitted runs reached (the highest accuracy, the lowest
  // loss), in the metric's unit; unset when not known (a declared model). A target beyond it is
  // an extrapolation (IsExtrapolation).
  std::optional<double> best_value;
  // A synchronous workload's steps against its global batch B, the critical-batch law of
  // McCandlish et al. (S(B) = S_min (1 + B_crit / B)): the curve above describes the global batch
  // `reference_global_batch` (0: not known, the steps then do not depend on B); at another B the
  // steps to any target are the curve's times (1 + B_crit / B) / (1 + B_crit / B_ref). Unset
  // critical_batch: not fitted (only the reference batch is predicted).
  std::optional<double> critical_batch;
  double reference_global_batch = 0;

  // INVALID_ARGUMENT naming the field unless the numbers are usable.
  absl::Status Validate() const;
  // The critical-batch law's part of Validate: critical_batch finite and >= 0, and given only with
  // a reference_global_batch, itself in [0, kMaxGlobalBatch]; fields named after `where`.
  absl::Status ValidateBatchLaw(absl::string_view where) const;
  // The error of a metric value (0 = perfect), and back.
  double ErrorOf(double value) const { return higher_is_better ? ceiling - value : value; }
  double ValueOf(double error) const { return higher_is_better ? ceiling - error : error; }
  // True when `target` (in the metric's unit) is beyond the best value the runs reached by more
  // than a small tolerance (2% of the best's error): the model then predicts what the data never
  // showed. False without a best_value.
  bool IsExtrapolation(double target) const;
};

// The model in one line: "error = 0.12 N^0.10 + 0.80 exp(-j / (2500 N^0.70)); step:32000*0.1
// (settles to 0.56 within 28 steps); spread 0.015 N^0.80 before the drop, 0.005 N^0.50 after;
// evaluated every 4001 steps".
std::string DescribeConvergence(const ConvergenceModel& model);

// The mean metric value after `step` global steps on `workers` workers (convergence coefficient
// `r`, eq. 5; used by kEq3 only).
double MeanValueAt(const ConvergenceModel& model, int workers, double r, double step);

// The first global step at which the mean curve of `workers` workers (R `r`) reaches `value` (in
// the metric's unit), by doubling then bisection; +infinity when it does not within 1e15 steps.
// Where a running job stands on another cluster's curve: the step that cluster reaches the same
// value at.
double MeanStepAt(const ConvergenceModel& model, int workers, double r, double value);

// Global steps to a target, over runs.
struct StepQuantiles {
  bool reachable = false;  // false: fewer than half of the runs reach it within the horizon
  double p10 = 0, p50 = 0, p90 = 0;
  double reached_fraction = 0;  // runs that reach it within the horizon
};

// Steps for `workers` workers to bring the metric to `target` (a value in the metric's unit:
// at or above it when higher_is_better, else at or below), counted from `from_step` (a running
// job's global step; 0 from the start), by a deterministic Monte Carlo over `draws` runs.
// The horizon is the schedule's end or 20x the steps the mean curve needs, whichever is larger.
// An unreachable p90 is +infinity.
StepQuantiles StepsToTarget(const ConvergenceModel& model, int workers, double r, double target,
                            double from_step = 0, int draws = 2000);

}  // namespace spotdnn::predictor

#endif  // SPOTDNN_PREDICTOR_CONVERGENCE_H_
