#include "provisioner/replan.h"

#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "predictor/equations.h"

namespace spotdnn::provisioner {

absl::StatusOr<double> LossAfterIterations(const PerformanceModel& model,
                                           const std::vector<int>& counts, double iterations,
                                           int parameter_servers) {
  if (!(std::isfinite(iterations) && iterations >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "normalized_iterations_done = %g: must be a finite number >= 0", iterations));
  }
  // The loss curve's slope does not depend on the target; any target above g5 evaluates the shape.
  const predictor::LossModel& loss = *model.profile().loss;
  const Estimate e = model.Evaluate(counts, std::numeric_limits<double>::max(), parameter_servers);
  if (e.error == predictor::EstimateError::kEmptyCluster ||
      e.error == predictor::EstimateError::kTooManyWorkers ||
      e.error == predictor::EstimateError::kUnusableType) {
    return absl::InvalidArgumentError(
        absl::StrCat("progress.cluster_before: ", model.ErrorStatus(e, 0).message()));
  }
  return predictor::LossAfter(loss, e.wa_batch,
                              model.coefficients().convergence_weight * e.convergence_coefficient,
                              e.workers, iterations);
}

absl::StatusOr<ReplanResult> Replan(const PerformanceModel& model, PlanProblem problem,
                                    const JobProgress& progress, Strategy strategy,
                                    uint64_t exhaustive_limit, bool find_fastest) {
  if (!(std::isfinite(progress.elapsed_s) && progress.elapsed_s >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "progress.elapsed_s = %g: must be a finite number >= 0", progress.elapsed_s));
  }
  ReplanResult out;
  if (problem.target_kind == predictor::Target::Kind::kMetric) {
    // A metric target re-plans as the global steps left of it: the steps the convergence model
    // gives the cluster trained on (its p50) less those done. (The model has no resume from a
    // step through Evaluate; a larger cluster needs somewhat more steps, which this leaves out.)
    if (std::isfinite(progress.current_loss)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "progress.current_loss = %g: the target is %s, so give normalized_iterations_done "
          "with cluster_before",
          progress.current_loss, problem.target().Describe()));
    }
    if (progress.cluster_before.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("progress.cluster_before is required for a metric target (",
                       problem.target().Describe(), "): the steps it needs depend on the cluster"));
    }
    const Estimate e =
        model.Evaluate(progress.cluster_before, problem.target(), problem.parameter_servers);
    if (!e.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "progress.cluster_before: ", model.ErrorStatus(e, problem.target()).message()));
    }
    problem.target_kind = predictor::Target::Kind::kIterations;
    problem.target_amount = std::ceil(e.normalized_iterations);
  }
  if (problem.target_kind != predictor::Target::Kind::kLoss) {
    if (std::isfinite(progress.current_loss)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "progress.current_loss = %g: the target is %s, so give normalized_iterations_done",
          progress.current_loss, problem.target().Describe()));
    }
    double done = progress.iterations_done;
    if (problem.target_kind == predictor::Target::Kind::kSamples && done > 0) {
      if (progress.cluster_before.empty()) {
        return absl::InvalidArgumentError(
            "progress.cluster_before is required for an epochs target: its WA batch says how many "
            "samples the iterations done trained");
      }
      const Estimate e = model.Evaluate(progress.cluster_before, predictor::Target::Iterations(1),
                                        problem.parameter_servers);
      if (!e.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("progress.cluster_before: ", model.ErrorStatus(e, 0).message()));
      }
      if (!(e.wa_batch > 0)) {
        return absl::FailedPreconditionError(
            "progress.cluster_before: the workload gives no batch size for its types, so the "
            "samples trained are unknown");
      }
      done *= e.wa_batch;
    }
    auto left = LeftOfTarget(problem, progress.iterations_done, done);
    if (!left.ok()) return left.status();
    out.remaining_amount = *left;
    problem.target_amount = out.remaining_amount;
  } else if (std::isfinite(progress.current_loss)) {
    out.current_loss = progress.current_loss;
  } else if (!progress.cluster_before.empty()) {
    auto loss = LossAfterIterations(model, progress.cluster_before, progress.iterations_done,
                                    problem.parameter_servers);
    if (!loss.ok()) return loss.status();
    out.current_loss = *loss;
  } else {
    return absl::InvalidArgumentError(
        "progress: give current_loss, or normalized_iterations_done with cluster_before");
  }
  if (problem.target_kind == predictor::Target::Kind::kLoss) {
    if (!(out.current_loss > problem.target_loss)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "progress.current_loss = %g: already at or below the target loss %g; nothing to "
          "re-plan",
          out.current_loss, problem.target_loss));
    }
    problem.current_loss = out.current_loss;
  }
  out.remaining_s = problem.deadline_s - progress.elapsed_s;
  problem.deadline_s = out.remaining_s > 0 ? out.remaining_s : 1e-9;  // validation needs > 0
  if (auto s = ValidateProblem(model, problem); !s.ok()) return s;

  if (auto s = SolveTheRest(
          problem, progress, find_fastest,
          [&](const PlanProblem& p) { return Solve(model, p, strategy, exhaustive_limit); },
          [&](const PlanProblem& p) { return SolveExact(model, p); }, out);
      !s.ok()) {
    return s;
  }
  return out;
}

absl::StatusOr<double> LeftOfTarget(const PlanProblem& problem, double iterations_done,
                                    double done) {
  if (!(std::isfinite(iterations_done) && iterations_done >= 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "progress.normalized_iterations_done = %g: must be a finite number >= 0", iterations_done));
  }
  const double left = problem.target_amount - done;
  if (!(left > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("progress: %.15g of the target's %s are done already; nothing to re-plan",
                        done, problem.target().Describe()));
  }
  return left;
}

absl::Status SolveTheRest(
    const PlanProblem& problem, const JobProgress& progress, bool find_fastest,
    const std::function<absl::StatusOr<PlanResult>(const PlanProblem&)>& solve,
    const std::function<PlanResult(const PlanProblem&)>& solve_exact, ReplanResult& out) {
  if (out.remaining_s > 0) {
    auto plan = solve(problem);
    if (!plan.ok()) return plan.status();
    out.evaluated += plan->evaluated;
    if (plan->feasible) {
      out.feasible = true;
      out.plan = plan->best;
    }
  }
  if (!out.feasible) {
    if (!find_fastest) return absl::OkStatus();
    // No plan meets the deadline: the fastest finish any plan can reach.
    PlanProblem fastest = problem;
    fastest.deadline_s = kInf;
    fastest.budget_usd = kInf;
    fastest.objective = Objective::kMinTime;
    const PlanResult best = solve_exact(fastest);
    if (!best.stopped.ok()) return best.stopped;
    out.evaluated += best.evaluated;
    if (best.feasible) {
      out.fastest = best.best;
      out.best_finish_s = progress.elapsed_s + best.best.time_s;
    }
    return absl::OkStatus();
  }
  out.to_launch.resize(out.plan.counts.size());
  for (size_t k = 0; k < out.to_launch.size(); ++k) {
    out.to_launch[k] = out.plan.counts[k] - problem.min_counts[k];
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::provisioner
