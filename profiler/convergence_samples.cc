// Convergence fits from a profile's samples: each run's evaluations of a metric, the metrics a
// profile logged, the fit's options from a workload, its quality and note, and every metric's fit.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "profiler/convergence_fit.h"
#include "profiler/fit_common.h"
#include "profiler/fitting.h"

namespace spotdnn::profiler {

using predictor::ConvergenceModel;

std::vector<ConvergenceRun> ConvergenceRunsOf(absl::Span<const Sample> samples,
                                              absl::string_view metric) {
  const std::vector<double> global = GlobalSteps(samples);
  std::map<std::string, ConvergenceRun> by_job;
  std::map<std::string, std::set<std::string>> worker_ids;  // per job, of per-worker samples
  std::vector<std::string> order;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    double value = 0;
    bool has = false;
    if (metric == "loss") {
      has = s.loss > 0;
      value = s.loss;
    } else if (metric == "accuracy") {
      has = s.accuracy > 0;
      value = s.accuracy;
    } else if (auto it = s.metrics.find(std::string(metric)); it != s.metrics.end()) {
      has = true;
      value = it->second;
    }
    if (!has || !std::isfinite(value)) continue;
    auto [it, fresh] = by_job.try_emplace(s.job_id);
    if (fresh) order.push_back(s.job_id);
    ConvergenceRun& run = it->second;
    run.job = s.job_id;
    if (fresh) run.workers_known = false;
    // The cluster's size: what a sample says (its composition, else cluster_workers); a run
    // that never says is of unknown size (see below).
    int workers = s.cluster_workers;
    if (!s.cluster.empty()) {
      if (auto c = ParseComposition(s.cluster); c.ok()) {
        int sum = 0;
        for (const auto& [type, count] : *c) sum += count;
        workers = sum;
      }
    }
    if (workers > 0) {
      run.workers = workers;
      run.workers_known = true;
    }
    if (!s.worker_id.empty()) worker_ids[s.job_id].insert(s.worker_id);
    run.points.emplace_back(global[i], value);
  }
  std::vector<ConvergenceRun> out;
  for (const std::string& job : order) {
    ConvergenceRun run = std::move(by_job[job]);
    std::stable_sort(run.points.begin(), run.points.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    // One value per step: the last logged.
    std::vector<std::pair<double, double>> unique;
    for (const auto& p : run.points) {
      if (!unique.empty() && unique.back().first == p.first) {
        unique.back() = p;
      } else {
        unique.push_back(p);
      }
    }
    run.points = std::move(unique);
    // Per-worker samples that never name the cluster's size: as many workers as logged.
    if (!run.workers_known && !worker_ids[job].empty()) {
      run.workers = static_cast<int>(worker_ids[job].size());
      run.workers_known = true;
    }
    if (!run.workers_known) run.workers = 1;
    run.r = std::sqrt(double(run.workers - 1) / run.workers);
    if (run.points.size() >= 2) out.push_back(std::move(run));
  }
  return out;
}

std::vector<std::string> LoggedMetrics(absl::Span<const Sample> samples) {
  std::vector<std::string> metrics;
  bool loss = false, accuracy = false;
  std::set<std::string> others;
  for (const Sample& s : samples) {
    loss |= s.loss > 0;
    accuracy |= s.accuracy > 0;
    for (const auto& [name, value] : s.metrics) others.insert(name);
  }
  if (loss) metrics.push_back("loss");
  if (accuracy) metrics.push_back("accuracy");
  for (const std::string& m : others) {
    if (m != "loss" && m != "accuracy") metrics.push_back(m);
  }
  return metrics;
}

absl::StatusOr<ConvergenceFitOptions> ConvergenceOptionsFor(
    const std::string& metric, absl::Span<const ConvergenceRun> runs,
    absl::Span<const predictor::ConvergenceModel> declared) {
  ConvergenceFitOptions options;
  options.metric = metric;
  options.higher_is_better = metric == "accuracy";
  if (metric != "loss" && metric != "accuracy") {
    // The direction the curves take: their late values against their early ones.
    double early = 0, late = 0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const ConvergenceRun& r : runs) {
      early += r.points.front().second;
      late += r.points.back().second;
      for (const auto& [step, v] : r.points) lo = std::min(lo, v), hi = std::max(hi, v);
    }
    options.higher_is_better = late > early;
    if (options.higher_is_better && !(lo >= 0 && hi <= 1)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s rises over training but is not a fraction in [0, 1] (it spans %g to %g): no "
          "ceiling to measure its error from",
          metric, lo, hi));
    }
  }
  for (const predictor::ConvergenceModel& d : declared) {
    if (d.metric != metric) continue;
    options.form = d.form;
    if (!d.schedule.detected) options.schedule = d.schedule;
  }
  return options;
}

void SetFitQuality(const ConvergenceFit& fit, FitQuality& q) {
  q.identified = true;
  q.rmse = fit.rmse;
  q.r_squared = fit.r_squared;
  q.mape = fit.mape;
  q.points = fit.points;
  q.note = ConvergenceFitNote(fit);
}

std::string ConvergenceFitNote(const ConvergenceFit& fit) {
  return absl::StrCat(fit.model.fitted_on, "; schedule ",
                      predictor::LrScheduleText(fit.model.schedule),
                      fit.model.schedule.detected ? " (detected)" : "",
                      fit.notes.empty() ? "" : "; ", absl::StrJoin(fit.notes, "; "));
}

std::vector<predictor::ConvergenceModel> FitConvergences(
    absl::Span<const Sample> samples, absl::Span<const predictor::ConvergenceModel> declared,
    std::vector<FitQuality>* quality) {
  std::vector<predictor::ConvergenceModel> out;
  for (const std::string& metric : LoggedMetrics(samples)) {
    std::vector<ConvergenceRun> runs = ConvergenceRunsOf(samples, metric);
    FitQuality q;
    q.parameter = absl::StrCat("convergence[", metric, "]");
    auto options = ConvergenceOptionsFor(metric, runs, declared);
    if (!options.ok()) {
      q.note = std::string(options.status().message());
      if (quality) quality->push_back(std::move(q));
      continue;
    }
    auto fit = FitConvergence(runs, *options);
    if (!fit.ok()) {
      q.note = std::string(fit.status().message());
      if (quality) quality->push_back(std::move(q));
      continue;
    }
    SetFitQuality(*fit, q);
    if (quality) quality->push_back(std::move(q));
    out.push_back(std::move(fit->model));
  }
  return out;
}

}  // namespace spotdnn::profiler
