#include "provisioner/risk_planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace spotdnn::provisioner {
namespace {

absl::Status CheckProblem(const PlanModel& model, const PlanProblem& problem,
                          const RevocationModel& revocations) {
  if (auto s = model.Validate(problem); !s.ok()) return s;
  if (problem.objective != Objective::kMinCost) {
    return absl::InvalidArgumentError(
        "confidence: risk-aware plans are for the deadline mode (least cost by a deadline)");
  }
  if (!std::isfinite(problem.deadline_s)) {
    return absl::InvalidArgumentError(
        "confidence: a probability of meeting the deadline needs a deadline (slo.deadline_s)");
  }
  if (revocations.types.size() != model.catalog().types.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "revocation model has %d types; catalog \"%s\" has %d", revocations.types.size(),
        model.catalog().name, model.catalog().types.size()));
  }
  return absl::OkStatus();
}

// True when `a` is a better risk-aware choice than `b`: cheaper in expectation, then more
// reliable, then the plain order.
bool BetterInExpectation(const RiskCandidate& a, const RiskCandidate& b) {
  if (a.result.cost_usd.mean != b.result.cost_usd.mean) {
    return a.result.cost_usd.mean < b.result.cost_usd.mean;
  }
  if (a.result.p_meet_deadline != b.result.p_meet_deadline) {
    return a.result.p_meet_deadline > b.result.p_meet_deadline;
  }
  return Better(a.plan, b.plan, Objective::kMinCost);
}

void Accumulate(const SimulationResult& r, RiskPlanResult& out) {
  out.replans += r.replans;
  out.replans_solved += r.replans_solved;
}

}  // namespace

absl::Status ValidateRiskOptions(const RiskOptions& o) {
  if (!(o.confidence > 0 && o.confidence < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.confidence = %g: must be a probability strictly between 0 and 1", o.confidence));
  }
  if (o.screening_runs < 1 || o.screening_runs > kMaxSimulationRuns) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.screening_runs = %d: must be in [1, %d]", o.screening_runs,
                        kMaxSimulationRuns));
  }
  if (o.max_candidates < 1 || o.max_candidates > kMaxRiskCandidates) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.max_candidates = %d: must be in [1, %d]", o.max_candidates,
                        kMaxRiskCandidates));
  }
  if (o.max_full_evaluations < 1 || o.max_full_evaluations > kMaxRiskCandidates) {
    return absl::InvalidArgumentError(
        absl::StrFormat("simulation.max_full_evaluations = %d: must be in [1, %d]",
                        o.max_full_evaluations, kMaxRiskCandidates));
  }
  return absl::OkStatus();
}

absl::StatusOr<RiskPlanResult> PlanWithConfidence(const PerformanceModel& model,
                                                  const PlanProblem& problem,
                                                  const RevocationModel& revocations,
                                                  const SimulationOptions& simulation,
                                                  const RiskOptions& risk) {
  return PlanWithConfidence(ParameterServerPlanModel(model), problem, revocations, simulation,
                            risk);
}

