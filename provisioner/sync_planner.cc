// The exact search for synchronous workloads. It fixes counts type by type (depth-first) and
// prunes a subtree when a lower bound on every completion's time or cost cannot meet the SLO or
// beat the incumbent. A node's completions hold at least its counts so far and the free types'
// minimums (the "base"), and at most the free types' quotas. The bounds:
//
// - All-reduce: every term of AllReduceTime but one is a non-negative coefficient times
//   [k_max > 1], 2 (k_max - 1) / k_max, [N > 1], sqrt(2 ln N) or k_max - 1, each non-decreasing
//   in the number of instances N and the busiest instance's GPUs k_max; a completion only adds
//   instances, so each of the base's GPU types all-reduces at least as long as on the base without
//   the one that is not: e_2 [N = 2], which a third instance takes away, is left out of the bound
//   (and a base of several instances with a type that cannot span instances has no valid
//   completion).
// - Compute: in any step (accumulated or not) a rank with b samples computes for
//   A + S b >= T, so b <= (T - A) / S, and the ranks' samples sum to the global batch: T is at
//   least the least level at which sum_r max((T - A_r) / S_r, 0) (capped at each rank's memory
//   when no completion accumulates, i.e. when the base already holds the batch) reaches it. That
//   level only falls as ranks are added, so the completion with every free type at its quota
//   bounds them all (predictor::ComputeLowerBound). Adding a rank can raise the real compute
//   (each rank takes at least one sample), which is why the bound drops the lower clamp; each of
//   the base's ranks still computes at least A + S.
// - Step: the step is the sum of the micro-steps' compute before the last plus
//   (c^g + C^g)^(1/g) of the last and the all-reduce, which by the triangle inequality of the
//   g-norm is at least (compute^g + C^g)^(1/g): increasing in both, so the two bounds above bound
//   it, for every GPU type of the base.
// - Cost: price x steps x step. The price is at least the base's; and since T >= B / sum_r 1/S_r,
//   price x step >= B x (sum x_i p_i) / (sum x_i v_i) with v_i = g_i / S_i, whose least value over
//   the box of completions a linear-fractional greedy finds (types by p_i / v_i, each taken to
//   its quota while it lowers the ratio).
//
// With a target in a loss or metric the steps are S(B) = K0 + K1 / B (predictor::SyncSteps, K0,
// K1 >= 0): a constant at a fixed global batch, so the bounds above hold with it. With a global
// batch that scales (every rank at local batch b, B = b R for R ranks) the steps fall as ranks are
// added, and the bounds become:
//
// - Compute: every rank computes for A + S b, so a completion's compute is at least the slowest
//   of the base's types' (it holds them all); the all-reduce and step bounds are as above.
// - Steps: R is at most R_max, the ranks with every free type at its quota (at most
//   kMaxClusterSize), so S(B) >= K0 + K1 / (b R_max); time >= that x the step bound.
// - Cost: price x S(B) x step = step x (K0 x price + (K1 / b) x price / R); price is at least the
//   base's, and price / R (spot price per rank) at least the least (sum x_i p_i) / (sum x_i g_i)
//   over the completions, by the same greedy over types by p_i / g_i.
//
// Every bound is compared with a relative slack far above rounding error, so a completion that
// ties the incumbent is still scored and the tie broken as Better breaks it: the search returns
// the plan the exhaustive enumeration returns.
#include "provisioner/sync_planner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "provisioner/stop_poll.h"

