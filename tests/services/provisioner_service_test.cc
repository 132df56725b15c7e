// Drives Plan, Replan and Frontier of the provisioner service over 127.0.0.1:0.
#include "services/provisioner/provisioner_service.h"

#include <functional>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/plan_model.h"
#include "provisioner/sync_planner.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "tests/testing/sync_workload.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class ProvisionerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<ProvisionerServiceImpl>(
        std::make_shared<DataRegistry>(DataRegistry::WithBuiltins()));
    auto started = StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    stub_ = pb::Provisioner::NewStub(MakeChannel("127.0.0.1:" + std::to_string(started->port)));
  }
  void TearDown() override { server_->Shutdown(); }

  static pb::PlanRequest Request(double loss, double deadline) {
    pb::PlanRequest r;
    r.mutable_workload()->set_name("resnet110");
    r.mutable_catalog()->set_name("aws-spotdnn-prototype");
    r.mutable_slo()->set_target_loss(loss);
    r.mutable_slo()->set_deadline_s(deadline);
    return r;
  }

  static int Count(const pb::Cluster& c, const std::string& type) {
    for (const auto& i : c.instances()) {
      if (i.instance_type() == type) return i.count();
    }
    return 0;
  }

  grpc::Status Plan(const pb::PlanRequest& r, pb::PlanResponse* out) {
    grpc::ClientContext context;
    return stub_->Plan(&context, r, out);
  }

  std::unique_ptr<ProvisionerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pb::Provisioner::Stub> stub_;
};

TEST_F(ProvisionerServiceTest, PlanFindsTheOptimumAndTheBaselines) {
  pb::PlanRequest r = Request(0.9, 1800);
  r.mutable_options()->set_include_baselines(true);
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(r, &response).ok());
  const pb::Plan& p = response.plan();
  ASSERT_TRUE(p.feasible());
  EXPECT_EQ(Count(p.cluster(), "p2.xlarge"), 2);
  EXPECT_EQ(Count(p.cluster(), "g4dn.4xlarge"), 1);
  EXPECT_EQ(Count(p.cluster(), "g3.8xlarge"), 3);
  EXPECT_NEAR(p.cost_usd(), 2.119135, 1e-6);
  EXPECT_LE(p.time_s(), 1800);
  EXPECT_EQ(p.strategy(), pb::PLAN_STRATEGY_EXACT);
  EXPECT_EQ(p.prediction().workers_size(), 3);
  EXPECT_GT(p.on_demand_cost_usd(), p.cost_usd());
  EXPECT_TRUE(response.spotdnn_baseline().feasible());
  EXPECT_NEAR(response.spotdnn_baseline().cost_usd(), 2.2028, 1e-3);
  EXPECT_FALSE(response.homogeneous_baseline().feasible());
}

TEST_F(ProvisionerServiceTest, PlansAndReplansIterationAndEpochTargets) {
  pb::PlanRequest r;
  r.mutable_workload()->set_name("resnet32-cifar10-gce");
  r.mutable_catalog()->set_name("gce-icac-2019");
  r.mutable_slo()->set_target_iterations(64000);
  r.mutable_slo()->set_deadline_s(2400);
  pb::PlanResponse plan;
  ASSERT_TRUE(Plan(r, &plan).ok());
  ASSERT_TRUE(plan.plan().feasible()) << plan.plan().reason();
  EXPECT_LE(plan.plan().time_s(), 2400);
  EXPECT_EQ(plan.plan().prediction().normalized_iterations(), 64000);
  EXPECT_EQ(plan.plan().prediction().target_iterations(), 64000);
  // With the exhaustive strategy: the same plan.
  r.mutable_options()->set_strategy(pb::PLAN_STRATEGY_EXHAUSTIVE);
  pb::PlanResponse exhaustive;
  ASSERT_TRUE(Plan(r, &exhaustive).ok());
  EXPECT_NEAR(exhaustive.plan().cost_usd(), plan.plan().cost_usd(), 1e-9);
  // An epochs target without its dataset size names the field.
  r.mutable_slo()->set_target_iterations(0);
  r.mutable_slo()->set_target_epochs(100);
  pb::PlanResponse bad;
  const grpc::Status s = Plan(r, &bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("slo.dataset_size is required"));
  // Re-planning an iterations target plans what is left.
  pb::ReplanRequest replan;
  *replan.mutable_workload() = r.workload();
  *replan.mutable_catalog() = r.catalog();
  replan.mutable_slo()->set_target_iterations(64000);
  replan.mutable_slo()->set_deadline_s(2400);
  replan.mutable_progress()->set_normalized_iterations_done(16000);
  replan.mutable_progress()->set_elapsed_s(600);
  *replan.mutable_progress()->mutable_cluster_before() = plan.plan().cluster();
  pb::ReplanResponse replanned;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->Replan(&context, replan, &replanned).ok());
  ASSERT_TRUE(replanned.plan().feasible()) << replanned.plan().reason();
  EXPECT_EQ(replanned.plan().prediction().normalized_iterations(), 48000);
  EXPECT_LE(replanned.plan().time_s(), 1800);
}

