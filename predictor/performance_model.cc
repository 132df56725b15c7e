#include "predictor/performance_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "predictor/equations.h"

namespace spotdnn::predictor {
namespace {

// The compute profile that applies to `type`: an instance-type entry wins over a GPU-type one.
const ComputeProfile* FindCompute(const WorkloadProfile& profile, const InstanceType& type) {
  const ComputeProfile* by_gpu = nullptr;
  for (const ComputeProfile& c : profile.compute) {
    if (!c.instance_type.empty() && c.instance_type == type.name) return &c;
    if (by_gpu == nullptr && !c.gpu_type.empty() && c.gpu_type == type.gpu_type) by_gpu = &c;
  }
  return by_gpu;
}

double RoundToStep(double value, double step) {
  return step > 0 ? std::round(value / step) * step : value;
}

}  // namespace

void PerformanceModel::CompileSharedPsType(const PerformanceModel& model,
                                           const ComputeProfile& compute, int batch_per_gpu,
                                           const InstanceType& type, TypeModel& t) {
  // A batch is optional: iteration targets need none, sample and loss targets do.
  t.batch_known = batch_per_gpu > 0;
  t.batch_size = t.batch_known ? batch_per_gpu * type.gpus : 0;
  const double d = model.service_per_server_s_;  // a lone worker, one server
  if (compute.compute_time_s) {
    t.compute_time_s = *compute.compute_time_s;
    t.single_worker_time_s = SharedPsIterationTime(1, t.compute_time_s, d, model.queueing_);
  } else if (!t.batch_known) {
    t.unusable_reason =
        absl::StrCat(type.name,
                     ": its compute entry gives a speed in samples/s but no batch_per_gpu, and the "
                     "memory model (a2, b2) gives none, so its iteration time is unknown");
  } else {
    // The measured single-worker iteration less one exchange with one server at the load that
    // worker alone puts on it: W = d / T, R = d (1 + kappa W / (1 - W)).
    const double measured = t.batch_size / *compute.measured_samples_per_s;
    const double w = d / measured;
    const double r = w < 1 ? d * (1 + model.queueing_ * w / (1 - w)) : measured;
    t.compute_time_s = measured - r;
    t.single_worker_time_s = measured;
    if (!(t.compute_time_s > 0)) {
      t.unusable_reason = absl::StrFormat(
          "%s: measured iteration time %.6g s is not longer than one exchange with the parameter "
          "server (%.6g s), so compute time would be %.6g s",
          type.name, measured, r, t.compute_time_s);
    }
  }
  t.usable = t.unusable_reason.empty();
}

absl::StatusOr<PerformanceModel> PerformanceModel::Create(WorkloadProfile profile,
                                                          InstanceCatalog catalog,
                                                          ModelOptions options) {
  if (auto s = profile.Validate(); !s.ok()) return s;
  // A profile of synchronous runs only (its kind, no T_comp, S_parm or B_req) asked for a
  // parameter-server prediction (`--sync ps`): say what it lacks and how to get it, rather than
  // the first parameter-server term that happens to be missing.
  if (profile.sync == SyncKind::kAllReduce &&
      (profile.compute.empty() || !(profile.parameter_size_mb > 0) ||
       !(profile.required_bandwidth_mb_per_s > 0))) {
    std::vector<std::string> types;
    for (const AllReduceModel& m : profile.allreduce) types.push_back(m.gpu_type);
    return absl::FailedPreconditionError(absl::StrCat(
        "workload \"", profile.name,
        "\" has no parameter-server model (sync = ps needs T_comp per instance or GPU type, "
        "S_parm and B_req): it was profiled from synchronous all-reduce runs",
        types.empty() ? ""
                      : absl::StrCat(" (all-reduce models of ", absl::StrJoin(types, ", "), ")"),
        "; predict it as it trains (--sync allreduce --local-batch B), or import its "
        "parameter-server runs (spotdnn profile import LOG --db DB --job J), fit them "
        "(spotdnn profile fit --db DB --name W) and predict with that profile"));
  }
  if (auto s = catalog.Validate(); !s.ok()) return s;
  if (!(options.bandwidth_margin >= 0 && options.bandwidth_margin < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("bandwidth_margin = %g: must be in [0, 1)", options.bandwidth_margin));
  }
  if (!profile.loss && profile.convergence.empty() && options.require_loss_model) {
    return absl::FailedPreconditionError(absl::StrCat(
        "workload \"", profile.name,
        "\" has no loss model (g1..g5): fit one from loss curves (spotdnn profile fit) first"));
  }
  const bool shared_ps = profile.variant == ModelVariant::kSharedPs;
  if (!profile.contention && !shared_ps) {
    return absl::FailedPreconditionError(absl::StrCat(
        "workload \"", profile.name,
        "\" has no contention model (a1, b1): the fit identifies it only from runs whose "
        "workers share the parameter server (more workers than B_ps / B_req); import such runs "
        "and fit again, or fit with --base W (spotdnn profile fit) to take a1, b1 from a "
        "built-in profile"));
  }
  if (shared_ps && !profile.shared_ps) {
    return absl::FailedPreconditionError(
        absl::StrCat("workload \"", profile.name,
                     "\" is a shared-ps profile without its parameter-server model "
                     "(shared_ps.queueing): fit one from runs of several cluster sizes first"));
  }

  PerformanceModel model;
  model.cache_ = std::make_shared<QuantileCache>();
  model.coefficients_ = CoefficientsOf(profile.variant);
  if (profile.contention) model.contention_ = *profile.contention;
  model.has_loss_ = profile.loss.has_value();
  if (profile.loss) model.loss_ = *profile.loss;
  model.two_s_ = 2.0 * profile.parameter_size_mb;
  const double s = profile.parameter_size_mb;
  const double single_worker_comm = model.two_s_ / profile.required_bandwidth_mb_per_s;
  if (shared_ps) {
    model.shared_ps_ = true;
    model.queueing_ = profile.shared_ps->queueing;
    // d of one server: 2 S through its bandwidth, less the margin.
    model.service_per_server_s_ = model.two_s_ / (catalog.parameter_server.bandwidth_mb_per_s *
                                                  (1.0 - options.bandwidth_margin));
  }

  std::vector<std::string> reasons;
  for (const InstanceType& type : catalog.types) {
    TypeModel t;
    t.gpus = type.gpus;
    t.spot_price_per_hour = type.spot_price_per_hour;
    t.on_demand_price_per_hour = type.on_demand_price_per_hour;
    const double pcie = 2.0 * type.gpus * s / catalog.pcie_bandwidth_mb_per_s;
    t.pcie_time_s = model.coefficients_.pcie_iteration_weight * pcie;
    const ComputeProfile* compute = FindCompute(profile, type);
    int batch_per_gpu = compute != nullptr ? compute->batch_per_gpu : 0;
    if (compute != nullptr && batch_per_gpu == 0 && profile.memory) {
      batch_per_gpu = std::min(LargestBatch(*profile.memory, type.gpu_memory_gib), kMaxBatchPerGpu);
    }
    if (compute == nullptr) {
      t.unusable_reason = absl::StrCat("workload \"", profile.name, "\" has no compute time for ",
                                       type.name, " (", type.gpu_type, ")");
    } else if (shared_ps) {
      CompileSharedPsType(model, *compute, batch_per_gpu, type, t);
    } else if (batch_per_gpu <= 0) {
      t.unusable_reason =
          absl::StrCat("no batch size for ", type.name,
                       ": its compute entry has no batch_per_gpu and the memory model (a2, b2) "
                       "gives none for ",
                       type.gpu_memory_gib, " GiB");
    } else {
      t.batch_size = batch_per_gpu * type.gpus;
      if (compute->compute_time_s) {
        t.compute_time_s = *compute->compute_time_s;
      } else {
        // The measured single-worker iteration time less its communication (eq. 6-7 at |N| = 1).
        const double measured = t.batch_size / *compute->measured_samples_per_s;
        t.compute_time_s =
            measured - single_worker_comm - model.coefficients_.pcie_profiling_sign * pcie;
        if (!(t.compute_time_s > 0)) {
          t.unusable_reason = absl::StrFormat(
              "%s: measured iteration time %.6g s is not longer than its communication time "
              "%.6g s, so compute time would be %.6g s",
              type.name, measured, measured - t.compute_time_s, t.compute_time_s);
        }
      }
      t.usable = t.unusable_reason.empty();
      t.single_worker_time_s = compute->measured_samples_per_s
                                   ? t.batch_size / *compute->measured_samples_per_s
                                   : t.compute_time_s + single_worker_comm + t.pcie_time_s;
    }
    if (!t.usable) reasons.push_back(t.unusable_reason);
    model.compute_times_.push_back(t.usable ? t.compute_time_s : 0.0);
    if (t.usable) model.slowest_compute_s_ = std::max(model.slowest_compute_s_, t.compute_time_s);
    model.types_.push_back(std::move(t));
  }
  if (reasons.size() == model.types_.size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no instance type of catalog \"", catalog.name,
                     "\" is usable: ", absl::StrJoin(reasons, "; ")));
  }
  model.profile_ = std::move(profile);
  model.catalog_ = std::move(catalog);
  model.options_ = options;
  return model;
}

