// Throughput of the performance model and of the predictor service.
//   BM_Evaluate/7 types:      cluster evaluations per second on one core (target >= 5 million)
//   BM_EvaluateSharedPs:      the same for the shared-ps variant (a fixed point per evaluation)
//   BM_PredictBatchLoopback:  one PredictBatch of 10,000 clusters over 127.0.0.1 (target <= 50 ms)
#include <memory>
#include <random>
#include <vector>

#include "bench/paper_inputs.h"
#include "benchmark/benchmark.h"
#include "predictor/performance_model.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "services/predictor/predictor_service.h"

namespace spotdnn {
namespace {

using services::pb::PredictBatchRequest;

// The paper's 7-type catalog (Table III, built in) with a compute time for every type. The times
// are illustrative (the model's cost does not depend on their values); the rest is the prototype's
// ResNet-110 profile in the paper's variant, so R is computed.
predictor::PerformanceModel PaperModel() {
  auto [catalog, profile] = bench::LoadPaperInputs();
  const double times[] = {0.21, 3.7, 0.9, 1.2, 0.87, 0.85, 0.83};
  for (size_t k = 0; k < catalog.types.size(); ++k) {
    profile.compute.push_back(
        {.instance_type = catalog.types[k].name, .batch_per_gpu = 256, .compute_time_s = times[k]});
  }
  return *predictor::PerformanceModel::Create(profile, catalog);
}

std::vector<std::vector<int>> RandomClusters(size_t types, size_t n, int max_count) {
  std::mt19937 rng(42);
  std::uniform_int_distribution<int> count(0, max_count);
  std::vector<std::vector<int>> clusters;
  while (clusters.size() < n) {
    std::vector<int> c(types);
    int total = 0;
    for (int& x : c) total += (x = count(rng));
    if (total > 0) clusters.push_back(std::move(c));
  }
  return clusters;
}

void BM_Evaluate(benchmark::State& state) {
  const predictor::PerformanceModel model = PaperModel();
  const auto clusters = RandomClusters(model.catalog().types.size(), 4096, 10);
  size_t i = 0;
  double sink = 0;
  for (auto _ : state) {
    const predictor::Estimate e = model.Evaluate(clusters[i++ & 4095], 0.9);
    sink += e.cost_usd;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("7 types, quota 10");
}
BENCHMARK(BM_Evaluate);

// The fitted ResNet-32/CIFAR-10 profile (shared-ps variant) on the 3-type GCE catalog: every
// evaluation solves the parameter servers' fixed point.
void BM_EvaluateSharedPs(benchmark::State& state) {
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  auto model = predictor::PerformanceModel::Create(
      services::ToDomain(*registry.ResolveWorkload("resnet32-cifar10-gce")),
      services::ToDomain(*registry.ResolveCatalog("gce-icac-2019")), {.require_loss_model = false});
  const auto clusters = RandomClusters(model->catalog().types.size(), 4096, 8);
  size_t i = 0;
  double sink = 0;
  const predictor::Target target = predictor::Target::Iterations(64000);
  for (auto _ : state) {
    const predictor::Estimate e = model->Evaluate(clusters[i++ & 4095], target);
    sink += e.cost_usd;
  }
  benchmark::DoNotOptimize(sink);
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("3 types, quota 8, iterations target");
}
BENCHMARK(BM_EvaluateSharedPs);

void BM_PredictDetailed(benchmark::State& state) {
  const predictor::PerformanceModel model = PaperModel();
  const auto clusters = RandomClusters(model.catalog().types.size(), 4096, 10);
  size_t i = 0;
  for (auto _ : state) {
    auto p = model.Predict({.counts = clusters[i++ & 4095]}, 0.9);
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_PredictDetailed);

void BM_PredictBatchLoopback(benchmark::State& state) {
  auto registry = std::make_shared<services::DataRegistry>(services::DataRegistry::WithBuiltins());
  services::PredictorServiceImpl service(registry);
  auto started = services::StartServer("127.0.0.1:0", {&service});
  if (!started.ok()) {
    state.SkipWithError("cannot start the predictor");
    return;
  }
  auto stub = services::pb::Predictor::NewStub(
      services::MakeChannel("127.0.0.1:" + std::to_string(started->port)));
  const predictor::InstanceCatalog catalog =
      services::ToDomain(*registry->ResolveCatalog("aws-spotdnn-prototype"));
  PredictBatchRequest request;
  request.mutable_workload()->set_name("resnet110");
  request.mutable_catalog()->set_name("aws-spotdnn-prototype");
  request.set_target_loss(0.9);
  request.set_detailed(state.range(1) != 0);
  for (const auto& counts : RandomClusters(catalog.types.size(), state.range(0), 5)) {
    *request.add_clusters() = services::ToProto(predictor::Cluster{.counts = counts}, catalog);
  }
  for (auto _ : state) {
    services::pb::PredictBatchResponse response;
    grpc::ClientContext context;
    const grpc::Status s = stub->PredictBatch(&context, request, &response);
    if (!s.ok() || response.items_size() != state.range(0)) {
      state.SkipWithError(s.error_message().c_str());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
  state.SetLabel(state.range(1) ? "detailed" : "summary");
  started->server->Shutdown();
}
BENCHMARK(BM_PredictBatchLoopback)
    ->Args({10000, 0})
    ->Args({10000, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(2.0);

}  // namespace
}  // namespace spotdnn

BENCHMARK_MAIN();
