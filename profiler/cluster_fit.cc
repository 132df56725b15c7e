#include "profiler/cluster_fit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "ceres/ceres.h"
#include "predictor/equations.h"
#include "predictor/performance_model.h"
#include "profiler/fit_stop.h"

namespace spotdnn::profiler {
namespace {

// kappa when the runs cannot tell it: fixed-size exchanges arriving at random (M/D/1).
constexpr double kDefaultQueueing = 0.5;

// The cluster fits' solves have more parameters (one T_comp per type) than the per-parameter
// fits, so they get more iterations; the rest is the profiler's one set (fit_stop.h).
constexpr int kMaxClusterSolverIterations = 300;

ceres::Solver::Options SolverOptions() { return FitSolverOptions(kMaxClusterSolverIterations); }

// Solves `problem`; true when its solution is usable and cheaper than `best_cost`, which then
// becomes its cost. The fit's stop (deadline, cancellation) as an error.
absl::StatusOr<bool> SolveImproves(ceres::Problem& problem, double& best_cost) {
  ceres::Solver::Summary summary;
  ceres::Solve(SolverOptions(), &problem, &summary);
  if (absl::Status stopped = FitStopStatus(); !stopped.ok()) return stopped;
  if (!summary.IsSolutionUsable() || summary.final_cost >= best_cost) return false;
  best_cost = summary.final_cost;
  return true;
}

std::string Configurations(absl::Span<const ClusterObservation> observations) {
  std::set<int> sizes, servers;
  for (const ClusterObservation& o : observations) {
    int n = 0;
    for (const auto& [type, count] : o.composition) n += count;
    sizes.insert(n);
    servers.insert(o.parameter_servers);
  }
  auto range = [](const std::set<int>& s) {
    return *s.begin() == *s.rbegin() ? absl::StrCat(*s.begin())
                                     : absl::StrCat(*s.begin(), "-", *s.rbegin());
  };
  return absl::StrCat(range(sizes), " workers, ", range(servers), " PS");
}

// ---- Shared-ps residual: log(predicted / observed) speed of one observation ----

struct SharedPsResidual {
  // Parameter blocks: log z of each type in `types` (composition order), log d, log kappa.
  bool operator()(double const* const* p, double* residual) const {
    const size_t k = counts.size();
    double z[16];
    for (size_t i = 0; i < k; ++i) z[i] = std::exp(p[i][0]);
    const double d = std::exp(p[k][0]) / parameter_servers;
    const double kappa = std::exp(p[k + 1][0]);
    const predictor::PsLoad load =
        predictor::SharedPsLoad(counts, absl::Span<const double>(z, k), d, kappa);
    double rate = 0;
    for (size_t i = 0; i < k; ++i) rate += counts[i] / (z[i] + load.response_time_s);
    residual[0] = std::log(rate) - log_observed;
    return std::isfinite(residual[0]);
  }
  std::vector<int> counts;
  int parameter_servers = 1;
  double log_observed = 0;
};

// ---- Paper-form residual ----

struct PaperFormResidual {
  // Blocks: log T_comp of each type (composition order), log S, log B_req, a1, b1.
  bool operator()(double const* const* p, double* residual) const {
    const size_t k = counts.size();
    const double s = std::exp(p[k][0]);
    const double req = std::exp(p[k + 1][0]);
    const predictor::ContentionModel c{p[k + 2][0], p[k + 3][0]};
    double rate = 0;
    const double comm = CommTime(s, req, c);
    for (size_t i = 0; i < k; ++i) {
      rate += counts[i] / (std::exp(p[i][0]) + comm + 2.0 * gpus[i] * s / pcie);
    }
    residual[0] = std::log(rate) - log_observed;
    return std::isfinite(residual[0]);
  }
  double CommTime(double s, double req, const predictor::ContentionModel& c) const {
    const double prob = predictor::ContentionProbability(c, workers);
    const double bwk = predictor::WorkerBandwidth(req, ps_total, workers, prob);
    return 2.0 * s / bwk;
  }
  std::vector<int> counts;
  std::vector<int> gpus;
  int workers = 0;
  double ps_total = 0;
  double pcie = 10000;
  double log_observed = 0;
};

FitQuality SpeedQuality(std::string parameter, absl::Span<const ClusterObservation> observations,
                        const std::function<double(const ClusterObservation&)>& predict) {
  std::vector<double> observed, predicted;
  for (const ClusterObservation& o : observations) {
    observed.push_back(o.steps_per_s);
    predicted.push_back(predict(o));
  }
  return Quality(std::move(parameter), observed, predicted);
}

}  // namespace

// ---- Shared-ps fit ----

double SharedPsFit::StepsPerS(const std::map<std::string, int>& composition,
                              int parameter_servers) const {
  std::vector<int> counts;
  std::vector<double> z;
  for (const auto& [type, n] : composition) {
    auto it = compute_time_s.find(type);
    if (it == compute_time_s.end()) return 0;
    counts.push_back(n);
    z.push_back(it->second);
  }
  const predictor::PsLoad load =
      predictor::SharedPsLoad(counts, z, service_time_s / std::max(1, parameter_servers), queueing);
  double rate = 0;
  for (size_t i = 0; i < counts.size(); ++i) rate += counts[i] / (z[i] + load.response_time_s);
  return rate;
}

absl::StatusOr<SharedPsFitResult> FitSharedPs(absl::Span<const ClusterObservation> observations,
                                              const SharedPsFitOptions& options) {
  // Types and how many configurations each appears in.
  std::map<std::string, int> configs_of;
  std::map<std::string, double> fastest_rate;  // per-worker steps/s at its lightest load
  for (const ClusterObservation& o : observations) {
    if (!(o.steps_per_s > 0)) continue;
    int n = 0;
    for (const auto& [type, count] : o.composition) n += count;
    for (const auto& [type, count] : o.composition) {
      ++configs_of[type];
      if (o.composition.size() == 1) {
        fastest_rate[type] = std::max(fastest_rate[type], o.steps_per_s / n);
      }
    }
  }
  const int types = static_cast<int>(configs_of.size());
  int configurations = 0;
  for (const ClusterObservation& o : observations) configurations += o.steps_per_s > 0 ? 1 : 0;
  if (types == 0) {
    return absl::FailedPreconditionError(
        "the shared-ps model needs runs with a speed and a type (instance or GPU); got none");
  }
  if (types > 16) {
    return absl::FailedPreconditionError(
        absl::StrCat("the shared-ps fit takes at most 16 types at once; got ", types));
  }
  int most_configs = 0;
  for (const auto& [type, n] : configs_of) most_configs = std::max(most_configs, n);
  const bool fit_d = !(options.service_time_s > 0);
  if (fit_d && (configurations < types + 1 || most_configs < 2)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the shared-ps model needs runs of at least one type at 2 or more cluster sizes (or "
        "parameter-server counts) to tell the servers' time from compute time; got %d "
        "configuration(s) of %d type(s)",
        configurations, types));
  }
  const bool fit_kappa = !options.queueing.has_value() &&
                         configurations >= types + (fit_d ? 2 : 1) && most_configs >= 3;

