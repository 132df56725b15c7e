// Risk-aware plans: the plan with the least expected cost (takeovers included) whose probability of
// meeting the deadline, under a revocation model, is at least a confidence q.
//
// How it searches: the first candidates are the exact time/cost Pareto frontier of plans that meet
// the SLO without revocations, plus the frontiers that leave out each revocable type the frontier
// uses (plans that avoid a risky type). Every candidate is simulated with a few runs (common
// random numbers: the same seed for all). Then a best-first local search screens the neighbours
// (one instance more, fewer, or swapped for another type) of every plan that is cheaper in
// expectation than the best one reaching q, until the candidate budget is spent: the expected
// cost is not ordered like the planned cost, since a re-plan after a revocation may move to a
// cheaper cluster. Candidates whose screening probability is within a margin of q are simulated
// in full, cheapest expected cost first, and the cheapest with a full probability of at least q
// wins. The frontier searches are exact under the model; the local search and the screening are
// the heuristic part. PlanWithConfidenceBruteForce simulates every composition instead, to
// measure how far the search is from the best on small problems.
#ifndef SPOTDNN_PROVISIONER_RISK_PLANNER_H_
#define SPOTDNN_PROVISIONER_RISK_PLANNER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "provisioner/plan_model.h"
#include "provisioner/planner.h"
#include "provisioner/revocation_model.h"
#include "provisioner/simulator.h"

namespace spotdnn::provisioner {

// Most candidates a risk-aware search simulates.
inline constexpr int kMaxRiskCandidates = 1000;

struct RiskOptions {
  double confidence = 0.9;    // q, in (0, 1)
  int screening_runs = 1000;  // runs per candidate in the first round (at most the full runs)
  int max_candidates = 64;    // candidates simulated: up to half from the frontiers, the rest
                              // from the local search
  int max_full_evaluations = 8;
};

// OK when the options are usable; INVALID_ARGUMENT naming the field (options.confidence, ...).
absl::Status ValidateRiskOptions(const RiskOptions& options);

// One simulated candidate.
struct RiskCandidate {
  Candidate plan;
  std::string origin;  // "frontier", "frontier without p2.8xlarge", "brute force"
  SimulationResult screening;
  bool full = false;  // simulated with the full runs
  SimulationResult result;
};

struct RiskPlanResult {
  bool feasible = false;        // a candidate reaches the confidence
  Candidate plan;               // when feasible: the chosen plan
  SimulationResult risk;        // and its full simulation
  bool plain_feasible = false;  // the plain (revocation-blind) exact plan exists
  Candidate plain;
  SimulationResult plain_risk;
  // When no candidate reaches the confidence: the most reliable one and its simulation.
  Candidate most_reliable;
  SimulationResult most_reliable_risk;
  int candidates = 0;        // candidates simulated
  int full_evaluations = 0;  // of which in full
  uint64_t evaluated = 0;    // clusters scored by the frontier searches
  uint64_t replans = 0, replans_solved = 0;
  std::vector<RiskCandidate> considered;  // every candidate, in the order simulated
};

// The cheapest plan (least expected cost) whose simulated probability of meeting the deadline is at
// least `risk.confidence`, with the plain exact plan's simulation beside it. Needs a deadline-mode
// problem with a finite deadline; INVALID_ARGUMENT otherwise or for bad options.
absl::StatusOr<RiskPlanResult> PlanWithConfidence(const PerformanceModel& model,
                                                  const PlanProblem& problem,
                                                  const RevocationModel& revocations,
                                                  const SimulationOptions& simulation,
                                                  const RiskOptions& risk);
// The same for any plan model: a synchronous one (SyncPlanModel) searches its own frontiers and
// simulates its restarts.
absl::StatusOr<RiskPlanResult> PlanWithConfidence(const PlanModel& model,
                                                  const PlanProblem& problem,
                                                  const RevocationModel& revocations,
                                                  const SimulationOptions& simulation,
                                                  const RiskOptions& risk);

// The reference: simulates every composition within the problem's bounds that meets the SLO
// without revocations (each with the full runs and the same seed) and picks the cheapest in
// expectation that reaches the confidence. FAILED_PRECONDITION when there are more than `limit`
// compositions.
absl::StatusOr<RiskPlanResult> PlanWithConfidenceBruteForce(
    const PerformanceModel& model, const PlanProblem& problem, const RevocationModel& revocations,
    const SimulationOptions& simulation, double confidence, uint64_t limit = 5000);
absl::StatusOr<RiskPlanResult> PlanWithConfidenceBruteForce(
    const PlanModel& model, const PlanProblem& problem, const RevocationModel& revocations,
    const SimulationOptions& simulation, double confidence, uint64_t limit = 5000);

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_RISK_PLANNER_H_
