#include "predictor/types.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace spotdnn::predictor {
namespace {

// "must be ..." checks shared by the validators; `field` is the full path of the value.
absl::Status RequirePositive(absl::string_view field, double value) {
  if (std::isfinite(value) && value > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s = %g: must be a positive finite number", field, value));
}

absl::Status RequireNonNegative(absl::string_view field, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s = %g: must be a finite number >= 0", field, value));
}

absl::Status RequireFinite(absl::string_view field, double value) {
  if (std::isfinite(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat("%s = %g: must be finite", field, value));
}

}  // namespace

int InstanceCatalog::IndexOf(absl::string_view type_name) const {
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i].name == type_name) return static_cast<int>(i);
  }
  return -1;
}

absl::Status InstanceCatalog::Validate() const {
  const std::string where = absl::StrCat("catalog \"", name, "\": ");
  if (types.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "instance_types is empty"));
  }
  absl::flat_hash_map<std::string, size_t> seen;
  for (size_t i = 0; i < types.size(); ++i) {
    const InstanceType& t = types[i];
    const std::string field = absl::StrCat(where, "instance_types[", i, "]");
    if (t.name.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ".name is empty"));
    if (auto [it, fresh] = seen.emplace(t.name, i); !fresh) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.name = \"%s\": already used by instance_types[%d]", field, t.name, it->second));
    }
    if (t.gpus < 1 || t.gpus > kMaxGpusPerInstance) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.gpus = %d (%s): must be in [1, %d]", field, t.gpus, t.name, kMaxGpusPerInstance));
    }
    if (t.quota < 0 || t.quota > kMaxInstancesPerType) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.quota = %d (%s): must be in [0, %d]", field, t.quota, t.name, kMaxInstancesPerType));
    }
    for (auto [suffix, value] :
         {std::pair{".gpu_memory_gib", t.gpu_memory_gib},
          std::pair{".spot_price_per_hour", t.spot_price_per_hour},
          std::pair{".on_demand_price_per_hour", t.on_demand_price_per_hour}}) {
      if (auto s = RequireNonNegative(absl::StrCat(field, suffix), value); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(s.message(), " (type ", t.name, ")"));
      }
    }
  }
  if (auto s = RequirePositive(absl::StrCat(where, "parameter_server.bandwidth_mb_per_s"),
                               parameter_server.bandwidth_mb_per_s);
      !s.ok()) {
    return s;
  }
  for (auto [suffix, value] :
       {std::pair{"spot_price_per_hour", parameter_server.spot_price_per_hour},
        std::pair{"on_demand_price_per_hour", parameter_server.on_demand_price_per_hour}}) {
    if (auto s = RequireNonNegative(absl::StrCat(where, "parameter_server.", suffix), value);
        !s.ok()) {
      return s;
    }
  }
  return RequirePositive(absl::StrCat(where, "pcie_bandwidth_mb_per_s"), pcie_bandwidth_mb_per_s);
}

VariantCoefficients CoefficientsOf(ModelVariant variant) {
  switch (variant) {
    case ModelVariant::kSharedPs:
      // One exchange with the servers per iteration, measured as a whole: per-type compute times
      // hold any aggregation inside a worker, so no PCIe term.
      return {.convergence_weight = 1,
              .pcie_profiling_sign = 0,
              .pcie_iteration_weight = 0,
              .wa_batch_step = 0,
              .integer_iterations = false,
              .time_step = 0};
    case ModelVariant::kSpotdnnPrototype:
      return {.convergence_weight = 0,
              .pcie_profiling_sign = -1,
              .pcie_iteration_weight = 0,
              .wa_batch_step = 0.1,
              .integer_iterations = true,
              .time_step = 0.01};
    case ModelVariant::kPaper:
      break;
  }
  return {.convergence_weight = 1,
          .pcie_profiling_sign = 1,
          .pcie_iteration_weight = 1,
          .wa_batch_step = 0,
          .integer_iterations = false,
          .time_step = 0};
}

