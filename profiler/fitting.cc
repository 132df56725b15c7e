#include "profiler/fitting.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ceres/ceres.h"
#include "predictor/equations.h"
#include "profiler/fit_common.h"
#include "profiler/fit_stop.h"

namespace spotdnn::profiler {
namespace {

using fit_internal::BandwidthFraction;
using fit_internal::Clamp01;
using fit_internal::IterationTime;
using fit_internal::kLogResidualScale;
using fit_internal::kMaxSolverIterations;
using fit_internal::Median;
using fit_internal::Unidentified;
using fit_internal::Workers;

ceres::Solver::Options SolverOptions() { return FitSolverOptions(kMaxSolverIterations); }

// log(predicted / observed) iteration time of one worker in a cluster of `workers`.
struct ContentionResidual {
  template <typename T>
  bool operator()(const T* a1, const T* b1, T* residual) const {
    const T p = Clamp01(a1[0] * T(std::sqrt(double(workers))) + b1[0]);
    const T bwk = BandwidthFraction(p, T(ps_mb_per_s / req_mb_per_s), workers) * T(req_mb_per_s);
    const T predicted = T(single_worker_s) + T(2 * size_mb) * (T(1) / bwk - T(1 / req_mb_per_s));
    residual[0] = log(predicted) - T(std::log(observed_s));
    return true;
  }
  int workers;
  double observed_s;
  double single_worker_s;
  double size_mb;
  double req_mb_per_s;
  double ps_mb_per_s;
};

double PredictContention(const ContentionResidual& r, const predictor::ContentionModel& c) {
  const double p = std::clamp(c.a1 * std::sqrt(double(r.workers)) + c.b1, 0.0, 1.0);
  const double bwk =
      BandwidthFraction(p, r.ps_mb_per_s / r.req_mb_per_s, r.workers) * r.req_mb_per_s;
  return r.single_worker_s + 2 * r.size_mb * (1 / bwk - 1 / r.req_mb_per_s);
}

struct MemoryResidual {
  template <typename T>
  bool operator()(const T* a2, const T* b2, T* residual) const {
    residual[0] = (a2[0] * T(memory_gib) + b2[0] - T(batch)) / T(batch);
    return true;
  }
  double memory_gib;
  double batch;
};

// Homogeneous cluster of `workers`: every w_i = 1/|N| (eq. 5).
double HomogeneousConvergence(int workers) {
  std::vector<double> speeds(workers, 1.0);
  return predictor::ConvergenceCoefficient(speeds);
}

struct LossPoint {
  double j;
  double batch;
  double convergence;
  int workers;
  double loss;
};

struct LossResidual {
  template <typename T>
  bool operator()(const T* g1, const T* g2, const T* g3, const T* g4, const T* g5,
                  T* residual) const {
    const T scale = sqrt((T(p.convergence) + g4[0]) * T(double(p.workers)));
    residual[0] =
        ((g2[0] * T(p.batch) + g3[0]) * scale / (T(p.j) + g1[0]) + g5[0] - T(p.loss)) / T(unit);
    return true;
  }
  LossPoint p;
  double unit;
};

double PredictLoss(const predictor::LossModel& g, const LossPoint& p) {
  return predictor::LossAfter(g, p.batch, p.convergence, p.workers, p.j);
}

}  // namespace

bool WorseThanMean(const FitQuality& q) { return q.identified && q.points > 0 && q.r_squared < 0; }

void NoteWorseThanMean(std::vector<FitQuality>& rows) {
  for (FitQuality& q : rows) {
    if (!WorseThanMean(q) || q.worse_than_mean) continue;
    q.worse_than_mean = true;
    q.note =
        absl::StrCat(absl::StrFormat("worse than the data's mean (R^2 = %.3g < 0)", q.r_squared),
                     q.note.empty() ? "" : ": ", q.note);
  }
}

FitQuality Quality(std::string parameter, absl::Span<const double> observed,
                   absl::Span<const double> predicted) {
  FitQuality q;
  q.parameter = std::move(parameter);
  q.identified = true;
  q.points = static_cast<int>(observed.size());
  if (observed.empty()) return q;
  double mean = 0;
  for (double y : observed) mean += y;
  mean /= observed.size();
  double ss_res = 0, ss_tot = 0, ape = 0;
  int ape_n = 0;
  for (size_t i = 0; i < observed.size(); ++i) {
    const double e = predicted[i] - observed[i];
    ss_res += e * e;
    ss_tot += (observed[i] - mean) * (observed[i] - mean);
    if (observed[i] != 0) {
      ape += std::fabs(e / observed[i]);
      ++ape_n;
    }
  }
  q.rmse = std::sqrt(ss_res / observed.size());
  q.r_squared = ss_tot > 0 ? 1 - ss_res / ss_tot : 0;
  q.mape = ape_n > 0 ? 100 * ape / ape_n : 0;
  return q;
}

absl::StatusOr<double> FitParameterSize(absl::Span<const Sample> samples, FitQuality* quality) {
  std::vector<double> mb;
  for (const Sample& s : samples) {
    if (s.bytes_sent > 0 && s.bytes_received > 0) {
      mb.push_back((double(s.bytes_sent) + double(s.bytes_received)) / 2 / 1e6);
    }
  }
  if (mb.empty()) {
    return Unidentified("S_parm needs samples with bytes_sent and bytes_received; got none");
  }
  const double size = Median(mb);
  *quality = Quality("S_parm", mb, std::vector<double>(mb.size(), size));
  quality->note = "median of (bytes_sent + bytes_received) / 2 per iteration, MB";
  return size;
}

absl::StatusOr<double> FitRequiredBandwidth(absl::Span<const Sample> samples,
                                            double parameter_size_mb, FitQuality* quality) {
  if (!(parameter_size_mb > 0)) {
    return Unidentified("B_req needs S_parm (from bytes in the samples or the base profile)");
  }
  std::vector<double> comm;
  for (const Sample& s : samples) {
    if (Workers(s) == 1 && s.communication_time_s > 0) comm.push_back(s.communication_time_s);
  }
  if (comm.empty()) {
    return Unidentified(
        "B_req needs single-worker samples (cluster_workers = 1) with communication_time_s; "
        "got 0");
  }
  std::vector<double> bandwidth;
  for (double t : comm) bandwidth.push_back(2 * parameter_size_mb / t);
  const double b = 2 * parameter_size_mb / Median(comm);
  *quality = Quality("B_req", bandwidth, std::vector<double>(bandwidth.size(), b));
  quality->note = "2 S_parm / median communication time of single-worker samples, MB/s";
  return b;
}

absl::StatusOr<std::vector<predictor::ComputeProfile>> FitCompute(
    absl::Span<const Sample> samples, std::vector<FitQuality>* quality) {
  // (key, is instance type) -> batch -> iteration times.
  std::map<std::pair<std::string, bool>, std::map<std::pair<int, int>, std::vector<double>>> groups;
  for (const Sample& s : samples) {
    const double t = IterationTime(s);
    if (Workers(s) != 1 || t <= 0 || s.batch_size <= 0) continue;
    const bool by_instance = !s.instance_type.empty();
    const std::string key = by_instance ? s.instance_type : s.gpu_type;
    if (key.empty()) continue;
    groups[{key, by_instance}][{s.batch_size, std::max(1, s.gpus)}].push_back(t);
  }
  if (groups.empty()) {
    return Unidentified(
        "T_comp needs single-worker samples (cluster_workers = 1) with an iteration time, a "
        "batch_size and an instance_type or gpu_type; got 0");
  }
  std::vector<predictor::ComputeProfile> out;
  for (const auto& [key, by_batch] : groups) {
    // The batch size with most samples speaks for the type.
    auto best = by_batch.begin();
    for (auto it = by_batch.begin(); it != by_batch.end(); ++it) {
      if (it->second.size() > best->second.size()) best = it;
    }
    const auto [batch, gpus] = best->first;
    const double t = Median(best->second);
    predictor::ComputeProfile c;
    (key.second ? c.instance_type : c.gpu_type) = key.first;
    c.batch_per_gpu = std::max(1, batch / gpus);
    c.measured_samples_per_s = batch / t;
    out.push_back(c);
    FitQuality q = Quality(absl::StrCat("T_comp[", key.first, "]"), best->second,
                           std::vector<double>(best->second.size(), t));
    q.note =
        absl::StrFormat("single-worker iteration %.4f s at batch %d (%d GPU%s): %.1f samples/s", t,
                        batch, gpus, gpus == 1 ? "" : "s", batch / t);
    quality->push_back(std::move(q));
  }
  return out;
}

absl::StatusOr<ContentionFit> FitContention(absl::Span<const Sample> samples,
                                            const KnownParameters& known) {
  std::set<int> counts;
  for (const Sample& s : samples) {
    if (IterationTime(s) > 0) counts.insert(Workers(s));
  }
  if (counts.size() < 3) {
    return Unidentified(absl::StrCat(
        "contention needs runs with at least 3 distinct worker counts; got ", counts.size()));
  }
  std::vector<std::string> missing;
  if (!(known.parameter_size_mb > 0)) missing.push_back("S_parm");
  if (!(known.required_bandwidth_mb_per_s > 0)) missing.push_back("B_req");
  if (!(known.ps_bandwidth_mb_per_s > 0))
    missing.push_back("B_ps (the parameter server's bandwidth)");
  if (!missing.empty()) {
    return Unidentified(absl::StrCat("contention needs ", absl::StrJoin(missing, ", "),
                                     " to separate communication from compute"));
  }
  // Single-worker iteration time per (type, batch).
  std::map<std::tuple<std::string, std::string, int>, std::vector<double>> single;
  auto key_of = [](const Sample& s) {
    return std::make_tuple(s.instance_type, s.gpu_type, s.batch_size);
  };
  for (const Sample& s : samples) {
    // Without a type, runs of different hardware would share one baseline: leave them out.
    if (s.instance_type.empty() && s.gpu_type.empty()) continue;
    if (Workers(s) == 1 && IterationTime(s) > 0) single[key_of(s)].push_back(IterationTime(s));
  }
  std::map<std::tuple<std::string, std::string, int>, double> base;
  for (const auto& [key, times] : single) base[key] = Median(times);
  std::vector<ContentionResidual> residuals;
  int informative = 0;
  for (const Sample& s : samples) {
    const int n = Workers(s);
    if (n == 1 || IterationTime(s) <= 0) continue;
    auto it = base.find(key_of(s));
    if (it == base.end()) continue;
    residuals.push_back({n, IterationTime(s), it->second, known.parameter_size_mb,
                         known.required_bandwidth_mb_per_s, known.ps_bandwidth_mb_per_s});
    if (known.required_bandwidth_mb_per_s > known.ps_bandwidth_mb_per_s / n) ++informative;
  }
  if (residuals.empty()) {
    return Unidentified(
        "contention needs single-worker runs of the same instance (or GPU) type and batch as the "
        "multi-worker runs, to know T_comp; got none that match (samples without a type are "
        "left out)");
  }
  if (informative == 0) {
    return Unidentified(absl::StrFormat(
        "contention is not identifiable: no run has more than B_ps / B_req = %.2f workers, so the "
        "parameter server is never shared (eq. 8)",
        known.ps_bandwidth_mb_per_s / known.required_bandwidth_mb_per_s));
  }
  ContentionFit best;
  double best_cost = std::numeric_limits<double>::infinity();
  for (const auto& [a0, b0] : std::vector<std::pair<double, double>>{
           {0.3, -0.3}, {0.8, -1.9}, {0.1, 0.5}, {0.5, 0.0}, {0.2, -0.1}}) {
    // Building a problem of every sample takes a while: a stopped fit builds no more.
    if (auto stopped = PollFitStop(); !stopped.ok()) return stopped;
    double a1 = a0, b1 = b0;
    ceres::Problem problem;
    for (const ContentionResidual& r : residuals) {
      problem.AddResidualBlock(
          new ceres::AutoDiffCostFunction<ContentionResidual, 1, 1, 1>(new ContentionResidual(r)),
          new ceres::CauchyLoss(kLogResidualScale), &a1, &b1);
    }
    ceres::Solver::Summary summary;
    ceres::Solve(SolverOptions(), &problem, &summary);
    if (summary.IsSolutionUsable() && summary.final_cost < best_cost) {
      best_cost = summary.final_cost;
      best.contention = {a1, b1};
    }
  }
  if (!std::isfinite(best_cost)) {
    return absl::InternalError("contention fit: the solver found no usable solution");
  }
  std::vector<double> observed, predicted;
  for (const ContentionResidual& r : residuals) {
    observed.push_back(r.observed_s);
    predicted.push_back(PredictContention(r, best.contention));
  }
  best.quality = Quality("a1,b1", observed, predicted);
  best.quality.note =
      absl::StrFormat("eq. 8-9 on %d multi-worker iteration times at %d cluster sizes, Cauchy loss",
                      residuals.size(), counts.size());
  return best;
}

absl::StatusOr<predictor::MemoryModel> FitMemory(absl::Span<const Sample> samples,
                                                 FitQuality* quality) {
  std::vector<std::pair<double, double>> points;  // (memory, batch per GPU)
  std::set<double> batches;
  for (const Sample& s : samples) {
    if (s.gpu_memory_gib > 0 && s.batch_size > 0) {
      const double batch = double(s.batch_size) / std::max(1, s.gpus);
      points.emplace_back(s.gpu_memory_gib, batch);
      batches.insert(batch);
    }
  }
  if (batches.size() < 2) {
    return Unidentified(absl::StrCat(
        "memory model a2/b2 needs samples with gpu_memory_gib at at least 2 distinct batch "
        "sizes; got ",
        batches.size()));
  }
  // Start from the line through the two extreme batch sizes' mean memory.
  std::map<double, std::vector<double>> by_batch;
  for (const auto& [m, b] : points) by_batch[b].push_back(m);
  const double b_lo = by_batch.begin()->first, b_hi = by_batch.rbegin()->first;
  const double m_lo = Median(by_batch.begin()->second), m_hi = Median(by_batch.rbegin()->second);
  double a2 = m_hi != m_lo ? (b_hi - b_lo) / (m_hi - m_lo) : 1;
  double b2 = b_lo - a2 * m_lo;
  ceres::Problem problem;
  for (const auto& [m, b] : points) {
    problem.AddResidualBlock(
        new ceres::AutoDiffCostFunction<MemoryResidual, 1, 1, 1>(new MemoryResidual{m, b}),
        new ceres::CauchyLoss(kLogResidualScale), &a2, &b2);
  }
  ceres::Solver::Summary summary;
  ceres::Solve(SolverOptions(), &problem, &summary);
  if (!summary.IsSolutionUsable()) {
    return absl::InternalError("memory fit: the solver found no usable solution");
  }
  std::vector<double> observed, predicted;
  for (const auto& [m, b] : points) {
    observed.push_back(b);
    predicted.push_back(a2 * m + b2);
  }
  *quality = Quality("a2,b2", observed, predicted);
  quality->note = absl::StrCat("batch per GPU = a2 * GPU memory + b2 over ", batches.size(),
                               " batch sizes, Cauchy loss");
  return predictor::MemoryModel{a2, b2};
}

std::vector<double> GlobalSteps(absl::Span<const Sample> samples) {
  std::vector<double> out(samples.size());
  std::map<std::string, std::vector<size_t>> by_job;
  for (size_t i = 0; i < samples.size(); ++i) {
    out[i] = double(samples[i].step);
    by_job[samples[i].job_id].push_back(i);
  }
  for (auto& [job, rows] : by_job) {
    std::set<std::string> workers;
    for (size_t i : rows) workers.insert(samples[i].worker_id);
    if (workers.size() < 2) continue;
    // In wall-time order (a worker's own steps in order at equal times), each worker's latest
    // step summed.
    std::stable_sort(rows.begin(), rows.end(), [&](size_t a, size_t b) {
      return std::tie(samples[a].wall_time_s, samples[a].step) <
             std::tie(samples[b].wall_time_s, samples[b].step);
    });
    std::map<std::string, int64_t> latest;
    int64_t total = 0;
    for (size_t i : rows) {
      int64_t& last = latest[samples[i].worker_id];
      if (samples[i].step > last) {
        total += samples[i].step - last;
        last = samples[i].step;
      }
      out[i] = double(total);
    }
  }
  return out;
}

absl::StatusOr<predictor::LossModel> FitLoss(absl::Span<const Sample> samples,
                                             FitQuality* quality) {
  const std::vector<double> global_steps = GlobalSteps(samples);
  std::vector<LossPoint> points;
  std::set<double> batches;
  std::set<int> sizes;
  double max_j = 0, min_loss = std::numeric_limits<double>::infinity();
  std::vector<double> losses;
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (s.loss <= 0) continue;
    const int n = Workers(s);
    const double batch = s.batch_size > 0 ? s.batch_size : 1;
    points.push_back({global_steps[i], batch, HomogeneousConvergence(n), n, s.loss});
    batches.insert(batch);
    sizes.insert(n);
    max_j = std::max(max_j, global_steps[i]);
    min_loss = std::min(min_loss, s.loss);
    losses.push_back(s.loss);
  }
  if (points.size() < 8) {
    return Unidentified(absl::StrCat(
        "loss coefficients g1..g5 need at least 8 samples with a loss; got ", points.size()));
  }
  const bool fit_g2 = batches.size() >= 2;
  const bool fit_g4 = sizes.size() >= 2;
  const double unit = std::max(1e-9, Median(losses));
  const double min_convergence = sizes.count(1) ? 0.0 : HomogeneousConvergence(*sizes.begin());
  predictor::LossModel best{};
  double best_cost = std::numeric_limits<double>::infinity();
  for (double g1_share : {0.01, 0.1, 0.5}) {
    for (double g5_share : {0.5, 0.9}) {
      if (auto stopped = PollFitStop(); !stopped.ok()) return stopped;
      double g1 = std::max(1.0, g1_share * max_j), g2 = 0, g4 = 1, g5 = g5_share * min_loss;
      // g3 from the mean of (loss - g5) (j + g1) / sqrt((R + g4) |N|).
      double sum = 0;
      for (const LossPoint& p : points) {
        sum += (p.loss - g5) * (p.j + g1) / std::sqrt((p.convergence + g4) * p.workers);
      }
      double g3 = sum / points.size();
      ceres::Problem problem;
      for (const LossPoint& p : points) {
        problem.AddResidualBlock(new ceres::AutoDiffCostFunction<LossResidual, 1, 1, 1, 1, 1, 1>(
                                     new LossResidual{p, unit}),
                                 new ceres::CauchyLoss(0.05), &g1, &g2, &g3, &g4, &g5);
      }
      problem.SetParameterLowerBound(&g1, 0, 1.0);  // j + g1 > 0 at j = 0
      problem.SetParameterLowerBound(&g4, 0, -min_convergence + 1e-6);
      problem.SetParameterLowerBound(&g5, 0, 0.0);
      problem.SetParameterUpperBound(&g5, 0, min_loss);  // the floor lies below every loss seen
      if (!fit_g2) problem.SetParameterBlockConstant(&g2);
      if (!fit_g4) problem.SetParameterBlockConstant(&g4);
      ceres::Solver::Summary summary;
      ceres::Solve(SolverOptions(), &problem, &summary);
      if (summary.IsSolutionUsable() && summary.final_cost < best_cost) {
        best_cost = summary.final_cost;
        best = {g1, g2, g3, g4, g5};
      }
    }
  }
  if (!std::isfinite(best_cost)) {
    return absl::InternalError("loss fit: the solver found no usable solution");
  }
  std::vector<double> observed, predicted;
  for (const LossPoint& p : points) {
    observed.push_back(p.loss);
    predicted.push_back(PredictLoss(best, p));
  }
  *quality = Quality("g1..g5", observed, predicted);
  std::vector<std::string> notes = {absl::StrCat(
      "eq. 3 on ", points.size(),
      " loss samples, j = global step (a live run's worker steps summed), Cauchy loss")};
  if (!fit_g2) notes.push_back("g2 not identified (loss curves at 1 batch size): fixed at 0");
  if (!fit_g4) {
    notes.push_back("g4 not identified (loss curves at 1 cluster size): fixed at 1, g3 absorbs it");
  }
  quality->note = absl::StrJoin(notes, "; ");
  return best;
}

}  // namespace spotdnn::profiler
