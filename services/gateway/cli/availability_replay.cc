#include "services/gateway/cli/availability_replay.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "provisioner/simulator.h"
#include "services/common/program.h"
#include "services/gateway/cli/output.h"

namespace spotdnn::gateway {
namespace {

namespace dl = ::spotdnn::provisioner::deadline;

const pb::InstanceType* FindType(const pb::InstanceCatalog& catalog, absl::string_view name) {
  for (const pb::InstanceType& t : catalog.instance_types()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

// The policies that keep two changeovers of slack before they start spot.
bool NeedsTwoChangeoversForSpot(absl::string_view policy) {
  return policy == "ours" || policy == "greedy" || policy == "uniform-progress";
}

// What would give the job `factor` changeovers of slack, for a plan of this origin.
std::string Remedies(const dl::WindowJob& job, int factor, PlanOrigin origin) {
  const double slack = job.deadline_s - job.work_s;
  const double needed = factor * job.changeover_s;
  std::vector<std::string> ways;
  switch (origin) {
    case PlanOrigin::kPlanned:
      ways.push_back(absl::StrCat("--overhead ", HumanDuration(needed),
                                  " (the plan then leaves that room before the deadline; a later "
                                  "--deadline alone buys a slower plan that uses it all)"));
      break;
    case PlanOrigin::kGiven:
      ways.push_back(absl::StrCat("a later --deadline (at least ",
                                  HumanDuration(job.work_s + needed), " for this cluster)"));
      ways.push_back("a faster --cluster");
      break;
    case PlanOrigin::kOneInstance:
      ways.push_back(
          absl::StrCat("a later --deadline (at least ", HumanDuration(job.work_s + needed), ")"));
      if (job.deadline_s > needed) {
        ways.push_back(
            absl::StrCat("less --work (at most ", HumanDuration(job.deadline_s - needed), ")"));
      }
      break;
  }
  if (slack > 0) {
    ways.push_back(absl::StrCat("a --changeover under ", HumanDuration(slack / factor)));
  }
  if (ways.size() == 1) return ways[0];
  const std::string last = ways.back();
  ways.pop_back();
  return absl::StrCat(absl::StrJoin(ways, ", "), " or ", last);
}

}  // namespace

std::optional<pb::InstanceCatalog> KnownCatalog(const pb::CatalogRef& ref,
                                                const services::DataRegistry& local) {
  if (ref.has_catalog()) return ref.catalog();
  auto resolved = local.ResolveCatalog(ref.name());
  if (!resolved.ok()) return std::nullopt;
  return *std::move(resolved);
}

absl::StatusOr<ClusterAvailability> ParseClusterAvailability(const Args& args,
                                                             const pb::InstanceCatalog* catalog,
                                                             bool with_policy) {
  ClusterAvailability c;
  auto traces = dl::ReadTypeTraces("--availability", *args.Get("--availability"));
  if (!traces.ok()) return traces.status();
  c.traces = *std::move(traces);
  // TYPE@ZONE: the type's trace in that zone; every trace names a zone, or none does.
  size_t zoned = 0;
  for (const auto& [key, trace] : c.traces) {
    const size_t at = key.find('@');
    if (at == std::string::npos) continue;
    if (at == 0 || at + 1 == key.size()) {
      return absl::InvalidArgumentError(absl::StrCat("--availability: \"", key, "=", trace.source,
                                                     "\": expected TYPE=FILE or TYPE@ZONE=FILE"));
    }
    ++zoned;
  }
  if (zoned != 0 && zoned != c.traces.size()) {
    return absl::InvalidArgumentError(
        "--availability: give every trace a zone (TYPE@ZONE=FILE,...) or none (TYPE=FILE,...)");
  }
  c.zoned = zoned != 0;
  if (catalog != nullptr) {
    std::vector<std::string> names;
    for (const pb::InstanceType& t : catalog->instance_types()) names.push_back(t.name());
    for (const auto& [key, trace] : c.traces) {
      const std::string type = key.substr(0, key.find('@'));
      if (FindType(*catalog, type) != nullptr) continue;
      const std::string nearest = services::NearestName(type, names);
      return absl::InvalidArgumentError(absl::StrCat(
          "--availability: ", key, "=", trace.source, ": instance type \"", type,
          "\" is not in catalog \"", catalog->name(), "\"",
          nearest.empty() ? absl::StrCat(" (its types: ", absl::StrJoin(names, ", "), ")")
                          : absl::StrCat("; did you mean ", nearest, "?")));
    }
  }
  if (with_policy) {
    c.fallback = args.Get("--fallback").value_or("on-demand");
    if (c.fallback != "on-demand" && c.fallback != "none") {
      return absl::InvalidArgumentError(
          absl::StrCat("--fallback = \"", c.fallback, "\": must be on-demand or none"));
    }
    c.policy = c.fallback == "none" ? "spot-only" : args.Get("--policy").value_or("ours");
    if (c.policy != "optimum" && !dl::MakeDeadlinePolicy(c.policy).ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--policy = \"", c.policy,
                       "\": unknown (known: ours, uniform-progress, greedy, on-demand, optimum)"));
    }
  }
  if (auto v = args.Get("--changeover")) {
    auto d = ParseDuration("--changeover", *v, /*allow_zero=*/true);
    if (!d.ok()) return d.status();
    c.changeover_s = *d;
  }
  if (auto v = args.Get("--start-every")) {
    auto d = ParseDuration("--start-every", *v);
    if (!d.ok()) return d.status();
    c.every_s = *d;
  }
  return c;
}

absl::StatusOr<ClusterReplay> ReplayPlanCluster(const pb::Plan& p, double deadline_s,
                                                double overhead_s,
                                                const ClusterAvailability& availability,
                                                absl::string_view policy,
                                                const pb::InstanceCatalog* catalog,
                                                PlanOrigin origin) {
  if (!(p.time_s() > 0)) return absl::FailedPreconditionError("the cluster has no predicted time");
  ClusterReplay out;
  // Per hour of the whole cluster (its parameter servers included), from the plan's costs.
  double spot_per_hour = p.spot_cost_usd() / p.time_s() * 3600;
  const double on_demand_per_hour = p.on_demand_cost_usd() / p.time_s() * 3600;
  std::vector<std::pair<const dl::AvailabilityTrace*, int>> parts;
  std::map<std::string, std::vector<std::pair<const dl::AvailabilityTrace*, int>>> zone_parts;
  std::vector<std::string> traced_types;
  std::vector<dl::Zone> zones;
  for (const pb::InstanceCount& n : p.cluster().instances()) {
    if (n.count() <= 0) continue;
    const pb::InstanceType* type = catalog ? FindType(*catalog, n.instance_type()) : nullptr;
    if (type != nullptr && type->spot_price_per_hour() >= type->on_demand_price_per_hour()) {
      // Bought on-demand in every window: never preempted, and no dearer.
      spot_per_hour += n.count() * (type->on_demand_price_per_hour() - type->spot_price_per_hour());
      out.on_demand_types.push_back(n.instance_type());
      out.notes.push_back(absl::StrFormat(
          "%s=%d bought on-demand in every window: its spot price %s/h is not below its "
          "on-demand price %s/h, so spot would add preemptions for no saving (no trace needed)",
          n.instance_type(), n.count(), Dollars(type->spot_price_per_hour()),
          Dollars(type->on_demand_price_per_hour())));
      continue;
    }
    bool traced = false;
    for (const auto& [key, trace] : availability.traces) {
      const size_t at = key.find('@');
      if (key.substr(0, at) != n.instance_type()) continue;
      traced = true;
      if (at == std::string::npos) {
        parts.emplace_back(&trace, n.count());
      } else {
        zone_parts[key.substr(at + 1)].emplace_back(&trace, n.count());
      }
    }
    if (!traced) {
      out.untraced_types.push_back(n.instance_type());
    } else {
      traced_types.push_back(n.instance_type());
    }
  }
  if (availability.zoned) {
    // A zone hosts the cluster when it has a trace for each of its traced types (all of a
    // synchronous job's instances run in one zone; a parameter-server job's in one region).
    for (auto& [zone, zparts] : zone_parts) {
      if (zparts.size() != traced_types.size()) {
        std::vector<std::string> missing;
        for (const std::string& t : traced_types) {
          bool have = false;
          for (const auto& [key, trace] : availability.traces) have |= key == t + "@" + zone;
          if (!have) missing.push_back(t);
        }
        out.notes.push_back(absl::StrCat("zone ", zone, " has no trace for ",
                                         absl::StrJoin(missing, ", "),
                                         ": not used (the cluster runs in one zone)"));
        continue;
      }
      auto j = dl::JointTrace(zparts);
      if (!j.ok()) return j.status();
      zones.push_back({zone, *std::move(j), -1});
    }
    if (zones.empty() && !traced_types.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--availability: no zone has a trace for every type of the cluster (",
          ClusterText(p.cluster()), "); give TYPE@ZONE=FILE for each of them in one zone"));
    }
  }
  if (parts.empty() && zones.empty() && out.on_demand_types.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--availability: no trace for the cluster's types (", ClusterText(p.cluster()),
                     "); give TYPE=FILE for them"));
  }
  if (!out.untraced_types.empty()) {
    out.notes.push_back(absl::StrCat("no trace for ", absl::StrJoin(out.untraced_types, ", "),
                                     ": spot assumed always there for ",
                                     out.untraced_types.size() == 1 ? "it" : "them"));
  }
  dl::AvailabilityTrace joint;
  if (!zones.empty()) {
    // Replayed through the zones below.
  } else if (!parts.empty()) {
    auto j = dl::JointTrace(parts);
    if (!j.ok()) return j.status();
    joint = *std::move(j);
  } else {
    // Every type is bought on-demand: the capacity does not matter; the windows span the traces.
    const dl::AvailabilityTrace& first = availability.traces.front().second;
    joint.source = first.source;
    joint.gap_s = first.gap_s;
    joint.counts.assign(first.counts.size(), 1);
  }
  out.job.work_s = std::max(1e-9, p.time_s() - std::max(0.0, overhead_s));
  out.job.deadline_s = deadline_s;
  out.job.changeover_s = availability.changeover_s;
  if (p.prediction().accumulation_steps() > 0) {
    // A synchronous plan: each instance start also restarts every rank from the last checkpoint.
    provisioner::SynchronousRestart restart;
    if (p.prediction().checkpoint_every_s() > 0) {
      restart.restart_s = p.prediction().restart_s();
      restart.checkpoint_every_s = p.prediction().checkpoint_every_s();
    }
    const double cost = provisioner::ExpectedRestartCostS(restart);
    out.job.changeover_s += cost;
    out.notes.push_back(absl::StrCat(
        "synchronous plan: each instance start also restarts every rank, ", HumanDuration(cost),
        " more per changeover (restart ", HumanDuration(restart.restart_s),
        " + half the checkpoint interval ", HumanDuration(restart.checkpoint_every_s), ")"));
  }
  out.job.spot_price_per_hour = spot_per_hour;
  out.job.on_demand_price_per_hour = on_demand_per_hour;
  const double every = availability.every_s > 0 ? availability.every_s : deadline_s;
  absl::StatusOr<dl::ReplaySummary> summary;
  if (!zones.empty()) {
    auto aligned = dl::AlignZones(std::move(zones));
    if (!aligned.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--availability: ", aligned.status().message()));
    }
    out.zoned = true;
    summary = dl::ReplayZoneWindows(*aligned, out.job, every, policy);
  } else {
    summary = dl::ReplayWindows(joint, out.job, every, policy);
  }
  if (!summary.ok()) {
    std::string message(summary.status().message());
    for (const char* field : {"deadline", "start-every"}) {
      if (absl::StartsWith(message, absl::StrCat(field, " = "))) message = "--" + message;
    }
    return absl::InvalidArgumentError(message);
  }
  out.summary = *std::move(summary);
  if (std::string note = SlackNote(out.job, policy, origin); !note.empty()) {
    out.notes.push_back(std::move(note));
  }
  return out;
}

