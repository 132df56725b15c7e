#include "predictor/allreduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace spotdnn::predictor {

absl::StatusOr<AllReduceShape> ShapeOf(absl::Span<const int> gpus_per_instance) {
  if (gpus_per_instance.empty()) {
    return absl::InvalidArgumentError("placement: no instance");
  }
  AllReduceShape shape;
  for (size_t i = 0; i < gpus_per_instance.size(); ++i) {
    const int k = gpus_per_instance[i];
    if (k < 1 || k > kMaxGpusPerInstance) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "placement[%d] = %d: GPUs on an instance must be in [1, %d]", i, k, kMaxGpusPerInstance));
    }
    shape.ranks += k;
    if (shape.ranks > kMaxClusterSize) {
      return absl::InvalidArgumentError(
          absl::StrFormat("placement: more than %d ranks", kMaxClusterSize));
    }
    shape.max_gpus = std::max(shape.max_gpus, k);
  }
  shape.instances = static_cast<int>(gpus_per_instance.size());
  return ShapeFrom(shape.instances, shape.ranks, shape.max_gpus);
}

namespace {

double Clamp(double x, double lo, double hi) { return std::min(std::max(x, lo), hi); }

// The least T with sum_i ranks_i clamp((T - fixed_i) / per_sample_i, lower, cap_i) >= samples
// (no upper clamp unless `capped`): the sum is non-decreasing and linear between the points where
// a group reaches `lower` or its cap, so the crossing is found on those points and interpolated.
// Infinity when the (capped) sum never reaches `samples`.
double WaterLevel(absl::Span<const RankGroup> groups, double samples, double lower, bool capped) {
  std::vector<double> points;
  for (const RankGroup& g : groups) {
    if (g.ranks <= 0) continue;
    points.push_back(g.fixed_s + g.per_sample_s * lower);
    if (capped) points.push_back(g.fixed_s + g.per_sample_s * g.cap);
  }
  if (points.empty()) return std::numeric_limits<double>::infinity();
  std::sort(points.begin(), points.end());
  auto held = [&](double t) {
    double sum = 0;
    for (const RankGroup& g : groups) {
      if (g.ranks <= 0) continue;
      const double b = (t - g.fixed_s) / g.per_sample_s;
      sum += static_cast<double>(g.ranks) * (capped ? Clamp(b, lower, g.cap) : std::max(b, lower));
    }
    return sum;
  };
  double prev = points[0];
  double held_prev = held(prev);
  if (held_prev >= samples) return prev;
  for (size_t j = 1; j < points.size(); ++j) {
    if (points[j] == prev) continue;
    const double h = held(points[j]);
    if (h >= samples) return prev + (points[j] - prev) * (samples - held_prev) / (h - held_prev);
    prev = points[j];
    held_prev = h;
  }
  if (capped) return std::numeric_limits<double>::infinity();
  double slope = 0;  // past every point each group takes 1 / per_sample_s more per second
  for (const RankGroup& g : groups) {
    if (g.ranks > 0) slope += static_cast<double>(g.ranks) / g.per_sample_s;
  }
  return prev + (samples - held_prev) / slope;
}

double GroupCompute(const RankGroup& g, double b) { return g.fixed_s + g.per_sample_s * b; }

}  // namespace

AllReduceShape ShapeFrom(int instances, int ranks, int max_gpus) {
  AllReduceShape shape;
  shape.instances = instances;
  shape.ranks = ranks;
  shape.max_gpus = max_gpus;
  const double k = shape.max_gpus;
  shape.intra_on = shape.max_gpus > 1 ? 1.0 : 0.0;
  shape.ring = 2.0 * (k - 1) / k;
  if (shape.instances > 1) {
    shape.cross_on = 1;
    shape.straggler = std::sqrt(2.0 * std::log(static_cast<double>(shape.instances)));
    shape.per_gpu = k - 1;
    shape.pair = shape.instances == 2 ? 1.0 : 0.0;
  }
  return shape;
}