TEST_F(ProvisionerServiceTest, StrategiesAndBudgetMode) {
  pb::PlanRequest r = Request(1.2, 900);
  r.mutable_options()->set_strategy(pb::PLAN_STRATEGY_SPOTDNN);
  pb::PlanResponse heuristic;
  ASSERT_TRUE(Plan(r, &heuristic).ok());
  EXPECT_NEAR(heuristic.plan().cost_usd(), 1.65, 0.005);
  r.mutable_options()->set_strategy(pb::PLAN_STRATEGY_EXHAUSTIVE);
  pb::PlanResponse exhaustive;
  ASSERT_TRUE(Plan(r, &exhaustive).ok());
  EXPECT_NEAR(exhaustive.plan().cost_usd(), 1.491196, 1e-6);
  r.mutable_options()->set_exhaustive_limit(10);
  pb::PlanResponse refused;
  const grpc::Status s = Plan(r, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("raise the limit"));

  pb::PlanRequest budget = Request(0.9, 0);
  budget.set_mode(pb::PLAN_MODE_BUDGET);
  budget.mutable_slo()->set_budget_usd(2.5);
  pb::PlanResponse fastest;
  ASSERT_TRUE(Plan(budget, &fastest).ok());
  ASSERT_TRUE(fastest.plan().feasible());
  EXPECT_LE(fastest.plan().cost_usd(), 2.5);
}

TEST_F(ProvisionerServiceTest, InfeasibleIsAnAnswerWithTheFastestTime) {
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(Request(0.7, 300), &response).ok());
  EXPECT_FALSE(response.plan().feasible());
  EXPECT_THAT(response.plan().reason(), HasSubstr("fastest"));
  EXPECT_GT(response.fastest_time_s(), 300);
  EXPECT_GT(response.fastest_cost_usd(), 0);
}

TEST_F(ProvisionerServiceTest, BadInputIsInvalidArgumentNamingTheField) {
  auto expect = [&](const pb::PlanRequest& r, const std::string& text) {
    pb::PlanResponse response;
    const grpc::Status s = Plan(r, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(text));
  };
  expect(Request(0.4, 1800), "slo.target_loss = 0.4");
  expect(Request(0.9, -1), "slo.deadline_s = -1");
  pb::PlanRequest r = Request(0.9, 1800);
  auto* q = r.mutable_options()->add_quota_overrides();
  q->set_instance_type("x9.huge");
  q->set_count(2);
  expect(r, "options.quota_overrides[0].instance_type = \"x9.huge\"");
  r = Request(0.9, 1800);
  auto* e = r.mutable_options()->mutable_existing()->add_instances();
  e->set_instance_type("p2.xlarge");
  e->set_count(-1);
  expect(r, "options.existing.instances[0].count = -1");
  r = Request(0.9, 1800);
  r.mutable_options()->set_bandwidth_margin(1.5);
  expect(r, "options.bandwidth_margin = 1.5");
  r = Request(0.9, 1800);
  r.clear_workload();
  expect(r, "workload");
}

