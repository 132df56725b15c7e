// spotdnn simulate: replays a job many times with sampled instance lifetimes and the gateway's
// takeover policy, and reports how often it meets the deadline and what it costs.
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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
  if (io.json) {
    std::vector<std::string> models;
    for (const std::string& m : response.revocation_models()) models.push_back(JsonString(m));
    JsonObject o = RiskJson(r);
    o.Raw("cluster", ClusterJson(p.cluster()))
        .String("cluster_from", p.strategy() == pb::PLAN_STRATEGY_GIVEN ? "given" : "plan")
        .Bool("meets_slo_without_revocations", p.feasible())
        .Number("target_loss", response.target_loss());
    if (!target_text.empty()) o.String("target_metric", target_text);
    o.Number("deadline_s", *deadline)
        .Number("planned_time_s", p.time_s())
        .Number("planned_cost_usd", p.cost_usd())
        .Number("normalized_iterations", p.prediction().normalized_iterations())
        .Number("simulate_ms", p.solve_ms())
        .Raw("revocation_models", "[" + absl::StrJoin(models, ",") + "]");
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
            auto connection = Connect<pb::Provisioner, services::ProvisionerServiceImpl>(args);
            if (!connection.ok()) return ReportError(connection.status(), "simulate", io);
            return Simulate(args, *connection->stub, services::DataRegistry::WithBuiltins(), io);
          },
  }};
  for (FlagHelp& f : SimulationFlagHelp()) commands[0].flags.push_back(std::move(f));
  return commands;
}

}  // namespace spotdnn::gateway
