// spotdnn plan: the cheapest set of spot instances that reaches a loss by a deadline (deadline
// mode), the fastest within a budget (budget mode), or the whole time/cost frontier.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
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
#include "services/gateway/cli/plan_availability.h"
#include "services/gateway/cli/plan_output.h"
#include "services/gateway/cli/risk_options.h"
#include "services/gateway/cli/stored_profiles.h"
#include "services/gateway/cli/sync_batch_flags.h"
#include "services/gateway/cli/target_flags.h"
#include "services/provisioner/provisioner_service.h"

namespace spotdnn::gateway {
namespace {

// --exhaustive-limit: a whole number in [1, UINT64_MAX], as digits or in floating notation (1e9).
absl::StatusOr<uint64_t> ParseExhaustiveLimit(absl::string_view text) {
  uint64_t limit = 0;
  if (!absl::SimpleAtoi(text, &limit)) {
    limit = 0;  // SimpleAtoi leaves a partial or clamped value behind when it fails
    double value = 0;
    // 0x1p64 is 2^64, the first double above UINT64_MAX; the cast below is defined under it.
    if (absl::SimpleAtod(text, &value) && value >= 1 && value < 0x1p64 &&
        std::floor(value) == value) {
      limit = static_cast<uint64_t>(value);
    }
  }
  if (limit < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--exhaustive-limit = \"", text,
                                                   "\": must be a whole number from 1 to ",
                                                   std::numeric_limits<uint64_t>::max()));
  }
  return limit;
}

// --quota and --existing counts above what a plan may hold, named by the flag.
absl::Status CheckCounts(absl::string_view flag,
                         const std::vector<std::pair<std::string, int>>& counts) {
  for (const auto& [type, n] : counts) {
    if (n > predictor::kMaxInstancesPerType) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: %s=%d: must be at most %d instances of one type", flag, type, n,
                          predictor::kMaxInstancesPerType));
    }
  }
  return absl::OkStatus();
}

