// spotdnn simulate: replays a job many times with sampled instance lifetimes and the gateway's
// takeover policy, and reports how often it meets the deadline and what it costs.
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "predictor/types.h"
#include "provisioner/deadline/availability_trace.h"
#include "provisioner/deadline/window_replay.h"
#include "services/clients/service_clients.h"
#include "services/common/convert.h"
#include "services/gateway/cli/availability_replay.h"
#include "services/gateway/cli/cli.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/connection.h"
#include "services/gateway/cli/flag_errors.h"
#include "services/gateway/cli/output.h"
#include "services/gateway/cli/risk_options.h"
#include "services/gateway/cli/stored_profiles.h"
#include "services/gateway/cli/target_flags.h"
#include "services/provisioner/provisioner_service.h"

namespace spotdnn::gateway {
namespace {

void AddCounts(const std::vector<std::pair<std::string, int>>& counts, pb::Cluster* cluster) {
  for (const auto& [type, n] : counts) {
    pb::InstanceCount* c = cluster->add_instances();
    c->set_instance_type(type);
    c->set_count(n);
  }
}

namespace dl = ::spotdnn::provisioner::deadline;

// The one-instance form's traces: one unnamed zone for a plain FILE; else the ZONE=FILE list, with
// --zone-price ZONE=USD,... and without the --avoid-zone ones, on one grid (`aligned_note` says
// how, when the traces' ticks or spans differ).
absl::StatusOr<std::vector<dl::Zone>> ReadZones(const Args& args, const std::string& spec,
                                                bool zoned, std::string* aligned_note) {
  std::vector<dl::Zone> zones;
  if (!zoned) {
    auto trace = dl::ReadAvailabilityTrace(spec);
    if (!trace.ok()) {
      return absl::Status(trace.status().code(),
                          absl::StrCat("--availability: ", trace.status().message()));
    }
    zones.push_back({"", *std::move(trace), -1});
    return zones;
  }
  auto traces = dl::ReadTypeTraces("--availability", spec, "ZONE");
  if (!traces.ok()) return traces.status();
  for (auto& [name, trace] : *traces) zones.push_back({name, std::move(trace), -1});
  auto find = [&](const std::string& flag, absl::string_view name) -> absl::StatusOr<size_t> {
    for (size_t i = 0; i < zones.size(); ++i) {
      if (zones[i].name == name) return i;
    }
    std::vector<std::string> names;
    for (const dl::Zone& z : zones) names.push_back(z.name);
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " = \"", *args.Get(flag), "\": no zone \"", name,
                     "\" in --availability (zones: ", absl::StrJoin(names, ", "), ")"));
  };
  if (auto prices = args.Get("--zone-price")) {
    for (absl::string_view item : absl::StrSplit(*prices, ',')) {
      const size_t eq = item.find('=');
      if (eq == absl::string_view::npos || eq == 0) {
        return absl::InvalidArgumentError(absl::StrCat("--zone-price = \"", *prices,
                                                       "\": expected ZONE=USD,... (\"", item,
                                                       "\" is not ZONE=USD)"));
      }
      auto at = find("--zone-price", item.substr(0, eq));
      if (!at.ok()) return at.status();
      auto price = ParseNumber("--zone-price", item.substr(eq + 1));
      if (!price.ok()) return price.status();
      if (*price < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--zone-price = \"", *prices, "\": a price in $/h cannot be negative"));
      }
      zones[*at].spot_price_per_hour = *price;
    }
  }
  if (auto avoid = args.Get("--avoid-zone")) {
    for (absl::string_view name : absl::StrSplit(*avoid, ',')) {
      auto at = find("--avoid-zone", name);
      if (!at.ok()) return at.status();
      zones.erase(zones.begin() + static_cast<std::ptrdiff_t>(*at));
    }
    if (zones.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--avoid-zone = \"", *avoid, "\": leaves no zone to run in"));
    }
  }
  std::vector<std::string> ticks, spans;
  for (const dl::Zone& z : zones) {
    ticks.push_back(absl::StrCat(z.name, " ", HumanDuration(z.trace.gap_s)));
    spans.push_back(absl::StrCat(z.name, " ", HumanDuration(z.trace.duration_s())));
  }
  auto aligned = dl::AlignZones(zones);
  if (!aligned.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--availability: ", aligned.status().message()));
  }
  const dl::AvailabilityTrace& grid = aligned->front().trace;
  std::vector<std::string> said;
  for (const dl::Zone& z : zones) {
    if (z.trace.gap_s != grid.gap_s) {
      said.push_back(absl::StrCat("the traces' ticks differ (", absl::StrJoin(ticks, ", "),
                                  "): all are resampled to ", HumanDuration(grid.gap_s),
                                  ", a tick holding the least count of the ticks it overlaps"));
      break;
    }
  }
  for (const dl::Zone& z : zones) {
    if (z.trace.duration_s() > grid.duration_s() + 1e-6) {
      said.push_back(absl::StrCat("the traces' spans differ (", absl::StrJoin(spans, ", "),
                                  "): all are cut to the shortest, ",
                                  HumanDuration(grid.duration_s())));
      break;
    }
  }
  *aligned_note = absl::StrJoin(said, "; ");
  return aligned;
}

