// Provisioning (paper eqs. 11-14): the cheapest cluster that reaches a target loss by a deadline
// (or the fastest within a budget), with three strategies: `exact` (branch and bound, provably
// optimal under the model), `spotdnn` (the paper's sliding-window heuristic, as its prototype does
// it) and `exhaustive` (every composition within the quotas, the reference).
#ifndef SPOTDNN_PROVISIONER_PLANNER_H_
#define SPOTDNN_PROVISIONER_PLANNER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "predictor/performance_model.h"

namespace spotdnn::provisioner {

using predictor::Estimate;
using predictor::PerformanceModel;

inline constexpr double kInf = std::numeric_limits<double>::infinity();

// What a plan minimises.
enum class Objective {
  kMinCost,  // deadline mode: least cost with loss <= target by the deadline
  kMinTime,  // budget mode: least time with loss <= target and cost <= budget
};

enum class Strategy { kExact, kSpotdnn, kExhaustive };

// Default most clusters `exhaustive` may evaluate.
inline constexpr uint64_t kDefaultExhaustiveLimit = 50'000'000;
// A search's stop hook, polled every few thousand clusters or search nodes: a non-OK status (e.g.
// DEADLINE_EXCEEDED, CANCELLED) ends the search, which reports it in PlanResult::stopped; Solve,
// Frontier and Replan return it. It keeps the searches free of gRPC: the service builds it from
// the call's deadline and cancellation.
using StopCheck = std::function<absl::Status()>;

// Most windows (clusters) the `spotdnn` heuristic scores (about a second); it scores about L^2
// for a list of L instances, so this admits lists of up to 2,000 instances.
inline constexpr uint64_t kSpotdnnWindowLimit = 4'000'000;

// Work the exact search can reuse across searches of problems of one shape (model, quotas,
// running instances, parameter servers, prices): per cluster size and search node, the parts of
// its bounds that depend on nothing else (not on the target, current loss, deadline, budget or
// overhead). The simulator keeps one per set of surviving instances, since its re-plans differ
// only in those; the search gives the same answers with or without one, only faster. A memo used
// with a problem of another shape (compared by value: the types' times, batches and prices, the
// network time per size, the quotas, running instances, parameter servers and prices) starts
// over. Not thread-safe.
class SearchMemo {
 public:
  SearchMemo();
  ~SearchMemo();
  SearchMemo(const SearchMemo&) = delete;
  SearchMemo& operator=(const SearchMemo&) = delete;
  // Search nodes remembered.
  size_t nodes() const;

  struct Impl;  // branch_and_bound.cc
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// One planning question. Counts are indexed like the model's catalog types.
struct PlanProblem {
  double target_loss = 0;  // L_obj (when target_kind is kLoss)
  // Instead of a loss: train target_amount global iterations or samples (kIterations, kSamples);
  // when re-planning, what is left of them.
  // kMetric: target_amount is the metric's value to reach (at least, when
  // target_higher_is_better; else at most), predicted by the profile's convergence model.
  predictor::Target::Kind target_kind = predictor::Target::Kind::kLoss;
  double target_amount = 0;
  std::string target_metric;             // kMetric: the metric's name ("accuracy")
  bool target_higher_is_better = false;  // kMetric: its direction
  double current_loss = kInf;   // re-planning: the loss reached so far (kInf: from scratch)
  double deadline_s = kInf;     // predicted time + overhead_s must not exceed it (T_obj)
  double budget_usd = kInf;     // cost must not exceed it
  double overhead_s = 0;        // T_ohd, added to every predicted time and paid for
  std::vector<int> min_counts;  // instances that stay (already running, paid for)
  std::vector<int> max_counts;  // quotas Lim_m (0 leaves a type out), at most
                                // predictor::kMaxInstancesPerType each
  int max_workers = 0;          // largest cluster, at most predictor::kMaxClusterSize; 0 = no
                                // limit beyond the quotas (and kMaxClusterSize)
  int parameter_servers = 1;
  bool on_demand = false;  // price with on-demand instead of spot prices
  Objective objective = Objective::kMinCost;
  StopCheck stop;  // polled during searches; empty = run to the end
  // Optional, not owned: reused by exact searches (SolveExact, Frontier) of this problem's shape.
  SearchMemo* memo = nullptr;