bool PerformanceModel::EvaluateShape(absl::Span<const int> counts, int parameter_servers,
                                     Estimate& out) const {
  int64_t sum = 0;  // 64-bit: counts come from callers that may not have bounded them
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] == 0) continue;
    if (!types_[k].usable) {
      out.error = EstimateError::kUnusableType;
      out.unusable_type = static_cast<int>(k);
      return false;
    }
    sum += counts[k];
  }
  if (sum > kMaxClusterSize) {
    out.workers = static_cast<int>(std::min<int64_t>(sum, std::numeric_limits<int>::max()));
    out.error = EstimateError::kTooManyWorkers;
    return false;
  }
  const int workers = static_cast<int>(sum);
  out.workers = workers;
  if (workers == 0) {
    out.error = EstimateError::kEmptyCluster;
    return false;
  }
  const ParameterServer& ps = catalog_.parameter_server;
  double network_time = 0;
  if (shared_ps_) {
    const PsLoad load =
        SharedPsLoad(counts, compute_times_, service_per_server_s_ / parameter_servers, queueing_);
    network_time = load.response_time_s;
    out.ps_response_time_s = load.response_time_s;
    out.ps_utilization = load.utilization;
    out.worker_bandwidth_mb_per_s = two_s_ / network_time;
  } else {
    out.contention_probability = ContentionProbability(contention_, workers);
    out.worker_bandwidth_mb_per_s = WorkerBandwidth(profile_.required_bandwidth_mb_per_s,
                                                    ps.bandwidth_mb_per_s * parameter_servers,
                                                    workers, out.contention_probability) *
                                    (1.0 - options_.bandwidth_margin);
    network_time = two_s_ / out.worker_bandwidth_mb_per_s;
  }

  // One pass for eq. 2, v, and the sums eq. 5 needs; workers of a type share T_i and v_i.
  double rate = 0, speed = 0, fastest = 0, speed_sq = 0, price = 0, od_price = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    const int n = counts[k];
    if (n == 0) continue;
    const TypeModel& t = types_[k];
    const double inv_t = 1.0 / (t.compute_time_s + network_time + t.pcie_time_s);
    const double v = t.batch_size * inv_t;
    rate += n * inv_t;
    speed += n * v;
    speed_sq += n * v * v;
    fastest = std::max(fastest, v);
    price += n * t.spot_price_per_hour;
    od_price += n * t.on_demand_price_per_hour;
  }
  out.cluster_speed = speed;
  out.expected_iteration_time_s = 1.0 / rate;
  out.wa_batch = RoundToStep(speed / rate, coefficients_.wa_batch_step);
  // R^2 = sum_i w_i^2 - 2 w_1 + 1 with w_i = v_i / v (see ConvergenceCoefficient). A shared-ps
  // profile may know no batch (speed 0): then there is no R either.
  if (speed > 0) {
    const double w1 = fastest / speed;
    out.convergence_coefficient = std::sqrt(std::max(0.0, speed_sq / (speed * speed) - 2 * w1 + 1));
  }
  out.price_per_hour = price + parameter_servers * ps.spot_price_per_hour;
  out.on_demand_price_per_hour = od_price + parameter_servers * ps.on_demand_price_per_hour;
  return true;
}