absl::string_view VariantName(ModelVariant variant) {
  switch (variant) {
    case ModelVariant::kSpotdnnPrototype:
      return "spotdnn-prototype";
    case ModelVariant::kSharedPs:
      return "shared-ps";
    case ModelVariant::kPaper:
      break;
  }
  return "paper";
}

absl::StatusOr<ModelVariant> ParseVariant(absl::string_view name) {
  for (ModelVariant v :
       {ModelVariant::kPaper, ModelVariant::kSpotdnnPrototype, ModelVariant::kSharedPs}) {
    if (name == VariantName(v)) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "model_variant = \"", name, "\": expected paper, spotdnn-prototype or shared-ps"));
}

absl::Status Target::Validate(absl::string_view field) const {
  switch (kind) {
    case Kind::kLoss:
      if (std::isfinite(value)) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrFormat("%s loss = %g: must be a finite number", field, value));
    case Kind::kIterations:
      if (std::isfinite(value) && value >= 1 && value <= kMaxTargetIterations) {
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(
          absl::StrFormat("%s iterations = %g: must be a finite number in [1, %g]", field, value,
                          kMaxTargetIterations));
    case Kind::kSamples:
      if (std::isfinite(value) && value > 0 && value <= kMaxTargetEpochs * kMaxDatasetSize) {
        return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s samples (epochs x dataset size) = %g: must be a positive finite number, at most %g",
          field, value, kMaxTargetEpochs * kMaxDatasetSize));
    case Kind::kMetric:
      if (metric.empty() || metric.size() > 128) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s metric = \"%s\": must be a name of 1 to 128 characters", field, metric));
      }
      if (std::isfinite(value)) return absl::OkStatus();
      return absl::InvalidArgumentError(
          absl::StrFormat("%s %s = %g: must be a finite number", field, metric, value));
  }
  return absl::InvalidArgumentError("unknown target kind");
}

std::string Target::Describe() const {
  switch (kind) {
    case Kind::kIterations:
      return absl::StrFormat("%.15g iterations", value);
    case Kind::kSamples:
      return absl::StrFormat("%.15g samples", value);
    case Kind::kMetric:
      return absl::StrFormat("%s %s %g", metric, higher_is_better ? ">=" : "<=", value);
    case Kind::kLoss:
      break;
  }
  return absl::StrFormat("loss %g", value);
}

std::string Target::MetricName() const {
  if (kind == Kind::kLoss) return "loss";
  if (kind == Kind::kMetric) return metric;
  return "";
}

