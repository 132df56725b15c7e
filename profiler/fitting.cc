#include "profiler/fitting.h"

#include <algorithm>
#include <cmath>
#include <functional>
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
#include "profiler/cluster_fit.h"
#include "profiler/fit_stop.h"
#include "profiler/importers.h"

namespace spotdnn::profiler {
namespace {

// Cauchy scale of log residuals: samples more than ~5% off count less and less.
constexpr double kLogResidualScale = 0.05;

double Median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  }
  return m;
}

int Workers(const Sample& s) { return std::max(1, s.cluster_workers); }

// A sample's iteration time: measured, or |N| / cluster speed for identical workers.
double IterationTime(const Sample& s) {
  if (s.iteration_time_s > 0) return s.iteration_time_s;
  if (s.cluster_steps_per_s > 0) return Workers(s) / s.cluster_steps_per_s;
  return 0;
}

ceres::Solver::Options SolverOptions() {
  ceres::Solver::Options options;
  options.linear_solver_type = ceres::DENSE_QR;
  options.max_num_iterations = 200;
  options.logging_type = ceres::SILENT;
  options.minimizer_progress_to_stdout = false;
  options.num_threads = 1;
  AddFitStopCallback(options);
  return options;
}

absl::Status Unidentified(absl::string_view message) {
  return absl::FailedPreconditionError(message);
}

// B_wk / B_req under eq. 8 with ratio r = B_ps / B_req.
template <typename T>
T BandwidthFraction(T p, T r, int workers) {
  const T shared = r / T(workers);
  if (shared < T(1)) return p * shared + (T(1) - p);
  return T(1);
}

template <typename T>
T Clamp01(T p) {
  if (p < T(0)) return T(0);
  if (p > T(1)) return T(1);
  return p;
}

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