std::string SlackNote(const dl::WindowJob& job, absl::string_view policy, PlanOrigin origin) {
  const double slack = job.deadline_s - job.work_s;
  const double d = job.changeover_s;
  const std::string work =
      origin == PlanOrigin::kOneInstance
          ? absl::StrCat("the work (", HumanDuration(job.work_s), ")")
          : absl::StrCat("the cluster's predicted time (", HumanDuration(job.work_s), ")");
  if (slack < 0) {
    return absl::StrCat(work, " is longer than the deadline (", HumanDuration(job.deadline_s),
                        "), before any changeover (", HumanDuration(d),
                        "): no window can meet it. What would help: ", Remedies(job, 1, origin));
  }
  if (slack < d - 1e-9) {
    return absl::StrCat(work, " leaves ", HumanDuration(std::max(0.0, slack)),
                        " of the deadline's ", HumanDuration(job.deadline_s),
                        " spare, less than one changeover (", HumanDuration(d),
                        "): no window can meet the deadline, not even on on-demand (every start, "
                        "spot or on-demand, costs a changeover). What would help: ",
                        Remedies(job, 1, origin));
  }
  const bool spot_cheaper =
      !(job.spot_price_per_hour > 0 && job.on_demand_price_per_hour <= job.spot_price_per_hour);
  if (slack < 2 * d - 1e-9 && spot_cheaper && NeedsTwoChangeoversForSpot(policy)) {
    return absl::StrCat(work, " leaves ", HumanDuration(slack),
                        " spare, less than two changeovers (", HumanDuration(2 * d), "): policy ",
                        policy,
                        " never starts spot (a preemption right after its start would leave no "
                        "room to start on-demand), so every window runs on on-demand. For spot "
                        "to be tried: ",
                        Remedies(job, 2, origin));
  }
  return "";
}

