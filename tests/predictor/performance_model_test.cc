#include "predictor/performance_model.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/prototype_inputs.h"

namespace spotdnn::predictor {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_inputs::PrototypeCatalog;
using testing_inputs::PrototypeProfile;

// A small paper-variant workload whose numbers were worked by hand (see equations_test.cc).
InstanceCatalog HandCatalog() {
  InstanceCatalog c;
  c.name = "hand";
  c.types = {{"a.big", "X", 2, 16, 1.0, 3.0, 10}, {"b.small", "Y", 1, 8, 0.5, 1.5, 10}};
  c.parameter_server = {.instance_type = "ps",
                        .bandwidth_mb_per_s = 1000,
                        .spot_price_per_hour = 0.1,
                        .on_demand_price_per_hour = 0.2};
  c.pcie_bandwidth_mb_per_s = 10000;
  return c;
}

WorkloadProfile HandProfile() {
  WorkloadProfile p;
  p.name = "hand";
  p.parameter_size_mb = 10;
  p.required_bandwidth_mb_per_s = 300;
  p.compute = {{.instance_type = "a.big", .batch_per_gpu = 64, .compute_time_s = 0.5},
               {.gpu_type = "Y", .batch_per_gpu = 64, .compute_time_s = 0.3}};
  p.contention = ContentionModel{.a1 = 0.6, .b1 = -0.8};
  p.loss = LossModel{.g1 = 10, .g2 = -0.01, .g3 = 100, .g4 = 0.5, .g5 = 0.1};
  return p;
}

PerformanceModel MustCreate(WorkloadProfile p, InstanceCatalog c, ModelOptions o = {}) {
  auto model = PerformanceModel::Create(std::move(p), std::move(c), o);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

TEST(PrototypeVariant, DerivesComputeAndMeasuredTimesLikeThePrototype) {
  const PerformanceModel model = MustCreate(PrototypeProfile(), PrototypeCatalog());
  const double t_comp[] = {0.38356, 1.20566, 0.84852, 0.87379, 3.72971};
  const double t_meas[] = {0.54324, 1.36533, 1.00589, 1.02657, 3.87329};
  for (int k = 0; k < 5; ++k) {
    const TypeModel& t = model.types()[k];
    EXPECT_NEAR(t.compute_time_s, t_comp[k], 1e-5) << k;
    EXPECT_NEAR(static_cast<double>(t.batch_size) /
                    PrototypeProfile().compute[k].measured_samples_per_s.value(),
                t_meas[k], 1e-5)
        << k;
    EXPECT_EQ(t.pcie_time_s, 0) << "the prototype leaves PCIe out of T_i";
  }
}

struct WorkedExample {
  std::vector<int> counts;
  double loss, wa_batch, speed, iterations, time_s, cost_usd;
  friend void PrintTo(const WorkedExample& ex, std::ostream* os) {
    *os << "counts [";
    for (int c : ex.counts) *os << c << " ";
    *os << "] loss " << ex.loss;
  }
};

class PrototypeExamples : public ::testing::TestWithParam<WorkedExample> {};

TEST_P(PrototypeExamples, ReproducesTheReferenceFigures) {
  const WorkedExample& ex = GetParam();
  const PerformanceModel model = MustCreate(PrototypeProfile(), PrototypeCatalog());
  const Estimate e = model.Evaluate(ex.counts, ex.loss);
  ASSERT_TRUE(e.ok());
  EXPECT_NEAR(e.wa_batch, ex.wa_batch, 1e-9);
  EXPECT_NEAR(e.cluster_speed, ex.speed, 0.006);
  EXPECT_EQ(e.normalized_iterations, ex.iterations);
  EXPECT_NEAR(e.time_s, ex.time_s, 1e-9);  // the prototype rounds T to 0.01 s
  EXPECT_NEAR(e.cost_usd, ex.cost_usd, 5e-7);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, PrototypeExamples,
    ::testing::Values(
        WorkedExample{{2, 0, 4, 0, 0}, 0.8, 1024.0, 7807.57, 17926, 2351.08, 2.985872},
        WorkedExample{{2, 1, 3, 0, 0}, 0.9, 1024.0, 7542.94, 13225, 1795.37, 2.119135},
        WorkedExample{{1, 0, 0, 0, 0}, 1.0, 1024.0, 1877.05, 3729, 2034.30, 0.518746},
        WorkedExample{{2, 2, 5, 0, 0}, 1.2, 1024.0, 10255.35, 8993, 897.95, 1.491196},
        WorkedExample{{0, 0, 0, 8, 0}, 0.8, 2048.0, 15818.24, 18904, 2447.52, 8.526072}));

TEST(PaperVariant, HomogeneousClusterWorkedByHand) {
  const PerformanceModel model = MustCreate(HandProfile(), HandCatalog());
  auto p = model.Predict({.counts = {4, 0}}, 0.5);
  ASSERT_TRUE(p.ok()) << p.status();
  const Estimate& e = p->estimate;
  EXPECT_NEAR(e.contention_probability, 0.4, 1e-12);    // 0.6 * 2 - 0.8
  EXPECT_NEAR(e.worker_bandwidth_mb_per_s, 280, 1e-9);  // 0.4 * 250 + 0.6 * 300
  ASSERT_EQ(p->workers.size(), 1u);
  EXPECT_NEAR(p->workers[0].iteration_time_s, 0.5754285714285714, 1e-12);  // 0.5 + 20/280 + 0.004
  EXPECT_NEAR(e.cluster_speed, 889.7715988083417, 1e-9);
  EXPECT_NEAR(e.expected_iteration_time_s, 0.14385714285714285, 1e-12);
  EXPECT_NEAR(e.wa_batch, 128, 1e-9);
  EXPECT_NEAR(e.convergence_coefficient, std::sqrt(0.75), 1e-12);
  EXPECT_NEAR(e.normalized_iterations, 566.9053135155094, 1e-8);
  EXPECT_NEAR(e.time_s, 81.55337867287399, 1e-8);
}

TEST(PaperVariant, HeterogeneousClusterWorkedByHand) {
  const PerformanceModel model = MustCreate(HandProfile(), HandCatalog());
  auto p = model.Predict({.counts = {1, 2}}, 0.5);
  ASSERT_TRUE(p.ok()) << p.status();
  const Estimate& e = p->estimate;
  EXPECT_NEAR(e.worker_bandwidth_mb_per_s, 300, 1e-12);  // share 333 > 300: no contention
  EXPECT_NEAR(p->workers[0].iteration_time_s, 0.5706666666666667, 1e-12);
  EXPECT_NEAR(p->workers[1].iteration_time_s, 0.36866666666666664, 1e-12);
  EXPECT_NEAR(e.cluster_speed, 571.4961721113384, 1e-9);
  EXPECT_NEAR(e.expected_iteration_time_s, 0.13932832965415745, 1e-12);
  EXPECT_NEAR(e.wa_batch, 79.62560706401766, 1e-9);
  EXPECT_NEAR(e.convergence_coefficient, 0.7440607593408093, 1e-12);
  EXPECT_NEAR(e.normalized_iterations, 469.1257305840447, 1e-8);
  EXPECT_NEAR(e.time_s, 65.36250444006123, 1e-8);
  // Workers 1.0 + 2 * 0.5 plus the priced PS 0.1 $/h (on-demand 3 + 2 * 1.5 + 0.2).
  EXPECT_NEAR(e.cost_usd, 0.03812812759003572, 1e-12);
  EXPECT_NEAR(e.on_demand_cost_usd, 0.11256875764677211, 1e-12);
}

TEST(PaperVariant, MeasuredSpeedDerivesComputeTimeWithPcie) {
  WorkloadProfile p = HandProfile();
  p.compute[0].compute_time_s.reset();
  p.compute[0].measured_samples_per_s = 200;  // T_meas = 128 / 200 = 0.64
  const PerformanceModel model = MustCreate(p, HandCatalog());
  // T_comp = 0.64 - 2 * 10 / 300 - 2 * 2 * 10 / 10000
  EXPECT_NEAR(model.types()[0].compute_time_s, 0.64 - 20.0 / 300 - 0.004, 1e-12);
  // One worker then runs at exactly the measured speed.
  const Estimate e = model.Evaluate(std::vector<int>{1, 0}, 0.5);
  ASSERT_TRUE(e.ok());
  EXPECT_NEAR(e.cluster_speed, 200, 1e-9);
}

TEST(PaperVariant, BatchFromMemoryModelWhenTheProfileGivesNone) {
  WorkloadProfile p = HandProfile();
  p.compute[1].batch_per_gpu = 0;
  p.memory = MemoryModel{.a2 = 16, .b2 = 0};  // 8 GiB -> 128
  const PerformanceModel model = MustCreate(p, HandCatalog());
  EXPECT_EQ(model.types()[1].batch_size, 128);
  p.memory.reset();
  const PerformanceModel without = MustCreate(p, HandCatalog());
  EXPECT_FALSE(without.types()[1].usable);
  EXPECT_THAT(without.types()[1].unusable_reason, HasSubstr("no batch size"));
}

TEST(PaperVariant, ParameterServersAddBandwidth) {
  const PerformanceModel model = MustCreate(HandProfile(), HandCatalog());
  const Estimate one = model.Evaluate(std::vector<int>{9, 0}, 0.5, 1);
  const Estimate two = model.Evaluate(std::vector<int>{9, 0}, 0.5, 2);
  ASSERT_TRUE(one.ok());
  ASSERT_TRUE(two.ok());
  EXPECT_NEAR(one.worker_bandwidth_mb_per_s, 1000.0 / 9, 1e-9);  // P = 1: the share
  EXPECT_NEAR(two.worker_bandwidth_mb_per_s, 2000.0 / 9, 1e-9);
  EXPECT_LT(two.time_s, one.time_s);
  EXPECT_NEAR(two.price_per_hour - one.price_per_hour, 0.1, 1e-12);  // one more priced PS
}

TEST(PaperVariant, BandwidthMarginLowersPredictedBandwidth) {
  const PerformanceModel model =
      MustCreate(HandProfile(), HandCatalog(), {.bandwidth_margin = 0.05});
  const Estimate e = model.Evaluate(std::vector<int>{4, 0}, 0.5);
  ASSERT_TRUE(e.ok());
  EXPECT_NEAR(e.worker_bandwidth_mb_per_s, 280 * 0.95, 1e-9);
}

TEST(Errors, UnreachableTargetsNameTheirReason) {
  const PerformanceModel model = MustCreate(HandProfile(), HandCatalog());
  auto at_floor = model.Predict({.counts = {1, 0}}, 0.1);
  EXPECT_EQ(at_floor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(at_floor.status().message(), HasSubstr("g5 = 0.1"));
  auto below = model.Predict({.counts = {1, 0}}, -3);
  EXPECT_EQ(below.status().code(), absl::StatusCode::kInvalidArgument);
  auto nan = model.Predict({.counts = {1, 0}}, std::nan(""));
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(nan.status().message(), HasSubstr("target_loss = nan"));
  auto too_high = model.Predict({.counts = {1, 0}}, 1e6);
  EXPECT_EQ(too_high.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(too_high.status().message(), HasSubstr("normalized iterations"));
  auto empty = model.Predict({.counts = {0, 0}}, 0.5);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("empty"));
  auto negative = model.Predict({.counts = {-1, 2}}, 0.5);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("a.big = -1"));
  auto wrong_size = model.Predict({.counts = {1}}, 0.5);
  EXPECT_EQ(wrong_size.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Errors, TypeWithoutComputeTimeIsLeftOutWithAReason) {
  WorkloadProfile p = HandProfile();
  p.compute.pop_back();
  const PerformanceModel model = MustCreate(p, HandCatalog());
  EXPECT_FALSE(model.types()[1].usable);
  auto result = model.Predict({.counts = {1, 1}}, 0.5);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(result.status().message(), HasSubstr("no compute time for b.small"));
}

TEST(Errors, CreateRejectsBadInputsNamingTheField) {
  WorkloadProfile no_loss = HandProfile();
  no_loss.loss.reset();
  EXPECT_EQ(PerformanceModel::Create(no_loss, HandCatalog()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  InstanceCatalog zero_gpus = HandCatalog();
  zero_gpus.types[1].gpus = 0;
  auto s = PerformanceModel::Create(HandProfile(), zero_gpus).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("instance_types[1].gpus = 0"));
  WorkloadProfile nan_size = HandProfile();
  nan_size.parameter_size_mb = std::nan("");
  s = PerformanceModel::Create(nan_size, HandCatalog()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("parameter_size_mb = nan"));
  InstanceCatalog dup = HandCatalog();
  dup.types[1].name = "a.big";
  EXPECT_THAT(PerformanceModel::Create(HandProfile(), dup).status().message(),
              HasSubstr("already used"));
  EXPECT_EQ(PerformanceModel::Create(HandProfile(), HandCatalog(), {.bandwidth_margin = 1})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Errors, HugeCountsNameTheCountNotTheTargetLoss) {
  const InstanceCatalog catalog = HandCatalog();
  // INT_MAX + 1 workers overflowed int and came back as a NaN time blamed on target_loss.
  auto cluster = MakeCluster(catalog, {{"a.big", std::numeric_limits<int>::max()}, {"b.small", 1}});
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cluster.status().message(),
              HasSubstr("cluster.instances[0].count = 2147483647 (a.big)"));
  EXPECT_THAT(cluster.status().message(), Not(HasSubstr("target_loss")));
  cluster = MakeCluster(catalog, {{"b.small", kMaxInstancesPerType + 1}});
  EXPECT_THAT(cluster.status().message(), HasSubstr("cluster.instances[0].count = 10001"));
  ASSERT_TRUE(MakeCluster(catalog, {{"a.big", kMaxInstancesPerType}}).ok());

  const PerformanceModel model = MustCreate(HandProfile(), catalog);
  auto p = model.Predict({.counts = {std::numeric_limits<int>::max(), 1}}, 0.5);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(p.status().message(), HasSubstr("cluster count of a.big = 2147483647"));
  // The hot path refuses the sum without overflowing it.
  const Estimate e = model.Evaluate(std::vector<int>{std::numeric_limits<int>::max(), 1}, 0.5);
  EXPECT_EQ(e.error, EstimateError::kTooManyWorkers);
  EXPECT_THAT(model.ErrorStatus(e, 0.5).message(), HasSubstr("must be at most 100000"));
  const Cluster huge{.counts = {std::numeric_limits<int>::max(), 1}};
  EXPECT_EQ(huge.Workers(), std::numeric_limits<int>::max());
}

TEST(Errors, CatalogQuotaAboveTheLimitIsRefused) {
  InstanceCatalog catalog = HandCatalog();
  catalog.types[1].quota = 100'000;
  const absl::Status s = catalog.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("instance_types[1].quota = 100000 (b.small)"));
  catalog.types[1].quota = kMaxInstancesPerType;
  EXPECT_TRUE(catalog.Validate().ok());
}

TEST(Errors, NeverNanOrNegativeTime) {
  // Random clusters and targets: every answer is an error or a finite positive time and cost.
  std::mt19937 rng(7);
  for (auto variant : {ModelVariant::kPaper, ModelVariant::kSpotdnnPrototype}) {
    WorkloadProfile p = PrototypeProfile();
    p.variant = variant;
    const PerformanceModel model = MustCreate(p, PrototypeCatalog());
    std::uniform_int_distribution<int> count(0, 6);
    std::uniform_real_distribution<double> loss(-1, 50);
    int ok = 0;
    for (int i = 0; i < 20000; ++i) {
      std::vector<int> counts(5);
      for (int& c : counts) c = count(rng);
      const Estimate e = model.Evaluate(counts, loss(rng));
      if (!e.ok()) continue;
      ++ok;
      ASSERT_TRUE(std::isfinite(e.time_s) && e.time_s > 0) << e.time_s;
      ASSERT_TRUE(std::isfinite(e.cost_usd) && e.cost_usd > 0) << e.cost_usd;
      ASSERT_TRUE(std::isfinite(e.normalized_iterations) && e.normalized_iterations > 0);
    }
    EXPECT_GT(ok, 100);
  }
}

TEST(LossCurve, StartsAtTheInitialLossAndReachesTheTargetAtTheTime) {
  const PerformanceModel model = MustCreate(HandProfile(), HandCatalog());
  const Cluster cluster{.counts = {1, 2}};
  auto p = model.Predict(cluster, 0.5);
  ASSERT_TRUE(p.ok());
  auto curve = model.LossCurve(cluster, p->estimate.time_s, 11);
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_EQ(curve->size(), 11u);
  EXPECT_EQ(curve->front().time_s, 0);
  EXPECT_NEAR(curve->back().loss, 0.5, 1e-9);
  for (size_t i = 1; i < curve->size(); ++i) EXPECT_LT((*curve)[i].loss, (*curve)[i - 1].loss);
  auto at = model.LossAtTime(cluster, p->estimate.time_s);
  ASSERT_TRUE(at.ok());
  EXPECT_NEAR(*at, 0.5, 1e-9);
  EXPECT_EQ(model.LossCurve(cluster, -1, 5).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model.LossCurve(cluster, 10, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spotdnn::predictor

namespace spotdnn::predictor {
namespace {

// Integers that overflowed (gpus * batch) or reached the model unbounded are refused naming the
// field, and no output is infinite.
TEST(Bounds, GpusBatchAndParameterServersAreBoundedNamingTheField) {
  InstanceCatalog many_gpus = HandCatalog();
  many_gpus.types[0].gpus = 2147483647;
  auto s = PerformanceModel::Create(HandProfile(), many_gpus).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("instance_types[0].gpus = 2147483647 (a.big): must be in "
                                     "[1, 1024]"));
  WorkloadProfile big_batch = HandProfile();
  big_batch.compute[1].batch_per_gpu = 2147483647;
  s = PerformanceModel::Create(big_batch, HandCatalog()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("compute[1].batch_per_gpu = 2147483647: must be in"));
  // The largest allowed values make a worker batch that fits an int.
  InstanceCatalog largest = HandCatalog();
  largest.types[0].gpus = kMaxGpusPerInstance;
  WorkloadProfile largest_batch = HandProfile();
  largest_batch.compute[0].batch_per_gpu = kMaxBatchPerGpu;
  const PerformanceModel m = MustCreate(largest_batch, largest);
  EXPECT_EQ(m.types()[0].batch_size, kMaxGpusPerInstance * kMaxBatchPerGpu);
  // A memory model that would give a batch of 2^30 per GPU is capped.
  WorkloadProfile huge_memory = HandProfile();
  huge_memory.compute[1].batch_per_gpu = 0;
  huge_memory.memory = MemoryModel{.a2 = 1e12, .b2 = 0};
  EXPECT_EQ(MustCreate(huge_memory, HandCatalog()).types()[1].batch_size, kMaxBatchPerGpu);

  auto cluster = MakeCluster(HandCatalog(), {{"a.big", 1}}, 2147483647);
  EXPECT_THAT(cluster.status().message(),
              HasSubstr("cluster.parameter_servers = 2147483647: must be in [1, 1000]"));
}

TEST(Bounds, LossCurveHorizonIsBoundedAndItsTimesFinite) {
  const PerformanceModel m = MustCreate(HandProfile(), HandCatalog());
  const Cluster cluster = *MakeCluster(m.catalog(), {{"a.big", 2}});
  auto s = m.LossCurve(cluster, 1e308, 50).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("horizon_s = 1e+308"));
  auto curve = m.LossCurve(cluster, kMaxHorizonS, 50);
  ASSERT_TRUE(curve.ok()) << curve.status();
  for (const LossPoint& p : *curve) {
    EXPECT_TRUE(std::isfinite(p.time_s) && std::isfinite(p.normalized_iterations) &&
                std::isfinite(p.loss));
  }
  EXPECT_EQ(curve->back().time_s, kMaxHorizonS);
}

TEST(Bounds, AnInfiniteCostIsAnErrorNotAnAnswer) {
  InstanceCatalog dear = HandCatalog();
  dear.types[0].spot_price_per_hour = 1e308;
  const PerformanceModel m = MustCreate(HandProfile(), dear);
  const Estimate e = m.Evaluate(std::vector<int>{3, 0}, 1.0);
  EXPECT_EQ(e.error, EstimateError::kNotFinite);
  EXPECT_THAT(m.ErrorStatus(e, 1.0).message(), HasSubstr("no finite training time or cost"));
}

}  // namespace
}  // namespace spotdnn::predictor
