// The synchronous all-reduce step-time model (PyTorch DDP and the like): every rank computes on
// its local batch, the gradients are all-reduced inside each instance over its GPU links and across
// instances over the network, compute and all-reduce overlap in part, and the step ends with the
// slowest rank. The form and its parameters are AllReduceModel's (predictor/types.h).
#ifndef SPOTDNN_PREDICTOR_ALLREDUCE_H_
#define SPOTDNN_PREDICTOR_ALLREDUCE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/performance_model.h"
#include "predictor/types.h"

namespace spotdnn::predictor {

// What the all-reduce of one placement depends on: the model's terms before their coefficients.
struct AllReduceShape {
  int instances = 0;     // N
  int ranks = 0;         // R, the GPUs of all instances
  int max_gpus = 0;      // k_max, the GPUs of the busiest instance
  double intra_on = 0;   // 1 when k_max > 1 (a_r applies)
  double ring = 0;       // 2 (k_max - 1) / k_max, the ring's share inside the busiest instance
  double cross_on = 0;   // 1 when N > 1 (a_n applies)
  double straggler = 0;  // sqrt(2 ln N): the expected maximum of N instances' delays grows so
  double per_gpu = 0;    // k_max - 1 when N > 1: GPUs sharing one instance's network link
  double pair = 0;       // 1 when N == 2 (e_2 applies)
};

// The shape of a placement: GPUs on each instance, each in [1, kMaxGpusPerInstance], at most
// kMaxClusterSize ranks. INVALID_ARGUMENT naming the entry otherwise.
absl::StatusOr<AllReduceShape> ShapeOf(absl::Span<const int> gpus_per_instance);
// The shape of `instances` instances holding `ranks` GPUs, `max_gpus` on the busiest (all >= 1,
// unchecked).
AllReduceShape ShapeFrom(int instances, int ranks, int max_gpus);

// Compute time of one rank on `local_batch` samples with `gpus_busy` GPUs of its instance busy.
double AllReduceCompute(const AllReduceModel& m, double local_batch, int gpus_busy);
// The all-reduce time of a placement (0 for one rank). FAILED_PRECONDITION naming the parameters
// when it spans instances and the model's cross-instance terms were not fitted.
absl::StatusOr<double> AllReduceTime(const AllReduceModel& m, const AllReduceShape& shape);
// (compute^gamma + allreduce^gamma)^(1/gamma), computed without overflow; compute when
// allreduce is 0.
double OverlapSteps(double compute_s, double allreduce_s, double gamma);

// One step of a synchronous cluster.
struct AllReduceStep {
  double compute_s = 0;    // the slowest rank's compute
  double allreduce_s = 0;  // the all-reduce
  double step_s = 0;       // the step, overlap included
};

// One step on `gpus_per_instance` with `local_batches` samples per rank: one value (every rank)
// or one per instance (its ranks). Each local batch must be at least 1.
absl::StatusOr<AllReduceStep> AllReduceStepTime(const AllReduceModel& m,
                                                absl::Span<const int> gpus_per_instance,
                                                absl::Span<const double> local_batches);

// The most samples one GPU of `gpu_memory_gib` GiB takes per step: floor(a2 mem + b2), the
// profile's memory model (eq. 10) before the paper's rounding down to a power of two (an uneven
// split's local batches are any integers), at most kMaxBatchPerGpu; kMaxBatchPerGpu without a
// memory model; 0 when the model leaves the GPU no sample.
int LocalBatchCap(const WorkloadProfile& profile, double gpu_memory_gib);

// The ranks of one instance type in a split of the global batch: `ranks` ranks, each computing
// for fixed_s + per_sample_s b on b samples (AllReduceCompute, linear in b), b in [1, cap].
struct RankGroup {
  int64_t ranks = 0;
  double fixed_s = 0;       // a_c (1 + d (k - 1))
  double per_sample_s = 0;  // b_c (1 + d (k - 1))
  int cap = kMaxBatchPerGpu;
};

// Local batches of each group: its ranks get low[i] samples, high[i] of them one more.
struct BatchSplit {
  std::vector<int> low;
  std::vector<int64_t> high;
  double compute_s = 0;  // the slowest rank's compute on its batch

  // The mean local batch of group i's `ranks` ranks.
  double Mean(size_t i, int64_t ranks) const {
    return low[i] + static_cast<double>(high[i]) / static_cast<double>(ranks);
  }
};

// The integer local batches summing to `global_batch` that minimise the slowest rank's compute,
// each in [1, cap]: the continuous water-fill (every rank's compute ends at one time T, ranks
// clamped at 1 or their cap), its batches rounded down, then the samples left handed out one at a
// time to the rank whose compute on one more sample is least. INVALID_ARGUMENT when the global
// batch is below the ranks or above the caps' sum; groups with 0 ranks are skipped.
absl::StatusOr<BatchSplit> SplitGlobalBatch(absl::Span<const RankGroup> groups,
                                            int64_t global_batch);

// A lower bound on the compute of any step of `global_batch` samples on these ranks or on some of
// them, split or accumulated in any way: the least T with
// sum_i ranks_i min(max((T - fixed_s_i) / per_sample_s_i, 0), cap_i) >= global_batch (caps
// ignored when `capped` is false, which bounds accumulated steps too). Infinity when the capped
// ranks cannot hold the batch.
double ComputeLowerBound(absl::Span<const RankGroup> groups, int64_t global_batch, bool capped);

// A synchronous step at a global batch, split by speed (SplitGlobalBatch). When the batch does not
// fit the cluster's memory caps, k micro-steps of floor(B / k) or that plus one samples (the
// larger first), k the least that fits; the all-reduce overlaps only the last micro-step's compute.
struct AllReduceSplitStep {
  int accumulation_steps = 1;  // k
  BatchSplit split;            // of the largest micro-step
  double compute_s = 0;        // every micro-step's slowest rank, summed
  double allreduce_s = 0;      // the slowest GPU type's all-reduce on the placement
  double step_s = 0;
};

// The synchronous model of a profile on a catalog, compiled for many clusters (the planner's
// search): per type its GPU type's model, rank group terms and memory cap.
class AllReduceCatalog {
 public:
  // FAILED_PRECONDITION when the profile has no all-reduce model. Types whose GPU type has none,
  // or whose memory cap is 0, are unusable (Usable, UnusableReason).
  static absl::StatusOr<AllReduceCatalog> Create(const WorkloadProfile& profile,
                                                 const InstanceCatalog& catalog);