// A metric target the profile has no convergence model of is FAILED_PRECONDITION, as the
// predictor answers it, for Plan and Frontier alike (not an infeasible plan).
TEST_F(ProvisionerServiceTest, AMetricWithoutAConvergenceModelIsAFailedPrecondition) {
  pb::PlanRequest r = Request(0, 7200);
  r.mutable_workload()->set_name("resnet32-cifar10-gce");
  r.mutable_catalog()->set_name("gce-icac-2019");
  pb::MetricTarget* target = r.mutable_slo()->mutable_target_metric();
  target->set_metric("top5");
  target->set_direction(pb::MetricTarget::DIRECTION_AT_LEAST);
  target->set_value(0.9);
  pb::PlanResponse response;
  const grpc::Status s = Plan(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("no convergence model of top5 >= 0.9"));
  EXPECT_THAT(s.error_message(), HasSubstr("resnet32-cifar10-gce"));
  pb::FrontierRequest f;
  *f.mutable_workload() = r.workload();
  *f.mutable_catalog() = r.catalog();
  *f.mutable_slo() = r.slo();
  pb::FrontierResponse front;
  grpc::ClientContext context;
  EXPECT_EQ(stub_->Frontier(&context, f, &front).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(ProvisionerServiceTest, ExcludedTypesAreNamed) {
  pb::PlanRequest r = Request(0.9, 3600);
  r.mutable_catalog()->set_name("aws-paper-2023");
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(r, &response).ok());
  ASSERT_EQ(response.plan().excluded_types_size(), 3);  // p3.2xlarge, g4dn.12xlarge, g3.4xlarge
  EXPECT_THAT(response.plan().excluded_types(0), HasSubstr("p3.2xlarge"));
}

TEST_F(ProvisionerServiceTest, FrontierAndReplanOfASynchronousWorkloadUseTheSyncPlanner) {
  const pb::WorkloadProfile profile = testing_util::SynchronousResnet("resnet110-both");
  auto catalog = DataRegistry::WithBuiltins().ResolveCatalog("aws-spotdnn-prototype");
  ASSERT_TRUE(catalog.ok());
  const predictor::InstanceCatalog domain_catalog = ToDomain(*catalog);
  auto planner = provisioner::SyncPlanner::Create(ToDomain(profile), domain_catalog, 512);
  ASSERT_TRUE(planner.ok()) << planner.status();
  auto index = [&](const pb::Cluster& c) {
    std::vector<int> counts(domain_catalog.types.size(), 0);
    for (const auto& i : c.instances())
      counts[domain_catalog.IndexOf(i.instance_type())] = i.count();
    return counts;
  };

  // The frontier: every point the synchronous optimum at its own time.
  pb::FrontierRequest f;
  *f.mutable_workload()->mutable_profile() = profile;
  f.mutable_catalog()->set_name("aws-spotdnn-prototype");
  f.mutable_slo()->set_target_iterations(2000);
  pb::FrontierResponse front;
  grpc::ClientContext context;
  const grpc::Status status = stub_->Frontier(&context, f, &front);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(front.plans_size(), 3);
  for (const pb::Plan& p : front.plans()) {
    EXPECT_GE(p.prediction().accumulation_steps(), 1);  // a synchronous plan's prediction
    EXPECT_EQ(p.prediction().wa_batch(), 512);
    provisioner::PlanProblem at =
        planner->DefaultProblem(predictor::Target::Iterations(2000), p.time_s());
    const provisioner::PlanResult best = planner->SolveExact(at);
    ASSERT_TRUE(best.feasible);
    EXPECT_EQ(index(p.cluster()), best.best.counts);
    EXPECT_NEAR(p.cost_usd(), best.best.cost_usd, 1e-9 * best.best.cost_usd);
  }

  // A re-plan keeps the survivors and plans the steps left with the synchronous planner.
  const double deadline = 1.5 * front.plans(0).time_s();
  pb::ReplanRequest r;
  *r.mutable_workload()->mutable_profile() = profile;
  r.mutable_catalog()->set_name("aws-spotdnn-prototype");
  r.mutable_slo()->set_target_iterations(2000);
  r.mutable_slo()->set_deadline_s(deadline);
  r.mutable_progress()->set_normalized_iterations_done(500);
  r.mutable_progress()->set_elapsed_s(0.2 * deadline);
  auto* survivor = r.mutable_survivors()->add_instances();
  survivor->set_instance_type("g4dn.4xlarge");
  survivor->set_count(2);
  pb::ReplanResponse replanned;
  grpc::ClientContext context2;
  const grpc::Status replan_status = stub_->Replan(&context2, r, &replanned);
  ASSERT_TRUE(replan_status.ok()) << replan_status.error_message();
  ASSERT_TRUE(replanned.plan().feasible()) << replanned.plan().reason();
  EXPECT_GE(replanned.plan().prediction().accumulation_steps(), 1);
  EXPECT_EQ(replanned.plan().prediction().normalized_iterations(), 1500);
  EXPECT_GE(Count(replanned.plan().cluster(), "g4dn.4xlarge"), 2);
  provisioner::PlanProblem rest =
      planner->DefaultProblem(predictor::Target::Iterations(2000), deadline);
  rest.min_counts[domain_catalog.IndexOf("g4dn.4xlarge")] = 2;
  auto direct = provisioner::SyncReplan(*planner, rest,
                                        {.elapsed_s = 0.2 * deadline, .iterations_done = 500});
  ASSERT_TRUE(direct.ok()) << direct.status();
  ASSERT_TRUE(direct->feasible);
  EXPECT_EQ(index(replanned.plan().cluster()), direct->plan.counts);
  EXPECT_NEAR(replanned.remaining_time_s(), 0.8 * deadline, 1e-9 * deadline);
}

TEST_F(ProvisionerServiceTest, ReplanLaunchesTakeoverInstances) {
  pb::ReplanRequest r;
  r.mutable_workload()->set_name("resnet110");
  r.mutable_catalog()->set_name("aws-spotdnn-prototype");
  r.mutable_slo()->set_target_loss(0.9);
  r.mutable_slo()->set_deadline_s(1800);
  auto add = [](pb::Cluster* c, const char* type, int n) {
    auto* i = c->add_instances();
    i->set_instance_type(type);
    i->set_count(n);
  };
  add(r.mutable_progress()->mutable_cluster_before(), "p2.xlarge", 2);
  add(r.mutable_progress()->mutable_cluster_before(), "g4dn.4xlarge", 1);
  add(r.mutable_progress()->mutable_cluster_before(), "g3.8xlarge", 3);
  r.mutable_progress()->set_normalized_iterations_done(4000);
  r.mutable_progress()->set_elapsed_s(600);
  add(r.mutable_survivors(), "p2.xlarge", 2);
  add(r.mutable_survivors(), "g3.8xlarge", 2);
  r.mutable_options()->set_revocation_overhead_s(30);
  pb::ReplanResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->Replan(&context, r, &response).ok());
  ASSERT_TRUE(response.plan().feasible()) << response.plan().reason();
  EXPECT_NEAR(response.remaining_time_s(), 1200, 1e-9);
  EXPECT_LE(response.plan().time_s(), 1200);
  EXPECT_GE(Count(response.plan().cluster(), "p2.xlarge"), 2);
  EXPECT_GE(Count(response.plan().cluster(), "g3.8xlarge"), 2);

  r.mutable_progress()->set_elapsed_s(1790);
  pb::ReplanResponse late;
  grpc::ClientContext context2;
  ASSERT_TRUE(stub_->Replan(&context2, r, &late).ok());
  EXPECT_FALSE(late.plan().feasible());
  EXPECT_GT(late.best_finish_time_s(), 1800);
  EXPECT_THAT(late.plan().reason(), HasSubstr("best achievable finish"));

  r.mutable_progress()->clear_cluster_before();
  grpc::ClientContext context3;
  const grpc::Status bad = stub_->Replan(&context3, r, &late);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("progress"));
  EXPECT_THAT(bad.error_message(), HasSubstr("current_loss"));
}