namespace spotdnn::provisioner {
namespace {

using predictor::AllReduceCatalog;
using predictor::RankGroup;

constexpr double kTolerance = 1e-9;

double PriceOf(const predictor::InstanceType& t, bool on_demand) {
  return on_demand ? t.on_demand_price_per_hour : t.spot_price_per_hour;
}

}  // namespace

struct SyncPlanner::StepsCache {
  absl::Mutex mu;
  std::vector<std::pair<predictor::Target, absl::StatusOr<predictor::SyncSteps>>> answers
      ABSL_GUARDED_BY(mu);
};

absl::StatusOr<SyncPlanner> SyncPlanner::Create(const predictor::WorkloadProfile& profile,
                                                const predictor::InstanceCatalog& catalog,
                                                int global_batch) {
  if (global_batch < 1 || global_batch > predictor::kMaxGlobalBatch) {
    return absl::InvalidArgumentError(
        absl::StrFormat("global_batch = %d: must be in [1, %d] (samples per step over every rank)",
                        global_batch, predictor::kMaxGlobalBatch));
  }
  auto types = AllReduceCatalog::Create(profile, catalog);
  if (!types.ok()) return types.status();
  SyncPlanner out;
  out.types_ = *std::move(types);
  out.catalog_ = catalog;
  out.profile_ = profile;
  out.global_batch_ = global_batch;
  out.cache_ = std::make_shared<StepsCache>();
  return out;
}

absl::StatusOr<SyncPlanner> SyncPlanner::CreateScaling(const predictor::WorkloadProfile& profile,
                                                       const predictor::InstanceCatalog& catalog,
                                                       int local_batch) {
  if (local_batch < 1 || local_batch > predictor::kMaxBatchPerGpu) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "local_batch = %d: must be in [1, %d] (samples per GPU per step: the global batch scales "
        "with the ranks)",
        local_batch, predictor::kMaxBatchPerGpu));
  }
  auto types = AllReduceCatalog::Create(profile, catalog);
  if (!types.ok()) return types.status();
  SyncPlanner out;
  out.types_ = *std::move(types);
  out.catalog_ = catalog;
  out.profile_ = profile;
  out.scaling_ = true;
  out.local_batch_ = local_batch;
  out.cache_ = std::make_shared<StepsCache>();
  return out;
}

bool SyncPlanner::Usable(size_t k) const {
  return types_.Usable(k) && (!scaling_ || types_.Group(k).cap >= local_batch_);
}

std::string SyncPlanner::UnusableReason(size_t k) const {
  if (!types_.Usable(k)) return types_.UnusableReason(k);
  if (Usable(k)) return "";
  return absl::StrFormat(
      "instance type %s: its %g GiB GPUs hold at most %d samples per step (the profile's memory "
      "model), below the local batch %d every rank trains",
      catalog_.types[k].name, catalog_.types[k].gpu_memory_gib, types_.Group(k).cap, local_batch_);
}

PlanProblem SyncPlanner::DefaultProblem(const predictor::Target& target, double deadline_s) const {
  PlanProblem p;
  p.deadline_s = deadline_s;
  p.target_kind = target.kind;
  p.target_amount = target.value;
  if (target.kind == predictor::Target::Kind::kLoss) p.target_loss = target.value;
  if (target.kind == predictor::Target::Kind::kMetric) {
    p.target_metric = target.metric;
    p.target_higher_is_better = target.higher_is_better;
  }
  p.min_counts.assign(catalog_.types.size(), 0);
  p.max_counts.resize(catalog_.types.size());
  for (size_t k = 0; k < catalog_.types.size(); ++k) {
    p.max_counts[k] = Usable(k) ? catalog_.types[k].quota : 0;
  }
  return p;
}

absl::StatusOr<predictor::SyncSteps> SyncPlanner::StepsOf(const PlanProblem& problem) const {
  const predictor::Target target = problem.target();
  absl::MutexLock lock(&cache_->mu);
  for (const auto& [t, steps] : cache_->answers) {
    if (t.kind == target.kind && t.value == target.value && t.metric == target.metric &&
        t.higher_is_better == target.higher_is_better) {
      return steps;
    }
  }
  auto steps = predictor::SyncStepsFor(profile_, target);
  if (cache_->answers.size() > 64) cache_->answers.clear();
  cache_->answers.emplace_back(target, steps);
  return steps;
}