// --zone, --region and --avoid-zone: where a plan may go when the catalog lists zones (the
// service checks the names against the catalog).
absl::Status ParseZoneFlags(const Args& args, pb::PlanOptions* options) {
  for (const char* flag : {"--zone", "--region"}) {
    auto value = args.Get(flag);
    if (!value) continue;
    if (value->empty() || absl::StrContains(*value, ',')) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " = \"", *value, "\": expected one name, e.g. ",
                       std::string(flag) == "--zone" ? "us-east-1a" : "us-east-1"));
    }
    if (std::string(flag) == "--zone") {
      options->set_zone(*value);
    } else {
      options->set_region(*value);
    }
  }
  if (auto avoid = args.Get("--avoid-zone")) {
    for (absl::string_view name : absl::StrSplit(*avoid, ',')) {
      if (name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--avoid-zone = \"", *avoid, "\": an empty zone name"));
      }
      options->add_avoid_zones(std::string(name));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int Plan(const Args& args, pb::Provisioner::StubInterface& stub,
         const services::DataRegistry& local, const Io& io) {
  // The service names its request's fields; the user typed flags.
  auto fail = [&](const absl::Status& s) {
    return ReportError(NameFlags(s, ProvisionerFieldFlags()), "plan", io);
  };
  const std::string mode = args.Get("--mode").value_or("deadline");
  if (mode != "deadline" && mode != "budget" && mode != "frontier") {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("--mode = \"", mode, "\": expected deadline, budget or frontier")));
  }
  if (args.Has("--availability") && mode != "deadline") {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        "--availability: the probability is of meeting a deadline; use --mode deadline, not ",
        mode)));
  }
  pb::PlanRequest request;
  request.set_mode(mode == "budget" ? pb::PLAN_MODE_BUDGET : pb::PLAN_MODE_DEADLINE);
  for (const char* flag : {"--workload", "--catalog"}) {
    if (!args.Has(flag))
      return fail(absl::InvalidArgumentError(absl::StrCat("missing required flag ", flag)));
  }
  const std::string workload = *args.Get("--workload"), catalog = *args.Get("--catalog");
  std::string described;
  auto workload_ref = ResolveWorkloadArg(args, workload, local, &described);
  if (!workload_ref.ok()) return fail(workload_ref.status());
  auto catalog_ref = CatalogRefFor(catalog, local);
  if (!catalog_ref.ok()) return fail(catalog_ref.status());
  *request.mutable_workload() = *workload_ref;
  *request.mutable_catalog() = *catalog_ref;
  // Its types and prices, when known here (a name only a remote server knows is not).
  const std::optional<pb::InstanceCatalog> known = KnownCatalog(*catalog_ref, local);
  const pb::InstanceCatalog* known_catalog = known ? &*known : nullptr;
  std::optional<ClusterAvailability> availability;
  if (args.Has("--availability")) {
    auto f = ParseClusterAvailability(args, known_catalog, /*with_policy=*/false);
    if (!f.ok()) return fail(f.status());
    if (!args.Has("--start-every")) f->every_s = 3600;
    availability = *std::move(f);
  }
  auto target = ParseTargetFlags(args);
  if (!target.ok()) return fail(target.status());
  target->ApplyTo(request.mutable_slo());
  if (auto d = args.Get("--deadline")) {
    auto deadline = ParseDuration("--deadline", *d);
    if (!deadline.ok()) return fail(deadline.status());
    request.mutable_slo()->set_deadline_s(*deadline);
  } else if (mode == "deadline") {
    return fail(absl::InvalidArgumentError(
        "missing required flag --deadline (or use --mode budget or --mode frontier)"));
  }
  auto budget = ParseBudgetFlag(args);
  if (!budget.ok()) return fail(budget.status());
  if (*budget > 0) {
    request.mutable_slo()->set_budget_usd(*budget);
  } else if (mode == "budget") {
    return fail(absl::InvalidArgumentError("missing required flag --budget (with --mode budget)"));
  }
  pb::PlanOptions& options = *request.mutable_options();
  if (auto s = ParsePlanOptionFlags(args, &options); !s.ok()) return fail(s);
  if (auto s = ParseZoneFlags(args, &options); !s.ok()) return fail(s);
  if (auto sync = args.Get("--sync")) {
    auto kind = predictor::ParseSyncKind(*sync, "--sync");
    if (!kind.ok()) return fail(kind.status());
    request.set_sync(*kind == predictor::SyncKind::kAllReduce ? pb::SYNC_KIND_ALLREDUCE
                                                              : pb::SYNC_KIND_PS);
  }
  auto batch_flags = ParseSyncBatchFlags(args);
  if (!batch_flags.ok()) return fail(batch_flags.status());
  request.set_global_batch(batch_flags->global_batch);
  request.set_local_batch(batch_flags->local_batch);
  request.set_global_batch_mode(batch_flags->mode);
  for (const char* flag : {"--zone", "--region", "--avoid-zone"}) {
    if (mode == "frontier" && args.Has(flag)) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          flag, ": the frontier is of the catalog as it is; use --mode deadline or budget")));
    }
  }
  if (mode == "frontier" &&
      (batch_flags->local_batch != 0 || batch_flags->mode == pb::GLOBAL_BATCH_SCALE)) {
    return fail(absl::InvalidArgumentError(absl::StrCat(
        batch_flags->local_batch != 0 ? "--local-batch" : "--global-batch scale",
        ": the frontier of a synchronous workload is planned at a fixed global batch; use "
        "--global-batch B, or --mode deadline or budget")));
  }
  if (auto q = args.Get("--quota")) {
    auto counts = ParseCounts("--quota", *q);
    if (!counts.ok()) return fail(counts.status());
    if (auto s = CheckCounts("--quota", *counts); !s.ok()) return fail(s);
    for (const auto& [type, n] : *counts) {
      pb::InstanceCount* c = options.add_quota_overrides();
      c->set_instance_type(type);
      c->set_count(n);
    }
  }
  if (auto e = args.Get("--existing")) {
    auto counts = ParseCounts("--existing", *e);
    if (!counts.ok()) return fail(counts.status());
    if (auto s = CheckCounts("--existing", *counts); !s.ok()) return fail(s);
    for (const auto& [type, n] : *counts) {
      pb::InstanceCount* c = options.mutable_existing()->add_instances();
      c->set_instance_type(type);
      c->set_count(n);
    }
  }
  if (auto n = args.Get("--max-size")) {
    auto size = ParseInt("--max-size", *n, 1, predictor::kMaxClusterSize);
    if (!size.ok()) return fail(size.status());
    options.set_max_cluster_size(*size);
  }
  if (auto n = args.Get("--exhaustive-limit")) {
    auto limit = ParseExhaustiveLimit(*n);
    if (!limit.ok()) return fail(limit.status());
    options.set_exhaustive_limit(*limit);
  }
  double confidence = 0;
  if (auto c = args.Get("--confidence")) {
    auto q = ParseNumber("--confidence", *c);
    if (!q.ok()) return fail(q.status());
    if (!(*q > 0 && *q < 1)) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "--confidence = \"", *c, "\": must be a probability strictly between 0 and 1")));
    }
    if (mode != "deadline") {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("--confidence: risk-aware plans are for --mode deadline, not ", mode)));
    }
    confidence = *q;
    options.set_confidence(confidence);
  }
  if (auto s = SimulationFlags(args, options.mutable_simulation()); !s.ok()) return fail(s);
  // Without --confidence, --lifetimes asks for the plan's (or the frontier's) probabilities.
  const bool simulate = confidence == 0 && args.Has("--lifetimes");
  if (simulate && mode == "budget") {
    return fail(absl::InvalidArgumentError(
        "--lifetimes: the probability is of meeting a deadline; use --mode deadline or frontier"));
  }
  if (simulate && mode == "frontier" && !args.Has("--deadline")) {
    return fail(absl::InvalidArgumentError(
        "--lifetimes with --mode frontier needs --deadline: the probability is of meeting it"));
  }
  const auto plot = args.Get("--plot");
  if (plot && mode != "frontier") {
    return fail(
        absl::InvalidArgumentError("--plot draws the frontier: use it with --mode frontier"));
  }
  // An exhaustive search or a large frontier may take minutes.
  const clients::ProvisionerClient provisioner(stub, clients::CallPolicy::LongRunning());

  if (mode == "frontier") {
    pb::FrontierRequest f;
    *f.mutable_workload() = request.workload();
    *f.mutable_catalog() = request.catalog();
    *f.mutable_slo() = request.slo();
    *f.mutable_options() = request.options();
    f.set_simulate(simulate);
    f.set_sync(request.sync());
    f.set_global_batch(request.global_batch());
    auto answered = provisioner.Frontier(f);
    if (!answered.ok()) return fail(answered.status());
    const pb::FrontierResponse& response = *answered;
    const int n = response.plans_size();
    // The plan for the SLO: the cheapest frontier point (the frontier already honours the
    // deadline and budget), i.e. the last one.
    if (io.json) {
      std::vector<std::string> points;
      for (const pb::Plan& p : response.plans()) points.push_back(RiskPlanJson(p).str());
      JsonObject o =
          n > 0 ? RiskPlanJson(response.plans(n - 1)) : JsonObject().Bool("feasible", false);
      if (simulate) o.Raw("revocation_models", JsonStringArray(response.revocation_models()));
      if (n == 0) {
        o.String("reason", response.reason())
            .Number("fastest_time_s", response.fastest_time_s())
            .Number("fastest_cost_usd", response.fastest_cost_usd())
            .Number("cheapest_time_s",
                    response.cheapest_cost_usd() > 0 ? response.cheapest_time_s() : NAN)
            .Number("cheapest_cost_usd",
                    response.cheapest_cost_usd() > 0 ? response.cheapest_cost_usd() : NAN);
      }
      o.String("mode", "frontier").Raw("frontier", "[" + absl::StrJoin(points, ",") + "]");
      io.out << o.str() << "\n";
    } else {
      io.out << "Time/cost frontier: " << workload << " on " << catalog << ", "
             << target->Describe() << " (" << n << " plans, fastest first)\n\n";
      if (n == 0) {
        PrintInfeasible(response.reason(), response.fastest_time_s(), response.fastest_cost_usd(),
                        response.cheapest_time_s(), response.cheapest_cost_usd(), io.out);
      } else {
        std::vector<std::string> header = {"#", "instances", "time (s)", "time", "cost"};
        if (simulate) {
          header.insert(header.end(), {"P(meet deadline)", "E[cost]"});
        }
        header.push_back("");
        Table table(header);
        table.LeftAlign(1);
        table.LeftAlign(header.size() - 1);
        for (int i = 0; i < n; ++i) {
          const pb::Plan& p = response.plans(i);
          std::vector<std::string> row = {absl::StrCat(i + 1), ClusterText(p.cluster()),
                                          Fixed(p.time_s(), 1), HumanDuration(p.time_s()),
                                          Dollars(p.cost_usd())};
          if (simulate) {
            row.insert(row.end(), {Probability(p.risk()), Dollars(p.risk().expected_cost_usd())});
          }
          row.push_back(i == n - 1 ? "<- cheapest: the plan for this SLO" : "");
          table.AddRow(row);
        }
        table.Print(io.out);
        if (simulate) {
          io.out << "\nP(meet deadline): " << response.plans(0).risk().runs()
                 << " simulated runs per plan (95% interval of the simulation); revocation "
                    "models:\n";
          for (const std::string& m : response.revocation_models()) io.out << "  " << m << "\n";
        }
        io.out << "\nsolve time " << absl::StrFormat("%.2f ms", response.plans(0).solve_ms())
               << ", " << response.plans(0).clusters_evaluated() << " clusters evaluated\n";
      }
    }
    if (plot) {
      std::vector<ChartPoint> points;
      for (int i = 0; i < n; ++i) {
        const pb::Plan& p = response.plans(i);
        ChartPoint point{
            p.time_s() / 60, p.cost_usd(),
            absl::StrCat("plan: ", ClusterText(p.cluster()), ", ", Dollars(p.cost_usd())),
            i == n - 1};
        if (p.has_risk()) {
          point.shade = p.risk().p_meet_deadline();
          absl::StrAppend(&point.label,
                          absl::StrFormat(", P(meet deadline) %.3f", p.risk().p_meet_deadline()));
        }
        points.push_back(point);
      }
      const double d = request.slo().deadline_s();
      const std::string svg =
          SvgChart(points, absl::StrCat("Time/cost frontier: ", workload, ", ", target->Describe()),
                   "predicted time (min)", "cost (USD)", d > 0 ? d / 60 : NAN, "deadline",
                   simulate ? "P(meet deadline), simulated" : "");
      std::ofstream file(*plot, std::ios::trunc);
      file << svg;
      if (!file) {
        return fail(absl::PermissionDeniedError(
            absl::StrCat("--plot = \"", *plot, "\": cannot write the file")));
      }
      if (!io.json) io.out << "frontier chart written to " << *plot << "\n";
    }
    return n > 0 ? kExitOk : kExitInfeasible;
  }

  options.set_include_baselines(true);
  auto answered = provisioner.Plan(request);
  if (!answered.ok()) return fail(answered.status());
  pb::PlanResponse response = *std::move(answered);
  // With --sync: the best plan of the other way of training, when the profile has both.
  std::optional<OtherSync> other;
  if (args.Has("--sync") && confidence == 0) {
    pb::PlanRequest o = request;
    const bool to_ps = request.sync() == pb::SYNC_KIND_ALLREDUCE;
    o.set_sync(to_ps ? pb::SYNC_KIND_PS : pb::SYNC_KIND_ALLREDUCE);
    pb::PlanOptions& oo = *o.mutable_options();
    oo.set_include_baselines(false);
    if (to_ps) {
      o.clear_global_batch();
      o.clear_local_batch();
      o.clear_global_batch_mode();
    } else {
      oo.clear_parameter_servers();
      oo.clear_bandwidth_margin();
      if (oo.strategy() == pb::PLAN_STRATEGY_SPOTDNN) oo.set_strategy(pb::PLAN_STRATEGY_EXACT);
    }
    other.emplace();
    other->label = to_ps ? "parameter-server plan" : "all-reduce plan";
    auto answered_other = provisioner.Plan(o);
    if (answered_other.ok()) {
      other->plan = answered_other->plan();
    } else {
      other->error =
          NameFlags(std::string(answered_other.status().message()), ProvisionerFieldFlags());
    }
  }
  if (simulate && response.plan().feasible()) {
    // The plan's probability: simulate its cluster.
    pb::SimulateRequest sim;
    *sim.mutable_workload() = request.workload();
    *sim.mutable_catalog() = request.catalog();
    *sim.mutable_slo() = request.slo();
    *sim.mutable_options() = request.options();
    *sim.mutable_cluster() = response.plan().cluster();
    // A synchronous plan's job: the same kind and global batch.
    sim.mutable_options()->set_global_batch(request.global_batch());
    if (request.sync() != pb::SYNC_KIND_UNSPECIFIED &&
        sim.options().simulation().sync() == pb::SYNC_KIND_UNSPECIFIED) {
      sim.mutable_options()->mutable_simulation()->set_sync(request.sync());
    }
    auto simulated = provisioner.Simulate(sim);
    if (!simulated.ok()) return fail(simulated.status());
    *response.mutable_plan()->mutable_risk() = simulated->plan().risk();
    *response.mutable_revocation_models() = simulated->revocation_models();
  }
  const pb::Plan& p = response.plan();
  AvailabilityOutcome replayed, replayed_plain;
  if (availability) {
    const double overhead = request.options().revocation_overhead_s();
    replayed = ReplayPlan(p, request.slo().deadline_s(), overhead, *availability, known_catalog);
    if (confidence > 0) {
      replayed_plain = ReplayPlan(response.plain_plan(), request.slo().deadline_s(), overhead,
                                  *availability, known_catalog);
    }
  }
  // Types the plan prices at spot whose on-demand price is no higher.
  const std::vector<std::string> dearer =
      known_catalog && p.feasible() && !request.options().on_demand_prices()
          ? SpotDearerNotes(p.cluster(), *known_catalog)
          : std::vector<std::string>{};
  if (io.json) {
    JsonObject o = RiskPlanJson(p);
    if (availability) {
      o.Raw("availability", AvailabilityJson(replayed)
                                .Number("changeover_s", availability->changeover_s)
                                .Number("start_every_s", availability->every_s)
                                .str());
      if (confidence > 0) o.Raw("plain_plan_availability", AvailabilityJson(replayed_plain).str());
    }
    if (confidence > 0) {
      o.Number("confidence", confidence)
          .Raw("plain_plan", RiskPlanJson(response.plain_plan()).str())
          .String("risk_search", response.risk_search());
      if (response.most_reliable().has_risk()) {
        o.Raw("most_reliable", RiskPlanJson(response.most_reliable()).str());
      }
    }
    if (confidence > 0 || simulate) {
      o.Raw("revocation_models", JsonStringArray(response.revocation_models()));
    }
    o.String("mode", mode)
        .Number("target_loss", target->loss)
        .Number("target_iterations", target->iterations)
        .Number("target_epochs", target->epochs)
        .Number("dataset_size", target->dataset_size);
    if (target->metric) o.Raw("target_metric", MetricTargetJson(*target->metric));
    o.Number("deadline_s", request.slo().deadline_s() > 0 ? request.slo().deadline_s() : NAN)
        .Number("budget_usd", request.slo().budget_usd() > 0 ? request.slo().budget_usd() : NAN);
    if (!p.feasible()) {
      o.Number("fastest_time_s", response.fastest_time_s())
          .Number("fastest_cost_usd", response.fastest_cost_usd())
          .Number("cheapest_time_s",
                  response.cheapest_cost_usd() > 0 ? response.cheapest_time_s() : NAN)
          .Number("cheapest_cost_usd",
                  response.cheapest_cost_usd() > 0 ? response.cheapest_cost_usd() : NAN);
    } else if (p.on_demand_cost_usd() > 0) {
      o.Number("on_demand_saving_pct", 100 * (1 - p.spot_cost_usd() / p.on_demand_cost_usd()));
    }
    JsonObject baselines;
    if (!IsSynchronous(p) || response.has_spotdnn_baseline()) {
      baselines.Raw("spotdnn", PlanJson(response.spotdnn_baseline()).str());
    }
    baselines.Raw("homogeneous", PlanJson(response.homogeneous_baseline()).str());
    o.Raw("baselines", baselines.str());
    if (other) {
      JsonObject other_json = other->plan ? PlanJson(*other->plan) : JsonObject();
      // A feasible all-reduce plan says its kind itself.
      if (!other->plan || !IsSynchronous(*other->plan)) {
        other_json.String("sync", request.sync() == pb::SYNC_KIND_ALLREDUCE ? "ps" : "allreduce");
      }
      if (!other->plan) other_json.String("error", other->error);
      o.Raw("other_sync", other_json.str());
    }
    std::vector<std::string> excluded;
    for (const std::string& e : p.excluded_types()) excluded.push_back(JsonString(e));
    o.Raw("excluded_types", "[" + absl::StrJoin(excluded, ",") + "]");
    o.Raw("notes", JsonStrings(dearer));
    io.out << o.str() << "\n";
  } else {
    PrintPlan(response, request, described, catalog, *target, other ? &*other : nullptr, io.out);
    for (const std::string& n : dearer) io.out << "Note: " << n << "\n";
    if (p.has_risk() || response.plain_plan().has_risk()) PrintRisk(response, confidence, io.out);
    if (availability) {
      io.out << "\nUnder the availability traces (a window every "
             << HumanDuration(availability->every_s) << ", changeover "
             << HumanDuration(availability->changeover_s) << "):\n";
      auto show = [&](const char* label, const AvailabilityOutcome& a) {
        if (!a.ok) {
          io.out << "  " << label << ": " << a.why << "\n";
          return;
        }
        Table t({label, "P(meet deadline)", "expected cost"});
        t.AddRow(
            {"with the on-demand fallback", Fixed(a.p_meet_fallback, 4), Dollars(a.cost_fallback)});
        t.AddRow({"spot only", Fixed(a.p_meet_spot_only, 4), Dollars(a.cost_spot_only)});
        t.Print(io.out);
        io.out << "  (" << a.windows << " windows; on-demand "
               << Fixed(a.on_demand_hours_fallback, 2) << " h per window with the fallback)\n";
        for (const std::string& n : a.notes) io.out << "  Note: " << n << "\n";
      };
      show(confidence > 0 ? "risk-aware plan" : "plan", replayed);
      if (confidence > 0) show("plain plan", replayed_plain);
    }
  }
  return p.feasible() ? kExitOk : kExitInfeasible;
}