TEST_F(ProvisionerServiceTest, ReplanBadInputNamesTheRequestsField) {
  pb::ReplanRequest base;
  base.mutable_workload()->set_name("resnet110");
  base.mutable_catalog()->set_name("aws-spotdnn-prototype");
  base.mutable_slo()->set_target_loss(0.9);
  base.mutable_slo()->set_deadline_s(1800);
  base.mutable_progress()->set_current_loss(1.5);
  base.mutable_progress()->set_elapsed_s(600);
  auto expect = [&](const pb::ReplanRequest& r, const std::string& text) {
    pb::ReplanResponse response;
    grpc::ClientContext context;
    const grpc::Status s = stub_->Replan(&context, r, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(text));
    EXPECT_THAT(s.error_message(), ::testing::Not(HasSubstr("existing")));
  };
  auto survivor = [](pb::ReplanRequest& r, const char* type, int n) {
    auto* i = r.mutable_survivors()->add_instances();
    i->set_instance_type(type);
    i->set_count(n);
  };
  pb::ReplanRequest r = base;
  survivor(r, "p2.xlarge", 3);  // quota 2
  expect(r, "survivors.instances[0].count = 3 (p2.xlarge): exceeds its quota 2");
  r = base;
  survivor(r, "g3.8xlarge", 1);
  survivor(r, "x9.huge", 1);
  expect(r, "survivors.instances[1].instance_type = \"x9.huge\"");
  r = base;
  survivor(r, "g3.8xlarge", -1);
  expect(r, "survivors.instances[0].count = -1");
  r = base;
  survivor(r, "g3.8xlarge", 3);
  r.mutable_options()->set_max_cluster_size(2);
  expect(r, "options.max_cluster_size = 2: below the 3 instances of survivors");
  r = base;
  r.mutable_progress()->set_elapsed_s(-5);
  expect(r, "progress.elapsed_s = -5");
  r = base;
  r.mutable_slo()->set_deadline_s(-1);
  expect(r, "slo.deadline_s = -1");
}

TEST_F(ProvisionerServiceTest, FrontierIsParetoAndEndsAtTheCheapestPlan) {
  pb::FrontierRequest r;
  r.mutable_workload()->set_name("resnet110");
  r.mutable_catalog()->set_name("aws-spotdnn-prototype");
  r.mutable_slo()->set_target_loss(0.9);
  r.mutable_slo()->set_deadline_s(1800);
  pb::FrontierResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->Frontier(&context, r, &response).ok());
  ASSERT_GE(response.plans_size(), 2);
  for (int i = 1; i < response.plans_size(); ++i) {
    EXPECT_GT(response.plans(i).time_s(), response.plans(i - 1).time_s());
    EXPECT_LT(response.plans(i).cost_usd(), response.plans(i - 1).cost_usd());
    EXPECT_LE(response.plans(i).time_s(), 1800);
  }
  EXPECT_NEAR(response.plans(response.plans_size() - 1).cost_usd(), 2.119135, 1e-6);
  EXPECT_TRUE(response.reason().empty());
  EXPECT_EQ(response.fastest_time_s(), 0);
  r.mutable_options()->set_strategy(pb::PLAN_STRATEGY_SPOTDNN);
  grpc::ClientContext context2;
  const grpc::Status s = stub_->Frontier(&context2, r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("strategy = spotdnn"));
}