// The share of a zone's trace with spot for the job's instances.
double AvailableFraction(const dl::Zone& z, int instances) {
  const dl::AvailabilityStats s = dl::TraceStats(z.trace, 0, z.trace.duration_s(), instances, 0);
  return s.observed_s > 0 ? s.available_s / s.observed_s : 0;
}

void PrintZones(const std::vector<dl::Zone>& zones, const dl::WindowJob& job, std::ostream& out) {
  Table t({"zone", "trace", "spot $/h", "spot there"});
  for (const dl::Zone& z : zones) {
    t.AddRow({z.name, z.trace.source,
              Dollars(z.spot_price_per_hour < 0 ? job.spot_price_per_hour : z.spot_price_per_hour),
              absl::StrCat(Fixed(100 * AvailableFraction(z, job.instances), 1), "%")});
  }
  t.Print(out);
}

std::string ZonesJson(const std::vector<dl::Zone>& zones, const dl::WindowJob& job) {
  std::vector<std::string> items;
  for (const dl::Zone& z : zones) {
    items.push_back(JsonObject()
                        .String("zone", z.name)
                        .String("trace", z.trace.source)
                        .Number("spot_price_per_hour", z.spot_price_per_hour < 0
                                                           ? job.spot_price_per_hour
                                                           : z.spot_price_per_hour)
                        .Number("available_fraction", AvailableFraction(z, job.instances))
                        .str());
  }
  return "[" + absl::StrJoin(items, ",") + "]";
}

