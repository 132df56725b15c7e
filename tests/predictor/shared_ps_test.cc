// The shared parameter-server variant: its fixed point, what it predicts for heterogeneous clusters
// and several servers, and iteration, sample and loss targets.
#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "predictor/equations.h"
#include "predictor/performance_model.h"

namespace spotdnn::predictor {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

InstanceCatalog Gce() {
  InstanceCatalog c;
  c.name = "gce";
  c.types = {{"gce-k80", "K80", 1, 12, 0.2556, 0.723, 8},
             {"gce-p100", "P100", 1, 16, 0.551, 1.733, 8},
             {"gce-v100", "V100", 1, 16, 0.861, 2.753, 8},
             {"gce-t4", "T4", 1, 16, 0.11, 0.35, 8}};
  c.parameter_server = {.instance_type = "ps",
                        .bandwidth_mb_per_s = 1000,
                        .spot_price_per_hour = 0.1429,
                        .on_demand_price_per_hour = 0.1429};
  c.pcie_bandwidth_mb_per_s = 10000;
  return c;
}

// z = 0.2, 0.06, 0.05 s; d = 2 * 10 MB / 1000 MB/s = 0.02 s; kappa 0.25; no T4 entry.
WorkloadProfile SharedPs() {
  WorkloadProfile p;
  p.name = "resnet";
  p.variant = ModelVariant::kSharedPs;
  p.parameter_size_mb = 10;
  p.required_bandwidth_mb_per_s = 1000;
  p.compute = {{.gpu_type = "K80", .batch_per_gpu = 128, .compute_time_s = 0.2},
               {.gpu_type = "P100", .batch_per_gpu = 128, .compute_time_s = 0.06},
               {.gpu_type = "V100", .batch_per_gpu = 128, .compute_time_s = 0.05}};
  p.shared_ps = SharedPsModel{.queueing = 0.25};
  return p;
}

PerformanceModel Model(WorkloadProfile p = SharedPs(),
                       ModelOptions o = {.require_loss_model = false}) {
  auto m = PerformanceModel::Create(std::move(p), Gce(), o);
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

TEST(SharedPsLoad, IsTheFixedPointAndMatchesTheClosedFormForOneType) {
  const double d = 0.02, kappa = 0.25;
  for (int n : {1, 2, 4, 8, 32}) {
    for (double z : {0.05, 0.2}) {
      const std::vector<int> counts = {n};
      const std::vector<double> compute = {z};
      const PsLoad load = SharedPsLoad(counts, compute, d, kappa);
      EXPECT_NEAR(z + load.response_time_s, SharedPsIterationTime(n, z, d, kappa), 1e-12)
          << n << " workers of " << z << " s";
      // R = d (1 + kappa W / (1 - W)) with W = d n / T.
      const double w = d * n / (z + load.response_time_s);
      EXPECT_NEAR(load.utilization, w, 1e-10);
      EXPECT_NEAR(load.response_time_s / (d * (1 + kappa * w / (1 - w))), 1, 1e-10);
      EXPECT_LT(load.utilization, 1);
    }
  }
  // Without queueing a lone worker's exchange is just d.
  const std::vector<int> one = {1};
  const std::vector<double> fast = {0.05};
  EXPECT_DOUBLE_EQ(SharedPsLoad(one, fast, d, 0).response_time_s, d);
}

TEST(SharedPsLoad, HeterogeneousFixedPointAndItsLimits) {
  const double d = 0.02;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> count(0, 12);
  std::uniform_real_distribution<double> z(0.01, 0.5), kappa(0.0, 2.0);
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<int> counts = {count(rng), count(rng), count(rng) + 1};
    const std::vector<double> compute = {z(rng), z(rng), z(rng)};
    const double k = kappa(rng);
    const PsLoad load = SharedPsLoad(counts, compute, d, k);
    double rate = 0;
    for (int i = 0; i < 3; ++i) rate += counts[i] / (compute[i] + load.response_time_s);
    // The throughput never exceeds the server's capacity 1/d, and W is d times it.
    EXPECT_LE(rate, 1 / d * (1 + 1e-9)) << trial;
    EXPECT_NEAR(load.utilization, std::min(1.0, d * rate), 1e-9) << trial;
    if (k > 0) {
      EXPECT_NEAR((load.response_time_s - d) * (1 - load.utilization), k * d * load.utilization,
                  1e-10 * d)
          << trial;
    }
    // One more worker of any type loads the servers more.
    std::vector<int> more = counts;
    ++more[trial % 3];
    EXPECT_GT(SharedPsLoad(more, compute, d, k).response_time_s, load.response_time_s - 1e-15);
  }
  // kappa = 0 is a hard knee: no waiting below capacity, throughput 1/d above it.
  const std::vector<int> few = {2}, many = {40};
  const std::vector<double> compute = {0.08};
  EXPECT_DOUBLE_EQ(SharedPsLoad(few, compute, d, 0).response_time_s, d);
  const PsLoad saturated = SharedPsLoad(many, compute, d, 0);
  EXPECT_NEAR(40 / (0.08 + saturated.response_time_s), 1 / d, 1e-6);
}

TEST(SharedPsVariant, PredictsMixedClustersAndServerCountsByIterations) {
  const PerformanceModel model = Model();
  const std::vector<int> mixed = {2, 1, 1, 0};  // 2 K80, 1 P100, 1 V100
  const Estimate e = model.Evaluate(mixed, Target::Iterations(64000));
  ASSERT_TRUE(e.ok()) << model.ErrorStatus(e, Target::Iterations(64000));
  // Every worker's time is its compute time plus the same exchange R; T = j / sum 1/T_i.
  const std::vector<int> counts = {2, 1, 1};
  const std::vector<double> z = {0.2, 0.06, 0.05};
  const PsLoad load = SharedPsLoad(counts, z, 0.02, 0.25);
  const double rate = 2 / (0.2 + load.response_time_s) + 1 / (0.06 + load.response_time_s) +
                      1 / (0.05 + load.response_time_s);
  EXPECT_NEAR(e.time_s, 64000 / rate, 1e-6);
  EXPECT_EQ(e.normalized_iterations, 64000);
  EXPECT_NEAR(e.ps_response_time_s, load.response_time_s, 1e-12);
  EXPECT_NEAR(e.ps_utilization, load.utilization, 1e-12);
  EXPECT_NEAR(e.cost_usd, e.time_s / 3600 * (2 * 0.2556 + 0.551 + 0.861 + 0.1429), 1e-9);
  // A slow worker loads the servers less than a fast one: adding a K80 slows the others less
  // than adding a V100 does.
  const Estimate with_k80 = model.Evaluate(std::vector<int>{3, 1, 1, 0}, Target::Iterations(1));
  const Estimate with_v100 = model.Evaluate(std::vector<int>{2, 1, 2, 0}, Target::Iterations(1));
  EXPECT_LT(with_k80.ps_response_time_s, with_v100.ps_response_time_s);
  // Two servers halve d and the load: eight V100 nearly double their speed.
  const std::vector<int> v100 = {0, 0, 8, 0};
  const Estimate one = model.Evaluate(v100, Target::Iterations(64000), 1);
  const Estimate two = model.Evaluate(v100, Target::Iterations(64000), 2);
  EXPECT_GT(one.ps_utilization, 0.9);
  EXPECT_LT(two.time_s, 0.7 * one.time_s);
  EXPECT_NEAR(1 / two.expected_iteration_time_s, 8 / SharedPsIterationTime(8, 0.05, 0.01, 0.25),
              1e-9);
}

TEST(SharedPsVariant, EpochsUseTheWaBatchAndLossesNeedALossModel) {
  const PerformanceModel model = Model();
  const std::vector<int> counts = {1, 0, 2, 0};
  const Estimate samples = model.Evaluate(counts, Target::Samples(10 * 50000.0));
  ASSERT_TRUE(samples.ok());
  EXPECT_DOUBLE_EQ(samples.wa_batch, 128);
  EXPECT_NEAR(samples.normalized_iterations, 10 * 50000.0 / 128, 1e-9);
  const Estimate loss = model.Evaluate(counts, Target::Loss(0.5));
  EXPECT_EQ(loss.error, EstimateError::kNoLossModel);
  EXPECT_EQ(model.ErrorStatus(loss, Target::Loss(0.5)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(model.ErrorStatus(loss, Target::Loss(0.5)).message(),
              HasSubstr("give the target in iterations or epochs"));
  // Without the option, a profile without a loss model is refused up front, as before.
  auto strict = PerformanceModel::Create(SharedPs(), Gce());
  EXPECT_EQ(strict.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(strict.status().message(), HasSubstr("no loss model"));
  // With one, loss targets work as in the paper's eq. 3.
  WorkloadProfile with_loss = SharedPs();
  with_loss.loss = LossModel{.g1 = 10, .g2 = 0, .g3 = 100, .g4 = 1, .g5 = 0.1};
  const PerformanceModel lossy = Model(with_loss, {});
  const Estimate e = lossy.Evaluate(counts, Target::Loss(0.5));
  ASSERT_TRUE(e.ok());
  EXPECT_NEAR(e.normalized_iterations,
              IterationsToLoss(*with_loss.loss, e.wa_batch, e.convergence_coefficient, 3, 0.5),
              1e-9);
}

TEST(SharedPsVariant, ABatchIsOnlyNeededForSamplesAndLoss) {
  WorkloadProfile p = SharedPs();
  for (ComputeProfile& c : p.compute) c.batch_per_gpu = 0;
  const PerformanceModel model = Model(p);
  const std::vector<int> counts = {0, 1, 1, 0};
  EXPECT_TRUE(model.Evaluate(counts, Target::Iterations(1000)).ok());
  const Estimate e = model.Evaluate(counts, Target::Samples(1e6));
  EXPECT_EQ(e.error, EstimateError::kNoBatch);
  EXPECT_THAT(model.ErrorStatus(e, Target::Samples(1e6)).message(),
              AllOf(HasSubstr("gce-p100 (P100)"), HasSubstr("--batch-size")));
}

TEST(SharedPsVariant, AClusterOfTypesWithoutASpeedNamesThemAll) {
  WorkloadProfile p = SharedPs();
  p.compute.erase(p.compute.begin());  // no K80 either
  const PerformanceModel model = Model(p);
  Cluster cluster{.counts = {1, 0, 2, 3}, .parameter_servers = 1};
  auto prediction = model.Predict(cluster, Target::Iterations(64000));
  EXPECT_EQ(prediction.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(prediction.status().message(),
              AllOf(HasSubstr("gce-k80 (K80)"), HasSubstr("gce-t4 (T4)"),
                    HasSubstr("no compute time for gce-t4")));
}

TEST(SharedPsVariant, MeasuredSingleWorkerSpeedsGiveTheComputeTime) {
  WorkloadProfile p = SharedPs();
  p.compute = {{.gpu_type = "V100", .batch_per_gpu = 128, .measured_samples_per_s = 128 / 0.0714}};
  const PerformanceModel model = Model(p);
  const TypeModel& t = model.types()[2];
  ASSERT_TRUE(t.usable) << t.unusable_reason;
  // The lone worker's time comes back exactly.
  EXPECT_NEAR(SharedPsIterationTime(1, t.compute_time_s, 0.02, 0.25), 0.0714, 1e-12);
  EXPECT_NEAR(t.single_worker_time_s, 0.0714, 1e-12);
  p.compute[0].measured_samples_per_s = 128 / 0.01;  // faster than one exchange: impossible
  auto bad = PerformanceModel::Create(p, Gce(), {.require_loss_model = false});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SharedPsVariant, NetworkTimeIsALowerBoundOfEveryCompositionAtThatSize) {
  const PerformanceModel model = Model();
  EXPECT_FALSE(model.NetworkTimeIsExact());
  for (int n = 1; n <= 8; ++n) {
    const double bound = model.NetworkTime(n, 1);
    for (int k80 = 0; k80 <= n; ++k80) {
      for (int p100 = 0; p100 + k80 <= n; ++p100) {
        const std::vector<int> counts = {k80, p100, n - k80 - p100, 0};
        const Estimate e = model.Evaluate(counts, Target::Iterations(1));
        ASSERT_TRUE(e.ok());
        EXPECT_LE(bound, e.ps_response_time_s * (1 + 1e-12)) << n << " " << k80 << " " << p100;
      }
    }
  }
}

TEST(Target, ValidatesAndDescribesItself) {
  EXPECT_TRUE(Target::Iterations(64000).Validate().ok());
  EXPECT_EQ(Target::Iterations(0).Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Target::Samples(-1).Validate("slo").message(), HasSubstr("slo samples"));
  EXPECT_EQ(Target::Loss(NAN).Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Target::Iterations(64000).Describe(), "64000 iterations");
  EXPECT_EQ(Target::Loss(0.5).Describe(), "loss 0.5");
  EXPECT_EQ(*ParseVariant("shared-ps"), ModelVariant::kSharedPs);
  EXPECT_EQ(ParseVariant("best").status().code(), absl::StatusCode::kInvalidArgument);
  WorkloadProfile p = SharedPs();
  p.shared_ps->queueing = -1;
  EXPECT_THAT(p.Validate().message(), HasSubstr("shared_ps.queueing = -1"));
}

}  // namespace
}  // namespace spotdnn::predictor
