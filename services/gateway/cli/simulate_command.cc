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
#include "provisioner/deadline/availability_trace.h"
#include "provisioner/deadline/window_replay.h"
#include "services/clients/service_clients.h"
#include "services/common/convert.h"
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
  if (file.empty() || file.find('=') != std::string::npos || file.find(',') != std::string::npos) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--availability = \"", file,
        "\": the one-instance form (--work) takes one trace FILE, not TYPE=FILE,...")));
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
  auto trace = dl::ReadAvailabilityTrace(file);
  if (!trace.ok()) {
    return fail(absl::Status(trace.status().code(),
                             absl::StrCat("--availability: ", trace.status().message())));
  }
  const auto started = std::chrono::steady_clock::now();
  auto summary = dl::ReplayWindows(*trace, job, every, policy);
  if (!summary.ok()) {
    // Name the flags: the replay names its fields (deadline, start-every, policy).
    std::string message(summary.status().message());
    for (const char* field : {"deadline", "start-every", "policy", "work", "changeover"}) {
      if (absl::StartsWith(message, absl::StrCat(field, " = "))) message = "--" + message;
    }
    return fail(absl::InvalidArgumentError(message));
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  const double on_demand_only =
      (job.work_s + job.changeover_s) / 3600 * job.on_demand_price_per_hour;
  const bool optimum = policy == "optimum";
  if (io.json) {
    std::vector<std::string> windows;
    for (const dl::WindowResult& w : summary->windows) {
      JsonObject o;
      o.Number("start_s", w.start_s).Bool("met", w.met).Number("cost_usd", w.cost_usd);
      if (w.met || !optimum) o.Number("finish_s", w.finish_s);
      if (!optimum) {
        o.Number("spot_hours", w.spot_hours)
            .Number("on_demand_hours", w.on_demand_hours)
            .Integer("changeovers", w.changeovers);
      }
      o.Bool("on_demand_can_meet", w.on_demand_can_meet);
      windows.push_back(o.str());
    }
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
        .Raw("windows", "[" + absl::StrJoin(windows, ",") + "]")
        .Number("met_fraction", summary->met_fraction)
        .Number("mean_cost_usd", summary->mean_cost_usd)
        .Number("on_demand_only_cost_usd", on_demand_only)
        .Integer("missed_where_on_demand_could_meet", summary->missed_on_demand_could_meet);
    if (!optimum) {
      o.Number("spot_hours", summary->spot_hours)
          .Number("on_demand_hours", summary->on_demand_hours)
          .Integer("changeovers", summary->changeovers);
    }
    o.Number("simulate_ms", ms);
    io.out << o.str() << "\n";
    return kExitOk;
  }
  io.out << "Simulation: " << HumanDuration(job.work_s) << " of work on one instance by "
         << HumanDuration(job.deadline_s) << ", changeover " << HumanDuration(job.changeover_s)
         << ", spot " << Dollars(job.spot_price_per_hour) << "/h, on-demand "
         << Dollars(job.on_demand_price_per_hour) << "/h\n"
         << "trace " << file << " (" << HumanDuration(trace->duration_s()) << ", tick "
         << HumanDuration(trace->gap_s) << "), a window every " << HumanDuration(every)
         << ", policy " << policy << "\n\n";
  Table table(optimum ? std::vector<std::string>{"start", "met", "cost", "finish"}
                      : std::vector<std::string>{"start", "met", "cost", "spot h", "on-demand h",
                                                 "changeovers", "finish"});
  for (const dl::WindowResult& w : summary->windows) {
    std::vector<std::string> row = {HumanDuration(w.start_s), w.met ? "yes" : "MISSED",
                                    Dollars(w.cost_usd)};
    if (!optimum) {
      row.push_back(Fixed(w.spot_hours, 2));
      row.push_back(Fixed(w.on_demand_hours, 2));
      row.push_back(absl::StrCat(w.changeovers));
    }
    row.push_back(w.met || !optimum ? HumanDuration(w.finish_s) : "-");
    table.AddRow(std::move(row));
  }
  table.Print(io.out);
  io.out << "\n"
         << summary->windows.size() << " windows: deadline met in "
         << Fixed(100 * summary->met_fraction, 1) << "%, mean cost "
         << Dollars(summary->mean_cost_usd) << " (on-demand only " << Dollars(on_demand_only)
         << ")\n";
  if (!optimum) {
    io.out << "spot " << Fixed(summary->spot_hours, 1) << " h, on-demand "
           << Fixed(summary->on_demand_hours, 1) << " h, " << summary->changeovers
           << " changeovers in all\n";
  }
  if (summary->missed_on_demand_could_meet > 0) {
    io.out << "missed where on-demand alone would have met the deadline: "
           << summary->missed_on_demand_could_meet << "\n";
  }
  return kExitOk;
}