absl::Status SyncPlanner::Validate(const PlanProblem& p) const {
  const size_t n = catalog_.types.size();
  if (p.min_counts.size() != n || p.max_counts.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("counts given for %d and %d types; catalog \"%s\" has %d",
                        p.min_counts.size(), p.max_counts.size(), catalog_.name, n));
  }
  if (auto s = p.target().Validate("target"); !s.ok()) return s;
  auto steps = StepsOf(p);
  if (!steps.ok()) return steps.status();
  if (!scaling_) {
    if (auto s = steps->CheckBatch(global_batch_); !s.ok()) return s;
  } else if (steps->from_convergence && !steps->critical_batch &&
             steps->reference_global_batch > 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "target %s: the global batch scales with the cluster (local batch %d per rank), and the "
        "convergence model describes global batch %.15g only (no critical_batch); fit it from runs "
        "at several global batches (spotdnn profile fit), or plan a fixed global batch",
        p.target().Describe(), local_batch_, steps->reference_global_batch));
  }
  for (size_t k = 0; k < n; ++k) {
    const std::string& name = catalog_.types[k].name;
    if (p.max_counts[k] < 0 || p.max_counts[k] > predictor::kMaxInstancesPerType) {
      return absl::InvalidArgumentError(
          absl::StrFormat("max_counts[%d] = %d (%s): must be in [0, %d]", k, p.max_counts[k], name,
                          predictor::kMaxInstancesPerType));
    }
    if (p.min_counts[k] < 0 || p.min_counts[k] > p.max_counts[k]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("min_counts[%d] = %d (%s): must be in [0, max_counts = %d]", k,
                          p.min_counts[k], name, p.max_counts[k]));
    }
    if (p.max_counts[k] > 0 && !Usable(k)) {
      return absl::InvalidArgumentError(absl::StrFormat("max_counts[%d] = %d (%s): %s", k,
                                                        p.max_counts[k], name, UnusableReason(k)));
    }
  }
  if (p.max_workers < 0 || p.max_workers > predictor::kMaxClusterSize) {
    return absl::InvalidArgumentError(absl::StrFormat("max_workers = %d: must be in [0, %d]",
                                                      p.max_workers, predictor::kMaxClusterSize));
  }
  if (!(p.overhead_s >= 0) || !std::isfinite(p.overhead_s)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("overhead_s = %g: must be finite and >= 0", p.overhead_s));
  }
  return absl::OkStatus();
}

bool SyncPlanner::Score(const PlanProblem& problem, absl::Span<const int> counts,
                        Candidate& out) const {
  auto steps = StepsOf(problem);
  return steps.ok() && ScoreWith(problem, *steps, counts, out);
}

bool SyncPlanner::ScoreWith(const PlanProblem& problem, const predictor::SyncSteps& steps,
                            absl::Span<const int> counts, Candidate& out) const {
  auto step = scaling_ ? types_.StepEven(counts, local_batch_) : types_.Step(counts, global_batch_);
  if (!step.ok()) return false;
  predictor::Estimate e;
  int64_t ranks = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] == 0) continue;
    e.workers += counts[k];
    ranks += static_cast<int64_t>(counts[k]) * catalog_.types[k].gpus;
    e.price_per_hour += counts[k] * catalog_.types[k].spot_price_per_hour;
    e.on_demand_price_per_hour += counts[k] * catalog_.types[k].on_demand_price_per_hour;
  }
  const double batch =
      scaling_ ? static_cast<double>(ranks) * local_batch_ : static_cast<double>(global_batch_);
  if (!steps.CheckBatch(batch).ok()) return false;
  e.expected_iteration_time_s = step->step_s;
  e.cluster_speed = batch / step->step_s;
  e.wa_batch = batch;
  e.convergence_coefficient = 1;
  e.normalized_iterations = steps.At(batch);
  e.time_s = e.normalized_iterations * step->step_s;
  if (!std::isfinite(e.time_s)) return false;
  e.iterations_p10 = steps.At(batch, 0);
  e.iterations_p50 = e.normalized_iterations;
  e.iterations_p90 = steps.At(batch, 2);
  e.time_p10_s = e.iterations_p10 * step->step_s;
  e.time_p50_s = e.time_s;
  e.time_p90_s = e.iterations_p90 * step->step_s;
  e.has_spread = steps.has_spread;
  e.extrapolated = steps.extrapolated;
  e.data_best = steps.data_best.value_or(0);
  e.cost_usd = e.price_per_hour * e.time_s / 3600;
  e.on_demand_cost_usd = e.on_demand_price_per_hour * e.time_s / 3600;
  out.estimate = e;
  out.counts.assign(counts.begin(), counts.end());
  out.time_s = e.time_s + problem.overhead_s;
  out.cost_usd =
      out.time_s / 3600.0 * (problem.on_demand ? e.on_demand_price_per_hour : e.price_per_hour);
  return true;
}

