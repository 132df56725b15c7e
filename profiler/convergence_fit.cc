// The convergence fit: Ceres least squares of the mean error curve over every run's evaluations,
// change-point search for step drops the profile did not declare, and the spread's law
// (convergence_spread.h) fitted beside it.
#include "profiler/convergence_fit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ceres/ceres.h"
#include "profiler/convergence_spread.h"
#include "profiler/fit_common.h"
#include "profiler/fitting.h"

namespace spotdnn::profiler {
namespace {

using fit_internal::GroupOf;
using fit_internal::Median;
using fit_internal::Point;
using fit_internal::RunShare;
using fit_internal::SpreadLaw;
using predictor::ConvergenceModel;
using predictor::LrSchedule;

// What the solver varies: the base curve's parameters (kSaturating: log floor, floor_exp,
// log amplitude, log scale, scale_exp, shape; kEq3: log g1, log g3, log g4, g5), then one logit per
// drop ratio (or the cosine's rho), then log tau.
constexpr int kBaseParams = 6;

template <typename T>
T Logistic(const T& x) {
  return T(1) / (T(1) + exp(-x));
}

// The model's error at `p` for parameters `x` (see above) and the schedule `s`.
template <typename T>
T ModelError(const T* const* x, const Point& p, ConvergenceModel::Form form, const LrSchedule& s,
             int drops) {
  using std::exp;
  using std::log;
  using std::sqrt;
  const double n = std::max(1, p.workers);
  const double j = std::max(0.0, p.step - s.warmup_steps / 2);
  T base;
  if (form == ConvergenceModel::Form::kEq3) {
    const T g1 = exp(x[0][0]), g3 = exp(x[1][0]), g4 = exp(x[2][0]), g5 = x[3][0];
    base = g3 * sqrt((T(p.r) + g4) * T(n)) / (T(j) + g1) + g5;
  } else {
    const T floor = exp(x[0][0]) * exp(x[1][0] * log(n));
    const T scale = exp(x[3][0]) * exp(x[4][0] * log(n));
    base = floor + exp(x[2][0]) * exp(-pow(T(std::max(j, 1e-9)) / scale, x[5][0]));
  }
  const T tau = exp(x[kBaseParams + std::max(drops, 1)][0]);
  const T ratio_exp = x[kBaseParams + std::max(drops, 1) + 1][0] * T(std::log(n));
  T factor = T(1);
  if (s.kind == LrSchedule::Kind::kStepDecay) {
    for (int i = 0; i < drops; ++i) {
      if (p.step <= s.drop_steps[i]) break;
      const T rho = Logistic(x[kBaseParams + i][0] + ratio_exp);
      factor = factor * (rho + (T(1) - rho) * exp(-(T(p.step - s.drop_steps[i])) / tau));
    }
  } else if (s.kind == LrSchedule::Kind::kCosine) {
    const T rho = Logistic(x[kBaseParams][0] + ratio_exp);
    // The rate lagged by tau, as predictor/convergence.cc computes it (tau held in the solve).
    const double lagged = std::max(0.0, p.step);
    factor = rho + (T(1) - rho) * T(s.RateAt(lagged));
  }
  return base * factor;
}

struct Residual {
  Residual(Point p, ConvergenceModel::Form form, const LrSchedule* s, int drops, double weight)
      : p(p), form(form), s(s), drops(drops), weight(weight) {}
  template <typename T>
  bool operator()(T const* const* x, T* residual) const {
    residual[0] = T(weight) * (ModelError(x, p, form, *s, drops) - T(p.error));
    return true;
  }
  Point p;
  ConvergenceModel::Form form;
  const LrSchedule* s;
  int drops;
  double weight;
};

// Pulls parameter `i` towards `value` with `weight` (a live refit's prior).
struct PriorResidual {
  PriorResidual(double value, double weight) : value(value), weight(weight) {}
  template <typename T>
  bool operator()(const T* x, T* residual) const {
    residual[0] = T(weight) * (x[0] - T(value));
    return true;
  }
  double value, weight;
};

// "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", ...
std::string Ordinal(size_t n) {
  const size_t tens = n % 100;
  const char* suffix = "th";
  if (tens < 11 || tens > 13) {
    suffix = n % 10 == 1 ? "st" : n % 10 == 2 ? "nd" : n % 10 == 3 ? "rd" : "th";
  }
  return absl::StrCat(n, suffix);
}

double Logit(double p) {
  p = std::clamp(p, 1e-6, 1 - 1e-6);
  return std::log(p / (1 - p));
}

struct Solved {
  std::vector<double> x;
  double sse = std::numeric_limits<double>::infinity();
};

struct Problem {
  const std::vector<Point>* points;
  ConvergenceModel::Form form;
  LrSchedule schedule;
  int drops = 0;              // step drops in `schedule` (kStepDecay)
  std::vector<bool> fixed;    // per parameter
  std::vector<double> prior;  // per parameter, NaN = none
  double prior_weight = 0;
  std::vector<double> lower, upper;  // per parameter, NaN = unbounded

