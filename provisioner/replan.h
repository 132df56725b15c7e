// Re-planning after a revocation (the paper's remaining-SLO re-planning): the takeover instances
// that let the rest of a job still reach its target loss by its deadline at the least cost.
#ifndef SPOTDNN_PROVISIONER_REPLAN_H_
#define SPOTDNN_PROVISIONER_REPLAN_H_

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "provisioner/planner.h"

namespace spotdnn::provisioner {

// Where a job stands when an instance is revoked.
struct JobProgress {
  double elapsed_s = 0;             // since the job started (its deadline counts from there)
  double current_loss = kInf;       // the loss reached, when known (loss targets)
  double iterations_done = 0;       // otherwise: normalized iterations done ...
  std::vector<int> cluster_before;  // ... on this cluster (catalog-indexed); an iterations
                                    // target needs only iterations_done, a samples target also
                                    // cluster_before (its WA batch turns iterations into samples)
};

struct ReplanResult {
  bool feasible = false;
  Candidate plan;               // the whole cluster from now on (survivors + takeover)
  std::vector<int> to_launch;   // the takeover instances
  double current_loss = 0;      // the loss the rest of the job starts from (loss targets)
  double remaining_amount = 0;  // iterations or samples targets: what is left of them
  double remaining_s = 0;       // deadline - elapsed
  double best_finish_s = kInf;  // when infeasible: earliest finish since the job started
  Candidate fastest;            // and the plan that achieves it
  uint64_t evaluated = 0;
};

// The loss after `iterations` normalized iterations on `counts` (eq. 3).
absl::StatusOr<double> LossAfterIterations(const PerformanceModel& model,
                                           const std::vector<int>& counts, double iterations,
                                           int parameter_servers = 1);

// `problem` carries the job's SLO (deadline from the job's start), quotas, prices and overhead;
// its min_counts must be the surviving instances. INVALID_ARGUMENT for inconsistent progress.
// Without `find_fastest`, an infeasible answer leaves best_finish_s and fastest unset (the
// simulator needs only the decision).
absl::StatusOr<ReplanResult> Replan(const PerformanceModel& model, PlanProblem problem,
                                    const JobProgress& progress,
                                    Strategy strategy = Strategy::kExact,
                                    uint64_t exhaustive_limit = kDefaultExhaustiveLimit,
                                    bool find_fastest = true);

// What is left of an iterations or samples target once `done` of it (in the target's unit) is
// trained; INVALID_ARGUMENT for progress.normalized_iterations_done that is not a finite number
// >= 0 (`iterations_done`) or when nothing is left.
absl::StatusOr<double> LeftOfTarget(const PlanProblem& problem, double iterations_done,
                                    double done);

// The part of a re-plan every model shares, once `problem` holds the rest of the job (its target,
// survivors and the deadline left, out.remaining_s): the plan `solve` finds when time is left,
// else with `find_fastest` the fastest finish (`solve_exact` on the problem without deadline and
// budget), and the takeover instances of a plan.
absl::Status SolveTheRest(
    const PlanProblem& problem, const JobProgress& progress, bool find_fastest,
    const std::function<absl::StatusOr<PlanResult>(const PlanProblem&)>& solve,
    const std::function<PlanResult(const PlanProblem&)>& solve_exact, ReplanResult& out);

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_REPLAN_H_
