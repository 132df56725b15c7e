#include "profiler/batch_scaling.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "profiler/convergence_validate.h"
#include "profiler/fit_common.h"
#include "profiler/fitting.h"

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

std::vector<double> BatchScalingTargets(absl::Span<const BatchRun> runs, bool higher_is_better) {
  std::map<double, std::vector<double>> bests;  // per batch, each run's best value
  std::vector<double> firsts;
  for (const BatchRun& r : runs) {
    if (r.run.points.empty()) continue;
    double best = r.run.points.front().second;
    for (const auto& [step, v] : r.run.points) {
      best = higher_is_better ? std::max(best, v) : std::min(best, v);
    }
    bests[r.global_batch].push_back(best);
    firsts.push_back(r.run.points.front().second);
  }
  if (bests.empty()) return {};
  std::optional<double> common;  // the value every batch's runs reach (their median best)
  for (auto& [batch, values] : bests) {
    const double b = fit_internal::Median(values);
    if (!common || (higher_is_better ? b < *common : b > *common)) common = b;
  }
  const double start = fit_internal::Median(firsts);
  if (!(higher_is_better ? *common > start : *common < start)) return {};
  std::vector<double> out;
  for (double f : {0.6, 0.8, 0.9, 0.95}) out.push_back(start + f * (*common - start));
  return out;
}

namespace {

// The samples of the runs a synchronous fit's convergence models take, each run as one worker
// with its global batch in batch_size and its own step count (a rank's step is the cluster's).
std::vector<Sample> SynchronousRunSamples(absl::Span<const Sample> samples) {
  std::set<std::string> synchronous, several;
  std::map<std::string, std::set<std::string>> worker_ids;
  for (const Sample& s : samples) {
    if (!s.placement.empty()) synchronous.insert(s.job_id);
    if (s.cluster_workers > 1 || !s.cluster.empty()) several.insert(s.job_id);
    if (!s.worker_id.empty()) worker_ids[s.job_id].insert(s.worker_id);
  }
  for (const auto& [job, ids] : worker_ids) {
    if (ids.size() > 1) several.insert(job);
  }
  std::vector<Sample> out;
  for (const Sample& s : samples) {
    const bool sync = synchronous.count(s.job_id) > 0;
    if (!sync && several.count(s.job_id)) continue;  // a parameter-server run of several workers
    Sample copy = s;
    if (sync && !s.placement.empty() && s.batch_size > 0) {
      int ranks = 0;
      for (char c : s.placement) {
        if (c >= '0' && c <= '9') ranks += c - '0';
      }
      if (s.cluster_workers > 0) ranks = s.cluster_workers;
      copy.batch_size = s.batch_size * std::max(ranks, 1);
    }
    copy.worker_id.clear();
    copy.cluster.clear();
    copy.cluster_workers = 1;
    out.push_back(std::move(copy));
  }
  return out;
}

// Each run's steps carried from its global batch to `reference` by the law with `critical`.
std::vector<ConvergenceRun> CarriedTo(const std::vector<BatchRun>& runs, double critical,
                                      double reference) {
  std::vector<ConvergenceRun> out;
  for (const BatchRun& r : runs) {
    ConvergenceRun run = r.run;
    const double factor = (1 + critical / reference) / (1 + critical / r.global_batch);
    for (auto& [step, value] : run.points) step *= factor;
    out.push_back(std::move(run));
  }
  return out;
}

std::string BatchText(double b) { return absl::StrFormat("%.15g", b); }

}  // namespace

std::vector<predictor::ConvergenceModel> FitSyncConvergences(
    absl::Span<const Sample> samples, absl::Span<const predictor::ConvergenceModel> declared,
    std::vector<FitQuality>* quality) {
  const std::vector<Sample> runs_samples = SynchronousRunSamples(samples);
  std::vector<predictor::ConvergenceModel> out;
  for (const std::string& metric : LoggedMetrics(runs_samples)) {
    FitQuality q;
    q.parameter = absl::StrCat("convergence[", metric, "]");
    const std::vector<ConvergenceRun> all = ConvergenceRunsOf(runs_samples, metric);
    auto options = ConvergenceOptionsFor(metric, all, declared);
    if (!options.ok()) {
      q.note = std::string(options.status().message());
      if (quality) quality->push_back(std::move(q));
      continue;
    }
    const std::vector<BatchRun> batch_runs = BatchRunsOf(runs_samples, metric);
    std::set<double> batches;
    for (const BatchRun& r : batch_runs) batches.insert(r.global_batch);
    std::vector<ConvergenceRun> fit_runs = all;
    double reference = 0;
    std::optional<double> critical;
    std::string carried;
    if (!batches.empty()) {
      // The median batch (the lower middle one): the law carries the others the least far.
      reference = *std::next(batches.begin(), static_cast<long>((batches.size() - 1) / 2));
      fit_runs.clear();
      for (const BatchRun& r : batch_runs) {
        if (r.global_batch == reference) fit_runs.push_back(r.run);
      }
    }
    if (batches.size() >= 2) {
      FitQuality law;
      law.parameter = absl::StrCat("critical_batch[", metric, "]");
      const std::vector<double> targets =
          BatchScalingTargets(batch_runs, options->higher_is_better);
      auto scaling = targets.empty()
                         ? absl::StatusOr<BatchScalingFit>(absl::FailedPreconditionError(
                               "the runs do not improve on where they start"))
                         : FitBatchScaling(batch_runs, targets, options->higher_is_better);
      if (scaling.ok()) {
        critical = scaling->critical_batch;
        fit_runs = CarriedTo(batch_runs, *critical, reference);
        law.identified = true;
        law.points = scaling->points;
        law.rmse = scaling->rmse_log;
        std::vector<std::string> levels;
        for (double t : targets) levels.push_back(absl::StrFormat("%.4g", t));
        law.note = absl::StrFormat(
            "B_crit = %.4g samples, S(B) = S_min (1 + B_crit / B), from %d global batches "
            "(%s to %s) at %s %s %s (RMSE of log steps); every run's steps carried to global "
            "batch %s",
            *critical, batches.size(), BatchText(*batches.begin()), BatchText(*batches.rbegin()),
            metric, options->higher_is_better ? ">=" : "<=", absl::StrJoin(levels, ", "),
            BatchText(reference));
        carried = absl::StrFormat("; global batches %s-%s carried to %s (B_crit %.4g)",
                                  BatchText(*batches.begin()), BatchText(*batches.rbegin()),
                                  BatchText(reference), *critical);
      } else {
        law.note =
            absl::StrCat("not fitted (", scaling.status().message(),
                         "): the model describes global batch ", BatchText(reference), " only");
      }
      if (quality) quality->push_back(std::move(law));
    }
    auto fit = FitConvergence(fit_runs, *options);
    if (!fit.ok()) {
      q.note = std::string(fit.status().message());
      if (quality) quality->push_back(std::move(q));
      continue;
    }
    fit->model.reference_global_batch = reference;
    fit->model.critical_batch = critical;
    fit->model.fitted_on += carried;
    SetFitQuality(*fit, q);
    if (quality) quality->push_back(std::move(q));
    out.push_back(std::move(fit->model));
  }
  return out;
}

}  // namespace spotdnn::profiler