// The one-instance form: --availability FILE --work W --deadline D ... replays every window of the
// trace under one deadline policy (provisioner/deadline/window_replay.h states the model).
int SimulateWindows(const Args& args, const Io& io) {
  auto fail = [&](const absl::Status& s) { return ReportError(s, "simulate", io); };
  for (const char* flag : {"--work", "--deadline", "--spot-price", "--on-demand-price"}) {
    if (!args.Has(flag)) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("missing required flag ", flag,
                       " (the one-instance form: --availability FILE --work "
                       "W --deadline D --spot-price P --on-demand-price P)")));
    }
  }
  for (const char* flag : {"--workload", "--catalog", "--cluster", "--loss", "--iterations"}) {
    if (args.Has(flag)) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          flag, ": not used with --work (the one-instance form replays work on one instance)")));
    }
  }
  const std::string file = *args.Get("--availability");
  // ZONE=FILE,...: one type in several zones; a plain FILE: one zone.
  const bool zoned = file.find('=') != std::string::npos;
  if (file.empty() || (!zoned && file.find(',') != std::string::npos)) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--availability = \"", file,
        "\": the one-instance form (--work) takes one trace FILE, or ZONE=FILE,... for the zones "
        "the job may move between")));
  }
  for (const char* flag : {"--zone-price", "--avoid-zone"}) {
    if (!zoned && args.Has(flag)) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat(flag, ": needs zones (--availability ZONE=FILE,ZONE=FILE,...)")));
    }
  }
  dl::WindowJob job;
  auto work = ParseDuration("--work", *args.Get("--work"));
  if (!work.ok()) return fail(work.status());
  auto deadline = ParseDuration("--deadline", *args.Get("--deadline"));
  if (!deadline.ok()) return fail(deadline.status());
  job.work_s = *work;
  job.deadline_s = *deadline;
  job.changeover_s = 0;
  if (auto c = args.Get("--changeover")) {
    auto v = ParseDuration("--changeover", *c, /*allow_zero=*/true);
    if (!v.ok()) return fail(v.status());
    job.changeover_s = *v;
  }
  for (auto [flag, out] : {std::pair{"--spot-price", &job.spot_price_per_hour},
                           std::pair{"--on-demand-price", &job.on_demand_price_per_hour}}) {
    const std::string text = *args.Get(flag);
    auto v = ParseNumber(flag, text);
    if (!v.ok()) return fail(v.status());
    if (*v < 0) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat(flag, " = \"", text, "\": a price in $/h cannot be negative")));
    }
    *out = *v;
  }
  if (auto v = args.Get("--instances")) {
    auto n = ParseInt("--instances", *v, 1, 100000);
    if (!n.ok()) return fail(n.status());
    job.instances = *n;
  }
  double every = job.deadline_s;
  if (auto e = args.Get("--start-every")) {
    auto v = ParseDuration("--start-every", *e);
    if (!v.ok()) return fail(v.status());
    every = *v;
  }
  std::string policy = args.Get("--policy").value_or("ours");
  const std::string fallback = args.Get("--fallback").value_or("on-demand");
  if (fallback != "on-demand" && fallback != "none") {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--fallback = \"", fallback, "\": must be on-demand or none")));
  }
  if (fallback == "none") {
    if (args.Has("--policy") && policy != "spot-only") {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "--policy = \"", policy, "\": --fallback none replays spot only (no policy to choose)")));
    }
    policy = "spot-only";
  }
  if (policy != "optimum" && policy != "spot-only" && !dl::MakeDeadlinePolicy(policy).ok()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--policy = \"", policy,
                     "\": unknown (known: ours, uniform-progress, greedy, on-demand, optimum)")));
  }
  std::string aligned_note;
  auto zones = ReadZones(args, file, zoned, &aligned_note);
  if (!zones.ok()) return fail(zones.status());
  const dl::AvailabilityTrace& trace = zones->front().trace;
  const auto started = std::chrono::steady_clock::now();
  // The optimum through several zones takes a while (seconds per window): say how far it is.
  dl::ReplayProgress progress;
  if (zoned && policy == "optimum" && zones->size() > 1) {
    progress = [&](size_t done, size_t total) {
      io.err
          << "simulate: the optimum over " << zones->size() << " zones, window " << done << " of "
          << total << " done ("
          << Fixed(
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                 0)
          << " s)\n";
    };
  }
  auto summary = zoned ? dl::ReplayZoneWindows(*zones, job, every, policy, progress)
                       : dl::ReplayWindows(trace, job, every, policy);
  if (!summary.ok()) {
    // Name the flags: the replay names its fields (deadline, start-every, policy).
    std::string message(summary.status().message());
    for (const char* field :
         {"deadline", "start-every", "policy", "work", "changeover", "instances"}) {
      if (absl::StartsWith(message, absl::StrCat(field, " = "))) message = "--" + message;
    }
    return fail(absl::InvalidArgumentError(message));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  const double on_demand_only =
      (job.work_s + job.changeover_s) / 3600 * job.on_demand_price_per_hour * job.instances;
  // What the answer needs said beside it: spot that cannot save anything, no room to start.
  std::vector<std::string> notes;
  if (!aligned_note.empty()) notes.push_back(aligned_note);
  if (job.spot_price_per_hour > 0 && job.on_demand_price_per_hour <= job.spot_price_per_hour) {
    notes.push_back(absl::StrCat(
        "on-demand (", Dollars(job.on_demand_price_per_hour), "/h) costs no more than spot (",
        Dollars(job.spot_price_per_hour), "/h): ",
        policy == "spot-only"
            ? "--fallback none replays spot anyway; on-demand alone would cost no more and is "
              "never preempted"
        : policy == "optimum"
            ? "the optimum buys spot only where it costs no more (the online policies run "
              "on-demand all the way)"
            : "the policies run on-demand all the way (spot would add preemptions for no "
              "saving)"));
  }
  if (std::string note = SlackNote(job, policy, PlanOrigin::kOneInstance); !note.empty()) {
    notes.push_back(std::move(note));
  }
  if (io.json) {
    JsonObject o;
    o.String("policy", policy)
        .String("availability", file)
        .Number("work_s", job.work_s)
        .Number("deadline_s", job.deadline_s)
        .Number("changeover_s", job.changeover_s)
        .Number("spot_price_per_hour", job.spot_price_per_hour)
        .Number("on_demand_price_per_hour", job.on_demand_price_per_hour)
        .Number("start_every_s", every)
        .String("fallback", fallback)
        .Integer("instances", job.instances);
    if (zoned) o.Raw("zones", ZonesJson(*zones, job)).Integer("moves", summary->moves);
    o.Raw("windows", WindowsJson(*summary, zoned))
        .Number("met_fraction", summary->met_fraction)
        .Number("mean_cost_usd", summary->mean_cost_usd)
        .Number("on_demand_only_cost_usd", on_demand_only)
        .Integer("missed_where_on_demand_could_meet", summary->missed_on_demand_could_meet)
        .Number("spot_hours", summary->spot_hours)
        .Number("on_demand_hours", summary->on_demand_hours)
        .Integer("changeovers", summary->changeovers)
        .Raw("notes", JsonStrings(notes))
        .Number("simulate_ms", ms);
    io.out << o.str() << "\n";
    return kExitOk;
  }
  io.out << "Simulation: " << HumanDuration(job.work_s) << " of work on "
         << (job.instances == 1 ? std::string("one instance")
                                : absl::StrCat(job.instances, " instances at once"))
         << " by " << HumanDuration(job.deadline_s) << ", changeover "
         << HumanDuration(job.changeover_s) << ", spot " << Dollars(job.spot_price_per_hour)
         << "/h, on-demand " << Dollars(job.on_demand_price_per_hour) << "/h"
         << (job.instances == 1 ? "" : " per instance") << "\n";
  if (zoned) {
    io.out << zones->size() << " zones (" << HumanDuration(trace.duration_s()) << ", tick "
           << HumanDuration(trace.gap_s) << "), a window every " << HumanDuration(every)
           << ", policy " << policy << "\n\n";
    PrintZones(*zones, job, io.out);
    io.out << "\n";
  } else {
    io.out << "trace " << file << " (" << HumanDuration(trace.duration_s()) << ", tick "
           << HumanDuration(trace.gap_s) << "), a window every " << HumanDuration(every)
           << ", policy " << policy << "\n\n";
  }
  PrintWindows(*summary, io.out, zoned);
  io.out << "\n"
         << summary->windows.size() << " windows: deadline met in "
         << Fixed(100 * summary->met_fraction, 1) << "%, mean cost "
         << Dollars(summary->mean_cost_usd) << " (on-demand only " << Dollars(on_demand_only)
         << ")\n";
  io.out << "spot " << Fixed(summary->spot_hours, 1) << " h, on-demand "
         << Fixed(summary->on_demand_hours, 1) << " h, " << summary->changeovers << " changeovers";
  if (zoned) io.out << ", " << summary->moves << " moves between zones";
  io.out << " in all\n";
  if (summary->missed_on_demand_could_meet > 0) {
    io.out << "missed where on-demand alone would have met the deadline: "
           << summary->missed_on_demand_could_meet << "\n";
  }
  for (const std::string& n : notes) io.out << "Note: " << n << "\n";
  return kExitOk;
}

