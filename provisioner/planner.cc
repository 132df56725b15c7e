#include "provisioner/planner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "provisioner/pareto.h"
#include "provisioner/stop_poll.h"

namespace spotdnn::provisioner {

PlanProblem DefaultProblem(const PerformanceModel& model, double target_loss, double deadline_s) {
  PlanProblem p;
  p.target_loss = target_loss;
  p.deadline_s = deadline_s;
  const auto& types = model.catalog().types;
  p.min_counts.assign(types.size(), 0);
  p.max_counts.resize(types.size());
  for (size_t k = 0; k < types.size(); ++k) {
    p.max_counts[k] = model.types()[k].usable ? types[k].quota : 0;
  }
  return p;
}

PlanProblem DefaultProblem(const PerformanceModel& model, const predictor::Target& target,
                           double deadline_s) {
  PlanProblem p = DefaultProblem(model, target.is_loss() ? target.value : 0, deadline_s);
  p.target_kind = target.kind;
  if (!target.is_loss()) p.target_amount = target.value;
  if (target.kind == predictor::Target::Kind::kMetric) {
    p.target_metric = target.metric;
    p.target_higher_is_better = target.higher_is_better;
  }
  return p;
}

absl::Status ValidateProblem(const PerformanceModel& model, const PlanProblem& p) {
  const auto& types = model.catalog().types;
  if (p.min_counts.size() != types.size() || p.max_counts.size() != types.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "counts given for %d and %d types; catalog \"%s\" has %d", p.min_counts.size(),
        p.max_counts.size(), model.catalog().name, types.size()));
  }
  if (p.target_kind != predictor::Target::Kind::kLoss) {
    if (auto s = p.target().Validate("target"); !s.ok()) return s;
    // A metric the profile has no convergence model of: no cluster can answer, so the question
    // is refused (as `predict` refuses it), not answered "infeasible".
    if (auto s = model.CheckTarget(p.target()); !s.ok()) return s;
    if (std::isfinite(p.current_loss)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "current_loss = %g: only a loss target resumes from a loss; give the %s left instead",
          p.current_loss,
          p.target_kind == predictor::Target::Kind::kIterations ? "iterations"
          : p.target_kind == predictor::Target::Kind::kSamples  ? "samples"
                                                                : "iterations done"));
    }
  } else if (!std::isfinite(p.target_loss)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("target_loss = %g: must be a finite number", p.target_loss));
  } else if (auto s = model.CheckTarget(p.target()); !s.ok()) {
    return s;
  }
  if (!(p.deadline_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("deadline_s = %g: must be positive", p.deadline_s));
  }
  if (!(p.budget_usd > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("budget_usd = %g: must be positive", p.budget_usd));
  }
  if (!(std::isfinite(p.overhead_s) && p.overhead_s >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("revocation_overhead_s = %g: must be a finite number >= 0", p.overhead_s));
  }
  if (p.max_workers < 0 || p.max_workers > predictor::kMaxClusterSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "max_cluster_size = %d: must be in [0, %d] (0 = no limit beyond the quotas)", p.max_workers,
        predictor::kMaxClusterSize));
  }
  if (p.parameter_servers < 1 || p.parameter_servers > predictor::kMaxParameterServers) {
    return absl::InvalidArgumentError(absl::StrFormat("parameter_servers = %d: must be in [1, %d]",
                                                      p.parameter_servers,
                                                      predictor::kMaxParameterServers));
  }
  if (p.target_kind == predictor::Target::Kind::kLoss && !(p.current_loss > p.target_loss)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "current_loss = %g: the target loss %g is already reached", p.current_loss, p.target_loss));
  }
  for (size_t k = 0; k < types.size(); ++k) {
    if (p.min_counts[k] < 0) {
      return absl::InvalidArgumentError(absl::StrFormat("existing count of %s = %d: must be >= 0",
                                                        types[k].name, p.min_counts[k]));
    }
    if (p.max_counts[k] < 0 || p.max_counts[k] > predictor::kMaxInstancesPerType) {
      return absl::InvalidArgumentError(absl::StrFormat("quota of %s = %d: must be in [0, %d]",
                                                        types[k].name, p.max_counts[k],
                                                        predictor::kMaxInstancesPerType));
    }
    if (p.min_counts[k] > 0 && !model.types()[k].usable) {
      return absl::InvalidArgumentError(
          absl::StrCat("existing instances of ", types[k].name,
                       " cannot be planned with: ", model.types()[k].unusable_reason));
    }
    if (p.min_counts[k] > p.max_counts[k]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("existing count of %s = %d exceeds its quota %d", types[k].name,
                          p.min_counts[k], p.max_counts[k]));
    }
  }
  const int64_t existing = std::accumulate(p.min_counts.begin(), p.min_counts.end(), int64_t{0});
  if (p.max_workers > 0 && existing > p.max_workers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_cluster_size = %d is below the %d instances already running",
                        p.max_workers, existing));
  }
  return absl::OkStatus();
}

