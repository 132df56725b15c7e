#include "profiler/speed_curve.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ceres/ceres.h"
#include "predictor/equations.h"
#include "profiler/fit_common.h"
#include "profiler/fit_stop.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {
namespace {

using fit_internal::BandwidthFraction;
using fit_internal::kLogResidualScale;
using fit_internal::kMaxSolverIterations;
using fit_internal::Median;
using fit_internal::Unidentified;

ceres::Solver::Options SolverOptions() { return FitSolverOptions(kMaxSolverIterations); }

// log(predicted / observed) of one cluster-speed sample under SpeedCurve's model.
struct SpeedResidual {
  SpeedResidual(int workers, double observed, double p)
      : workers(workers), log_observed(std::log(observed)), p(p) {}
  template <typename T>
  bool operator()(const T* log_t1, const T* c, const T* r, T* residual) const {
    const T x = BandwidthFraction(T(p), r[0], workers);
    const T t = exp(log_t1[0]) * (T(1) - c[0] + c[0] / x);
    residual[0] = log(T(workers) / t) - T(log_observed);
    return true;
  }
  int workers;
  double log_observed;
  double p;
};

}  // namespace

double SpeedRun::Observed() const { return Median(steps_per_s); }

double SpeedCurve::StepsPerS(int workers) const {
  const double p = std::clamp(contention.a1 * std::sqrt(double(workers)) + contention.b1, 0.0, 1.0);
  const double x = BandwidthFraction(p, bandwidth_ratio, workers);
  return workers / (step_time_s * (1 - comm_share + comm_share / x));
}

absl::StatusOr<SpeedCurveFit> FitSpeedCurve(absl::Span<const SpeedRun> runs) {
  std::set<int> counts;
  const SpeedRun* smallest = nullptr;
  for (const SpeedRun& r : runs) {
    if (r.workers <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("workers = ", r.workers, ": must be >= 1"));
    }
    if (std::none_of(r.steps_per_s.begin(), r.steps_per_s.end(), [](double v) { return v > 0; })) {
      continue;
    }
    counts.insert(r.workers);
    if (smallest == nullptr || r.workers < smallest->workers) smallest = &r;
  }
  if (counts.size() < 3) {
    return Unidentified(absl::StrCat(
        "contention needs runs with at least 3 distinct worker counts; got ", counts.size()));
  }
  const SpeedCurve fixed;  // P = 1
  const double p = std::clamp(fixed.contention.a1 + fixed.contention.b1, 0.0, 1.0);
  SpeedCurveFit best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (double r0 : {1.2, 2.0, 3.0, 5.0, 8.0, 16.0, 64.0}) {
    double log_t1 = std::log(smallest->workers / smallest->Observed());
    double c = 0.3, r = r0;
    ceres::Problem problem;
    for (const SpeedRun& run : runs) {
      for (double v : run.steps_per_s) {
        if (!(v > 0)) continue;
        problem.AddResidualBlock(new ceres::AutoDiffCostFunction<SpeedResidual, 1, 1, 1, 1>(
                                     new SpeedResidual(run.workers, v, p)),
                                 new ceres::CauchyLoss(kLogResidualScale), &log_t1, &c, &r);
      }
    }
    problem.SetParameterLowerBound(&c, 0, 0.0);
    problem.SetParameterUpperBound(&c, 0, 0.999);
    problem.SetParameterLowerBound(&r, 0, 1.0);
    problem.SetParameterUpperBound(&r, 0, 1e4);
    ceres::Solver::Summary summary;
    ceres::Solve(SolverOptions(), &problem, &summary);
    if (summary.IsSolutionUsable() && summary.final_cost < best_cost) {
      best_cost = summary.final_cost;
      best.curve = fixed;
      best.curve.step_time_s = std::exp(log_t1);
      best.curve.comm_share = c;
      best.curve.bandwidth_ratio = r;
    }
  }
  if (!std::isfinite(best_cost)) {
    return absl::InternalError("speed fit: the solver found no usable solution");
  }
  std::vector<double> observed, predicted;
  for (const SpeedRun& run : runs) {
    if (!counts.count(run.workers)) continue;
    observed.push_back(run.Observed());
    predicted.push_back(best.curve.StepsPerS(run.workers));
  }
  best.quality = Quality("speed curve", observed, predicted);
  best.quality.note =
      "T_1, c, r fitted on every sample (log residuals, Cauchy loss); P held at 1 (a1 = 0, "
      "b1 = 1): a1 and b1 are not identifiable beside c and r from a few cluster sizes";
  return best;
}

