#include "services/provisioner/provisioner_service.h"

#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "provisioner/replan.h"
#include "services/common/convert.h"
#include "services/common/request_check.h"
#include "services/common/server.h"

namespace spotdnn::services {
namespace {

using provisioner::Candidate;
using provisioner::kInf;

// A non-negative number where 0 means "none".
absl::StatusOr<double> Optional(absl::string_view field, double value) {
  if (!(std::isfinite(value) && value >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %g: must be a finite number >= 0 (0 = none)", field, value));
  }
  return value == 0 ? kInf : value;
}

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
  plan.set_strategy(strategy);
  plan.set_time_s(c.time_s);
  plan.set_cost_usd(c.cost_usd);
  plan.set_spot_cost_usd(c.time_s / 3600 * c.estimate.price_per_hour);
  plan.set_on_demand_cost_usd(c.time_s / 3600 * c.estimate.on_demand_price_per_hour);
  for (const std::string& e : in.excluded) plan.add_excluded_types(e);
  return plan;
}

pb::Plan Infeasible(const PlanInputs& in, pb::PlanStrategy strategy, std::string reason) {
  pb::Plan plan;
  plan.set_feasible(false);
  plan.set_strategy(strategy);
  plan.set_reason(std::move(reason));
  for (const std::string& e : in.excluded) plan.add_excluded_types(e);
  return plan;
}

// The fastest plan regardless of deadline and budget (what an infeasible SLO can get).
provisioner::PlanResult Fastest(const PlanInputs& in) {
  provisioner::PlanProblem p = in.problem;
  p.deadline_s = kInf;
  p.budget_usd = kInf;
  p.objective = provisioner::Objective::kMinTime;
  return provisioner::SolveExact(*in.model, p);
}

std::string InfeasibleReason(const PlanInputs& in, const provisioner::PlanResult& fastest) {
  const bool loss = in.problem.target_kind == predictor::Target::Kind::kLoss;
  if (!fastest.feasible) {
    return loss ? "no cluster within the quotas reaches the target loss under the model"
                : absl::StrCat("no cluster within the quotas can train ",
                               in.problem.target().Describe(), " under the model");
  }
  return absl::StrFormat(
      "no cluster within the quotas meets the SLO: the fastest reaches %s in %.1f s "
      "(deadline %s) for $%.4f (budget %s)",
      loss ? absl::StrFormat("loss %g", in.problem.target_loss) : in.problem.target().Describe(),
      fastest.best.time_s,
      std::isfinite(in.problem.deadline_s) ? absl::StrFormat("%.1f s", in.problem.deadline_s)
                                           : std::string("none"),
      fastest.best.cost_usd,
      std::isfinite(in.problem.budget_usd) ? absl::StrFormat("$%.4f", in.problem.budget_usd)
                                           : std::string("none"));
}

}  // namespace

absl::StatusOr<PlanInputs> ToPlanInputs(ModelResolver& models, const pb::WorkloadRef& workload,
                                        const pb::CatalogRef& catalog, const pb::Slo& slo,
                                        const pb::PlanOptions& options,
                                        absl::string_view existing_field,
                                        uint64_t max_exhaustive_limit) {
  const double margin = options.bandwidth_margin();
  if (!(margin >= 0 && margin < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("options.bandwidth_margin = %g: must be in [0, 1)", margin));
  }
  PlanInputs in;
  in.slo = slo;
  auto target = TargetOf(slo.target_loss(), slo.target_iterations(), slo.target_epochs(),
                         slo.dataset_size(), "slo.");
  if (!target.ok()) return target.status();
  auto model = models.Resolve(
      workload, catalog, {.bandwidth_margin = margin, .require_loss_model = target->is_loss()});
  if (!model.ok()) return model.status();
  in.model = *model;
  const predictor::PerformanceModel& m = *in.model;

  if (target->is_loss()) {
    if (!std::isfinite(slo.target_loss())) {
      return absl::InvalidArgumentError(
          absl::StrFormat("slo.target_loss = %g: must be a finite number", slo.target_loss()));
    }
    if (!(slo.target_loss() > m.profile().loss->g5)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("slo.target_loss = %g: must be above the workload's loss floor g5 = %g",
                          slo.target_loss(), m.profile().loss->g5));
    }
  }
  in.problem = provisioner::DefaultProblem(m, *target);
  auto deadline = Optional("slo.deadline_s", slo.deadline_s());
  if (!deadline.ok()) return deadline.status();
  in.problem.deadline_s = *deadline;
  auto budget = Optional("slo.budget_usd", slo.budget_usd());
  if (!budget.ok()) return budget.status();
  in.problem.budget_usd = *budget;

