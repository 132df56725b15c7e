#include "provisioner/plan_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace spotdnn::provisioner {

absl::Status ParameterServerPlanModel::Validate(const PlanProblem& problem) const {
  return ValidateProblem(model_, problem);
}

bool ParameterServerPlanModel::Score(const PlanProblem& problem, absl::Span<const int> counts,
                                     Candidate& out) const {
  return provisioner::Score(model_, problem, counts, out);
}

absl::Status ParameterServerPlanModel::ScoreError(const PlanProblem& problem, absl::Span<const int>,
                                                  const Candidate& failed) const {
  return model_.ErrorStatus(failed.estimate, problem.target());
}

double ParameterServerPlanModel::Speed(const PlanProblem& problem,
                                       absl::Span<const int> counts) const {
  const Estimate e =
      model_.Evaluate(counts, std::numeric_limits<double>::max(), problem.parameter_servers);
  if (e.error == predictor::EstimateError::kEmptyCluster ||
      e.error == predictor::EstimateError::kTooManyWorkers ||
      e.error == predictor::EstimateError::kUnusableType) {
    return 0;
  }
  return 1 / e.expected_iteration_time_s;
}

double ParameterServerPlanModel::FixedPricePerHour(const PlanProblem& problem) const {
  const predictor::ParameterServer& ps = model_.catalog().parameter_server;
  return problem.parameter_servers *
         (problem.on_demand ? ps.on_demand_price_per_hour : ps.spot_price_per_hour);
}

PlanResult ParameterServerPlanModel::SolveExact(const PlanProblem& problem) const {
  return provisioner::SolveExact(model_, problem);
}

absl::StatusOr<std::vector<Candidate>> ParameterServerPlanModel::Frontier(
    const PlanProblem& problem, Strategy strategy, uint64_t exhaustive_limit,
    uint64_t* evaluated) const {
  return provisioner::Frontier(model_, problem, strategy, exhaustive_limit, evaluated);
}

absl::StatusOr<ReplanResult> ParameterServerPlanModel::Replan(const PlanProblem& problem,
                                                              const JobProgress& progress,
                                                              Strategy strategy,
                                                              uint64_t exhaustive_limit,
                                                              bool find_fastest) const {
  return provisioner::Replan(model_, problem, progress, strategy, exhaustive_limit, find_fastest);
}

absl::Status SyncPlanModel::Validate(const PlanProblem& problem) const {
  return planner_.Validate(problem);
}

bool SyncPlanModel::Score(const PlanProblem& problem, absl::Span<const int> counts,
                          Candidate& out) const {
  return planner_.Score(problem, counts, out);
}

absl::Status SyncPlanModel::ScoreError(const PlanProblem& problem, absl::Span<const int> counts,
                                       const Candidate&) const {
  auto step = planner_.types().Step(counts, planner_.global_batch());
  if (!step.ok()) return step.status();
  return absl::InvalidArgumentError(absl::StrCat("the all-reduce model gives no finite time for ",
                                                 problem.target().Describe(), " on this cluster"));
}

double SyncPlanModel::Speed(const PlanProblem&, absl::Span<const int> counts) const {
  auto step = planner_.types().Step(counts, planner_.global_batch());
  if (!step.ok() || !(step->step_s > 0)) return 0;
  return 1 / step->step_s;
}

PlanResult SyncPlanModel::SolveExact(const PlanProblem& problem) const {
  return planner_.SolveExact(problem);
}

absl::StatusOr<std::vector<Candidate>> SyncPlanModel::Frontier(const PlanProblem& problem,
                                                               Strategy strategy,
                                                               uint64_t exhaustive_limit,
                                                               uint64_t* evaluated) const {
  if (auto s = planner_.Validate(problem); !s.ok()) return s;
  switch (strategy) {
    case Strategy::kExact: {
      absl::Status stopped;
      std::vector<Candidate> front = SyncFrontierExact(planner_, problem, evaluated, &stopped);
      if (!stopped.ok()) return stopped;
      return front;
    }
    case Strategy::kExhaustive:
      return ExhaustiveFrontier(
          problem,
          [&](absl::Span<const int> counts, Candidate& out) {
            return planner_.Score(problem, counts, out);
          },
          exhaustive_limit, evaluated);
    case Strategy::kSpotdnn:
      break;
  }
  return absl::InvalidArgumentError(
      "strategy = spotdnn: the heuristic finds one plan, not a frontier; use exact");
}

