#include "profiler/convergence_validate.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "profiler/fit_common.h"

namespace spotdnn::profiler {

std::optional<double> StepsToReach(const ConvergenceRun& run, double target,
                                   bool higher_is_better) {
  auto reached = [&](double v) { return higher_is_better ? v >= target : v <= target; };
  for (size_t i = 0; i < run.points.size(); ++i) {
    const auto& [step, value] = run.points[i];
    if (!reached(value)) continue;
    if (i == 0) return step;
    const auto& [s0, v0] = run.points[i - 1];
    if (value == v0) return step;
    return s0 + (target - v0) / (value - v0) * (step - s0);
  }
  return std::nullopt;
}

absl::StatusOr<ConvergenceValidation> ValidateConvergence(absl::Span<const ConvergenceRun> runs,
                                                          const std::vector<int>& fit_sizes,
                                                          const std::vector<double>& targets,
                                                          const ConvergenceFitOptions& options) {
  std::set<int> sizes;
  for (const ConvergenceRun& r : runs) sizes.insert(r.workers);
  for (int n : fit_sizes) {
    if (!sizes.count(n)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fit_sizes: no run has ", n, " workers (the runs have ", absl::StrJoin(sizes, ","), ")"));
    }
  }
  std::vector<int> held_out;
  for (int n : sizes) {
    if (std::find(fit_sizes.begin(), fit_sizes.end(), n) == fit_sizes.end()) held_out.push_back(n);
  }
  if (targets.empty()) return absl::InvalidArgumentError("targets: give at least one");
  ConvergenceValidation out;
  if (held_out.empty()) {
    // Every size fitted on: check them all, in sample (how well the model reproduces its runs).
    held_out.assign(sizes.begin(), sizes.end());
    out.in_sample = true;
  }
  std::set<std::string> notes;
  // One fit when the fit sizes are given; else one per held-out size.
  std::optional<ConvergenceFit> shared;
  for (int n : held_out) {
    std::vector<ConvergenceRun> train, check;
    for (const ConvergenceRun& r : runs) {
      const bool fitted = fit_sizes.empty() ? r.workers != n
                                            : std::find(fit_sizes.begin(), fit_sizes.end(),
                                                        r.workers) != fit_sizes.end();
      if (fitted) train.push_back(r);
      if (r.workers == n) check.push_back(r);
    }
    const ConvergenceFit* fit = nullptr;
    std::optional<ConvergenceFit> own;
    if (!fit_sizes.empty() && shared) {
      fit = &*shared;
    } else {
      auto f = FitConvergence(train, options);
      if (!f.ok()) return f.status();
      (fit_sizes.empty() ? own : shared) = std::move(*f);
      fit = fit_sizes.empty() ? &*own : &*shared;
    }
    notes.insert(fit->notes.begin(), fit->notes.end());
    for (double target : targets) {
      ConvergenceCheck c;
      c.workers = n;
      c.target = target;
      c.runs = static_cast<int>(check.size());
      std::vector<double> steps;
      for (const ConvergenceRun& r : check) {
        if (auto s = StepsToReach(r, target, options.higher_is_better)) steps.push_back(*s);
      }
      c.reached = static_cast<int>(steps.size());
      if (2 * c.reached > c.runs) c.observed = fit_internal::Median(steps);
      const double r = std::sqrt(double(n - 1) / n);
      c.predicted = predictor::StepsToTarget(fit->model, n, r, target);
      if (c.observed && c.predicted.reachable) {
        c.error_pct = std::abs(c.predicted.p50 - *c.observed) / *c.observed * 100;
        c.inside = *c.observed >= c.predicted.p10 && *c.observed <= c.predicted.p90;
      }
      out.checks.push_back(c);
    }
  }
  double total = 0;
  for (double target : targets) {
    double sum = 0;
    int count = 0;
    for (const ConvergenceCheck& c : out.checks) {
      if (c.target != target || !c.observed || !c.predicted.reachable) continue;
      sum += c.error_pct;
      ++count;
      ++out.compared;
      out.inside += c.inside;
    }
    total += sum;
    out.target_mape.push_back(count ? sum / count : 0);
  }
  out.mape = out.compared ? total / out.compared : 0;
  out.notes.assign(notes.begin(), notes.end());
  return out;
}

}  // namespace spotdnn::profiler
