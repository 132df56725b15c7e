#include "services/provisioner/provisioner_service.h"

#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "provisioner/infeasibility.h"
#include "provisioner/replan.h"
#include "provisioner/risk_planner.h"
#include "services/common/convert.h"
#include "services/common/request_check.h"
#include "services/common/request_size.h"
#include "services/common/server.h"
#include "services/provisioner/sync_plan.h"
#include "services/provisioner/zone_plan.h"

namespace spotdnn::services {
namespace {

using provisioner::Candidate;

double Millis(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

pb::PlanStrategy StrategyOf(provisioner::Strategy s) {
  switch (s) {
    case provisioner::Strategy::kSpotdnn:
      return pb::PLAN_STRATEGY_SPOTDNN;
    case provisioner::Strategy::kExhaustive:
      return pb::PLAN_STRATEGY_EXHAUSTIVE;
    case provisioner::Strategy::kExact:
      break;
  }
  return pb::PLAN_STRATEGY_EXACT;
}

// A scored candidate as a Plan message (feasible), with the model's numbers.
pb::Plan ToPlan(const PlanInputs& in, const Candidate& c, pb::PlanStrategy strategy) {
  const predictor::PerformanceModel& m = *in.model;
  pb::Plan plan;
  plan.set_feasible(true);
  predictor::Cluster cluster{.counts = c.counts, .parameter_servers = in.problem.parameter_servers};
  *plan.mutable_cluster() = ToProto(cluster, m.catalog());
  predictor::Cluster launch = cluster;
  for (size_t k = 0; k < launch.counts.size(); ++k) launch.counts[k] -= in.problem.min_counts[k];
  *plan.mutable_to_launch() = ToProto(launch, m.catalog());
  // The per-type breakdown comes from a fresh prediction of the same cluster; the cluster-level
  // numbers are the plan's own (they count only the rest of the job when re-planning).
  auto detailed = m.Predict(cluster, in.problem.target());
  if (detailed.ok()) {
    *plan.mutable_prediction() = ToProto(*detailed, m.catalog());
  }
  EstimateToProto(c.estimate, plan.mutable_prediction());
  plan.mutable_prediction()->set_parameter_servers(in.problem.parameter_servers);
  SetTarget(in.problem.target_loss, in.slo.target_iterations(), in.slo.target_epochs(),
            in.slo.dataset_size(), plan.mutable_prediction());
  if (in.slo.has_target_metric()) {
    *plan.mutable_prediction()->mutable_target_metric() = in.slo.target_metric();
  }
  plan.set_strategy(strategy);
  plan.set_time_s(c.time_s);
  plan.set_cost_usd(c.cost_usd);
  plan.set_spot_cost_usd(c.time_s / 3600 * c.estimate.price_per_hour);
  plan.set_on_demand_cost_usd(c.time_s / 3600 * c.estimate.on_demand_price_per_hour);
  for (const std::string& e : in.excluded) plan.add_excluded_types(e);
  return plan;
}

pb::Plan Infeasible(const PlanInputs& in, pb::PlanStrategy strategy, std::string reason) {
  return InfeasiblePlan(strategy, std::move(reason), in.excluded);
}

// A scored candidate as a Plan message, whichever way the workload trains; `problem` is the one
// it was scored for (a re-plan's rest of the job), by default the request's.
absl::StatusOr<pb::Plan> PlanOf(const PlanInputs& in, const Candidate& c,
                                pb::PlanStrategy strategy) {
  if (in.sync != nullptr) return SyncPlanMessage(*in.sync, in.problem, c, strategy);
  return ToPlan(in, c, strategy);
}

// The plan of the request's strategy (the exact one, the heuristic or every composition).
absl::StatusOr<provisioner::PlanResult> SolveInputs(const PlanInputs& in) {
  if (in.sync == nullptr) {
    return provisioner::Solve(*in.model, in.problem, in.strategy, in.exhaustive_limit);
  }
  return provisioner::SolveSync(in.sync->model->planner(), in.problem, in.strategy,
                                in.exhaustive_limit);
}

// Why no plan meets the request's SLO (provisioner/infeasibility.h).
absl::StatusOr<provisioner::Infeasibility> ExplainInfeasible(const PlanInputs& in) {
  return provisioner::ExplainInfeasible(*in.plan_model, in.problem);
}

// As Plan and Frontier answer an infeasible SLO: what the fastest plan would take and, when the
// budget binds, what the cheapest would.
template <typename Response>
void SetFastestAndCheapest(const PlanInputs& in, const provisioner::Infeasibility& why,
                           Response* response) {
  if (why.fastest.feasible) {
    response->set_fastest_time_s(why.fastest.best.time_s);
    response->set_fastest_cost_usd(why.fastest.best.cost_usd);
  }
  if (provisioner::BudgetBinds(in.problem, why.cheapest)) {
    response->set_cheapest_time_s(why.cheapest.best.time_s);
    response->set_cheapest_cost_usd(why.cheapest.best.cost_usd);
  }
}

// "TYPE: model, source" for each catalog type.
std::vector<std::string> Describe(const predictor::InstanceCatalog& catalog,
                                  const provisioner::RevocationModel& model) {
  std::vector<std::string> out;
  for (size_t k = 0; k < catalog.types.size(); ++k) {
    out.push_back(absl::StrCat(catalog.types[k].name, ": ", model.sources[k]));
  }
  return out;
}

absl::Status CheckRevocable(const predictor::InstanceCatalog& catalog,
                            const provisioner::RevocationModel& model, absl::string_view field) {
  if (model.AnyRevocable()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, ": no instance type of catalog \"", catalog.name,
      "\" can be revoked under the revocation model, so there is nothing to simulate; give "
      "lifetimes (options.simulation.lifetimes or lifetime_groups) or a catalog whose types have "
      "interruption_rate_per_hour or lifetimes (`spotdnn catalog hazards` writes them)"));
}

std::string Counts(const predictor::InstanceCatalog& catalog, const std::vector<int>& counts) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] > 0) parts.push_back(absl::StrCat(catalog.types[k].name, "=", counts[k]));
  }
  return parts.empty() ? std::string("-") : absl::StrJoin(parts, ",");
}

}  // namespace