TEST_F(ProvisionerServiceTest, FrontierBadInputNamesTheField) {
  auto expect = [&](const pb::FrontierRequest& r, const std::string& text) {
    pb::FrontierResponse response;
    grpc::ClientContext context;
    const grpc::Status s = stub_->Frontier(&context, r, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(text));
  };
  pb::FrontierRequest base;
  base.mutable_workload()->set_name("resnet110");
  base.mutable_catalog()->set_name("aws-spotdnn-prototype");
  base.mutable_slo()->set_target_loss(0.9);
  pb::FrontierRequest r = base;
  r.mutable_slo()->set_target_loss(0.4);
  expect(r, "slo.target_loss = 0.4");
  r = base;
  r.mutable_slo()->set_budget_usd(-2);
  expect(r, "slo.budget_usd = -2");
  r = base;
  auto* q = r.mutable_options()->add_quota_overrides();
  q->set_instance_type("p2.xlarge");
  q->set_count(100'000);
  expect(r, "options.quota_overrides[0].count = 100000 (p2.xlarge): must be in [0, 10000]");
  r = base;
  r.mutable_options()->set_max_cluster_size(1'000'000);
  expect(r, "max_cluster_size = 1000000");
}

TEST_F(ProvisionerServiceTest, InfeasibleFrontierSaysWhyWithTheFastestTime) {
  pb::FrontierRequest r;
  r.mutable_workload()->set_name("resnet110");
  r.mutable_catalog()->set_name("aws-spotdnn-prototype");
  r.mutable_slo()->set_target_loss(0.7);
  r.mutable_slo()->set_deadline_s(300);
  pb::FrontierResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->Frontier(&context, r, &response).ok());
  EXPECT_EQ(response.plans_size(), 0);
  EXPECT_THAT(response.reason(), HasSubstr("fastest"));
  // The same answer Plan gives for the same SLO.
  pb::PlanResponse plan;
  ASSERT_TRUE(Plan(Request(0.7, 300), &plan).ok());
  ASSERT_FALSE(plan.plan().feasible());
  EXPECT_GT(response.fastest_time_s(), 300);
  EXPECT_EQ(response.fastest_time_s(), plan.fastest_time_s());
  EXPECT_EQ(response.fastest_cost_usd(), plan.fastest_cost_usd());
  EXPECT_EQ(response.reason(), plan.plan().reason());
}

TEST_F(ProvisionerServiceTest, HugeQuotasSkipTheHeuristicBaselineAndSayWhy) {
  pb::PlanRequest r = Request(0.9, 1800);
  for (const char* type :
       {"p2.xlarge", "g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge", "p2.8xlarge"}) {
    auto* q = r.mutable_options()->add_quota_overrides();
    q->set_instance_type(type);
    q->set_count(predictor::kMaxInstancesPerType);
  }
  r.mutable_options()->set_include_baselines(true);
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(r, &response).ok());
  EXPECT_TRUE(response.plan().feasible());
  EXPECT_FALSE(response.spotdnn_baseline().feasible());
  EXPECT_TRUE(response.spotdnn_baseline().skipped());
  EXPECT_THAT(response.spotdnn_baseline().reason(), HasSubstr("50000-instance list"));
  EXPECT_EQ(response.homogeneous_baseline().strategy(), pb::PLAN_STRATEGY_HOMOGENEOUS);
  EXPECT_FALSE(response.homogeneous_baseline().skipped());
  // As the strategy itself, the heuristic refuses instead of hanging.
  r.mutable_options()->set_strategy(pb::PLAN_STRATEGY_SPOTDNN);
  const grpc::Status s = Plan(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("windows"));
}

}  // namespace
}  // namespace spotdnn::services

namespace spotdnn::services {
namespace {

// Risk-aware planning, simulation and simulated frontiers.
class RiskServiceTest : public ProvisionerServiceTest {
 protected:
  // The README's SLO (loss 0.9 by 30 min) for resnet110 on the prototype catalog, to simulate.
  static pb::SimulateRequest SimulateRequest() {
    pb::SimulateRequest r;
    r.mutable_workload()->set_name("resnet110");
    r.mutable_catalog()->set_name("aws-spotdnn-prototype");
    r.mutable_slo()->set_target_loss(0.9);
    r.mutable_slo()->set_deadline_s(1800);
    return r;
  }

  grpc::Status Simulate(const pb::SimulateRequest& r, pb::SimulateResponse* out) {
    grpc::ClientContext context;
    return stub_->Simulate(&context, r, out);
  }