double AllReduceCompute(const AllReduceModel& m, double local_batch, int gpus_busy) {
  return (m.compute_fixed_s + m.compute_per_sample_s * local_batch) *
         (1 + m.compute_contention * (gpus_busy - 1));
}

absl::StatusOr<double> AllReduceTime(const AllReduceModel& m, const AllReduceShape& shape) {
  double t = m.intra_fixed_s * shape.intra_on + m.intra_ring_s * shape.ring;
  if (shape.instances > 1) {
    if (!m.cross_instance) {
      return absl::FailedPreconditionError(
          absl::StrCat("allreduce[", m.gpu_type,
                       "]: the cross-instance terms (a_n, b_s, c_k, e_2) are not fitted: ",
                       "the profile's runs were all on one instance, and this cluster has ",
                       shape.instances, "; import runs on several instances and fit again"));
    }
    t += m.cross_fixed_s * shape.cross_on + m.cross_straggler_s * shape.straggler +
         m.cross_per_gpu_s * shape.per_gpu + m.cross_pair_s * shape.pair;
  }
  return t;
}

double OverlapSteps(double compute_s, double allreduce_s, double gamma) {
  if (allreduce_s <= 0) return compute_s;
  if (compute_s <= 0) return allreduce_s;
  const double hi = std::max(compute_s, allreduce_s);
  const double lo = std::min(compute_s, allreduce_s);
  return hi * std::pow(1 + std::pow(lo / hi, gamma), 1 / gamma);
}

absl::StatusOr<AllReduceStep> AllReduceStepTime(const AllReduceModel& m,
                                                absl::Span<const int> gpus_per_instance,
                                                absl::Span<const double> local_batches) {
  auto shape = ShapeOf(gpus_per_instance);
  if (!shape.ok()) return shape.status();
  if (local_batches.size() != 1 && local_batches.size() != gpus_per_instance.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("local_batches: %d values for %d instances: give one, or one per instance",
                        local_batches.size(), gpus_per_instance.size()));
  }
  AllReduceStep step;
  for (size_t i = 0; i < gpus_per_instance.size(); ++i) {
    const double b = local_batches.size() == 1 ? local_batches[0] : local_batches[i];
    if (!(b >= 1 && b <= kMaxBatchPerGpu)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("local_batches[%d] = %g: must be in [1, %d]",
                          local_batches.size() == 1 ? 0 : i, b, kMaxBatchPerGpu));
    }
    step.compute_s = std::max(step.compute_s, AllReduceCompute(m, b, gpus_per_instance[i]));
  }
  auto allreduce = AllReduceTime(m, *shape);
  if (!allreduce.ok()) return allreduce.status();
  step.allreduce_s = *allreduce;
  step.step_s = OverlapSteps(step.compute_s, step.allreduce_s, m.overlap_gamma);
  return step;
}

int LocalBatchCap(const WorkloadProfile& profile, double gpu_memory_gib) {
  if (!profile.memory) return kMaxBatchPerGpu;
  const double x = profile.memory->a2 * gpu_memory_gib + profile.memory->b2;
  if (!(x >= 1)) return 0;
  return x >= kMaxBatchPerGpu ? kMaxBatchPerGpu : static_cast<int>(std::floor(x));
}