double PerformanceModel::NetworkTime(int workers, int parameter_servers) const {
  if (shared_ps_) {
    // R grows with every worker's rate, so n workers of the slowest type load the servers least.
    const double d = service_per_server_s_ / parameter_servers;
    return SharedPsIterationTime(workers, slowest_compute_s_, d, queueing_) - slowest_compute_s_;
  }
  const double p = ContentionProbability(contention_, workers);
  return two_s_ / (WorkerBandwidth(profile_.required_bandwidth_mb_per_s,
                                   catalog_.parameter_server.bandwidth_mb_per_s * parameter_servers,
                                   workers, p) *
                   (1.0 - options_.bandwidth_margin));
}

Estimate PerformanceModel::Evaluate(absl::Span<const int> counts, double target_loss,
                                    int parameter_servers, double current_loss) const {
  Estimate out;
  if (!EvaluateShape(counts, parameter_servers, out)) return out;
  if (shared_ps_ && !BatchesKnown(counts, out)) return out;
  if (!has_loss_) {
    out.error = EstimateError::kNoLossModel;
    return out;
  }
  if (!(target_loss > loss_.g5)) {
    out.error = EstimateError::kTargetAtOrBelowFloor;
    return out;
  }
  const double r = coefficients_.convergence_weight * out.convergence_coefficient;
  double j = IterationsToLoss(loss_, out.wa_batch, r, out.workers, target_loss);
  if (std::isfinite(current_loss)) {
    // Resume from the loss already reached: on this cluster, training is at j(current) (or at its
    // start, when the current loss is above where this cluster starts).
    j -= std::max(0.0, IterationsToLoss(loss_, out.wa_batch, r, out.workers, current_loss));
  }
  Finish(j, out);
  return out;
}