  // The README's SLO (loss 0.9 by 30 min) with every prototype type revoked at `rate` per hour,
  // given as lifetime groups named by GPU type (as `--lifetimes FILE` sends them).
  static pb::PlanRequest RiskRequest(double confidence) {
    pb::PlanRequest r = Request(0.9, 1800);
    r.mutable_options()->set_confidence(confidence);
    pb::SimulationOptions* s = r.mutable_options()->mutable_simulation();
    s->set_runs(2000);
    s->set_seed(4);
    s->set_notice_s(30);
    s->set_takeover_delay_s(60);
    // Every third lifetime within the first 40 minutes, the rest censored at a day.
    for (const char* gpu : {"K80", "T4", "M60"}) {
      pb::LifetimeGroup* g = s->add_lifetime_groups();
      g->set_name(gpu);
      g->set_source("test");
      for (int i = 0; i < 30; ++i) {
        pb::LifetimeObservation* o = g->add_observations();
        o->set_lifetime_s(i % 3 == 0 ? 60.0 * (i + 10) : 86400);
        o->set_censored(i % 3 != 0);
      }
    }
    return r;
  }
};

TEST_F(RiskServiceTest, ConfidencePlanShowsItsProbabilityBesideThePlainPlans) {
  pb::PlanResponse response;
  ASSERT_TRUE(Plan(RiskRequest(0.9), &response).ok());
  const pb::Plan& p = response.plan();
  const pb::Plan& plain = response.plain_plan();
  ASSERT_TRUE(plain.feasible());
  EXPECT_EQ(plain.strategy(), pb::PLAN_STRATEGY_EXACT);
  EXPECT_EQ(plain.risk().runs(), 2000u);
  EXPECT_GT(plain.risk().mean_revocations(), 0);
  EXPECT_LE(plain.risk().p_meet_deadline_low(), plain.risk().p_meet_deadline());
  ASSERT_EQ(response.revocation_models_size(), 5);
  EXPECT_THAT(response.revocation_models(0), HasSubstr("p2.xlarge: Kaplan-Meier, 30 lifetimes"));
  EXPECT_FALSE(response.risk_search().empty());
  if (p.feasible()) {
    EXPECT_EQ(p.strategy(), pb::PLAN_STRATEGY_RISK_AWARE);
    EXPECT_GE(p.risk().p_meet_deadline(), 0.9);
    EXPECT_GE(p.risk().p_meet_deadline(), plain.risk().p_meet_deadline());
    EXPECT_GE(p.cost_usd(), plain.cost_usd());
    EXPECT_GT(p.risk().expected_cost_usd(), 0);
  } else {
    EXPECT_THAT(p.reason(), HasSubstr("most reliable"));
    EXPECT_TRUE(response.most_reliable().feasible());
  }
  // The same request, the same answer (deterministic for a seed).
  pb::PlanResponse again;
  ASSERT_TRUE(Plan(RiskRequest(0.9), &again).ok());
  EXPECT_EQ(again.plan().risk().p_meet_deadline(), p.risk().p_meet_deadline());
  EXPECT_EQ(again.plan().risk().expected_cost_usd(), p.risk().expected_cost_usd());
}

TEST_F(RiskServiceTest, CatalogInterruptionRatesAreARevocationModel) {
  pb::PlanRequest r = Request(0.9, 1800);
  auto catalog = DataRegistry::WithBuiltins().ResolveCatalog("aws-spotdnn-prototype");
  ASSERT_TRUE(catalog.ok());
  for (pb::InstanceType& t : *catalog->mutable_instance_types()) {
    t.set_interruption_rate_per_hour(0.5);
  }
  *r.mutable_catalog()->mutable_catalog() = *catalog;
  r.mutable_options()->set_confidence(0.8);
  // Few runs: the point is where the model comes from (under the sanitizers 1,000 took a minute).
  r.mutable_options()->mutable_simulation()->set_runs(200);
  r.mutable_options()->mutable_simulation()->set_takeover_delay_s(60);
  pb::PlanResponse response;
  const grpc::Status planned = Plan(r, &response);
  ASSERT_TRUE(planned.ok()) << planned.error_message();
  EXPECT_THAT(response.revocation_models(0), HasSubstr("exponential, 0.5 revocations per hour"));
  EXPECT_GT(response.plain_plan().risk().mean_revocations(), 0);
}

TEST_F(RiskServiceTest, BadRiskInputNamesTheField) {
  struct Case {
    std::function<void(pb::PlanRequest&)> edit;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](pb::PlanRequest& r) { r.mutable_options()->set_confidence(1.5); },
       "options.confidence = 1.5"},
      {[](pb::PlanRequest& r) {
         r.mutable_options()->mutable_simulation()->clear_lifetime_groups();
       },
       "options.confidence: no instance type of catalog"},
      {[](pb::PlanRequest& r) { r.mutable_options()->mutable_simulation()->set_runs(5000000); },
       "options.simulation.runs = 5000000"},
      {[](pb::PlanRequest& r) { r.mutable_options()->mutable_simulation()->set_notice_s(-3); },
       "options.simulation.notice_s = -3"},
      {[](pb::PlanRequest& r) {
         r.mutable_options()->mutable_simulation()->set_max_candidates(100000);
       },
       "options.simulation.max_candidates = 100000"},
      {[](pb::PlanRequest& r) {
         auto* l = r.mutable_options()->mutable_simulation()->add_lifetimes();
         l->set_instance_type("p9.huge");
         l->add_observations()->set_lifetime_s(1);
       },
       "options.simulation.lifetimes[0].instance_type = \"p9.huge\""},
      {[](pb::PlanRequest& r) {
         (*r.mutable_options()->mutable_simulation()->mutable_lifetime_mapping())["A100"] = "K80";
       },
       "no instance type or GPU type \"A100\""},
      {[](pb::PlanRequest& r) {
         r.mutable_options()->mutable_simulation()->set_unmatched_types(pb::UNMATCHED_TYPES_REFUSE);
         r.mutable_options()->mutable_simulation()->mutable_lifetime_groups()->RemoveLast();
       },
       "instance type g3.8xlarge"},
      {[](pb::PlanRequest& r) {
         r.mutable_options()
             ->mutable_simulation()
             ->mutable_lifetime_groups(0)
             ->mutable_observations(0)
             ->set_lifetime_s(-1);
       },
       "lifetime_s = -1"},
      {[](pb::PlanRequest& r) {
         r.set_mode(pb::PLAN_MODE_BUDGET);
         r.mutable_slo()->set_budget_usd(5);
       },
       "deadline mode"},
  };
  for (const Case& c : cases) {
    pb::PlanRequest r = RiskRequest(0.9);
    c.edit(r);
    pb::PlanResponse response;
    const grpc::Status s = Plan(r, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_THAT(s.error_message(), HasSubstr(c.field));
  }
}

TEST_F(RiskServiceTest, SimulateAClusterOrThePlanOrIterations) {
  pb::SimulateRequest r = SimulateRequest();
  *r.mutable_options()->mutable_simulation() = RiskRequest(0.9).options().simulation();
  pb::SimulateResponse planned;
  ASSERT_TRUE(Simulate(r, &planned).ok());
  EXPECT_TRUE(planned.plan().feasible());
  EXPECT_EQ(planned.plan().strategy(), pb::PLAN_STRATEGY_EXACT);
  EXPECT_EQ(planned.plan().risk().runs(), 2000u);
  EXPECT_EQ(planned.revocation_models_size(), 5);

  pb::SimulateRequest given = r;
  auto* c = given.mutable_cluster()->add_instances();
  c->set_instance_type("g3.8xlarge");
  c->set_count(5);
  pb::SimulateResponse cluster;
  ASSERT_TRUE(Simulate(given, &cluster).ok());
  EXPECT_EQ(cluster.plan().strategy(), pb::PLAN_STRATEGY_GIVEN);
  EXPECT_EQ(Count(cluster.plan().cluster(), "g3.8xlarge"), 5);

  pb::SimulateRequest iterations = given;
  iterations.mutable_slo()->set_target_loss(0);
  iterations.set_iterations(3000);
  pb::SimulateResponse by_iterations;
  ASSERT_TRUE(Simulate(iterations, &by_iterations).ok());
  EXPECT_GT(by_iterations.target_loss(), 0.5);
  EXPECT_NEAR(by_iterations.plan().prediction().normalized_iterations(), 3000, 1);

  pb::SimulateRequest no_deadline = r;
  no_deadline.mutable_slo()->set_deadline_s(0);
  pb::SimulateResponse ignored;
  const grpc::Status s = Simulate(no_deadline, &ignored);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("slo.deadline_s"));