ProvisionerServiceImpl::ProvisionerServiceImpl(std::shared_ptr<const DataRegistry> registry,
                                               ProvisionerOptions options)
    : models_(std::move(registry)), options_(options) {
  // Each method refuses a request larger than its limits allow before parsing it.
  for (auto [index, handler] :
       RequestSizeLimits<pb::Provisioner::Service>(this, pb::Provisioner::service_full_name())
           .Unary("Plan", &pb::Provisioner::Service::Plan)
           .Unary("Replan", &pb::Provisioner::Service::Replan)
           .Unary("Frontier", &pb::Provisioner::Service::Frontier)
           .Unary("Simulate", &pb::Provisioner::Service::Simulate)
           .Take()) {
    MarkMethodStreamed(index, handler);
  }
}

absl::StatusOr<PlanInputs> ProvisionerServiceImpl::Inputs(
    const grpc::ServerContext* context, const google::protobuf::Message& request,
    const pb::WorkloadRef& workload, const pb::CatalogRef& catalog, const pb::Slo& slo,
    const pb::PlanOptions& options, absl::string_view existing_field, pb::SyncKind sync,
    int global_batch, bool sync_needs_model) {
  if (auto s = CheckRequest(request); !s.ok()) return s;
  if (sync != pb::SYNC_KIND_PS) {
    auto loaded = models_.Load(workload, catalog);
    if (!loaded.ok()) return loaded.status();
    const bool synchronous =
        sync == pb::SYNC_KIND_ALLREDUCE || loaded->first.sync() == pb::SYNC_KIND_ALLREDUCE;
    if (synchronous && (!sync_needs_model || loaded->first.allreduce_size() > 0)) {
      // The synchronous planner, with the request in Plan's form.
      pb::PlanRequest as_plan;
      *as_plan.mutable_workload() = workload;
      *as_plan.mutable_catalog() = catalog;
      *as_plan.mutable_slo() = slo;
      *as_plan.mutable_options() = options;
      as_plan.set_sync(pb::SYNC_KIND_ALLREDUCE);
      as_plan.set_global_batch(global_batch);
      auto sync_inputs =
          ToSyncPlanInputs(as_plan, loaded->first, loaded->second, options_.max_exhaustive_limit);
      if (!sync_inputs.ok()) return sync_inputs.status();
      if (sync_inputs->model->planner().scaling()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "workload \"", loaded->first.name(),
            "\": its global batch follows the cluster (global_batch = scale); revocation "
            "simulations, risk-aware plans, frontiers and re-plans of a synchronous workload are "
            "made at a fixed global batch: give global_batch"));
      }
      PlanInputs in = ToPlanInputs(*std::move(sync_inputs));
      in.problem.stop =
          CallStopCheck(context, options_.max_solve_time, "the search", "--max_solve_time");
      return in;
    }
  }
  if (global_batch != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "global_batch = ", global_batch,
        ": a parameter-server workload takes its batch from the profile; a global batch is for a "
        "synchronous (all-reduce) one"));
  }
  auto in = ToPlanInputs(models_, workload, catalog, slo, options, existing_field,
                         options_.max_exhaustive_limit);
  if (!in.ok()) return in.status();
  in->problem.stop =
      CallStopCheck(context, options_.max_solve_time, "the search", "--max_solve_time");
  return in;
}

