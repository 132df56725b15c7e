// How `spotdnn plan` shows its answer: the plan's JSON and tables, the other ways, the risk.
#include "services/gateway/cli/plan_output.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "services/common/convert.h"
#include "services/gateway/cli/risk_options.h"
#include "services/gateway/cli/sync_batch_flags.h"

namespace spotdnn::gateway {
namespace {

std::string Excess(double cost, double ours) {
  if (!(ours > 0)) return "-";
  const double pct = 100 * (cost / ours - 1);
  return std::abs(pct) < 0.05 ? "same" : absl::StrFormat("%+.1f%%", pct);
}

// "spot saves 12.0%", or "spot costs 2.0% more" where spot is dearer than on-demand.
std::string SpotSaving(double spot_usd, double on_demand_usd) {
  const double saving = 100 * (1 - spot_usd / on_demand_usd);
  return saving >= 0 ? absl::StrFormat("spot saves %.1f%%", saving)
                     : absl::StrFormat("spot costs %.1f%% more", -saving);
}

std::string Deadline(double s) { return s > 0 ? HumanDuration(s) : std::string("none"); }

// The plan's steps and time at p10 / p50 / p90 (the time with the plan's overhead).
void AddIntervalRows(const pb::Plan& p, Table& summary) {
  const pb::Prediction& e = p.prediction();
  const double overhead = p.time_s() - e.time_s();
  const std::string note = e.has_spread() ? "" : " (no spread)";
  summary.AddRow({"iterations (p10 / p50 / p90)",
                  absl::StrCat(Fixed(e.iterations_p10(), 0), " / ", Fixed(e.iterations_p50(), 0),
                               " / ", Fixed(e.iterations_p90(), 0), note)});
  summary.AddRow(
      {"time (p10 / p50 / p90)", absl::StrCat(HumanDuration(e.time_p10_s() + overhead), " / ",
                                              HumanDuration(e.time_p50_s() + overhead), " / ",
                                              HumanDuration(e.time_p90_s() + overhead), note)});
}

// The instances table of a synchronous plan: each type's local batch and its step's parts.
void PrintSyncTypes(const pb::Plan& p, std::ostream& out) {
  Table types({"instance type", "count", "to launch", "GPUs", "local batch", "compute (s)",
               "all-reduce (s)", "step (s)"});
  for (const pb::WorkerPrediction& w : p.prediction().workers()) {
    int launch = 0;
    for (const pb::InstanceCount& c : p.to_launch().instances()) {
      if (c.instance_type() == w.instance_type()) launch = c.count();
    }
    types.AddRow({w.instance_type(), absl::StrCat(w.count()), absl::StrCat(launch),
                  absl::StrCat(w.gpus()), LocalBatchText(w.local_batch()),
                  Fixed(w.compute_time_s(), 5), Fixed(w.communication_time_s(), 5),
                  Fixed(w.iteration_time_s(), 5)});
  }
  types.Print(out);
}

// Where the plan runs, when its catalog lists zones: a synchronous plan's zone, a
// parameter-server plan's region and each type's zone in it.
void AddPlaceRow(const pb::Plan& p, Table& summary) {
  if (!p.zone().empty()) {
    summary.AddRow({"zone", absl::StrCat(p.zone(), " (region ", p.region(), ")")});
  } else if (!p.region().empty()) {
    // "TYPE=ZONE" per type; one zone for all of them is said once.
    std::vector<std::string> zones;
    for (const std::string& z : p.zones()) {
      const std::string zone = z.substr(z.find('=') + 1);
      if (std::find(zones.begin(), zones.end(), zone) == zones.end()) zones.push_back(zone);
    }
    summary.AddRow(
        {"region", zones.size() == 1
                       ? absl::StrCat(p.region(), " (every type in ", zones[0], ")")
                       : absl::StrCat(p.region(), " (", absl::StrJoin(p.zones(), ", "), ")")});
  }
}

// The places the plan was made for, cheapest first: the first few.
void PrintZonesConsidered(const pb::Plan& p, std::ostream& out) {
  if (p.zones_considered_size() == 0) return;
  constexpr int kShown = 5;
  out << "\nZones considered, cheapest first:\n";
  for (int i = 0; i < p.zones_considered_size() && i < kShown; ++i) {
    out << "  " << p.zones_considered(i) << "\n";
  }
  if (p.zones_considered_size() > kShown) {
    out << "  ... " << p.zones_considered_size() - kShown << " more (--json lists them all)\n";
  }
}

}  // namespace

// Whether a feasible plan is a synchronous (all-reduce) one: its prediction splits a global batch.
bool IsSynchronous(const pb::Plan& p) { return p.prediction().accumulation_steps() > 0; }

// The fields every plan shows in JSON.
JsonObject PlanJson(const pb::Plan& p) {
  JsonObject o;
  o.Bool("feasible", p.feasible());
  if (p.feasible()) {
    o.Raw("plan", ClusterJson(p.cluster()))
        .Raw("to_launch", ClusterJson(p.to_launch()))
        .Number("time_s", p.time_s())
        .Number("cost_usd", p.cost_usd())
        .Number("spot_cost_usd", p.spot_cost_usd())
        .Number("on_demand_cost_usd", p.on_demand_cost_usd())
        .Number("normalized_iterations", p.prediction().normalized_iterations());
    // The 80% interval of the steps and of the time (the plan's time: overhead included).
    const double overhead = p.time_s() - p.prediction().time_s();
    o.Number("iterations_p10", p.prediction().iterations_p10())
        .Number("iterations_p50", p.prediction().iterations_p50())
        .Number("iterations_p90", p.prediction().iterations_p90())
        .Number("time_p10_s", p.prediction().time_p10_s() + overhead)
        .Number("time_p50_s", p.prediction().time_p50_s() + overhead)
        .Number("time_p90_s", p.prediction().time_p90_s() + overhead)
        .Number("wa_batch", p.prediction().wa_batch())
        .Number("convergence_coefficient", p.prediction().convergence_coefficient())
        .Number("cluster_speed", p.prediction().cluster_speed())
        .Integer("workers", p.prediction().worker_count());
    if (IsSynchronous(p)) {
      // A synchronous plan: one step of the whole cluster, and each type's local batch.
      o.String("sync", "allreduce")
          .Number("global_batch", p.prediction().wa_batch())
          .Raw("local_batches", LocalBatchesJson(p.prediction()))
          .Integer("accumulation_steps", p.prediction().accumulation_steps())
          .Number("iteration_time_s", p.prediction().expected_iteration_time_s());
      AddSyncBatchJson(p.prediction(), o);
    }
    // A target beyond what the profile's runs ever reached: the plan rests on an extrapolation.
    o.Bool("extrapolated", p.prediction().extrapolated());
    if (p.prediction().has_data_best()) o.Number("data_best", p.prediction().data_best());
  } else {
    o.String("reason", p.reason());
  }
  if (p.skipped()) o.Bool("skipped", true);
  if (!p.region().empty()) {
    // Where it runs, when the catalog lists zones.
    o.String("zone", p.zone())
        .String("region", p.region())
        .Raw("zones", JsonStringArray(p.zones()))
        .Raw("zones_considered", JsonStringArray(p.zones_considered()));
  }
  o.String("strategy", services::EnumLabel(p.strategy()))
      .Number("solve_ms", p.solve_ms())
      .Integer("clusters_evaluated", static_cast<long long>(p.clusters_evaluated()));
  return o;
}

// The "no plan meets the SLO" lines of a deadline, budget or frontier answer: when the budget is
// what no plan meets, the cheapest plan (its cost and time); else the fastest.
void PrintInfeasible(const std::string& reason, double fastest_time_s, double fastest_cost_usd,
                     double cheapest_time_s, double cheapest_cost_usd, std::ostream& out) {
  out << "No plan meets the SLO: " << reason << "\n";
  if (cheapest_cost_usd > 0) {
    out << "Cheapest possible: " << Dollars(cheapest_cost_usd) << ", taking "
        << Fixed(cheapest_time_s, 1) << " s (" << HumanDuration(cheapest_time_s) << ")\n";
  } else if (fastest_time_s > 0) {
    out << "Fastest achievable: " << Fixed(fastest_time_s, 1) << " s ("
        << HumanDuration(fastest_time_s) << ") for " << Dollars(fastest_cost_usd) << "\n";
  }
}

void PrintPlan(const pb::PlanResponse& r, const pb::PlanRequest& req, const std::string& workload,
               const std::string& catalog, const TargetFlags& target, const OtherSync* other,
               std::ostream& out) {
  const pb::Plan& p = r.plan();
  const bool budget = req.mode() == pb::PLAN_MODE_BUDGET;
  const bool sync = IsSynchronous(p);
  out << "Plan: " << workload << " on " << catalog << ", " << target.Describe();
  if (budget) {
    out << " within " << Dollars(req.slo().budget_usd()) << ", fastest";
  } else {
    out << " by " << Deadline(req.slo().deadline_s()) << ", cheapest";
  }
  out << " (" << services::EnumLabel(p.strategy()) << ", "
      << (sync ? "synchronous all-reduce, " : "")
      << (req.options().on_demand_prices() ? "on-demand" : "spot") << " prices)\n\n";
  if (!p.feasible()) {
    PrintInfeasible(p.reason(), r.fastest_time_s(), r.fastest_cost_usd(), r.cheapest_time_s(),
                    r.cheapest_cost_usd(), out);
  } else if (sync) {
    PrintSyncTypes(p, out);
    out << "\n";
    const pb::Prediction& e = p.prediction();
    Table summary({"quantity", "value"});
    summary.AddRow({"predicted time",
                    absl::StrCat(Fixed(p.time_s(), 2), " s (", HumanDuration(p.time_s()), ")")});
    summary.AddRow({"steps", Fixed(e.normalized_iterations(), 0)});
    if (HasSyncConvergence(e)) {
      // A loss or metric target: the convergence model's interval, and how its steps were
      // carried to the plan's global batch.
      AddIntervalRows(p, summary);
      if (auto row = CriticalBatchRow(e); !row.empty()) summary.AddRow(row);
      if (e.extrapolated()) summary.AddRow(BeyondTheDataRow(e));
    }
    summary.AddRow({"global batch", GlobalBatchText(e)});
    if (e.accumulation_steps() > 1) {
      summary.AddRow(
          {"accumulation steps",
           absl::StrCat(e.accumulation_steps(),
                        " (micro-steps per step: the global batch exceeds the cluster's memory)")});
    }
    summary.AddRow({"step time (s)", Fixed(e.expected_iteration_time_s(), 6)});
    summary.AddRow({"cluster speed (samples/s)", Fixed(e.cluster_speed(), 1)});
    AddPlaceRow(p, summary);
    summary.AddRow({"cost", Dollars(p.cost_usd())});
    summary.AddRow({"solve time", absl::StrFormat("%.2f ms, %d clusters evaluated", p.solve_ms(),
                                                  p.clusters_evaluated())});
    summary.Print(out);
  } else {
    Table types({"instance type", "count", "to launch", "GPUs", "batch", "T_i (s)", "samples/s"});
    for (const pb::WorkerPrediction& w : p.prediction().workers()) {
      int launch = 0;
      for (const pb::InstanceCount& c : p.to_launch().instances()) {
        if (c.instance_type() == w.instance_type()) launch = c.count();
      }
      types.AddRow({w.instance_type(), absl::StrCat(w.count()), absl::StrCat(launch),
                    absl::StrCat(w.gpus()), absl::StrCat(w.batch_size()),
                    Fixed(w.iteration_time_s(), 5), Fixed(w.samples_per_s(), 1)});
    }
    types.Print(out);
    out << "\n";
    Table summary({"quantity", "value"});
    summary.AddRow({"predicted time",
                    absl::StrCat(Fixed(p.time_s(), 2), " s (", HumanDuration(p.time_s()), ")")});
    summary.AddRow({"normalized iterations j", Fixed(p.prediction().normalized_iterations(), 0)});
    AddIntervalRows(p, summary);
    if (p.prediction().extrapolated()) summary.AddRow(BeyondTheDataRow(p.prediction()));
    summary.AddRow({"WA batch b_w", Fixed(p.prediction().wa_batch(), 1)});
    summary.AddRow(
        {"convergence coefficient R", Fixed(p.prediction().convergence_coefficient(), 4)});
    summary.AddRow({"cluster speed (samples/s)", Fixed(p.prediction().cluster_speed(), 1)});
    AddPlaceRow(p, summary);
    summary.AddRow({"cost", Dollars(p.cost_usd())});
    summary.AddRow({"solve time", absl::StrFormat("%.2f ms, %d clusters evaluated", p.solve_ms(),
                                                  p.clusters_evaluated())});
    summary.Print(out);
  }
  PrintZonesConsidered(p, out);
  if (p.feasible()) {
    out << "\nThe same SLO, other ways\n";
    Table compare({"plan", "instances", "time", "cost", "vs this plan"});
    compare.LeftAlign(1);
    compare.AddRow({absl::StrCat(services::EnumLabel(p.strategy()), " (this plan)"),
                    ClusterText(p.cluster()), HumanDuration(p.time_s()), Dollars(p.cost_usd()),
                    ""});
    auto baseline = [&](bool present, const pb::Plan& b, const std::string& name) {
      if (!present) return;
      if (!b.feasible()) {
        compare.AddRow(
            {name, b.skipped() ? "skipped (see below)" : "none meets the SLO", "-", "-", "-"});
        return;
      }
      compare.AddRow(
          {name, ClusterText(b.cluster()), HumanDuration(b.time_s()), Dollars(b.cost_usd()),
           budget ? Excess(b.time_s(), p.time_s()) + " time" : Excess(b.cost_usd(), p.cost_usd())});
    };
    baseline(r.has_spotdnn_baseline(), r.spotdnn_baseline(), "spotdnn heuristic");
    baseline(r.has_homogeneous_baseline(), r.homogeneous_baseline(), "cheapest homogeneous");
    if (other != nullptr && other->plan) baseline(true, *other->plan, other->label);
    if (other != nullptr && !other->plan) {
      compare.AddRow({other->label, "cannot be planned (see below)", "-", "-", "-"});
    }
    if (!req.options().on_demand_prices()) {
      compare.AddRow({"this plan at on-demand prices", ClusterText(p.cluster()),
                      HumanDuration(p.time_s()), Dollars(p.on_demand_cost_usd()),
                      p.on_demand_cost_usd() > 0
                          ? SpotSaving(p.spot_cost_usd(), p.on_demand_cost_usd())
                          : "-"});
    }
    compare.Print(out);
    for (const pb::Plan* b : {&r.spotdnn_baseline(), &r.homogeneous_baseline()}) {
      if (b->skipped()) {
        out << "\n"
            << services::EnumLabel(b->strategy()) << " baseline skipped: " << b->reason() << "\n";
      }
    }
    if (other != nullptr && !other->plan)
      out << "\n" << other->label << ": " << other->error << "\n";
  }
  if (p.excluded_types_size() > 0) {
    out << "\nLeft out (the profile cannot predict them):\n";
    for (const std::string& e : p.excluded_types()) out << "  " << e << "\n";
  }
}

// The probability section of a risk-aware (or simulated) plan: the plan beside the plain one.
void PrintRisk(const pb::PlanResponse& r, double confidence, std::ostream& out) {
  const pb::Plan& p = r.plan();
  const pb::Plan* chosen = p.feasible() && p.has_risk() ? &p : nullptr;
  const pb::Plan& plain = r.plain_plan().has_risk() ? r.plain_plan() : p;
  const pb::RiskEstimate& any = chosen != nullptr ? chosen->risk() : plain.risk();
  out << "\nProbability of meeting the deadline under revocations (" << any.runs()
      << " simulated runs each, seed " << any.seed() << "; 95% interval of the simulation)\n";
  Table t({"plan", "instances", "planned cost", "P(meet deadline)", "E[cost]", "p90 cost",
           "p90 time", "revocations/run"});
  t.LeftAlign(1);
  auto row = [&](const std::string& name, const pb::Plan& x) {
    const pb::RiskEstimate& k = x.risk();
    t.AddRow({name, ClusterText(x.cluster()), Dollars(x.cost_usd()), Probability(k),
              Dollars(k.expected_cost_usd()), Dollars(k.cost_p90_usd()),
              HumanDuration(k.time_p90_s()), Fixed(k.mean_revocations(), 3)});
  };
  if (confidence > 0 && chosen != nullptr) {
    row(absl::StrFormat("risk-aware (q = %g)", confidence), *chosen);
  }
  if (plain.has_risk()) {
    row(confidence > 0 ? "plain exact" : services::EnumLabel(p.strategy()), plain);
  }
  if (confidence > 0 && !p.feasible() && r.most_reliable().has_risk()) {
    row("most reliable", r.most_reliable());
  }
  t.Print(out);
  if (confidence > 0 && chosen != nullptr && plain.has_risk()) {
    const double premium =
        plain.risk().expected_cost_usd() > 0
            ? 100 * (chosen->risk().expected_cost_usd() / plain.risk().expected_cost_usd() - 1)
            : 0;
    out << absl::StrFormat(
        "cost premium for q = %g: %+.1f%% in expectation (%+.1f%% as planned)\n", confidence,
        premium, plain.cost_usd() > 0 ? 100 * (chosen->cost_usd() / plain.cost_usd() - 1) : 0);
  }
  if (!r.risk_search().empty()) out << "search: " << r.risk_search() << "\n";
  out << "revocation models:\n";
  for (const std::string& m : r.revocation_models()) out << "  " << m << "\n";
}

// The JSON of a plan with its simulation.
JsonObject RiskPlanJson(const pb::Plan& p) {
  JsonObject o = PlanJson(p);
  if (p.has_risk()) {
    o.Number("p_meet_deadline", p.risk().p_meet_deadline())
        .Number("expected_cost_usd", p.risk().expected_cost_usd())
        .Raw("risk", RiskJson(p.risk()).str());
  }
  return o;
}

std::string JsonStringArray(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& s : items) out.push_back(JsonString(s));
  return "[" + absl::StrJoin(out, ",") + "]";
}

}  // namespace spotdnn::gateway
