// Fitting the convergence model (predictor/convergence.h) from runs' metric curves: the mean
// curve through the learning-rate schedule (declared, or step drops detected in the curves), and
// the run-to-run spread per cluster size. Also used live: `spotdnn run` refits a job's own samples
// with the profile's model as the prior.
#ifndef SPOTDNN_PROFILER_CONVERGENCE_FIT_H_
#define SPOTDNN_PROFILER_CONVERGENCE_FIT_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/convergence.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// One run's curve of one metric.
struct ConvergenceRun {
  std::string job;  // the job (and run) it came from
  int workers = 1;  // |N|
  // False when the samples never said the cluster's size (no cluster_workers, no composition, no
  // worker ids): `workers` is then 1 by default, and a fit over runs of known sizes leaves the
  // run out rather than take it for one worker.
  bool workers_known = true;
  double r = 0;  // eq. 5's R of its cluster (0 when not known: homogeneous is assumed)
  std::vector<std::pair<double, double>> points;  // (global step, metric value), step increasing
};

// The runs of `samples` for `metric` ("loss", "accuracy" or a metric name): one per job, global
// steps as GlobalSteps counts them, workers from the composition or cluster_workers, else the
// number of distinct worker ids, else unknown (workers_known false). Samples without the metric
// are left out; runs with fewer than 2 points too.
std::vector<ConvergenceRun> ConvergenceRunsOf(absl::Span<const Sample> samples,
                                              absl::string_view metric);

struct ConvergenceFitOptions {
  std::string metric = "loss";
  bool higher_is_better = false;
  double ceiling = 1;
  predictor::ConvergenceModel::Form form = predictor::ConvergenceModel::Form::kSaturating;
  // Declared schedule; unset: constant, unless step drops are detected in the curves.
  std::optional<predictor::LrSchedule> schedule;
  // A live refit: the profile's model, which the runs' points pull towards themselves; with few
  // points the prior dominates (`prior_points` is its weight in points).
  std::optional<predictor::ConvergenceModel> prior;
  double prior_points = 50;
};

struct ConvergenceFit {
  predictor::ConvergenceModel model;
  double rmse = 0;       // of the mean curve against the points, in the metric's unit
  double r_squared = 0;  // 1 - SS_res / SS_tot of the same
  double mape = 0;       // mean absolute percentage error of the fitted error against the points'
  int points = 0;
  std::vector<std::string> notes;  // e.g. "step drop detected at global step 32000 (x0.11)"
};

// Fits the model. FAILED_PRECONDITION when no run has at least 3 points (without a prior) or the
// metric is in no sample.
absl::StatusOr<ConvergenceFit> FitConvergence(absl::Span<const ConvergenceRun> runs,
                                              const ConvergenceFitOptions& options);

struct FitQuality;

// The metrics `samples` log at all: "loss", "accuracy", then each named metric.
std::vector<std::string> LoggedMetrics(absl::Span<const Sample> samples);

// How FitConvergences fits `metric` from `runs`: its direction (loss lower is better, accuracy
// higher, another metric the way its curves go) and a model in `declared` of the same metric's
// form and schedule. FAILED_PRECONDITION for a metric that rises but is not a fraction in [0, 1]
// (no ceiling to measure its error from).
absl::StatusOr<ConvergenceFitOptions> ConvergenceOptionsFor(
    const std::string& metric, absl::Span<const ConvergenceRun> runs,
    absl::Span<const predictor::ConvergenceModel> declared);

// A fit's quality note: what it saw, the schedule, its notes.
std::string ConvergenceFitNote(const ConvergenceFit& fit);

// Marks `q` identified, with the fit's figures and its note.
void SetFitQuality(const ConvergenceFit& fit, FitQuality& q);

// A convergence model for every metric the samples log at 3 or more steps of a run: "loss"
// (lower is better), "accuracy" (higher, ceiling 1) and each metric.NAME whose direction the
// curves show (values in [0, 1] when higher is better). A model in `declared` of the same metric
// gives its schedule (and form). One FitQuality row per metric ("convergence[accuracy]"), with the
// fit's notes; a metric that fails to fit gets an unidentified row saying why.
std::vector<predictor::ConvergenceModel> FitConvergences(
    absl::Span<const Sample> samples, absl::Span<const predictor::ConvergenceModel> declared,
    std::vector<FitQuality>* quality);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_CONVERGENCE_FIT_H_