Estimate PerformanceModel::Evaluate(absl::Span<const int> counts, const Target& target,
                                    int parameter_servers, double current_loss) const {
  if (target.is_metric()) {
    const ConvergenceModel* m = ConvergenceOf(target.MetricName());
    // A loss target stays with eq. 3 when the profile has it (the paper's model, and what plans
    // of such profiles have always used); the convergence model answers the rest.
    if (target.is_loss() && (m == nullptr || has_loss_)) {
      return Evaluate(counts, target.value, parameter_servers, current_loss);
    }
    Estimate out;
    if (!EvaluateShape(counts, parameter_servers, out)) return out;
    if (m == nullptr) {
      out.error = EstimateError::kNoConvergenceModel;
      return out;
    }
    EvaluateConvergence(*m, target, current_loss, out);
    return out;
  }
  Estimate out;
  if (!EvaluateShape(counts, parameter_servers, out)) return out;
  if (target.kind == Target::Kind::kIterations) {
    Finish(target.value, out);
    return out;
  }
  if (shared_ps_ && !BatchesKnown(counts, out)) return out;
  // Each global iteration trains b_w samples on average (eq. 4's WA batch).
  Finish(target.value / out.wa_batch, out);
  return out;
}

struct PerformanceModel::QuantileCache {
  struct Key {
    // The model's index in the profile, not its address: copies of a PerformanceModel share this
    // cache but not their profile, and an address may be reused by another profile once freed.
    size_t model;
    int workers;
    int64_t r;  // R x 1e6
    double target, from;
    bool operator==(const Key& o) const {
      return model == o.model && workers == o.workers && r == o.r && target == o.target &&
             from == o.from;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.model, k.workers, k.r, k.target, k.from);
    }
  };
  absl::Mutex mu;
  absl::flat_hash_map<Key, StepQuantiles> answers ABSL_GUARDED_BY(mu);
};