absl::Status WorkloadProfile::Validate(Completeness completeness) const {
  const std::string where = absl::StrCat("workload \"", name, "\": ");
  // A synchronous profile predicts from its all-reduce models; S_parm and B_req are optional.
  const auto size_check =
      completeness == Completeness::kComplete && sync == SyncKind::kParameterServer
          ? RequirePositive
          : RequireNonNegative;
  if (auto s = size_check(absl::StrCat(where, "parameter_size_mb"), parameter_size_mb); !s.ok()) {
    return s;
  }
  if (auto s = size_check(absl::StrCat(where, "required_bandwidth_mb_per_s"),
                          required_bandwidth_mb_per_s);
      !s.ok()) {
    return s;
  }
  for (size_t i = 0; i < compute.size(); ++i) {
    const ComputeProfile& c = compute[i];
    const std::string field = absl::StrCat(where, "compute[", i, "]");
    if (c.instance_type.empty() == c.gpu_type.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": set exactly one of instance_type and gpu_type"));
    }
    if (c.batch_per_gpu < 0 || c.batch_per_gpu > kMaxBatchPerGpu) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.batch_per_gpu = %d: must be in [0, %d] (0 = from the memory model)",
                          field, c.batch_per_gpu, kMaxBatchPerGpu));
    }
    if (c.compute_time_s.has_value() == c.measured_samples_per_s.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": set exactly one of compute_time_s and measured_samples_per_s"));
    }
    if (c.compute_time_s) {
      if (auto s = RequirePositive(absl::StrCat(field, ".compute_time_s"), *c.compute_time_s);
          !s.ok()) {
        return s;
      }
    } else if (auto s = RequirePositive(absl::StrCat(field, ".measured_samples_per_s"),
                                        *c.measured_samples_per_s);
               !s.ok()) {
      return s;
    }
  }
  if (contention) {
    if (auto s = RequireFinite(absl::StrCat(where, "contention.a1"), contention->a1); !s.ok()) {
      return s;
    }
    if (auto s = RequireFinite(absl::StrCat(where, "contention.b1"), contention->b1); !s.ok()) {
      return s;
    }
  }
  if (shared_ps) {
    if (auto s = RequireNonNegative(absl::StrCat(where, "shared_ps.queueing"), shared_ps->queueing);
        !s.ok()) {
      return s;
    }
  }
  if (memory) {
    if (auto s = RequireFinite(absl::StrCat(where, "memory.a2"), memory->a2); !s.ok()) return s;
    if (auto s = RequireFinite(absl::StrCat(where, "memory.b2"), memory->b2); !s.ok()) return s;
  }
  if (loss) {
    const std::pair<const char*, double> gs[] = {
        {"g1", loss->g1}, {"g2", loss->g2}, {"g3", loss->g3}, {"g4", loss->g4}, {"g5", loss->g5}};
    for (auto [g, value] : gs) {
      if (auto s = RequireFinite(absl::StrCat(where, "loss.", g), value); !s.ok()) return s;
    }
  }
  for (size_t i = 0; i < allreduce.size(); ++i) {
    const std::string field = absl::StrCat(where, "allreduce[", i, "]");
    if (auto s = allreduce[i].Validate(field); !s.ok()) return s;
    for (size_t j = 0; j < i; ++j) {
      if (absl::EqualsIgnoreCase(allreduce[j].gpu_type, allreduce[i].gpu_type)) {
        return absl::InvalidArgumentError(absl::StrCat(
            field, ".gpu_type = \"", allreduce[i].gpu_type, "\": given more than once"));
      }
    }
  }
  if (global_batch_size < 0 || global_batch_size > kMaxGlobalBatch) {
    return absl::InvalidArgumentError(absl::StrCat(where, "global_batch_size = ", global_batch_size,
                                                   ": must be in [0, ", kMaxGlobalBatch,
                                                   "] (0: not declared)"));
  }
  if (local_batch_size < 0 || local_batch_size > kMaxBatchPerGpu) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "local_batch_size = ", local_batch_size, ": must be in [0, ",
                     kMaxBatchPerGpu, "] (samples per rank per step; 0: not declared)"));
  }
  for (const ConvergenceModel& c : convergence) {
    if (auto s = c.ValidateBatchLaw(absl::StrCat(where, "convergence[", c.metric, "].")); !s.ok()) {
      return s;
    }
  }
  if (restart_s && !(std::isfinite(*restart_s) && *restart_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "restart_s = ", *restart_s,
                                                   ": must be a finite number of seconds >= 0"));
  }
  if (checkpoint_every_s && !(std::isfinite(*checkpoint_every_s) && *checkpoint_every_s > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where,
                                                   "checkpoint_every_s = ", *checkpoint_every_s,
                                                   ": must be a finite number of seconds > 0"));
  }
  if (completeness == Completeness::kComplete && sync == SyncKind::kAllReduce &&
      allreduce.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        "sync = allreduce: the profile has no allreduce model; import a synchronous run's "
        "samples (spotdnn profile import) and fit it (spotdnn profile fit)"));
  }
  return absl::OkStatus();
}

absl::string_view SyncKindName(SyncKind kind) {
  return kind == SyncKind::kAllReduce ? "allreduce" : "ps";
}

absl::StatusOr<SyncKind> ParseSyncKind(absl::string_view name, absl::string_view field) {
  if (name == "allreduce") return SyncKind::kAllReduce;
  if (name == "ps") return SyncKind::kParameterServer;
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = \"", name, "\": expected allreduce or ps"));
}