// The cluster form's section of the table output: the replay's settings, its windows, totals and
// notes.
void PrintClusterReplay(const ClusterReplay& r, std::ostream& out) {
  PrintWindows(r.summary, out, r.zoned);
  out << r.summary.windows.size() << " windows: deadline met in "
      << Fixed(100 * r.summary.met_fraction, 1) << "%, mean cost "
      << Dollars(r.summary.mean_cost_usd) << "; spot " << Fixed(r.summary.spot_hours, 2)
      << " h, on-demand " << Fixed(r.summary.on_demand_hours, 2) << " h, " << r.summary.changeovers
      << " changeovers in all\n";
  for (const std::string& n : r.notes) out << "Note: " << n << "\n";
}

// The cluster form's JSON object.
std::string ClusterReplayJson(const ClusterAvailability& c, const ClusterReplay& r) {
  return JsonObject()
      .String("fallback", c.fallback)
      .String("policy", r.summary.policy)
      .Number("changeover_s", r.job.changeover_s)
      .Number("work_s", r.job.work_s)
      .Number("slack_s", r.job.deadline_s - r.job.work_s)
      .Number("spot_price_per_hour", r.job.spot_price_per_hour)
      .Number("on_demand_price_per_hour", r.job.on_demand_price_per_hour)
      .Raw("windows", WindowsJson(r.summary, r.zoned))
      .Integer("moves", r.summary.moves)
      .Number("met_fraction", r.summary.met_fraction)
      .Number("mean_cost_usd", r.summary.mean_cost_usd)
      .Number("spot_hours", r.summary.spot_hours)
      .Number("on_demand_hours", r.summary.on_demand_hours)
      .Integer("changeovers", r.summary.changeovers)
      .Integer("missed_where_on_demand_could_meet", r.summary.missed_on_demand_could_meet)
      .Raw("bought_on_demand", JsonStrings(r.on_demand_types))
      .Raw("without_trace", JsonStrings(r.untraced_types))
      .Raw("notes", JsonStrings(r.notes))
      .str();
}

}  // namespace

