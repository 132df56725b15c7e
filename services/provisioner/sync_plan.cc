#include "services/provisioner/sync_plan.h"

#include <chrono>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "predictor/allreduce.h"
#include "provisioner/infeasibility.h"
#include "provisioner/simulator.h"
#include "provisioner/sync_planner.h"
#include "services/common/convert.h"
#include "services/provisioner/plan_inputs.h"

namespace spotdnn::services {
namespace {

using provisioner::Candidate;
using provisioner::kInf;
using provisioner::PlanProblem;
using provisioner::PlanResult;
using provisioner::SyncPlanner;

// A non-negative number where 0 means "none".
absl::StatusOr<double> Optional(absl::string_view field, double value) {
  if (!(std::isfinite(value) && value >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %g: must be a finite number >= 0 (0 = none)", field, value));
  }
  return value == 0 ? kInf : value;
}

// The options a synchronous plan does not plan with, refused naming the field.
absl::Status CheckSupported(const pb::PlanOptions& o) {
  constexpr absl::string_view kWhy = "not for a synchronous (all-reduce) workload";
  if (o.strategy() != pb::PLAN_STRATEGY_EXACT && o.strategy() != pb::PLAN_STRATEGY_EXHAUSTIVE) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.strategy = ", EnumLabel(o.strategy()),
                     ": a synchronous (all-reduce) workload is planned with exact or exhaustive"));
  }
  if (o.parameter_servers() != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("options.parameter_servers = %d: a synchronous (all-reduce) workload has "
                        "no parameter servers",
                        o.parameter_servers()));
  }
  if (o.bandwidth_margin() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.bandwidth_margin = %g: the parameter-server bandwidth margin is %s",
        o.bandwidth_margin(), kWhy));
  }
  return absl::OkStatus();
}

// The request's problem on `planner`'s catalog: SLO, quotas, running instances and limits.
absl::StatusOr<PlanProblem> ProblemOf(const pb::PlanRequest& request, const SyncPlanner& planner,
                                      const predictor::Target& target) {
  const pb::PlanOptions& o = request.options();
  const predictor::InstanceCatalog& catalog = planner.catalog();
  PlanProblem p = planner.DefaultProblem(target);
  auto deadline = Optional("slo.deadline_s", request.slo().deadline_s());
  if (!deadline.ok()) return deadline.status();
  p.deadline_s = *deadline;
  auto budget = Optional("slo.budget_usd", request.slo().budget_usd());
  if (!budget.ok()) return budget.status();
  p.budget_usd = *budget;
  for (int i = 0; i < o.quota_overrides_size(); ++i) {
    const pb::InstanceCount& q = o.quota_overrides(i);
    const int k = catalog.IndexOf(q.instance_type());
    if (k < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "options.quota_overrides[%d].instance_type = \"%s\": not in catalog \"%s\"", i,
          q.instance_type(), catalog.name));
    }
    if (q.count() < 0 || q.count() > predictor::kMaxInstancesPerType) {
      return absl::InvalidArgumentError(
          absl::StrFormat("options.quota_overrides[%d].count = %d (%s): must be in [0, %d]", i,
                          q.count(), q.instance_type(), predictor::kMaxInstancesPerType));
    }
    p.max_counts[k] = planner.Usable(k) ? q.count() : 0;
  }
  if (o.existing().instances_size() > 0) {
    auto existing = ToDomain(o.existing(), catalog, "options.existing");
    if (!existing.ok()) return existing.status();
    for (size_t k = 0; k < catalog.types.size(); ++k) {
      const int n = existing->counts[k];
      if (n > 0 && !planner.Usable(k)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("options.existing: %d of %s, which cannot be planned with: %s", n,
                            catalog.types[k].name, planner.UnusableReason(k)));
      }
      if (n > p.max_counts[k]) {
        return absl::InvalidArgumentError(
            absl::StrFormat("options.existing: %d of %s exceeds its quota %d", n,
                            catalog.types[k].name, p.max_counts[k]));
      }
    }
    p.min_counts = existing->counts;
  }
  if (o.max_cluster_size() < 0 || o.max_cluster_size() > predictor::kMaxClusterSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("options.max_cluster_size = %d: must be in [0, %d] (0 = no limit)",
                        o.max_cluster_size(), predictor::kMaxClusterSize));
  }
  p.max_workers = o.max_cluster_size();
  p.on_demand = o.on_demand_prices();
  p.overhead_s = o.revocation_overhead_s();
  p.objective = request.mode() == pb::PLAN_MODE_BUDGET ? provisioner::Objective::kMinTime
                                                       : provisioner::Objective::kMinCost;
  if (auto s = planner.Validate(p); !s.ok()) return s;
  return p;
}

