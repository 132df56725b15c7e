// A plan replayed through availability traces for `spotdnn plan --availability`, and its JSON.
#include "services/gateway/cli/plan_availability.h"

#include <string>

namespace spotdnn::gateway {

AvailabilityOutcome ReplayPlan(const pb::Plan& p, double deadline_s, double overhead_s,
                               const ClusterAvailability& f, const pb::InstanceCatalog* catalog) {
  AvailabilityOutcome out;
  if (!p.feasible() || !(p.time_s() > 0)) {
    out.why = "no plan to replay";
    return out;
  }
  auto with =
      ReplayPlanCluster(p, deadline_s, overhead_s, f, "ours", catalog, PlanOrigin::kPlanned);
  if (!with.ok()) {
    out.why = std::string(with.status().message());
    return out;
  }
  auto without =
      ReplayPlanCluster(p, deadline_s, overhead_s, f, "spot-only", catalog, PlanOrigin::kPlanned);
  if (!without.ok()) {
    out.why = std::string(without.status().message());
    return out;
  }
  out.ok = true;
  out.windows = static_cast<int>(with->summary.windows.size());
  out.p_meet_fallback = with->summary.met_fraction;
  out.cost_fallback = with->summary.mean_cost_usd;
  out.on_demand_hours_fallback = with->summary.on_demand_hours / out.windows;
  out.p_meet_spot_only = without->summary.met_fraction;
  out.cost_spot_only = without->summary.mean_cost_usd;
  out.work_s = with->job.work_s;
  out.slack_s = with->job.deadline_s - with->job.work_s;
  out.bought_on_demand = with->on_demand_types;
  out.without_trace = with->untraced_types;
  out.notes = with->notes;
  out.moves_fallback = with->zoned ? with->summary.moves : -1;
  return out;
}

JsonObject AvailabilityJson(const AvailabilityOutcome& a) {
  JsonObject o;
  if (!a.ok) return o.String("skipped", a.why);
  return o.Integer("windows", a.windows)
      .Number("work_s", a.work_s)
      .Number("slack_s", a.slack_s)
      .Raw("bought_on_demand", JsonStrings(a.bought_on_demand))
      .Raw("without_trace", JsonStrings(a.without_trace))
      .Raw("notes", JsonStrings(a.notes))
      .Raw("with_fallback",
           JsonObject()
               .Number("p_meet_deadline", a.p_meet_fallback)
               .Number("expected_cost_usd", a.cost_fallback)
               .Number("on_demand_hours", a.on_demand_hours_fallback)
               .Raw("moves_between_zones",
                    a.moves_fallback < 0 ? "null" : std::to_string(a.moves_fallback))
               .str())
      .Raw("spot_only", JsonObject()
                            .Number("p_meet_deadline", a.p_meet_spot_only)
                            .Number("expected_cost_usd", a.cost_spot_only)
                            .str());
}

}  // namespace spotdnn::gateway
