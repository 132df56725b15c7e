// Why no plan meets an SLO: the fastest plan regardless of deadline and budget, the cheapest that
// reaches the target by the deadline, and a sentence saying which limit no cluster meets. The
// provisioner service answers an infeasible Plan or Frontier with it.
#ifndef SPOTDNN_PROVISIONER_INFEASIBILITY_H_
#define SPOTDNN_PROVISIONER_INFEASIBILITY_H_

#include <string>

#include "absl/status/statusor.h"
#include "provisioner/plan_model.h"
#include "provisioner/planner.h"

namespace spotdnn::provisioner {

// The fastest plan for `problem` regardless of its deadline and budget (what an infeasible SLO can
// get).
PlanResult SolveFastest(const PerformanceModel& model, const PlanProblem& problem);

// The cheapest plan for `problem` that reaches the target by the deadline (if any), whatever the
// budget: what an SLO whose budget is too small can get.
PlanResult SolveCheapest(const PerformanceModel& model, const PlanProblem& problem);

// Whether the budget is what no plan meets: there is one, and `cheapest` (SolveCheapest's), the
// cheapest plan that reaches the target by the deadline, costs more.
bool BudgetBinds(const PlanProblem& problem, const PlanResult& cheapest);

// The sentence that says why no cluster within the quotas meets `problem`'s SLO, quoting the
// fastest plan, or the cheapest when the budget binds.
std::string InfeasibleReason(const PlanProblem& problem, const PlanResult& fastest,
                             const PlanResult& cheapest);

// Why no plan meets an SLO, with the fastest and cheapest plans that show it.
struct Infeasibility {
  std::string reason;
  PlanResult fastest;
  PlanResult cheapest;
};

// Solves for the fastest and cheapest plans and says why `problem` is infeasible; problem.stop
// ending either search is its status.
absl::StatusOr<Infeasibility> ExplainInfeasible(const PerformanceModel& model,
                                                const PlanProblem& problem);
// The same for any plan model (a synchronous workload's, or the parameter-server one's above).
absl::StatusOr<Infeasibility> ExplainInfeasible(const PlanModel& model, const PlanProblem& problem);

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_INFEASIBILITY_H_