// The cheapest (or, by the objective, fastest) plan of one instance type beside the running
// instances: the "cheapest homogeneous" baseline.
PlanResult Homogeneous(const SyncPlanner& planner, const PlanProblem& problem) {
  return provisioner::CheapestHomogeneous(problem,
                                          [&](absl::Span<const int> counts, Candidate& out) {
                                            return planner.Score(problem, counts, out);
                                          });
}

// What a plan shares with the others of the response: its strategy and the types left out.
struct PlanContext {
  const pb::PlanRequest& request;
  const predictor::WorkloadProfile& profile;
  const SyncPlanner& planner;
  const PlanProblem& problem;
  std::vector<std::string> excluded;
};

pb::Plan Infeasible(const PlanContext& in, pb::PlanStrategy strategy, std::string reason) {
  return InfeasiblePlan(strategy, std::move(reason), in.excluded);
}

// The restart a revocation costs the plan's job and its checkpoint interval: the request's
// options.simulation, else the profile's, else the simulator's defaults.
void SetRestart(const PlanContext& in, pb::Prediction* out) {
  const pb::SimulationOptions& so = in.request.options().simulation();
  out->set_restart_s(so.has_restart_s()
                         ? so.restart_s()
                         : in.profile.restart_s.value_or(provisioner::kDefaultRestartS));
  out->set_checkpoint_every_s(
      so.has_checkpoint_every_s()
          ? so.checkpoint_every_s()
          : in.profile.checkpoint_every_s.value_or(provisioner::kDefaultCheckpointEveryS));
}

// A scored cluster as a Plan, its prediction the split of the global batch on it.
absl::StatusOr<pb::Plan> ToPlan(const PlanContext& in, const Candidate& c,
                                pb::PlanStrategy strategy) {
  const predictor::InstanceCatalog& catalog = in.planner.catalog();
  pb::Plan plan;
  plan.set_feasible(true);
  const predictor::Cluster cluster{.counts = c.counts, .parameter_servers = 0};
  *plan.mutable_cluster() = ToProto(cluster, catalog);
  predictor::Cluster launch = cluster;
  for (size_t k = 0; k < launch.counts.size(); ++k) launch.counts[k] -= in.problem.min_counts[k];
  *plan.mutable_to_launch() = ToProto(launch, catalog);
  auto prediction =
      predictor::PredictAllReduce(in.profile, catalog, cluster, in.problem.target(),
                                  in.planner.local_batch(), in.planner.global_batch());
  if (!prediction.ok()) return prediction.status();
  *plan.mutable_prediction() = ToProto(*prediction, catalog);
  SetTargetOf(in.request.slo(), plan.mutable_prediction());
  SetRestart(in, plan.mutable_prediction());
  plan.set_strategy(strategy);
  plan.set_time_s(c.time_s);
  plan.set_cost_usd(c.cost_usd);
  plan.set_spot_cost_usd(c.time_s / 3600 * c.estimate.price_per_hour);
  plan.set_on_demand_cost_usd(c.time_s / 3600 * c.estimate.on_demand_price_per_hour);
  for (const std::string& e : in.excluded) plan.add_excluded_types(e);
  return plan;
}