const AllReduceModel* WorkloadProfile::AllReduceOf(absl::string_view gpu_type) const {
  // GPU type names are matched as a catalog and a user write them: "T4" and "t4" are one type.
  for (const AllReduceModel& m : allreduce) {
    if (absl::EqualsIgnoreCase(m.gpu_type, gpu_type)) return &m;
  }
  return nullptr;
}

absl::Status AllReduceModel::Validate(absl::string_view field) const {
  if (gpu_type.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ".gpu_type: empty"));
  const std::string at = absl::StrCat(field, "[", gpu_type, "]");
  const std::pair<const char*, double> values[] = {{"compute_fixed_s", compute_fixed_s},
                                                   {"compute_per_sample_s", compute_per_sample_s},
                                                   {"compute_contention", compute_contention},
                                                   {"intra_fixed_s", intra_fixed_s},
                                                   {"intra_ring_s", intra_ring_s},
                                                   {"cross_fixed_s", cross_fixed_s},
                                                   {"cross_straggler_s", cross_straggler_s},
                                                   {"cross_per_gpu_s", cross_per_gpu_s},
                                                   {"cross_pair_s", cross_pair_s}};
  for (const auto& [name, value] : values) {
    if (auto s = RequireNonNegative(absl::StrCat(at, ".", name), value); !s.ok()) return s;
  }
  if (!(overlap_gamma >= 1 && overlap_gamma <= 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ".overlap_gamma = ", overlap_gamma, ": must be in [1, 10]"));
  }
  if (compute_fixed_s + compute_per_sample_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        at, ".compute_fixed_s + compute_per_sample_s = 0: a step must take some compute time"));
  }
  if (max_gpus_per_instance < 0 || max_gpus_per_instance > kMaxGpusPerInstance) {
    return absl::InvalidArgumentError(
        absl::StrCat(at, ".max_gpus_per_instance = ", max_gpus_per_instance, ": must be in [0, ",
                     kMaxGpusPerInstance, "]"));
  }
  return absl::OkStatus();
}

int Cluster::Workers() const {
  int64_t n = 0;
  for (int c : counts) n += c;
  return static_cast<int>(std::min<int64_t>(n, std::numeric_limits<int>::max()));
}

absl::StatusOr<Cluster> MakeCluster(const InstanceCatalog& catalog,
                                    const std::vector<std::pair<std::string, int>>& counts,
                                    int parameter_servers) {
  Cluster cluster;
  cluster.counts.assign(catalog.types.size(), 0);
  if (parameter_servers < 1 || parameter_servers > kMaxParameterServers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster.parameter_servers = %d: must be in [1, %d]", parameter_servers,
                        kMaxParameterServers));
  }
  cluster.parameter_servers = parameter_servers;
  std::vector<bool> given(catalog.types.size(), false);
  for (size_t i = 0; i < counts.size(); ++i) {
    const auto& [type, count] = counts[i];
    const int index = catalog.IndexOf(type);
    if (index < 0) {
      std::string known;
      for (const InstanceType& t : catalog.types)
        absl::StrAppend(&known, known.empty() ? "" : ", ", t.name);
      return absl::InvalidArgumentError(
          absl::StrFormat("cluster.instances[%d].instance_type = \"%s\": not in catalog \"%s\" "
                          "(it has %s)",
                          i, type, catalog.name, known));
    }
    if (count < 0 || count > kMaxInstancesPerType) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cluster.instances[%d].count = %d (%s): must be in [0, %d]", i, count,
                          type, kMaxInstancesPerType));
    }
    if (given[index]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "cluster.instances[%d].instance_type = \"%s\": given more than once", i, type));
    }
    given[index] = true;
    cluster.counts[index] = count;
  }
  // Each count is bounded, so the sum fits; bound it too so |N| stays a sane model input.
  if (const int workers = cluster.Workers(); workers > kMaxClusterSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "cluster.instances: %d workers in all: must be at most %d", workers, kMaxClusterSize));
  }
  return cluster;
}

}  // namespace spotdnn::predictor