  std::vector<std::string> names;
  for (const auto& [type, n] : configs_of) names.push_back(type);
  double best_cost = std::numeric_limits<double>::infinity();
  SharedPsFit best;
  const double kappa0 = options.queueing.value_or(kDefaultQueueing);
  for (double share : {0.1, 0.3}) {
    for (double kappa_start :
         fit_kappa ? std::vector<double>{0.2, 1.0} : std::vector<double>{kappa0}) {
      if (auto stopped = PollFitStop(); !stopped.ok()) return stopped;
      // Start: d a share of the fastest type's lone iteration, z the rest.
      double min_t = std::numeric_limits<double>::infinity();
      for (const auto& [type, rate] : fastest_rate) min_t = std::min(min_t, 1.0 / rate);
      if (!std::isfinite(min_t)) min_t = 0.1;
      std::vector<double> log_z(types);
      for (int i = 0; i < types; ++i) {
        auto it = fastest_rate.find(names[i]);
        const double t = it != fastest_rate.end() ? 1.0 / it->second : 2 * min_t;
        log_z[i] = std::log(std::max(1e-6, t - share * min_t));
      }
      double log_d = std::log(fit_d ? share * min_t : options.service_time_s);
      double log_kappa = std::log(std::max(1e-6, kappa_start));
      ceres::Problem problem;
      for (const ClusterObservation& o : observations) {
        if (!(o.steps_per_s > 0)) continue;
        auto* functor = new SharedPsResidual;
        functor->parameter_servers = o.parameter_servers;
        functor->log_observed = std::log(o.steps_per_s);
        std::vector<double*> blocks;
        for (const auto& [type, count] : o.composition) {
          functor->counts.push_back(count);
          const int i =
              static_cast<int>(std::find(names.begin(), names.end(), type) - names.begin());
          blocks.push_back(&log_z[i]);
        }
        blocks.push_back(&log_d);
        blocks.push_back(&log_kappa);
        auto* cost = new ceres::DynamicNumericDiffCostFunction<SharedPsResidual>(functor);
        for (size_t b = 0; b < blocks.size(); ++b) cost->AddParameterBlock(1);
        cost->SetNumResiduals(1);
        problem.AddResidualBlock(cost, nullptr, blocks);
      }
      if (!fit_d) problem.SetParameterBlockConstant(&log_d);
      if (!fit_kappa) {
        problem.SetParameterBlockConstant(&log_kappa);
      } else {
        problem.SetParameterLowerBound(&log_kappa, 0, std::log(1e-4));
        problem.SetParameterUpperBound(&log_kappa, 0, std::log(20.0));
      }
      absl::StatusOr<bool> better = SolveImproves(problem, best_cost);
      if (!better.ok()) return better.status();
      if (*better) {
        best.compute_time_s.clear();
        for (int i = 0; i < types; ++i) best.compute_time_s[names[i]] = std::exp(log_z[i]);
        // Known values stay exactly as given (exp(log(x)) need not be x).
        best.service_time_s = fit_d ? std::exp(log_d) : options.service_time_s;
        best.queueing = fit_kappa ? std::exp(log_kappa) : kappa0;
      }
    }
  }
  if (!std::isfinite(best_cost)) {
    return absl::InternalError("shared-ps fit: the solver found no usable solution");
  }
  SharedPsFitResult out;
  out.fit = best;
  out.queueing_identified = fit_kappa;
  auto predict = [&](const ClusterObservation& o) {
    return best.StepsPerS(o.composition, o.parameter_servers);
  };
  for (const std::string& type : names) {
    std::vector<ClusterObservation> with;
    int runs = 0;
    for (const ClusterObservation& o : observations) {
      if (o.steps_per_s > 0 && o.composition.count(type)) {
        with.push_back(o);
        runs += o.runs;
      }
    }
    FitQuality q = SpeedQuality(absl::StrCat("T_comp[", type, "]"), with, predict);
    q.note = absl::StrFormat(
        "compute time z = %.5f s per iteration (plus one exchange with the servers); %d %s in "
        "%d %s: %s",
        best.compute_time_s[type], runs, runs == 1 ? "run" : "runs", with.size(),
        with.size() == 1 ? "configuration" : "configurations", Configurations(with));
    out.quality.push_back(std::move(q));
  }
  FitQuality d;
  d.parameter = "S_parm";
  d.identified = true;
  d.note =
      fit_d ? absl::StrFormat(
                  "d = %.5f s of parameter-server work per iteration on one "
                  "server, from runs at several sizes or server counts",
                  best.service_time_s)
            : absl::StrFormat("d = %.5f s per iteration on one server, given", best.service_time_s);
  out.quality.push_back(std::move(d));
  FitQuality kappa;
  kappa.parameter = "queueing";
  kappa.identified = fit_kappa || options.queueing.has_value();
  kappa.note = fit_kappa
                   ? absl::StrFormat("kappa = %.4f: waiting per unit of W / (1 - W)", best.queueing)
               : options.queueing.has_value()
                   ? absl::StrFormat("kappa = %.4f, given", best.queueing)
                   : absl::StrFormat(
                         "kappa held at %.2f (fixed-size exchanges arriving at random): its "
                         "fit needs more configurations than types + 2 and one type at 3 or more",
                         kDefaultQueueing);
  out.quality.push_back(std::move(kappa));
  FitQuality all = SpeedQuality("shared-ps", observations, predict);
  all.note = absl::StrFormat(
      "cluster steps/s of %d %s (%s), median of each one's runs; least squares in log speed",
      configurations, configurations == 1 ? "configuration" : "configurations",
      Configurations(observations));
  out.quality.push_back(std::move(all));
  return out;
}