double Millis(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

bool PlansSynchronously(const pb::PlanRequest& request, const pb::WorkloadProfile& workload) {
  if (request.sync() != pb::SYNC_KIND_UNSPECIFIED) {
    return request.sync() == pb::SYNC_KIND_ALLREDUCE;
  }
  return workload.sync() == pb::SYNC_KIND_ALLREDUCE;
}

absl::StatusOr<SyncPlanInputs> ToSyncPlanInputs(const pb::PlanRequest& request,
                                                const pb::WorkloadProfile& workload,
                                                const pb::InstanceCatalog& instance_catalog,
                                                uint64_t max_exhaustive_limit) {
  const pb::PlanOptions& o = request.options();
  if (auto s = CheckSupported(o); !s.ok()) return s;
  auto target = TargetOfMessage(request.slo(), "slo.");
  if (!target.ok()) return target.status();
  predictor::WorkloadProfile profile = ToDomain(workload);
  // The request's sync, or the profile's own kind.
  profile.sync = predictor::SyncKind::kAllReduce;
  if (auto s = profile.Validate(); !s.ok()) return s;
  const predictor::InstanceCatalog catalog = ToDomain(instance_catalog);
  if (auto s = catalog.Validate(); !s.ok()) return s;
  if (request.global_batch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("global_batch = %d: must be in [1, %d] (samples per step over every rank)",
                        request.global_batch(), predictor::kMaxGlobalBatch));
  }
  if (request.local_batch() < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("local_batch = %d: must be in [1, %d] (samples per GPU per step)",
                        request.local_batch(), predictor::kMaxBatchPerGpu));
  }
  // The request's global batch mode; else a global batch given makes it fixed; else the
  // profile's.
  if (request.global_batch_mode() == pb::GLOBAL_BATCH_SCALE) {
    profile.global_batch = predictor::GlobalBatch::kScale;
  } else if (request.global_batch_mode() == pb::GLOBAL_BATCH_FIXED || request.global_batch() != 0) {
    profile.global_batch = predictor::GlobalBatch::kFixed;
  }
  absl::StatusOr<SyncPlanner> planner = absl::UnknownError("unset");
  if (profile.global_batch == predictor::GlobalBatch::kScale) {
    if (request.global_batch() != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "global_batch = %d: with global_batch_mode = scale the global batch follows the "
          "cluster (every rank at local_batch samples); give one of the two",
          request.global_batch()));
    }
    const int local_batch =
        request.local_batch() != 0 ? request.local_batch() : profile.local_batch_size;
    if (local_batch == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "local_batch: the global batch scales with the cluster (global_batch = scale), so the "
          "plan needs every rank's local batch: give local_batch or declare the profile's "
          "local_batch_size (workload \"",
          profile.name, "\" declares none)"));
    }
    planner = SyncPlanner::CreateScaling(profile, catalog, local_batch);
  } else {
    if (request.local_batch() != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "local_batch = %d: a fixed global batch is split over the ranks by speed; give "
          "global_batch, or let the global batch scale (global_batch_mode = scale)",
          request.local_batch()));
    }
    const int global_batch =
        request.global_batch() != 0 ? request.global_batch() : profile.global_batch_size;
    if (global_batch == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "global_batch: a synchronous (all-reduce) plan needs the global batch (samples per step "
          "over every rank): give global_batch or declare the profile's global_batch_size "
          "(workload \"",
          profile.name, "\" declares none)"));
    }
    planner = SyncPlanner::Create(profile, catalog, global_batch);
  }
  if (!planner.ok()) return planner.status();
  auto problem = ProblemOf(request, *planner, *target);
  if (!problem.ok()) return problem.status();
  if (o.exhaustive_limit() > max_exhaustive_limit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.exhaustive_limit = %d: above the server's cap of %d clusters (0 = the default "
        "%d); use the exact strategy for larger searches",
        o.exhaustive_limit(), max_exhaustive_limit, provisioner::kDefaultExhaustiveLimit));
  }
  SyncPlanInputs out{.request = request, .profile = profile, .problem = *std::move(problem)};
  for (size_t k = 0; k < catalog.types.size(); ++k) {
    if (!planner->Usable(k)) {
      out.excluded.push_back(absl::StrCat(catalog.types[k].name, ": ", planner->UnusableReason(k)));
    }
  }
  out.model = std::make_shared<const provisioner::SyncPlanModel>(*std::move(planner));
  return out;
}

