#include "provisioner/simulator.h"

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "predictor/allreduce.h"
#include "provisioner/replan.h"
#include "tests/testing/prototype_inputs.h"

namespace spotdnn::provisioner {
namespace {

using ::testing::HasSubstr;

// Two types: "a" (revocable in the tests) and "b", paper variant, no contention.
PerformanceModel TwoTypeModel(int quota_a, int quota_b) {
  predictor::InstanceCatalog c;
  c.name = "two";
  c.types = {{"a", "K80", 1, 12, 0.9, 2.0, quota_a}, {"b", "V100", 1, 16, 1.5, 3.0, quota_b}};
  c.parameter_server = {.instance_type = "ps",
                        .bandwidth_mb_per_s = 1000,
                        .spot_price_per_hour = 0.2,
                        .on_demand_price_per_hour = 0.2};
  c.pcie_bandwidth_mb_per_s = 10000;
  predictor::WorkloadProfile p;
  p.name = "w";
  p.parameter_size_mb = 10;
  p.required_bandwidth_mb_per_s = 200;
  p.compute = {{.instance_type = "a", .batch_per_gpu = 128, .compute_time_s = 0.5},
               {.instance_type = "b", .batch_per_gpu = 128, .compute_time_s = 0.3}};
  p.contention = predictor::ContentionModel{.a1 = 0, .b1 = 0};
  p.loss = predictor::LossModel{.g1 = 0, .g2 = 0, .g3 = 2000, .g4 = 1, .g5 = 0.5};
  return *PerformanceModel::Create(p, c);
}

RevocationModel Model(std::vector<LifetimeDistribution> types) {
  RevocationModel m;
  m.types = std::move(types);
  m.sources.resize(m.types.size());
  return m;
}

LifetimeDistribution Exp(double rate_per_hour) {
  return *LifetimeDistribution::Exponential(rate_per_hour);
}

// Every instance of the type lives exactly `seconds`.
LifetimeDistribution Fixed(double seconds) {
  return *LifetimeDistribution::KaplanMeier({{seconds, false}, {seconds, false}});
}

double PlanTime(const PerformanceModel& m, const PlanProblem& p, const std::vector<int>& counts) {
  Candidate c;
  EXPECT_TRUE(Score(m, p, counts, c));
  return c.time_s;
}

TEST(Simulator, OneExponentialInstanceMeetsTheDeadlineWithProbabilityExpMinusLambdaT) {
  // One instance of "a" and no room for another: the plan meets the deadline exactly when the
  // instance survives the whole job, e^(-lambda T); any revocation costs the takeover delay.
  const PerformanceModel m = TwoTypeModel(1, 0);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {1, 0};
  const double t = PlanTime(m, p, plan);
  p.deadline_s = t;
  const double rate_per_hour = std::log(2.0) / t * 3600;  // e^(-lambda T) = 1/2
  for (const double rate : {rate_per_hour, rate_per_hour / 4}) {
    auto sim = Simulator::Create(m, p, Model({Exp(rate), Exp(0)}),
                                 {.runs = 20000, .seed = 7, .takeover_delay_s = 30});
    ASSERT_TRUE(sim.ok()) << sim.status();
    auto r = (*sim)->Run(plan);
    ASSERT_TRUE(r.ok()) << r.status();
    const double want = std::exp(-rate / 3600 * t);
    const double se = std::sqrt(want * (1 - want) / r->runs);
    EXPECT_NEAR(r->p_meet_deadline, want, 4 * se) << "rate " << rate;
    EXPECT_NEAR(r->p_no_revocation, want, 4 * se);
    EXPECT_LE(r->p_meet_deadline_low, r->p_meet_deadline);
    EXPECT_GE(r->p_meet_deadline_high, r->p_meet_deadline);
    // Every run finishes (like-for-like replacements), the revoked ones late.
    EXPECT_EQ(r->unfinished, 0);
    EXPECT_DOUBLE_EQ(r->time_s.min, t);
    EXPECT_GT(r->time_s.max, t);
  }
}

TEST(Simulator, IndependentInstancesSurviveTogetherWithTheProductOfTheirSurvivals) {
  const PerformanceModel m = TwoTypeModel(3, 0);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {3, 0};
  const double t = PlanTime(m, p, plan);
  p.deadline_s = 2 * t;
  auto sim = Simulator::Create(m, p, Model({Exp(0.5), Exp(0)}), {.runs = 20000, .seed = 3});
  ASSERT_TRUE(sim.ok());
  auto r = (*sim)->Run(plan);
  ASSERT_TRUE(r.ok());
  const double want = std::exp(-3 * 0.5 / 3600 * t);
  EXPECT_NEAR(r->p_no_revocation, want, 4 * std::sqrt(want * (1 - want) / r->runs));
  // Expected revocations at least those of the first cluster over the plan's time.
  EXPECT_GE(r->revocations.mean, 3 * (1 - std::exp(-0.5 / 3600 * t)) * 0.9);
}

TEST(Simulator, KaplanMeierLifetimesGiveTheirSurvival) {
  const PerformanceModel m = TwoTypeModel(1, 0);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {1, 0};
  const double t = PlanTime(m, p, plan);
  p.deadline_s = t;
  // A third of the lifetimes end within the job, one more observation is censored inside it.
  auto km = LifetimeDistribution::KaplanMeier({{t / 4, false},
                                               {t / 2, true},
                                               {t / 3, false},
                                               {2 * t, false},
                                               {3 * t, true},
                                               {4 * t, false}});
  ASSERT_TRUE(km.ok());
  auto sim = Simulator::Create(m, p, Model({*km, Exp(0)}), {.runs = 20000, .seed = 11});
  ASSERT_TRUE(sim.ok());
  auto r = (*sim)->Run(plan);
  ASSERT_TRUE(r.ok());
  const double want = km->Survival(t);
  EXPECT_NEAR(want, 5.0 / 6 * 4.0 / 5, 1e-12);  // two revocations before t, six at risk
  EXPECT_NEAR(r->p_no_revocation, want, 4 * std::sqrt(want * (1 - want) / r->runs));
}

TEST(Simulator, NeverRevokedRunsAreThePlanExactly) {
  const PerformanceModel m = TwoTypeModel(4, 4);
  PlanProblem p = DefaultProblem(m, 1.0);
  p.overhead_s = 20;  // budgeted by the plan, not spent without revocations
  const std::vector<int> plan = {2, 3};
  Candidate c;
  ASSERT_TRUE(Score(m, p, plan, c));
  p.deadline_s = c.time_s;
  auto sim = Simulator::Create(m, p, Model({Exp(0), Exp(0)}), {.runs = 50, .seed = 1});
  ASSERT_TRUE(sim.ok());
  auto r = (*sim)->Run(plan);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->p_meet_deadline, 1);
  EXPECT_EQ(r->revocations.max, 0);
  EXPECT_NEAR(r->time_s.max, c.time_s - 20, 1e-9 * c.time_s);
  // Workers and the parameter server for the training time only.
  EXPECT_NEAR(r->cost_usd.mean, (c.time_s - 20) / 3600 * c.estimate.price_per_hour, 1e-9);
  EXPECT_DOUBLE_EQ(r->plan_time_s, c.time_s);
}

TEST(Simulator, SameSeedSameNumbersAnotherSeedOthers) {
  const PerformanceModel m = TwoTypeModel(4, 4);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {3, 1};
  p.deadline_s = PlanTime(m, p, plan) * 1.02;
  const RevocationModel rev = Model({Exp(1.5), Exp(0.3)});
  auto one = Simulator::Create(m, p, rev, {.runs = 3000, .seed = 5, .takeover_delay_s = 60});
  auto two = Simulator::Create(m, p, rev, {.runs = 3000, .seed = 5, .takeover_delay_s = 60});
  ASSERT_TRUE(one.ok() && two.ok());
  auto a = (*one)->Run(plan);
  auto b = (*two)->Run(plan);
  auto again = (*one)->Run(plan);  // with the re-plan cache warm
  auto other = (*one)->Run(plan, 3000, 6);
  ASSERT_TRUE(a.ok() && b.ok() && again.ok() && other.ok());
  for (const SimulationResult* x : {&*b, &*again}) {
    EXPECT_EQ(a->met_deadline, x->met_deadline);
    EXPECT_EQ(a->cost_usd.mean, x->cost_usd.mean);
    EXPECT_EQ(a->time_s.p90, x->time_s.p90);
    EXPECT_EQ(a->revocations.mean, x->revocations.mean);
  }
  EXPECT_GT(a->revocations.mean, 0.1);
  EXPECT_NE(a->cost_usd.mean, other->cost_usd.mean);
  EXPECT_LT(again->replans_solved, a->replans_solved);
}

// The policy, step by step: one revocation at a known time, and what the gateway would do.
TEST(Simulator, TakeoverFollowsTheReplanWithSurvivorsAndProgress) {
  const PerformanceModel m = TwoTypeModel(3, 3);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {1, 1};
  Candidate c;
  ASSERT_TRUE(Score(m, p, plan, c));
  p.deadline_s = c.time_s * 1.1;
  const double life = c.time_s * 0.6, delay = 25;
  auto sim = Simulator::Create(m, p, Model({Fixed(life), Exp(0)}),
                               {.runs = 5,
                                .seed = 1,
                                .takeover_delay_s = delay,
                                .lost_iterations_per_revocation = 1,
                                .replan_resolution = 0});
  ASSERT_TRUE(sim.ok());
  auto r = (*sim)->Run(plan);
  ASSERT_TRUE(r.ok()) << r.status();

  // What the gateway does at the notice (notice_s = 0: at the revocation).
  const double r0 = 1 / c.estimate.expected_iteration_time_s;
  const double done = r0 * life;
  PlanProblem replan_problem = p;
  replan_problem.min_counts = {0, 1};
  auto replan = Replan(m, replan_problem,
                       {.elapsed_s = life, .iterations_done = done, .cluster_before = plan});
  ASSERT_TRUE(replan.ok()) << replan.status();
  ASSERT_TRUE(replan->feasible);
  const double target = done + replan->plan.estimate.normalized_iterations;
  // Survivors alone during the delay (the revoked one lost its in-flight step), then the re-plan's
  // cluster. Takeovers of "a" live `life` from their launch, past the end here.
  auto rate = [&](std::vector<int> counts) {
    return 1 / m.Evaluate(counts, 1e300).expected_iteration_time_s;
  };
  double progress = done - 1 + rate({0, 1}) * delay;
  const double finish = life + delay + (target - progress) / rate(replan->plan.counts);
  ASSERT_LT(finish, 2 * life);
  EXPECT_NEAR(r->time_s.min, finish, 1e-6 * finish);
  EXPECT_NEAR(r->time_s.max, finish, 1e-6 * finish);
  EXPECT_EQ(r->revocations.mean, 1);
  // Cost: the revoked "a" until it went, the survivor and the takeovers to the end, the PS.
  const auto& t = m.catalog().types;
  double cost = t[0].spot_price_per_hour * life / 3600 + t[1].spot_price_per_hour * finish / 3600 +
                m.catalog().parameter_server.spot_price_per_hour * finish / 3600;
  for (size_t k = 0; k < 2; ++k) {
    cost += replan->to_launch[k] * t[k].spot_price_per_hour * (finish - life) / 3600;
  }
  EXPECT_NEAR(r->cost_usd.mean, cost, 1e-9 * cost);
}

TEST(Simulator, LikeForLikeWhenNoPlanCanMeetTheDeadline) {
  // A deadline the plan itself misses: every re-plan is infeasible, so the gateway launches one
  // instance of the revoked type and keeps the plan's target.
  const PerformanceModel m = TwoTypeModel(1, 1);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {1, 1};
  Candidate c;
  ASSERT_TRUE(Score(m, p, plan, c));
  const double train = c.time_s;
  p.deadline_s = train * 0.7;
  const double life = train * 0.6, delay = 40;
  auto sim = Simulator::Create(m, p, Model({Fixed(life), Exp(0)}),
                               {.runs = 3,
                                .seed = 1,
                                .takeover_delay_s = delay,
                                .lost_iterations_per_revocation = 0,
                                .replan_resolution = 0});
  ASSERT_TRUE(sim.ok());
  auto r = (*sim)->Run(plan);
  ASSERT_TRUE(r.ok());
  auto rate = [&](std::vector<int> counts) {
    return 1 / m.Evaluate(counts, 1e300).expected_iteration_time_s;
  };
  const double j0 = c.estimate.normalized_iterations;
  const double progress = rate(plan) * life + rate({0, 1}) * delay;
  const double finish = life + delay + (j0 - progress) / rate(plan);
  ASSERT_LT(finish, 2 * life);  // the replacement lives `life` from its launch
  EXPECT_NEAR(r->time_s.mean, finish, 1e-6 * finish);
  EXPECT_GT(finish, p.deadline_s);
  EXPECT_EQ(r->p_meet_deadline, 0);
  EXPECT_EQ(r->replans, 3u);
  EXPECT_EQ(r->replan_errors, 0);
}

TEST(Simulator, NoticeLetsTheTakeoverStartBeforeTheRevocation) {
  const PerformanceModel m = TwoTypeModel(2, 0);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {1, 0};
  const double t = PlanTime(m, p, plan);
  p.deadline_s = t;
  // With a notice longer than the takeover delay, nothing is lost but the in-flight step.
  auto late = Simulator::Create(m, p, Model({Fixed(t / 2), Exp(0)}),
                                {.runs = 2,
                                 .notice_s = 120,
                                 .takeover_delay_s = 60,
                                 .lost_iterations_per_revocation = 0,
                                 .replan_resolution = 0});
  auto early = Simulator::Create(m, p, Model({Fixed(t / 2), Exp(0)}),
                                 {.runs = 2,
                                  .notice_s = 0,
                                  .takeover_delay_s = 60,
                                  .lost_iterations_per_revocation = 0,
                                  .replan_resolution = 0});
  ASSERT_TRUE(late.ok() && early.ok());
  auto with_notice = (*late)->Run(plan);
  auto without = (*early)->Run(plan);
  ASSERT_TRUE(with_notice.ok() && without.ok());
  EXPECT_LT(with_notice->time_s.mean, without->time_s.mean);
}

// One revocation at `life` of the plan {1 a, 1 b}, a deadline no re-plan can meet (so the takeover
// is one "a", like for like), and the same trace for an ASP and a synchronous job.
TEST(Simulator, SynchronousJobRestartsFromTheCheckpointAndAgainWhenTheReplacementJoins) {
  const PerformanceModel m = TwoTypeModel(1, 1);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {1, 1};
  Candidate c;
  ASSERT_TRUE(Score(m, p, plan, c));
  const double train = c.time_s;
  p.deadline_s = train * 0.7;
  auto rate = [&](std::vector<int> counts) {
    return 1 / m.Evaluate(counts, 1e300).expected_iteration_time_s;
  };
  const double life = train * 0.6, j0 = c.estimate.normalized_iterations;
  const double r_plan = rate(plan), r_b = rate({0, 1});
  const double restart = 50, checkpoint_every = train * 0.07;
  const double lost_s = std::fmod(life, checkpoint_every);
  ASSERT_GT(lost_s, 1);
  // The ASP job: the survivor alone during the takeover delay, nothing redone.
  for (const double delay : {20.0, 90.0}) {  // the replacement ready before and after the restart
    SimulationOptions asp{.runs = 2,
                          .seed = 1,
                          .takeover_delay_s = delay,
                          .lost_iterations_per_revocation = 0,
                          .replan_resolution = 0};
    SimulationOptions synchronous = asp;
    synchronous.synchronous =
        SynchronousRestart{.restart_s = restart, .checkpoint_every_s = checkpoint_every};
    auto a = Simulator::Create(m, p, Model({Fixed(life), Exp(0)}), asp);
    auto s = Simulator::Create(m, p, Model({Fixed(life), Exp(0)}), synchronous);
    ASSERT_TRUE(a.ok() && s.ok());
    auto ra = (*a)->Run(plan);
    auto rs = (*s)->Run(plan);
    ASSERT_TRUE(ra.ok() && rs.ok()) << ra.status() << rs.status();

    const double asp_finish = life + delay + (j0 - r_plan * life - r_b * delay) / r_plan;
    EXPECT_NEAR(ra->time_s.mean, asp_finish, 1e-6 * asp_finish) << delay;
    EXPECT_FALSE(ra->synchronous);
    // The synchronous job: every rank stops at the revocation and resumes from the checkpoint
    // before it (lost_s of the plan's training redone) after the restart; the replacement joins
    // at a second restart when it is ready, which also redoes what the survivor trained alone
    // since the first (delay - restart, within one checkpoint interval). The finish is later than
    // without a revocation by the time redone, the delay and one restart.
    const double no_revocation = j0 / r_plan;
    const double sync_finish = no_revocation + lost_s + delay + restart;
    ASSERT_LT(sync_finish, 2 * life);  // the replacement lives `life` from its launch
    EXPECT_NEAR(rs->time_s.mean, sync_finish, 1e-6 * sync_finish) << delay;
    EXPECT_TRUE(rs->synchronous);
    EXPECT_EQ(rs->revocations.mean, 1);
    EXPECT_EQ(rs->restarts.mean, 2);
    const double alone_s = std::max(0.0, delay - restart);
    EXPECT_NEAR(rs->redone_s.mean, lost_s + alone_s, 1e-6 * train) << delay;
    EXPECT_NEAR(rs->redone_iterations.p50, r_plan * lost_s + r_b * alone_s, 1e-6 * j0) << delay;
    EXPECT_GT(rs->time_s.mean, ra->time_s.mean);
  }
}

TEST(Simulator, SynchronousJobWaitsBelowItsElasticMinimum) {
  // min_instances 2: the survivor alone does not train; the job resumes when the replacement
  // joins, from the checkpoint before the revocation.
  const PerformanceModel m = TwoTypeModel(1, 1);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {1, 1};
  Candidate c;
  ASSERT_TRUE(Score(m, p, plan, c));
  const double train = c.time_s;
  p.deadline_s = train * 0.7;
  const double life = train * 0.6, delay = 90, restart = 50, every = train * 0.07;
  auto sim = Simulator::Create(
      m, p, Model({Fixed(life), Exp(0)}),
      {.runs = 1,
       .takeover_delay_s = delay,
       .synchronous = SynchronousRestart{
           .restart_s = restart, .checkpoint_every_s = every, .min_instances = 2}});
  ASSERT_TRUE(sim.ok());
  auto r = (*sim)->Run(plan);
  ASSERT_TRUE(r.ok()) << r.status();
  const double finish = c.estimate.normalized_iterations * c.estimate.expected_iteration_time_s +
                        std::fmod(life, every) + delay + restart;
  EXPECT_NEAR(r->time_s.mean, finish, 1e-6 * finish);
  EXPECT_NEAR(r->redone_s.mean, std::fmod(life, every), 1e-6 * train);
}

// The training instances' speed is the all-reduce model's on them: with `local_batch` samples
// per GPU, or (0) with the profile's `global_batch` split by speed over them.
void ExpectSurvivorsAtTheAllReduceModelsSpeed(int local_batch, int global_batch) {
  predictor::InstanceCatalog cat;
  cat.name = "two";
  cat.types = {{"a", "K80", 1, 12, 0.9, 2.0, 1}, {"b", "V100", 1, 16, 1.5, 3.0, 1}};
  cat.parameter_server = {.instance_type = "ps",
                          .bandwidth_mb_per_s = 1000,
                          .spot_price_per_hour = 0.2,
                          .on_demand_price_per_hour = 0.2};
  cat.pcie_bandwidth_mb_per_s = 10000;
  predictor::WorkloadProfile w = TwoTypeModel(1, 1).profile();
  w.sync = predictor::SyncKind::kAllReduce;
  w.global_batch_size = global_batch;
  w.allreduce = {{.gpu_type = "K80",
                  .compute_fixed_s = 0.05,
                  .compute_per_sample_s = 0.004,
                  .cross_instance = true,
                  .cross_fixed_s = 0.1},
                 {.gpu_type = "V100",
                  .compute_fixed_s = 0.02,
                  .compute_per_sample_s = 0.001,
                  .cross_instance = true,
                  .cross_fixed_s = 0.1}};
  auto m = PerformanceModel::Create(w, cat);
  ASSERT_TRUE(m.ok()) << m.status();
  PlanProblem p = DefaultProblem(*m, predictor::Target::Iterations(20000));
  p.deadline_s = 10;  // no re-plan meets it: like for like (and the run goes on to 1000 x it)
  const std::vector<int> plan = {1, 1};
  auto step = [&](std::vector<int> counts) {
    auto pr = predictor::PredictAllReduce(w, cat, {.counts = counts},
                                          predictor::Target::Iterations(1), local_batch);
    EXPECT_TRUE(pr.ok()) << pr.status();
    return pr->estimate.expected_iteration_time_s;
  };
  const double t_plan = 20000 * step(plan);
  const double life = 0.6 * t_plan, delay = 90, restart = 50, every = 0.07 * t_plan;
  auto sim = Simulator::Create(*m, p, Model({Fixed(life), Exp(0)}),
                               {.runs = 1,
                                .takeover_delay_s = delay,
                                .synchronous = SynchronousRestart{.restart_s = restart,
                                                                  .checkpoint_every_s = every,
                                                                  .local_batch = local_batch},
                                .horizon_factor = 1000});
  ASSERT_TRUE(sim.ok()) << sim.status();
  auto r = (*sim)->Run(plan);
  ASSERT_TRUE(r.ok()) << r.status();
  const double alone = delay - restart;
  EXPECT_NEAR(r->redone_iterations.mean, std::fmod(life, every) / step(plan) + alone / step({0, 1}),
              1e-6 * 20000);
  const double finish = t_plan + std::fmod(life, every) + delay + restart;
  EXPECT_NEAR(r->time_s.mean, finish, 1e-6 * finish);
}

TEST(Simulator, SynchronousSurvivorsStepAtTheAllReduceModelsSpeed) {
  ExpectSurvivorsAtTheAllReduceModelsSpeed(32, 0);
}

TEST(Simulator, SynchronousSurvivorsSplitTheProfilesGlobalBatch) {
  ExpectSurvivorsAtTheAllReduceModelsSpeed(0, 96);
}

TEST(Simulator, RefusesBadInput) {
  const PerformanceModel m = TwoTypeModel(2, 2);
  PlanProblem p = DefaultProblem(m, 1.0);
  const RevocationModel rev = Model({Exp(1), Exp(1)});
  EXPECT_THAT(Simulator::Create(m, p, rev, {}).status().message(), HasSubstr("deadline"));
  p.deadline_s = 1000;
  EXPECT_THAT(Simulator::Create(m, p, rev, {.runs = 0}).status().message(),
              HasSubstr("simulation.runs = 0"));
  EXPECT_THAT(Simulator::Create(m, p, rev, {.notice_s = -1}).status().message(),
              HasSubstr("simulation.notice_s = -1"));
  EXPECT_THAT(Simulator::Create(m, p, rev, {.takeover_delay_s = NAN}).status().message(),
              HasSubstr("simulation.takeover_delay_s"));
  EXPECT_THAT(Simulator::Create(m, p, rev, {.replan_resolution = 0.5}).status().message(),
              HasSubstr("simulation.replan_resolution = 0.5"));
  EXPECT_THAT(Simulator::Create(m, p, rev, {.synchronous = SynchronousRestart{.restart_s = -5}})
                  .status()
                  .message(),
              HasSubstr("simulation.restart_s = -5"));
  EXPECT_THAT(
      Simulator::Create(m, p, rev, {.synchronous = SynchronousRestart{.checkpoint_every_s = 0}})
          .status()
          .message(),
      HasSubstr("simulation.checkpoint_every_s = 0"));
  EXPECT_THAT(Simulator::Create(m, p, rev, {.synchronous = SynchronousRestart{.min_instances = 0}})
                  .status()
                  .message(),
              HasSubstr("simulation.min_instances = 0"));
  EXPECT_THAT(Simulator::Create(m, p, Model({Exp(1)}), {}).status().message(),
              HasSubstr("revocation model has 1 types"));
  auto sim = Simulator::Create(m, p, rev, {.runs = 10});
  ASSERT_TRUE(sim.ok());
  EXPECT_THAT((*sim)->Run(std::vector<int>{3, 0}).status().message(),
              HasSubstr("plan count of a = 3"));
  EXPECT_THAT((*sim)->Run(std::vector<int>{0, 0}).status().message(), HasSubstr("empty"));
  EXPECT_THAT((*sim)->Run(std::vector<int>{1}).status().message(), HasSubstr("1 counts"));
}

TEST(Simulator, ResolutionRoundsTheReplanInputsTowardsSlack) {
  // The README's plan has no slack. Rounding the re-plans' clock up and progress down makes them
  // pick faster takeovers than the gateway would: fewer solves, and a probability biased up.
  const PerformanceModel m = PerformanceModel::Create(predictor::testing_inputs::PrototypeProfile(),
                                                      predictor::testing_inputs::PrototypeCatalog())
                                 .value();
  PlanProblem p = DefaultProblem(m, 0.9, 1800);
  const PlanResult plain = SolveExact(m, p);
  ASSERT_TRUE(plain.feasible);
  const RevocationModel rev = Model({Exp(0.4), Exp(0.2), Exp(0.3), Exp(0.3), Exp(0.4)});
  auto exact = Simulator::Create(m, p, rev, {.runs = 4000, .takeover_delay_s = 60});
  auto rounded = Simulator::Create(
      m, p, rev, {.runs = 4000, .takeover_delay_s = 60, .replan_resolution = 0.002});
  ASSERT_TRUE(exact.ok() && rounded.ok());
  auto a = (*exact)->Run(plain.best.counts);
  auto b = (*rounded)->Run(plain.best.counts);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT(a->revocations.mean, 0.1);
  EXPECT_GE(b->p_meet_deadline, a->p_meet_deadline);
  EXPECT_LT(b->replans_solved, a->replans_solved);
  // Exact inputs: every re-plan of a continuous lifetime is its own.
  EXPECT_EQ(a->replans_solved, a->replans);
}

// Re-plans with the same survivors share a search memo (continuous lifetimes make every re-plan
// a new search); the numbers are those of searching every re-plan from scratch, to the bit.
TEST(Simulator, ReusedSearchesGiveTheSameNumbersAsSearchesFromScratch) {
  const PerformanceModel m = PerformanceModel::Create(predictor::testing_inputs::PrototypeProfile(),
                                                      predictor::testing_inputs::PrototypeCatalog())
                                 .value();
  for (const double deadline : {1800.0, 2400.0}) {
    PlanProblem p = DefaultProblem(m, 0.9, deadline);
    const PlanResult plain = SolveExact(m, p);
    ASSERT_TRUE(plain.feasible);
    const RevocationModel rev = Model({Exp(0.8), Exp(0.5), Exp(0.6), Exp(0.6), Exp(0.8)});
    SimulationOptions o{.runs = 600, .seed = 17, .notice_s = 30, .takeover_delay_s = 60};
    auto memoized = Simulator::Create(m, p, rev, o);
    o.reuse_search = false;
    auto scratch = Simulator::Create(m, p, rev, o);
    ASSERT_TRUE(memoized.ok() && scratch.ok());
    auto a = (*memoized)->Run(plain.best.counts);
    auto b = (*scratch)->Run(plain.best.counts);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_GT(a->replans_solved, 200u) << "deadline " << deadline;
    EXPECT_EQ(a->replans, b->replans);
    EXPECT_EQ(a->replans_solved, b->replans_solved);
    EXPECT_EQ(a->replan_errors, b->replan_errors);
    EXPECT_EQ(a->met_deadline, b->met_deadline) << "deadline " << deadline;
    EXPECT_EQ(a->unfinished, b->unfinished);
    for (auto [x, y] : {std::pair{a->time_s, b->time_s}, std::pair{a->cost_usd, b->cost_usd},
                        std::pair{a->revocations, b->revocations}}) {
      EXPECT_EQ(x.mean, y.mean);
      EXPECT_EQ(x.p50, y.p50);
      EXPECT_EQ(x.p90, y.p90);
      EXPECT_EQ(x.max, y.max);
      EXPECT_EQ(x.stddev, y.stddev);
    }
  }
}

TEST(Simulator, BoundsTheReplansItSolves) {
  const PerformanceModel m = TwoTypeModel(3, 3);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {2, 2};
  p.deadline_s = PlanTime(m, p, plan);
  auto sim = Simulator::Create(m, p, Model({Exp(30), Exp(30)}),
                               {.runs = 1000, .takeover_delay_s = 30, .max_replan_solves = 50});
  ASSERT_TRUE(sim.ok());
  auto r = (*sim)->Run(plan);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("simulation.max_replan_solves = 50"));
}