grpc::Status ProvisionerServiceImpl::Plan(grpc::ServerContext* context,
                                          const pb::PlanRequest* request,
                                          pb::PlanResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  auto plan_one = [&](const pb::PlanRequest& r, pb::PlanResponse* out) {
    return PlanInCatalog(context, &r, out);
  };
  auto loaded = models_.Load(request->workload(), request->catalog());
  if (!loaded.ok()) return ToGrpc(plan_one(*request, response));  // says what is wrong with it
  const bool synchronous =
      request->sync() != pb::SYNC_KIND_PS && PlansSynchronously(*request, loaded->first);
  return ToGrpc(PlanAcrossZones(*request, loaded->second, synchronous, plan_one, response));
}

absl::Status ProvisionerServiceImpl::PlanInCatalog(grpc::ServerContext* context,
                                                   const pb::PlanRequest* request,
                                                   pb::PlanResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return s;
  if (request->sync() != pb::SYNC_KIND_PS) {
    // A synchronous workload (the request's sync, or the profile's) has its own planner.
    auto loaded = models_.Load(request->workload(), request->catalog());
    if (!loaded.ok()) return loaded.status();
    if (PlansSynchronously(*request, loaded->first)) {
      if (auto s = PlanSynchronous(
              *request, loaded->first, loaded->second, options_.max_exhaustive_limit,
              CallStopCheck(context, options_.max_solve_time, "the search", "--max_solve_time"),
              response);
          !s.ok() || request->options().confidence() == 0) {
        return s;
      }
      auto in = Inputs(context, *request, request->workload(), request->catalog(), request->slo(),
                       request->options(), "options.existing", pb::SYNC_KIND_ALLREDUCE,
                       request->global_batch());
      if (!in.ok()) return in.status();
      return PlanWithConfidence(*request, *in, response);
    }
  }
  if (request->global_batch() != 0 || request->local_batch() != 0 ||
      request->global_batch_mode() != pb::GLOBAL_BATCH_UNSPECIFIED) {
    const std::string field =
        request->global_batch() != 0 ? absl::StrCat("global_batch = ", request->global_batch())
        : request->local_batch() != 0
            ? absl::StrCat("local_batch = ", request->local_batch())
            : absl::StrCat("global_batch_mode = ", EnumLabel(request->global_batch_mode()));
    return absl::InvalidArgumentError(
        absl::StrCat(field,
                     ": a parameter-server workload takes its batch from the profile; a local or "
                     "global batch is for a synchronous (all-reduce) one"));
  }
  // A parameter-server plan: the synchronous one was answered above.
  auto in = Inputs(context, *request, request->workload(), request->catalog(), request->slo(),
                   request->options(), "options.existing", pb::SYNC_KIND_PS);
  if (!in.ok()) return in.status();
  in->problem.objective = request->mode() == pb::PLAN_MODE_BUDGET
                              ? provisioner::Objective::kMinTime
                              : provisioner::Objective::kMinCost;
  const pb::PlanStrategy strategy = StrategyOf(in->strategy);
  const auto start = std::chrono::steady_clock::now();
  auto result = provisioner::Solve(*in->model, in->problem, in->strategy, in->exhaustive_limit);
  const double ms = Millis(start);
  if (!result.ok()) return result.status();
  if (result->feasible) {
    *response->mutable_plan() = ToPlan(*in, result->best, strategy);
  } else {
    auto why = ExplainInfeasible(*in);
    if (!why.ok()) return why.status();
    *response->mutable_plan() = Infeasible(*in, strategy, why->reason);
    SetFastestAndCheapest(*in, *why, response);
  }
  response->mutable_plan()->set_solve_ms(ms);
  response->mutable_plan()->set_clusters_evaluated(result->evaluated);
  if (request->options().include_baselines()) {
    absl::Status stopped;
    auto baseline = [&](const provisioner::PlanResult& r, pb::PlanStrategy name, pb::Plan* out) {
      if (!r.stopped.ok()) stopped = r.stopped;
      *out = r.feasible ? ToPlan(*in, r.best, name)
                        : Infeasible(*in, name, "no plan of this kind meets the SLO");
      out->set_clusters_evaluated(r.evaluated);
    };
    // The heuristic scores about L^2 windows of an L-instance list: too many for huge quotas.
    if (auto s = provisioner::CheckSpotdnnSize(*in->model, in->problem); !s.ok()) {
      pb::Plan* skipped = response->mutable_spotdnn_baseline();
      *skipped = Infeasible(*in, pb::PLAN_STRATEGY_SPOTDNN, std::string(s.message()));
      skipped->set_skipped(true);
    } else {
      baseline(provisioner::SolveSpotdnn(*in->model, in->problem), pb::PLAN_STRATEGY_SPOTDNN,
               response->mutable_spotdnn_baseline());
    }
    baseline(provisioner::CheapestHomogeneous(*in->model, in->problem),
             pb::PLAN_STRATEGY_HOMOGENEOUS, response->mutable_homogeneous_baseline());
    if (!stopped.ok()) return stopped;
  }
  if (request->options().confidence() != 0) {
    return PlanWithConfidence(*request, *in, response);
  }
  return absl::OkStatus();
}

