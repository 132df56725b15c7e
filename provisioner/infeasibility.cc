#include "provisioner/infeasibility.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace spotdnn::provisioner {

namespace {

// The problem of the fastest plan whatever the deadline and budget.
PlanProblem FastestProblem(const PlanProblem& problem) {
  PlanProblem p = problem;
  p.deadline_s = kInf;
  p.budget_usd = kInf;
  p.objective = Objective::kMinTime;
  return p;
}

// The problem of the cheapest plan by the deadline, whatever the budget.
PlanProblem CheapestProblem(const PlanProblem& problem) {
  PlanProblem p = problem;
  p.budget_usd = kInf;
  p.objective = Objective::kMinCost;
  return p;
}

// ExplainInfeasible with `solve` as the exact search.
template <typename Solve>
absl::StatusOr<Infeasibility> Explain(const PlanProblem& problem, Solve solve) {
  Infeasibility why{.fastest = solve(FastestProblem(problem))};
  if (!why.fastest.stopped.ok()) return why.fastest.stopped;
  why.cheapest = solve(CheapestProblem(problem));
  if (!why.cheapest.stopped.ok()) return why.cheapest.stopped;
  why.reason = InfeasibleReason(problem, why.fastest, why.cheapest);
  return why;
}

}  // namespace

PlanResult SolveFastest(const PerformanceModel& model, const PlanProblem& problem) {
  return SolveExact(model, FastestProblem(problem));
}

PlanResult SolveCheapest(const PerformanceModel& model, const PlanProblem& problem) {
  return SolveExact(model, CheapestProblem(problem));
}

bool BudgetBinds(const PlanProblem& problem, const PlanResult& cheapest) {
  return std::isfinite(problem.budget_usd) && cheapest.feasible &&
         cheapest.best.cost_usd > problem.budget_usd;
}

std::string InfeasibleReason(const PlanProblem& problem, const PlanResult& fastest,
                             const PlanResult& cheapest) {
  const bool loss = problem.target_kind == predictor::Target::Kind::kLoss;
  if (!fastest.feasible) {
    return loss ? "no cluster within the quotas reaches the target loss under the model"
                : absl::StrCat("no cluster within the quotas can train ",
                               problem.target().Describe(), " under the model");
  }
  if (BudgetBinds(problem, cheapest)) {
    return absl::StrFormat(
        "no cluster within the quotas meets the SLO: the cheapest that reaches %s%s costs $%.4f "
        "and takes %.1f s (budget $%.4f)",
        loss ? absl::StrFormat("loss %g", problem.target_loss) : problem.target().Describe(),
        std::isfinite(problem.deadline_s)
            ? absl::StrFormat(" by the deadline (%.1f s)", problem.deadline_s)
            : "",
        cheapest.best.cost_usd, cheapest.best.time_s, problem.budget_usd);
  }
  return absl::StrFormat(
      "no cluster within the quotas meets the SLO: the fastest reaches %s in %.1f s "
      "(deadline %s) for $%.4f (budget %s)",
      loss ? absl::StrFormat("loss %g", problem.target_loss) : problem.target().Describe(),
      fastest.best.time_s,
      std::isfinite(problem.deadline_s) ? absl::StrFormat("%.1f s", problem.deadline_s)
                                        : std::string("none"),
      fastest.best.cost_usd,
      std::isfinite(problem.budget_usd) ? absl::StrFormat("$%.4f", problem.budget_usd)
                                        : std::string("none"));
}

absl::StatusOr<Infeasibility> ExplainInfeasible(const PerformanceModel& model,
                                                const PlanProblem& problem) {
  auto explained = Explain(problem, [&](const PlanProblem& p) { return SolveExact(model, p); });
  if (!explained.ok()) return explained.status();
  Infeasibility& why = *explained;
  // No cluster reaches a target beyond what the profile's runs ever reached: say so.
  const predictor::Target target = problem.target();
  if (!why.fastest.feasible && target.is_metric()) {
    const predictor::ConvergenceModel* m = model.ConvergenceOf(target.MetricName());
    if (m != nullptr && m->best_value && m->IsExtrapolation(target.value)) {
      absl::StrAppend(&why.reason, absl::StrFormat(" (the profile's runs reached %.4g at best)",
                                                   *m->best_value));
    }
  }
  return why;
}

absl::StatusOr<Infeasibility> ExplainInfeasible(const PlanModel& model,
                                                const PlanProblem& problem) {
  if (const PerformanceModel* ps = model.parameter_server_model(); ps != nullptr) {
    return ExplainInfeasible(*ps, problem);
  }
  return Explain(problem, [&](const PlanProblem& p) { return model.SolveExact(p); });
}

}  // namespace spotdnn::provisioner
