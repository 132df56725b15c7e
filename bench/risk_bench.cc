// Risk-aware planning on real preemption data: for every SLO of the paper's grid (its catalog, its
// 6 target losses x 7 deadlines), the plain exact plan's probability of meeting the deadline
// (10,000 simulated runs with the GCE preemptible lifetimes) next to the risk-aware plan's, with
// the cost premium; the simulator's speed (10,000 runs of a 10-instance plan); and how far the
// risk-aware search is from brute force on small problems.
//
//   risk_bench [--lifetimes FILE] [--runs N] [--seed S] [--confidence Q] [--overhead S]
//              [--notice S] [--takeover-delay S] [--brute-cases N]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/paper_model.h"
#include "provisioner/revocation_model.h"
#include "provisioner/risk_planner.h"
#include "provisioner/simulator.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"

namespace spotdnn {
namespace {

using provisioner::PlanProblem;
using provisioner::RevocationModel;
using provisioner::Rng;
using provisioner::SimulationOptions;

double Ms(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

// CPU time of this process in ms (wall time on a shared machine counts other work too).
double CpuMs() { return 1000.0 * static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

// Every figure of two simulations equal, to the bit (with `solves`, the re-plans solved too: a
// warm cache solves none).
bool Same(const provisioner::SimulationResult& a, const provisioner::SimulationResult& b,
          bool solves) {
  auto same = [](const provisioner::Summary& x, const provisioner::Summary& y) {
    return x.mean == y.mean && x.p50 == y.p50 && x.p90 == y.p90 && x.min == y.min &&
           x.max == y.max && x.stddev == y.stddev;
  };
  return a.met_deadline == b.met_deadline && a.p_meet_slo == b.p_meet_slo &&
         a.p_no_revocation == b.p_no_revocation && same(a.time_s, b.time_s) &&
         same(a.cost_usd, b.cost_usd) && same(a.revocations, b.revocations) &&
         a.unfinished == b.unfinished && a.replans == b.replans &&
         (!solves || a.replans_solved == b.replans_solved) && a.replan_errors == b.replan_errors;
}

std::string Counts(const predictor::PerformanceModel& model, const std::vector<int>& counts) {
  std::vector<std::string> parts;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] > 0) parts.push_back(absl::StrCat(model.catalog().types[k].name, "=", counts[k]));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, " ");
}

std::vector<provisioner::TypeRevocationInput> Inputs(const predictor::InstanceCatalog& catalog) {
  std::vector<provisioner::TypeRevocationInput> out;
  for (const auto& t : catalog.types)
    out.push_back({.instance_type = t.name, .gpu_type = t.gpu_type});
  return out;
}

absl::StatusOr<RevocationModel> ModelFor(const predictor::InstanceCatalog& catalog,
                                         const provisioner::LifetimeFile& file) {
  std::vector<provisioner::TypeRevocationInput> inputs = Inputs(catalog);
  auto mapped = provisioner::MapLifetimes(file, inputs, {}, provisioner::UnmatchedTypes::kPooled);
  if (!mapped.ok()) return mapped.status();
  for (size_t k = 0; k < inputs.size(); ++k) {
    inputs[k].observations = mapped->observations[k];
    inputs[k].observations_source = mapped->sources[k];
  }
  return provisioner::BuildRevocationModel(inputs);
}

// One row per SLO of the paper's grid: the plain exact plan and the risk-aware one.
void Table(const predictor::PerformanceModel& model, const RevocationModel& revocations,
           const SimulationOptions& sim, double overhead, double confidence, bool rows = true) {
  if (rows)
    std::printf("%-4s %-5s | %-34s %6s %8s %8s %5s %-22s | %-34s %6s %8s %-22s %8s %8s %6s\n",
                "loss", "dline", "plain exact plan", "time", "cost", "E[cost]", "revs",
                "P(meet) [95%]", "risk-aware plan (q)", "time", "E[cost]", "P(meet) [95%]",
                "premium", "vs plan", "ms");
  int slos = 0, feasible = 0, plain_below = 0, changed = 0, unreachable = 0;
  double worst_plain = 1, max_premium = 0;
  std::vector<double> solve_ms;
  auto p_text = [](const provisioner::SimulationResult& r) {
    return absl::StrFormat("%.4f [%.4f,%.4f]", r.p_meet_deadline, r.p_meet_deadline_low,
                           r.p_meet_deadline_high);
  };
  for (const auto& [loss, deadline] : bench::PaperGrid()) {
    ++slos;
    PlanProblem problem = provisioner::DefaultProblem(model, loss, deadline);
    problem.overhead_s = overhead;
    const auto start = std::chrono::steady_clock::now();
    auto r = provisioner::PlanWithConfidence(model, problem, revocations, sim,
                                             {.confidence = confidence});
    const double ms = Ms(start);
    if (!r.ok()) {
      std::printf("%-4g %-5g | error: %s\n", loss, deadline,
                  std::string(r.status().message()).c_str());
      continue;
    }
    if (!r->plain_feasible) {
      if (rows) std::printf("%-4g %-5g | %-34s\n", loss, deadline, "no plan meets the SLO");
      continue;
    }
    ++feasible;
    solve_ms.push_back(ms);
    const auto& pr = r->plain_risk;
    worst_plain = std::min(worst_plain, pr.p_meet_deadline);
    plain_below += pr.p_meet_deadline < confidence;
    const std::string left =
        absl::StrFormat("%-4g %-5g | %-34s %6.0f %8.4f %8.4f %5.3f %-22s", loss, deadline,
                        Counts(model, r->plain.counts), r->plain.time_s, r->plain.cost_usd,
                        pr.cost_usd.mean, pr.revocations.mean, p_text(pr));
    if (!r->feasible) {
      ++unreachable;
      if (rows)
        std::printf("%s | none reaches q; the most reliable: %s, P %.4f %6.0f\n", left.c_str(),
                    Counts(model, r->most_reliable.counts).c_str(),
                    r->most_reliable_risk.p_meet_deadline, ms);
      continue;
    }
    const auto& rr = r->risk;
    const bool same = r->plan.counts == r->plain.counts;
    changed += !same;
    const double premium = 100 * (rr.cost_usd.mean / pr.cost_usd.mean - 1);
    const double vs_plan = 100 * (rr.cost_usd.mean / r->plain.cost_usd - 1);
    max_premium = std::max(max_premium, premium);
    if (rows)
      std::printf("%s | %-34s %6.0f %8.4f %-22s %+7.1f%% %+7.1f%% %6.0f\n", left.c_str(),
                  same ? "(the same plan)" : Counts(model, r->plan.counts).c_str(), r->plan.time_s,
                  rr.cost_usd.mean, p_text(rr).c_str(), premium, vs_plan, ms);
  }
  std::sort(solve_ms.begin(), solve_ms.end());
  std::printf(
      "%d SLOs, %d with a plan; the plain plan is below q = %g in %d (lowest P %.4f); the "
      "risk-aware plan differs in %d, none reaches q in %d; largest premium in expected cost "
      "%+.1f%%; risk-aware planning time median %.0f ms, max %.0f ms\n",
      slos, feasible, confidence, plain_below, worst_plain, changed, unreachable, max_premium,
      solve_ms.empty() ? 0.0 : solve_ms[solve_ms.size() / 2],
      solve_ms.empty() ? 0.0 : solve_ms.back());
}

// Small random problems (3 instance types named after the data's GPUs, quotas 1-3, deadlines
// 0-30% above the plain plan's time): the risk-aware search against brute force (every
// composition simulated with the same runs and seed).
// With `rates`, every type gets an exponential lifetime with a random rate of 0.1-2 per hour
// instead and the deadline is at most 5% above the plain plan's time (harsher than the data, so
// that more plans miss).
void BruteForce(const provisioner::LifetimeFile& file, SimulationOptions sim, double confidence,
                int cases, uint64_t seed, bool rates) {
  sim.runs = 2000;
  Rng rng(seed * 7919 + 17);
  int compared = 0, same = 0, both = 0, agree_infeasible = 0, missed = 0, plain_short = 0;
  double worst = 0, brute_ms = 0, risk_ms = 0;
  const char* gpus[] = {"K80", "P100", "V100"};
  for (int i = 0; i < cases; ++i) {
    predictor::InstanceCatalog c;
    c.name = "random";
    predictor::WorkloadProfile w;
    w.name = "random";
    w.parameter_size_mb = 20 + 80 * rng.Uniform();
    w.required_bandwidth_mb_per_s = 100 + 300 * rng.Uniform();
    for (int k = 0; k < 3; ++k) {
      const double spot = 0.2 + 2 * rng.Uniform();
      c.types.push_back({absl::StrCat("t", k), gpus[rng.Next() % 3],
                         1 + static_cast<int>(rng.Next() % 4), 16, spot, spot * 3,
                         1 + static_cast<int>(rng.Next() % 3)});
      w.compute.push_back({.instance_type = c.types.back().name,
                           .batch_per_gpu = 128,
                           .compute_time_s = 0.1 + rng.Uniform()});
    }
    c.parameter_server = {.instance_type = "ps", .bandwidth_mb_per_s = 1200};
    c.pcie_bandwidth_mb_per_s = 10000;
    w.contention = predictor::ContentionModel{.a1 = 0.5, .b1 = -1.5};
    w.loss = predictor::LossModel{.g1 = 100, .g2 = 0, .g3 = 2000, .g4 = 1, .g5 = 0.5};
    auto model = predictor::PerformanceModel::Create(w, c);
    if (!model.ok()) continue;
    auto revocations = ModelFor(model->catalog(), file);
    if (rates) {
      std::vector<provisioner::TypeRevocationInput> inputs = Inputs(model->catalog());
      for (auto& in : inputs) in.interruption_rate_per_hour = 0.1 + 1.9 * rng.Uniform();
      revocations = provisioner::BuildRevocationModel(inputs);
    }
    if (!revocations.ok()) continue;
    PlanProblem problem = provisioner::DefaultProblem(*model, 0.9);
    problem.deadline_s = 1e9;
    const auto plain = provisioner::SolveExact(*model, problem);
    if (!plain.feasible) continue;
    // A deadline the plain plan meets with 0-30% to spare; the job lasts about an hour or more.
    problem.deadline_s = plain.best.time_s * (1 + (rates ? 0.05 : 0.3) * rng.Uniform());
    auto t0 = std::chrono::steady_clock::now();
    auto risk = provisioner::PlanWithConfidence(*model, problem, *revocations, sim,
                                                {.confidence = confidence});
    risk_ms += Ms(t0);
    t0 = std::chrono::steady_clock::now();
    auto brute =
        provisioner::PlanWithConfidenceBruteForce(*model, problem, *revocations, sim, confidence);
    brute_ms += Ms(t0);
    if (!risk.ok() || !brute.ok()) continue;
    ++compared;
    if (!brute->feasible) {
      agree_infeasible += !risk->feasible;
      continue;
    }
    if (!risk->feasible) {
      ++missed;
      continue;
    }
    ++both;
    same += risk->plan.counts == brute->plan.counts;
    plain_short += risk->plain_risk.p_meet_deadline < confidence;
    worst = std::max(worst, risk->risk.cost_usd.mean / brute->risk.cost_usd.mean - 1);
  }
  std::printf(
      "\nRisk-aware search vs brute force, %d small random problems (3 types, quotas 1-3, %s, %d "
      "runs each, q = %.2f): both found a plan in %d (the plain plan was below q in %d of them), "
      "the same plan in %d, largest excess in expected cost %.2f%%; brute force found one the "
      "search missed in %d; neither in %d. Time: "
      "search %.0f ms, brute force %.0f ms in all.\n",
      compared,
      rates ? "exponential lifetimes at 0.1-2 revocations per hour, deadlines 0-5% above the plain "
              "plan's time"
            : "the GCE lifetimes by GPU, deadlines 0-30% above the plain plan's time",
      sim.runs, confidence, both, plain_short, same, 100 * worst, missed, agree_infeasible, risk_ms,
      brute_ms);
}

int Main(int argc, char** argv) {
  std::string lifetimes = std::string(SPOTDNN_DATA_DIR) + "/gce_preemptible_lifetime/lifetime.csv";
  int runs = 10000, brute_cases = 20;
  uint64_t seed = 1;
  double confidence = 0.9, overhead = 0, notice = 30, delay = 60;
  std::string only;  // "--only simulator": the simulator's speed alone
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--lifetimes")
      lifetimes = value;
    else if (flag == "--runs")
      runs = std::atoi(value.c_str());
    else if (flag == "--seed")
      seed = std::strtoull(value.c_str(), nullptr, 10);
    else if (flag == "--confidence")
      confidence = std::atof(value.c_str());
    else if (flag == "--overhead")
      overhead = std::atof(value.c_str());
    else if (flag == "--notice")
      notice = std::atof(value.c_str());
    else if (flag == "--takeover-delay")
      delay = std::atof(value.c_str());
    else if (flag == "--only")
      only = value;
    else if (flag == "--brute-cases")
      brute_cases = std::atoi(value.c_str());
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  auto file = provisioner::ReadLifetimeCsv(lifetimes);
  if (!file.ok()) {
    std::printf("SKIPPED: %s\n", std::string(file.status().message()).c_str());
    return 0;
  }
  const predictor::PerformanceModel model = bench::PaperModel();
  auto revocations = ModelFor(model.catalog(), *file);
  if (!revocations.ok()) {
    std::fprintf(stderr, "%s\n", std::string(revocations.status().message()).c_str());
    return 1;
  }
  std::printf("Lifetimes: %s (%d used, %d skipped)\n", file->source.c_str(), file->rows_used,
              file->rows_skipped);
  for (size_t k = 0; k < model.catalog().types.size(); ++k) {
    const auto& d = revocations->types[k];
    std::printf("  %-14s S(1h) = %.3f  S(24h) = %.3f  %s\n", model.catalog().types[k].name.c_str(),
                d.Survival(3600), d.Survival(86400), revocations->sources[k].c_str());
  }
  SimulationOptions sim{.runs = runs, .seed = seed, .notice_s = notice, .takeover_delay_s = delay};
  std::printf(
      "\nCatalog aws-paper-2023 (bench/paper_model.h); plans budget a revocation overhead T_ohd = "
      "%.0f s; simulated: the notice comes %.0f s before the revocation, takeovers train %.0f s "
      "after the notice, 1 iteration lost per revocation; %d runs per plan, seed %llu, confidence "
      "q = %.2f\n\n",
      overhead, notice, delay, runs, static_cast<unsigned long long>(seed), confidence);
  if (only != "simulator") {
    Table(model, *revocations, sim, overhead, confidence);
    for (const double q : {0.99, 0.999}) {
      std::printf("q = %g: ", q);
      Table(model, *revocations, sim, overhead, q, /*rows=*/false);
    }
    const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
    const auto prototype = *predictor::PerformanceModel::Create(
        services::ToDomain(*registry.ResolveWorkload("resnet110")),
        services::ToDomain(*registry.ResolveCatalog("aws-spotdnn-prototype")));
    auto prototype_revocations = ModelFor(prototype.catalog(), *file);
    std::printf(
        "\nThe same grid on the prototype's catalog and workload (aws-spotdnn-prototype, "
        "resnet110; small quotas):\n");
    Table(prototype, *prototype_revocations, sim, overhead, confidence);
    for (const double q : {0.99, 0.999}) {
      std::printf("q = %g: ", q);
      Table(prototype, *prototype_revocations, sim, overhead, q, /*rows=*/false);
    }
  }  // only != "simulator"

  // Simulator speed: 10,000 runs of a 10-instance plan.
  {
    PlanProblem problem = provisioner::DefaultProblem(model, 0.8, 2400);
    problem.overhead_s = overhead;
    const int k80 = model.catalog().IndexOf("p2.8xlarge");
    const int m60 = model.catalog().IndexOf("g3.8xlarge");
    const int t4 = model.catalog().IndexOf("g4dn.4xlarge");
    std::vector<int> plan(model.catalog().types.size(), 0);
    plan[k80] = 4;
    plan[m60] = 3;
    plan[t4] = 3;
    provisioner::Candidate c;
    provisioner::Score(model, problem, plan, c);
    problem.deadline_s = std::ceil(c.time_s * 1.05);
    std::vector<provisioner::TypeRevocationInput> rates = Inputs(model.catalog());
    for (auto& in : rates) in.interruption_rate_per_hour = 0.5;
    const RevocationModel exponential = *provisioner::BuildRevocationModel(rates);
    struct Setting {
      const RevocationModel* model;
      double resolution;
      const char* what;
    };
    for (const Setting& setting : {Setting{&*revocations, 0.0, "GCE lifetimes"},
                                   Setting{&*revocations, 0.002, "GCE lifetimes"},
                                   Setting{&exponential, 0.0, "exponential, 0.5/h"},
                                   Setting{&exponential, 0.002, "exponential, 0.5/h"}}) {
      const double resolution = setting.resolution;
      SimulationOptions o = sim;
      o.runs = 10000;
      o.replan_resolution = resolution;
      auto simulator = provisioner::Simulator::Create(model, problem, *setting.model, o);
      const auto start = std::chrono::steady_clock::now();
      const double cpu_start = CpuMs();
      auto r = (*simulator)->Run(plan);
      const double ms = Ms(start), cpu_ms = CpuMs() - cpu_start;
      const auto again_start = std::chrono::steady_clock::now();
      auto again = (*simulator)->Run(plan);
      const double again_ms = Ms(again_start);
      // The same runs with every re-plan searched from scratch (no SearchMemo): the same numbers.
      o.reuse_search = false;
      auto scratch = provisioner::Simulator::Create(model, problem, *setting.model, o);
      const auto scratch_start = std::chrono::steady_clock::now();
      const double scratch_cpu_start = CpuMs();
      auto s = (*scratch)->Run(plan);
      const double scratch_ms = Ms(scratch_start), scratch_cpu_ms = CpuMs() - scratch_cpu_start;
      std::printf(
          "\nSimulator, %s: %s (%.0f s predicted, deadline %.0f s), 10,000 runs, replan "
          "resolution %g: %.0f ms (%.0f ms CPU; %llu re-plans, %llu solved), again with the "
          "cache warm: %.0f ms; searching every re-plan from scratch: %.0f ms (%.0f ms CPU), the "
          "same numbers: %s; P(meet) %.4f, mean revocations %.3f, E[cost] $%.4f, p90 time %.0f "
          "s, same numbers both times: %s\n",
          setting.what, Counts(model, plan).c_str(), c.time_s, problem.deadline_s, resolution, ms,
          cpu_ms, static_cast<unsigned long long>(r->replans),
          static_cast<unsigned long long>(r->replans_solved), again_ms, scratch_ms, scratch_cpu_ms,
          Same(*r, *s, true) ? "yes" : "NO", r->p_meet_deadline, r->revocations.mean,
          r->cost_usd.mean, r->time_s.p90, Same(*r, *again, false) ? "yes" : "NO");
    }
  }
  if (only == "simulator") return 0;
  BruteForce(*file, sim, confidence, brute_cases, seed, /*rates=*/false);
  BruteForce(*file, sim, confidence, brute_cases, seed, /*rates=*/true);
  return 0;
}

}  // namespace
}  // namespace spotdnn

int main(int argc, char** argv) { return spotdnn::Main(argc, argv); }
