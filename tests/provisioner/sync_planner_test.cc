// The synchronous plan (provisioner/sync_planner.h) against every composition within the quotas.
#include "provisioner/sync_planner.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/allreduce_models.h"

namespace spotdnn::provisioner {
namespace {

using predictor::AllReduceModel;
using predictor::InstanceCatalog;
using predictor::InstanceType;
using predictor::Target;
using predictor::WorkloadProfile;

// Sometimes a type that cannot span instances; half the time two instances slower than three.
AllReduceModel RandomModel(std::mt19937& rng, const std::string& gpu_type) {
  return testing_models::RandomAllReduceModel(rng, gpu_type,
                                              {.cross_instance = 0.9, .cross_pair = 0.5});
}

TEST(SyncPlanner, ExactIsOptimalOnEverySmallCatalog) {
  std::mt19937 rng(2033);
  std::uniform_real_distribution<double> u(0, 1);
  int feasible = 0, accumulated = 0;
  for (int trial = 0; trial < 600; ++trial) {
    WorkloadProfile profile;
    profile.name = "w";
    profile.sync = predictor::SyncKind::kAllReduce;
    const int gpu_types = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int g = 0; g < gpu_types; ++g) {
      profile.allreduce.push_back(RandomModel(rng, std::string(1, static_cast<char>('A' + g))));
    }
    if (u(rng) < 0.5) profile.memory = predictor::MemoryModel{2 + 4 * u(rng), 0};
    InstanceCatalog catalog;
    catalog.name = "c";
    const int types = std::uniform_int_distribution<int>(2, 4)(rng);
    for (int t = 0; t < types; ++t) {
      InstanceType type;
      type.name = "t" + std::to_string(t);
      // Now and then a GPU type without a model: unusable, quota 0.
      int g = std::uniform_int_distribution<int>(0, gpu_types)(rng);
      if (t == 0 && g == gpu_types) g = 0;
      type.gpu_type = std::string(1, static_cast<char>('A' + g));
      const int gpus[] = {1, 2, 4};
      type.gpus = gpus[std::uniform_int_distribution<int>(0, 2)(rng)];
      type.gpu_memory_gib = 8 + 8 * std::uniform_int_distribution<int>(0, 3)(rng);
      type.spot_price_per_hour = (0.2 + u(rng)) * type.gpus;
      type.on_demand_price_per_hour = type.spot_price_per_hour * (2 + u(rng));
      type.quota = std::uniform_int_distribution<int>(0, 3)(rng);
      catalog.types.push_back(type);
    }
    const int global = std::uniform_int_distribution<int>(1, 400)(rng);
    auto planner = SyncPlanner::Create(profile, catalog, global);
    ASSERT_TRUE(planner.ok()) << planner.status();
    const Target target =
        u(rng) < 0.5 ? Target::Iterations(1000 + 9000 * u(rng)) : Target::Samples(1e6 * u(rng) + 1);
    PlanProblem problem = planner->DefaultProblem(target);
    problem.on_demand = u(rng) < 0.2;
    problem.overhead_s = u(rng) < 0.3 ? 60 * u(rng) : 0;
    if (u(rng) < 0.2) problem.max_workers = std::uniform_int_distribution<int>(1, 4)(rng);
    for (size_t k = 0; k < catalog.types.size(); ++k) {
      if (problem.max_counts[k] > 0 && u(rng) < 0.15) problem.min_counts[k] = 1;
    }
    // An SLO around what some cluster achieves: the all-at-quota cluster's time and cost.
    Candidate some;
    const bool scored = planner->Score(problem, problem.max_counts, some);
    problem.objective = u(rng) < 0.3 ? Objective::kMinTime : Objective::kMinCost;
    if (problem.objective == Objective::kMinCost) {
      if (scored && u(rng) < 0.7) problem.deadline_s = some.time_s * (0.5 + 2 * u(rng));
    } else {
      problem.budget_usd = scored ? some.cost_usd * (0.3 + 2 * u(rng)) : 1 + 10 * u(rng);
    }
    ASSERT_TRUE(planner->Validate(problem).ok()) << planner->Validate(problem);
    const PlanResult exact = planner->SolveExact(problem);
    auto all = planner->SolveExhaustive(problem);
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(exact.feasible, all->feasible) << "trial " << trial;
    if (!exact.feasible) continue;
    ++feasible;
    EXPECT_EQ(exact.best.counts, all->best.counts) << "trial " << trial;
    EXPECT_EQ(exact.best.cost_usd, all->best.cost_usd) << "trial " << trial;
    EXPECT_LE(exact.evaluated, all->evaluated);
    auto step = planner->types().Step(exact.best.counts, global);
    ASSERT_TRUE(step.ok());
    if (step->accumulation_steps > 1) ++accumulated;
  }
  // The cases exercise what they should: most have a plan, some accumulate gradients.
  EXPECT_GT(feasible, 300);
  EXPECT_GT(accumulated, 5);
}

// The same check with loss and metric targets through a convergence model, and with a global
// batch that scales (every rank at one local batch: more ranks, a larger global batch, fewer steps
// by the critical-batch law), where the bounds differ.
TEST(SyncPlanner, ExactIsOptimalWithTargetsAndAScalingGlobalBatch) {
  std::mt19937 rng(2034);
  std::uniform_real_distribution<double> u(0, 1);
  int feasible = 0, scaling_feasible = 0, scaling_mixed = 0, metric_feasible = 0;
  for (int trial = 0; trial < 600; ++trial) {
    WorkloadProfile profile;
    profile.name = "w";
    profile.sync = predictor::SyncKind::kAllReduce;
    const int gpu_types = std::uniform_int_distribution<int>(1, 3)(rng);
    for (int g = 0; g < gpu_types; ++g) {
      profile.allreduce.push_back(RandomModel(rng, std::string(1, static_cast<char>('A' + g))));
    }
    if (u(rng) < 0.5) profile.memory = predictor::MemoryModel{2 + 4 * u(rng), 0};
    // An accuracy curve; its critical batch anywhere from far below to far above the batches.
    predictor::ConvergenceModel accuracy;
    accuracy.metric = "accuracy";
    accuracy.higher_is_better = true;
    accuracy.floor = 0.05;
    accuracy.amplitude = 0.9;
    accuracy.scale = 500 + 3000 * u(rng);
    accuracy.noise_sd = accuracy.noise_sd_after = 0.02 * u(rng);
    accuracy.eval_interval_steps = 50;
    accuracy.reference_global_batch = std::uniform_int_distribution<int>(16, 1024)(rng);
    if (u(rng) < 0.9) accuracy.critical_batch = std::exp(std::log(10.0) + 7 * u(rng));
    profile.convergence = {accuracy};
    InstanceCatalog catalog;
    catalog.name = "c";
    const int types = std::uniform_int_distribution<int>(2, 4)(rng);
    for (int t = 0; t < types; ++t) {
      InstanceType type;
      type.name = "t" + std::to_string(t);
      int g = std::uniform_int_distribution<int>(0, gpu_types)(rng);
      if (t == 0 && g == gpu_types) g = 0;
      type.gpu_type = std::string(1, static_cast<char>('A' + g));
      const int gpus[] = {1, 2, 4};
      type.gpus = gpus[std::uniform_int_distribution<int>(0, 2)(rng)];
      type.gpu_memory_gib = 8 + 8 * std::uniform_int_distribution<int>(0, 3)(rng);
      type.spot_price_per_hour = (0.2 + u(rng)) * type.gpus;
      type.on_demand_price_per_hour = type.spot_price_per_hour * (2 + u(rng));
      type.quota = std::uniform_int_distribution<int>(0, 3)(rng);
      catalog.types.push_back(type);
    }
    const bool scaling = trial % 2 == 0;
    const int local = std::uniform_int_distribution<int>(1, 64)(rng);
    // A fixed global batch: the curve's own when it has no critical batch.
    const int global = accuracy.critical_batch ? std::uniform_int_distribution<int>(1, 400)(rng)
                                               : static_cast<int>(accuracy.reference_global_batch);
    auto planner = scaling ? SyncPlanner::CreateScaling(profile, catalog, local)
                           : SyncPlanner::Create(profile, catalog, global);
    ASSERT_TRUE(planner.ok()) << planner.status();
    const double pick = u(rng);
    const Target target = pick < 0.6   ? Target::Accuracy(0.8 + 0.12 * u(rng))
                          : pick < 0.8 ? Target::Samples(1e6 * u(rng) + 1)
                                       : Target::Iterations(1000 + 9000 * u(rng));
    PlanProblem problem = planner->DefaultProblem(target);
    if (scaling && target.is_metric() && !accuracy.critical_batch) {
      // A curve of one global batch cannot follow a batch that scales.
      EXPECT_EQ(planner->Validate(problem).code(), absl::StatusCode::kFailedPrecondition);
      continue;
    }
    problem.on_demand = u(rng) < 0.2;
    problem.overhead_s = u(rng) < 0.3 ? 60 * u(rng) : 0;
    if (u(rng) < 0.2) problem.max_workers = std::uniform_int_distribution<int>(1, 4)(rng);
    for (size_t k = 0; k < catalog.types.size(); ++k) {
      if (problem.max_counts[k] > 0 && u(rng) < 0.15) problem.min_counts[k] = 1;
    }
    Candidate some;
    const bool scored = planner->Score(problem, problem.max_counts, some);
    problem.objective = u(rng) < 0.3 ? Objective::kMinTime : Objective::kMinCost;
    if (problem.objective == Objective::kMinCost) {
      if (scored && u(rng) < 0.7) problem.deadline_s = some.time_s * (0.5 + 2 * u(rng));
    } else {
      problem.budget_usd = scored ? some.cost_usd * (0.3 + 2 * u(rng)) : 1 + 10 * u(rng);
    }
    ASSERT_TRUE(planner->Validate(problem).ok()) << planner->Validate(problem);
    const PlanResult exact = planner->SolveExact(problem);
    auto all = planner->SolveExhaustive(problem);
    ASSERT_TRUE(all.ok()) << all.status();
    ASSERT_EQ(exact.feasible, all->feasible) << "trial " << trial;
    if (!exact.feasible) continue;
    ++feasible;
    EXPECT_EQ(exact.best.counts, all->best.counts) << "trial " << trial;
    EXPECT_EQ(exact.best.cost_usd, all->best.cost_usd) << "trial " << trial;
    EXPECT_LE(exact.evaluated, all->evaluated);
    if (target.is_metric()) ++metric_feasible;
    if (scaling) {
      ++scaling_feasible;
      int types_used = 0, ranks = 0;
      for (size_t k = 0; k < catalog.types.size(); ++k) {
        types_used += exact.best.counts[k] > 0;
        ranks += exact.best.counts[k] * catalog.types[k].gpus;
      }
      if (types_used > 1) ++scaling_mixed;
      // The plan's global batch is its ranks' local batches.
      EXPECT_DOUBLE_EQ(exact.best.estimate.wa_batch, static_cast<double>(ranks) * local);
    }
  }
  // The cases exercise what they should: plans of both kinds, metric targets, mixed clusters.
  EXPECT_GT(feasible, 250);
  EXPECT_GT(scaling_feasible, 100);
  EXPECT_GT(metric_feasible, 100);
  EXPECT_GT(scaling_mixed, 10);
}

TEST(SyncPlanner, RefusesWhatItCannotPlan) {
  WorkloadProfile profile;
  profile.name = "w";
  std::mt19937 rng(1);
  InstanceCatalog catalog;
  catalog.name = "c";
  InstanceType t{.name = "t", .gpu_type = "A", .gpus = 1, .gpu_memory_gib = 16, .quota = 2};
  catalog.types = {t};
  EXPECT_EQ(SyncPlanner::Create(profile, catalog, 64).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no all-reduce model
  profile.allreduce = {RandomModel(rng, "A")};
  auto zero = SyncPlanner::Create(profile, catalog, 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("global_batch = 0"), std::string::npos);
  auto planner = SyncPlanner::Create(profile, catalog, 64);
  ASSERT_TRUE(planner.ok());
  PlanProblem loss = planner->DefaultProblem(Target::Loss(0.5));
  EXPECT_EQ(planner->Validate(loss).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace spotdnn::provisioner
