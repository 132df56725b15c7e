#include "predictor/allreduce.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "predictor/performance_model.h"
#include "tests/testing/allreduce_models.h"

namespace spotdnn::predictor {
namespace {

AllReduceModel Model() { return testing_models::PlainAllReduceModel("T4", 0.001); }

TEST(AllReduceModel, OneGpuIsItsCompute) {
  auto step = AllReduceStepTime(Model(), {1}, {32.0});
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_DOUBLE_EQ(step->compute_s, 0.01 + 0.032);
  EXPECT_EQ(step->allreduce_s, 0);
  EXPECT_DOUBLE_EQ(step->step_s, step->compute_s);
}

TEST(AllReduceModel, TermsFollowThePlacement) {
  const AllReduceModel m = Model();
  AllReduceModel m2 = m;
  // One instance of 4: contention on compute, ring 2*3/4 inside, nothing across.
  auto one = AllReduceStepTime(m, {4}, {32.0});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_DOUBLE_EQ(one->compute_s, 0.042 * (1 + 0.1 * 3));
  EXPECT_DOUBLE_EQ(one->allreduce_s, 0.02 + 0.04 * 1.5);
  EXPECT_NEAR(one->step_s, std::hypot(one->compute_s, one->allreduce_s), 1e-12);  // gamma 2
  // Four instances of 4 add a_n + b_s sqrt(2 ln 4) + c_k * 3.
  auto four = AllReduceStepTime(m, {4, 4, 4, 4}, {32.0});
  ASSERT_TRUE(four.ok()) << four.status();
  EXPECT_NEAR(four->allreduce_s,
              one->allreduce_s + 0.05 + 0.03 * std::sqrt(2 * std::log(4.0)) + 0.01 * 3, 1e-12);
  // The two-instance term applies to exactly two instances.
  m2.cross_pair_s = 0.07;
  EXPECT_NEAR(AllReduceStepTime(m2, {4, 4}, {32.0})->allreduce_s,
              AllReduceStepTime(m, {4, 4}, {32.0})->allreduce_s + 0.07, 1e-12);
  for (const std::vector<int>& p : std::vector<std::vector<int>>{{4}, {4, 4, 4}, {1, 1, 1, 1}}) {
    EXPECT_DOUBLE_EQ(AllReduceStepTime(m2, p, {32.0})->allreduce_s,
                     AllReduceStepTime(m, p, {32.0})->allreduce_s)
        << p.size();
  }
  // The slowest instance sets the compute: the busiest one, or one with a larger local batch.
  auto uneven = AllReduceStepTime(m, {1, 3}, {32.0});
  ASSERT_TRUE(uneven.ok());
  EXPECT_DOUBLE_EQ(uneven->compute_s, 0.042 * 1.2);
  auto batches = AllReduceStepTime(m, {2, 2}, {std::vector<double>{64.0, 32.0}});
  ASSERT_TRUE(batches.ok());
  EXPECT_DOUBLE_EQ(batches->compute_s, 0.074 * 1.1);
}

TEST(AllReduceModel, MoreOverlapIsFaster) {
  AllReduceModel m = Model();
  m.overlap_gamma = 1;
  const double none = AllReduceStepTime(m, {4, 4}, {32.0})->step_s;
  m.overlap_gamma = 10;
  const double most = AllReduceStepTime(m, {4, 4}, {32.0})->step_s;
  EXPECT_LT(most, none);
  auto step = AllReduceStepTime(m, {4, 4}, {32.0});
  EXPECT_GE(most, std::max(step->compute_s, step->allreduce_s));
}

TEST(AllReduceModel, NoCrossInstanceTermsRefusesSeveralInstances) {
  AllReduceModel m = Model();
  m.cross_instance = false;
  EXPECT_TRUE(AllReduceStepTime(m, {4}, {32.0}).ok());
  auto two = AllReduceStepTime(m, {4, 4}, {32.0});
  EXPECT_EQ(two.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(two.status().message().find("a_n, b_s, c_k"), std::string::npos) << two.status();
}

TEST(AllReduceModel, BadInputNamesTheField) {
  EXPECT_NE(AllReduceStepTime(Model(), {4, 0}, {32.0}).status().message().find("placement[1] = 0"),
            std::string::npos);
  EXPECT_NE(AllReduceStepTime(Model(), {4}, {0.0}).status().message().find("local_batches[0]"),
            std::string::npos);
  AllReduceModel m = Model();
  m.overlap_gamma = 0.5;
  EXPECT_NE(m.Validate("allreduce[0]").message().find("overlap_gamma = 0.5"), std::string::npos);
  m = Model();
  m.intra_ring_s = std::nan("");
  EXPECT_FALSE(m.Validate("allreduce[0]").ok());
}

InstanceCatalog Catalog() {
  InstanceCatalog c;
  c.name = "test";
  c.types = {{"g4dn.xlarge", "T4", 1, 16, 0.2, 0.5, 10},
             {"g4dn.12xlarge", "T4", 4, 16, 1.2, 3.9, 10},
             {"p3.2xlarge", "V100", 1, 16, 1.0, 3.0, 10}};
  return c;
}

TEST(PredictAllReduce, TypesShareTheirGpuTypesModel) {
  WorkloadProfile p;
  p.name = "w";
  p.sync = SyncKind::kAllReduce;
  p.allreduce = {Model()};
  const InstanceCatalog c = Catalog();
  auto big = PredictAllReduce(p, c, Cluster{{0, 2, 0}}, Target::Iterations(1000), 32);
  ASSERT_TRUE(big.ok()) << big.status();
  const double step = AllReduceStepTime(Model(), {4, 4}, {32.0})->step_s;
  EXPECT_DOUBLE_EQ(big->estimate.expected_iteration_time_s, step);
  EXPECT_DOUBLE_EQ(big->estimate.time_s, 1000 * step);
  EXPECT_DOUBLE_EQ(big->estimate.wa_batch, 8 * 32);
  EXPECT_NEAR(big->estimate.cost_usd, 2 * 1.2 * 1000 * step / 3600, 1e-12);
  // Single-GPU instances of the same GPU type: eight instances of one GPU.
  auto small = PredictAllReduce(p, c, Cluster{{8, 0, 0}}, Target::Iterations(1000), 32);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_DOUBLE_EQ(small->estimate.expected_iteration_time_s,
                   AllReduceStepTime(Model(), {1, 1, 1, 1, 1, 1, 1, 1}, {32.0})->step_s);
  // Epochs: steps of the global batch.
  auto samples = PredictAllReduce(p, c, Cluster{{0, 2, 0}}, Target::Samples(256000), 32);
  ASSERT_TRUE(samples.ok());
  EXPECT_DOUBLE_EQ(samples->estimate.normalized_iterations, 1000);
}

TEST(PredictAllReduce, RefusesWhatItCannotPredict) {
  WorkloadProfile p;
  p.name = "w";
  p.sync = SyncKind::kAllReduce;
  const InstanceCatalog c = Catalog();
  auto none = PredictAllReduce(p, c, Cluster{{0, 1, 0}}, Target::Iterations(10), 32);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(none.status().message().find("profile import"), std::string::npos);
  p.allreduce = {Model()};
  auto v100 = PredictAllReduce(p, c, Cluster{{0, 1, 1}}, Target::Iterations(10), 32);
  EXPECT_EQ(v100.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(v100.status().message().find("V100"), std::string::npos) << v100.status();
  auto zero = PredictAllReduce(p, c, Cluster{{0, 1, 0}}, Target::Iterations(10), 0);
  EXPECT_NE(zero.status().message().find("local_batch = 0"), std::string::npos);
}

// A parameter-server prediction (`--sync ps`) of a workload profiled only from synchronous runs
// says that it has no parameter-server model and how to get one, not which of its terms is
// missing first.
TEST(PredictAllReduce, ParameterServerPredictionOfASynchronousOnlyProfileSaysWhatIsMissing) {
  WorkloadProfile p;
  p.name = "w";
  p.sync = SyncKind::kAllReduce;
  p.allreduce = {Model()};
  for (bool loss_target : {false, true}) {
    auto model = PerformanceModel::Create(p, Catalog(), {.require_loss_model = loss_target});
    EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition);
    const std::string message(model.status().message());
    EXPECT_NE(message.find("workload \"w\" has no parameter-server model"), std::string::npos)
        << message;
    EXPECT_NE(message.find("all-reduce models of T4"), std::string::npos) << message;
    EXPECT_NE(message.find("--sync allreduce"), std::string::npos) << message;
    EXPECT_NE(message.find("spotdnn profile import"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace spotdnn::predictor