PlanResult SyncPlanner::SolveExact(const PlanProblem& problem) const {
  const size_t n = catalog_.types.size();
  PlanResult result;
  auto target_steps = StepsOf(problem);
  if (!target_steps.ok()) return result;  // Validate refuses such a problem
  const predictor::SyncSteps& sync_steps = *target_steps;
  // Steps S(B) = k0 + k1 / B at the p50 (constant at a fixed global batch).
  const double k0 = sync_steps.fixed[1];
  const double k1 = sync_steps.per_batch[1];
  const int64_t batch = global_batch_;
  std::vector<double> price(n), speed(n), gpus(n);
  for (size_t k = 0; k < n; ++k) {
    price[k] = PriceOf(catalog_.types[k], problem.on_demand);
    speed[k] = types_.Usable(k) ? types_.Gpus(k) / types_.Group(k).per_sample_s : 0;
    gpus[k] = types_.Usable(k) ? types_.Gpus(k) : 0;
  }
  // Types by price per unit of speed (fixed) or per rank (scaling), for the cost bound's greedy.
  const std::vector<double>& per = scaling_ ? gpus : speed;
  std::vector<int> by_ratio(n);
  std::iota(by_ratio.begin(), by_ratio.end(), 0);
  std::sort(by_ratio.begin(), by_ratio.end(), [&](int a, int b) {
    return price[a] * per[b] < price[b] * per[a];  // p_a / v_a < p_b / v_b
  });

  StopPoll poll(problem.stop);
  std::vector<int> counts(problem.min_counts);
  std::vector<RankGroup> groups(n);
  Candidate scored;

  // Lower bounds on every completion of counts[0, j) with the free types in their ranges; false
  // when the subtree holds no cluster worth scoring.
  auto promising = [&](size_t j) {
    int64_t instances = 0, ranks = 0, capacity = 0, most_ranks = 0;
    int max_gpus = 0;
    double base_price = 0;
    double slowest_single = 0;  // every base rank computes on at least one sample
    double slowest_even = 0;    // scaling: every base rank computes on the local batch
    for (size_t k = 0; k < n; ++k) {
      const int base = k < j ? counts[k] : problem.min_counts[k];
      groups[k] = types_.Usable(k) ? types_.Group(k) : RankGroup{};
      groups[k].ranks = static_cast<int64_t>(k < j ? counts[k] : problem.max_counts[k]) *
                        (types_.Usable(k) ? types_.Gpus(k) : 0);
      most_ranks += groups[k].ranks;
      if (base == 0) continue;
      instances += base;
      ranks += static_cast<int64_t>(base) * types_.Gpus(k);
      capacity += static_cast<int64_t>(base) * types_.Gpus(k) * types_.Group(k).cap;
      max_gpus = std::max(max_gpus, types_.Gpus(k));
      base_price += base * price[k];
      const RankGroup& g = types_.Group(k);
      slowest_single = std::max(slowest_single, g.fixed_s + g.per_sample_s);
      slowest_even = std::max(slowest_even, g.fixed_s + g.per_sample_s * local_batch_);
    }
    if ((!scaling_ && ranks > batch) || ranks > predictor::kMaxClusterSize) return false;
    if (problem.max_workers > 0 && instances > problem.max_workers) return false;
    const double compute =
        scaling_ ? slowest_even
                 : std::max(slowest_single,
                            predictor::ComputeLowerBound(groups, batch, capacity >= batch));
    if (!std::isfinite(compute)) return false;
    double step = compute;
    for (size_t k = 0; k < n && instances > 0; ++k) {
      const int base = k < j ? counts[k] : problem.min_counts[k];
      if (base == 0) continue;
      auto allreduce = types_.AllReduceOf(k, static_cast<int>(instances), max_gpus);
      if (!allreduce.ok()) return false;  // no completion can span its instances either
      const double rising =
          *allreduce - (instances == 2 ? types_.Model(k).cross_pair_s : 0);  // e_2 may go
      step =
          std::max(step, predictor::OverlapSteps(compute, rising, types_.Model(k).overlap_gamma));
    }
    // The steps: constant at a fixed global batch; with a scaling one, at least those of the
    // largest global batch a completion may train.
    const double steps =
        scaling_ ? k0 + (most_ranks > 0 ? k1 / (static_cast<double>(local_batch_) *
                                                static_cast<double>(std::min<int64_t>(
                                                    most_ranks, predictor::kMaxClusterSize)))
                                        : 0)
                 : k0 + k1 / static_cast<double>(batch);
    const double time = steps * step + problem.overhead_s;
    // min over completions of (sum x p) / (sum x v), by the greedy over types by p / v (v: speed
    // at a fixed global batch, GPUs when it scales).
    double num = 0, den = 0;
    for (size_t k = 0; k < n; ++k) {
      const int base = k < j ? counts[k] : problem.min_counts[k];
      num += base * price[k];
      den += base * per[k];
    }
    for (int k : by_ratio) {
      if (static_cast<size_t>(k) < j || per[k] <= 0) continue;
      const int extra = problem.max_counts[k] - problem.min_counts[k];
      if (extra <= 0) continue;
      if (den <= 0 || price[k] * den < num * per[k]) {
        num += extra * price[k];
        den += extra * per[k];
      }
    }
    const double ratio = den > 0 ? num / den : 0;
    // Fixed: price x step >= B x ratio. Scaling: price x S(B) x step >= step x (k0 x price +
    // (k1 / b) x price per rank).
    const double least_work = scaling_ ? step * (k0 * base_price + k1 / local_batch_ * ratio)
                                       : steps * static_cast<double>(batch) * ratio;
    const double cost =
        std::max(base_price * time, least_work + base_price * problem.overhead_s) / 3600.0;
    if (time > problem.deadline_s * (1 + kTolerance)) return false;
    if (cost > problem.budget_usd * (1 + kTolerance)) return false;
    if (result.feasible) {
      if (problem.objective == Objective::kMinCost &&
          cost > result.best.cost_usd * (1 + kTolerance)) {
        return false;
      }
      if (problem.objective == Objective::kMinTime &&
          time > result.best.time_s * (1 + kTolerance)) {
        return false;
      }
    }
    return true;
  };

  auto search = [&](auto&& self, size_t j) -> void {
    if (!poll.Tick()) return;
    ++result.nodes;
    if (!promising(j)) return;
    if (j == n) {
      ++result.evaluated;
      if (ScoreWith(problem, sync_steps, counts, scored) && MeetsSlo(problem, scored) &&
          Better(scored, result.best, problem.objective)) {
        result.best = scored;
        result.feasible = true;
      }
      return;
    }
    for (int c = problem.min_counts[j]; c <= problem.max_counts[j]; ++c) {
      counts[j] = c;
      self(self, j + 1);
      if (!poll.status().ok()) return;
    }
    counts[j] = problem.min_counts[j];
  };
  search(search, 0);
  result.stopped = poll.status();
  return result;
}

