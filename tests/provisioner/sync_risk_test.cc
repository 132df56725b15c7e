// Synchronous (all-reduce) plans under revocations and beyond one plan (provisioner/plan_model.h):
// the exact frontier, the re-plan with the survivors, the simulator and the risk-aware search
// with a synchronous planner.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "provisioner/plan_model.h"
#include "provisioner/risk_planner.h"
#include "provisioner/simulator.h"
#include "provisioner/sync_planner.h"
#include "tests/testing/allreduce_models.h"
#include "tests/testing/prototype_inputs.h"

namespace spotdnn::provisioner {
namespace {

using predictor::InstanceCatalog;
using predictor::Target;
using predictor::WorkloadProfile;

// A catalog of 2-3 random types of 1-3 GPU types with quotas 0-3.
struct World {
  WorkloadProfile profile;
  InstanceCatalog catalog;
  int global_batch = 0;
};

World RandomWorld(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  World w;
  w.profile.name = "w";
  w.profile.sync = predictor::SyncKind::kAllReduce;
  const int gpu_types = std::uniform_int_distribution<int>(1, 3)(rng);
  for (int g = 0; g < gpu_types; ++g) {
    w.profile.allreduce.push_back(testing_models::RandomAllReduceModel(
        rng, std::string(1, static_cast<char>('A' + g)), {.cross_pair = 0.5}));
  }
  w.catalog.name = "c";
  const int types = std::uniform_int_distribution<int>(2, 3)(rng);
  for (int t = 0; t < types; ++t) {
    predictor::InstanceType type;
    type.name = "t" + std::to_string(t);
    type.gpu_type = std::string(1, static_cast<char>('A' + t % gpu_types));
    const int gpus[] = {1, 2, 4};
    type.gpus = gpus[std::uniform_int_distribution<int>(0, 2)(rng)];
    type.gpu_memory_gib = 16;
    type.spot_price_per_hour = (0.2 + u(rng)) * type.gpus;
    type.on_demand_price_per_hour = type.spot_price_per_hour * 3;
    type.quota = std::uniform_int_distribution<int>(0, 3)(rng);
    w.catalog.types.push_back(type);
  }
  w.global_batch = std::uniform_int_distribution<int>(16, 400)(rng);
  return w;
}

TEST(SyncFrontier, EveryPointIsTheExactOptimumAtItsDeadline) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<double> u(0, 1);
  int points = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const World w = RandomWorld(rng);
    auto planner = SyncPlanner::Create(w.profile, w.catalog, w.global_batch);
    ASSERT_TRUE(planner.ok()) << planner.status();
    PlanProblem problem = planner->DefaultProblem(Target::Iterations(1000 + 9000 * u(rng)));
    Candidate all_in;
    if (u(rng) < 0.5 && planner->Score(problem, problem.max_counts, all_in)) {
      problem.deadline_s = all_in.time_s * (1 + 2 * u(rng));  // bounds the frontier
    }
    const SyncPlanModel model(*planner);
    uint64_t evaluated = 0;
    auto exact = model.Frontier(problem, Strategy::kExact, kDefaultExhaustiveLimit, &evaluated);
    ASSERT_TRUE(exact.ok()) << exact.status();
    auto every = model.Frontier(problem, Strategy::kExhaustive, kDefaultExhaustiveLimit, nullptr);
    ASSERT_TRUE(every.ok()) << every.status();
    // The same plans as enumerating every composition, fastest first.
    ASSERT_EQ(exact->size(), every->size()) << "trial " << trial;
    for (size_t i = 0; i < exact->size(); ++i) {
      EXPECT_EQ((*exact)[i].time_s, (*every)[i].time_s) << "trial " << trial << " point " << i;
      EXPECT_EQ((*exact)[i].cost_usd, (*every)[i].cost_usd) << "trial " << trial;
      if (i > 0) {
        EXPECT_GT((*exact)[i].time_s, (*exact)[i - 1].time_s);
        EXPECT_LT((*exact)[i].cost_usd, (*exact)[i - 1].cost_usd);
      }
      // Each point is the cheapest plan by its own time: the brute force at that deadline.
      PlanProblem at = problem;
      at.deadline_s = (*exact)[i].time_s;
      auto best = planner->SolveExhaustive(at);
      ASSERT_TRUE(best.ok());
      ASSERT_TRUE(best->feasible);
      EXPECT_EQ(best->best.cost_usd, (*exact)[i].cost_usd) << "trial " << trial;
      EXPECT_EQ(best->best.counts, (*exact)[i].counts) << "trial " << trial;
      ++points;
    }
  }
  EXPECT_GT(points, 150);  // the trials hold frontiers of several points
}