absl::Status PerformanceModel::CheckTarget(const Target& target) const {
  if (!target.is_metric()) return absl::OkStatus();
  const ConvergenceModel* m = ConvergenceOf(target.MetricName());
  if (target.is_loss()) {
    if (has_loss_ || m != nullptr) return absl::OkStatus();
    return ErrorStatus({.error = EstimateError::kNoLossModel}, target);
  }
  if (m == nullptr || m->higher_is_better != target.higher_is_better) {
    return ErrorStatus({.error = EstimateError::kNoConvergenceModel}, target);
  }
  return absl::OkStatus();
}

absl::StatusOr<TargetConvergence> ConvergenceForTarget(const WorkloadProfile& profile,
                                                       const Target& target, double wa_batch,
                                                       double convergence_coefficient) {
  if (!target.is_metric()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "target ", target.Describe(), ": only a loss or a metric target has a convergence model"));
  }
  const std::string metric = target.MetricName();
  const bool higher = target.kind == Target::Kind::kMetric && target.higher_is_better;
  if (target.is_loss() && profile.loss.has_value()) {
    const LossModel& g = *profile.loss;
    const double weight = CoefficientsOf(profile.variant).convergence_weight;
    TargetConvergence out{.r = weight * convergence_coefficient, .r_weight = weight, .eq3 = true};
    out.model.metric = "loss";
    out.model.form = ConvergenceModel::Form::kEq3;
    out.model.g1 = g.g1;
    out.model.g3 = g.g2 * std::max(0.0, wa_batch) + g.g3;  // kEq3 has no g2: one WA batch folded in
    out.model.g4 = g.g4;
    out.model.g5 = g.g5;
    out.model.fitted_on = "eq. 3 (g1..g5) of the profile";
    return out;
  }
  for (const ConvergenceModel& m : profile.convergence) {
    if (m.metric != metric || m.higher_is_better != higher) continue;
    const double weight = m.form == ConvergenceModel::Form::kEq3 ? 1 : 0;
    return TargetConvergence{.model = m, .r = weight * convergence_coefficient, .r_weight = weight};
  }
  return absl::FailedPreconditionError(
      absl::StrCat("workload \"", profile.name, "\" has no convergence model of ",
                   target.Describe(), target.is_loss() ? " and no eq. 3 loss model (g1..g5)" : "",
                   ": fit one from runs that log it (spotdnn profile fit), or give the target in "
                   "iterations or epochs"));
}

const ConvergenceModel* PerformanceModel::ConvergenceOf(absl::string_view metric) const {
  for (const ConvergenceModel& m : profile_.convergence) {
    if (m.metric == metric) return &m;
  }
  return nullptr;
}

void PerformanceModel::EvaluateConvergence(const ConvergenceModel& m, const Target& target,
                                           double current, Estimate& out) const {
  const bool higher = target.kind == Target::Kind::kMetric ? target.higher_is_better : false;
  if (higher != m.higher_is_better) {
    out.error = EstimateError::kNoConvergenceModel;
    return;
  }
  if (m.best_value) {
    out.data_best = *m.best_value;
    out.extrapolated = m.IsExtrapolation(target.value);
  }
  // R only matters to the eq. 3 form; homogeneous clusters have sqrt((N - 1) / N).
  const double r = m.form == ConvergenceModel::Form::kEq3 ? out.convergence_coefficient : 0;
  // A value already reached: the mean curve's step there.
  double from = 0;
  if (std::isfinite(current)) {
    const double step = MeanStepAt(m, out.workers, r, current);
    if (std::isfinite(step)) from = step;
  }
  const QuantileCache::Key key{static_cast<size_t>(&m - profile_.convergence.data()), out.workers,
                               static_cast<int64_t>(std::llround(r * 1e6)), target.value, from};
  StepQuantiles q;
  bool cached = false;
  {
    absl::MutexLock lock(&cache_->mu);
    if (auto it = cache_->answers.find(key); it != cache_->answers.end()) {
      q = it->second;
      cached = true;
    }
  }
  if (!cached) {
    q = StepsToTarget(m, out.workers, r, target.value, from);
    absl::MutexLock lock(&cache_->mu);
    if (cache_->answers.size() > 200'000) cache_->answers.clear();
    cache_->answers.emplace(key, q);
  }
  if (!q.reachable) {
    out.error = EstimateError::kTargetNotReached;
    return;
  }
  Finish(q.p50, out);
  out.has_spread = true;
  out.iterations_p10 = q.p10;
  out.iterations_p50 = q.p50;
  out.iterations_p90 = q.p90;
  out.time_p10_s = q.p10 * out.expected_iteration_time_s;
  out.time_p50_s = out.time_s;
  out.time_p90_s = q.p90 * out.expected_iteration_time_s;
}

bool PerformanceModel::BatchesKnown(absl::Span<const int> counts, Estimate& out) const {
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] > 0 && !types_[k].batch_known) {
      out.error = EstimateError::kNoBatch;
      out.unusable_type = static_cast<int>(k);
      return false;
    }
  }
  return true;
}

