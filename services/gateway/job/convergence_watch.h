// A running job's one forecast. It starts from the model the plan was made with (PriorOf: the
// same model and R, so the first forecast's steps are the plan's iterations); the job's own metric
// measurements (global step, value) then refit that model with it as the prior
// (profiler::FitConvergence with ConvergenceFitOptions::prior), so a few hundred of them move it;
// the refitted model re-predicts the global steps to the target from the current step
// (p10/p50/p90, predictor::StepsToTarget) and, at the measured speed, the finish. The forecast
// goes to the job log ("forecast" events, ForecastJson) and `spotdnn status` shows the latest
// beside the first. When the predicted finish (p50, or p90 with a confidence) passes the
// deadline, the controller re-plans a larger cluster (ShouldReplan), at most once per minimum
// interval. Pure: no clock, no I/O (the caller hands it the times).
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_CONVERGENCE_WATCH_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_CONVERGENCE_WATCH_H_

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/convergence.h"
#include "predictor/performance_model.h"
#include "predictor/types.h"
#include "profiler/convergence_fit.h"

namespace spotdnn::job {

// One prediction of the job's finish.
struct ConvergenceForecast {
  bool prior = false;  // made from the profile's model alone (no sample of the job's yet)
  // What made it: "profile" (the plan's model, before any measurement), "refit" (the model
  // refitted to the job's measurements) or "re-plan" (the current model, for the cluster a re-plan
  // or a takeover chose).
  std::string source = "profile";
  double elapsed_s = 0;    // when, seconds from the job's start
  double step = 0;         // global steps done then
  int points = 0;          // the job's measurements the refit used
  int workers = 0;         // |N| it predicts for
  double r = 0;            // eq. 5's R of the cluster
  double steps_per_s = 0;  // the measured (or planned) global steps per second
  bool reachable = false;  // false: the model does not reach the target (no finish)
  // Global steps from the job's start to the target: the 10th, 50th and 90th percentiles.
  double iterations_p10 = 0, iterations_p50 = 0, iterations_p90 = 0;
  // The finish at the measured speed, seconds from the job's start.
  double finish_p10_s = 0, finish_p50_s = 0, finish_p90_s = 0;
  double rmse = 0;                    // of the refitted mean curve against the points
  predictor::ConvergenceModel model;  // the model it predicts with
};

// How the watch refits and when it asks for a re-plan.
struct ConvergenceWatchOptions {
  std::string metric = "loss";
  bool higher_is_better = false;
  double target = 0;      // the metric's target value
  double deadline_s = 0;  // from the job's start; 0: none (never a re-plan)
  // With a confidence (slo.confidence > 0) the p90 finish is held to the deadline, else the p50.
  double confidence = 0;
  int min_points = 20;          // measurements before the first refit
  int refit_every_points = 20;  // then a refit after this many new ones
  // The prior's weight in samples (global steps with a measured value). A measurement stands for
  // the steps since the one before (a running job's loss is polled, not read at every step), so
  // the fit is given prior_samples / (steps per measurement) as
  // ConvergenceFitOptions::prior_points.
  double prior_samples = 50;
  double min_replan_interval_s = 60;  // between two re-plans
  // A re-plan is asked only when the finish passes the deadline by this share of it (a forecast
  // just over the line by its noise does not buy a cluster).
  double replan_margin = 0.02;
  // Refits in a row that must find the finish past the deadline before a re-plan: one young fit
  // (a few measurements extrapolated far) does not buy a cluster.
  int late_refits = 2;
  int draws = 1000;          // StepsToTarget's Monte Carlo runs
  size_t max_points = 2000;  // older measurements are thinned (every other one) past this
};

// The fit and the prediction the watch uses (tests give fakes; production: the real ones).
using ConvergenceFitter = std::function<absl::StatusOr<profiler::ConvergenceFit>(
    absl::Span<const profiler::ConvergenceRun>, const profiler::ConvergenceFitOptions&)>;
using StepsPredictor =
    std::function<predictor::StepQuantiles(const predictor::ConvergenceModel&, int workers,
                                           double r, double target, double from_step, int draws)>;

// The prior of a job's target: the convergence the planner predicts `target` with for a cluster of
// WA batch `wa_batch` and R `convergence_coefficient` (predictor::ConvergenceForTarget: eq. 3's
// g1..g5 for a loss when the profile has them, else its fitted model of the metric), with the R
// it is evaluated at. NOT_FOUND when the profile has neither.
absl::StatusOr<predictor::TargetConvergence> PriorOf(const predictor::WorkloadProfile& profile,
                                                     const predictor::Target& target,
                                                     double wa_batch,
                                                     double convergence_coefficient);

class ConvergenceWatch {
 public:
  ConvergenceWatch(predictor::ConvergenceModel prior, ConvergenceWatchOptions options,
                   ConvergenceFitter fit = profiler::FitConvergence,
                   StepsPredictor predict = predictor::StepsToTarget);