absl::StatusOr<PlanResult> SyncPlanner::SolveExhaustive(const PlanProblem& problem,
                                                        uint64_t limit) const {
  const uint64_t size = SearchSpaceSize(problem);
  if (size > limit) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%d compositions within the quotas, more than the limit %d: lower the "
                        "quotas or raise the exhaustive limit",
                        size, limit));
  }
  PlanResult result;
  auto steps = StepsOf(problem);
  if (!steps.ok()) return steps.status();
  StopPoll poll(problem.stop);
  std::vector<int> counts(problem.min_counts);
  Candidate scored;
  while (true) {
    if (!poll.Tick()) break;
    const int64_t instances = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    if (problem.max_workers == 0 || instances <= problem.max_workers) {
      ++result.evaluated;
      if (ScoreWith(problem, *steps, counts, scored) && MeetsSlo(problem, scored) &&
          Better(scored, result.best, problem.objective)) {
        result.best = scored;
        result.feasible = true;
      }
    }
    size_t k = 0;  // the next composition, odometer-wise
    while (k < counts.size() && counts[k] == problem.max_counts[k]) {
      counts[k] = problem.min_counts[k];
      ++k;
    }
    if (k == counts.size()) break;
    ++counts[k];
  }
  result.stopped = poll.status();
  return result;
}

}  // namespace spotdnn::provisioner
