// The synchronous plan (provisioner/sync_planner.h) against every composition within the quotas.
#include "provisioner/sync_planner.h"

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