double SharedPsCurve::StepsPerS(int workers) const {
  return workers /
         predictor::SharedPsIterationTime(workers, compute_time_s, service_time_s, queueing);
}

namespace {

// log(predicted / observed) speed of one run under SharedPsCurve.
struct SharedPsCurveResidual {
  template <typename T>
  bool operator()(const T* log_z, const T* log_d, const T* log_kappa, T* residual) const {
    const T z = exp(log_z[0]), d = exp(log_d[0]), kappa = exp(log_kappa[0]);
    const T a = z + d;
    const T m = T(double(workers)) * d;
    const T t = T(0.5) * ((a + m) + sqrt((a - m) * (a - m) + T(4.0) * kappa * d * m));
    residual[0] = log(T(double(workers)) / t) - T(log_observed);
    return true;
  }
  int workers;
  double log_observed;
};

}  // namespace

absl::StatusOr<std::vector<SharedPsCurve>> FitSharedPsCurves(
    absl::Span<const std::vector<SpeedRun>> series_runs, absl::Span<const std::string> names) {
  const size_t n = series_runs.size();
  std::vector<double> t1(n);  // the smallest run's per-worker iteration time, for the starts
  for (size_t i = 0; i < n; ++i) {
    std::set<int> counts;
    const SpeedRun* smallest = nullptr;
    for (const SpeedRun& r : series_runs[i]) {
      if (r.workers <= 0) {
        return absl::InvalidArgumentError(absl::StrCat("workers = ", r.workers, ": must be >= 1"));
      }
      if (!(r.Observed() > 0)) continue;
      counts.insert(r.workers);
      if (smallest == nullptr || r.workers < smallest->workers) smallest = &r;
    }
    if (counts.size() < 3) {
      return Unidentified(absl::StrCat(
          i < names.size() && !names[i].empty() ? absl::StrCat("series ", names[i], ": ") : "",
          "contention needs runs with at least 3 distinct worker counts; got ", counts.size()));
    }
    t1[i] = smallest->workers / smallest->Observed();
  }
  std::vector<SharedPsCurve> best(n);
  double best_cost = std::numeric_limits<double>::infinity();
  for (double kappa0 : {0.05, 0.2, 0.5, 1.0}) {
    for (double share : {0.1, 0.5}) {
      std::vector<double> log_z(n), log_d(n);
      double log_kappa = std::log(kappa0);
      ceres::Problem problem;
      for (size_t i = 0; i < n; ++i) {
        log_z[i] = std::log(t1[i] * (1 - share));
        log_d[i] = std::log(t1[i] * share);
        for (const SpeedRun& r : series_runs[i]) {
          if (!(r.Observed() > 0)) continue;
          problem.AddResidualBlock(
              new ceres::AutoDiffCostFunction<SharedPsCurveResidual, 1, 1, 1, 1>(
                  new SharedPsCurveResidual{r.workers, std::log(r.Observed())}),
              new ceres::CauchyLoss(kLogResidualScale), &log_z[i], &log_d[i], &log_kappa);
        }
      }
      problem.SetParameterLowerBound(&log_kappa, 0, std::log(1e-4));
      problem.SetParameterUpperBound(&log_kappa, 0, std::log(20.0));
      ceres::Solver::Summary summary;
      ceres::Solve(SolverOptions(), &problem, &summary);
      if (summary.IsSolutionUsable() && summary.final_cost < best_cost) {
        best_cost = summary.final_cost;
        for (size_t i = 0; i < n; ++i) {
          best[i] = {std::exp(log_z[i]), std::exp(log_d[i]), std::exp(log_kappa)};
        }
      }
    }
  }
  if (!std::isfinite(best_cost)) {
    return absl::InternalError("shared-ps speed fit: the solver found no usable solution");
  }
  return best;
}