std::vector<Command> PlanCommands() {
  std::vector<Command> commands = {{
      .name = "plan",
      .summary =
          "the cheapest spot cluster that reaches a loss by a deadline (or budget, frontier);\n"
          "            with --confidence Q the cheapest that meets the deadline with probability Q",
      .synopsis = "--workload W --catalog C --deadline D\n"
                  "(--loss L | --accuracy A | --target METRIC>=V|METRIC<=V | --iterations N |\n"
                  " --epochs E --dataset-size S)\n"
                  "[--mode deadline|budget|frontier] [--budget USD]\n"
                  "[--strategy exact|spotdnn|exhaustive] [--quota TYPE=N,...] "
                  "[--existing TYPE=N,...]\n"
                  "[--on-demand] [--margin F] [--overhead D] [--max-size N] "
                  "[--parameter-servers N]\n"
                  "[--sync allreduce|ps] [--global-batch B|scale|fixed] [--local-batch B]\n"
                  "[--zone Z | --region R] [--avoid-zone Z,...]\n"
                  "[--exhaustive-limit N] [--plot FILE.svg] [--confidence Q] [--lifetimes FILE]\n"
                  "[--runs N] [--seed S] [--notice D] [--takeover-delay D] [--json] "
                  "[--server HOST:PORT]\n[--data-dir D | --profiler H:P]",
      .description =
          "Finds the cheapest cluster that reaches loss L (or accuracy A, or a metric's value, or "
          "trains N\niterations, or E epochs of S samples) by the deadline (deadline mode), the "
          "fastest within a\nbudget (budget mode), or every plan on the time/cost Pareto frontier "
          "(frontier mode), and\ncompares it with the spotDNN heuristic, the cheapest one-type "
          "plan and on-demand prices.",
      .flags =
          {{"--workload", "W",
            "a stored profile's name (spotdnn profile list), a built-in one (spotdnn\n"
            "workloads) or a JSON file"},
           {"--catalog", "C", "built-in catalog name or a JSON file"},
           MetricTargetFlagHelp()[0],
           MetricTargetFlagHelp()[1],
           MetricTargetFlagHelp()[2],
           {"--iterations", "N",
            "instead: train N global iterations (every worker step counts one)"},
           {"--epochs", "E", "instead: train E passes over a dataset of ..."},
           {"--dataset-size", "S", "... S samples (iterations = E S / the cluster's WA batch)"},
           {"--deadline", "D", "2400, 2400s, 40m, 1.5h (optional in budget and frontier modes)"},
           {"--mode", "M", "deadline (default), budget or frontier"},
           {"--budget", "USD", "most the job may cost (budget mode; bounds the frontier)"},
           {"--strategy", "S",
            "exact (default, provably optimal under the model), spotdnn (the paper's\n"
            "heuristic), exhaustive (every composition; refuses huge searches)"},
           {"--quota", "TYPE=N,...", "per-type quota overrides (default: the catalog's quotas)"},
           {"--existing", "TYPE=N,...",
            "instances already running: they stay in the plan and are paid for"},
           {"--on-demand", "", "plan with on-demand prices"},
           {"--margin", "F", "predict this fraction less PS bandwidth (e.g. 0.03)"},
           {"--overhead", "D", "revocation overhead T_ohd added to the predicted time"},
           {"--max-size", "N", "at most N workers"},
           {"--parameter-servers", "N", "parameter servers (their bandwidth adds up); default 1"},
           {"--sync", "allreduce|ps",
            "how the workload trains (default: the profile's): a synchronous all-reduce\n"
            "plan picks each type's local batch too; either way the other kind's best\n"
            "plan, where the profile has it, joins the \"other ways\" table"},
           {"--global-batch", "B|scale|fixed",
            "all-reduce: samples per step over every rank, split by speed within each\n"
            "GPU's memory (default: the profile's global_batch_size). `scale`: the\n"
            "global batch follows the cluster, every rank at --local-batch, and a loss\n"
            "or metric target's steps follow the critical-batch law (default: the\n"
            "profile's global_batch)"},
           {"--local-batch", "B",
            "all-reduce with a global batch that scales: every rank's samples per step\n"
            "(default: the profile's local_batch_size)"},
           {"--exhaustive-limit", "N",
            "most clusters --strategy exhaustive may try (default 50,000,000)"},
           {"--zone", "Z",
            "when the catalog lists zones: plan in zone Z only (default: the cheapest\n"
            "zone that may take it; a parameter-server job: the cheapest region)"},
           {"--region", "R", "when the catalog lists zones: plan in region R's zones only"},
           {"--avoid-zone", "Z,...", "when the catalog lists zones: never plan in these zones"},
           {"--plot", "FILE.svg",
            "with --mode frontier: write the frontier as an SVG chart (with a\nrevocation model: "
            "each plan coloured by its probability)"},
           {"--confidence", "Q",
            "the plan with the least expected cost (takeovers included) whose\nsimulated "
            "probability of meeting the deadline is at least Q, e.g. 0.9;\nshown beside the plain "
            "plan and its probability. Needs a revocation model:\n--lifetimes FILE, or the "
            "catalog's lifetimes or interruption_rate_per_hour\n(spotdnn catalog hazards)"},
           ServerFlag("spotdnn-provisioner"),
           DataDirFlag(),
           {"--profiler", "H:P",
            "a running spotdnn-profiler whose stored profiles --workload may name\n"
            "(default: DATA_DIR/profiles.db)"}},
      .footer = "With --lifetimes and no --confidence, the plan (deadline mode) or every frontier "
                "plan\n(frontier mode) is simulated and its probability shown.\nExit status: 0 a "
                "plan, 3 no plan meets the SLO (or the confidence), 2 bad input, 1 service\n"
                "failure.",
      .run =
          [](const Args& args, const Io& io) {
            auto connection = Connect<pb::Provisioner, services::ProvisionerServiceImpl>(args);
            if (!connection.ok()) return ReportError(connection.status(), "plan", io);
            return Plan(args, *connection->stub, services::DataRegistry::WithBuiltins(), io);
          },
  }};
  for (FlagHelp& f : SimulationFlagHelp()) commands[0].flags.push_back(std::move(f));
  for (FlagHelp f : std::vector<FlagHelp>{
           {"--availability", "TYPE=FILE,... | TYPE@ZONE=FILE,...",
            "spot availability traces per type (NSDI'24 JSON or time,count CSV), or per\n"
            "type and zone (the cluster runs in one zone at a time and moves): also\n"
            "answer P(meet deadline) and the expected cost with the on-demand fallback\n"
            "(policy ours) and spot only, a window per --start-every"},
           {"--changeover", "D", "with --availability: time lost at each instance start (5m)"},
           {"--start-every", "D", "with --availability: one window per offset (1h)"}}) {
    commands[0].flags.push_back(std::move(f));
  }
  commands[0].synopsis += "\n[--availability TYPE=FILE,... [--changeover D] [--start-every D]]";
  return commands;
}

}  // namespace spotdnn::gateway
