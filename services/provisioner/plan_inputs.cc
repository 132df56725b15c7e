#include "services/provisioner/plan_inputs.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/limits.h"
#include "services/common/convert.h"

namespace spotdnn::services {
namespace {

// CheckRequest lets a type's lifetimes through up to the limit this service checks itself.
static_assert(kMaxServiceLifetimesPerType == limits::kMaxLifetimeObservations);

using provisioner::kInf;

// A non-negative number where 0 means "none".
absl::StatusOr<double> Optional(absl::string_view field, double value) {
  if (!(std::isfinite(value) && value >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %g: must be a finite number >= 0 (0 = none)", field, value));
  }
  return value == 0 ? kInf : value;
}

}  // namespace

absl::StatusOr<provisioner::RevocationModel> RevocationModelOf(
    const DataRegistry& registry, const pb::CatalogRef& ref,
    const predictor::InstanceCatalog& catalog, const pb::SimulationOptions& o) {
  pb::InstanceCatalog proto;
  if (ref.has_catalog()) {
    proto = ref.catalog();
  } else {
    auto resolved = registry.ResolveCatalog(ref.name());
    if (!resolved.ok()) return resolved.status();
    proto = *std::move(resolved);
  }
  std::map<std::string, int> in_proto;
  for (int i = 0; i < proto.instance_types_size(); ++i)
    in_proto[proto.instance_types(i).name()] = i;
  int64_t total = 0;
  auto count = [&](int64_t n, const std::string& field) -> absl::Status {
    if (n > kMaxServiceLifetimesPerType) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %d lifetimes, more than %d", field, n, kMaxServiceLifetimesPerType));
    }
    total += n;
    if (total > kMaxServiceLifetimes) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: more than %d lifetimes in the request",
                                                        field, kMaxServiceLifetimes));
    }
    return absl::OkStatus();
  };
  auto observations = [](const google::protobuf::RepeatedPtrField<pb::LifetimeObservation>& in) {
    std::vector<provisioner::LifetimeObservation> out;
    out.reserve(in.size());
    for (const pb::LifetimeObservation& o : in) {
      out.push_back({.lifetime_s = o.lifetime_s(), .censored = o.censored()});
    }
    return out;
  };
  std::vector<provisioner::TypeRevocationInput> inputs;
  for (const predictor::InstanceType& t : catalog.types) {
    provisioner::TypeRevocationInput in{.instance_type = t.name, .gpu_type = t.gpu_type};
    auto it = in_proto.find(t.name);
    if (it != in_proto.end()) {
      const pb::InstanceType& pt = proto.instance_types(it->second);
      const std::string field = absl::StrCat("catalog.instance_types[", it->second, "]");
      if (!(std::isfinite(pt.interruption_rate_per_hour()) &&
            pt.interruption_rate_per_hour() >= 0)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s.interruption_rate_per_hour = %g (%s): must be a finite number >= 0",
                            field, pt.interruption_rate_per_hour(), t.name));
      }
      in.interruption_rate_per_hour = pt.interruption_rate_per_hour();
      if (auto s = count(pt.lifetimes().observations_size(), field + ".lifetimes"); !s.ok()) {
        return s;
      }
      in.observations = observations(pt.lifetimes().observations());
      in.observations_source =
          pt.lifetimes().source().empty() ? std::string("the catalog") : pt.lifetimes().source();
    }
    inputs.push_back(std::move(in));
  }
  if (o.lifetime_groups_size() > 0) {
    if (o.lifetime_groups_size() > 1000) {
      return absl::InvalidArgumentError(
          absl::StrFormat("options.simulation.lifetime_groups: %d groups, more than 1000",
                          o.lifetime_groups_size()));
    }
    provisioner::LifetimeFile file;
    file.source = "options.simulation.lifetime_groups";
    std::set<std::string> sources;
    for (int i = 0; i < o.lifetime_groups_size(); ++i) {
      const pb::LifetimeGroup& g = o.lifetime_groups(i);
      const std::string field = absl::StrCat("options.simulation.lifetime_groups[", i, "]");
      if (auto s = count(g.observations_size(), field); !s.ok()) return s;
      if (g.observations_size() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(field, " (\"", g.name(), "\"): no lifetimes"));
      }
      file.groups.push_back({.name = g.name(), .observations = observations(g.observations())});
      sources.insert(g.source());
    }
    if (sources.size() == 1 && !sources.begin()->empty()) file.source = *sources.begin();
    const std::map<std::string, std::string> mapping(o.lifetime_mapping().begin(),
                                                     o.lifetime_mapping().end());
    const provisioner::UnmatchedTypes unmatched =
        o.unmatched_types() == pb::UNMATCHED_TYPES_NEVER    ? provisioner::UnmatchedTypes::kNever
        : o.unmatched_types() == pb::UNMATCHED_TYPES_REFUSE ? provisioner::UnmatchedTypes::kRefuse
                                                            : provisioner::UnmatchedTypes::kPooled;
    if (auto s = provisioner::ApplyLifetimeFile(file, mapping, unmatched, inputs); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("options.simulation.lifetime_groups: ", s.message()));
    }
  }
  std::set<int> given;
  for (int i = 0; i < o.lifetimes_size(); ++i) {
    const pb::InstanceLifetimes& l = o.lifetimes(i);
    const std::string field = absl::StrCat("options.simulation.lifetimes[", i, "]");
    const int k = catalog.IndexOf(l.instance_type());
    if (k < 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.instance_type = \"%s\": not in catalog \"%s\"", field,
                          l.instance_type(), catalog.name));
    }
    if (!given.insert(k).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.instance_type = \"%s\": given twice", field, l.instance_type()));
    }
    if (l.observations_size() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(field, ".observations: empty"));
    }
    if (auto s = count(l.observations_size(), field); !s.ok()) return s;
    inputs[k].observations = observations(l.observations());
    inputs[k].observations_source = l.source().empty() ? field : l.source();
  }
  return provisioner::BuildRevocationModel(inputs);
}