absl::StatusOr<BatchSplit> SplitGlobalBatch(absl::Span<const RankGroup> groups,
                                            int64_t global_batch) {
  int64_t ranks = 0;
  int64_t capacity = 0;
  for (const RankGroup& g : groups) {
    if (g.ranks <= 0) continue;
    ranks += g.ranks;
    capacity += g.ranks * static_cast<int64_t>(g.cap);
  }
  if (ranks == 0) return absl::InvalidArgumentError("cluster: no rank");
  if (global_batch < ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch = ", global_batch, ": smaller than the cluster's ", ranks,
                     " ranks (every rank needs at least one sample per step)"));
  }
  if (global_batch > capacity) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch = ", global_batch, ": more than the ranks' memory holds (",
                     capacity, " samples at their largest local batches)"));
  }
  // The continuous optimum: every rank's compute ends at T, clamped to [1, cap]. Its batches
  // rounded down (less a hair, so rounding error never lifts one above the optimum's) leave
  // fewer than one sample per rank to hand out.
  const double t = WaterLevel(groups, static_cast<double>(global_batch), 1, true);
  BatchSplit split;
  split.low.assign(groups.size(), 0);
  split.high.assign(groups.size(), 0);
  int64_t left = global_batch;
  for (size_t i = 0; i < groups.size(); ++i) {
    const RankGroup& g = groups[i];
    if (g.ranks <= 0) continue;
    const double b = Clamp((t - g.fixed_s) / g.per_sample_s, 1, g.cap);
    split.low[i] = static_cast<int>(Clamp(std::floor(b - 1e-6 * std::max(1.0, b)), 1, g.cap));
    left -= g.ranks * split.low[i];
  }
  // Rounding cannot overshoot, but a hand-out below must never start negative.
  for (size_t i = 0; left < 0 && i < groups.size(); ++i) {
    while (left < 0 && groups[i].ranks > 0 && split.low[i] > 1) {
      --split.low[i];
      left += groups[i].ranks;
    }
  }
  // The samples left, each to the rank whose compute on one more is least: these increments, in
  // increasing cost, are the cheapest `left` above the rounded-down batches, and any split whose
  // slowest rank computes in less than the last one taken would hold fewer than the global batch
  // (every rank's batch at a time >= the continuous T is at least its rounded-down one), so the
  // result is optimal among integer splits. Whole groups at a time: their ranks are alike.
  while (left > 0) {
    size_t best = groups.size();
    double best_cost = std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < groups.size(); ++i) {
      const RankGroup& g = groups[i];
      if (g.ranks <= 0) continue;
      if (split.high[i] == g.ranks) {
        ++split.low[i];
        split.high[i] = 0;
      }
      if (split.low[i] + 1 > g.cap) continue;
      const double cost = GroupCompute(g, split.low[i] + 1);
      if (cost < best_cost) {
        best_cost = cost;
        best = i;
      }
    }
    if (best == groups.size()) break;  // unreachable: the caps hold the batch
    const int64_t give = std::min(left, groups[best].ranks - split.high[best]);
    split.high[best] += give;
    left -= give;
  }
  for (size_t i = 0; i < groups.size(); ++i) {
    const RankGroup& g = groups[i];
    if (g.ranks <= 0) continue;
    if (split.high[i] == g.ranks) {
      ++split.low[i];
      split.high[i] = 0;
    }
    split.compute_s =
        std::max(split.compute_s, GroupCompute(g, split.low[i] + (split.high[i] > 0 ? 1 : 0)));
  }
  return split;
}

double ComputeLowerBound(absl::Span<const RankGroup> groups, int64_t global_batch, bool capped) {
  return WaterLevel(groups, static_cast<double>(global_batch), 0, capped);
}