std::vector<SpeedSeries> SpeedSeriesFromSamples(absl::Span<const Sample> samples) {
  std::map<std::string, std::map<int, std::vector<double>>> grouped;
  for (const Sample& s : samples) {
    if (!(s.cluster_steps_per_s > 0)) continue;
    const size_t slash = s.job_id.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : s.job_id.substr(0, slash + 1);
    const std::string leaf = slash == std::string::npos ? s.job_id : s.job_id.substr(slash + 1);
    std::string series;
    int workers = 0;
    if (!ParseRunFolderName(leaf, &series, &workers)) continue;
    grouped[dir + series][workers].push_back(s.cluster_steps_per_s);
  }
  std::vector<SpeedSeries> out;
  for (auto& [name, runs] : grouped) {
    SpeedSeries series;
    series.name = name;
    for (auto& [workers, speeds] : runs) series.runs.push_back({workers, std::move(speeds)});
    out.push_back(std::move(series));
  }
  return out;
}

absl::StatusOr<SpeedValidation> ValidateSpeed(absl::Span<const SpeedSeries> series,
                                              absl::Span<const int> fit_workers, SpeedModel model) {
  const std::set<int> fit(fit_workers.begin(), fit_workers.end());
  for (int n : fit) {
    if (n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("fit workers: ", n, " is not a worker count"));
    }
  }
  if (fit.size() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "fit workers: contention needs at least 3 distinct worker counts; got ", fit.size()));
  }
  if (series.empty()) {
    return absl::FailedPreconditionError(
        "no series to validate: expected run folders named <series>worker<N> holding "
        "TensorBoard exports of global steps/s");
  }
  SpeedValidation out;
  double total_error = 0;
  std::vector<std::vector<SpeedRun>> fit_runs(series.size());
  std::vector<std::string> names;
  for (size_t i = 0; i < series.size(); ++i) {
    names.push_back(series[i].name);
    for (const SpeedRun& r : series[i].runs) {
      if (fit.count(r.workers)) fit_runs[i].push_back(r);
    }
  }
  std::vector<SharedPsCurve> shared;
  if (model == SpeedModel::kSharedPs) {
    auto curves = FitSharedPsCurves(fit_runs, names);
    if (!curves.ok()) return curves.status();
    shared = *std::move(curves);
  }
  for (size_t i = 0; i < series.size(); ++i) {
    const SpeedSeries& s = series[i];
    SeriesValidation v;
    v.series = s.name;
    std::function<double(int)> predict;
    if (model == SpeedModel::kSharedPs) {
      v.shared_ps = shared[i];
      predict = [&v](int workers) { return v.shared_ps.StepsPerS(workers); };
      std::vector<double> observed, predicted;
      for (const SpeedRun& r : fit_runs[i]) {
        if (!(r.Observed() > 0)) continue;
        observed.push_back(r.Observed());
        predicted.push_back(predict(r.workers));
      }
      v.fit.quality = Quality("speed curve", observed, predicted);
      v.fit.quality.note =
          "z and d per series, kappa shared by every series, fitted on the runs' medians (log "
          "residuals, Cauchy loss)";
    } else {
      auto curve = FitSpeedCurve(fit_runs[i]);
      if (!curve.ok()) {
        return absl::Status(curve.status().code(),
                            absl::StrCat("series ", s.name, ": ", curve.status().message()));
      }
      v.fit = *curve;
      predict = [&v](int workers) { return v.fit.curve.StepsPerS(workers); };
    }
    double error = 0;
    for (const SpeedRun& r : s.runs) {
      if (!(r.Observed() > 0)) continue;  // a run without a measured speed has nothing to compare
      SpeedPoint p{.workers = r.workers,
                   .observed = r.Observed(),
                   .predicted = predict(r.workers),
                   .held_out = !fit.count(r.workers)};
      p.error_pct = 100 * std::fabs(p.predicted - p.observed) / p.observed;
      if (p.held_out) {
        error += p.error_pct;
        ++v.held_out_points;
      }
      v.points.push_back(p);
    }
    v.held_out_mape = v.held_out_points > 0 ? error / v.held_out_points : 0;
    total_error += error;
    out.held_out_points += v.held_out_points;
    out.series.push_back(std::move(v));
  }
  if (out.held_out_points == 0) {
    return absl::FailedPreconditionError(
        "nothing is held out: every run's worker count is among the fit workers");
  }
  out.overall_mape = total_error / out.held_out_points;
  return out;
}

}  // namespace spotdnn::profiler