  size_t size() const { return types_.size(); }
  bool Usable(size_t i) const { return types_[i].reason.empty(); }
  const std::string& UnusableReason(size_t i) const { return types_[i].reason; }
  const RankGroup& Group(size_t i) const { return types_[i].group; }
  int Gpus(size_t i) const { return types_[i].gpus; }
  const AllReduceModel& Model(size_t i) const { return types_[i].model; }

  // The all-reduce of a placement with `instances` instances, the busiest holding `max_gpus`,
  // under model i's terms (AllReduceTime).
  absl::StatusOr<double> AllReduceOf(size_t i, int instances, int max_gpus) const;

  // One step of `counts` instances per type (usable types only, at most kMaxClusterSize ranks)
  // at `global_batch` samples. INVALID_ARGUMENT for a global batch below the ranks or a batch
  // that no accumulation splits (micro-steps of fewer samples than ranks); the all-reduce's
  // FAILED_PRECONDITION for a cluster of several instances a model cannot span.
  absl::StatusOr<AllReduceSplitStep> Step(absl::Span<const int> counts, int64_t global_batch) const;
  // One step of `counts` with every rank at `local_batch` samples (a global batch that scales
  // with the ranks: no split, no accumulation). INVALID_ARGUMENT when a type's memory cap is
  // below the local batch (naming both), otherwise as Step.
  absl::StatusOr<AllReduceSplitStep> StepEven(absl::Span<const int> counts, int local_batch) const;

 private:
  struct Type {
    AllReduceModel model;
    RankGroup group;  // ranks unset
    int gpus = 0;
    std::string name;
    std::string reason;  // why unusable; empty when usable
  };
  std::vector<Type> types_;
};

// The steps of a synchronous workload to a target as a function of its global batch B:
// steps(B) = fixed + per_batch / B, for the 10th, 50th and 90th percentile over runs. Both parts
// are >= 0, so the steps never rise with B (the planner's bounds rest on that).
struct SyncSteps {
  double fixed[3] = {0, 0, 0};      // p10, p50, p90
  double per_batch[3] = {0, 0, 0};  // samples: the target itself
  bool has_spread = false;          // a convergence model's runs gave p10 < p90
  bool from_convergence = false;    // a loss or metric target
  // The convergence model's: the best value its runs reached (extrapolated: the target lies
  // beyond it), the global batch its curve describes (0: not known) and its critical batch.
  std::optional<double> data_best;
  bool extrapolated = false;
  double reference_global_batch = 0;
  std::optional<double> critical_batch;
  double reference_p50 = 0;  // p50 steps at reference_global_batch

  // Steps at global batch `batch` (> 0), percentile q (0: p10, 1: p50, 2: p90).
  double At(double batch, int q = 1) const { return fixed[q] + per_batch[q] / batch; }
  // FAILED_PRECONDITION when the convergence model describes one known global batch, has no
  // critical batch, and `batch` is another: its steps there are not known.
  absl::Status CheckBatch(double batch) const;
};

// The steps of `target`: iterations as given (fixed); samples over the global batch (per_batch);
// a loss or another metric through the profile's convergence model of that metric and direction,
// at one worker (a synchronous step at global batch B is one step at B): the p10/p50/p90 S_q of
// StepsToTarget, and with a critical batch c and reference B_ref, the critical-batch law
// S_q (1 + c / B) / (1 + c / B_ref), i.e. fixed_q = S_q / (1 + c / B_ref) and per_batch_q =
// fixed_q c. Eq. 3 (g1..g5) is the parameter-server loss model and is not used.
// FAILED_PRECONDITION naming the metric without such a model, or when most runs never reach the
// target; INVALID_ARGUMENT for a bad target.
absl::StatusOr<SyncSteps> SyncStepsFor(const WorkloadProfile& profile, const Target& target);

// A prediction for a synchronous workload: `cluster` (instances per catalog type) training to
// `target` (iterations, or samples: steps of the global batch) with either `local_batch` samples
// on every GPU (the even split), or a global batch split by speed: `global_batch`, else the
// profile's global_batch_size (AllReduceCatalog::Step; gradient accumulation where it does not
// fit). With the profile's global_batch kScale the global batch follows the cluster: every rank
// trains `local_batch`, else the profile's local_batch_size (a global_batch is then
// INVALID_ARGUMENT), within each type's memory cap. Instance types share their GPU type's
// all-reduce model whatever their GPU count; a type whose GPU type has none is
// FAILED_PRECONDITION naming both. Loss and metric targets take SyncStepsFor's steps at the
// prediction's global batch. Each instance's ranks compute with its GPUs busy; the all-reduce is
// the slowest of the GPU types' models on the placement.
absl::StatusOr<Prediction> PredictAllReduce(const WorkloadProfile& profile,
                                            const InstanceCatalog& catalog, const Cluster& cluster,
                                            const Target& target, int local_batch,
                                            int global_batch = 0);

}  // namespace spotdnn::predictor

#endif  // SPOTDNN_PREDICTOR_ALLREDUCE_H_