absl::StatusOr<AllReduceCatalog> AllReduceCatalog::Create(const WorkloadProfile& profile,
                                                          const InstanceCatalog& catalog) {
  if (profile.allreduce.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "workload \"", profile.name,
        "\" has no synchronous (all-reduce) model: import a synchronous run's samples (spotdnn "
        "profile import FILE --gpu-type T) and fit it (spotdnn profile fit)"));
  }
  AllReduceCatalog out;
  for (const InstanceType& type : catalog.types) {
    Type t;
    t.name = type.name;
    t.gpus = type.gpus;
    const AllReduceModel* m = profile.AllReduceOf(type.gpu_type);
    if (m == nullptr) {
      std::vector<std::string> known;
      for (const AllReduceModel& a : profile.allreduce) known.push_back(a.gpu_type);
      t.reason = absl::StrCat(
          "instance type ", type.name, " (GPU type \"", type.gpu_type, "\"): workload \"",
          profile.name,
          "\" has no all-reduce model of that GPU type (it has: ", absl::StrJoin(known, ", "),
          "); import a synchronous run on ", type.gpu_type, " GPUs (--gpu-type ", type.gpu_type,
          ") and fit again");
    } else {
      t.model = *m;
      const double contention = 1 + m->compute_contention * (type.gpus - 1);
      t.group.fixed_s = m->compute_fixed_s * contention;
      t.group.per_sample_s = m->compute_per_sample_s * contention;
      t.group.cap = LocalBatchCap(profile, type.gpu_memory_gib);
      if (t.group.cap < 1) {
        t.reason = absl::StrCat("instance type ", type.name, ": the memory model (a2, b2) leaves ",
                                type.gpu_memory_gib, " GiB GPUs no sample");
      }
    }
    out.types_.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<double> AllReduceCatalog::AllReduceOf(size_t i, int instances, int max_gpus) const {
  return AllReduceTime(types_[i].model, ShapeFrom(instances, 1, max_gpus));
}

absl::StatusOr<AllReduceSplitStep> AllReduceCatalog::Step(absl::Span<const int> counts,
                                                          int64_t global_batch) const {
  if (counts.size() != types_.size()) {
    return absl::InvalidArgumentError("cluster: counts do not match the catalog's types");
  }
  if (global_batch < 1 || global_batch > kMaxGlobalBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch = ", global_batch, ": must be in [1, ", kMaxGlobalBatch, "]"));
  }
  std::vector<RankGroup> groups(types_.size());
  int64_t instances = 0;
  int64_t ranks = 0;
  int64_t capacity = 0;
  int max_gpus = 0;
  for (size_t i = 0; i < types_.size(); ++i) {
    if (counts[i] == 0) continue;
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cluster[", i, "] = ", counts[i]));
    }
    if (!Usable(i)) return absl::FailedPreconditionError(types_[i].reason);
    groups[i] = types_[i].group;
    groups[i].ranks = static_cast<int64_t>(counts[i]) * types_[i].gpus;
    instances += counts[i];
    ranks += groups[i].ranks;
    capacity += groups[i].ranks * groups[i].cap;
    max_gpus = std::max(max_gpus, types_[i].gpus);
  }
  if (instances == 0) return absl::InvalidArgumentError("cluster: no instance");
  if (ranks > kMaxClusterSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster: %d ranks, more than %d", ranks, kMaxClusterSize));
  }
  if (global_batch < ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch = ", global_batch, ": smaller than the cluster's ", ranks,
                     " ranks (every rank needs at least one sample per step)"));
  }
  AllReduceSplitStep step;
  // The least k whose micro-steps of ceil(B / k) samples fit the caps.
  const int64_t k = global_batch <= capacity ? 1 : (global_batch + capacity - 1) / capacity;
  const int64_t q = global_batch / k;  // micro-steps of q samples, r of them one more
  const int64_t r = global_batch % k;
  if (q < ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch = ", global_batch, ": the ranks' memory holds ", capacity,
                     " samples per step, so it takes ", k, " accumulated micro-steps of about ", q,
                     " samples, fewer than the cluster's ", ranks, " ranks"));
  }
  step.accumulation_steps = static_cast<int>(k);
  auto big = SplitGlobalBatch(groups, q + (r > 0 ? 1 : 0));
  if (!big.ok()) return big.status();
  step.split = *big;
  double last = big->compute_s;
  step.compute_s = big->compute_s * static_cast<double>(r > 0 ? r : k);
  if (r > 0) {
    auto small = SplitGlobalBatch(groups, q);
    if (!small.ok()) return small.status();
    last = small->compute_s;
    step.compute_s += small->compute_s * static_cast<double>(k - r);
  }
  const double before_last = step.compute_s - last;
  for (size_t i = 0; i < types_.size(); ++i) {
    if (counts[i] == 0) continue;
    auto allreduce = AllReduceTime(
        types_[i].model, ShapeFrom(static_cast<int>(instances), static_cast<int>(ranks), max_gpus));
    if (!allreduce.ok()) return allreduce.status();
    step.allreduce_s = std::max(step.allreduce_s, *allreduce);
    step.step_s = std::max(
        step.step_s, before_last + OverlapSteps(last, *allreduce, types_[i].model.overlap_gamma));
  }
  return step;
}