std::vector<std::string> SpotDearerNotes(const pb::Cluster& cluster,
                                         const pb::InstanceCatalog& catalog) {
  std::vector<std::string> notes;
  for (const pb::InstanceCount& n : cluster.instances()) {
    if (n.count() <= 0) continue;
    const pb::InstanceType* t = FindType(catalog, n.instance_type());
    if (t == nullptr || !(t->spot_price_per_hour() >= t->on_demand_price_per_hour())) continue;
    notes.push_back(absl::StrFormat(
        "%s costs %s/h on spot, not less than %s/h on-demand: the plan's %d would cost no more "
        "on-demand, and on-demand is never revoked (the plan prices them at spot)",
        n.instance_type(), Dollars(t->spot_price_per_hour()),
        Dollars(t->on_demand_price_per_hour()), n.count()));
  }
  return notes;
}

void PrintWindows(const dl::ReplaySummary& summary, std::ostream& out, bool zones) {
  std::vector<std::string> head = {"start",       "met",         "cost",  "spot h",
                                   "on-demand h", "changeovers", "finish"};
  if (zones) head.insert(head.end(), {"zones", "moves"});
  Table t(head);
  for (const dl::WindowResult& w : summary.windows) {
    std::vector<std::string> row = {HumanDuration(w.start_s),    w.met ? "yes" : "MISSED",
                                    Dollars(w.cost_usd),         Fixed(w.spot_hours, 2),
                                    Fixed(w.on_demand_hours, 2), absl::StrCat(w.changeovers),
                                    HumanDuration(w.finish_s)};
    if (zones) {
      row.push_back(w.zones.empty() ? "-" : absl::StrJoin(w.zones, ","));
      row.push_back(absl::StrCat(w.moves));
    }
    t.AddRow(row);
  }
  t.Print(out);
}

std::string WindowsJson(const dl::ReplaySummary& s, bool zones) {
  std::vector<std::string> windows;
  for (const dl::WindowResult& w : s.windows) {
    JsonObject o;
    o.Number("start_s", w.start_s)
        .Bool("met", w.met)
        .Number("cost_usd", w.cost_usd)
        .Number("finish_s", w.finish_s)
        .Number("spot_hours", w.spot_hours)
        .Number("on_demand_hours", w.on_demand_hours)
        .Integer("changeovers", w.changeovers)
        .Bool("on_demand_can_meet", w.on_demand_can_meet);
    if (zones) o.Raw("zones", JsonStrings(w.zones)).Integer("moves", w.moves);
    windows.push_back(o.str());
  }
  return "[" + absl::StrJoin(windows, ",") + "]";
}

std::string JsonStrings(const std::vector<std::string>& items) {
  std::vector<std::string> quoted;
  for (const std::string& s : items) quoted.push_back(JsonString(s));
  return "[" + absl::StrJoin(quoted, ",") + "]";
}

}  // namespace spotdnn::gateway