absl::StatusOr<provisioner::SimulationOptions> SimulationOptionsOf(const PlanInputs& in,
                                                                   const pb::SimulationOptions& o,
                                                                   int max_runs) {
  provisioner::SimulationOptions out;
  if (o.runs() > static_cast<uint32_t>(max_runs)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.simulation.runs = %d: must be at most %d here", o.runs(), max_runs));
  }
  if (o.runs() > 0) out.runs = static_cast<int>(o.runs());
  out.seed = o.seed();
  out.notice_s = o.notice_s();
  if (o.has_takeover_delay_s()) out.takeover_delay_s = o.takeover_delay_s();
  if (o.has_lost_iterations_per_revocation()) {
    out.lost_iterations_per_revocation = o.lost_iterations_per_revocation();
  }
  out.replan_resolution = o.replan_resolution();
  out.strategy = in.strategy;
  out.exhaustive_limit = in.exhaustive_limit;
  if (o.max_replan_solves() > kMaxServiceReplanSolves) {
    return absl::InvalidArgumentError(
        absl::StrFormat("options.simulation.max_replan_solves = %d: must be at most %d",
                        o.max_replan_solves(), kMaxServiceReplanSolves));
  }
  if (o.max_replan_solves() > 0) out.max_replan_solves = o.max_replan_solves();
  // A synchronous job (the request's sync, else the profile's) pays the restart cost; a
  // synchronous plan's job always does, at the speed of its global batch's split.
  const predictor::WorkloadProfile& profile = ProfileOf(in);
  if (in.sync != nullptr && o.sync() == pb::SYNC_KIND_PS) {
    return absl::InvalidArgumentError(
        "options.simulation.sync = SYNC_KIND_PS: the plan is a synchronous (all-reduce) one; its "
        "revocations restart every rank");
  }
  if (in.sync != nullptr && o.local_batch() != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "options.simulation.local_batch = %d: a synchronous plan trains its global batch (%d) "
        "split by speed over the instances training",
        o.local_batch(), in.sync->model->planner().global_batch()));
  }
  const bool synchronous =
      in.sync != nullptr || o.sync() == pb::SYNC_KIND_ALLREDUCE ||
      (o.sync() == pb::SYNC_KIND_UNSPECIFIED && profile.sync == predictor::SyncKind::kAllReduce);
  if (synchronous) {
    provisioner::SynchronousRestart r;
    r.restart_s = o.has_restart_s() ? o.restart_s()
                                    : profile.restart_s.value_or(provisioner::kDefaultRestartS);
    r.checkpoint_every_s =
        o.has_checkpoint_every_s()
            ? o.checkpoint_every_s()
            : profile.checkpoint_every_s.value_or(provisioner::kDefaultCheckpointEveryS);
    if (o.min_instances() != 0) r.min_instances = o.min_instances();
    r.local_batch = o.local_batch();
    out.synchronous = r;
  } else {
    const std::pair<const char*, bool> sync_only[] = {
        {"restart_s", o.has_restart_s()},
        {"checkpoint_every_s", o.has_checkpoint_every_s()},
        {"min_instances", o.min_instances() != 0},
        {"local_batch", o.local_batch() != 0}};
    for (const auto& [field, given] : sync_only) {
      if (given) {
        return absl::InvalidArgumentError(absl::StrCat(
            "options.simulation.", field,
            ": applies to a synchronous (all-reduce) job; the workload trains with a parameter "
            "server (set options.simulation.sync to SYNC_KIND_ALLREDUCE to simulate it as one)"));
      }
    }
  }
  if (auto s = provisioner::ValidateSimulationOptions(out); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("options.", s.message()));
  }
  return out;
}

