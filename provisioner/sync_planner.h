// Plans for synchronous (all-reduce) workloads: the cheapest cluster, with its local batches, that
// trains to the target by the deadline (or the fastest within the budget). At a fixed global
// batch the steps to the target do not depend on the cluster, so a plan minimises price x step
// time, the step of each cluster the split by speed of predictor::AllReduceCatalog::Step. With a
// global batch that scales (every rank at one local batch) the steps fall as the ranks add to the
// global batch (predictor::SyncSteps). Exact by branch and bound (SolveExact; see its bounds),
// with every composition as the reference (SolveExhaustive).
#ifndef SPOTDNN_PROVISIONER_SYNC_PLANNER_H_
#define SPOTDNN_PROVISIONER_SYNC_PLANNER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/allreduce.h"
#include "provisioner/planner.h"

namespace spotdnn::provisioner {

// A synchronous workload on a catalog, ready to plan: at one fixed global batch (split over the
// ranks by speed), or with every rank at one local batch (the global batch follows the ranks).
class SyncPlanner {
 public:
  // A fixed global batch. FAILED_PRECONDITION without an all-reduce model; INVALID_ARGUMENT for a
  // global batch outside [1, kMaxGlobalBatch] (naming global_batch).
  static absl::StatusOr<SyncPlanner> Create(const predictor::WorkloadProfile& profile,
                                            const predictor::InstanceCatalog& catalog,
                                            int global_batch);
  // A global batch that scales: every rank trains `local_batch` samples per step, so a cluster
  // of R ranks trains R x local_batch. Types whose GPUs' memory cap is below the local batch are
  // unusable. INVALID_ARGUMENT for a local batch outside [1, kMaxBatchPerGpu] (naming
  // local_batch).
  static absl::StatusOr<SyncPlanner> CreateScaling(const predictor::WorkloadProfile& profile,
                                                   const predictor::InstanceCatalog& catalog,
                                                   int local_batch);

  // The catalog's quotas (0 for unusable types), no instances running, no limits but the
  // deadline.
  PlanProblem DefaultProblem(const predictor::Target& target, double deadline_s = kInf) const;
  // OK when `problem` fits this catalog; INVALID_ARGUMENT naming the field otherwise. A loss or
  // metric target needs the profile's convergence model of it (predictor::SyncStepsFor's
  // FAILED_PRECONDITION otherwise), one that can predict the plan's global batches: at a fixed
  // global batch other than the one its curve describes, or with a global batch that scales, it
  // needs its critical batch (FAILED_PRECONDITION).
  absl::Status Validate(const PlanProblem& problem) const;

  // Scores `counts`: false when the model gives no step for it (no instance, fewer samples than
  // ranks, a placement a model cannot span) or no steps for the target.
  bool Score(const PlanProblem& problem, absl::Span<const int> counts, Candidate& out) const;

  // The optimum under the model (branch and bound). The problem must pass Validate.
  PlanResult SolveExact(const PlanProblem& problem) const;
  // Every composition within [min_counts, max_counts] (and max_workers); FAILED_PRECONDITION when
  // there are more than `limit`.
  absl::StatusOr<PlanResult> SolveExhaustive(const PlanProblem& problem,
                                             uint64_t limit = kDefaultExhaustiveLimit) const;

  // Whether catalog type k can be planned with, and why not.
  bool Usable(size_t k) const;
  std::string UnusableReason(size_t k) const;

  const predictor::AllReduceCatalog& types() const { return types_; }
  const predictor::InstanceCatalog& catalog() const { return catalog_; }
  const predictor::WorkloadProfile& profile() const { return profile_; }
  bool scaling() const { return scaling_; }
  int global_batch() const { return global_batch_; }  // fixed: the global batch; scaling: 0
  int local_batch() const { return local_batch_; }    // scaling: every rank's; fixed: 0

 private:
  // The target's steps against the global batch (predictor::SyncStepsFor), computed once per
  // target and kept (a convergence target's steps come from a Monte Carlo).
  absl::StatusOr<predictor::SyncSteps> StepsOf(const PlanProblem& problem) const;
  bool ScoreWith(const PlanProblem& problem, const predictor::SyncSteps& steps,
                 absl::Span<const int> counts, Candidate& out) const;

  predictor::AllReduceCatalog types_;
  predictor::InstanceCatalog catalog_;
  predictor::WorkloadProfile profile_;
  bool scaling_ = false;
  int global_batch_ = 0;
  int local_batch_ = 0;
  struct StepsCache;
  std::shared_ptr<StepsCache> cache_;
};

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_SYNC_PLANNER_H_