  pb::SimulateRequest over_quota = r;
  auto* big = over_quota.mutable_cluster()->add_instances();
  big->set_instance_type("p2.xlarge");
  big->set_count(4);
  const grpc::Status q = Simulate(over_quota, &ignored);
  EXPECT_THAT(q.error_message(), HasSubstr("cluster: plan count of p2.xlarge = 4"));
}

// Without a revocation model there is nothing to simulate, but plan_only still answers the plan
// (the cheapest, or the cluster given), scored without revocations: what the CLI replays through
// availability traces.
TEST_F(RiskServiceTest, SimulatePlanOnlyNeedsNoRevocationModel) {
  pb::SimulateRequest r = SimulateRequest();
  pb::SimulateResponse refused;
  const grpc::Status s = Simulate(r, &refused);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("nothing to simulate"));
  EXPECT_THAT(s.error_message(), HasSubstr("options.simulation.lifetimes or lifetime_groups"));
  EXPECT_THAT(s.error_message(), Not(HasSubstr("e.g. spotdnn")));

  r.set_plan_only(true);
  pb::SimulateResponse planned;
  ASSERT_TRUE(Simulate(r, &planned).ok());
  EXPECT_TRUE(planned.plan().feasible());
  EXPECT_EQ(planned.plan().strategy(), pb::PLAN_STRATEGY_EXACT);
  EXPECT_GT(planned.plan().time_s(), 0);
  EXPECT_GT(planned.plan().spot_cost_usd(), 0);
  EXPECT_FALSE(planned.plan().has_risk());

  auto* c = r.mutable_cluster()->add_instances();
  c->set_instance_type("g3.8xlarge");
  c->set_count(4);
  pb::SimulateResponse given;
  ASSERT_TRUE(Simulate(r, &given).ok());
  EXPECT_EQ(given.plan().strategy(), pb::PLAN_STRATEGY_GIVEN);
  EXPECT_EQ(Count(given.plan().cluster(), "g3.8xlarge"), 4);
  // It misses the 30 minutes even without revocations, and says so.
  EXPECT_FALSE(given.plan().feasible());
  EXPECT_GT(given.plan().time_s(), 1800);
  EXPECT_THAT(given.plan().reason(), HasSubstr("does not meet the SLO"));
}