absl::StatusOr<pb::Plan> SyncPlanMessage(const SyncPlanInputs& in, const PlanProblem& problem,
                                         const Candidate& c, pb::PlanStrategy strategy) {
  const PlanContext context{.request = in.request,
                            .profile = in.profile,
                            .planner = in.model->planner(),
                            .problem = problem,
                            .excluded = in.excluded};
  return ToPlan(context, c, strategy);
}

absl::Status PlanSynchronous(const pb::PlanRequest& request, const pb::WorkloadProfile& workload,
                             const pb::InstanceCatalog& instance_catalog,
                             uint64_t max_exhaustive_limit, const provisioner::StopCheck& stop,
                             pb::PlanResponse* response) {
  auto inputs = ToSyncPlanInputs(request, workload, instance_catalog, max_exhaustive_limit);
  if (!inputs.ok()) return inputs.status();
  const pb::PlanOptions& o = request.options();
  const SyncPlanner* planner = &inputs->model->planner();
  PlanProblem* problem = &inputs->problem;
  problem->stop = stop;
  PlanContext in{.request = request,
                 .profile = inputs->profile,
                 .planner = *planner,
                 .problem = *problem,
                 .excluded = inputs->excluded};

  const bool exhaustive = o.strategy() == pb::PLAN_STRATEGY_EXHAUSTIVE;
  const pb::PlanStrategy strategy =
      exhaustive ? pb::PLAN_STRATEGY_EXHAUSTIVE : pb::PLAN_STRATEGY_EXACT;
  const auto start = std::chrono::steady_clock::now();
  PlanResult result;
  if (exhaustive) {
    auto all = planner->SolveExhaustive(*problem, o.exhaustive_limit() > 0
                                                      ? o.exhaustive_limit()
                                                      : provisioner::kDefaultExhaustiveLimit);
    if (!all.ok()) return all.status();
    result = *std::move(all);
  } else {
    result = planner->SolveExact(*problem);
  }
  const double ms = Millis(start);
  if (!result.stopped.ok()) return result.stopped;
  if (result.feasible) {
    auto plan = ToPlan(in, result.best, strategy);
    if (!plan.ok()) return plan.status();
    *response->mutable_plan() = *std::move(plan);
  } else {
    // Why: the fastest plan whatever the deadline and budget, and the cheapest by the deadline.
    auto why = provisioner::ExplainInfeasible(*inputs->model, *problem);
    if (!why.ok()) return why.status();
    *response->mutable_plan() = Infeasible(in, strategy, why->reason);
    if (why->fastest.feasible) {
      response->set_fastest_time_s(why->fastest.best.time_s);
      response->set_fastest_cost_usd(why->fastest.best.cost_usd);
    }
    if (provisioner::BudgetBinds(*problem, why->cheapest)) {
      response->set_cheapest_time_s(why->cheapest.best.time_s);
      response->set_cheapest_cost_usd(why->cheapest.best.cost_usd);
    }
  }
  response->mutable_plan()->set_solve_ms(ms);
  response->mutable_plan()->set_clusters_evaluated(result.evaluated);
  if (o.include_baselines()) {
    const PlanResult one = Homogeneous(*planner, *problem);
    if (!one.stopped.ok()) return one.stopped;
    pb::Plan* out = response->mutable_homogeneous_baseline();
    if (one.feasible) {
      auto plan = ToPlan(in, one.best, pb::PLAN_STRATEGY_HOMOGENEOUS);
      if (!plan.ok()) return plan.status();
      *out = *std::move(plan);
    } else {
      *out = Infeasible(in, pb::PLAN_STRATEGY_HOMOGENEOUS, "no plan of this kind meets the SLO");
    }
    out->set_clusters_evaluated(one.evaluated);
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::services