void RiskToProto(const provisioner::SimulationResult& r, pb::RiskEstimate* out) {
  out->set_p_meet_deadline(r.p_meet_deadline);
  out->set_p_meet_deadline_low(r.p_meet_deadline_low);
  out->set_p_meet_deadline_high(r.p_meet_deadline_high);
  out->set_p_meet_slo(r.p_meet_slo);
  out->set_p_no_revocation(r.p_no_revocation);
  out->set_expected_cost_usd(r.cost_usd.mean);
  out->set_cost_p50_usd(r.cost_usd.p50);
  out->set_cost_p90_usd(r.cost_usd.p90);
  out->set_expected_time_s(r.time_s.mean);
  out->set_time_p50_s(r.time_s.p50);
  out->set_time_p90_s(r.time_s.p90);
  out->set_mean_revocations(r.revocations.mean);
  out->set_max_revocations(r.revocations.max);
  out->set_runs(static_cast<uint32_t>(r.runs));
  out->set_seed(r.seed);
  out->set_unfinished_runs(static_cast<uint32_t>(r.unfinished));
  out->set_replans(r.replans);
  out->set_replans_solved(r.replans_solved);
  if (r.synchronous) {
    out->set_synchronous(true);
    out->set_mean_restarts(r.restarts.mean);
    out->set_redone_mean_s(r.redone_s.mean);
    out->set_redone_p50_s(r.redone_s.p50);
    out->set_redone_p90_s(r.redone_s.p90);
    out->set_redone_mean_steps(r.redone_iterations.mean);
    out->set_redone_p50_steps(r.redone_iterations.p50);
    out->set_redone_p90_steps(r.redone_iterations.p90);
    out->set_restart_s(r.restart.restart_s);
    out->set_checkpoint_every_s(r.restart.checkpoint_every_s);
  }
}

PlanInputs ToPlanInputs(SyncPlanInputs sync) {
  PlanInputs in;
  const pb::PlanOptions& o = sync.request.options();
  in.problem = sync.problem;
  in.strategy = o.strategy() == pb::PLAN_STRATEGY_EXHAUSTIVE ? provisioner::Strategy::kExhaustive
                                                             : provisioner::Strategy::kExact;
  if (o.exhaustive_limit() > 0) in.exhaustive_limit = o.exhaustive_limit();
  in.excluded = sync.excluded;
  in.slo = sync.request.slo();
  in.plan_model = sync.model;
  in.sync = std::make_shared<const SyncPlanInputs>(std::move(sync));
  return in;
}

const predictor::WorkloadProfile& ProfileOf(const PlanInputs& in) {
  return in.sync != nullptr ? in.sync->profile : in.model->profile();
}

pb::Plan InfeasiblePlan(pb::PlanStrategy strategy, std::string reason,
                        const std::vector<std::string>& excluded) {
  pb::Plan plan;
  plan.set_feasible(false);
  plan.set_strategy(strategy);
  plan.set_reason(std::move(reason));
  for (const std::string& e : excluded) plan.add_excluded_types(e);
  return plan;
}

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
  auto target = TargetOfMessage(slo, "slo.");
  if (!target.ok()) return target.status();
  auto model = models.Resolve(
      workload, catalog, {.bandwidth_margin = margin, .require_loss_model = target->is_loss()});
  if (!model.ok()) return model.status();
  in.model = *model;
  // The planner over the model, kept alive with it.
  auto planner =
      std::make_shared<std::pair<std::shared_ptr<const predictor::PerformanceModel>,
                                 provisioner::ParameterServerPlanModel>>(in.model, **model);
  in.plan_model = std::shared_ptr<const provisioner::PlanModel>(planner, &planner->second);
  const predictor::PerformanceModel& m = *in.model;

  if (target->is_loss()) {
    // A loss target given as a metric target ("loss <= L") is named as that field.
    const char* field = slo.has_target_metric() ? "slo.target_metric.value" : "slo.target_loss";
    if (!std::isfinite(target->value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s = %g: must be a finite number", field, target->value));
    }
    if (m.profile().loss && !(target->value > m.profile().loss->g5)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s = %g: must be above the workload's loss floor g5 = %g", field,
                          target->value, m.profile().loss->g5));
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

}  // namespace spotdnn::services
