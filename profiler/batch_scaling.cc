#include "profiler/batch_scaling.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "profiler/convergence_validate.h"
#include "profiler/fit_common.h"

namespace spotdnn::profiler {
namespace {

// Per batch (increasing) and target, the median steps its runs took to reach it; nullopt when
// most of them never did.
using StepTable = std::map<double, std::vector<std::optional<double>>>;

StepTable StepsByBatch(absl::Span<const BatchRun> runs, const std::vector<double>& targets,
                       bool higher_is_better) {
  std::map<double, std::vector<const ConvergenceRun*>> by_batch;
  for (const BatchRun& r : runs) by_batch[r.global_batch].push_back(&r.run);
  StepTable out;
  for (const auto& [batch, batch_runs] : by_batch) {
    std::vector<std::optional<double>>& row = out[batch];
    for (double target : targets) {
      std::vector<double> steps;
      for (const ConvergenceRun* r : batch_runs) {
        if (auto s = StepsToReach(*r, target, higher_is_better); s && *s > 0) steps.push_back(*s);
      }
      if (2 * steps.size() > batch_runs.size()) {
        row.push_back(fit_internal::Median(steps));
      } else {
        row.push_back(std::nullopt);
      }
    }
  }
  return out;
}

// For a given B_crit: S_min per target (the mean of log S - log(1 + B_crit / B) over the batches
// that reached it, where two or more did) and the sum of squared log residuals.
struct Given {
  std::vector<std::optional<double>> log_min;
  double sse = 0;
  int points = 0;
};
Given FitGiven(const StepTable& table, size_t targets, double critical) {
  Given g;
  for (size_t t = 0; t < targets; ++t) {
    double sum = 0;
    int n = 0;
    for (const auto& [batch, row] : table) {
      if (row[t]) {
        sum += std::log(*row[t]) - std::log1p(critical / batch);
        ++n;
      }
    }
    if (n < 2) {
      g.log_min.push_back(std::nullopt);
      continue;
    }
    const double log_min = sum / n;
    g.log_min.push_back(log_min);
    for (const auto& [batch, row] : table) {
      if (!row[t]) continue;
      const double r = std::log(*row[t]) - log_min - std::log1p(critical / batch);
      g.sse += r * r;
      ++g.points;
    }
  }
  return g;
}

absl::StatusOr<BatchScalingFit> FitTable(const StepTable& table, size_t targets) {
  if (table.size() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("steps against the global batch: runs at ", table.size(),
                     " global batch(es); the fit needs two or more"));
  }
  const double lo = std::log(table.begin()->first / 100);
  const double hi = std::log(table.rbegin()->first * 100);
  // A log grid over B_crit, then golden-section search around the best grid point.
  constexpr int kGrid = 400;
  double best = lo, best_sse = std::numeric_limits<double>::infinity();
  int best_points = 0;
  for (int i = 0; i <= kGrid; ++i) {
    const double x = lo + (hi - lo) * i / kGrid;
    const Given g = FitGiven(table, targets, std::exp(x));
    if (g.points > 0 && g.sse < best_sse) {
      best_sse = g.sse;
      best = x;
      best_points = g.points;
    }
  }
  if (best_points == 0) {
    return absl::FailedPreconditionError(
        "steps against the global batch: no target is reached by runs at two or more global "
        "batches");
  }
  double a = std::max(lo, best - (hi - lo) / kGrid), b = std::min(hi, best + (hi - lo) / kGrid);
  const double phi = (std::sqrt(5.0) - 1) / 2;
  for (int i = 0; i < 60; ++i) {
    const double c = b - phi * (b - a), d = a + phi * (b - a);
    if (FitGiven(table, targets, std::exp(c)).sse < FitGiven(table, targets, std::exp(d)).sse) {
      b = d;
    } else {
      a = c;
    }
  }
  const double critical = std::exp((a + b) / 2);
  const Given g = FitGiven(table, targets, critical);
  BatchScalingFit fit;
  fit.critical_batch = critical;
  for (const auto& m : g.log_min) {
    fit.min_steps.push_back(m ? std::optional<double>(std::exp(*m)) : std::nullopt);
  }
  fit.points = g.points;
  fit.rmse_log = g.points > 0 ? std::sqrt(g.sse / g.points) : 0;
  return fit;
}

}  // namespace

std::vector<BatchRun> BatchRunsOf(absl::Span<const Sample> samples, absl::string_view metric) {
  std::map<std::string, int> batch_of;
  for (const Sample& s : samples) {
    if (s.batch_size > 0) batch_of.try_emplace(s.job_id, s.batch_size);
  }
  std::vector<BatchRun> out;
  for (ConvergenceRun& r : ConvergenceRunsOf(samples, metric)) {
    auto it = batch_of.find(r.job);
    if (it == batch_of.end()) continue;
    out.push_back({static_cast<double>(it->second), std::move(r)});
  }
  return out;
}

std::optional<double> BatchScalingFit::StepsAt(size_t target, double batch) const {
  if (target >= min_steps.size() || !min_steps[target] || !(batch > 0)) return std::nullopt;
  return *min_steps[target] * (1 + critical_batch / batch);
}

absl::StatusOr<BatchScalingFit> FitBatchScaling(absl::Span<const BatchRun> runs,
                                                const std::vector<double>& targets,
                                                bool higher_is_better) {
  if (targets.empty()) return absl::InvalidArgumentError("targets: give at least one");
  return FitTable(StepsByBatch(runs, targets, higher_is_better), targets.size());
}

absl::StatusOr<BatchValidation> ValidateBatchScaling(absl::Span<const BatchRun> runs,
                                                     const std::vector<double>& targets,
                                                     bool higher_is_better) {
  if (targets.empty()) return absl::InvalidArgumentError("targets: give at least one");
  const StepTable table = StepsByBatch(runs, targets, higher_is_better);
  if (table.size() < 3) {
    return absl::FailedPreconditionError(absl::StrCat(
        "leaving one global batch out needs runs at three or more; they have ", table.size()));
  }
  BatchValidation out;
  std::vector<double> sums(targets.size(), 0.0);
  std::vector<int> counts(targets.size(), 0);
  for (const auto& [batch, row] : table) {
    StepTable rest = table;
    rest.erase(batch);
    auto fit = FitTable(rest, targets.size());
    for (size_t t = 0; t < targets.size(); ++t) {
      BatchCheck c;
      c.global_batch = batch;
      c.target = targets[t];
      c.observed = row[t];
      if (fit.ok()) {
        c.predicted = fit->StepsAt(t, batch);
        c.critical_batch = fit->critical_batch;
      }
      if (c.observed && c.predicted) {
        c.error_pct = 100 * std::fabs(*c.predicted - *c.observed) / *c.observed;
        sums[t] += c.error_pct;
        ++counts[t];
        out.mape += c.error_pct;
        ++out.compared;
      }
      out.checks.push_back(c);
    }
  }
  for (size_t t = 0; t < targets.size(); ++t) {
    out.target_mape.push_back(counts[t] > 0 ? sums[t] / counts[t] : 0);
  }
  if (out.compared > 0) out.mape /= out.compared;
  return out;
}

}  // namespace spotdnn::profiler