void PerformanceModel::Finish(double j, Estimate& out) const {
  if (coefficients_.integer_iterations) j = std::round(j);
  out.normalized_iterations = j;
  out.iterations_p10 = out.iterations_p50 = out.iterations_p90 = j;
  if (!std::isfinite(j)) {
    out.error = EstimateError::kNotFinite;
    return;
  }
  if (j <= 0) {
    out.error = EstimateError::kNotReachable;
    return;
  }
  out.time_s = RoundToStep(j * out.expected_iteration_time_s, coefficients_.time_step);
  out.time_p10_s = out.time_p50_s = out.time_p90_s = out.time_s;
  if (!std::isfinite(out.time_s)) {
    out.error = EstimateError::kNotFinite;
    return;
  }
  out.cost_usd = out.time_s / 3600.0 * out.price_per_hour;
  out.on_demand_cost_usd = out.time_s / 3600.0 * out.on_demand_price_per_hour;
  if (!std::isfinite(out.cost_usd) || !std::isfinite(out.on_demand_cost_usd)) {
    out.error = EstimateError::kNotFinite;
  }
}

absl::Status PerformanceModel::ErrorStatus(const Estimate& e, double target_loss) const {
  return ErrorStatus(e, Target::Loss(target_loss));
}

absl::Status PerformanceModel::ErrorStatus(const Estimate& e, const Target& target) const {
  const double target_loss = target.value;
  switch (e.error) {
    case EstimateError::kOk:
      return absl::OkStatus();
    case EstimateError::kEmptyCluster:
      return absl::InvalidArgumentError(
          "cluster is empty: give at least one instance type with a count above 0");
    case EstimateError::kTooManyWorkers:
      return absl::InvalidArgumentError(absl::StrFormat(
          "cluster has %d workers: must be at most %d", e.workers, kMaxClusterSize));
    case EstimateError::kUnusableType:
      return absl::FailedPreconditionError(absl::StrCat("cluster uses ",
                                                        catalog_.types[e.unusable_type].name,
                                                        ", which the model "
                                                        "cannot predict: ",
                                                        types_[e.unusable_type].unusable_reason));
    case EstimateError::kTargetAtOrBelowFloor:
      return absl::InvalidArgumentError(absl::StrFormat(
          "target_loss = %g: must be above the workload's loss floor g5 = %g, which training "
          "only approaches",
          target_loss, loss_.g5));
    case EstimateError::kNotReachable: {
      if (!target.is_loss()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("target of %s: the model gives %g iterations (not positive)",
                            target.Describe(), e.normalized_iterations));
      }
      const double start =
          LossAfter(loss_, e.wa_batch, coefficients_.convergence_weight * e.convergence_coefficient,
                    e.workers, 0);
      return absl::InvalidArgumentError(absl::StrFormat(
          "target_loss = %g: the model's loss for this cluster starts at %g, so it needs %g "
          "normalized iterations (not positive); choose a lower target loss",
          target_loss, start, e.normalized_iterations));
    }
    case EstimateError::kNotFinite:
      if (!target.is_loss()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("target of %s: the model gives no finite training time for this "
                            "cluster (iterations %g)",
                            target.Describe(), e.normalized_iterations));
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "target_loss = %g: the model gives no finite training time or cost for this cluster "
          "(normalized iterations %g)",
          target_loss, e.normalized_iterations));
    case EstimateError::kNoLossModel:
      return absl::FailedPreconditionError(absl::StrCat(
          "workload \"", profile_.name,
          "\" has no loss model (g1..g5), so a target loss cannot be predicted: fit one from loss "
          "curves, or give the target in iterations or epochs"));
    case EstimateError::kNoConvergenceModel: {
      std::vector<std::string> have;
      for (const ConvergenceModel& m : profile_.convergence) {
        have.push_back(absl::StrCat(m.metric, m.higher_is_better ? " (higher is better)" : ""));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "workload \"", profile_.name, "\" has no convergence model of ", target.Describe(),
          have.empty() ? std::string(" (it has none)")
                       : absl::StrCat(" (it has ", absl::StrJoin(have, ", "), ")"),
          ": import runs that log ", target.MetricName(),
          " (spotdnn profile import) and fit the profile from them (spotdnn profile fit), or give "
          "the target in iterations or epochs"));
    }
    case EstimateError::kTargetNotReached:
      return absl::InvalidArgumentError(absl::StrFormat(
          "target %s: most runs of a %d-worker cluster never reach it, by the workload's "
          "convergence model; choose a target its runs reach%s",
          target.Describe(), e.workers,
          e.extrapolated || e.data_best != 0
              ? absl::StrFormat(" (the profile's runs reached %.4g at best)", e.data_best)
              : ""));
    case EstimateError::kNoBatch:
      return absl::FailedPreconditionError(absl::StrCat(
          "cluster uses ", catalog_.types[e.unusable_type].name, " (",
          catalog_.types[e.unusable_type].gpu_type, "), for which workload \"", profile_.name,
          "\" has no batch size: a target in ", target.is_loss() ? "loss" : "epochs (samples)",
          " needs each worker's batch; give the profile's compute entry a batch_per_gpu (import "
          "the runs with --batch-size), or give the target in iterations"));
  }
  return absl::InternalError("unknown estimate error");
}