bool Score(const PerformanceModel& model, const PlanProblem& problem, absl::Span<const int> counts,
           Candidate& out) {
  out.estimate =
      model.Evaluate(counts, problem.target(), problem.parameter_servers, problem.current_loss);
  if (!out.estimate.ok()) return false;
  out.counts.assign(counts.begin(), counts.end());
  out.time_s = out.estimate.time_s + problem.overhead_s;
  const double price =
      problem.on_demand ? out.estimate.on_demand_price_per_hour : out.estimate.price_per_hour;
  out.cost_usd = out.time_s / 3600.0 * price;
  return true;
}

bool MeetsSlo(const PlanProblem& problem, const Candidate& c) {
  return c.time_s <= problem.deadline_s && c.cost_usd <= problem.budget_usd;
}

bool Better(const Candidate& a, const Candidate& b, Objective objective) {
  if (b.counts.empty()) return !a.counts.empty();
  const double a1 = objective == Objective::kMinCost ? a.cost_usd : a.time_s;
  const double b1 = objective == Objective::kMinCost ? b.cost_usd : b.time_s;
  if (a1 != b1) return a1 < b1;
  const double a2 = objective == Objective::kMinCost ? a.time_s : a.cost_usd;
  const double b2 = objective == Objective::kMinCost ? b.time_s : b.cost_usd;
  if (a2 != b2) return a2 < b2;
  const int64_t na = std::accumulate(a.counts.begin(), a.counts.end(), int64_t{0});
  const int64_t nb = std::accumulate(b.counts.begin(), b.counts.end(), int64_t{0});
  if (na != nb) return na < nb;
  return a.counts < b.counts;
}

uint64_t SearchSpaceSize(const PlanProblem& problem) {
  uint64_t size = 1;
  for (size_t k = 0; k < problem.max_counts.size(); ++k) {
    const uint64_t choices =
        static_cast<uint64_t>(std::max(0, problem.max_counts[k] - problem.min_counts[k]) + 1);
    if (size > UINT64_MAX / choices) return UINT64_MAX;
    size *= choices;
  }
  return size;
}

namespace {

// Calls visit(counts) for every composition within the bounds (an odometer), respecting
// max_workers, until `poll` says stop.
template <typename Visit>
void ForEachComposition(const PlanProblem& problem, StopPoll& poll, Visit visit) {
  std::vector<int> counts = problem.min_counts;
  const size_t k_count = counts.size();
  int total = std::accumulate(counts.begin(), counts.end(), 0);
  while (poll.Tick()) {
    if (problem.max_workers == 0 || total <= problem.max_workers) visit(counts);
    size_t k = 0;
    while (k < k_count && counts[k] == problem.max_counts[k]) {
      total -= counts[k] - problem.min_counts[k];
      counts[k] = problem.min_counts[k];
      ++k;
    }
    if (k == k_count) return;
    ++counts[k];
    ++total;
  }
}

absl::Status CheckLimit(const PlanProblem& problem, uint64_t limit) {
  const uint64_t size = SearchSpaceSize(problem);
  if (size > limit) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "exhaustive search would evaluate %s clusters, above its limit of %d; raise the limit "
        "(--exhaustive-limit / options.exhaustive_limit) or use the exact strategy",
        size == UINT64_MAX ? std::string("more than 1.8e19") : absl::StrCat(size), limit));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PlanResult> SolveExhaustive(const PerformanceModel& model,
                                           const PlanProblem& problem, uint64_t limit) {
  if (auto s = ValidateProblem(model, problem); !s.ok()) return s;
  if (auto s = CheckLimit(problem, limit); !s.ok()) return s;
  PlanResult result;
  Candidate c;
  StopPoll poll(problem.stop);
  ForEachComposition(problem, poll, [&](const std::vector<int>& counts) {
    ++result.evaluated;
    if (!Score(model, problem, counts, c) || !MeetsSlo(problem, c)) return;
    if (Better(c, result.best, problem.objective)) {
      result.best = c;
      result.feasible = true;
    }
  });
  result.stopped = poll.status();
  return result;
}