// The problem's stop check ends a simulation: every few runs, and at a re-plan it stopped (which
// is not cached as a re-plan that found nothing); a check that never stops changes nothing.
TEST(Simulator, StopsWhenTheProblemsStopCheckSaysSo) {
  const PerformanceModel m = TwoTypeModel(3, 3);
  PlanProblem p = DefaultProblem(m, 1.0);
  const std::vector<int> plan = {2, 2};
  p.deadline_s = 1.5 * PlanTime(m, p, plan);
  const SimulationOptions o{.runs = 2000, .seed = 7, .takeover_delay_s = 30};
  auto plain = Simulator::Create(m, p, Model({Exp(2), Exp(0)}), o);
  ASSERT_TRUE(plain.ok());
  auto expected = (*plain)->Run(plan);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ASSERT_GT(expected->replans, 0u);

  int polls = 0;
  p.stop = [&] {
    ++polls;
    return absl::OkStatus();
  };
  auto checked = Simulator::Create(m, p, Model({Exp(2), Exp(0)}), o);
  ASSERT_TRUE(checked.ok());
  auto same = (*checked)->Run(plan);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->met_deadline, expected->met_deadline);
  EXPECT_EQ(same->replans, expected->replans);
  EXPECT_GE(polls, 2000 / 16);

  for (int stop_at : {1, 50}) {
    polls = 0;
    p.stop = [&]() -> absl::Status {
      return ++polls >= stop_at ? absl::DeadlineExceededError("past the deadline")
                                : absl::OkStatus();
    };
    auto stopped = Simulator::Create(m, p, Model({Exp(2), Exp(0)}), o);
    ASSERT_TRUE(stopped.ok());
    auto r = (*stopped)->Run(plan);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << stop_at;
    EXPECT_EQ(r.status().message(), "past the deadline");
  }
}

TEST(WilsonInterval, ContainsTheEstimateAndNarrowsWithRuns) {
  double lo = 0, hi = 0;
  WilsonInterval(90, 100, &lo, &hi);
  EXPECT_LT(lo, 0.9);
  EXPECT_GT(hi, 0.9);
  EXPECT_NEAR(lo, 0.8256, 1e-3);  // the textbook value for 90/100
  EXPECT_NEAR(hi, 0.9448, 1e-3);
  double lo2 = 0, hi2 = 0;
  WilsonInterval(9000, 10000, &lo2, &hi2);
  EXPECT_LT(hi2 - lo2, (hi - lo) / 5);
  WilsonInterval(10, 10, &lo, &hi);
  EXPECT_EQ(hi, 1);
  EXPECT_LT(lo, 1);
}

}  // namespace
}  // namespace spotdnn::provisioner