// ---- The paper's form ----

double PaperFormFit::StepsPerS(const std::map<std::string, int>& composition,
                               int parameter_servers) const {
  PaperFormResidual r;
  for (const auto& [type, n] : composition) r.workers += n;
  r.ps_total = ps_bandwidth_mb_per_s * std::max(1, parameter_servers);
  const double comm = r.CommTime(parameter_size_mb, required_bandwidth_mb_per_s, contention);
  double rate = 0;
  for (const auto& [type, n] : composition) {
    auto it = compute_time_s.find(type);
    if (it == compute_time_s.end()) return 0;
    auto g = gpus.find(type);
    const int gpu_count = g == gpus.end() ? 1 : g->second;
    rate += n / (it->second + comm + 2.0 * gpu_count * parameter_size_mb / pcie_bandwidth_mb_per_s);
  }
  return rate;
}

absl::StatusOr<PaperFormFitResult> FitPaperForm(absl::Span<const ClusterObservation> observations,
                                                const std::map<std::string, TypeInfo>& types,
                                                double ps_bandwidth_mb_per_s,
                                                double pcie_bandwidth_mb_per_s) {
  if (!(ps_bandwidth_mb_per_s > 0)) {
    return absl::FailedPreconditionError(
        "the paper's form needs B_ps (the parameter server's bandwidth) to fit S_parm and B_req");
  }
  std::set<int> sizes;
  std::vector<std::string> names;
  std::map<std::string, double> fastest_rate;
  for (const ClusterObservation& o : observations) {
    if (!(o.steps_per_s > 0)) continue;
    int n = 0;
    for (const auto& [type, count] : o.composition) n += count;
    sizes.insert(n);
    for (const auto& [type, count] : o.composition) {
      if (std::find(names.begin(), names.end(), type) == names.end()) names.push_back(type);
      if (o.composition.size() == 1) {
        fastest_rate[type] = std::max(fastest_rate[type], o.steps_per_s / n);
      }
    }
  }
  std::sort(names.begin(), names.end());
  if (sizes.size() < 3) {
    return absl::FailedPreconditionError(absl::StrCat(
        "contention needs runs with at least 3 distinct worker counts; got ", sizes.size()));
  }
  if (names.size() > 16) {
    return absl::FailedPreconditionError(
        absl::StrCat("the paper's form takes at most 16 types at once; got ", names.size()));
  }
  auto gpus_of = [&](const std::string& type) {
    auto it = types.find(type);
    return it == types.end() ? 1 : std::max(1, it->second.gpus);
  };
  PaperFormFit best;
  best.ps_bandwidth_mb_per_s = ps_bandwidth_mb_per_s;
  best.pcie_bandwidth_mb_per_s = pcie_bandwidth_mb_per_s;
  double best_cost = std::numeric_limits<double>::infinity();
  double min_t = std::numeric_limits<double>::infinity();
  for (const auto& [type, rate] : fastest_rate) min_t = std::min(min_t, 1.0 / rate);
  if (!std::isfinite(min_t)) min_t = 0.1;
  for (const auto& [a0, b0] : std::vector<std::pair<double, double>>{
           {0.3, -0.3}, {0.8, -1.9}, {0.1, 0.5}, {0.5, 0.0}, {0.2, -0.1}}) {
    for (double share : {0.1, 0.4}) {
      if (auto stopped = PollFitStop(); !stopped.ok()) return stopped;
      // Start: a lone worker's communication a share of the fastest type's iteration, B_req
      // half of B_ps.
      const double req0 = ps_bandwidth_mb_per_s / 2;
      const double s0 = share * min_t * req0 / 2;
      std::vector<double> log_t(names.size());
      for (size_t i = 0; i < names.size(); ++i) {
        auto it = fastest_rate.find(names[i]);
        const double t = it != fastest_rate.end() ? 1.0 / it->second : 2 * min_t;
        log_t[i] = std::log(std::max(1e-6, t - share * min_t));
      }
      double log_s = std::log(s0), log_req = std::log(req0), a1 = a0, b1 = b0;
      ceres::Problem problem;
      for (const ClusterObservation& o : observations) {
        if (!(o.steps_per_s > 0)) continue;
        auto* functor = new PaperFormResidual;
        functor->pcie = pcie_bandwidth_mb_per_s;
        functor->ps_total = ps_bandwidth_mb_per_s * o.parameter_servers;
        functor->log_observed = std::log(o.steps_per_s);
        std::vector<double*> blocks;
        for (const auto& [type, count] : o.composition) {
          functor->counts.push_back(count);
          functor->gpus.push_back(gpus_of(type));
          functor->workers += count;
          const size_t i = std::find(names.begin(), names.end(), type) - names.begin();
          blocks.push_back(&log_t[i]);
        }
        for (double* b : {&log_s, &log_req, &a1, &b1}) blocks.push_back(b);
        auto* cost = new ceres::DynamicNumericDiffCostFunction<PaperFormResidual>(functor);
        for (size_t b = 0; b < blocks.size(); ++b) cost->AddParameterBlock(1);
        cost->SetNumResiduals(1);
        problem.AddResidualBlock(cost, nullptr, blocks);
      }
      absl::StatusOr<bool> better = SolveImproves(problem, best_cost);
      if (!better.ok()) return better.status();
      if (*better) {
        best.compute_time_s.clear();
        best.gpus.clear();
        for (size_t i = 0; i < names.size(); ++i) {
          best.compute_time_s[names[i]] = std::exp(log_t[i]);
          best.gpus[names[i]] = gpus_of(names[i]);
        }
        best.parameter_size_mb = std::exp(log_s);
        best.required_bandwidth_mb_per_s = std::exp(log_req);
        best.contention = {a1, b1};
      }
    }
  }
  if (!std::isfinite(best_cost)) {
    return absl::InternalError("paper-form fit: the solver found no usable solution");
  }
  PaperFormFitResult out;
  out.fit = best;
  auto predict = [&](const ClusterObservation& o) {
    return best.StepsPerS(o.composition, o.parameter_servers);
  };
  for (const std::string& type : names) {
    std::vector<ClusterObservation> with;
    for (const ClusterObservation& o : observations) {
      if (o.steps_per_s > 0 && o.composition.count(type)) with.push_back(o);
    }
    FitQuality q = SpeedQuality(absl::StrCat("T_comp[", type, "]"), with, predict);
    q.note = absl::StrFormat("T_comp = %.5f s (eqs. 6-9 on cluster speeds; %s)",
                             best.compute_time_s[type], Configurations(with));
    out.quality.push_back(std::move(q));
  }
  FitQuality s{.parameter = "S_parm", .identified = true};
  s.note = absl::StrFormat(
      "%.4g MB, fitted with B_req and a1, b1 to cluster speeds at B_ps = %g "
      "MB/s",
      best.parameter_size_mb, ps_bandwidth_mb_per_s);
  out.quality.push_back(std::move(s));
  FitQuality req{.parameter = "B_req", .identified = true};
  req.note =
      absl::StrFormat("%.4g MB/s, fitted to cluster speeds", best.required_bandwidth_mb_per_s);
  out.quality.push_back(std::move(req));
  FitQuality c = SpeedQuality("a1,b1", observations, predict);
  c.note = absl::StrFormat(
      "eq. 8-9 on cluster steps/s of %d %s (%s), least squares in log speed", observations.size(),
      observations.size() == 1 ? "configuration" : "configurations", Configurations(observations));
  out.quality.push_back(std::move(c));
  return out;
}