int Simulate(const Args& args, pb::Provisioner::StubInterface& stub,
             const services::DataRegistry& local, const Io& io) {
  // The service names its request's fields; the user typed flags.
  auto fail = [&](const absl::Status& s) {
    return ReportError(NameFlags(s, ProvisionerFieldFlags()), "simulate", io);
  };
  for (const char* flag : {"--workload", "--catalog", "--deadline"}) {
    if (!args.Has(flag)) {
      return fail(absl::InvalidArgumentError(absl::StrCat("missing required flag ", flag)));
    }
  }
  const bool metric_target = args.Has("--loss") || args.Has("--accuracy") || args.Has("--target");
  if (metric_target == args.Has("--iterations")) {
    return fail(absl::InvalidArgumentError(
        "give one of --accuracy A, --target METRIC>=V, --loss L and --iterations N"));
  }
  pb::SimulateRequest request;
  const std::string workload = *args.Get("--workload"), catalog = *args.Get("--catalog");
  auto workload_ref = ResolveWorkloadArg(args, workload, local);
  if (!workload_ref.ok()) return fail(workload_ref.status());
  auto catalog_ref = CatalogRefFor(catalog, local);
  if (!catalog_ref.ok()) return fail(catalog_ref.status());
  *request.mutable_workload() = *workload_ref;
  *request.mutable_catalog() = *catalog_ref;
  // Its types and prices, when known here (a name only a remote server knows is not).
  const std::optional<pb::InstanceCatalog> known = KnownCatalog(*catalog_ref, local);
  const pb::InstanceCatalog* known_catalog = known ? &*known : nullptr;
  std::optional<ClusterAvailability> replay;
  if (args.Has("--availability")) {
    auto c = ParseClusterAvailability(args, known_catalog, /*with_policy=*/true);
    if (!c.ok()) return fail(c.status());
    replay = *std::move(c);
  }
  const PlanOrigin origin = args.Has("--cluster") ? PlanOrigin::kGiven : PlanOrigin::kPlanned;
  std::string target_text;
  if (metric_target) {
    auto target = ParseTargetFlags(args);  // --loss, --accuracy or --target (one)
    if (!target.ok()) return fail(target.status());
    target->ApplyTo(request.mutable_slo());
    if (target->metric) target_text = target->Describe();
  } else {
    auto n = ParseNumber("--iterations", *args.Get("--iterations"));
    if (!n.ok()) return fail(n.status());
    if (!(*n > 0)) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "--iterations = \"", *args.Get("--iterations"), "\": must be a positive number")));
    }
    if (!args.Has("--cluster")) {
      return fail(absl::InvalidArgumentError(
          "--iterations needs --cluster: the loss they reach depends on the cluster"));
    }
    request.set_iterations(*n);
  }
  auto deadline = ParseDuration("--deadline", *args.Get("--deadline"));
  if (!deadline.ok()) return fail(deadline.status());
  request.mutable_slo()->set_deadline_s(*deadline);
  auto budget = ParseBudgetFlag(args);
  if (!budget.ok()) return fail(budget.status());
  if (*budget > 0) request.mutable_slo()->set_budget_usd(*budget);
  if (auto c = args.Get("--cluster")) {
    auto counts = ParseCounts("--cluster", *c);
    if (!counts.ok()) return fail(counts.status());
    AddCounts(*counts, request.mutable_cluster());
  }
  pb::PlanOptions& options = *request.mutable_options();
  if (auto s = ParsePlanOptionFlags(args, &options); !s.ok()) return fail(s);
  if (auto q = args.Get("--quota")) {
    auto counts = ParseCounts("--quota", *q);
    if (!counts.ok()) return fail(counts.status());
    for (const auto& [type, n] : *counts) {
      pb::InstanceCount* c = options.add_quota_overrides();
      c->set_instance_type(type);
      c->set_count(n);
    }
  }
  if (options.parameter_servers() > 0) {
    request.mutable_cluster()->set_parameter_servers(options.parameter_servers());
  }
  if (auto s = SimulationFlags(args, options.mutable_simulation()); !s.ok()) return fail(s);
  if (auto sync = args.Get("--sync")) {
    auto kind = predictor::ParseSyncKind(*sync, "--sync");
    if (!kind.ok()) return fail(kind.status());
    options.mutable_simulation()->set_sync(
        *kind == predictor::SyncKind::kAllReduce ? pb::SYNC_KIND_ALLREDUCE : pb::SYNC_KIND_PS);
  }
  if (auto b = args.Get("--local-batch")) {
    auto parsed = ParseInt("--local-batch", *b, 1, predictor::kMaxBatchPerGpu);
    if (!parsed.ok()) return fail(parsed.status());
    options.mutable_simulation()->set_local_batch(*parsed);
  }

  const clients::ProvisionerClient provisioner(stub, clients::CallPolicy::LongRunning());
  auto simulated_response = provisioner.Simulate(request);
  const bool no_revocation_model =
      !simulated_response.ok() &&
      absl::StrContains(simulated_response.status().message(), "nothing to simulate");
  if (no_revocation_model && !replay) {
    return fail(absl::Status(
        simulated_response.status().code(),
        absl::StrCat(simulated_response.status().message(),
                     "; or replay spot capacity instead with --availability TYPE=FILE,...")));
  }
  if (no_revocation_model) {
    // No revocation model: the availability traces alone (capacity replay of the cluster given
    // or the cheapest plan).
    request.set_plan_only(true);
    request.mutable_options()->clear_simulation();
    auto planned = provisioner.Simulate(request);
    if (!planned.ok()) return fail(planned.status());
    const pb::Plan& p = planned->plan();
    if (!(p.time_s() > 0)) {  // no cluster given and no plan meets the SLO
      if (io.json) {
        io.out << JsonObject().Bool("feasible", false).String("reason", p.reason()).str() << "\n";
      } else {
        io.out << "No plan meets the SLO, so there is nothing to replay: " << p.reason() << "\n";
      }
      return kExitInfeasible;
    }
    auto r = ReplayPlanCluster(p, *deadline, options.revocation_overhead_s(), *replay,
                               replay->policy, known_catalog, origin);
    if (!r.ok()) return fail(r.status());
    if (io.json) {
      io.out << JsonObject()
                    .Raw("cluster", ClusterJson(p.cluster()))
                    .String("cluster_from", origin == PlanOrigin::kGiven ? "given" : "plan")
                    .Bool("meets_slo_without_revocations", p.feasible())
                    .Number("deadline_s", *deadline)
                    .Number("planned_time_s", p.time_s())
                    .Number("planned_cost_usd", p.cost_usd())
                    .String("revocations", "none (no revocation model): capacity alone")
                    .Raw("availability", ClusterReplayJson(*replay, *r))
                    .str()
             << "\n";
      return kExitOk;
    }
    io.out << "Simulation: " << workload << " on " << catalog << ", cluster "
           << ClusterText(p.cluster()) << " ("
           << (origin == PlanOrigin::kGiven ? "given" : "the cheapest plan") << ": "
           << HumanDuration(p.time_s()) << ", " << Dollars(p.cost_usd()) << "), deadline "
           << HumanDuration(*deadline) << "\n";
    if (!p.feasible()) io.out << "Note: " << p.reason() << "\n";
    io.out << "No revocation model, so the availability traces alone (fallback " << replay->fallback
           << ", policy " << r->summary.policy << ", changeover "
           << HumanDuration(r->job.changeover_s) << ", a window every "
           << HumanDuration(replay->every_s > 0 ? replay->every_s : *deadline) << ")\n\n";
    PrintClusterReplay(*r, io.out);
    return kExitOk;
  }
  if (!simulated_response.ok()) return fail(simulated_response.status());
  const pb::SimulateResponse& response = *simulated_response;
  const pb::Plan& p = response.plan();
  const bool simulated = p.has_risk();
  if (!simulated) {  // no cluster given and no plan meets the SLO
    if (io.json) {
      io.out << JsonObject().Bool("feasible", false).String("reason", p.reason()).str() << "\n";
    } else {
      io.out << "No plan meets the SLO, so there is nothing to simulate: " << p.reason() << "\n";
    }
    return kExitInfeasible;
  }
  const pb::RiskEstimate& r = p.risk();
  std::optional<ClusterReplay> replayed;
  if (replay) {
    auto s = ReplayPlanCluster(p, *deadline, options.revocation_overhead_s(), *replay,
                               replay->policy, known_catalog, origin);
    if (!s.ok()) return fail(s.status());
    replayed = *std::move(s);
  }
  const std::vector<std::string> dearer = known_catalog && !options.on_demand_prices()
                                              ? SpotDearerNotes(p.cluster(), *known_catalog)
                                              : std::vector<std::string>{};
  if (io.json) {
    std::vector<std::string> models;
    for (const std::string& m : response.revocation_models()) models.push_back(JsonString(m));
    JsonObject o = RiskJson(r);
    o.Raw("cluster", ClusterJson(p.cluster()))
        .String("cluster_from", p.strategy() == pb::PLAN_STRATEGY_GIVEN ? "given" : "plan")
        .Bool("meets_slo_without_revocations", p.feasible())
        .Number("target_loss", response.target_loss());
    if (request.slo().has_target_metric()) {
      o.Raw("target_metric", MetricTargetJson(request.slo().target_metric()));
    }
    o.Number("deadline_s", *deadline)
        .Number("planned_time_s", p.time_s())
        .Number("planned_cost_usd", p.cost_usd())
        .Number("normalized_iterations", p.prediction().normalized_iterations())
        .Number("simulate_ms", p.solve_ms())
        .Raw("revocation_models", "[" + absl::StrJoin(models, ",") + "]")
        .Raw("notes", JsonStrings(dearer));
    if (replayed) o.Raw("availability", ClusterReplayJson(*replay, *replayed));
    io.out << o.str() << "\n";
    return kExitOk;
  }
  io.out << "Simulation: " << workload << " on " << catalog << ", "
         << (target_text.empty() ? absl::StrFormat("loss %g", response.target_loss()) : target_text)
         << " by " << HumanDuration(*deadline) << ", " << r.runs() << " runs (seed " << r.seed()
         << ")\n";
  io.out << "cluster " << ClusterText(p.cluster()) << " ("
         << (p.strategy() == pb::PLAN_STRATEGY_GIVEN ? "given" : "the cheapest plan")
         << "): predicted " << HumanDuration(p.time_s()) << " and " << Dollars(p.cost_usd())
         << " without revocations\n";
  if (!p.feasible()) io.out << "Note: " << p.reason() << "\n";
  for (const std::string& n : dearer) io.out << "Note: " << n << "\n";
  io.out << "\n";
  Table table({"quantity", "mean", "p50", "p90"});
  table.AddRow({"time", HumanDuration(r.expected_time_s()), HumanDuration(r.time_p50_s()),
                HumanDuration(r.time_p90_s())});
  table.AddRow({"cost", Dollars(r.expected_cost_usd()), Dollars(r.cost_p50_usd()),
                Dollars(r.cost_p90_usd())});
  table.AddRow({"revocations per run", Fixed(r.mean_revocations(), 3), "",
                absl::StrCat("max ", Fixed(r.max_revocations(), 0))});
  if (r.synchronous()) {
    table.AddRow({"restarts per run", Fixed(r.mean_restarts(), 3), "", ""});
    table.AddRow({"training redone", HumanDuration(r.redone_mean_s()),
                  HumanDuration(r.redone_p50_s()), HumanDuration(r.redone_p90_s())});
    table.AddRow({"steps redone", Fixed(r.redone_mean_steps(), 0), Fixed(r.redone_p50_steps(), 0),
                  Fixed(r.redone_p90_steps(), 0)});
  }
  table.Print(io.out);
  if (r.synchronous()) {
    io.out << "\nSynchronous: each revocation and each replacement's join restarts every rank ("
           << HumanDuration(r.restart_s()) << ") from the last checkpoint (every "
           << HumanDuration(r.checkpoint_every_s()) << ")\n";
  }
  io.out << "\nP(meet deadline)   " << Probability(r)
         << "  (95% interval of the simulation, not of the lifetime data)\n";
  if (request.slo().budget_usd() > 0) {
    io.out << "P(meet SLO)        " << Fixed(r.p_meet_slo(), 4) << "  (deadline and budget)\n";
  }
  io.out << "P(no revocation)   " << Fixed(r.p_no_revocation(), 4) << "\n";
  if (replayed) {
    io.out << "\nUnder the availability traces (capacity alone, the cluster as one unit; fallback "
           << replay->fallback << ", policy " << replayed->summary.policy << ", changeover "
           << HumanDuration(replayed->job.changeover_s) << "):\n";
    PrintClusterReplay(*replayed, io.out);
  }
  if (r.unfinished_runs() > 0) {
    io.out << "runs stopped at 10x the deadline: " << r.unfinished_runs() << "\n";
  }
  io.out << "re-plans           " << r.replans() << " (" << r.replans_solved()
         << " solved, the rest repeated), simulated in " << absl::StrFormat("%.0f ms", p.solve_ms())
         << "\n\nRevocation models:\n";
  for (const std::string& m : response.revocation_models()) io.out << "  " << m << "\n";
  return kExitOk;
}