absl::Status ProvisionerServiceImpl::PlanWithConfidence(const pb::PlanRequest& request,
                                                        const PlanInputs& in,
                                                        pb::PlanResponse* response) {
  const double q = request.options().confidence();
  if (!(q > 0 && q < 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.confidence = %g: must be strictly between 0 and 1 (0 = a plain plan)", q));
  }
  if (request.mode() != pb::PLAN_MODE_DEADLINE) {
    return absl::InvalidArgumentError(
        absl::StrFormat("options.confidence = %g: risk-aware plans are for the deadline mode", q));
  }
  if (!std::isfinite(in.problem.deadline_s)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.confidence = %g: needs slo.deadline_s (the probability is of meeting it)", q));
  }
  const provisioner::PlanModel& m = *in.plan_model;
  const pb::SimulationOptions& so = request.options().simulation();
  auto revocations = RevocationModelOf(models_.registry(), request.catalog(), m.catalog(), so);
  if (!revocations.ok()) return revocations.status();
  if (auto s = CheckRevocable(m.catalog(), *revocations, "options.confidence"); !s.ok()) return s;
  auto sim = SimulationOptionsOf(in, so, kMaxServiceSearchRuns);
  if (!sim.ok()) return sim.status();
  provisioner::RiskOptions risk{.confidence = q};
  if (so.screening_runs() > 0) {
    if (so.screening_runs() > static_cast<uint32_t>(kMaxServiceSearchRuns)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("options.simulation.screening_runs = %d: must be at most %d",
                          so.screening_runs(), kMaxServiceSearchRuns));
    }
    risk.screening_runs = static_cast<int>(so.screening_runs());
  }
  if (so.max_candidates() > static_cast<uint32_t>(kMaxServiceCandidates)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("options.simulation.max_candidates = %d: must be at most %d",
                        so.max_candidates(), kMaxServiceCandidates));
  }
  if (so.max_candidates() > 0) risk.max_candidates = static_cast<int>(so.max_candidates());
  for (const std::string& d : Describe(m.catalog(), *revocations)) {
    response->add_revocation_models(d);
  }
  const auto start = std::chrono::steady_clock::now();
  auto result = provisioner::PlanWithConfidence(m, in.problem, *revocations, *sim, risk);
  const double ms = Millis(start);
  if (!result.ok()) return result.status();
  if (!result->plain_feasible) return absl::OkStatus();  // the plain answer already says why
  constexpr pb::PlanStrategy kRiskAware = pb::PLAN_STRATEGY_RISK_AWARE;
  // The plain plan the risk-aware search started from is the exact one (whatever strategy the
  // request named for the plain answer).
  auto plain = PlanOf(in, result->plain, pb::PLAN_STRATEGY_EXACT);
  if (!plain.ok()) return plain.status();
  *response->mutable_plain_plan() = *std::move(plain);
  RiskToProto(result->plain_risk, response->mutable_plain_plan()->mutable_risk());
  if (result->feasible) {
    auto chosen = PlanOf(in, result->plan, kRiskAware);
    if (!chosen.ok()) return chosen.status();
    *response->mutable_plan() = *std::move(chosen);
    RiskToProto(result->risk, response->mutable_plan()->mutable_risk());
  } else {
    *response->mutable_plan() = Infeasible(
        in, kRiskAware,
        absl::StrFormat("no candidate plan meets the deadline in at least %g of the simulated "
                        "runs; the most reliable, %s, meets it in %.4f (95%% interval %.4f-%.4f) "
                        "for an expected $%.4f",
                        q, Counts(m.catalog(), result->most_reliable.counts),
                        result->most_reliable_risk.p_meet_deadline,
                        result->most_reliable_risk.p_meet_deadline_low,
                        result->most_reliable_risk.p_meet_deadline_high,
                        result->most_reliable_risk.cost_usd.mean));
    auto reliable = PlanOf(in, result->most_reliable, kRiskAware);
    if (!reliable.ok()) return reliable.status();
    *response->mutable_most_reliable() = *std::move(reliable);
    RiskToProto(result->most_reliable_risk, response->mutable_most_reliable()->mutable_risk());
  }
  response->mutable_plan()->set_solve_ms(ms);
  response->mutable_plan()->set_clusters_evaluated(result->evaluated);
  response->set_risk_search(absl::StrFormat(
      "%d candidates simulated with %d runs each (seed %d), %d of them again with %d; the first "
      "from the exact time/cost frontiers (with and without each revocable type), the rest by a "
      "local search around the cheapest in expectation: a heuristic over the candidates, exact "
      "under the model within them; %d re-plans, %d solved",
      result->candidates, std::min(risk.screening_runs, sim->runs), sim->seed,
      result->full_evaluations, sim->runs, result->replans, result->replans_solved));
  return absl::OkStatus();
}

