// The synchronous all-reduce step-time model (PyTorch DDP and the like): every rank computes on
// its local batch, the gradients are all-reduced inside each instance over its GPU links and across
// instances over the network, compute and all-reduce overlap in part, and the step ends with the
// slowest rank. The form and its parameters are AllReduceModel's (predictor/types.h).
#ifndef SPOTDNN_PREDICTOR_ALLREDUCE_H_
#define SPOTDNN_PREDICTOR_ALLREDUCE_H_

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

// A prediction for a synchronous workload: `cluster` (instances per catalog type) training with
// `local_batch` samples on every GPU to `target` (iterations, or samples: steps of the global
// batch). Instance types share their GPU type's all-reduce model whatever their GPU count; a type
// whose GPU type has none is FAILED_PRECONDITION naming both; loss and metric targets are
// FAILED_PRECONDITION (not modelled for synchronous workloads yet). Each instance's ranks compute
// with its GPUs busy; the all-reduce is the slowest of the GPU types' models on the placement.
absl::StatusOr<Prediction> PredictAllReduce(const WorkloadProfile& profile,
                                            const InstanceCatalog& catalog, const Cluster& cluster,
                                            const Target& target, int local_batch);

}  // namespace spotdnn::predictor

#endif  // SPOTDNN_PREDICTOR_ALLREDUCE_H_