  // A measurement: the metric's `value` at global step `step` (ignored unless finite; ignored at
  // the last one's step; one before it rewinds first: a parameter-server restore undid the steps
  // past its checkpoint, and the curve is measured again from there).
  void Add(double step, double value);
  // Drops the measurements at or past `step`.
  void Rewind(double step);
  // The last measurement's global step (-1: none).
  double last_step() const { return points_.empty() ? -1 : points_.back().first; }
  // Measurements kept.
  size_t points() const { return points_.size(); }

  // The prior's forecast from the start (the "original" one), for `workers` at `steps_per_s`.
  ConvergenceForecast PriorForecast(int workers, double r, double steps_per_s) const;

  // A new forecast when a refit is due (min_points measurements, then refit_every_points more
  // since the last) or `force`; nullopt otherwise. A failed fit keeps the last model (the error
  // is in `last_error()`). `step` is the global steps done at `elapsed_s`.
  std::optional<ConvergenceForecast> Update(double elapsed_s, double step, int workers, double r,
                                            double steps_per_s, bool force = false);

  // The forecast of the current model (the latest refit's, else the prior) for `workers` at
  // `steps_per_s` from `step` at `elapsed_s`, without a refit (a re-plan's new cluster).
  // The job stands at global step `step` on the curve of `from_workers` (R `from_r`); on another
  // cluster's curve it stands where that curve reaches the same mean value (EquivalentStep).
  ConvergenceForecast Current(double elapsed_s, double step, int workers, double r,
                              double steps_per_s, int from_workers, double from_r) const {
    return Forecast(model_, elapsed_s, step, workers, r, steps_per_s,
                    EquivalentStep(step, from_workers, from_r, workers, r));
  }
  // Where a job at global step `step` of a cluster of `from_workers` (R `from_r`) stands on the
  // curve of `workers` (R `r`): the step at which that curve's mean reaches the same value (the
  // convergence state is the value reached, not the steps counted). `step` itself for the same
  // cluster, and for a schedule that drops the rate at fixed global steps.
  double EquivalentStep(double step, int from_workers, double from_r, int workers, double r) const;

  // Whether `forecast` (the latest Update's) asks for a re-plan at `elapsed_s`: the deadline is
  // set, the target is unreachable or the finish (p50, or p90 with a confidence) is past it by the
  // margin, as it was in the late_refits refits before, and the last re-plan was at least
  // min_replan_interval_s ago.
  bool ShouldReplan(const ConvergenceForecast& forecast, double elapsed_s) const;
  // A re-plan was made at `elapsed_s`.
  void MarkReplanned(double elapsed_s) { last_replan_s_ = elapsed_s; }
  // The finish the deadline is held to: p90 with a confidence, else p50.
  double HeldFinish(const ConvergenceForecast& forecast) const;
  // Whether `forecast` finishes past the deadline (by the margin) or never.
  bool Late(const ConvergenceForecast& forecast) const;

  // The global steps from the job's start that `workers` need to reach the target under the
  // current model, at the held quantile (p90 with a confidence, else p50), counted from `step`;
  // nullopt when unreachable.
  std::optional<double> StepsNeeded(int workers, double r, double step) const {
    return StepsNeeded(workers, r, step, workers, r);
  }
  // The same for a cluster change: the job stands at `step` of `from_workers` (R `from_r`), and
  // the rest is counted on the new cluster's curve from the equivalent step.
  std::optional<double> StepsNeeded(int workers, double r, double step, int from_workers,
                                    double from_r) const;

  const predictor::ConvergenceModel& model() const { return model_; }
  const std::string& last_error() const { return last_error_; }
  const ConvergenceWatchOptions& options() const { return options_; }

 private:
  // `from`: where the job stands on this cluster's curve (default: `step`).
  ConvergenceForecast Forecast(const predictor::ConvergenceModel& model, double elapsed_s,
                               double step, int workers, double r, double steps_per_s,
                               double from = -1) const;

  predictor::ConvergenceModel prior_;
  predictor::ConvergenceModel model_;  // the latest refit (the prior before the first)
  ConvergenceWatchOptions options_;
  ConvergenceFitter fit_;
  StepsPredictor predict_;
  std::vector<std::pair<double, double>> points_;
  size_t refitted_at_ = 0;  // points_.size() at the last refit (0: none yet)
  double last_rmse_ = 0;
  double last_replan_s_ = -1e300;
  int late_streak_ = 0;  // refits in a row that were Late
  std::string last_error_;
};

// The forecast as the job log's "forecast" event detail (one JSON object), and back.
// DATA_LOSS naming the text when it is not a forecast.
std::string ForecastJson(const ConvergenceForecast& forecast);
absl::StatusOr<ConvergenceForecast> ParseForecastJson(const std::string& json);

// The job log's event kind for forecasts.
inline constexpr char kForecastEvent[] = "forecast";

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_CONVERGENCE_WATCH_H_