// ---- Validation ----

absl::StatusOr<FitValidation> ValidateFit(absl::Span<const Sample> fit,
                                          absl::Span<const Sample> check,
                                          const KnownParameters& known, double iterations,
                                          const std::function<absl::Status()>& stop) {
  if (check.empty()) {
    return absl::FailedPreconditionError("no check samples: name the jobs to predict");
  }
  auto fitted = FitWorkload(fit, known, stop);
  if (!fitted.ok()) return fitted.status();
  if (stop) {
    if (auto s = stop(); !s.ok()) return s;
  }
  FitValidation out;
  out.quality = fitted->quality;
  out.profile = ProfileOf(*fitted, known, "validation");
  const RunSet fit_runs = RunsFromSamples(fit);
  const RunSet check_runs = RunsFromSamples(check);
  const std::vector<ClusterObservation> observations = GroupRuns(check_runs.runs);
  if (observations.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no check run has a speed", check_runs.notes.empty() ? "" : ": ",
                     check_runs.notes.empty() ? "" : check_runs.notes[0]));
  }
  // A catalog of the fitted types (by key), so the performance model predicts each cluster as
  // `spotdnn predict` would.
  predictor::InstanceCatalog catalog;
  catalog.name = "validation";
  catalog.pcie_bandwidth_mb_per_s = known.pcie_bandwidth_mb_per_s;
  catalog.parameter_server.bandwidth_mb_per_s =
      known.ps_bandwidth_mb_per_s > 0 ? known.ps_bandwidth_mb_per_s : 1000;
  std::map<std::string, TypeInfo> types = fit_runs.types;
  for (const auto& [key, info] : check_runs.types) types.emplace(key, info);
  for (const auto& [key, info] : types) {
    predictor::InstanceType t;
    t.name = key;
    t.gpu_type = info.gpu_type.empty() ? key : info.gpu_type;
    t.gpus = std::max(1, info.gpus);
    catalog.types.push_back(t);
  }
  predictor::ModelOptions options;
  options.require_loss_model = false;
  auto model = predictor::PerformanceModel::Create(out.profile, catalog, options);
  if (!model.ok() || out.profile.Validate().ok() == false) {
    std::vector<std::string> missing;
    for (const FitQuality& q : out.quality) {
      if (!q.identified) missing.push_back(absl::StrCat(q.parameter, ": ", q.note));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("the fit jobs give no profile to predict with (",
                     model.ok() ? out.profile.Validate().message() : model.status().message(), ")",
                     missing.empty() ? "" : "; not identified: ", absl::StrJoin(missing, "; ")));
  }
  double total = 0;
  for (const ClusterObservation& o : observations) {
    std::vector<int> counts(catalog.types.size(), 0);
    std::vector<std::string> unknown;
    for (const auto& [type, n] : o.composition) {
      const int k = catalog.IndexOf(type);
      counts[k] += n;
      if (!model->types()[k].usable) {
        unknown.push_back(absl::StrCat(type, " (", catalog.types[k].gpu_type, ")"));
      }
    }
    if (!unknown.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("check cluster ", o.Describe(), " uses ", absl::StrJoin(unknown, ", "),
                       ", which the fit jobs give no speed for: fit on runs of those types too"));
    }
    ClusterCheck c;
    c.observed = o;
    c.iterations = iterations > 0 ? iterations : o.steps > 0 ? o.steps : 10000;
    const predictor::Estimate e =
        model->Evaluate(counts, predictor::Target::Iterations(c.iterations), o.parameter_servers);
    if (!e.ok()) return model->ErrorStatus(e, predictor::Target::Iterations(c.iterations));
    c.predicted_steps_per_s = 1.0 / e.expected_iteration_time_s;
    c.predicted_time_s = e.time_s;
    c.observed_time_s = iterations <= 0 && o.steps > 0 && o.duration_s > 0
                            ? o.duration_s
                            : c.iterations / o.steps_per_s;
    c.error_pct = 100 * std::fabs(c.predicted_time_s - c.observed_time_s) / c.observed_time_s;
    total += c.error_pct;
    out.max_error_pct = std::max(out.max_error_pct, c.error_pct);
    out.clusters.push_back(std::move(c));
  }
  out.mape = total / out.clusters.size();
  return out;
}

}  // namespace spotdnn::profiler