TEST(SyncReplan, KeepsTheSurvivorsAndPlansTheStepsLeft) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  int feasible = 0;
  for (int trial = 0; trial < 100; ++trial) {
    const World w = RandomWorld(rng);
    auto planner = SyncPlanner::Create(w.profile, w.catalog, w.global_batch);
    ASSERT_TRUE(planner.ok());
    const bool samples = u(rng) < 0.5;
    const double amount = samples ? 1e6 : 5000;
    PlanProblem problem =
        planner->DefaultProblem(samples ? Target::Samples(amount) : Target::Iterations(amount));
    Candidate all_in;
    if (!planner->Score(problem, problem.max_counts, all_in)) continue;
    problem.deadline_s = all_in.time_s * (1 + u(rng));
    // Survivors: some of the quota of each type.
    std::vector<int> survivors(problem.max_counts.size());
    for (size_t k = 0; k < survivors.size(); ++k) {
      survivors[k] = std::uniform_int_distribution<int>(0, problem.max_counts[k])(rng);
    }
    problem.min_counts = survivors;
    const double steps = samples ? amount / w.global_batch : amount;
    const JobProgress progress{.elapsed_s = 0.3 * problem.deadline_s,
                               .iterations_done = 0.4 * steps};
    const SyncPlanModel model(*planner);
    auto r = model.Replan(problem, progress, Strategy::kExact, kDefaultExhaustiveLimit, true);
    ASSERT_TRUE(r.ok()) << r.status();
    // The reference: the rest of the job, every composition that keeps the survivors.
    PlanProblem rest = problem;
    rest.target_amount = amount - (samples ? 0.4 * steps * w.global_batch : 0.4 * steps);
    rest.deadline_s = 0.7 * problem.deadline_s;
    auto reference = planner->SolveExhaustive(rest);
    ASSERT_TRUE(reference.ok());
    EXPECT_NEAR(r->remaining_amount, rest.target_amount, 1e-9 * amount);
    ASSERT_EQ(r->feasible, reference->feasible) << "trial " << trial;
    if (!r->feasible) {
      EXPECT_TRUE(std::isfinite(r->best_finish_s) || survivors == std::vector<int>(3, 0));
      continue;
    }
    ++feasible;
    EXPECT_EQ(r->plan.counts, reference->best.counts) << "trial " << trial;
    for (size_t k = 0; k < survivors.size(); ++k) {
      EXPECT_GE(r->plan.counts[k], survivors[k]);
      EXPECT_EQ(r->to_launch[k], r->plan.counts[k] - survivors[k]);
    }
  }
  EXPECT_GT(feasible, 30);
  // Nothing left, or a loss given for a synchronous job: refused.
  const World w = RandomWorld(rng);
  auto planner = SyncPlanner::Create(w.profile, w.catalog, w.global_batch);
  ASSERT_TRUE(planner.ok());
  const PlanProblem problem = planner->DefaultProblem(Target::Iterations(100), 1e6);
  EXPECT_EQ(SyncReplan(*planner, problem, {.iterations_done = 100}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SyncReplan(*planner, problem, {.current_loss = 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The prototype's parameter-server ResNet-110, profiled synchronously too: all-reduce models of
// its T4, M60 and K80 GPUs, the K80 slowest.
WorkloadProfile BothWays() {
  WorkloadProfile p = predictor::testing_inputs::PrototypeProfile();
  p.allreduce = {testing_models::PlainAllReduceModel("T4", 5e-4),
                 testing_models::PlainAllReduceModel("M60", 8e-4),
                 testing_models::PlainAllReduceModel("K80", 1.2e-3)};
  return p;
}

RevocationModel EveryType(const InstanceCatalog& catalog, double rate_per_hour) {
  RevocationModel m;
  for (size_t k = 0; k < catalog.types.size(); ++k) {
    m.types.push_back(*LifetimeDistribution::Exponential(rate_per_hour));
    m.sources.push_back("test");
  }
  return m;
}

TEST(SyncSimulation, TheSameLifetimesCostASyncPlanMoreThanAnAspPlanOfTheSameCluster) {
  const InstanceCatalog catalog = predictor::testing_inputs::PrototypeCatalog();
  const WorkloadProfile profile = BothWays();
  auto ps = PerformanceModel::Create(profile, catalog);
  ASSERT_TRUE(ps.ok()) << ps.status();
  auto planner = SyncPlanner::Create(profile, catalog, 512);
  ASSERT_TRUE(planner.ok()) << planner.status();
  const SyncPlanModel sync(*planner);
  const std::vector<int> cluster = {0, 3, 2, 0, 0};  // g4dn.4xlarge=3, g3.8xlarge=2

  // Each job takes an hour on the cluster without revocations, with a deadline 20% later: the
  // same lifetimes (seed, cluster and rates) hit both the same way in time.
  auto hour_of = [&](const PlanModel& m, PlanProblem p) {
    Candidate one;
    EXPECT_TRUE(m.Score(p, cluster, one));
    p.target_amount = 3600 / one.time_s;
    EXPECT_TRUE(m.Score(p, cluster, one));
    EXPECT_NEAR(one.time_s, 3600, 60);
    p.deadline_s = 1.2 * one.time_s;
    return p;
  };
  const PlanProblem asp_problem =
      hour_of(ParameterServerPlanModel(*ps), DefaultProblem(*ps, Target::Iterations(1)));
  const PlanProblem sync_problem = hour_of(sync, planner->DefaultProblem(Target::Iterations(1)));
  const RevocationModel lifetimes = EveryType(catalog, 0.1);  // 0.1/h each: ~0.5 per job
  SimulationOptions options{.runs = 2000, .seed = 11, .takeover_delay_s = 120};
  auto asp = Simulator::Create(*ps, asp_problem, lifetimes, options);
  ASSERT_TRUE(asp.ok()) << asp.status();
  options.synchronous = SynchronousRestart{.restart_s = 180, .checkpoint_every_s = 1200};
  auto synchronous = Simulator::Create(sync, sync_problem, lifetimes, options);
  ASSERT_TRUE(synchronous.ok()) << synchronous.status();
  auto a = (*asp)->Run(cluster);
  auto s = (*synchronous)->Run(cluster);
  ASSERT_TRUE(a.ok() && s.ok()) << a.status() << s.status();
  // The ASP job loses a revoked worker's share of the speed until its takeover trains; the
  // synchronous one stops every rank twice (the revocation and the join) and redoes its work
  // since the checkpoint: up to 2 x 3 + 20 minutes of the 12 minutes' slack.
  EXPECT_FALSE(a->synchronous);
  EXPECT_TRUE(s->synchronous);
  EXPECT_GT(s->revocations.mean, 0.2);
  EXPECT_GT(s->restarts.mean, s->revocations.mean);
  EXPECT_GT(s->redone_s.mean, 0);
  EXPECT_LT(s->p_meet_deadline_high, a->p_meet_deadline_low)
      << "sync " << s->p_meet_deadline << " asp " << a->p_meet_deadline;
  // A plan that cannot be revoked meets it either way.
  EXPECT_GT(a->p_meet_deadline, s->p_no_revocation);
}

TEST(SyncRiskPlan, CostlyRestartsBuyABiggerSaferCluster) {
  const InstanceCatalog catalog = predictor::testing_inputs::PrototypeCatalog();
  auto planner = SyncPlanner::Create(BothWays(), catalog, 512);
  ASSERT_TRUE(planner.ok()) << planner.status();
  const SyncPlanModel sync(*planner);
  // A deadline of 1.5 x the fastest plan's time, for two hours of the fastest plan's steps.
  PlanProblem fastest = planner->DefaultProblem(Target::Iterations(1));
  fastest.objective = Objective::kMinTime;
  const PlanResult quick = planner->SolveExact(fastest);
  ASSERT_TRUE(quick.feasible);
  PlanProblem problem = planner->DefaultProblem(Target::Iterations(7200 / quick.best.time_s));
  problem.deadline_s = 1.5 * 7200;
  const RevocationModel lifetimes = EveryType(catalog, 0.1);
  const SimulationOptions options{
      .runs = 400,
      .seed = 3,
      .takeover_delay_s = 120,
      .synchronous = SynchronousRestart{.restart_s = 300, .checkpoint_every_s = 1800}};
  const RiskOptions risk{.confidence = 0.8, .screening_runs = 200, .max_candidates = 24};
  auto r = PlanWithConfidence(sync, problem, lifetimes, options, risk);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->plain_feasible);
  ASSERT_TRUE(r->feasible) << "most reliable " << r->most_reliable_risk.p_meet_deadline;
  EXPECT_TRUE(r->risk.synchronous);
  // The plain plan spends the deadline; a restart of 5 minutes and up to 30 redone sink it.
  EXPECT_LT(r->plain_risk.p_meet_deadline, 0.8);
  EXPECT_GE(r->risk.p_meet_deadline, 0.8);
  // The risk-aware one is faster (more slack for the restarts): more, or faster, instances.
  EXPECT_NE(r->plan.counts, r->plain.counts);
  EXPECT_LT(r->plan.time_s, r->plain.time_s);
  EXPECT_GT(r->plan.estimate.price_per_hour, r->plain.estimate.price_per_hour);

  // With restarts that cost nothing the plain plan itself is safer.
  SimulationOptions cheap = options;
  cheap.synchronous = SynchronousRestart{.restart_s = 0, .checkpoint_every_s = 60};
  auto cheap_risk = PlanWithConfidence(sync, problem, lifetimes, cheap, risk);
  ASSERT_TRUE(cheap_risk.ok()) << cheap_risk.status();
  EXPECT_GT(cheap_risk->plain_risk.p_meet_deadline, r->plain_risk.p_meet_deadline);
}

}  // namespace
}  // namespace spotdnn::provisioner