absl::StatusOr<RiskPlanResult> PlanWithConfidence(const PlanModel& model,
                                                  const PlanProblem& problem,
                                                  const RevocationModel& revocations,
                                                  const SimulationOptions& simulation,
                                                  const RiskOptions& risk) {
  if (auto s = CheckProblem(model, problem, revocations); !s.ok()) return s;
  if (auto s = ValidateRiskOptions(risk); !s.ok()) return s;
  auto simulator = Simulator::Create(model, problem, revocations, simulation);
  if (!simulator.ok()) return simulator.status();
  Simulator& sim = **simulator;
  const double q = risk.confidence;

  RiskPlanResult out;
  const PlanResult plain = model.SolveExact(problem);
  if (!plain.stopped.ok()) return plain.stopped;  // the problem's stop check said stop
  out.evaluated += plain.evaluated;
  if (!plain.feasible) return out;
  out.plain_feasible = true;
  out.plain = plain.best;

  // Candidates: the frontier, and the frontiers without each revocable type it uses.
  std::map<std::vector<int>, RiskCandidate> pool;
  auto add_frontier = [&](const PlanProblem& p, const std::string& origin) -> absl::Status {
    uint64_t evaluated = 0;
    auto front = model.Frontier(p, Strategy::kExact, kDefaultExhaustiveLimit, &evaluated);
    if (!front.ok()) return front.status();
    out.evaluated += evaluated;
    for (const Candidate& c : *front) {
      pool.try_emplace(c.counts, RiskCandidate{.plan = c, .origin = origin});
    }
    return absl::OkStatus();
  };
  if (auto s = add_frontier(problem, "frontier"); !s.ok()) return s;
  pool.try_emplace(out.plain.counts, RiskCandidate{.plan = out.plain, .origin = "plain"});
  const auto& types = model.catalog().types;
  std::vector<bool> used(types.size(), false);
  for (const auto& [counts, c] : pool) {
    for (size_t k = 0; k < types.size(); ++k)
      used[k] = used[k] || counts[k] > problem.min_counts[k];
  }
  for (size_t k = 0; k < types.size(); ++k) {
    if (!used[k] || revocations.types[k].RevokedBy(problem.deadline_s) <= 0) continue;
    PlanProblem without = problem;
    without.max_counts[k] = problem.min_counts[k];
    if (auto s = add_frontier(without, absl::StrCat("frontier without ", types[k].name)); !s.ok()) {
      return s;
    }
  }
  std::vector<RiskCandidate> candidates;
  for (auto& [counts, c] : pool) candidates.push_back(std::move(c));
  std::sort(candidates.begin(), candidates.end(),
            [](const RiskCandidate& a, const RiskCandidate& b) {
              return Better(a.plan, b.plan, Objective::kMinCost);
            });
  // Too many for half the budget: the cheapest quarter of it, then evenly spaced picks up to the
  // fastest. The other half goes to the local search below.
  const size_t seeds = static_cast<size_t>(std::max(1, risk.max_candidates / 2));
  if (candidates.size() > seeds) {
    const size_t head = (seeds + 1) / 2;
    std::vector<RiskCandidate> kept(candidates.begin(), candidates.begin() + head);
    const size_t rest = candidates.size() - head, picks = seeds - head;
    for (size_t i = 0; i < picks; ++i) {
      const size_t at = head + (picks == 1 ? rest - 1 : i * (rest - 1) / (picks - 1));
      kept.push_back(candidates[at]);
    }
    candidates = std::move(kept);
  }

  // Screening, with the same seed for every candidate.
  const int full_runs = simulation.runs;
  const int screen_runs = std::min(risk.screening_runs, full_runs);
  const double margin = 2.5 * std::sqrt(q * (1 - q) / screen_runs) + 1.0 / screen_runs;
  std::map<std::vector<int>, size_t> index;  // counts -> position in `candidates`
  auto screen = [&](RiskCandidate& c) -> absl::Status {
    auto r = sim.Run(c.plan.counts, screen_runs, simulation.seed);
    if (!r.ok()) return r.status();
    c.screening = *r;
    Accumulate(*r, out);
    if (screen_runs == full_runs) {
      c.full = true;
      c.result = *r;
    }
    return absl::OkStatus();
  };
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (auto s = screen(candidates[i]); !s.ok()) return s;
    index[candidates[i].plan.counts] = i;
  }

  // Local search, best first: the expected cost of a plan is not ordered like its planned cost (a
  // re-plan after a revocation may move to a cheaper cluster), so the neighbours (one instance
  // more, fewer, or of another type) of every screened plan that is cheaper in expectation than
  // the best one reaching q are screened too, cheapest first, while the budget lasts. With no
  // plan reaching q yet, the most reliable plans are expanded first.
  std::vector<bool> expanded;
  Candidate scored;
  while (static_cast<int>(candidates.size()) < risk.max_candidates) {
    expanded.resize(candidates.size(), false);
    double incumbent = kInf;
    for (const RiskCandidate& c : candidates) {
      if (c.screening.p_meet_deadline >= q - margin) {
        incumbent = std::min(incumbent, c.screening.cost_usd.mean);
      }
    }
    int pick = -1;
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (expanded[i]) continue;
      const SimulationResult& r = candidates[i].screening;
      if (std::isfinite(incumbent)) {
        if (r.cost_usd.mean > incumbent) continue;
        if (pick < 0 || r.cost_usd.mean < candidates[pick].screening.cost_usd.mean) {
          pick = static_cast<int>(i);
        }
      } else if (pick < 0 || r.p_meet_deadline > candidates[pick].screening.p_meet_deadline) {
        pick = static_cast<int>(i);
      }
    }
    if (pick < 0) break;
    expanded[pick] = true;
    const std::vector<int> base = candidates[pick].plan.counts;
    std::vector<std::vector<int>> moves;
    const size_t n = base.size();
    for (size_t k = 0; k < n; ++k) {
      if (base[k] < problem.max_counts[k]) {
        moves.push_back(base);
        ++moves.back()[k];
      }
      if (base[k] > problem.min_counts[k]) {
        moves.push_back(base);
        --moves.back()[k];
        for (size_t l = 0; l < n; ++l) {
          if (l == k || base[l] >= problem.max_counts[l]) continue;
          moves.push_back(base);
          --moves.back()[k];
          ++moves.back()[l];
        }
      }
    }
    for (const std::vector<int>& counts : moves) {
      if (static_cast<int>(candidates.size()) >= risk.max_candidates) break;
      if (index.count(counts)) continue;
      int64_t total = 0;
      for (int x : counts) total += x;
      if (problem.max_workers > 0 && total > problem.max_workers) continue;
      if (!model.Score(problem, counts, scored) || !MeetsSlo(problem, scored)) continue;
      ++out.evaluated;
      candidates.push_back(RiskCandidate{.plan = scored, .origin = "local search"});
      index[counts] = candidates.size() - 1;
      if (auto s = screen(candidates.back()); !s.ok()) return s;
    }
  }
  out.candidates = static_cast<int>(candidates.size());
  auto full = [&](RiskCandidate& c) -> absl::Status {
    if (c.full) return absl::OkStatus();
    auto r = sim.Run(c.plan.counts, full_runs, simulation.seed);
    if (!r.ok()) return r.status();
    c.result = *r;
    c.full = true;
    ++out.full_evaluations;
    Accumulate(*r, out);
    return absl::OkStatus();
  };
  // The plain plan is always simulated in full (it is shown beside the choice).
  for (RiskCandidate& c : candidates) {
    if (c.plan.counts == out.plain.counts) {
      if (auto s = full(c); !s.ok()) return s;
      out.plain_risk = c.result;
    }
  }
  std::vector<RiskCandidate*> order;
  for (RiskCandidate& c : candidates) {
    if (c.screening.p_meet_deadline >= q - margin) order.push_back(&c);
  }
  std::sort(order.begin(), order.end(), [](const RiskCandidate* a, const RiskCandidate* b) {
    return a->screening.cost_usd.mean < b->screening.cost_usd.mean;
  });
  const RiskCandidate* best = nullptr;
  int full_left = risk.max_full_evaluations;
  for (RiskCandidate* c : order) {
    if (best != nullptr) {
      // Screening costs are estimates: stop once this one is clearly dearer than the best.
      const double se = c->screening.cost_usd.stddev / std::sqrt(static_cast<double>(screen_runs));
      if (c->screening.cost_usd.mean - 3 * se > best->result.cost_usd.mean) break;
    }
    if (!c->full) {
      if (full_left-- <= 0) break;
      if (auto s = full(*c); !s.ok()) return s;
    }
    if (c->result.p_meet_deadline >= q && (best == nullptr || BetterInExpectation(*c, *best))) {
      best = c;
    }
  }
  if (best != nullptr) {
    out.feasible = true;
    out.plan = best->plan;
    out.risk = best->result;
  } else {
    // The most reliable candidate, simulated in full.
    RiskCandidate* reliable = &candidates.front();
    for (RiskCandidate& c : candidates) {
      const double p = c.full ? c.result.p_meet_deadline : c.screening.p_meet_deadline;
      const double pr =
          reliable->full ? reliable->result.p_meet_deadline : reliable->screening.p_meet_deadline;
      if (p > pr) reliable = &c;
    }
    if (auto s = full(*reliable); !s.ok()) return s;
    out.most_reliable = reliable->plan;
    out.most_reliable_risk = reliable->result;
  }
  out.considered = std::move(candidates);
  return out;
}

