#include "predictor/allreduce.h"

#include <algorithm>
#include <cmath>
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

absl::StatusOr<Prediction> PredictAllReduce(const WorkloadProfile& profile,
                                            const InstanceCatalog& catalog, const Cluster& cluster,
                                            const Target& target, int local_batch) {
  if (local_batch < 1 || local_batch > kMaxBatchPerGpu) {
    return absl::InvalidArgumentError(
        absl::StrFormat("local_batch = %d: must be in [1, %d] (samples per GPU per step)",
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
  if (auto s = target.Validate(); !s.ok()) return s;
  if (target.kind != Target::Kind::kIterations && target.kind != Target::Kind::kSamples) {
    return absl::FailedPreconditionError(
        absl::StrCat("target ", target.Describe(),
                     ": a synchronous workload is predicted for --iterations or --epochs only (its "
                     "convergence is not modelled yet)"));
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
  const double global_batch = static_cast<double>(shape->ranks) * local_batch;
  for (size_t i = 0; i < catalog.types.size(); ++i) {
    if (cluster.counts[i] == 0) continue;
    const InstanceType& type = catalog.types[i];
    const AllReduceModel& m = *profile.AllReduceOf(type.gpu_type);
    WorkerBreakdown w;
    w.type_index = static_cast<int>(i);
    w.count = cluster.counts[i];
    w.gpus = type.gpus;
    w.batch_size = type.gpus * local_batch;
    w.compute_time_s = AllReduceCompute(m, local_batch, type.gpus);
    w.communication_time_s = *AllReduceTime(m, *shape);
    w.iteration_time_s = step_s;
    w.samples_per_s = w.batch_size / step_s;
    out.workers.push_back(w);
    e.price_per_hour += w.count * type.spot_price_per_hour;
    e.on_demand_price_per_hour += w.count * type.on_demand_price_per_hour;
  }
  e.expected_iteration_time_s = step_s;
  e.cluster_speed = global_batch / step_s;
  e.wa_batch = global_batch;
  e.convergence_coefficient = 1;
  const double steps =
      target.kind == Target::Kind::kIterations ? target.value : target.value / global_batch;
  e.normalized_iterations = steps;
  e.time_s = steps * step_s;
  if (!std::isfinite(e.time_s)) {
    e.error = EstimateError::kNotFinite;
    return absl::InvalidArgumentError(
        absl::StrCat("target ", target.Describe(), ": the time is not finite"));
  }
  e.iterations_p10 = e.iterations_p50 = e.iterations_p90 = steps;
  e.time_p10_s = e.time_p50_s = e.time_p90_s = e.time_s;
  e.cost_usd = e.price_per_hour * e.time_s / 3600;
  e.on_demand_cost_usd = e.on_demand_price_per_hour * e.time_s / 3600;
  return out;
}

}  // namespace spotdnn::predictor
