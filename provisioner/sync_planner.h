// Plans for synchronous (all-reduce) workloads: the cheapest cluster, with its local batches, that
// trains a fixed global batch to the target by the deadline (or the fastest within the budget).
// The steps to the target do not depend on the cluster (the global batch is fixed), so a plan
// minimises price x step time; the step of each cluster is the split by speed of
// predictor::AllReduceCatalog::Step. Exact by branch and bound (SolveSyncExact; see its bounds),
// with every composition as the reference (SolveSyncExhaustive).
#ifndef SPOTDNN_PROVISIONER_SYNC_PLANNER_H_
#define SPOTDNN_PROVISIONER_SYNC_PLANNER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/allreduce.h"
#include "provisioner/planner.h"

namespace spotdnn::provisioner {

// A synchronous workload on a catalog at one global batch, ready to plan.
class SyncPlanner {
 public:
  // FAILED_PRECONDITION without an all-reduce model; INVALID_ARGUMENT for a global batch outside
  // [1, kMaxGlobalBatch] (naming global_batch).
  static absl::StatusOr<SyncPlanner> Create(const predictor::WorkloadProfile& profile,
                                            const predictor::InstanceCatalog& catalog,
                                            int global_batch);

  // The catalog's quotas (0 for types without a usable model), no instances running, no limits
  // but the deadline.
  PlanProblem DefaultProblem(const predictor::Target& target, double deadline_s = kInf) const;
  // OK when `problem` fits this catalog; INVALID_ARGUMENT naming the field otherwise, and
  // FAILED_PRECONDITION for a loss or metric target (not modelled for synchronous workloads).
  absl::Status Validate(const PlanProblem& problem) const;

  // Scores `counts`: false when the model gives no step for it (no instance, fewer samples than
  // ranks, a placement a model cannot span).
  bool Score(const PlanProblem& problem, absl::Span<const int> counts, Candidate& out) const;

  // The optimum under the model (branch and bound). The problem must pass Validate.
  PlanResult SolveExact(const PlanProblem& problem) const;
  // Every composition within [min_counts, max_counts] (and max_workers); FAILED_PRECONDITION when
  // there are more than `limit`.
  absl::StatusOr<PlanResult> SolveExhaustive(const PlanProblem& problem,
                                             uint64_t limit = kDefaultExhaustiveLimit) const;

  const predictor::AllReduceCatalog& types() const { return types_; }
  const predictor::InstanceCatalog& catalog() const { return catalog_; }
  int global_batch() const { return global_batch_; }

 private:
  // Global steps to the target: iterations, or samples over the global batch.
  double Steps(const PlanProblem& problem) const;

  predictor::AllReduceCatalog types_;
  predictor::InstanceCatalog catalog_;
  int global_batch_ = 0;
};

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_SYNC_PLANNER_H_