  const auto& types = m.catalog().types;
  for (int i = 0; i < options.quota_overrides_size(); ++i) {
    const pb::InstanceCount& q = options.quota_overrides(i);
    const int k = m.catalog().IndexOf(q.instance_type());
    if (k < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "options.quota_overrides[%d].instance_type = \"%s\": not in catalog \"%s\"", i,
          q.instance_type(), m.catalog().name));
    }
    if (q.count() < 0 || q.count() > predictor::kMaxInstancesPerType) {
      return absl::InvalidArgumentError(
          absl::StrFormat("options.quota_overrides[%d].count = %d (%s): must be in [0, %d]", i,
                          q.count(), q.instance_type(), predictor::kMaxInstancesPerType));
    }
    in.problem.max_counts[k] = m.types()[k].usable ? q.count() : 0;
  }
  if (options.existing().instances_size() > 0) {
    auto existing = ToDomain(options.existing(), m.catalog(), existing_field);
    if (!existing.ok()) return existing.status();
    in.problem.min_counts = existing->counts;
    // What ValidateProblem would refuse about running instances, named as the request has them.
    for (int i = 0; i < options.existing().instances_size(); ++i) {
      const pb::InstanceCount& e = options.existing().instances(i);
      const int k = m.catalog().IndexOf(e.instance_type());
      if (e.count() > 0 && !m.types()[k].usable) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.instances[%d].instance_type = \"%s\": cannot be planned with: %s",
                            existing_field, i, e.instance_type(), m.types()[k].unusable_reason));
      }
      if (e.count() > in.problem.max_counts[k]) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s.instances[%d].count = %d (%s): exceeds its quota %d", existing_field, i, e.count(),
            e.instance_type(), in.problem.max_counts[k]));
      }
    }
    if (options.max_cluster_size() > 0 && existing->Workers() > options.max_cluster_size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("options.max_cluster_size = %d: below the %d instances of %s",
                          options.max_cluster_size(), existing->Workers(), existing_field));
    }
  }
  if (options.parameter_servers() < 0 ||
      options.parameter_servers() > predictor::kMaxParameterServers) {
    return absl::InvalidArgumentError(
        absl::StrFormat("options.parameter_servers = %d: must be in [0, %d] (0 = 1)",
                        options.parameter_servers(), predictor::kMaxParameterServers));
  }
  in.problem.parameter_servers = std::max(1, options.parameter_servers());
  in.problem.on_demand = options.on_demand_prices();
  in.problem.overhead_s = options.revocation_overhead_s();
  in.problem.max_workers = options.max_cluster_size();
  switch (options.strategy()) {
    case pb::PLAN_STRATEGY_EXACT:
      in.strategy = provisioner::Strategy::kExact;
      break;
    case pb::PLAN_STRATEGY_SPOTDNN:
      in.strategy = provisioner::Strategy::kSpotdnn;
      break;
    case pb::PLAN_STRATEGY_EXHAUSTIVE:
      in.strategy = provisioner::Strategy::kExhaustive;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("options.strategy = ", EnumLabel(options.strategy()),
                       ": not a search strategy; expected exact, spotdnn or exhaustive"));
  }
  if (options.exhaustive_limit() > max_exhaustive_limit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.exhaustive_limit = %d: above the server's cap of %d clusters (0 = the default "
        "%d); use the exact strategy for larger searches",
        options.exhaustive_limit(), max_exhaustive_limit, provisioner::kDefaultExhaustiveLimit));
  }
  if (options.exhaustive_limit() > 0) in.exhaustive_limit = options.exhaustive_limit();
  for (size_t k = 0; k < types.size(); ++k) {
    if (!m.types()[k].usable) {
      in.excluded.push_back(absl::StrCat(types[k].name, ": ", m.types()[k].unusable_reason));
    }
  }
  if (auto s = provisioner::ValidateProblem(m, in.problem); !s.ok()) return s;
  return in;
}

ProvisionerServiceImpl::ProvisionerServiceImpl(std::shared_ptr<const DataRegistry> registry,
                                               ProvisionerOptions options)
    : models_(std::move(registry)), options_(options) {}