namespace {

// The paper's per-parameter fits (eqs. 3, 6-10) from per-iteration samples. Polls the fit's stop
// check (fit_stop.h) between the fits.
absl::StatusOr<WorkloadFit> FitPaperWorkload(absl::Span<const Sample> samples,
                                             const KnownParameters& known) {
  if (samples.empty()) {
    return absl::FailedPreconditionError("no samples to fit: report or import some first");
  }
  WorkloadFit fit;
  // Records a parameter that the data could not determine (FAILED_PRECONDITION); other errors
  // are the fit's own failure and travel up.
  auto unidentified = [&](absl::string_view parameter, const absl::Status& status) {
    if (auto s = FitStopStatus(); !s.ok()) return s;  // a solve was stopped, not unable
    FitQuality q;
    q.parameter = std::string(parameter);
    q.note = std::string(status.message());
    fit.quality.push_back(std::move(q));
    return absl::IsFailedPrecondition(status) ? absl::OkStatus() : status;
  };
  KnownParameters k = known;
  if (k.parameter_size_mb > 0) {
    FitQuality q{.parameter = "S_parm", .identified = true, .note = "given by the base profile"};
    fit.quality.push_back(q);
  } else {
    FitQuality q;
    auto size = FitParameterSize(samples, &q);
    if (size.ok()) {
      fit.parameter_size_mb = k.parameter_size_mb = *size;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("S_parm", size.status()); !s.ok()) {
      return s;
    }
  }
  if (k.required_bandwidth_mb_per_s > 0) {
    fit.quality.push_back(
        FitQuality{.parameter = "B_req", .identified = true, .note = "given by the base profile"});
  } else {
    FitQuality q;
    auto b = FitRequiredBandwidth(samples, k.parameter_size_mb, &q);
    if (b.ok()) {
      fit.required_bandwidth_mb_per_s = k.required_bandwidth_mb_per_s = *b;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("B_req", b.status()); !s.ok()) {
      return s;
    }
  }
  {
    std::vector<FitQuality> q;
    auto compute = FitCompute(samples, &q);
    if (compute.ok()) {
      fit.compute = *std::move(compute);
      fit.quality.insert(fit.quality.end(), q.begin(), q.end());
    } else if (auto s = unidentified("T_comp", compute.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  {
    auto contention = FitContention(samples, k);
    if (contention.ok()) {
      fit.contention = contention->contention;
      fit.quality.push_back(contention->quality);
    } else if (auto s = unidentified("a1,b1", contention.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  {
    FitQuality q;
    auto memory = FitMemory(samples, &q);
    if (memory.ok()) {
      fit.memory = *memory;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("a2,b2", memory.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  {
    FitQuality q;
    auto loss = FitLoss(samples, &q);
    if (loss.ok()) {
      fit.loss = *loss;
      fit.quality.push_back(q);
    } else if (auto s = unidentified("g1..g5", loss.status()); !s.ok()) {
      return s;
    }
  }
  if (auto s = PollFitStop(); !s.ok()) return s;
  return fit;
}

// A row for the runs the cluster fits used.
FitQuality RunsRow(const RunSet& runs, size_t configurations) {
  FitQuality q;
  q.parameter = "runs";
  q.identified = !runs.runs.empty();
  q.points = static_cast<int>(runs.runs.size());
  q.note = absl::StrCat(runs.runs.size(), runs.runs.size() == 1 ? " run in " : " runs in ",
                        configurations,
                        configurations == 1 ? " cluster configuration" : " cluster configurations");
  if (!runs.notes.empty()) {
    absl::StrAppend(&q.note, "; ", runs.notes.size(), " left out, first: ", runs.notes[0]);
  }
  return q;
}

// Compute entries of the fitted types: by instance type when the runs name one (and then by its
// GPU type too, when no other fitted type has that GPU), else by GPU type.
std::vector<predictor::ComputeProfile> ComputeEntries(
    const std::map<std::string, double>& times, const std::map<std::string, TypeInfo>& types) {
  std::map<std::string, int> gpu_count;
  for (const auto& [key, t] : times) {
    auto it = types.find(key);
    if (it != types.end()) ++gpu_count[it->second.gpu_type];
  }
  std::vector<predictor::ComputeProfile> out;
  for (const auto& [key, t] : times) {
    auto it = types.find(key);
    const TypeInfo info = it == types.end() ? TypeInfo{.gpu_type = key} : it->second;
    predictor::ComputeProfile c;
    c.batch_per_gpu = info.batch_per_gpu;
    c.compute_time_s = t;
    if (!info.instance_type.empty()) {
      c.instance_type = info.instance_type;
      out.push_back(c);
      if (!info.gpu_type.empty() && gpu_count[info.gpu_type] == 1 && !times.count(info.gpu_type)) {
        c.instance_type.clear();
        c.gpu_type = info.gpu_type;
        out.push_back(c);
      }
    } else {
      c.gpu_type = key;
      out.push_back(c);
    }
  }
  return out;
}

// Keeps the rows of `from` that are not about contention, compute or S_parm/B_req.
void KeepOtherRows(const WorkloadFit& from, WorkloadFit& to) {
  for (const FitQuality& q : from.quality) {
    if (q.parameter == "a2,b2" || q.parameter == "g1..g5") to.quality.push_back(q);
  }
  to.memory = from.memory;
  to.loss = from.loss;
}

absl::StatusOr<WorkloadFit> FitSharedPsWorkload(const RunSet& runs,
                                                absl::Span<const ClusterObservation> observations,
                                                const WorkloadFit& paper,
                                                const KnownParameters& known) {
  if (!(known.ps_bandwidth_mb_per_s > 0)) {
    return absl::FailedPreconditionError(
        "the shared-ps model needs B_ps, the parameter server's bandwidth the runs trained "
        "against (--ps-bandwidth), to express the servers' time per iteration as S_parm");
  }
  SharedPsFitOptions options;
  if (known.parameter_size_mb > 0) {
    options.service_time_s = 2 * known.parameter_size_mb / known.ps_bandwidth_mb_per_s;
  }
  auto result = FitSharedPs(observations, options);
  if (!result.ok()) return result.status();
  WorkloadFit fit;
  fit.variant = predictor::ModelVariant::kSharedPs;
  fit.shared_ps = predictor::SharedPsModel{result->fit.queueing};
  const double size = result->fit.service_time_s * known.ps_bandwidth_mb_per_s / 2;
  if (!(known.parameter_size_mb > 0)) fit.parameter_size_mb = size;
  if (!(known.required_bandwidth_mb_per_s > 0)) {
    fit.required_bandwidth_mb_per_s = known.ps_bandwidth_mb_per_s;
  }
  fit.compute = ComputeEntries(result->fit.compute_time_s, runs.types);
  fit.compute_is_complete = true;
  fit.quality.push_back(RunsRow(runs, observations.size()));
  for (FitQuality q : result->quality) {
    if (q.parameter == "S_parm") {
      absl::StrAppend(&q.note, absl::StrFormat("; S_parm = d B_ps / 2 = %.4g MB at B_ps = %g MB/s",
                                               size, known.ps_bandwidth_mb_per_s));
    }
    fit.quality.push_back(std::move(q));
  }
  fit.quality.push_back(FitQuality{
      .parameter = "B_req",
      .identified = true,
      .note = "set to B_ps: the shared-ps variant does not use it (a lone worker moves 2 S_parm "
              "through one server in d)"});
  KeepOtherRows(paper, fit);
  return fit;
}

absl::StatusOr<WorkloadFit> FitPaperFromRuns(const RunSet& runs,
                                             absl::Span<const ClusterObservation> observations,
                                             const WorkloadFit& paper,
                                             const KnownParameters& known) {
  auto result = FitPaperForm(observations, runs.types, known.ps_bandwidth_mb_per_s,
                             known.pcie_bandwidth_mb_per_s);
  if (!result.ok()) return result.status();
  WorkloadFit fit;
  fit.variant = *known.variant;
  fit.parameter_size_mb = result->fit.parameter_size_mb;
  fit.required_bandwidth_mb_per_s = result->fit.required_bandwidth_mb_per_s;
  fit.contention = result->fit.contention;
  fit.compute = ComputeEntries(result->fit.compute_time_s, runs.types);
  fit.compute_is_complete = true;
  fit.quality.push_back(RunsRow(runs, observations.size()));
  fit.quality.insert(fit.quality.end(), result->quality.begin(), result->quality.end());
  KeepOtherRows(paper, fit);
  return fit;
}

// FitWorkload without its stop scope.
absl::StatusOr<WorkloadFit> FitVariants(absl::Span<const Sample> samples,
                                        const KnownParameters& known) {
  auto paper = FitPaperWorkload(samples, known);
  if (!paper.ok()) return paper.status();
  if (auto s = PollFitStop(); !s.ok()) return s;
  const RunSet runs = RunsFromSamples(samples);
  const std::vector<ClusterObservation> observations = GroupRuns(runs.runs);
  if (known.variant.has_value() && *known.variant != predictor::ModelVariant::kSharedPs) {
    paper->variant = *known.variant;
    if (!paper->contention && *known.variant == predictor::ModelVariant::kPaper &&
        !observations.empty()) {
      // No per-iteration times to fit eqs. 8-9 from: fit them to the runs' speeds instead.
      auto from_runs = FitPaperFromRuns(runs, observations, *paper, known);
      if (from_runs.ok()) return from_runs;
      if (!absl::IsFailedPrecondition(from_runs.status())) return from_runs.status();
    }
    return paper;
  }
  auto shared = observations.empty()
                    ? absl::StatusOr<WorkloadFit>(absl::FailedPreconditionError(
                          "the shared-ps model needs runs with a speed and a type; got none"))
                    : FitSharedPsWorkload(runs, observations, *paper, known);
  if (known.variant.has_value()) return shared;  // shared-ps asked for
  if (shared.ok() && !paper->contention) return shared;
  if (!shared.ok() && !absl::IsFailedPrecondition(shared.status())) return shared.status();
  if (!shared.ok() && !observations.empty()) {
    // Why the runs did not give the shared-ps variant (the paper's was fitted instead).
    FitQuality q;
    q.parameter = "shared-ps";
    q.note = std::string(shared.status().message());
    paper->quality.push_back(std::move(q));
  }
  return paper;
}

}  // namespace

absl::StatusOr<WorkloadFit> FitWorkload(absl::Span<const Sample> samples,
                                        const KnownParameters& known,
                                        const std::function<absl::Status()>& stop) {
  FitStopScope scope(stop);  // every solve of this fit polls `stop`
  auto fit = FitVariants(samples, known);
  // A fit whose solves were stopped fails with the stop's status, whatever the solves made of it.
  if (auto s = PollFitStop(); !s.ok()) return s;
  return fit;
}

predictor::WorkloadProfile ProfileOf(const WorkloadFit& fit, const KnownParameters& known,
                                     std::string name) {
  predictor::WorkloadProfile p;
  p.name = std::move(name);
  p.parameter_size_mb = fit.parameter_size_mb.value_or(known.parameter_size_mb);
  p.required_bandwidth_mb_per_s =
      fit.required_bandwidth_mb_per_s.value_or(known.required_bandwidth_mb_per_s);
  p.compute = fit.compute;
  p.contention = fit.contention;
  p.memory = fit.memory;
  p.loss = fit.loss;
  p.variant = fit.variant;
  p.shared_ps = fit.shared_ps;
  return p;
}

// ---- Cluster speed ----

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