  // The target the model evaluates: Loss(target_loss), or target_amount of target_kind.
  predictor::Target target() const {
    if (target_kind == predictor::Target::Kind::kMetric) {
      return predictor::Target::Metric(target_metric, target_higher_is_better, target_amount);
    }
    return target_kind == predictor::Target::Kind::kLoss
               ? predictor::Target::Loss(target_loss)
               : predictor::Target{target_kind, target_amount};
  }
};

// Builds a problem with the catalog's quotas, no instances running and no limits but the SLO;
// types the model cannot use get quota 0.
PlanProblem DefaultProblem(const PerformanceModel& model, double target_loss,
                           double deadline_s = kInf);
// The same for any target.
PlanProblem DefaultProblem(const PerformanceModel& model, const predictor::Target& target,
                           double deadline_s = kInf);

// OK when the problem is well formed for `model`; INVALID_ARGUMENT naming the field otherwise.
absl::Status ValidateProblem(const PerformanceModel& model, const PlanProblem& problem);

// A scored cluster. time_s and cost_usd include the overhead and use the problem's prices.
struct Candidate {
  std::vector<int> counts;
  Estimate estimate;
  double time_s = kInf;
  double cost_usd = kInf;
};

// Scores `counts`; false when the model gives no answer for it (empty, unreachable target, ...).
bool Score(const PerformanceModel& model, const PlanProblem& problem, absl::Span<const int> counts,
           Candidate& out);
// True when a scored candidate meets the deadline and the budget.
bool MeetsSlo(const PlanProblem& problem, const Candidate& c);
// True when `a` is a better plan than `b` under `objective` (ties: the other measure, then fewer
// instances, then lexicographically smaller counts).
bool Better(const Candidate& a, const Candidate& b, Objective objective);

struct PlanResult {
  bool feasible = false;
  Candidate best;          // when feasible
  uint64_t evaluated = 0;  // clusters scored
  uint64_t nodes = 0;      // search nodes visited (exact)
  absl::Status stopped;    // not OK: problem.stop ended the search (`best` is then no optimum)
};

// The optimum under the model by branch and bound over compositions, one cluster size at a time.
PlanResult SolveExact(const PerformanceModel& model, const PlanProblem& problem);
// Every composition within [min_counts, max_counts]; FAILED_PRECONDITION when there are more than
// `limit` of them, saying how many and how to raise the limit.
absl::StatusOr<PlanResult> SolveExhaustive(const PerformanceModel& model,
                                           const PlanProblem& problem,
                                           uint64_t limit = kDefaultExhaustiveLimit);
// The spotDNN prototype's heuristic: types sorted by single-worker iteration time, expanded by
// quota into a list, every (wrapping) window of every length a candidate; running instances are
// added to every window. Scores nothing (infeasible) when CheckSpotdnnSize refuses the problem.
PlanResult SolveSpotdnn(const PerformanceModel& model, const PlanProblem& problem);
// FAILED_PRECONDITION when the heuristic would score more than kSpotdnnWindowLimit windows,
// saying how many and how to shrink the problem.
absl::Status CheckSpotdnnSize(const PerformanceModel& model, const PlanProblem& problem);
// Dispatches on `strategy`.
absl::StatusOr<PlanResult> Solve(const PerformanceModel& model, const PlanProblem& problem,
                                 Strategy strategy,
                                 uint64_t exhaustive_limit = kDefaultExhaustiveLimit);

// Scores a cluster for a search, as Score does: false when the model gives no answer for it.
using ClusterScorer = std::function<bool(absl::Span<const int> counts, Candidate& out)>;

// The best plan that uses one instance type only (besides running instances).
PlanResult CheapestHomogeneous(const PerformanceModel& model, const PlanProblem& problem);
// The same for any model: every count of one type above its running instances, within the quotas
// and max_workers, scored by `score`.
PlanResult CheapestHomogeneous(const PlanProblem& problem, const ClusterScorer& score);

// Every plan on the time/cost Pareto frontier (within the deadline and budget), fastest first.
// Exact (branch and bound with dominance pruning) or exhaustive (the reference).
absl::StatusOr<std::vector<Candidate>> Frontier(const PerformanceModel& model,
                                                const PlanProblem& problem, Strategy strategy,
                                                uint64_t exhaustive_limit = kDefaultExhaustiveLimit,
                                                uint64_t* evaluated = nullptr);

// The frontier of any model by enumeration: every composition within the problem's bounds scored
// by `score`; FAILED_PRECONDITION when there are more than `limit`.
absl::StatusOr<std::vector<Candidate>> ExhaustiveFrontier(const PlanProblem& problem,
                                                          const ClusterScorer& score,
                                                          uint64_t limit,
                                                          uint64_t* evaluated = nullptr);

// Number of compositions within the problem's bounds (saturates at UINT64_MAX).
uint64_t SearchSpaceSize(const PlanProblem& problem);

}  // namespace spotdnn::provisioner

#endif  // SPOTDNN_PROVISIONER_PLANNER_H_