grpc::Status ProvisionerServiceImpl::Replan(grpc::ServerContext* context,
                                            const pb::ReplanRequest* request,
                                            pb::ReplanResponse* response) {
  pb::PlanOptions options = request->options();
  *options.mutable_existing() = request->survivors();
  auto in = Inputs(context, *request, request->workload(), request->catalog(), request->slo(),
                   options, "survivors", request->sync(), request->global_batch());
  if (!in.ok()) return ToGrpc(in.status());
  const pb::JobProgress& p = request->progress();
  provisioner::JobProgress progress;
  if (p.elapsed_s() < 0 || p.normalized_iterations_done() < 0) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "progress.elapsed_s = %g, progress.normalized_iterations_done = %g: must be >= 0",
        p.elapsed_s(), p.normalized_iterations_done())));
  }
  progress.elapsed_s = p.elapsed_s();
  if (p.current_loss() != 0) {
    if (!std::isfinite(p.current_loss())) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
          "progress.current_loss = %g: must be a finite number", p.current_loss())));
    }
    progress.current_loss = p.current_loss();
  } else if (p.cluster_before().instances_size() > 0) {
    auto before =
        ToDomain(p.cluster_before(), in->plan_model->catalog(), "progress.cluster_before");
    if (!before.ok()) return ToGrpc(before.status());
    progress.cluster_before = before->counts;
    progress.iterations_done = p.normalized_iterations_done();
  } else if (in->problem.target_kind != predictor::Target::Kind::kLoss) {
    progress.iterations_done = p.normalized_iterations_done();
  }
  const auto start = std::chrono::steady_clock::now();
  auto result = in->plan_model->Replan(in->problem, progress, in->strategy, in->exhaustive_limit,
                                       /*find_fastest=*/true);
  const double ms = Millis(start);
  if (!result.ok()) return ToGrpc(result.status());
  const pb::PlanStrategy strategy = StrategyOf(in->strategy);
  if (!request->slo().has_target_metric()) in->problem.target_loss = request->slo().target_loss();
  // The plan's prediction covers the rest of the job: what is left of an iterations or samples
  // target (a metric target re-plans as the global steps left of it).
  if (in->problem.target_kind == predictor::Target::Kind::kMetric) {
    in->problem.target_kind = predictor::Target::Kind::kIterations;
  }
  if (in->problem.target_kind != predictor::Target::Kind::kLoss) {
    in->problem.target_amount = result->remaining_amount;
  }
  if (result->feasible) {
    auto plan = PlanOf(*in, result->plan, strategy);
    if (!plan.ok()) return ToGrpc(plan.status());
    *response->mutable_plan() = *std::move(plan);
  } else {
    std::string reason =
        std::isfinite(result->best_finish_s)
            ? absl::StrFormat(
                  "the rest of the job cannot meet the deadline (%.1f s left); the best "
                  "achievable finish is %.1f s after the job started",
                  result->remaining_s, result->best_finish_s)
        : in->problem.target_kind == predictor::Target::Kind::kLoss
            ? std::string("no cluster within the quotas reaches the target loss any more")
            : absl::StrCat("no cluster within the quotas can train the remaining ",
                           in->problem.target().Describe());
    *response->mutable_plan() = Infeasible(*in, strategy, reason);
    response->set_best_finish_time_s(result->best_finish_s);
  }
  response->mutable_plan()->set_solve_ms(ms);
  response->mutable_plan()->set_clusters_evaluated(result->evaluated);
  response->set_remaining_time_s(result->remaining_s);
  return grpc::Status::OK;
}