namespace {

// The heuristic's list: usable types with room to grow, fastest single worker first, each
// repeated (quota - running) times; as (type, run length) pairs.
std::vector<std::pair<int, int>> SpotdnnRuns(const PerformanceModel& model,
                                             const PlanProblem& problem) {
  const auto& types = model.types();
  std::vector<int> order;
  for (size_t k = 0; k < types.size(); ++k) {
    if (types[k].usable && problem.max_counts[k] > problem.min_counts[k]) {
      order.push_back(static_cast<int>(k));
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return types[a].single_worker_time_s < types[b].single_worker_time_s;
  });
  std::vector<std::pair<int, int>> runs;
  for (int k : order) runs.emplace_back(k, problem.max_counts[k] - problem.min_counts[k]);
  return runs;
}

struct SpotdnnShape {
  int64_t existing = 0;  // running instances (added to every window)
  int64_t len = 0;       // list length
  int64_t max_n = 0;     // longest window (max_workers allowing)
  uint64_t windows = 0;  // clusters scored
};

SpotdnnShape ShapeOf(const std::vector<std::pair<int, int>>& runs, const PlanProblem& problem) {
  SpotdnnShape shape;
  for (const auto& run : runs) shape.len += run.second;
  shape.existing =
      std::accumulate(problem.min_counts.begin(), problem.min_counts.end(), int64_t{0});
  shape.max_n = shape.len;
  if (problem.max_workers > 0) {
    shape.max_n = std::clamp<int64_t>(problem.max_workers - shape.existing, 0, shape.len);
  }
  // Every start for lengths below the list's; one window of the full length.
  const auto len = static_cast<uint64_t>(shape.len);
  const auto max_n = static_cast<uint64_t>(shape.max_n);
  shape.windows =
      (shape.existing > 0 ? 1 : 0) + (max_n == len && len > 0 ? (len - 1) * len + 1 : max_n * len);
  return shape;
}

}  // namespace

absl::Status CheckSpotdnnSize(const PerformanceModel& model, const PlanProblem& problem) {
  const SpotdnnShape shape = ShapeOf(SpotdnnRuns(model, problem), problem);
  if (shape.windows > kSpotdnnWindowLimit) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the spotdnn heuristic would score %d windows of its %d-instance list (the quotas above "
        "the running instances), above its limit of %d; lower the quotas (--quota / "
        "options.quota_overrides) or the cluster size (--max-size / options.max_cluster_size), "
        "or use the exact strategy",
        shape.windows, shape.len, kSpotdnnWindowLimit));
  }
  return absl::OkStatus();
}

PlanResult SolveSpotdnn(const PerformanceModel& model, const PlanProblem& problem) {
  PlanResult result;
  const std::vector<std::pair<int, int>> runs = SpotdnnRuns(model, problem);
  const SpotdnnShape shape = ShapeOf(runs, problem);
  if (shape.windows > kSpotdnnWindowLimit) return result;
  std::vector<int> list;
  list.reserve(shape.len);
  for (const auto& [k, n] : runs) list.insert(list.end(), n, k);
  const int len = static_cast<int>(shape.len);
  const int max_n = static_cast<int>(shape.max_n);
  Candidate c;
  std::vector<int> counts;
  StopPoll poll(problem.stop);
  auto consider = [&]() {
    if (!poll.Tick()) return;
    ++result.evaluated;
    if (!Score(model, problem, counts, c) || !MeetsSlo(problem, c)) return;
    if (Better(c, result.best, problem.objective)) {
      result.best = c;
      result.feasible = true;
    }
  };
  if (shape.existing > 0) {
    counts = problem.min_counts;
    consider();
  }
  // Window [m, m + n) of the circular list, grown one instance at a time from each start. The
  // full list is the same from every start, so only start 0 scores it.
  for (int m = 0; m < len && poll.status().ok(); ++m) {
    counts = problem.min_counts;
    for (int n = 1; n <= max_n; ++n) {
      if (n == len && m > 0) break;
      ++counts[list[(m + n - 1) % len]];
      consider();
    }
  }
  result.stopped = poll.status();
  return result;
}

