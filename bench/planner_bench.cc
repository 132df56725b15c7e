// Provisioning time of the optimizers (paper: 0.3 s for 70 instances of quota; Srifty+'s exhaustive
// search 1,503.7 s).
//   BM_Exact/paper7x10:      the paper's 7-type catalog, quota 10 each (target: median <= 10 ms)
//   BM_Exhaustive/paper7x10: the same problems, every composition (for the exact/exhaustive ratio)
//   BM_Exact/synthetic20x16: a 20-type catalog with quota 16 each (target: <= 1 s)
//   BM_Spotdnn/paper7x10:    the paper's heuristic on the same problems
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "bench/paper_inputs.h"
#include "benchmark/benchmark.h"
#include "predictor/performance_model.h"
#include "provisioner/planner.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"

namespace spotdnn {
namespace {

using provisioner::PlanProblem;

// The paper's catalog (Table III) with ResNet-110-like compute times for all 7 types, in the
// paper's model variant (R counted). Compute times are illustrative: per-GPU times ordered as the
// GPUs' speeds (V100 < T4 < M60 < K80), the prototype's S_parm, B_req, contention and loss.
predictor::PerformanceModel PaperModel() {
  auto [catalog, profile] = bench::LoadPaperInputs();
  profile.compute = {{.gpu_type = "V100", .batch_per_gpu = 1024, .compute_time_s = 0.21},
                     {.gpu_type = "T4", .batch_per_gpu = 1024, .compute_time_s = 1.2},
                     {.gpu_type = "M60", .batch_per_gpu = 512, .compute_time_s = 0.85},
                     {.gpu_type = "K80", .batch_per_gpu = 1024, .compute_time_s = 0.38}};
  return *predictor::PerformanceModel::Create(profile, catalog);
}

// 20 instance types over 5 GPU generations and 1-8 GPUs, prices roughly proportional to GPUs and
// GPU speed with +-20% noise, quota 16 each.
predictor::PerformanceModel Synthetic20() {
  std::mt19937 rng(20);
  std::uniform_real_distribution<double> noise(0.8, 1.2);
  const struct {
    const char* gpu;
    double time;
    double price;
    int batch;
  } gpus[] = {{"V100", 0.21, 1.25, 1024},
              {"A10G", 0.30, 0.60, 1024},
              {"T4", 1.2, 0.36, 1024},
              {"M60", 0.85, 0.34, 512},
              {"K80", 0.38, 0.30, 1024}};
  const int sizes[] = {1, 2, 4, 8};
  predictor::InstanceCatalog catalog;
  catalog.name = "synthetic-20";
  predictor::WorkloadProfile profile =
      services::ToDomain(*services::DataRegistry::WithBuiltins().ResolveWorkload("resnet110"));
  profile.variant = predictor::ModelVariant::kPaper;
  profile.compute.clear();
  for (const auto& g : gpus) {
    for (int s : sizes) {
      const std::string name = std::string(g.gpu) + "x" + std::to_string(s);
      const double spot = g.price * s * noise(rng);
      catalog.types.push_back({name, g.gpu, s, 16, spot, spot * 3, 16});
      profile.compute.push_back(
          {.instance_type = name, .batch_per_gpu = g.batch, .compute_time_s = g.time * noise(rng)});
    }
  }
  catalog.parameter_server = {.instance_type = "m5.xlarge",
                              .bandwidth_mb_per_s = 1200,
                              .spot_price_per_hour = 0.192,
                              .on_demand_price_per_hour = 0.192};
  catalog.pcie_bandwidth_mb_per_s = 10000;
  return *predictor::PerformanceModel::Create(profile, catalog);
}

using Grid = std::vector<std::pair<double, double>>;

// A grid of (loss, deadline) SLOs like the paper's 42-pair grid: 6 losses x 7 deadlines.
Grid FullGrid() {
  Grid grid;
  for (double loss : {0.7, 0.8, 0.9, 1.0, 1.2, 1.5}) {
    for (double deadline : {300.0, 600.0, 900.0, 1200.0, 1800.0, 2400.0, 3600.0}) {
      grid.emplace_back(loss, deadline);
    }
  }
  return grid;
}

// One feasible SLO per loss (deadline 1 h), for the exact/exhaustive comparison.
Grid RatioGrid() {
  Grid grid;
  for (double loss : {0.7, 0.8, 0.9, 1.0, 1.2, 1.5}) grid.emplace_back(loss, 3600.0);
  return grid;
}

// Solves every SLO of `grid` once per iteration; reports per-solve median and max times.
template <typename SolveFn>
void RunGrid(benchmark::State& state, const predictor::PerformanceModel& model, const Grid& grid,
             SolveFn solve) {
  std::vector<double> ms;
  uint64_t evaluated = 0, feasible = 0;
  for (auto _ : state) {
    for (const auto& [loss, deadline] : grid) {
      const PlanProblem problem = provisioner::DefaultProblem(model, loss, deadline);
      const auto start = std::chrono::steady_clock::now();
      const provisioner::PlanResult r = solve(problem);
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
      evaluated += r.evaluated;
      feasible += r.feasible;
      benchmark::DoNotOptimize(r);
    }
  }
  std::sort(ms.begin(), ms.end());
  state.counters["solve_median_ms"] = ms[ms.size() / 2];
  state.counters["solve_max_ms"] = ms.back();
  state.counters["clusters_per_solve"] = static_cast<double>(evaluated) / ms.size();
  state.counters["feasible_share"] = static_cast<double>(feasible) / ms.size();
  state.SetLabel(std::to_string(grid.size()) + " SLOs per iteration");
}

void BM_ExactPaper7x10(benchmark::State& state) {
  const auto model = PaperModel();
  RunGrid(state, model, FullGrid(),
          [&](const PlanProblem& p) { return provisioner::SolveExact(model, p); });
}
BENCHMARK(BM_ExactPaper7x10)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_SpotdnnPaper7x10(benchmark::State& state) {
  const auto model = PaperModel();
  RunGrid(state, model, FullGrid(),
          [&](const PlanProblem& p) { return provisioner::SolveSpotdnn(model, p); });
}
BENCHMARK(BM_SpotdnnPaper7x10)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_ExactPaper7x10RatioGrid(benchmark::State& state) {
  const auto model = PaperModel();
  RunGrid(state, model, RatioGrid(),
          [&](const PlanProblem& p) { return provisioner::SolveExact(model, p); });
}
BENCHMARK(BM_ExactPaper7x10RatioGrid)->Unit(benchmark::kMillisecond)->Iterations(5);

void BM_ExhaustivePaper7x10RatioGrid(benchmark::State& state) {
  const auto model = PaperModel();
  RunGrid(state, model, RatioGrid(), [&](const PlanProblem& p) {
    return *provisioner::SolveExhaustive(model, p, 100'000'000);
  });
}
BENCHMARK(BM_ExhaustivePaper7x10RatioGrid)->Unit(benchmark::kMillisecond)->Iterations(1);

// How far the paper's heuristic is from the optimum on the prototype's own ResNet-110 inputs, over
// the 42-SLO grid: share of SLOs where it is dearer, and its largest excess in percent.
void BM_SpotdnnGapOnPrototypeInputs(benchmark::State& state) {
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  const auto model = *predictor::PerformanceModel::Create(
      services::ToDomain(*registry.ResolveWorkload("resnet110")),
      services::ToDomain(*registry.ResolveCatalog("aws-spotdnn-prototype")));
  int dearer = 0, both = 0;
  double worst = 0;
  for (auto _ : state) {
    dearer = both = 0;
    worst = 0;
    for (const auto& [loss, deadline] : FullGrid()) {
      const PlanProblem problem = provisioner::DefaultProblem(model, loss, deadline);
      const auto heuristic = provisioner::SolveSpotdnn(model, problem);
      const auto exact = provisioner::SolveExact(model, problem);
      if (!heuristic.feasible || !exact.feasible) continue;
      ++both;
      const double gap = heuristic.best.cost_usd / exact.best.cost_usd - 1;
      if (gap > 1e-9) ++dearer;
      worst = std::max(worst, gap);
    }
  }
  state.counters["slos_both_feasible"] = both;
  state.counters["slos_heuristic_dearer"] = dearer;
  state.counters["max_excess_pct"] = 100 * worst;
}
BENCHMARK(BM_SpotdnnGapOnPrototypeInputs)->Unit(benchmark::kMillisecond)->Iterations(1);

void BM_ExactSynthetic20x16(benchmark::State& state) {
  const auto model = Synthetic20();
  RunGrid(state, model, FullGrid(),
          [&](const PlanProblem& p) { return provisioner::SolveExact(model, p); });
}
BENCHMARK(BM_ExactSynthetic20x16)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace spotdnn

BENCHMARK_MAIN();