grpc::Status ProvisionerServiceImpl::Frontier(grpc::ServerContext* context,
                                              const pb::FrontierRequest* request,
                                              pb::FrontierResponse* response) {
  if (const pb::PlanOptions& o = request->options();
      !o.zone().empty() || !o.region().empty() || o.avoid_zones_size() > 0) {
    // The frontier is of the catalog as it is (its types at their own prices).
    return ToGrpc(absl::InvalidArgumentError(
        absl::StrCat(!o.zone().empty()     ? "options.zone"
                     : !o.region().empty() ? "options.region"
                                           : "options.avoid_zones",
                     ": a frontier is not placed in zones; Plan places a plan")));
  }
  auto in =
      Inputs(context, *request, request->workload(), request->catalog(), request->slo(),
             request->options(), "options.existing", request->sync(), request->global_batch());
  if (!in.ok()) return ToGrpc(in.status());
  const pb::PlanStrategy strategy = StrategyOf(in->strategy);
  const auto start = std::chrono::steady_clock::now();
  uint64_t evaluated = 0;
  auto front =
      in->plan_model->Frontier(in->problem, in->strategy, in->exhaustive_limit, &evaluated);
  const double ms = Millis(start);
  if (!front.ok()) return ToGrpc(front.status());
  for (const Candidate& c : *front) {
    auto plan = PlanOf(*in, c, strategy);
    if (!plan.ok()) return ToGrpc(plan.status());
    plan->set_solve_ms(ms);
    plan->set_clusters_evaluated(evaluated);
    *response->add_plans() = *std::move(plan);
  }
  if (request->simulate() && !front->empty()) {
    const provisioner::PlanModel& m = *in->plan_model;
    const pb::SimulationOptions& so = request->options().simulation();
    if (!std::isfinite(in->problem.deadline_s)) {
      return ToGrpc(absl::InvalidArgumentError(
          "simulate: needs slo.deadline_s (the probability is of meeting it)"));
    }
    if (front->size() > static_cast<size_t>(kMaxServiceFrontierSimulations)) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
          "simulate: the frontier has %d plans, more than the %d that may be simulated; bound it "
          "with slo.budget_usd or options.max_cluster_size",
          front->size(), kMaxServiceFrontierSimulations)));
    }
    auto revocations = RevocationModelOf(models_.registry(), request->catalog(), m.catalog(), so);
    if (!revocations.ok()) return ToGrpc(revocations.status());
    if (auto st = CheckRevocable(m.catalog(), *revocations, "simulate"); !st.ok()) {
      return ToGrpc(st);
    }
    auto sim = SimulationOptionsOf(*in, so, kMaxServiceSearchRuns);
    if (!sim.ok()) return ToGrpc(sim.status());
    auto simulator = provisioner::Simulator::Create(m, in->problem, *revocations, *sim);
    if (!simulator.ok()) return ToGrpc(simulator.status());
    for (size_t i = 0; i < front->size(); ++i) {
      auto r = (*simulator)->Run((*front)[i].counts);
      if (!r.ok()) return ToGrpc(r.status());
      RiskToProto(*r, response->mutable_plans(static_cast<int>(i))->mutable_risk());
    }
    for (const std::string& d : Describe(m.catalog(), *revocations)) {
      response->add_revocation_models(d);
    }
  }
  if (front->empty()) {
    // As Plan answers an infeasible SLO: why, and what the fastest plan would take.
    auto why = ExplainInfeasible(*in);
    if (!why.ok()) return ToGrpc(why.status());
    response->set_reason(why->reason);
    SetFastestAndCheapest(*in, *why, response);
  }
  return grpc::Status::OK;
}