  int size() const { return kBaseParams + std::max(drops, 1) + 2; }

  Solved Solve(std::vector<double> x) const {
    ceres::Problem problem;
    std::vector<double*> blocks;
    for (double& v : x) blocks.push_back(&v);
    for (const Point& p : *points) {
      auto* cost = new ceres::DynamicAutoDiffCostFunction<Residual, 8>(
          new Residual(p, form, &schedule, drops, 1.0));
      for (size_t i = 0; i < x.size(); ++i) cost->AddParameterBlock(1);
      cost->SetNumResiduals(1);
      problem.AddResidualBlock(cost, nullptr, blocks);
    }
    for (size_t i = 0; i < x.size(); ++i) {
      if (i < prior.size() && std::isfinite(prior[i]) && prior_weight > 0) {
        problem.AddResidualBlock(new ceres::AutoDiffCostFunction<PriorResidual, 1, 1>(
                                     new PriorResidual(prior[i], prior_weight)),
                                 nullptr, blocks[i]);
      }
    }
    for (size_t i = 0; i < x.size(); ++i) {
      if (i < fixed.size() && fixed[i]) {
        problem.SetParameterBlockConstant(blocks[i]);
        continue;
      }
      if (i < lower.size() && std::isfinite(lower[i])) {
        x[i] = std::max(x[i], lower[i]);
        problem.SetParameterLowerBound(blocks[i], 0, lower[i]);
      }
      if (i < upper.size() && std::isfinite(upper[i])) {
        x[i] = std::min(x[i], upper[i]);
        problem.SetParameterUpperBound(blocks[i], 0, upper[i]);
      }
    }
    // Parameters no residual depends on (the unused ratio slot of a schedule without drops).
    ceres::Solver::Options options;
    options.max_num_iterations = 200;
    options.linear_solver_type = ceres::DENSE_QR;
    options.num_threads = 1;
    options.logging_type = ceres::SILENT;
    ceres::Solver::Summary summary;
    ceres::Solve(options, &problem, &summary);
    Solved out;
    out.x = x;
    out.sse = 0;
    std::vector<const double*> cx;
    for (const double& v : x) cx.push_back(&v);
    for (const Point& p : *points) {
      const double e = ModelError(cx.data(), p, form, schedule, drops) - p.error;
      out.sse += e * e;
    }
    if (!std::isfinite(out.sse)) out.sse = std::numeric_limits<double>::infinity();
    return out;
  }
};

}  // namespace

absl::StatusOr<ConvergenceFit> FitConvergence(absl::Span<const ConvergenceRun> all_runs,
                                              const ConvergenceFitOptions& options) {
  using Form = ConvergenceModel::Form;
  std::vector<std::string> size_notes;
  // Runs of unknown size among runs of known sizes are left out: a cluster's size changes its
  // curve (and where a step drop shows), and taking them for one worker would mix sizes. When no
  // run says its size, they are all one size.
  std::vector<ConvergenceRun> known_runs;
  absl::Span<const ConvergenceRun> runs = all_runs;
  {
    int unknown = 0;
    std::string first;
    for (const ConvergenceRun& r : all_runs) {
      if (r.workers_known) {
        known_runs.push_back(r);
      } else if (unknown++ == 0) {
        first = r.job;
      }
    }
    if (unknown > 0 && !known_runs.empty()) {
      runs = known_runs;
      size_notes.push_back(absl::StrFormat(
          "%d %s left out: the cluster size is not known (the first: %s); import them with "
          "--workers N or --cluster TYPE=N,...",
          unknown, unknown == 1 ? "run" : "runs", first));
    } else if (unknown > 0) {
      size_notes.push_back(
          "no run says its cluster size: all fitted as one size (import them with --workers N "
          "or --cluster TYPE=N,... to fit how the size changes the curve)");
    }
  }
  ConvergenceModel model;
  model.metric = options.metric;
  model.higher_is_better = options.higher_is_better;
  model.ceiling = options.ceiling;
  model.form = options.form;
  if (options.prior) {
    model = *options.prior;
    model.metric = options.metric;
  }
  std::vector<Point> points;
  std::set<int> sizes;
  std::vector<double> gaps;
  std::vector<std::pair<int, double>> run_gaps;  // (workers, the run's median gap)
  int usable_runs = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const ConvergenceRun& run = runs[k];
    int used = 0;
    for (size_t i = 0; i < run.points.size(); ++i) {
      const auto& [step, value] = run.points[i];
      const double e = model.ErrorOf(value);
      if (!(std::isfinite(step) && step > 0 && std::isfinite(e))) continue;
      if (model.form == Form::kSaturating && !(e > 0)) continue;
      points.push_back({step, e, std::max(1, run.workers), run.r, static_cast<int>(k)});
      if (i > 0) gaps.push_back(step - run.points[i - 1].first);
      ++used;
    }
    std::vector<double> own;
    for (size_t i = 1; i < run.points.size(); ++i) {
      own.push_back(run.points[i].first - run.points[i - 1].first);
    }
    if (!own.empty()) run_gaps.push_back({std::max(1, run.workers), Median(own)});
    if (used >= 3) {
      ++usable_runs;
      sizes.insert(std::max(1, run.workers));
    }
  }
  if (points.size() < 3 || (usable_runs == 0 && !options.prior)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "convergence of %s needs a run with at least 3 evaluations of it after step 0; got %d "
        "evaluation(s) in %d run(s)",
        options.metric, points.size(), runs.size()));
  }
  ConvergenceFit fit;
  fit.notes = std::move(size_notes);
  // The best value the runs reached (all their evaluations, before any are thinned out below); a
  // live refit keeps the profile's when that is better.
  {
    double best_error = std::numeric_limits<double>::infinity();
    for (const Point& p : points) best_error = std::min(best_error, p.error);
    double best = model.ValueOf(best_error);
    if (options.prior && options.prior->best_value) {
      const double prior_best = *options.prior->best_value;
      if (model.ErrorOf(prior_best) < best_error) best = prior_best;
    }
    model.best_value = best;
  }
  // A bounded problem: a live job logs a loss every step, and a study many runs. Beyond
  // kMaxFitPoints evaluations every k-th of each run is kept (its first and last always), so a fit
  // (and the drop search, which solves it once per candidate) stays well under a second.
  constexpr size_t kMaxFitPoints = 1500;
  // The share of the spread that is a run's own needs each run's evaluations side by side.
  const std::vector<Point> all_points = points;
  if (points.size() > kMaxFitPoints) {
    const size_t k = (points.size() + kMaxFitPoints - 1) / kMaxFitPoints;
    std::vector<Point> kept;
    size_t in_run = 0;  // the point's index within its run
    for (size_t i = 0; i < points.size(); ++i) {
      const bool first = i == 0 || points[i - 1].run != points[i].run;
      const bool last = i + 1 == points.size() || points[i + 1].run != points[i].run;
      if (first) in_run = 0;
      // Staggered from run to run (run r keeps the evaluations r, r + k, ... of its own), so that
      // together the runs keep every step they evaluated at (a drop right after one included).
      if (first || last || (in_run + points[i].run) % k == 0) kept.push_back(points[i]);
      ++in_run;
    }
    fit.notes.push_back(absl::StrFormat(
        "fitted on %d of the %d evaluations (every %s of each run, staggered across runs)",
        kept.size(), points.size(), Ordinal(k)));
    points = std::move(kept);
  }
  const double interval = gaps.empty() ? 0 : Median(gaps);
  double max_step = 0, max_error = 0;
  for (const Point& p : points) {
    max_step = std::max(max_step, p.step);
    max_error = std::max(max_error, p.error);
  }
  const bool one_size = sizes.size() <= 1;

  // Initial values from the data: the error's late level, its early level, a quarter of the span.
  auto initial = [&](const LrSchedule& s, int drops) {
    std::vector<double> x(kBaseParams + std::max(drops, 1) + 2, 0.0);
    std::vector<double> early, late;
    const double end = s.kind == LrSchedule::Kind::kStepDecay ? s.drop_steps.front() : max_step;
    for (const Point& p : points) {
      if (p.step <= 0.15 * end) early.push_back(p.error);
      if (p.step > 0.6 * end && p.step <= end) late.push_back(p.error);
    }
    const double lo = late.empty() ? Median([&] {
      std::vector<double> v;
      for (const Point& p : points) v.push_back(p.error);
      return v;
    }())
                                   : Median(late);
    const double hi = early.empty() ? max_error : Median(early);
    if (model.form == Form::kEq3) {
      x[0] = std::log(std::max(1.0, 0.05 * end));
      x[1] = std::log(std::max(1e-9, (hi - 0.8 * lo) * 0.1 * end));
      x[2] = std::log(1.0);
      x[3] = 0.8 * lo;
    } else {
      x[0] = std::log(std::max(1e-9, 0.9 * lo));
      x[1] = 0;
      x[2] = std::log(std::max(1e-9, hi - 0.9 * lo) * 2);
      x[3] = std::log(std::max(1.0, 0.1 * end));
      x[4] = one_size ? 0 : 0.5;
      x[5] = 1;
    }
    for (int i = 0; i < std::max(drops, 1); ++i) x[kBaseParams + i] = Logit(0.6);
    x[kBaseParams + std::max(drops, 1)] = std::log(std::max(1.0, 0.005 * end));
    return x;
  };
  auto make_problem = [&](const LrSchedule& s) {
    Problem pr;
    pr.points = &points;
    pr.form = model.form;
    pr.schedule = s;
    pr.drops = s.kind == LrSchedule::Kind::kStepDecay ? static_cast<int>(s.drop_steps.size()) : 0;
    pr.fixed.assign(pr.size(), false);
    if (model.form == Form::kSaturating && one_size) pr.fixed[1] = pr.fixed[4] = true;
    if (model.form == Form::kEq3) pr.fixed[4] = pr.fixed[5] = true;  // unused slots
    if (s.kind == LrSchedule::Kind::kConstant) {
      pr.fixed[kBaseParams] = pr.fixed[kBaseParams + 1] = true;
    }
    if (s.kind == LrSchedule::Kind::kCosine) pr.fixed[kBaseParams + 1] = true;
    // The ratios' change with the cluster size: needs drops and two sizes.
    const int ratio_exp = kBaseParams + std::max(pr.drops, 1) + 1;
    if (one_size || s.kind == LrSchedule::Kind::kConstant) pr.fixed[ratio_exp] = true;
    // Bounds keep the curve finite: levels within 1e-9..10x the largest error, exponents of the
    // cluster size in [-1, 3], time scales within 1..1000x the steps seen, and a drop's settling
    // time at most one evaluation interval (or 5% of its step): a step drop is fast; a slow change
    // is the base curve's.
    const double nan = std::numeric_limits<double>::quiet_NaN();
    pr.lower.assign(pr.size(), nan);
    pr.upper.assign(pr.size(), nan);
    const double top = std::log(std::max(1e-9, 10 * max_error));
    if (model.form == Form::kSaturating) {
      pr.lower[0] = std::log(1e-9), pr.upper[0] = top;
      pr.lower[1] = -1, pr.upper[1] = 3;
      pr.lower[2] = std::log(1e-9), pr.upper[2] = top + std::log(1e3);
      pr.lower[3] = 0, pr.upper[3] = std::log(1e3 * max_step);
      pr.lower[4] = -1, pr.upper[4] = 3;
      pr.lower[5] = 0.3, pr.upper[5] = 3;
    } else {
      pr.lower[0] = std::log(1e-6), pr.upper[0] = std::log(1e3 * max_step);
      pr.upper[1] = std::log(1e6 * max_step) + top;
      pr.lower[2] = std::log(1e-6), pr.upper[2] = std::log(1e3);
    }
    double settle = 0;
    for (double d : s.drop_steps) settle = std::max(settle, 0.05 * d);
    if (interval > 0) settle = std::max(settle, interval);
    // A drop found in the curves must be sharp: it settles within a quarter of an evaluation
    // interval (1% of its step without one), or it is the base curve's bend, not a drop.
    if (s.detected) {
      settle = 0;
      for (double d : s.drop_steps) settle = std::max(settle, 0.01 * d);
      if (interval > 0) settle = interval / 4;
    }
    if (s.kind == LrSchedule::Kind::kCosine) settle = s.cosine_horizon_steps;
    // Each drop's ratio (the cosine's rho) within logistic(+-10): a finite slope for the solver
    // (a logit of -1000 overflows its derivative).
    for (int i = 0; i < std::max(pr.drops, 1); ++i) {
      pr.lower[kBaseParams + i] = -10;
      pr.upper[kBaseParams + i] = 10;
    }
    const int t = kBaseParams + std::max(pr.drops, 1);
    pr.lower[t] = 0;
    pr.upper[t] = std::log(std::max(2.0, settle));
    pr.lower[ratio_exp] = -3;
    pr.upper[ratio_exp] = 3;
    // Drops after the last evaluation: nothing to fit (their ratio stays at the start value).
    for (int i = 0; i < pr.drops; ++i) {
      if (s.drop_steps[i] >= max_step) pr.fixed[kBaseParams + i] = true;
    }
    return pr;
  };
  auto with_prior = [&](Problem& pr, std::vector<double>& x) {
    if (!options.prior) return;
    const ConvergenceModel& p = *options.prior;
    pr.prior.assign(pr.size(), std::numeric_limits<double>::quiet_NaN());
    if (p.form == Form::kSaturating && model.form == Form::kSaturating) {
      const double v[kBaseParams] = {
          std::log(std::max(1e-12, p.floor)), p.floor_exp, std::log(std::max(1e-12, p.amplitude)),
          std::log(std::max(1e-12, p.scale)), p.scale_exp, p.shape};
      for (int i = 0; i < kBaseParams; ++i) pr.prior[i] = x[i] = v[i];
    } else if (p.form == Form::kEq3 && model.form == Form::kEq3) {
      const double v[4] = {std::log(std::max(1e-12, p.g1)), std::log(std::max(1e-12, p.g3)),
                           std::log(std::max(1e-12, p.g4)), p.g5};
      for (int i = 0; i < 4; ++i) pr.prior[i] = x[i] = v[i];
    }
    // Exponents over cluster sizes are the prior's: one job runs at one size.
    if (one_size) {
      x[1] = model.form == Form::kSaturating ? p.floor_exp : x[1];
      x[4] = model.form == Form::kSaturating ? p.scale_exp : x[4];
    }
    for (int i = 0; i < pr.drops && i < static_cast<int>(p.drop_ratios.size()); ++i) {
      pr.prior[kBaseParams + i] = x[kBaseParams + i] = Logit(p.drop_ratios[i]);
    }
    if (p.drop_time_steps > 0) {
      const int t = kBaseParams + std::max(pr.drops, 1);
      pr.prior[t] = x[t] = std::log(p.drop_time_steps);
    }
    x[kBaseParams + std::max(pr.drops, 1) + 1] = p.drop_ratio_exp;
    // The prior counts as `prior_points` points, each about the curve's noise.
    const double noise = std::max(1e-6, p.noise_sd > 0 ? p.noise_sd : 0.05 * max_error);
    pr.prior_weight = std::sqrt(std::max(0.0, options.prior_points)) * noise;
  };
  auto solve = [&](const LrSchedule& s, bool two_starts = true) {
    Problem pr = make_problem(s);
    std::vector<double> x = initial(s, pr.drops);
    with_prior(pr, x);
    Solved best = pr.Solve(x);
    if (!options.prior && two_starts) {
      // A second start from a slower curve guards against a poor local minimum.
      std::vector<double> x2 = x;
      if (model.form == Form::kSaturating) x2[3] += std::log(3.0);
      if (model.form == Form::kEq3) x2[0] += std::log(5.0);
      Solved other = pr.Solve(x2);
      if (other.sse < best.sse) best = other;
    }
    return std::make_pair(pr, best);
  };

  // The schedule: declared, the prior's, or detected (change points, one drop at a time).
  LrSchedule schedule;
  if (options.schedule) {
    schedule = *options.schedule;
  } else if (options.prior) {
    schedule = options.prior->schedule;
  }
  auto [problem, solved] = solve(schedule);
  const bool detect = !options.schedule && !options.prior &&
                      schedule.kind == LrSchedule::Kind::kConstant && points.size() >= 12;
  if (detect) {
    // Candidates: the lowest step of each group of evaluations (evaluations after it are after
    // the drop), away from both ends.
    std::map<int, double> group_min;
    for (const Point& p : points) {
      const int g = GroupOf(p.step, interval > 0 ? interval : max_step / 20);
      auto [it, fresh] = group_min.try_emplace(g, p.step);
      if (!fresh) it->second = std::min(it->second, p.step);
    }
    for (int round = 0; round < 3; ++round) {
      double best_sse = solved.sse;
      LrSchedule best_schedule;
      std::pair<Problem, Solved> best_fit;
      bool found = false;
      // At most 24 candidates, spread evenly over the evaluation steps.
      std::vector<double> candidates;
      for (const auto& [g, step] : group_min) candidates.push_back(step);
      if (candidates.size() > 24) {
        std::vector<double> spread;
        for (int c = 0; c < 24; ++c) spread.push_back(candidates[c * candidates.size() / 24]);
        candidates = std::move(spread);
      }
      for (double step : candidates) {
        if (step < 0.1 * max_step || step > 0.95 * max_step) continue;
        if (std::find(schedule.drop_steps.begin(), schedule.drop_steps.end(), step) !=
            schedule.drop_steps.end()) {
          continue;
        }
        LrSchedule s = schedule;
        s.kind = LrSchedule::Kind::kStepDecay;
        s.detected = true;
        auto pos = std::upper_bound(s.drop_steps.begin(), s.drop_steps.end(), step);
        const size_t at = pos - s.drop_steps.begin();
        s.drop_steps.insert(pos, step);
        s.drop_factors.insert(s.drop_factors.begin() + at, 0.1);
        auto candidate = solve(s, /*two_starts=*/false);
        // A drop must take the error down by a quarter, settle fast, and be
        const double ratio = Logistic(candidate.second.x[kBaseParams + at]);
        const int t = kBaseParams + std::max(candidate.first.drops, 1);
        const bool sharp = candidate.second.x[t] < candidate.first.upper[t] - 0.1;
        // worth its two parameters by a wide margin (n log(SSE0 / SSE1) > 12 log n, six times
        // the Bayesian information criterion's price).
        const double n = static_cast<double>(points.size());
        const bool worth = candidate.second.sse > 0 &&
                           n * std::log(solved.sse / candidate.second.sse) > 12 * std::log(n);
        if (worth && ratio < 0.75 && sharp && candidate.second.sse < best_sse) {
          best_sse = candidate.second.sse;
          best_schedule = s;
          best_fit = std::move(candidate);
          found = true;
        }
      }
      if (!found) break;
      schedule = best_schedule;
      problem = std::move(best_fit.first);
      solved = std::move(best_fit.second);
    }
    if (schedule.kind != LrSchedule::Kind::kConstant) {
      auto final_fit = solve(schedule);
      problem = std::move(final_fit.first);
      solved = std::move(final_fit.second);
    }
  }
  const std::vector<double>& x = solved.x;
  model.schedule = schedule;
  const int drops = problem.drops;
  if (model.form == Form::kEq3) {
    model.g1 = std::exp(x[0]);
    model.g3 = std::exp(x[1]);
    model.g4 = std::exp(x[2]);
    model.g5 = x[3];
  } else {
    model.floor = std::exp(x[0]);
    model.floor_exp = x[1];
    model.amplitude = std::exp(x[2]);
    model.scale = std::exp(x[3]);
    model.scale_exp = x[4];
    model.shape = x[5];
  }
  model.drop_ratios.clear();
  for (int i = 0; i < drops; ++i) model.drop_ratios.push_back(Logistic(x[kBaseParams + i]));
  model.rho = schedule.kind == LrSchedule::Kind::kCosine ? Logistic(x[kBaseParams]) : 1;
  model.drop_time_steps = schedule.kind == LrSchedule::Kind::kConstant
                              ? 0
                              : std::exp(x[kBaseParams + std::max(drops, 1)]);
  model.drop_ratio_exp =
      schedule.kind == LrSchedule::Kind::kConstant ? 0 : x[kBaseParams + std::max(drops, 1) + 1];
  if (schedule.kind == LrSchedule::Kind::kStepDecay) {
    for (int i = 0; i < drops; ++i) {
      fit.notes.push_back(absl::StrFormat(
          "%s at global step %.15g: the error settles at %.2f of its level before it "
          "(within %.0f steps)",
          schedule.detected ? "step drop detected" : "declared drop", schedule.drop_steps[i],
          model.drop_ratios[i], model.drop_time_steps));
    }
  }

  // Fitted values, the spread before and after the first drop.
  std::vector<double> fitted;
  std::vector<const double*> cx;
  for (const double& v : x) cx.push_back(&v);
  double sse = 0;
  for (const Point& p : points) {
    fitted.push_back(ModelError(cx.data(), p, model.form, schedule, drops));
    sse += (fitted.back() - p.error) * (fitted.back() - p.error);
  }
  const double first_drop = schedule.kind == LrSchedule::Kind::kStepDecay
                                ? schedule.drop_steps.front()
                                : std::numeric_limits<double>::infinity();
  const double end = std::isfinite(first_drop) ? first_drop : max_step;
  auto before = [&](const Point& p) { return p.step >= 0.25 * end && p.step <= first_drop; };
  auto after = [&](const Point& p) {
    return p.step > first_drop + std::max(interval, 5 * model.drop_time_steps);
  };
  if (options.prior && one_size) {
    // A live job: keep the prior's spread law unless the job's own scatter says more.
    auto [sd, b] = SpreadLaw(points, fitted, interval, before, &fit.notes, "before the drop");
    (void)b;
    const double n = *sizes.begin();
    const double prior_sd = options.prior->noise_sd * std::pow(n, options.prior->noise_exp);
    if (sd > prior_sd && prior_sd > 0) model.noise_sd *= sd / prior_sd;
  } else {
    std::tie(model.noise_sd, model.noise_exp) =
        SpreadLaw(points, fitted, interval, before, &fit.notes, "before the drop");
    if (std::isfinite(first_drop)) {
      std::tie(model.noise_sd_after, model.noise_exp_after) =
          SpreadLaw(points, fitted, interval, after, &fit.notes, "after the drop");
    }
    // A refit of one job's points has no runs to compare: it keeps the profile's share.
    int share_runs = 0;
    if (auto share = RunShare(all_points, interval, before, &share_runs)) {
      model.noise_run_share = *share;
      fit.notes.push_back(absl::StrFormat(
          "a run's deviation from the mean persists: %.0f%% of the spread's variance is the "
          "run's own (the correlation of its evaluations%s, over %d runs)",
          100 * *share, std::isfinite(first_drop) ? " before the drop" : "", share_runs));
    }
  }
  // The evaluation interval against the cluster size: least squares over the runs' own gaps.
  model.eval_interval_steps = interval;
  model.eval_interval_per_worker_steps = 0;
  if (sizes.size() >= 2 && run_gaps.size() >= 3) {
    double mx = 0, my = 0;
    for (const auto& [n, g] : run_gaps) mx += n, my += g;
    mx /= run_gaps.size();
    my /= run_gaps.size();
    double sxx = 0, sxy = 0;
    for (const auto& [n, g] : run_gaps) sxx += (n - mx) * (n - mx), sxy += (n - mx) * (g - my);
    const double b = sxx > 0 ? sxy / sxx : 0;
    const double a = my - b * mx;
    // Kept only when it is a small, positive correction (at most 1% of the interval a worker).
    if (b > 0 && a > 0 && b < 0.01 * a) {
      model.eval_interval_steps = a;
      model.eval_interval_per_worker_steps = b;
    }
  }
  model.runs = usable_runs;
  model.points = static_cast<int>(points.size());
  model.fitted_on =
      absl::StrFormat("%d runs, %d evaluations, %d-%d workers", usable_runs, points.size(),
                      sizes.empty() ? 0 : *sizes.begin(), sizes.empty() ? 0 : *sizes.rbegin());
  if (auto st = model.Validate(); !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the convergence fit gave no usable model: ", st.message()));
  }
  fit.notes.push_back(absl::StrCat("model: ", predictor::DescribeConvergence(model)));
  fit.model = std::move(model);
  fit.points = static_cast<int>(points.size());
  fit.rmse = std::sqrt(sse / points.size());
  double mean = 0, sst = 0;
  for (const Point& p : points) mean += p.error / points.size();
  for (const Point& p : points) sst += (p.error - mean) * (p.error - mean);
  fit.r_squared = sst > 0 ? 1 - sse / sst : 0;
  double ape = 0;
  int ape_n = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    if (!(points[i].error > 0)) continue;
    ape += std::abs(fitted[i] - points[i].error) / points[i].error;
    ++ape_n;
  }
  fit.mape = ape_n > 0 ? 100 * ape / ape_n : 0;
  return fit;
}

}  // namespace spotdnn::profiler