absl::StatusOr<RiskPlanResult> PlanWithConfidenceBruteForce(const PerformanceModel& model,
                                                            const PlanProblem& problem,
                                                            const RevocationModel& revocations,
                                                            const SimulationOptions& simulation,
                                                            double confidence, uint64_t limit) {
  return PlanWithConfidenceBruteForce(ParameterServerPlanModel(model), problem, revocations,
                                      simulation, confidence, limit);
}

absl::StatusOr<RiskPlanResult> PlanWithConfidenceBruteForce(const PlanModel& model,
                                                            const PlanProblem& problem,
                                                            const RevocationModel& revocations,
                                                            const SimulationOptions& simulation,
                                                            double confidence, uint64_t limit) {
  if (auto s = CheckProblem(model, problem, revocations); !s.ok()) return s;
  if (!(confidence > 0 && confidence < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("confidence = %g: must be strictly between 0 and 1", confidence));
  }
  const uint64_t size = SearchSpaceSize(problem);
  if (size > limit) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "brute force would simulate up to %d compositions, above its limit of %d", size, limit));
  }
  auto simulator = Simulator::Create(model, problem, revocations, simulation);
  if (!simulator.ok()) return simulator.status();
  RiskPlanResult out;
  const PlanResult plain = model.SolveExact(problem);
  if (!plain.stopped.ok()) return plain.stopped;
  out.plain_feasible = plain.feasible;
  if (plain.feasible) out.plain = plain.best;
  std::vector<int> counts = problem.min_counts;
  const size_t n = counts.size();
  RiskCandidate best_candidate;
  bool have_best = false;
  Candidate c;
  while (true) {
    const int total = std::accumulate(counts.begin(), counts.end(), 0);
    if ((problem.max_workers == 0 || total <= problem.max_workers) &&
        model.Score(problem, counts, c) && MeetsSlo(problem, c)) {
      ++out.evaluated;
      auto r = (*simulator)->Run(counts);
      if (!r.ok()) return r.status();
      RiskCandidate rc{
          .plan = c, .origin = "brute force", .screening = *r, .full = true, .result = *r};
      Accumulate(*r, out);
      if (plain.feasible && counts == plain.best.counts) out.plain_risk = *r;
      if (r->p_meet_deadline >= confidence &&
          (!have_best || BetterInExpectation(rc, best_candidate))) {
        best_candidate = rc;
        have_best = true;
      }
      if (out.most_reliable.counts.empty() ||
          r->p_meet_deadline > out.most_reliable_risk.p_meet_deadline) {
        out.most_reliable = c;
        out.most_reliable_risk = *r;
      }
      out.considered.push_back(std::move(rc));
    }
    size_t k = 0;
    while (k < n && counts[k] == problem.max_counts[k]) {
      counts[k] = problem.min_counts[k];
      ++k;
    }
    if (k == n) break;
    ++counts[k];
  }
  out.candidates = static_cast<int>(out.considered.size());
  out.full_evaluations = out.candidates;
  if (have_best) {
    out.feasible = true;
    out.plan = best_candidate.plan;
    out.risk = best_candidate.result;
  }
  return out;
}

}  // namespace spotdnn::provisioner
