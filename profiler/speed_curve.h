// The cluster-speed curve of one workload (steps/s against the number of workers, eqs. 2 and
// 6-9, or the shared parameter server's model) and its held-out validation (`spotdnn profile
// validate-speed`). Non-linear least squares is Ceres Solver's, with a Cauchy loss.
#ifndef SPOTDNN_PROFILER_SPEED_CURVE_H_
#define SPOTDNN_PROFILER_SPEED_CURVE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/types.h"
#include "profiler/fitting.h"
#include "profiler/sample.h"

namespace spotdnn::profiler {

// One run of a series: |N| identical workers and the cluster speeds (global steps/s) sampled.
struct SpeedRun {
  int workers = 0;
  std::vector<double> steps_per_s{};
  // The run's observed speed: the median of its samples.
  double Observed() const;
};

// All runs of one workload on one GPU type.
struct SpeedSeries {
  std::string name{};
  std::vector<SpeedRun> runs{};  // by workers, ascending
};

// Eqs. 2 and 6-9 for |N| identical workers in units the data determine: T_1 = T_comp + 2S/B_req
// is one worker's iteration time, c = (2S/B_req)/T_1 its communication share, r = B_ps/B_req.
// Then T(N) = T_1 (1 - c + c B_req / B_wk(N)) and the cluster speed is N / T(N) steps/s.
struct SpeedCurve {
  double step_time_s = 0;                       // T_1
  double comm_share = 0;                        // c
  double bandwidth_ratio = 0;                   // r = B_ps / B_req
  predictor::ContentionModel contention{0, 1};  // P of eq. 9
  // Predicted cluster speed, global steps/s, with `workers` workers.
  double StepsPerS(int workers) const;
};

// A fitted curve and its quality on the runs it was fitted to (observed = run medians).
struct SpeedCurveFit {
  SpeedCurve curve;
  FitQuality quality;
};

// Fits T_1, c and r to every sample of `runs` (log residuals, Cauchy loss). The contention
// probability is held at P = 1 (a1 = 0, b1 = 1: each worker gets B_ps/|N| once the PS is the
// bottleneck), because with c and r free a1 and b1 are not identifiable from a few cluster sizes.
// FAILED_PRECONDITION with fewer than 3 distinct worker counts.
absl::StatusOr<SpeedCurveFit> FitSpeedCurve(absl::Span<const SpeedRun> runs);

// The shared-ps model (predictor::SharedPsModel) for one series of identical workers: the speed
// of N workers is N / T(N), T(N) = predictor::SharedPsIterationTime(N, z, d, kappa).
struct SharedPsCurve {
  double compute_time_s = 0;  // z
  double service_time_s = 0;  // d
  double queueing = 0;        // kappa
  // Predicted cluster speed, global steps/s, with `workers` workers.
  double StepsPerS(int workers) const;
};

// Fits z and d per series and one kappa shared by all of them (the servers' queueing is a property
// of the setup the series ran on) to each run's observed speed: log residuals, Cauchy loss, several
// starts. FAILED_PRECONDITION naming the series with fewer than 3 distinct worker counts.
absl::StatusOr<std::vector<SharedPsCurve>> FitSharedPsCurves(
    absl::Span<const std::vector<SpeedRun>> series_runs, absl::Span<const std::string> names);

// Groups samples with cluster_steps_per_s into series by job id: a job "<dir>/<series>worker<N>"
// is run N of series "<dir>/<series>". Samples of jobs not named that way are left out.
std::vector<SpeedSeries> SpeedSeriesFromSamples(absl::Span<const Sample> samples);

// One observed and predicted cluster speed.
struct SpeedPoint {
  int workers = 0;
  double observed = 0;  // median steps/s of the run
  double predicted = 0;
  double error_pct = 0;   // |predicted - observed| / observed * 100
  bool held_out = false;  // not among the fit counts
};

// Which model ValidateSpeed fits.
enum class SpeedModel {
  kSharedPs,  // SharedPsCurve per series, one kappa for all
  kPaper,     // SpeedCurve (eqs. 2, 6-9) per series
};

// One series' validation.
struct SeriesValidation {
  std::string series{};
  SpeedCurveFit fit;        // kPaper: the curve; both: the quality on the fit runs
  SharedPsCurve shared_ps;  // kSharedPs
  std::vector<SpeedPoint> points{};
  double held_out_mape = 0;
  int held_out_points = 0;
};

// Every series' validation and the MAPE over all held-out points.
struct SpeedValidation {
  std::vector<SeriesValidation> series{};
  double overall_mape = 0;
  int held_out_points = 0;
};

// For each series: fits on the runs whose worker count is in `fit_workers` only, predicts every
// other run and reports the errors. FAILED_PRECONDITION when a series has fewer than 3 of the fit
// counts or nothing is held out; INVALID_ARGUMENT for bad fit_workers.
absl::StatusOr<SpeedValidation> ValidateSpeed(absl::Span<const SpeedSeries> series,
                                              absl::Span<const int> fit_workers,
                                              SpeedModel model = SpeedModel::kSharedPs);

}  // namespace spotdnn::profiler

#endif  // SPOTDNN_PROFILER_SPEED_CURVE_H_