// `simulate --availability TYPE=FILE,...` (the cluster form): the cluster replayed as one unit
// through its types' traces (spot when every type has capacity for its count), a window per
// --start-every, with the fallback's policy. Prints its section of the output.
struct ClusterReplay {
  std::vector<std::pair<std::string, dl::AvailabilityTrace>> traces;
  std::string fallback = "on-demand";
  std::string policy = "ours";
  double changeover_s = 300;
  std::optional<double> every_s;
};

absl::StatusOr<ClusterReplay> ParseClusterReplay(const Args& args) {
  ClusterReplay c;
  auto traces = dl::ReadTypeTraces("--availability", *args.Get("--availability"));
  if (!traces.ok()) return traces.status();
  c.traces = *std::move(traces);
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

// Replays `p`'s cluster; "" and the JSON, or the reason it could not.
absl::StatusOr<dl::ReplaySummary> ReplayCluster(const pb::Plan& p, double deadline_s,
                                                const ClusterReplay& c, dl::WindowJob* job) {
  std::vector<std::pair<const dl::AvailabilityTrace*, int>> parts;
  for (const pb::InstanceCount& n : p.cluster().instances()) {
    if (n.count() <= 0) continue;
    for (const auto& [type, trace] : c.traces) {
      if (type == n.instance_type()) parts.emplace_back(&trace, n.count());
    }
  }
  if (parts.empty()) {
    return absl::InvalidArgumentError(
        "--availability: no trace for the cluster's types (give TYPE=FILE for them)");
  }
  auto joint = dl::JointTrace(parts);
  if (!joint.ok()) return joint.status();
  if (!(p.time_s() > 0)) return absl::FailedPreconditionError("the cluster has no predicted time");
  job->work_s = p.time_s();
  job->deadline_s = deadline_s;
  job->changeover_s = c.changeover_s;
  job->spot_price_per_hour = p.spot_cost_usd() / p.time_s() * 3600;
  job->on_demand_price_per_hour = p.on_demand_cost_usd() / p.time_s() * 3600;
  auto summary = dl::ReplayWindows(*joint, *job, c.every_s.value_or(deadline_s), c.policy);
  if (!summary.ok()) {
    std::string message(summary.status().message());
    for (const char* field : {"deadline", "start-every"}) {
      if (absl::StartsWith(message, absl::StrCat(field, " = "))) message = "--" + message;
    }
    return absl::InvalidArgumentError(message);
  }
  return summary;
}

std::string WindowsJson(const dl::ReplaySummary& s) {
  std::vector<std::string> windows;
  for (const dl::WindowResult& w : s.windows) {
    windows.push_back(JsonObject()
                          .Number("start_s", w.start_s)
                          .Bool("met", w.met)
                          .Number("cost_usd", w.cost_usd)
                          .Number("spot_hours", w.spot_hours)
                          .Number("on_demand_hours", w.on_demand_hours)
                          .Integer("changeovers", w.changeovers)
                          .str());
  }
  return "[" + absl::StrJoin(windows, ",") + "]";
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
  std::optional<ClusterReplay> replay;
  if (args.Has("--availability")) {
    auto c = ParseClusterReplay(args);
    if (!c.ok()) return fail(c.status());
    replay = *std::move(c);
  }
  pb::SimulateRequest request;
  const std::string workload = *args.Get("--workload"), catalog = *args.Get("--catalog");
  auto workload_ref = ResolveWorkloadArg(args, workload, local);
  if (!workload_ref.ok()) return fail(workload_ref.status());
  auto catalog_ref = CatalogRefFor(catalog, local);
  if (!catalog_ref.ok()) return fail(catalog_ref.status());
  *request.mutable_workload() = *workload_ref;
  *request.mutable_catalog() = *catalog_ref;
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

  const clients::ProvisionerClient provisioner(stub, clients::CallPolicy::LongRunning());
  auto simulated_response = provisioner.Simulate(request);
  if (!simulated_response.ok() && replay && !args.Has("--cluster") &&
      absl::StrContains(simulated_response.status().message(), "nothing to simulate")) {
    // No revocation model: the availability traces alone (capacity replay of the cheapest plan).
    pb::PlanRequest plan_request;
    *plan_request.mutable_workload() = request.workload();
    *plan_request.mutable_catalog() = request.catalog();
    *plan_request.mutable_slo() = request.slo();
    *plan_request.mutable_options() = request.options();
    plan_request.mutable_options()->clear_simulation();
    plan_request.set_mode(pb::PLAN_MODE_DEADLINE);
    auto planned = provisioner.Plan(plan_request);
    if (!planned.ok()) return fail(planned.status());
    if (!planned->plan().feasible()) return fail(simulated_response.status());
    dl::WindowJob job;
    auto s = ReplayCluster(planned->plan(), *deadline, *replay, &job);
    if (!s.ok()) return fail(s.status());
    const pb::Plan& p = planned->plan();
    if (io.json) {
      io.out << JsonObject()
                    .Raw("cluster", ClusterJson(p.cluster()))
                    .Number("deadline_s", *deadline)
                    .Number("planned_time_s", p.time_s())
                    .Number("planned_cost_usd", p.cost_usd())
                    .String("revocations", "none (no revocation model): capacity alone")
                    .Raw("availability", JsonObject()
                                             .String("fallback", replay->fallback)
                                             .String("policy", s->policy)
                                             .Number("changeover_s", job.changeover_s)
                                             .Raw("windows", WindowsJson(*s))
                                             .Number("met_fraction", s->met_fraction)
                                             .Number("mean_cost_usd", s->mean_cost_usd)
                                             .Number("spot_hours", s->spot_hours)
                                             .Number("on_demand_hours", s->on_demand_hours)
                                             .Integer("changeovers", s->changeovers)
                                             .str())
                    .str()
             << "\n";
      return kExitOk;
    }
    io.out << "Simulation: " << workload << " on " << catalog << ", cluster "
           << ClusterText(p.cluster()) << " (the cheapest plan: " << HumanDuration(p.time_s())
           << ", " << Dollars(p.cost_usd()) << "), deadline " << HumanDuration(*deadline)
           << "; no revocation model, so the availability traces alone (fallback "
           << replay->fallback << ", policy " << s->policy << ", changeover "
           << HumanDuration(job.changeover_s) << ")\n\n";
    Table t({"start", "met", "cost", "spot h", "on-demand h", "changeovers"});
    for (const dl::WindowResult& w : s->windows) {
      t.AddRow({HumanDuration(w.start_s), w.met ? "yes" : "MISSED", Dollars(w.cost_usd),
                Fixed(w.spot_hours, 2), Fixed(w.on_demand_hours, 2), absl::StrCat(w.changeovers)});
    }
    t.Print(io.out);
    io.out << s->windows.size() << " windows: deadline met in " << Fixed(100 * s->met_fraction, 1)
           << "%, mean cost " << Dollars(s->mean_cost_usd) << "; spot " << Fixed(s->spot_hours, 2)
           << " h, on-demand " << Fixed(s->on_demand_hours, 2) << " h, " << s->changeovers
           << " changeovers in all\n";
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
  dl::WindowJob replay_job;
  std::optional<dl::ReplaySummary> replayed;
  if (replay) {
    auto s = ReplayCluster(p, *deadline, *replay, &replay_job);
    if (!s.ok()) return fail(s.status());
    replayed = *std::move(s);
  }
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
        .Raw("revocation_models", "[" + absl::StrJoin(models, ",") + "]");
    if (replayed) {
      o.Raw("availability",
            JsonObject()
                .String("fallback", replay->fallback)
                .String("policy", replayed->policy)
                .Number("changeover_s", replay_job.changeover_s)
                .Number("spot_price_per_hour", replay_job.spot_price_per_hour)
                .Number("on_demand_price_per_hour", replay_job.on_demand_price_per_hour)
                .Raw("windows", WindowsJson(*replayed))
                .Number("met_fraction", replayed->met_fraction)
                .Number("mean_cost_usd", replayed->mean_cost_usd)
                .Number("spot_hours", replayed->spot_hours)
                .Number("on_demand_hours", replayed->on_demand_hours)
                .Integer("changeovers", replayed->changeovers)
                .str());
    }
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
  io.out << "\n";
  Table table({"quantity", "mean", "p50", "p90"});
  table.AddRow({"time", HumanDuration(r.expected_time_s()), HumanDuration(r.time_p50_s()),
                HumanDuration(r.time_p90_s())});
  table.AddRow({"cost", Dollars(r.expected_cost_usd()), Dollars(r.cost_p50_usd()),
                Dollars(r.cost_p90_usd())});
  table.AddRow({"revocations per run", Fixed(r.mean_revocations(), 3), "",
                absl::StrCat("max ", Fixed(r.max_revocations(), 0))});
  table.Print(io.out);
  io.out << "\nP(meet deadline)   " << Probability(r)
         << "  (95% interval of the simulation, not of the lifetime data)\n";
  if (request.slo().budget_usd() > 0) {
    io.out << "P(meet SLO)        " << Fixed(r.p_meet_slo(), 4) << "  (deadline and budget)\n";
  }
  io.out << "P(no revocation)   " << Fixed(r.p_no_revocation(), 4) << "\n";
  if (replayed) {
    io.out << "\nUnder the availability traces (capacity alone, the cluster as one unit; fallback "
           << replay->fallback << ", policy " << replayed->policy << ", changeover "
           << HumanDuration(replay_job.changeover_s) << "):\n";
    Table t({"start", "met", "cost", "spot h", "on-demand h", "changeovers"});
    for (const dl::WindowResult& w : replayed->windows) {
      t.AddRow({HumanDuration(w.start_s), w.met ? "yes" : "MISSED", Dollars(w.cost_usd),
                Fixed(w.spot_hours, 2), Fixed(w.on_demand_hours, 2), absl::StrCat(w.changeovers)});
    }
    t.Print(io.out);
    io.out << replayed->windows.size() << " windows: deadline met in "
           << Fixed(100 * replayed->met_fraction, 1) << "%, mean cost "
           << Dollars(replayed->mean_cost_usd) << "; spot " << Fixed(replayed->spot_hours, 2)
           << " h, on-demand " << Fixed(replayed->on_demand_hours, 2) << " h, "
           << replayed->changeovers << " changeovers in all\n";
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
                  "[--data-dir D | --profiler H:P]",
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
  // The one-instance form with an availability trace (issue 26).
  for (FlagHelp f : std::vector<FlagHelp>{
           {"--availability", "FILE | TYPE=FILE,...",
            "spot availability traces (NSDI'24 JSON or time,count CSV): with --work one\n"
            "FILE (the one-instance form); with --workload TYPE=FILE per type: the\n"
            "cluster is also replayed through them, a window per --start-every"},
           {"--work", "D", "the one-instance form: work in seconds of one instance (24h)"},
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
      "\n[--availability TYPE=FILE,... [--fallback on-demand|none] [--changeover D]\n"
      "[--start-every D]]\n\n"
      "or, one instance against an availability trace:\n"
      "--availability FILE --work D --deadline D --spot-price USD\n"
      "--on-demand-price USD [--changeover D] [--start-every D]\n"
      "[--policy ours|uniform-progress|greedy|on-demand|optimum]\n"
      "[--fallback on-demand|none] [--json]";
  return commands;
}

}  // namespace spotdnn::gateway