grpc::Status ProvisionerServiceImpl::Simulate(grpc::ServerContext* context,
                                              const pb::SimulateRequest* request,
                                              pb::SimulateResponse* response) {
  if (auto s = CheckRequest(*request); !s.ok()) return ToGrpc(s);
  pb::Slo slo = request->slo();
  if (request->iterations() != 0) {
    // The job is `iterations` normalized iterations on the cluster: its target loss is the
    // model's loss after them.
    if (!(std::isfinite(request->iterations()) && request->iterations() > 0)) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
          "iterations = %g: must be a positive number (or 0 to use slo.target_loss)",
          request->iterations())));
    }
    if (request->cluster().instances_size() == 0) {
      return ToGrpc(absl::InvalidArgumentError(
          "iterations: needs a cluster (the loss after them depends on the cluster)"));
    }
  }
  if (request->iterations() != 0 && request->options().simulation().sync() != pb::SYNC_KIND_PS) {
    // A synchronous workload with an all-reduce model (simulated with its own planner, below)
    // trains `iterations` steps, whatever the cluster.
    auto loaded = models_.Load(request->workload(), request->catalog());
    if (!loaded.ok()) return ToGrpc(loaded.status());
    const pb::SyncKind sync = request->options().simulation().sync();
    if ((sync == pb::SYNC_KIND_ALLREDUCE || loaded->first.sync() == pb::SYNC_KIND_ALLREDUCE) &&
        loaded->first.allreduce_size() > 0) {
      slo.set_target_iterations(request->iterations());
    }
  }
  if (request->iterations() != 0 && slo.target_iterations() == 0) {
    auto model = models_.Resolve(request->workload(), request->catalog(),
                                 {.bandwidth_margin = request->options().bandwidth_margin()});
    if (!model.ok()) return ToGrpc(model.status());
    auto cluster = ToDomain(request->cluster(), (*model)->catalog(), "cluster");
    if (!cluster.ok()) return ToGrpc(cluster.status());
    auto loss = provisioner::LossAfterIterations(**model, cluster->counts, request->iterations(),
                                                 std::max(1, cluster->parameter_servers));
    if (!loss.ok()) return ToGrpc(loss.status());
    slo.set_target_loss(*loss);
  }
  if (!(slo.deadline_s() > 0)) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
        "slo.deadline_s = %g: the simulation needs a deadline (the probability is of meeting it)",
        slo.deadline_s())));
  }
  // A synchronous workload with an all-reduce model is simulated with its own planner; a
  // parameter-server one asked to (options.simulation.sync) pays the restarts at its model's
  // speeds.
  auto in = Inputs(context, *request, request->workload(), request->catalog(), slo,
                   request->options(), "options.existing", request->options().simulation().sync(),
                   request->options().global_batch(), /*sync_needs_model=*/true);
  if (!in.ok()) return ToGrpc(in.status());
  // The plan search, the re-plans and the runs stop at the call's deadline or the server's limit.
  in->problem.stop =
      CallStopCheck(context, options_.max_solve_time, "the simulation", "--max_solve_time");
  const provisioner::PlanModel& m = *in->plan_model;
  response->set_target_loss(in->problem.target_kind == predictor::Target::Kind::kLoss
                                ? in->problem.target_loss
                                : slo.target_loss());
  std::vector<int> counts;
  pb::PlanStrategy strategy = pb::PLAN_STRATEGY_GIVEN;
  if (request->cluster().instances_size() > 0) {
    auto cluster = ToDomain(request->cluster(), m.catalog(), "cluster");
    if (!cluster.ok()) return ToGrpc(cluster.status());
    counts = cluster->counts;
    for (size_t k = 0; k < counts.size(); ++k) {
      if (counts[k] < in->problem.min_counts[k]) {
        return ToGrpc(absl::InvalidArgumentError(
            absl::StrFormat("cluster: %d of %s, fewer than the %d in options.existing", counts[k],
                            m.catalog().types[k].name, in->problem.min_counts[k])));
      }
    }
  } else {
    strategy = StrategyOf(in->strategy);
    auto plan = SolveInputs(*in);
    if (!plan.ok()) return ToGrpc(plan.status());
    if (!plan->feasible) {
      auto why = ExplainInfeasible(*in);
      if (!why.ok()) return ToGrpc(why.status());
      *response->mutable_plan() = Infeasible(*in, strategy, why->reason);
      return grpc::Status::OK;
    }
    counts = plan->best.counts;
  }
  // The cluster scored without revocations, and why it misses the SLO when it does.
  auto score = [&]() -> absl::Status {
    Candidate c;
    if (!m.Score(in->problem, counts, c)) return m.ScoreError(in->problem, counts, c);
    auto plan = PlanOf(*in, c, strategy);
    if (!plan.ok()) return plan.status();
    *response->mutable_plan() = *std::move(plan);
    if (!provisioner::MeetsSlo(in->problem, c)) {
      response->mutable_plan()->set_feasible(false);
      response->mutable_plan()->set_reason(absl::StrFormat(
          "even without revocations this cluster does not meet the SLO: %.1f s (deadline %.1f s) "
          "for $%.4f",
          c.time_s, in->problem.deadline_s, c.cost_usd));
    }
    return absl::OkStatus();
  };
  if (request->plan_only()) return ToGrpc(score());
  auto revocations = RevocationModelOf(models_.registry(), request->catalog(), m.catalog(),
                                       request->options().simulation());
  if (!revocations.ok()) return ToGrpc(revocations.status());
  if (auto st = CheckRevocable(m.catalog(), *revocations, "simulate"); !st.ok()) return ToGrpc(st);
  for (const std::string& d : Describe(m.catalog(), *revocations)) {
    response->add_revocation_models(d);
  }
  auto sim = SimulationOptionsOf(*in, request->options().simulation(), kMaxServiceSimulateRuns);
  if (!sim.ok()) return ToGrpc(sim.status());
  auto simulator = provisioner::Simulator::Create(m, in->problem, *revocations, *sim);
  if (!simulator.ok()) return ToGrpc(simulator.status());
  const auto start = std::chrono::steady_clock::now();
  auto r = (*simulator)->Run(counts);
  const double ms = Millis(start);
  if (!r.ok()) {
    return ToGrpc(absl::Status(r.status().code(), absl::StrCat("cluster: ", r.status().message())));
  }
  if (auto s = score(); !s.ok()) return ToGrpc(s);
  RiskToProto(*r, response->mutable_plan()->mutable_risk());
  response->mutable_plan()->set_solve_ms(ms);
  return grpc::Status::OK;
}

}  // namespace spotdnn::services
