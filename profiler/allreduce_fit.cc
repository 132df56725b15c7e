#include "profiler/allreduce_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "Eigen/Dense"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "ceres/ceres.h"
#include "predictor/allreduce.h"
#include "profiler/fit_common.h"
#include "profiler/fit_stop.h"

namespace spotdnn::profiler {
namespace {

using predictor::AllReduceShape;

// (c^g + n^g)^(1/g) on Ceres jets, stable for any magnitudes.
template <typename T>
T Overlap(const T& c, const T& n, const T& g) {
  if (n <= T(0)) return c;
  const T lc = log(c), ln = log(n);
  const T hi = lc > ln ? lc : ln;
  return exp(hi + log(exp(g * (lc - hi)) + exp(g * (ln - hi))) / g);
}

// The all-reduce terms' features in AllReduceModel's order: a_r, b_r, a_n, b_s, c_k, e_2.
constexpr int kTerms = 6;
constexpr const char* kTermNames[kTerms] = {"a_r", "b_r", "a_n", "b_s", "c_k", "e_2"};
std::array<double, kTerms> Features(const AllReduceShape& s) {
  return {s.intra_on, s.ring, s.cross_on, s.straggler, s.per_gpu, s.pair};
}

struct ComputeResidual {
  double b, k, y;
  template <typename T>
  bool operator()(const T* const c, T* r) const {
    const T t = (c[0] + c[1] * T(b)) * (T(1) + c[2] * T(k - 1));
    if (t <= T(0)) return false;
    r[0] = log(t) - T(std::log(y));
    return true;
  }
};

struct StepResidual {
  double compute, y;
  std::array<double, kTerms> f;
  template <typename T>
  bool operator()(const T* const p, const T* const g, T* r) const {
    T n = T(0);
    for (int j = 0; j < kTerms; ++j) n += p[j] * T(f[j]);
    r[0] = log(Overlap(T(compute), n, g[0])) - T(std::log(y));
    return true;
  }
};

// The compute of one run under the model: its slowest instance.
double RunCompute(const predictor::AllReduceModel& m, const AllReduceRun& run) {
  double c = 0;
  for (int k : run.gpus_per_instance) {
    c = std::max(c, predictor::AllReduceCompute(m, run.local_batch, k));
  }
  return c;
}

// Columns of `x` (rows: observations) the fit can determine, taken in `order` of preference: a
// column is kept when it is not in the span of those kept before it. Terms the placements cannot
// tell apart (runs on two instances only: a_n, b_s and e_2 are one constant) leave the preferred
// one, not none.
std::vector<bool> Identified(const Eigen::MatrixXd& x, absl::Span<const int> order) {
  std::vector<bool> out(x.cols(), false);
  if (x.rows() == 0) return out;
  Eigen::MatrixXd kept(x.rows(), 0);
  int rank = 0;
  for (int j : order) {
    if (x.col(j).cwiseAbs().maxCoeff() == 0) continue;
    Eigen::MatrixXd with(x.rows(), kept.cols() + 1);
    with << kept, x.col(j);
    const int r = Eigen::ColPivHouseholderQR<Eigen::MatrixXd>(with).rank();
    if (r > rank) {
      out[j] = true;
      kept = std::move(with);
      rank = r;
    }
  }
  return out;
}

// The standard errors of the parameters of `problem` (the values of `blocks`, in that order) at
// its optimum: the square roots of the diagonal of sigma^2 (J^T J)^-1 over the `free` columns,
// sigma^2 = sum r^2 / (residuals - free parameters); 0 for the other columns, and for all when the
// residuals do not determine them. `problem` has neither manifolds nor constant blocks.
std::vector<double> StandardErrors(ceres::Problem& problem, const std::vector<double*>& blocks,
                                   const std::vector<int>& free) {
  ceres::Problem::EvaluateOptions options;
  options.parameter_blocks = blocks;
  double cost = 0;
  ceres::CRSMatrix crs;
  if (!problem.Evaluate(options, &cost, nullptr, nullptr, &crs)) return {};
  std::vector<double> out(crs.num_cols, 0.0);
  const int dof = crs.num_rows - static_cast<int>(free.size());
  if (dof <= 0 || free.empty()) return out;
  Eigen::MatrixXd j = Eigen::MatrixXd::Zero(crs.num_rows, free.size());
  for (int r = 0; r < crs.num_rows; ++r) {
    for (int k = crs.rows[r]; k < crs.rows[r + 1]; ++k) {
      const auto at = std::find(free.begin(), free.end(), crs.cols[k]);
      if (at != free.end()) j(r, at - free.begin()) = crs.values[k];
    }
  }
  const Eigen::MatrixXd m = j.transpose() * j;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(m);
  if (eigen.info() != Eigen::Success) return out;
  const double largest = eigen.eigenvalues().cwiseAbs().maxCoeff();
  if (!(largest > 0)) return out;
  // The pseudo-inverse: a direction the data do not determine gets no variance.
  Eigen::VectorXd inverse = eigen.eigenvalues();
  for (int i = 0; i < inverse.size(); ++i) {
    inverse(i) = inverse(i) > 1e-12 * largest ? 1 / inverse(i) : 0;
  }
  const Eigen::MatrixXd covariance =
      eigen.eigenvectors() * inverse.asDiagonal() * eigen.eigenvectors().transpose();
  const double sigma2 = 2 * cost / dof;
  for (size_t i = 0; i < free.size(); ++i) {
    const double v = covariance(i, i) * sigma2;
    out[free[i]] = v > 0 && std::isfinite(v) ? std::sqrt(v) : 0;
  }
  return out;
}

}  // namespace

int AllReduceRun::Ranks() const {
  int r = 0;
  for (int k : gpus_per_instance) r += k;
  return r;
}

bool AllReduceRun::Even() const {
  if (spread_evenly) return true;
  return std::all_of(gpus_per_instance.begin(), gpus_per_instance.end(),
                     [&](int k) { return k == gpus_per_instance.front(); });
}

std::string AllReduceRun::Describe() const {
  if (Even() && !gpus_per_instance.empty() &&
      std::all_of(gpus_per_instance.begin(), gpus_per_instance.end(),
                  [&](int k) { return k == gpus_per_instance.front(); })) {
    return absl::StrCat(gpus_per_instance.front(), "x", gpus_per_instance.size());
  }
  return absl::StrJoin(gpus_per_instance, "+");
}

std::vector<AllReduceRun> AllReduceRunsOf(absl::Span<const Sample> samples,
                                          const std::string& gpu_type) {
  // (job, placement, batch, step for one-row configurations) -> step and sync times.
  std::map<std::tuple<std::string, std::string, int, bool>,
           std::pair<std::vector<double>, std::vector<double>>>
      groups;
  std::map<std::tuple<std::string, std::string, int, bool>, std::vector<int>> placements;
  for (const Sample& s : samples) {
    if (s.placement.empty() || s.gpu_type != gpu_type || s.iteration_time_s <= 0 ||
        s.batch_size <= 0) {
      continue;
    }
    auto gpus = ParsePlacement(s.placement);
    if (!gpus.ok()) continue;
    const auto key =
        std::make_tuple(s.job_id, s.placement, s.batch_size, s.worker_id == "scalability");
    groups[key].first.push_back(s.iteration_time_s);
    groups[key].second.push_back(s.communication_time_s);
    placements[key] = *std::move(gpus);
  }
  std::vector<AllReduceRun> runs;
  for (auto& [key, times] : groups) {
    AllReduceRun run;
    run.gpus_per_instance = placements[key];
    run.local_batch = std::get<2>(key);
    run.step_s = fit_internal::Median(times.first);
    run.sync_s = fit_internal::Median(times.second);
    run.spread_evenly = std::get<3>(key);
    runs.push_back(std::move(run));
  }
  return runs;
}

absl::StatusOr<AllReduceFit> FitAllReduce(const std::string& gpu_type,
                                          absl::Span<const AllReduceRun> runs) {
  const std::string name = absl::StrCat("allreduce[", gpu_type, "]");
  std::vector<AllReduceShape> shapes;
  std::vector<const AllReduceRun*> used;
  for (const AllReduceRun& run : runs) {
    auto shape = predictor::ShapeOf(run.gpus_per_instance);
    if (!shape.ok() || run.step_s <= 0 || run.local_batch < 1) continue;
    shapes.push_back(*shape);
    used.push_back(&run);
  }
  if (used.empty()) {
    return fit_internal::Unidentified(
        absl::StrCat(name, ": no synchronous run with a placement, a local batch and a step time"));
  }
  AllReduceFit out;
  predictor::AllReduceModel& m = out.model;
  m.gpu_type = gpu_type;
  for (const AllReduceShape& s : shapes) {
    m.max_gpus_per_instance = std::max(m.max_gpus_per_instance, s.max_gpus);
  }

  // Stage 1: compute from the step less its all-reduce (runs that measured it, and single ranks).
  bool any_sync = false;
  for (const AllReduceRun* r : used) any_sync |= r->Ranks() > 1 && r->sync_s > 0;
  std::vector<double> cb, ck, cy;
  for (size_t i = 0; i < used.size(); ++i) {
    const AllReduceRun& r = *used[i];
    const bool single = r.Ranks() == 1;
    if (!single && !(any_sync && r.sync_s > 0)) continue;
    const double y = r.step_s - (single ? 0 : r.sync_s);
    if (y <= 0) continue;
    cb.push_back(r.local_batch);
    ck.push_back(shapes[i].max_gpus);
    cy.push_back(y);
  }
  if (cy.empty()) {
    return fit_internal::Unidentified(absl::StrCat(
        name,
        ": the compute time needs single-GPU runs or runs that measured their all-reduce "
        "(sync_time)"));
  }
  const bool batches_vary =
      *std::max_element(cb.begin(), cb.end()) > *std::min_element(cb.begin(), cb.end());
  const bool contention =
      *std::max_element(ck.begin(), ck.end()) > 1 && *std::min_element(ck.begin(), ck.end()) == 1;
  double c[3] = {fit_internal::Median(cy) / 2, 0, 0};
  if (batches_vary) {
    double sb = 0;
    for (double b : cb) sb += b;
    c[1] = fit_internal::Median(cy) / 2 / (sb / cb.size());
  }
  {
    ceres::Problem problem;
    for (size_t i = 0; i < cy.size(); ++i) {
      problem.AddResidualBlock(new ceres::AutoDiffCostFunction<ComputeResidual, 1, 3>(
                                   new ComputeResidual{cb[i], ck[i], cy[i]}),
                               nullptr, c);
    }
    for (int j = 0; j < 3; ++j) problem.SetParameterLowerBound(c, j, 0.0);
    std::vector<int> fixed;
    if (!batches_vary) fixed.push_back(1);
    if (!contention) fixed.push_back(2);
    if (!fixed.empty()) problem.SetManifold(c, new ceres::SubsetManifold(3, fixed));
    ceres::Solver::Summary summary;
    ceres::Solve(FitSolverOptions(fit_internal::kMaxSolverIterations), &problem, &summary);
    if (auto s = FitStopStatus(); !s.ok()) return s;
    ceres::Problem at_optimum;
    for (size_t i = 0; i < cy.size(); ++i) {
      at_optimum.AddResidualBlock(new ceres::AutoDiffCostFunction<ComputeResidual, 1, 3>(
                                      new ComputeResidual{cb[i], ck[i], cy[i]}),
                                  nullptr, c);
    }
    const bool varies[3] = {true, batches_vary, contention};
    std::vector<int> free;
    for (int j = 0; j < 3; ++j) {
      if (varies[j]) free.push_back(j);
    }
    const std::vector<double> sd = StandardErrors(at_optimum, {c}, free);
    const char* names[3] = {"a_c", "b_c", "d"};
    for (int j : free) {
      out.spread.push_back({absl::StrCat(name, ".", names[j]), c[j], sd.empty() ? 0 : sd[j]});
    }
  }
  m.compute_fixed_s = c[0];
  m.compute_per_sample_s = c[1];
  m.compute_contention = c[2];
  {
    std::vector<double> predicted;
    for (size_t i = 0; i < cy.size(); ++i) {
      predicted.push_back(predictor::AllReduceCompute(m, cb[i], static_cast<int>(ck[i])));
    }
    FitQuality q = Quality(absl::StrCat(name, " compute a_c,b_c,d"), cy, predicted);
    q.identified = true;
    std::vector<std::string> missing;
    if (!batches_vary) missing.push_back("b_c (one local batch only: a_c holds it all)");
    if (!contention) missing.push_back("d (no run with both 1 and several GPUs on an instance)");
    q.note = missing.empty() ? "step time less the all-reduce's share"
                             : absl::StrCat("not identified: ", absl::StrJoin(missing, "; "));
    out.quality.push_back(std::move(q));
  }

  // Stage 2: the all-reduce terms and gamma on the log step time of the multi-rank runs.
  std::vector<size_t> multi;
  for (size_t i = 0; i < used.size(); ++i) {
    if (shapes[i].ranks > 1) multi.push_back(i);
  }
  Eigen::MatrixXd x(multi.size(), kTerms);
  for (size_t r = 0; r < multi.size(); ++r) {
    const auto f = Features(shapes[multi[r]]);
    for (int j = 0; j < kTerms; ++j) x(r, j) = f[j];
  }
  // A fixed cost first, then what grows with the placement, the two-instance term last.
  const std::vector<bool> identified = Identified(x, {0, 1, 2, 4, 3, 5});
  m.cross_instance = false;
  for (size_t i : multi) m.cross_instance |= shapes[i].instances > 1;
  std::array<double, kTerms> best_p{};
  double best_g = 1, best_cost = std::numeric_limits<double>::infinity();
  // One residual per multi-rank run on the log step time, over the terms `p` and gamma `g`.
  auto add_steps = [&](ceres::Problem& problem, double* p, double* g) {
    for (size_t i : multi) {
      problem.AddResidualBlock(
          new ceres::AutoDiffCostFunction<StepResidual, 1, kTerms, 1>(
              new StepResidual{RunCompute(m, *used[i]), used[i]->step_s, Features(shapes[i])}),
          nullptr, p, g);
    }
  };
  if (!multi.empty()) {
    for (double s0 : {0.001, 0.01, 0.1}) {
      for (double g0 : {1.0, 2.0, 5.0}) {
        std::array<double, kTerms> p;
        for (int j = 0; j < kTerms; ++j) p[j] = identified[j] ? s0 * fit_internal::Median(cy) : 0;
        double g = g0;
        ceres::Problem problem;
        add_steps(problem, p.data(), &g);
        for (int j = 0; j < kTerms; ++j) problem.SetParameterLowerBound(p.data(), j, 0.0);
        std::vector<int> fixed;
        for (int j = 0; j < kTerms; ++j) {
          if (!identified[j]) fixed.push_back(j);
        }
        if (static_cast<int>(fixed.size()) == kTerms) {
          problem.SetParameterBlockConstant(p.data());
        } else if (!fixed.empty()) {
          problem.SetManifold(p.data(), new ceres::SubsetManifold(kTerms, fixed));
        }
        problem.SetParameterLowerBound(&g, 0, 1.0);
        problem.SetParameterUpperBound(&g, 0, 10.0);
        ceres::Solver::Summary summary;
        ceres::Solve(FitSolverOptions(300), &problem, &summary);
        if (auto s = FitStopStatus(); !s.ok()) return s;
        if (summary.final_cost < best_cost) {
          best_cost = summary.final_cost;
          best_p = p;
          best_g = g;
        }
      }
    }
  }
  if (!multi.empty()) {
    // The spread of the all-reduce terms and gamma at the best start's optimum.
    std::array<double, kTerms> p = best_p;
    double g = best_g;
    ceres::Problem problem;
    add_steps(problem, p.data(), &g);
    std::vector<int> free;
    for (int j = 0; j < kTerms; ++j) {
      if (identified[j]) free.push_back(j);
    }
    free.push_back(kTerms);  // gamma
    const std::vector<double> sd = StandardErrors(problem, {p.data(), &g}, free);
    for (int j : free) {
      out.spread.push_back({absl::StrCat(name, ".", j < kTerms ? kTermNames[j] : "gamma"),
                            j < kTerms ? p[j] : g, sd.empty() ? 0 : sd[j]});
    }
  }
  m.intra_fixed_s = best_p[0];
  m.intra_ring_s = best_p[1];
  m.cross_fixed_s = best_p[2];
  m.cross_straggler_s = best_p[3];
  m.cross_per_gpu_s = best_p[4];
  m.cross_pair_s = best_p[5];
  m.overlap_gamma = best_g;
  {
    std::vector<double> observed, predicted;
    for (size_t i = 0; i < used.size(); ++i) {
      auto step =
          predictor::AllReduceStepTime(m, used[i]->gpus_per_instance, {used[i]->local_batch});
      if (!step.ok()) continue;
      observed.push_back(used[i]->step_s);
      predicted.push_back(step->step_s);
      out.worst.push_back({name, PlacementText(used[i]->gpus_per_instance), used[i]->local_batch,
                           used[i]->step_s, step->step_s,
                           100 * (step->step_s - used[i]->step_s) / used[i]->step_s});
    }
    std::sort(out.worst.begin(), out.worst.end(), [](const FitResidual& a, const FitResidual& b) {
      return std::fabs(a.error_pct) > std::fabs(b.error_pct);
    });
    if (out.worst.size() > static_cast<size_t>(kWorstResiduals)) out.worst.resize(kWorstResiduals);
    FitQuality q =
        Quality(absl::StrCat(name, " step a_r,b_r,a_n,b_s,c_k,e_2,gamma"), observed, predicted);
    q.identified = !multi.empty();
    std::vector<std::string> missing;
    for (int j = 0; j < kTerms; ++j) {
      if (!identified[j]) missing.push_back(kTermNames[j]);
    }
    if (multi.empty()) {
      q.note = "no run on more than one GPU: the all-reduce is not identified";
    } else if (!missing.empty()) {
      q.note = absl::StrCat("not identified (left 0): ", absl::StrJoin(missing, ", "),
                            m.cross_instance ? "" : " (no run on more than one instance)");
    } else {
      q.note = absl::StrCat("gamma = ", absl::StrFormat("%.3g", m.overlap_gamma));
    }
    out.quality.push_back(std::move(q));
  }
  return out;
}

double PolluxModel::StepTime(const AllReduceRun& run) const {
  const double comp = alpha_c + beta_c * run.local_batch;
  const double x = std::max(run.Ranks() - 2.0, 1e-8);
  if (run.Ranks() == 1) return comp;
  const double net = run.Instances() > 1 ? alpha_n + beta_n * x : alpha_r + beta_r * x;
  return predictor::OverlapSteps(comp, net, gamma);
}

namespace {

struct PolluxResidual {
  double b, y, w;
  int instances, ranks;
  template <typename T>
  bool operator()(const T* const q, T* r) const {
    const T comp = q[0] + q[1] * T(b);
    if (ranks == 1) {
      r[0] = T(w) * (log(comp) - T(std::log(y)));
      return true;
    }
    const T x = T(std::max(ranks - 2.0, 1e-8));
    const T net = instances > 1 ? q[4] + q[5] * x : q[2] + q[3] * x;
    r[0] = T(w) * (log(Overlap(comp, net, q[6])) - T(std::log(y)));
    return true;
  }
};

struct PolluxRegulariser {
  template <typename T>
  bool operator()(const T* const q, T* r) const {
    r[0] = sqrt(T(1e-3)) * (q[6] - T(1));
    r[1] = sqrt(T(1e-2)) * q[3] / q[2];
    r[2] = sqrt(T(1e-2)) * q[5] / q[4];
    return true;
  }
};

}  // namespace

absl::StatusOr<PolluxModel> FitPollux(absl::Span<const AllReduceRun> runs) {
  std::vector<const AllReduceRun*> used;
  for (const AllReduceRun& r : runs) {
    if (r.step_s > 0 && r.local_batch >= 1 && !r.gpus_per_instance.empty()) used.push_back(&r);
  }
  if (used.empty()) return fit_internal::Unidentified("Pollux's form: no run to fit");
  std::array<double, 7> best{};
  double best_cost = std::numeric_limits<double>::infinity();
  const double w = 1 / std::sqrt(static_cast<double>(used.size()));
  for (double s0 : {0.01, 0.1, 1.0}) {
    std::array<double, 7> q = {s0, s0 * 0.1, s0, s0 * 0.1, s0, s0 * 0.1, 1.001};
    ceres::Problem problem;
    for (const AllReduceRun* r : used) {
      problem.AddResidualBlock(
          new ceres::AutoDiffCostFunction<PolluxResidual, 1, 7>(
              new PolluxResidual{r->local_batch, r->step_s, w, r->Instances(), r->Ranks()}),
          nullptr, q.data());
    }
    problem.AddResidualBlock(
        new ceres::AutoDiffCostFunction<PolluxRegulariser, 3, 7>(new PolluxRegulariser), nullptr,
        q.data());
    for (int i = 0; i < 6; ++i) problem.SetParameterLowerBound(q.data(), i, 1e-8);
    problem.SetParameterLowerBound(q.data(), 6, 1.0);
    problem.SetParameterUpperBound(q.data(), 6, 10.0);
    ceres::Solver::Summary summary;
    ceres::Solve(FitSolverOptions(500), &problem, &summary);
    if (auto s = FitStopStatus(); !s.ok()) return s;
    if (summary.final_cost < best_cost) {
      best_cost = summary.final_cost;
      best = q;
    }
  }
  return PolluxModel{best[0], best[1], best[2], best[3], best[4], best[5], best[6]};
}

absl::StatusOr<AllReduceCheck> CheckAllReduce(const std::string& gpu_type,
                                              absl::Span<const AllReduceRun> runs, int max_gpus) {
  std::vector<AllReduceRun> fit_runs, check_runs;
  for (const AllReduceRun& r : runs) {
    if (r.Ranks() <= max_gpus) {
      fit_runs.push_back(r);
    } else if (r.Even()) {
      check_runs.push_back(r);
    }
  }
  if (fit_runs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no ", gpu_type, " run of at most ", max_gpus, " GPUs to fit on"));
  }
  if (check_runs.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("no ", gpu_type, " run of more than ",
                                                      max_gpus, " GPUs spread evenly to predict"));
  }
  auto fit = FitAllReduce(gpu_type, fit_runs);
  if (!fit.ok()) return fit.status();
  auto pollux = FitPollux(fit_runs);
  if (!pollux.ok()) return pollux.status();
  AllReduceCheck out;
  out.gpu_type = gpu_type;
  out.fitted_runs = static_cast<int>(fit_runs.size());
  out.model = fit->model;
  for (const AllReduceRun& r : check_runs) {
    auto step = predictor::AllReduceStepTime(fit->model, r.gpus_per_instance, {r.local_batch});
    if (!step.ok()) return step.status();
    AllReduceCheckRow row{r, step->step_s, pollux->StepTime(r)};
    out.mape += std::fabs(row.predicted_s - r.step_s) / r.step_s;
    out.pollux_mape += std::fabs(row.pollux_s - r.step_s) / r.step_s;
    out.rows.push_back(std::move(row));
  }
  out.mape *= 100.0 / out.rows.size();
  out.pollux_mape *= 100.0 / out.rows.size();
  return out;
}

}  // namespace spotdnn::profiler