absl::Status PerformanceModel::UnusableStatus(absl::Span<const int> counts, int first) const {
  std::vector<int> unusable;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] > 0 && !types_[k].usable) unusable.push_back(static_cast<int>(k));
  }
  if (unusable.size() <= 1) {
    Estimate e;
    e.error = EstimateError::kUnusableType;
    e.unusable_type = unusable.empty() ? first : unusable[0];
    return ErrorStatus(e, 0);
  }
  std::vector<std::string> names, reasons;
  for (int k : unusable) {
    names.push_back(absl::StrCat(catalog_.types[k].name, " (", catalog_.types[k].gpu_type, ")"));
    reasons.push_back(types_[k].unusable_reason);
  }
  return absl::FailedPreconditionError(
      absl::StrCat("cluster uses ", absl::StrJoin(names, ", "),
                   ", which the model cannot predict: ", absl::StrJoin(reasons, "; ")));
}

absl::Status PerformanceModel::CheckCluster(const Cluster& cluster) const {
  if (cluster.counts.size() != catalog_.types.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster has %d counts but catalog \"%s\" has %d instance types",
                        cluster.counts.size(), catalog_.name, catalog_.types.size()));
  }
  for (size_t k = 0; k < cluster.counts.size(); ++k) {
    if (cluster.counts[k] < 0 || cluster.counts[k] > kMaxInstancesPerType) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cluster count of %s = %d: must be in [0, %d]", catalog_.types[k].name,
                          cluster.counts[k], kMaxInstancesPerType));
    }
  }
  if (cluster.parameter_servers < 1 || cluster.parameter_servers > kMaxParameterServers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster.parameter_servers = %d: must be in [1, %d]",
                        cluster.parameter_servers, kMaxParameterServers));
  }
  return absl::OkStatus();
}