absl::StatusOr<AllReduceSplitStep> AllReduceCatalog::StepEven(absl::Span<const int> counts,
                                                              int local_batch) const {
  if (counts.size() != types_.size()) {
    return absl::InvalidArgumentError("cluster: counts do not match the catalog's types");
  }
  if (local_batch < 1 || local_batch > kMaxBatchPerGpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_batch = ", local_batch, ": must be in [1, ", kMaxBatchPerGpu, "]"));
  }
  int64_t instances = 0;
  int64_t ranks = 0;
  int max_gpus = 0;
  AllReduceSplitStep step;
  step.split.low.assign(types_.size(), local_batch);
  step.split.high.assign(types_.size(), 0);
  for (size_t i = 0; i < types_.size(); ++i) {
    if (counts[i] == 0) continue;
    if (counts[i] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("cluster[", i, "] = ", counts[i]));
    }
    if (!Usable(i)) return absl::FailedPreconditionError(types_[i].reason);
    const RankGroup& g = types_[i].group;
    if (local_batch > g.cap) {
      return absl::InvalidArgumentError(absl::StrCat(
          "local_batch = ", local_batch, ": instance type ", types_[i].name,
          "'s GPUs hold at most ", g.cap, " samples per step (the profile's memory model)"));
    }
    instances += counts[i];
    ranks += static_cast<int64_t>(counts[i]) * types_[i].gpus;
    max_gpus = std::max(max_gpus, types_[i].gpus);
    step.compute_s = std::max(step.compute_s, g.fixed_s + g.per_sample_s * local_batch);
  }
  if (instances == 0) return absl::InvalidArgumentError("cluster: no instance");
  if (ranks > kMaxClusterSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster: %d ranks, more than %d", ranks, kMaxClusterSize));
  }
  step.split.compute_s = step.compute_s;
  for (size_t i = 0; i < types_.size(); ++i) {
    if (counts[i] == 0) continue;
    auto allreduce = AllReduceTime(
        types_[i].model, ShapeFrom(static_cast<int>(instances), static_cast<int>(ranks), max_gpus));
    if (!allreduce.ok()) return allreduce.status();
    step.allreduce_s = std::max(step.allreduce_s, *allreduce);
    step.step_s = std::max(step.step_s,
                           OverlapSteps(step.compute_s, *allreduce, types_[i].model.overlap_gamma));
  }
  return step;
}

absl::Status SyncSteps::CheckBatch(double batch) const {
  if (!from_convergence || critical_batch || reference_global_batch <= 0) return absl::OkStatus();
  if (std::abs(batch - reference_global_batch) <= 1e-9 * reference_global_batch) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrFormat(
      "global batch %.15g: the convergence model describes global batch %.15g and has no "
      "critical_batch to carry its steps to another; fit it from runs at several global batches "
      "(spotdnn profile fit), or train at %.15g",
      batch, reference_global_batch, reference_global_batch));
}