absl::StatusOr<PlanInputs> ProvisionerServiceImpl::Inputs(
    const grpc::ServerContext* context, const google::protobuf::Message& request,
    const pb::WorkloadRef& workload, const pb::CatalogRef& catalog, const pb::Slo& slo,
    const pb::PlanOptions& options, absl::string_view existing_field) {
  if (auto s = CheckRequest(request); !s.ok()) return s;
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
  auto in = Inputs(context, *request, request->workload(), request->catalog(), request->slo(),
                   request->options());
  if (!in.ok()) return ToGrpc(in.status());
  in->problem.objective = request->mode() == pb::PLAN_MODE_BUDGET
                              ? provisioner::Objective::kMinTime
                              : provisioner::Objective::kMinCost;
  const pb::PlanStrategy strategy = StrategyOf(in->strategy);
  const auto start = std::chrono::steady_clock::now();
  auto result = provisioner::Solve(*in->model, in->problem, in->strategy, in->exhaustive_limit);
  const double ms = Millis(start);
  if (!result.ok()) return ToGrpc(result.status());
  if (result->feasible) {
    *response->mutable_plan() = ToPlan(*in, result->best, strategy);
  } else {
    const provisioner::PlanResult fastest = Fastest(*in);
    if (!fastest.stopped.ok()) return ToGrpc(fastest.stopped);
    *response->mutable_plan() = Infeasible(*in, strategy, InfeasibleReason(*in, fastest));
    if (fastest.feasible) {
      response->set_fastest_time_s(fastest.best.time_s);
      response->set_fastest_cost_usd(fastest.best.cost_usd);
    }
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
    if (!stopped.ok()) return ToGrpc(stopped);
  }
  return grpc::Status::OK;
}

grpc::Status ProvisionerServiceImpl::Replan(grpc::ServerContext* context,
                                            const pb::ReplanRequest* request,
                                            pb::ReplanResponse* response) {
  pb::PlanOptions options = request->options();
  *options.mutable_existing() = request->survivors();
  auto in = Inputs(context, *request, request->workload(), request->catalog(), request->slo(),
                   options, "survivors");
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
    auto before = ToDomain(p.cluster_before(), in->model->catalog(), "progress.cluster_before");
    if (!before.ok()) return ToGrpc(before.status());
    progress.cluster_before = before->counts;
    progress.iterations_done = p.normalized_iterations_done();
  } else if (in->problem.target_kind != predictor::Target::Kind::kLoss) {
    progress.iterations_done = p.normalized_iterations_done();
  }
  const auto start = std::chrono::steady_clock::now();
  auto result =
      provisioner::Replan(*in->model, in->problem, progress, in->strategy, in->exhaustive_limit);
  const double ms = Millis(start);
  if (!result.ok()) return ToGrpc(result.status());
  const pb::PlanStrategy strategy = StrategyOf(in->strategy);
  in->problem.target_loss = request->slo().target_loss();
  // The plan's prediction covers the rest of the job: what is left of an iterations or samples
  // target.
  if (in->problem.target_kind != predictor::Target::Kind::kLoss) {
    in->problem.target_amount = result->remaining_amount;
  }
  if (result->feasible) {
    *response->mutable_plan() = ToPlan(*in, result->plan, strategy);
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
  auto in = Inputs(context, *request, request->workload(), request->catalog(), request->slo(),
                   request->options());
  if (!in.ok()) return ToGrpc(in.status());
  const pb::PlanStrategy strategy = StrategyOf(in->strategy);
  const auto start = std::chrono::steady_clock::now();
  uint64_t evaluated = 0;
  auto front = provisioner::Frontier(*in->model, in->problem, in->strategy, in->exhaustive_limit,
                                     &evaluated);
  const double ms = Millis(start);
  if (!front.ok()) return ToGrpc(front.status());
  for (const Candidate& c : *front) {
    pb::Plan* plan = response->add_plans();
    *plan = ToPlan(*in, c, strategy);
    plan->set_solve_ms(ms);
    plan->set_clusters_evaluated(evaluated);
  }
  if (front->empty()) {
    // As Plan answers an infeasible SLO: why, and what the fastest plan would take.
    const provisioner::PlanResult fastest = Fastest(*in);
    if (!fastest.stopped.ok()) return ToGrpc(fastest.stopped);
    response->set_reason(InfeasibleReason(*in, fastest));
    if (fastest.feasible) {
      response->set_fastest_time_s(fastest.best.time_s);
      response->set_fastest_cost_usd(fastest.best.cost_usd);
    }
  }
  return grpc::Status::OK;
}

}  // namespace spotdnn::services