absl::StatusOr<Prediction> PerformanceModel::Predict(const Cluster& cluster,
                                                     double target_loss) const {
  return Predict(cluster, Target::Loss(target_loss));
}

absl::StatusOr<Prediction> PerformanceModel::Predict(const Cluster& cluster,
                                                     const Target& target) const {
  if (auto s = CheckCluster(cluster); !s.ok()) return s;
  if (target.is_loss()) {
    if (std::isnan(target.value)) {
      return absl::InvalidArgumentError("target_loss = nan: must be a number");
    }
  } else if (auto s = target.Validate(); !s.ok()) {
    return s;
  }
  Prediction p;
  p.estimate = Evaluate(cluster.counts, target, cluster.parameter_servers);
  if (p.estimate.error == EstimateError::kUnusableType) {
    return UnusableStatus(cluster.counts, p.estimate.unusable_type);
  }
  if (auto s = ErrorStatus(p.estimate, target); !s.ok()) return s;
  p.parameter_servers = cluster.parameter_servers;
  p.target = target;
  if (target.is_loss()) p.target_loss = target.value;
  const double network_time =
      shared_ps_ ? p.estimate.ps_response_time_s : two_s_ / p.estimate.worker_bandwidth_mb_per_s;
  for (size_t k = 0; k < cluster.counts.size(); ++k) {
    if (cluster.counts[k] == 0) continue;
    const TypeModel& t = types_[k];
    WorkerBreakdown w;
    w.type_index = static_cast<int>(k);
    w.count = cluster.counts[k];
    w.gpus = t.gpus;
    w.batch_size = t.batch_size;
    w.compute_time_s = t.compute_time_s;
    w.communication_time_s = network_time + t.pcie_time_s;
    w.iteration_time_s = w.compute_time_s + w.communication_time_s;
    w.samples_per_s = t.batch_size / w.iteration_time_s;
    w.bandwidth_mb_per_s = p.estimate.worker_bandwidth_mb_per_s;
    p.workers.push_back(w);
  }
  return p;
}

absl::StatusOr<double> PerformanceModel::LossAtTime(const Cluster& cluster, double time_s) const {
  auto curve = LossCurve(cluster, time_s, 2);
  if (!curve.ok()) return curve.status();
  return curve->back().loss;
}

absl::StatusOr<std::vector<LossPoint>> PerformanceModel::LossCurve(const Cluster& cluster,
                                                                   double horizon_s,
                                                                   int points) const {
  if (auto s = CheckCluster(cluster); !s.ok()) return s;
  if (!has_loss_) {
    return ErrorStatus({.error = EstimateError::kNoLossModel}, Target::Loss(0));
  }
  if (!(std::isfinite(horizon_s) && horizon_s >= 0 && horizon_s <= kMaxHorizonS)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("horizon_s = %g: must be a finite number in [0, %g] (about 317 years)",
                        horizon_s, kMaxHorizonS));
  }
  if (points < 2 || points > 100000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("points = %d: must be between 2 and 100000", points));
  }
  Estimate shape;
  if (!EvaluateShape(cluster.counts, cluster.parameter_servers, shape)) {
    return ErrorStatus(shape, 0);
  }
  const double r = coefficients_.convergence_weight * shape.convergence_coefficient;
  std::vector<LossPoint> curve;
  curve.reserve(points);
  for (int i = 0; i < points; ++i) {
    LossPoint pt;
    pt.time_s = horizon_s * (static_cast<double>(i) / (points - 1));
    pt.normalized_iterations = pt.time_s / shape.expected_iteration_time_s;
    pt.loss = LossAfter(loss_, shape.wa_batch, r, shape.workers, pt.normalized_iterations);
    if (!std::isfinite(pt.normalized_iterations) || !std::isfinite(pt.loss)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("horizon_s = %g: the model gives no finite loss at %g s on this cluster",
                          horizon_s, pt.time_s));
    }
    curve.push_back(pt);
  }
  return curve;
}

}  // namespace spotdnn::predictor
