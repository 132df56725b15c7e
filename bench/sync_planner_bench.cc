// Solve time of the synchronous (all-reduce) plan (provisioner/sync_planner.h) on the built-in
// catalogs, beside the parameter-server plans' (planner_bench):
//   BM_SyncExact/<catalog>: 6 iteration targets x 7 deadlines, global batch 512, the cheapest
//   cluster and its split; reports the median and the largest solve time.
//   BM_SyncScaleAccuracy/<catalog>: the same with a global batch that scales and accuracy targets.
// The all-reduce models are illustrative: the T4's is the fit on Pollux's cifar10 traces
// (docs/synchronous-allreduce.md), the other GPU types' compute scaled by their relative speed;
// a memory model of 16 samples per GiB caps the local batches (a K80 at 192, a T4 at 256), so
// small clusters accumulate.
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "provisioner/sync_planner.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"

namespace spotdnn {
namespace {

predictor::WorkloadProfile SyncProfile() {
  predictor::WorkloadProfile p;
  p.name = "cifar10-sync";
  p.sync = predictor::SyncKind::kAllReduce;
  p.memory = predictor::MemoryModel{16, 0};
  const struct {
    const char* gpu;
    double slowdown;  // compute time relative to a T4's
  } gpus[] = {{"T4", 1.0}, {"V100", 0.35}, {"P100", 0.55}, {"M60", 1.4}, {"K80", 2.0}};
  for (const auto& g : gpus) {
    predictor::AllReduceModel m;
    m.gpu_type = g.gpu;
    m.compute_fixed_s = 0.0181 * g.slowdown;
    m.compute_per_sample_s = 0.0006855 * g.slowdown;
    m.compute_contention = 0.002077;
    m.intra_fixed_s = 0;
    m.intra_ring_s = 0.02212;
    m.cross_instance = true;
    m.cross_fixed_s = 0.01688;
    m.cross_straggler_s = 0.05934;
    m.cross_per_gpu_s = 0.0007534;
    m.overlap_gamma = 2.023;
    p.allreduce.push_back(m);
  }
  return p;
}

void BM_SyncExact(benchmark::State& state, const std::string& catalog_name) {
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  const predictor::InstanceCatalog catalog =
      services::ToDomain(*registry.ResolveCatalog(catalog_name));
  auto planner = provisioner::SyncPlanner::Create(SyncProfile(), catalog, 512);
  if (!planner.ok()) {
    state.SkipWithError(std::string(planner.status().message()).c_str());
    return;
  }
  std::vector<double> ms;
  uint64_t evaluated = 0, nodes = 0, feasible = 0;
  for (auto _ : state) {
    for (double iterations : {2000.0, 5000.0, 10000.0, 20000.0, 50000.0, 100000.0}) {
      for (double deadline : {300.0, 600.0, 900.0, 1200.0, 1800.0, 2400.0, 3600.0}) {
        const provisioner::PlanProblem problem =
            planner->DefaultProblem(predictor::Target::Iterations(iterations), deadline);
        const auto start = std::chrono::steady_clock::now();
        const provisioner::PlanResult r = planner->SolveExact(problem);
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
        evaluated += r.evaluated;
        nodes += r.nodes;
        feasible += r.feasible;
        benchmark::DoNotOptimize(r);
      }
    }
  }
  std::sort(ms.begin(), ms.end());
  state.counters["solve_median_ms"] = ms[ms.size() / 2];
  state.counters["solve_max_ms"] = ms.back();
  state.counters["clusters_per_solve"] = static_cast<double>(evaluated) / ms.size();
  state.counters["nodes_per_solve"] = static_cast<double>(nodes) / ms.size();
  state.counters["feasible_share"] = static_cast<double>(feasible) / ms.size();
  state.counters["search_space"] = static_cast<double>(
      provisioner::SearchSpaceSize(planner->DefaultProblem(predictor::Target::Iterations(1000))));
}
BENCHMARK_CAPTURE(BM_SyncExact, aws_spotdnn_prototype, "aws-spotdnn-prototype")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_SyncExact, aws_paper_2023, "aws-paper-2023")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_SyncExact, gce_icac_2019, "gce-icac-2019")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

// A global batch that scales (every rank at 64 samples) and accuracy targets: an illustrative
// curve (error 0.05 + 0.9 exp(-j / 3000) at global batch 512) with a critical batch of 1,000, so
// more ranks take fewer steps. 3 targets x 7 deadlines; the convergence model's Monte Carlo runs
// once per target, before the timing.
void BM_SyncScaleAccuracy(benchmark::State& state, const std::string& catalog_name) {
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  const predictor::InstanceCatalog catalog =
      services::ToDomain(*registry.ResolveCatalog(catalog_name));
  predictor::WorkloadProfile profile = SyncProfile();
  profile.global_batch = predictor::GlobalBatch::kScale;
  predictor::ConvergenceModel accuracy;
  accuracy.metric = "accuracy";
  accuracy.higher_is_better = true;
  accuracy.floor = 0.05;
  accuracy.amplitude = 0.9;
  accuracy.scale = 3000;
  accuracy.noise_sd = accuracy.noise_sd_after = 0.01;
  accuracy.eval_interval_steps = 100;
  accuracy.reference_global_batch = 512;
  accuracy.critical_batch = 1000;
  profile.convergence = {accuracy};
  auto planner = provisioner::SyncPlanner::CreateScaling(profile, catalog, 64);
  if (!planner.ok()) {
    state.SkipWithError(std::string(planner.status().message()).c_str());
    return;
  }
  const std::vector<double> targets = {0.85, 0.9, 0.93};
  for (double t : targets) {
    if (auto s = planner->Validate(planner->DefaultProblem(predictor::Target::Accuracy(t)));
        !s.ok()) {
      state.SkipWithError(std::string(s.message()).c_str());
      return;
    }
  }
  std::vector<double> ms;
  uint64_t evaluated = 0, nodes = 0, feasible = 0;
  for (auto _ : state) {
    for (double t : targets) {
      for (double deadline : {300.0, 600.0, 900.0, 1200.0, 1800.0, 2400.0, 3600.0}) {
        const provisioner::PlanProblem problem =
            planner->DefaultProblem(predictor::Target::Accuracy(t), deadline);
        const auto start = std::chrono::steady_clock::now();
        const provisioner::PlanResult r = planner->SolveExact(problem);
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count());
        evaluated += r.evaluated;
        nodes += r.nodes;
        feasible += r.feasible;
        benchmark::DoNotOptimize(r);
      }
    }
  }
  std::sort(ms.begin(), ms.end());
  state.counters["solve_median_ms"] = ms[ms.size() / 2];
  state.counters["solve_max_ms"] = ms.back();
  state.counters["clusters_per_solve"] = static_cast<double>(evaluated) / ms.size();
  state.counters["nodes_per_solve"] = static_cast<double>(nodes) / ms.size();
  state.counters["feasible_share"] = static_cast<double>(feasible) / ms.size();
}
BENCHMARK_CAPTURE(BM_SyncScaleAccuracy, aws_spotdnn_prototype, "aws-spotdnn-prototype")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_SyncScaleAccuracy, aws_paper_2023, "aws-paper-2023")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);
BENCHMARK_CAPTURE(BM_SyncScaleAccuracy, gce_icac_2019, "gce-icac-2019")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(5);

}  // namespace
}  // namespace spotdnn

BENCHMARK_MAIN();