// Simulations and confidence searches are bounded like the other searches: the request's limits
// first, then the call's deadline or the server's --max_solve_time, through the plan search, the
// re-plans and the simulated runs.
TEST_F(RiskServiceTest, SimulationsAreCheckedAndStopAtTheServersLimit) {
  pb::SimulateRequest r = SimulateRequest();
  *r.mutable_options()->mutable_simulation() = RiskRequest(0.9).options().simulation();
  pb::SimulateRequest bad = r;
  bad.mutable_options()->mutable_simulation()->set_unmatched_types(
      static_cast<pb::UnmatchedTypes>(7));
  pb::SimulateResponse ignored;
  grpc::ClientContext c1;
  const grpc::Status unknown = stub_->Simulate(&c1, bad, &ignored);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unknown.error_message(),
              HasSubstr("options.simulation.unmatched_types = 7: not a spotdnn.v1.UnmatchedTypes"));
  bad = r;
  bad.mutable_options()->mutable_simulation()->set_notice_s(
      std::numeric_limits<double>::infinity());
  grpc::ClientContext c2;
  EXPECT_THAT(stub_->Simulate(&c2, bad, &ignored).error_message(),
              HasSubstr("options.simulation.notice_s = inf: must be a finite number"));

  ProvisionerServiceImpl limited(std::make_shared<DataRegistry>(DataRegistry::WithBuiltins()),
                                 {.max_solve_time = absl::Nanoseconds(1)});
  auto started = StartServer("", {&limited});
  ASSERT_TRUE(started.ok()) << started.status();
  auto stub =
      pb::Provisioner::NewStub(started->server->InProcessChannel(DefaultChannelArguments()));
  grpc::ClientContext c3;
  const grpc::Status simulated = stub->Simulate(&c3, r, &ignored);
  EXPECT_EQ(simulated.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(simulated.error_message(), HasSubstr("--max_solve_time"));
  pb::SimulateRequest given = r;  // a given cluster: no search, the runs stop
  auto* c = given.mutable_cluster()->add_instances();
  c->set_instance_type("g3.8xlarge");
  c->set_count(5);
  grpc::ClientContext c4;
  const grpc::Status runs = stub->Simulate(&c4, given, &ignored);
  EXPECT_EQ(runs.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(runs.error_message(), HasSubstr("the simulation was stopped"));
  pb::PlanResponse plan;
  grpc::ClientContext c5;
  EXPECT_EQ(stub->Plan(&c5, RiskRequest(0.9), &plan).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  started->server->Shutdown();
}

TEST_F(RiskServiceTest, FrontierPlansCarryTheirProbability) {
  pb::FrontierRequest f;
  const pb::PlanRequest r = RiskRequest(0.9);
  *f.mutable_workload() = r.workload();
  *f.mutable_catalog() = r.catalog();
  *f.mutable_slo() = r.slo();
  *f.mutable_options() = r.options();
  f.mutable_options()->set_confidence(0);
  f.mutable_options()->mutable_simulation()->set_runs(500);
  f.set_simulate(true);
  pb::FrontierResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->Frontier(&context, f, &response).ok());
  ASSERT_GT(response.plans_size(), 1);
  for (const pb::Plan& p : response.plans()) {
    EXPECT_EQ(p.risk().runs(), 500u);
    EXPECT_GE(p.risk().p_meet_deadline(), 0);
  }
  EXPECT_EQ(response.revocation_models_size(), 5);
}

}  // namespace
}  // namespace spotdnn::services
