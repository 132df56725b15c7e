// What the revocation simulator and the risk-aware search plan with: one interface over the
// parameter-server model (ParameterServerPlanModel) and the synchronous all-reduce planner
// (SyncPlanModel), so that a job of either kind is scored, re-planned after a revocation and
// searched the same way.
#ifndef SPOTDNN_PROVISIONER_PLAN_MODEL_H_
#define SPOTDNN_PROVISIONER_PLAN_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "provisioner/planner.h"
#include "provisioner/replan.h"
#include "provisioner/sync_planner.h"

namespace spotdnn::provisioner {

class PlanModel {
 public:
  virtual ~PlanModel() = default;

  virtual const predictor::InstanceCatalog& catalog() const = 0;
  // True for a synchronous (all-reduce) job: every rank restarts on a revocation.
  virtual bool synchronous() const = 0;
  // The parameter-server model behind this one, or nullptr.
  virtual const PerformanceModel* parameter_server_model() const { return nullptr; }

  // OK when `problem` fits this model; INVALID_ARGUMENT naming the field otherwise.
  virtual absl::Status Validate(const PlanProblem& problem) const = 0;
  // Scores `counts` (as provisioner::Score); false when the model gives no answer for it.
  virtual bool Score(const PlanProblem& problem, absl::Span<const int> counts,
                     Candidate& out) const = 0;
  // Why Score gave no answer for `counts` (`failed` is what it left in its output).
  virtual absl::Status ScoreError(const PlanProblem& problem, absl::Span<const int> counts,
                                  const Candidate& failed) const = 0;
  // The speed of `counts` training, in the plan's normalized iterations (a synchronous job's
  // steps) per second; 0 when it cannot train.
  virtual double Speed(const PlanProblem& problem, absl::Span<const int> counts) const = 0;
  // What the job pays per hour besides its instances (parameter servers), at the problem's prices.
  virtual double FixedPricePerHour(const PlanProblem& problem) const = 0;

  // The exact plan (the problem must pass Validate).
  virtual PlanResult SolveExact(const PlanProblem& problem) const = 0;
  // The time/cost Pareto frontier within the deadline and budget, fastest first.
  virtual absl::StatusOr<std::vector<Candidate>> Frontier(const PlanProblem& problem,
                                                          Strategy strategy,
                                                          uint64_t exhaustive_limit,
                                                          uint64_t* evaluated) const = 0;
  // The rest of a job after a revocation (provisioner::Replan); problem.min_counts are the
  // survivors.
  virtual absl::StatusOr<ReplanResult> Replan(const PlanProblem& problem,
                                              const JobProgress& progress, Strategy strategy,
                                              uint64_t exhaustive_limit,
                                              bool find_fastest) const = 0;
};

// The parameter-server (ASP) model. `model` must outlive it.
class ParameterServerPlanModel final : public PlanModel {
 public:
  explicit ParameterServerPlanModel(const PerformanceModel& model) : model_(model) {}

  const predictor::InstanceCatalog& catalog() const override { return model_.catalog(); }
  bool synchronous() const override { return false; }
  const PerformanceModel* parameter_server_model() const override { return &model_; }
  absl::Status Validate(const PlanProblem& problem) const override;
  bool Score(const PlanProblem& problem, absl::Span<const int> counts,
             Candidate& out) const override;
  absl::Status ScoreError(const PlanProblem& problem, absl::Span<const int> counts,
                          const Candidate& failed) const override;
  double Speed(const PlanProblem& problem, absl::Span<const int> counts) const override;
  double FixedPricePerHour(const PlanProblem& problem) const override;
  PlanResult SolveExact(const PlanProblem& problem) const override;
  absl::StatusOr<std::vector<Candidate>> Frontier(const PlanProblem& problem, Strategy strategy,
                                                  uint64_t exhaustive_limit,
                                                  uint64_t* evaluated) const override;
  absl::StatusOr<ReplanResult> Replan(const PlanProblem& problem, const JobProgress& progress,
                                      Strategy strategy, uint64_t exhaustive_limit,
                                      bool find_fastest) const override;

 private:
  const PerformanceModel& model_;
};

// A synchronous (all-reduce) workload at a fixed global batch (SyncPlanner): a plan's normalized
// iterations are its steps, which do not depend on the cluster; there are no parameter servers.
class SyncPlanModel final : public PlanModel {
 public:
  explicit SyncPlanModel(SyncPlanner planner) : planner_(std::move(planner)) {}

  const SyncPlanner& planner() const { return planner_; }
  const predictor::InstanceCatalog& catalog() const override { return planner_.catalog(); }
  bool synchronous() const override { return true; }
  absl::Status Validate(const PlanProblem& problem) const override;
  bool Score(const PlanProblem& problem, absl::Span<const int> counts,
             Candidate& out) const override;
  absl::Status ScoreError(const PlanProblem& problem, absl::Span<const int> counts,
                          const Candidate& failed) const override;
  double Speed(const PlanProblem& problem, absl::Span<const int> counts) const override;
  double FixedPricePerHour(const PlanProblem&) const override { return 0; }
  PlanResult SolveExact(const PlanProblem& problem) const override;
  absl::StatusOr<std::vector<Candidate>> Frontier(const PlanProblem& problem, Strategy strategy,
                                                  uint64_t exhaustive_limit,
                                                  uint64_t* evaluated) const override;
  absl::StatusOr<ReplanResult> Replan(const PlanProblem& problem, const JobProgress& progress,
                                      Strategy strategy, uint64_t exhaustive_limit,
                                      bool find_fastest) const override;

 private:
  SyncPlanner planner_;
};

// A synchronous workload's plan by `strategy` (exact, or exhaustive within `exhaustive_limit`);
// the spotdnn heuristic is the parameter-server planner's only (INVALID_ARGUMENT). The problem's
// stop check ending the search is the status.
absl::StatusOr<PlanResult> SolveSync(const SyncPlanner& planner, const PlanProblem& problem,
                                     Strategy strategy, uint64_t exhaustive_limit);

// The exact time/cost frontier of a synchronous workload within the problem's deadline and
// budget, fastest first: the cheapest plan by the deadline, then again and again the cheapest
// strictly faster than the last, each an exact SyncPlanner::SolveExact, so every point is the
// optimum at its own time. `stopped` gets the problem's stop check's status when it ended a
// search.
std::vector<Candidate> SyncFrontierExact(const SyncPlanner& planner, const PlanProblem& problem,
                                         uint64_t* evaluated, absl::Status* stopped);

// A synchronous job's re-plan after a revocation: the cheapest cluster that keeps the survivors
// (problem.min_counts) and trains the steps (or samples) left by the deadline. The steps do not
// depend on the cluster, so what is left is the target less progress.iterations_done (steps; for
// a samples target, steps x the global batch). INVALID_ARGUMENT for inconsistent progress.
absl::StatusOr<ReplanResult> SyncReplan(const SyncPlanner& planner, PlanProblem problem,
                                        const JobProgress& progress,
                                        Strategy strategy = Strategy::kExact,
                                        uint64_t exhaustive_limit = kDefaultExhaustiveLimit,
                                        bool find_fastest = true);

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_PLAN_MODEL_H_