PlanResult CheapestHomogeneous(const PerformanceModel& model, const PlanProblem& problem) {
  // Types the model cannot use add nothing.
  PlanProblem usable = problem;
  for (size_t k = 0; k < usable.max_counts.size(); ++k) {
    if (!model.types()[k].usable) usable.max_counts[k] = usable.min_counts[k];
  }
  return CheapestHomogeneous(usable, [&](absl::Span<const int> counts, Candidate& out) {
    return Score(model, problem, counts, out);
  });
}

PlanResult CheapestHomogeneous(const PlanProblem& problem, const ClusterScorer& score) {
  PlanResult result;
  Candidate c;
  StopPoll poll(problem.stop);
  const int existing = std::accumulate(problem.min_counts.begin(), problem.min_counts.end(), 0);
  for (size_t k = 0; k < problem.max_counts.size(); ++k) {
    std::vector<int> counts = problem.min_counts;
    for (int n = problem.min_counts[k] + 1; n <= problem.max_counts[k]; ++n) {
      if (problem.max_workers > 0 && existing + n - problem.min_counts[k] > problem.max_workers) {
        break;
      }
      if (!poll.Tick()) {
        result.stopped = poll.status();
        return result;
      }
      counts[k] = n;
      ++result.evaluated;
      if (!score(counts, c) || !MeetsSlo(problem, c)) continue;
      if (Better(c, result.best, problem.objective)) {
        result.best = c;
        result.feasible = true;
      }
    }
  }
  return result;
}

absl::StatusOr<PlanResult> Solve(const PerformanceModel& model, const PlanProblem& problem,
                                 Strategy strategy, uint64_t exhaustive_limit) {
  if (auto s = ValidateProblem(model, problem); !s.ok()) return s;
  PlanResult result;
  switch (strategy) {
    case Strategy::kExact:
      result = SolveExact(model, problem);
      break;
    case Strategy::kSpotdnn:
      if (auto s = CheckSpotdnnSize(model, problem); !s.ok()) return s;
      result = SolveSpotdnn(model, problem);
      break;
    case Strategy::kExhaustive: {
      auto exhaustive = SolveExhaustive(model, problem, exhaustive_limit);
      if (!exhaustive.ok()) return exhaustive.status();
      result = *std::move(exhaustive);
      break;
    }
    default:
      return absl::InvalidArgumentError("unknown strategy");
  }
  if (!result.stopped.ok()) return result.stopped;
  return result;
}

std::vector<Candidate> FrontierExact(const PerformanceModel& model, const PlanProblem& problem,
                                     uint64_t* evaluated, absl::Status* stopped);

absl::StatusOr<std::vector<Candidate>> Frontier(const PerformanceModel& model,
                                                const PlanProblem& problem, Strategy strategy,
                                                uint64_t exhaustive_limit, uint64_t* evaluated) {
  if (auto s = ValidateProblem(model, problem); !s.ok()) return s;
  if (strategy == Strategy::kSpotdnn) {
    return absl::InvalidArgumentError(
        "strategy = spotdnn: the heuristic finds one plan, not a frontier; use exact");
  }
  if (strategy == Strategy::kExact) {
    absl::Status stopped;
    std::vector<Candidate> front = FrontierExact(model, problem, evaluated, &stopped);
    if (!stopped.ok()) return stopped;
    return front;
  }
  return ExhaustiveFrontier(
      problem,
      [&](absl::Span<const int> counts, Candidate& out) {
        return Score(model, problem, counts, out);
      },
      exhaustive_limit, evaluated);
}

absl::StatusOr<std::vector<Candidate>> ExhaustiveFrontier(const PlanProblem& problem,
                                                          const ClusterScorer& score,
                                                          uint64_t limit, uint64_t* evaluated) {
  if (auto s = CheckLimit(problem, limit); !s.ok()) return s;
  ParetoSet front;
  Candidate c;
  uint64_t count = 0;
  StopPoll poll(problem.stop);
  ForEachComposition(problem, poll, [&](const std::vector<int>& counts) {
    ++count;
    if (score(counts, c) && MeetsSlo(problem, c)) front.Insert(c);
  });
  if (evaluated != nullptr) *evaluated = count;
  if (!poll.status().ok()) return poll.status();
  return front.Plans();
}

}  // namespace spotdnn::provisioner