std::vector<Command> SimulateCommands() {
  std::vector<Command> commands = {{
      .name = "simulate",
      .summary = "replay a job with sampled revocations: P(meet deadline), time and cost spread",
      .synopsis = "--workload W --catalog C --deadline D (--loss L | --accuracy A |\n"
                  "--target METRIC>=V | --iterations N)\n"
                  "[--cluster TYPE=N,...] [--lifetimes FILE] [--runs N] [--seed S]\n"
                  "[--overhead D] [--notice D] [--takeover-delay D] [--budget USD]\n"
                  "[--quota TYPE=N,...] [--strategy exact|spotdnn|exhaustive]\n"
                  "[--parameter-servers N] [--on-demand] [--json] [--server HOST:PORT]\n"
                  "[--data-dir D | --profiler H:P] [--sync allreduce|ps] [--local-batch B]\n"
                  "[--restart D] [--checkpoint-every D] [--min-instances N]",
      .description =
          "Replays the job --runs times. Each instance's lifetime is sampled from its type's "
          "lifetime\ndistribution; every revocation is handled as `spotdnn run` handles it: at "
          "the notice the rest of\nthe job is re-planned with the survivors and the progress so "
          "far, the takeover instances are\nlaunched at once (one of the revoked type when no "
          "plan can meet the deadline any more) and train\nafter the takeover delay. Prints the "
          "probability of meeting the deadline (with the 95% interval\nof the simulation), time "
          "and cost (mean, p50, p90) and revocations per run. The same seed gives\nthe same "
          "numbers.",
      .flags = {{"--workload", "W",
                 "a stored profile's name (spotdnn profile list), a built-in one (spotdnn\n"
                 "workloads) or a JSON file"},
                {"--catalog", "C", "built-in catalog name or a JSON file"},
                {"--cluster", "TYPE=N,...",
                 "the cluster to simulate (default: the cheapest plan for the SLO)"},
                {"--loss", "L", "the target loss, or"},
                {"--accuracy", "A", "the target accuracy (a fraction), or"},
                {"--target", "METRIC>=V|METRIC<=V", "a target in any metric, or"},
                {"--iterations", "N",
                 "normalized iterations on --cluster (the target loss is the model's\nloss after "
                 "them)"},
                {"--deadline", "D", "2400, 40m, 1.5h: the probability is of meeting it"},
                {"--overhead", "D",
                 "the revocation overhead T_ohd the re-plans budget (default 0)"},
                {"--budget", "USD", "also count runs within this cost (P(meet SLO))"},
                {"--quota", "TYPE=N,...", "as in `spotdnn plan`"},
                {"--strategy", "S", "as in `spotdnn plan`"},
                {"--margin", "F", "as in `spotdnn plan`"},
                {"--parameter-servers", "N", "as in `spotdnn plan`"},
                {"--on-demand", "", "as in `spotdnn plan`"},
                {"--sync", "allreduce|ps",
                 "how the workload trains (default: the profile's); a synchronous job\nrestarts "
                 "every rank on each revocation (--restart, --checkpoint-every)"},
                {"--local-batch", "B",
                 "a synchronous job: samples per GPU per step; the training instances'\nspeed is "
                 "then the profile's all-reduce model's (default: the plan's model's)"},
                ServerFlag("spotdnn-provisioner"),
                DataDirFlag(),
                {"--profiler", "H:P",
                 "a running spotdnn-profiler whose stored profiles --workload may name\n"
                 "(default: DATA_DIR/profiles.db)"}},
      .footer = "Exit status: 0 simulated, 3 no plan meets the SLO (without --cluster), 2 bad "
                "input, 1 service\nfailure.",
      .run =
          [](const Args& args, const Io& io) {
            if (args.Has("--availability") && args.Has("--work")) return SimulateWindows(args, io);
            auto connection = Connect<pb::Provisioner, services::ProvisionerServiceImpl>(args);
            if (!connection.ok()) return ReportError(connection.status(), "simulate", io);
            return Simulate(args, *connection->stub, services::DataRegistry::WithBuiltins(), io);
          },
  }};
  for (FlagHelp& f : SimulationFlagHelp()) commands[0].flags.push_back(std::move(f));
  // The one-instance form with an availability trace.
  for (FlagHelp f : std::vector<FlagHelp>{
           {"--availability", "FILE | ZONE=FILE,... | TYPE[@ZONE]=FILE,...",
            "spot availability traces (NSDI'24 JSON or time,count CSV): with --work one\n"
            "FILE, or ZONE=FILE per zone the job may move between (the one-instance\n"
            "form); with --workload TYPE=FILE per type (TYPE@ZONE=FILE: per type and\n"
            "zone, the cluster in one zone at a time): the\n"
            "cluster (--cluster or the cheapest plan) is also replayed through them, a\n"
            "window per --start-every; alone when there is no revocation model. Types\n"
            "whose spot price is not below on-demand are bought on-demand (no trace)"},
           {"--work", "D", "the one-instance form: work in seconds of one instance (24h)"},
           {"--instances", "N",
            "the one-instance form: instances the job needs at once (default 1); a zone\n"
            "serves it while its count is at least N, a drop below preempts all N"},
           {"--zone-price", "ZONE=USD,...",
            "spot $/h per instance in these zones (default --spot-price)"},
           {"--avoid-zone", "ZONE,...", "zones of --availability never to run in"},
           {"--changeover", "D",
            "billed time without progress at each instance start (one-instance form\n"
            "default 0, cluster form 5m)"},
           {"--spot-price", "USD", "spot $/h of the instance (one-instance form)"},
           {"--on-demand-price", "USD", "on-demand $/h of the instance (one-instance form)"},
           {"--start-every", "D", "one window per start offset (default: the deadline)"},
           {"--policy", "P", "ours (default), uniform-progress, greedy, on-demand, optimum"},
           {"--fallback", "F", "on-demand (default) or none: spot only, wait for it"}}) {
    commands[0].flags.push_back(std::move(f));
  }
  commands[0].synopsis +=
      "\n[--availability TYPE=FILE,... [--fallback on-demand|none] [--policy P]\n"
      "[--changeover D] [--start-every D]]\n\n"
      "or, one instance (or N at once) against availability traces, in one zone or several:\n"
      "--availability FILE|ZONE=FILE,... --work D --deadline D --spot-price USD\n"
      "--on-demand-price USD [--instances N] [--zone-price ZONE=USD,...]\n"
      "[--avoid-zone ZONE,...] [--changeover D] [--start-every D]\n"
      "[--policy ours|uniform-progress|greedy|on-demand|optimum]\n"
      "[--fallback on-demand|none] [--json]";
  return commands;
}

}  // namespace spotdnn::gateway