absl::StatusOr<ReplanResult> SyncPlanModel::Replan(const PlanProblem& problem,
                                                   const JobProgress& progress, Strategy strategy,
                                                   uint64_t exhaustive_limit,
                                                   bool find_fastest) const {
  return SyncReplan(planner_, problem, progress, strategy, exhaustive_limit, find_fastest);
}

absl::StatusOr<PlanResult> SolveSync(const SyncPlanner& planner, const PlanProblem& problem,
                                     Strategy strategy, uint64_t exhaustive_limit) {
  PlanResult result;
  switch (strategy) {
    case Strategy::kExact:
      result = planner.SolveExact(problem);
      break;
    case Strategy::kExhaustive: {
      auto all = planner.SolveExhaustive(problem, exhaustive_limit);
      if (!all.ok()) return all.status();
      result = *std::move(all);
      break;
    }
    case Strategy::kSpotdnn:
      return absl::InvalidArgumentError(
          "strategy = spotdnn: a synchronous (all-reduce) workload is planned with exact or "
          "exhaustive");
  }
  if (!result.stopped.ok()) return result.stopped;
  return result;
}

std::vector<Candidate> SyncFrontierExact(const SyncPlanner& planner, const PlanProblem& problem,
                                         uint64_t* evaluated, absl::Status* stopped) {
  std::vector<Candidate> front;
  PlanProblem p = problem;
  p.objective = Objective::kMinCost;
  uint64_t scored = 0;
  while (true) {
    const PlanResult r = planner.SolveExact(p);
    scored += r.evaluated;
    if (!r.stopped.ok()) {
      *stopped = r.stopped;
      break;
    }
    if (!r.feasible) break;
    // The cheapest by this deadline, the fastest of equally cheap ones (Better): on the frontier.
    front.push_back(r.best);
    // The next point is the cheapest plan strictly faster than this one.
    if (!(r.best.time_s > 0)) break;
    p.deadline_s = std::nextafter(r.best.time_s, 0.0);
  }
  if (evaluated != nullptr) *evaluated = scored;
  std::reverse(front.begin(), front.end());
  return front;
}

absl::StatusOr<ReplanResult> SyncReplan(const SyncPlanner& planner, PlanProblem problem,
                                        const JobProgress& progress, Strategy strategy,
                                        uint64_t exhaustive_limit, bool find_fastest) {
  if (!(std::isfinite(progress.elapsed_s) && progress.elapsed_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "progress.elapsed_s = %g: must be a finite number >= 0", progress.elapsed_s));
  }
  if (std::isfinite(progress.current_loss)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "progress.current_loss = %g: a synchronous job is re-planned by the steps it has done "
        "(normalized_iterations_done)",
        progress.current_loss));
  }
  if (auto s = planner.Validate(problem); !s.ok()) return s;
  ReplanResult out;
  // A synchronous step trains the global batch, whatever the cluster.
  const double done = problem.target_kind == predictor::Target::Kind::kSamples
                          ? progress.iterations_done * planner.global_batch()
                          : progress.iterations_done;
  auto left = LeftOfTarget(problem, progress.iterations_done, done);
  if (!left.ok()) return left.status();
  out.remaining_amount = *left;
  problem.target_amount = out.remaining_amount;
  out.remaining_s = problem.deadline_s - progress.elapsed_s;
  problem.deadline_s = out.remaining_s > 0 ? out.remaining_s : 1e-9;
  auto solve = [&](const PlanProblem& p) {
    return SolveSync(planner, p, strategy, exhaustive_limit);
  };
  auto solve_exact = [&](const PlanProblem& p) { return planner.SolveExact(p); };
  if (auto s = SolveTheRest(problem, progress, find_fastest, solve, solve_exact, out); !s.ok()) {
    return s;
  }
  return out;
}

}  // namespace spotdnn::provisioner