absl::StatusOr<SyncSteps> SyncStepsFor(const WorkloadProfile& profile, const Target& target) {
  if (auto s = target.Validate(); !s.ok()) return s;
  SyncSteps out;
  if (target.kind == Target::Kind::kIterations) {
    for (double& f : out.fixed) f = target.value;
    return out;
  }
  if (target.kind == Target::Kind::kSamples) {
    for (double& p : out.per_batch) p = target.value;
    return out;
  }
  const std::string metric = target.MetricName();
  const bool higher = target.kind == Target::Kind::kMetric && target.higher_is_better;
  const ConvergenceModel* model = nullptr;
  for (const ConvergenceModel& m : profile.convergence) {
    if (m.metric == metric && m.higher_is_better == higher) model = &m;
  }
  if (model == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "target ", target.Describe(), ": workload \"", profile.name,
        "\" has no convergence model of ", metric, higher ? " (higher is better)" : "",
        " for its synchronous training (eq. 3's g1..g5 model parameter-server training): fit one "
        "from runs that log it (spotdnn profile fit), or give the target in iterations or "
        "epochs"));
  }
  if (auto s = model->ValidateBatchLaw(absl::StrCat("convergence[", metric, "].")); !s.ok()) {
    return s;
  }
  out.from_convergence = true;
  if (model->best_value) {
    out.data_best = *model->best_value;
    out.extrapolated = model->IsExtrapolation(target.value);
  }
  // One synchronous step at the global batch is one step of the curve: one worker, R = 0.
  const StepQuantiles q = StepsToTarget(*model, 1, 0, target.value);
  if (!q.reachable) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "target %s: fewer than half of the runs the convergence model of %s describes reach it "
        "(%.0f%% do)",
        target.Describe(), metric, 100 * q.reached_fraction));
  }
  out.reference_global_batch = model->reference_global_batch;
  out.critical_batch = model->critical_batch;
  out.reference_p50 = q.p50;
  out.has_spread = q.p10 < q.p90;
  const double quantiles[3] = {q.p10, q.p50, q.p90};
  // Without a critical batch the steps do not depend on B (CheckBatch refuses another B when the
  // curve's own is known).
  const double c = model->critical_batch.value_or(0);
  const double ref = model->reference_global_batch;
  for (int i = 0; i < 3; ++i) {
    out.fixed[i] = c > 0 ? quantiles[i] / (1 + c / ref) : quantiles[i];
    out.per_batch[i] = c > 0 ? out.fixed[i] * c : 0;
  }
  return out;
}

namespace {

// The cluster's part of a synchronous prediction: a step of `step_s` trains `global_batch`
// samples, and the target takes `steps` at that batch.
absl::Status FinishEstimate(const Target& target, const SyncSteps& steps, double global_batch,
                            double step_s, Prediction& out) {
  Estimate& e = out.estimate;
  e.expected_iteration_time_s = step_s;
  e.cluster_speed = global_batch / step_s;
  e.wa_batch = global_batch;
  e.convergence_coefficient = 1;
  if (auto s = steps.CheckBatch(global_batch); !s.ok()) return s;
  e.normalized_iterations = steps.At(global_batch);
  e.time_s = e.normalized_iterations * step_s;
  if (!std::isfinite(e.time_s)) {
    e.error = EstimateError::kNotFinite;
    return absl::InvalidArgumentError(
        absl::StrCat("target ", target.Describe(), ": the time is not finite"));
  }
  e.iterations_p10 = steps.At(global_batch, 0);
  e.iterations_p50 = e.normalized_iterations;
  e.iterations_p90 = steps.At(global_batch, 2);
  e.time_p10_s = e.iterations_p10 * step_s;
  e.time_p50_s = e.time_s;
  e.time_p90_s = e.iterations_p90 * step_s;
  e.has_spread = steps.has_spread;
  e.extrapolated = steps.extrapolated;
  e.data_best = steps.data_best.value_or(0);
  e.cost_usd = e.price_per_hour * e.time_s / 3600;
  e.on_demand_cost_usd = e.on_demand_price_per_hour * e.time_s / 3600;
  if (steps.from_convergence) {
    out.reference_global_batch = steps.reference_global_batch;
    out.critical_batch = steps.critical_batch;
    out.reference_iterations = steps.reference_p50;
  }
  return absl::OkStatus();
}

// The prediction of a global batch split by speed (AllReduceCatalog::Step).
absl::StatusOr<Prediction> PredictSplit(const WorkloadProfile& profile,
                                        const InstanceCatalog& catalog, const Cluster& cluster,
                                        const Target& target, const SyncSteps& steps,
                                        int global_batch) {
  auto types = AllReduceCatalog::Create(profile, catalog);
  if (!types.ok()) return types.status();
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    if (cluster.counts[i] != 0 && !types->Usable(i)) {
      return absl::FailedPreconditionError(types->UnusableReason(i));
    }
  }
  auto step = types->Step(cluster.counts, global_batch);
  if (!step.ok()) return step.status();
  Prediction out;
  out.target = target;
  out.accumulation_steps = step->accumulation_steps;
  Estimate& e = out.estimate;
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    if (cluster.counts[i] == 0) continue;
    const InstanceType& type = catalog.types[i];
    const int64_t ranks = static_cast<int64_t>(cluster.counts[i]) * type.gpus;
    const RankGroup& g = types->Group(i);
    WorkerBreakdown w;
    w.type_index = static_cast<int>(i);
    w.count = cluster.counts[i];
    w.gpus = type.gpus;
    w.local_batch = step->split.Mean(i, ranks);
    w.batch_size = static_cast<int>(std::lround(w.local_batch * type.gpus));
    w.compute_time_s =
        g.fixed_s + g.per_sample_s * (step->split.low[i] + (step->split.high[i] > 0 ? 1 : 0));
    w.communication_time_s = step->allreduce_s;
    w.iteration_time_s = step->step_s;
    w.samples_per_s = w.local_batch * type.gpus * step->accumulation_steps / step->step_s;
    out.workers.push_back(w);
    e.workers += cluster.counts[i];
    e.price_per_hour += w.count * type.spot_price_per_hour;
    e.on_demand_price_per_hour += w.count * type.on_demand_price_per_hour;
  }
  if (auto s = FinishEstimate(target, steps, global_batch, step->step_s, out); !s.ok()) return s;
  return out;
}

}  // namespace

absl::StatusOr<Prediction> PredictAllReduce(const WorkloadProfile& profile,
                                            const InstanceCatalog& catalog, const Cluster& cluster,
                                            const Target& target, int local_batch,
                                            int global_batch) {
  if (local_batch != 0 && global_batch != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("local_batch = ", local_batch, ", global_batch = ", global_batch,
                     ": give one (a local batch is the even split of its global batch)"));
  }
  if (global_batch < 0 || global_batch > kMaxGlobalBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("global_batch = %d: must be in [1, %d] (samples per step over every rank)",
                        global_batch, kMaxGlobalBatch));
  }
  const bool scale = profile.global_batch == GlobalBatch::kScale;
  if (scale) {
    // The global batch follows the cluster: every rank at its local batch.
    if (global_batch != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "global_batch = ", global_batch,
          ": the profile's global batch scales with the cluster (global_batch = scale), every "
          "rank at its local batch; give local_batch, or a fixed global batch (global_batch_mode "
          "= fixed)"));
    }
    if (local_batch == 0) local_batch = profile.local_batch_size;
    if (local_batch < 1 || local_batch > kMaxBatchPerGpu) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "local_batch = %d: must be in [1, %d] (samples per GPU per step: the profile's global "
          "batch scales with the cluster and its local_batch_size declares none)",
          local_batch, kMaxBatchPerGpu));
    }
  }
  if (local_batch == 0 && global_batch == 0) global_batch = profile.global_batch_size;
  if (global_batch == 0 && (local_batch < 1 || local_batch > kMaxBatchPerGpu)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "local_batch = %d: must be in [1, %d] (samples per GPU per step), or give a global batch "
        "(the profile's global_batch_size declares none)",
        local_batch, kMaxBatchPerGpu));
  }
  if (cluster.counts.size() != catalog.types.size()) {
    return absl::InvalidArgumentError("cluster: counts do not match the catalog's types");
  }
  if (profile.allreduce.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "workload \"", profile.name,
        "\" has no synchronous (all-reduce) model: import a synchronous run's samples (spotdnn "
        "profile import FILE --gpu-type T) and fit it (spotdnn profile fit)"));
  }
  auto steps = SyncStepsFor(profile, target);
  if (!steps.ok()) return steps.status();
  if (global_batch > 0) {
    auto out = PredictSplit(profile, catalog, cluster, target, *steps, global_batch);
    if (out.ok()) out->global_batch_mode = GlobalBatch::kFixed;
    return out;
  }
  if (scale) {
    // Within each type's memory: the local batch is every rank's, so none may exceed its cap.
    for (size_t i = 0; i < catalog.types.size(); ++i) {
      if (cluster.counts[i] == 0) continue;
      const int cap = LocalBatchCap(profile, catalog.types[i].gpu_memory_gib);
      if (local_batch > cap) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "local_batch = %d: instance type %s's %g GiB GPUs hold at most %d samples per step "
            "(the profile's memory model), and a global batch that scales keeps every rank's",
            local_batch, catalog.types[i].name, catalog.types[i].gpu_memory_gib, cap));
      }
    }
  }
  // Every instance's GPUs, with the model of its GPU type.
  std::vector<int> gpus;
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    if (cluster.counts[i] == 0) continue;
    const InstanceType& type = catalog.types[i];
    const AllReduceModel* m = profile.AllReduceOf(type.gpu_type);
    if (m == nullptr) {
      std::vector<std::string> known;
      for (const AllReduceModel& a : profile.allreduce) known.push_back(a.gpu_type);
      return absl::FailedPreconditionError(absl::StrCat(
          "instance type ", type.name, " (GPU type \"", type.gpu_type, "\"): workload \"",
          profile.name, "\" has no all-reduce model of that GPU type (it has: ",
          absl::StrJoin(known, ", "), "); import a synchronous run on ", type.gpu_type,
          " GPUs (--gpu-type ", type.gpu_type, ") and fit again"));
    }
    if (const int cap = LocalBatchCap(profile, type.gpu_memory_gib); local_batch > cap) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "local_batch = %d: more than instance type %s's %g GiB GPUs hold (%d samples under "
          "workload \"%s\"'s memory model a2, b2); give a smaller local batch, or a global batch "
          "to split by speed and accumulate",
          local_batch, type.name, type.gpu_memory_gib, cap, profile.name));
    }
    gpus.insert(gpus.end(), cluster.counts[i], type.gpus);
  }
  if (gpus.empty()) return absl::InvalidArgumentError("cluster: no instance");
  auto shape = ShapeOf(gpus);
  if (!shape.ok())
    return absl::InvalidArgumentError(absl::StrCat("cluster: ", shape.status().message()));
  // The slowest rank's compute, and the step under each GPU type's all-reduce terms and overlap
  // on this placement: the slowest of them (a step ends when every rank's all-reduce has).
  Prediction out;
  out.target = target;
  out.accumulation_steps = 1;
  double slowest_compute = 0;
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    if (cluster.counts[i] == 0) continue;
    const InstanceType& type = catalog.types[i];
    slowest_compute =
        std::max(slowest_compute,
                 AllReduceCompute(*profile.AllReduceOf(type.gpu_type), local_batch, type.gpus));
  }
  double step_s = 0;
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    if (cluster.counts[i] == 0) continue;
    const AllReduceModel& m = *profile.AllReduceOf(catalog.types[i].gpu_type);
    auto allreduce = AllReduceTime(m, *shape);
    if (!allreduce.ok()) return allreduce.status();
    step_s = std::max(step_s, OverlapSteps(slowest_compute, *allreduce, m.overlap_gamma));
  }
  Estimate& e = out.estimate;
  e.workers = shape->instances;
  const double even_global = static_cast<double>(shape->ranks) * local_batch;
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    if (cluster.counts[i] == 0) continue;
    const InstanceType& type = catalog.types[i];
    const AllReduceModel& m = *profile.AllReduceOf(type.gpu_type);
    WorkerBreakdown w;
    w.type_index = static_cast<int>(i);
    w.count = cluster.counts[i];
    w.gpus = type.gpus;
    w.batch_size = type.gpus * local_batch;
    w.local_batch = local_batch;
    w.compute_time_s = AllReduceCompute(m, local_batch, type.gpus);
    w.communication_time_s = *AllReduceTime(m, *shape);
    w.iteration_time_s = step_s;
    w.samples_per_s = w.batch_size / step_s;
    out.workers.push_back(w);
    e.price_per_hour += w.count * type.spot_price_per_hour;
    e.on_demand_price_per_hour += w.count * type.on_demand_price_per_hour;
  }
  out.global_batch_mode = scale ? GlobalBatch::kScale : GlobalBatch::kFixed;
  if (auto s = FinishEstimate(target, *steps, even_global, step_s, out); !s.ok()) return s;
  return out;
}

}  // namespace spotdnn::predictor
