#include "provisioner/planner.h"

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/infeasibility.h"
#include "provisioner/pareto.h"
#include "provisioner/replan.h"
#include "tests/testing/prototype_inputs.h"

namespace spotdnn::provisioner {
namespace {

using predictor::ComputeProfile;
using predictor::InstanceCatalog;
using predictor::WorkloadProfile;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

// The prototype's ResNet-110 inputs (reference file), in its table order.
PerformanceModel PrototypeModel() {
  return *PerformanceModel::Create(predictor::testing_inputs::PrototypeProfile(),
                                   predictor::testing_inputs::PrototypeCatalog());
}

struct HeuristicCase {
  double loss, deadline;
  std::vector<int> heuristic;
  double heuristic_cost;
  std::vector<int> optimum;  // empty: the heuristic's plan is optimal
  double optimum_cost;
};

class ReferencePlans : public ::testing::TestWithParam<HeuristicCase> {};

TEST_P(ReferencePlans, SpotdnnReproducesThePrototypeAndExactFindsTheOptimum) {
  const HeuristicCase& c = GetParam();
  const PerformanceModel model = PrototypeModel();
  const PlanProblem problem = DefaultProblem(model, c.loss, c.deadline);
  const PlanResult heuristic = SolveSpotdnn(model, problem);
  ASSERT_TRUE(heuristic.feasible);
  EXPECT_THAT(heuristic.best.counts, ElementsAreArray(c.heuristic));
  EXPECT_NEAR(heuristic.best.cost_usd, c.heuristic_cost, 0.005);
  const PlanResult exact = SolveExact(model, problem);
  ASSERT_TRUE(exact.feasible);
  const auto& optimum = c.optimum.empty() ? c.heuristic : c.optimum;
  EXPECT_THAT(exact.best.counts, ElementsAreArray(optimum));
  EXPECT_NEAR(exact.best.cost_usd, c.optimum.empty() ? c.heuristic_cost : c.optimum_cost, 0.005);
  EXPECT_LE(exact.best.cost_usd, heuristic.best.cost_usd);
  EXPECT_LE(exact.best.time_s, c.deadline);
  const PlanResult exhaustive = *SolveExhaustive(model, problem);
  EXPECT_NEAR(exact.best.cost_usd, exhaustive.best.cost_usd, 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    Reference, ReferencePlans,
    ::testing::Values(HeuristicCase{0.8, 2400, {2, 0, 4, 0, 0}, 2.99, {}, 0},
                      HeuristicCase{0.9, 1800, {2, 0, 4, 0, 0}, 2.20, {2, 1, 3, 0, 0}, 2.12},
                      HeuristicCase{1.2, 900, {2, 0, 5, 1, 0}, 1.65, {2, 2, 5, 0, 0}, 1.49},
                      HeuristicCase{1.0, 1200, {2, 0, 5, 3, 0}, 3.28, {}, 0}));

// A random small instance: catalog, profile (either variant) and SLO.
struct RandomInstance {
  PerformanceModel model;
  PlanProblem problem;
};

RandomInstance MakeRandom(std::mt19937& rng) {
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto integer = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const char* gpus[] = {"A", "B", "C"};
  while (true) {
    InstanceCatalog c;
    c.name = "random";
    const int types = integer(1, 4);
    for (int k = 0; k < types; ++k) {
      const double spot = uniform(0.1, 3);
      c.types.push_back({"t" + std::to_string(k), gpus[integer(0, 2)], integer(1, 4),
                         uniform(4, 32), spot, spot * uniform(1.5, 4), integer(0, 4)});
    }
    c.parameter_server = {.instance_type = "ps",
                          .bandwidth_mb_per_s = uniform(100, 2000),
                          .spot_price_per_hour = integer(0, 1) ? uniform(0, 0.3) : 0,
                          .on_demand_price_per_hour = uniform(0, 0.5)};
    c.pcie_bandwidth_mb_per_s = uniform(2000, 16000);
    WorkloadProfile p;
    p.name = "random";
    p.parameter_size_mb = uniform(5, 200);
    p.required_bandwidth_mb_per_s = uniform(50, 600);
    for (int k = 0; k < types; ++k) {
      ComputeProfile cp;
      cp.instance_type = c.types[k].name;
      cp.batch_per_gpu = 1 << integer(5, 10);
      if (integer(0, 3) == 0) {
        cp.measured_samples_per_s = uniform(50, 3000);
      } else {
        cp.compute_time_s = uniform(0.05, 3);
      }
      p.compute.push_back(cp);
    }
    p.contention = predictor::ContentionModel{.a1 = uniform(0.1, 1.2), .b1 = uniform(-2.5, 0.2)};
    const double g2 = uniform(-0.3, 0.05);
    p.loss = predictor::LossModel{.g1 = uniform(0, 1500),
                                  .g2 = g2,
                                  .g3 = std::max(0.0, -g2) * 32 * 1024 + uniform(50, 3000),
                                  .g4 = uniform(0, 2),
                                  .g5 = uniform(0, 1)};
    p.variant = integer(0, 2) == 0 ? predictor::ModelVariant::kSpotdnnPrototype
                                   : predictor::ModelVariant::kPaper;
    auto model = PerformanceModel::Create(p, c);
    if (!model.ok()) continue;  // e.g. a measured speed too high for its communication time
    PlanProblem problem = DefaultProblem(*model, p.loss->g5 + uniform(0.05, 3));
    for (int k = 0; k < types; ++k) {
      if (integer(0, 4) == 0 && problem.max_counts[k] > 0) {
        problem.min_counts[k] = integer(0, problem.max_counts[k]);
      }
    }
    if (integer(0, 3) == 0) problem.max_workers = integer(1, 8);
    if (problem.max_workers > 0 &&
        std::accumulate(problem.min_counts.begin(), problem.min_counts.end(), 0) >
            problem.max_workers) {
      problem.max_workers = 0;
    }
    problem.on_demand = integer(0, 3) == 0;
    if (integer(0, 3) == 0) problem.overhead_s = uniform(0, 60);
    if (integer(0, 4) == 0) problem.current_loss = problem.target_loss + uniform(0.01, 5);
    if (integer(0, 2) == 0) problem.parameter_servers = integer(1, 3);
    // Deadline (and budget) near what some cluster achieves, so both outcomes occur.
    std::vector<int> probe(types);
    for (int k = 0; k < types; ++k)
      probe[k] = integer(problem.min_counts[k], problem.max_counts[k]);
    Candidate reference;
    const bool scored = Score(*model, problem, probe, reference);
    const double scale = uniform(0.3, 1.5);
    if (integer(0, 2) == 0) {
      problem.objective = Objective::kMinTime;
      problem.budget_usd = scored ? reference.cost_usd * scale : uniform(0.01, 10);
    } else {
      problem.deadline_s = scored ? reference.time_s * scale : uniform(10, 10000);
      if (integer(0, 5) == 0) problem.deadline_s = kInf;
    }
    return {*std::move(model), problem};
  }
}

TEST(ExactVsExhaustive, SameOptimumOnAThousandRandomInstances) {
  std::mt19937 rng(2023);
  int feasible = 0, infeasible = 0;
  for (int i = 0; i < 1200; ++i) {
    RandomInstance r = MakeRandom(rng);
    const PlanResult exact = SolveExact(r.model, r.problem);
    auto exhaustive = SolveExhaustive(r.model, r.problem);
    ASSERT_TRUE(exhaustive.ok()) << exhaustive.status();
    ASSERT_EQ(exact.feasible, exhaustive->feasible) << "instance " << i;
    if (!exact.feasible) {
      ++infeasible;
      continue;
    }
    ++feasible;
    const bool by_cost = r.problem.objective == Objective::kMinCost;
    const double got = by_cost ? exact.best.cost_usd : exact.best.time_s;
    const double want = by_cost ? exhaustive->best.cost_usd : exhaustive->best.time_s;
    ASSERT_LE(std::abs(got - want), 1e-9 * std::abs(want)) << "instance " << i;
    // The plan meets the SLO under the model when scored afresh.
    Candidate again;
    ASSERT_TRUE(Score(r.model, r.problem, exact.best.counts, again));
    EXPECT_TRUE(MeetsSlo(r.problem, again)) << "instance " << i;
    for (size_t k = 0; k < again.counts.size(); ++k) {
      EXPECT_GE(again.counts[k], r.problem.min_counts[k]);
      EXPECT_LE(again.counts[k], r.problem.max_counts[k]);
    }
  }
  EXPECT_GE(feasible + infeasible, 1000);
  EXPECT_GT(feasible, 300);
  EXPECT_GT(infeasible, 50);
}

TEST(ExactVsExhaustive, SameFrontierOnRandomInstances) {
  std::mt19937 rng(99);
  for (int i = 0; i < 300; ++i) {
    RandomInstance r = MakeRandom(rng);
    auto exact = Frontier(r.model, r.problem, Strategy::kExact);
    auto exhaustive = Frontier(r.model, r.problem, Strategy::kExhaustive);
    ASSERT_TRUE(exact.ok() && exhaustive.ok());
    ASSERT_EQ(exact->size(), exhaustive->size()) << "instance " << i;
    for (size_t p = 0; p < exact->size(); ++p) {
      EXPECT_NEAR((*exact)[p].time_s, (*exhaustive)[p].time_s, 1e-9 * (*exhaustive)[p].time_s);
      EXPECT_NEAR((*exact)[p].cost_usd, (*exhaustive)[p].cost_usd,
                  1e-9 * (*exhaustive)[p].cost_usd);
    }
    for (size_t p = 1; p < exact->size(); ++p) {
      EXPECT_GT((*exact)[p].time_s, (*exact)[p - 1].time_s);
      EXPECT_LT((*exact)[p].cost_usd, (*exact)[p - 1].cost_usd);
    }
  }
}

// A random small shared-ps instance with a loss, iterations or samples target.
RandomInstance MakeRandomSharedPs(std::mt19937& rng) {
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  auto integer = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  while (true) {
    InstanceCatalog c;
    c.name = "random";
    const int types = integer(1, 4);
    for (int k = 0; k < types; ++k) {
      const double spot = uniform(0.1, 3);
      c.types.push_back({"t" + std::to_string(k), "G" + std::to_string(k), integer(1, 2),
                         uniform(4, 32), spot, spot * uniform(1.5, 4), integer(0, 4)});
    }
    c.parameter_server = {.instance_type = "ps",
                          .bandwidth_mb_per_s = uniform(200, 2000),
                          .spot_price_per_hour = uniform(0, 0.3),
                          .on_demand_price_per_hour = uniform(0, 0.5)};
    c.pcie_bandwidth_mb_per_s = 10000;
    WorkloadProfile p;
    p.name = "random-shared-ps";
    p.variant = predictor::ModelVariant::kSharedPs;
    p.parameter_size_mb = uniform(2, 50);
    p.required_bandwidth_mb_per_s = 1000;
    p.shared_ps = predictor::SharedPsModel{.queueing = uniform(0, 1.5)};
    for (int k = 0; k < types; ++k) {
      ComputeProfile cp;
      cp.gpu_type = c.types[k].gpu_type;
      cp.batch_per_gpu = 1 << integer(5, 9);
      cp.compute_time_s = uniform(0.02, 0.5);
      p.compute.push_back(cp);
    }
    const int kind = integer(0, 2);
    if (kind == 0) {
      const double g2 = uniform(-0.3, 0.05);
      p.loss = predictor::LossModel{.g1 = uniform(0, 1500),
                                    .g2 = g2,
                                    .g3 = std::max(0.0, -g2) * 32 * 1024 + uniform(50, 3000),
                                    .g4 = uniform(0, 2),
                                    .g5 = uniform(0, 1)};
    }
    auto model = PerformanceModel::Create(p, c, {.require_loss_model = kind == 0});
    if (!model.ok()) continue;
    const predictor::Target target =
        kind == 0   ? predictor::Target::Loss(p.loss->g5 + uniform(0.05, 3))
        : kind == 1 ? predictor::Target::Iterations(std::round(uniform(1000, 100000)))
                    : predictor::Target::Samples(uniform(1e5, 1e7));
    PlanProblem problem = DefaultProblem(*model, target);
    for (int k = 0; k < types; ++k) {
      if (integer(0, 4) == 0 && problem.max_counts[k] > 0) {
        problem.min_counts[k] = integer(0, problem.max_counts[k]);
      }
    }
    problem.on_demand = integer(0, 3) == 0;
    if (integer(0, 3) == 0) problem.overhead_s = uniform(0, 60);
    problem.parameter_servers = integer(1, 3);
    std::vector<int> probe(types);
    for (int k = 0; k < types; ++k) {
      probe[k] = integer(problem.min_counts[k], problem.max_counts[k]);
    }
    Candidate reference;
    const bool scored = Score(*model, problem, probe, reference);
    const double scale = uniform(0.3, 1.5);
    if (integer(0, 2) == 0) {
      problem.objective = Objective::kMinTime;
      problem.budget_usd = scored ? reference.cost_usd * scale : uniform(0.01, 10);
    } else {
      problem.deadline_s = scored ? reference.time_s * scale : uniform(10, 10000);
    }
    return {*std::move(model), problem};
  }
}

TEST(ExactVsExhaustive, SameOptimumForTheSharedPsVariantAndEveryTargetKind) {
  std::mt19937 rng(13);
  int feasible = 0, infeasible = 0;
  std::map<predictor::Target::Kind, int> kinds;
  for (int i = 0; i < 900; ++i) {
    RandomInstance r = MakeRandomSharedPs(rng);
    ++kinds[r.problem.target_kind];
    const PlanResult exact = SolveExact(r.model, r.problem);
    auto exhaustive = SolveExhaustive(r.model, r.problem);
    ASSERT_TRUE(exhaustive.ok()) << exhaustive.status();
    ASSERT_EQ(exact.feasible, exhaustive->feasible) << "instance " << i;
    if (!exact.feasible) {
      ++infeasible;
      continue;
    }
    ++feasible;
    const bool by_cost = r.problem.objective == Objective::kMinCost;
    const double got = by_cost ? exact.best.cost_usd : exact.best.time_s;
    const double want = by_cost ? exhaustive->best.cost_usd : exhaustive->best.time_s;
    ASSERT_LE(std::abs(got - want), 1e-9 * std::abs(want)) << "instance " << i;
    if (r.problem.target_kind == predictor::Target::Kind::kIterations) {
      EXPECT_EQ(exact.best.estimate.normalized_iterations, r.problem.target_amount);
    }
    auto front = Frontier(r.model, r.problem, Strategy::kExact);
    auto reference = Frontier(r.model, r.problem, Strategy::kExhaustive);
    ASSERT_TRUE(front.ok() && reference.ok());
    ASSERT_EQ(front->size(), reference->size()) << "instance " << i;
  }
  EXPECT_GT(feasible, 200);
  EXPECT_GT(infeasible, 50);
  EXPECT_GT(kinds[predictor::Target::Kind::kSamples], 200);
}

// A SearchMemo only saves work: every search of problems of one shape (the simulator's re-plans
// differ in the current loss, the deadline and what is left of the target) answers exactly as
// without it, node for node, and a memo given a problem of another shape starts over.
TEST(SearchMemo, SameSearchesAsWithoutIt) {
  std::mt19937 rng(5);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  SearchMemo memo;  // shared by every instance below: each starts it over
  int remembered = 0, feasible = 0;
  for (int i = 0; i < 240; ++i) {
    RandomInstance r = i % 3 == 0 ? MakeRandomSharedPs(rng) : MakeRandom(rng);
    for (int variant = 0; variant < 4; ++variant) {
      PlanProblem p = r.problem;
      if (variant > 0) {
        if (p.target_kind == predictor::Target::Kind::kLoss) {
          p.current_loss = p.target_loss + uniform(0.01, 3);
        } else {
          p.target_amount *= uniform(0.2, 1);
        }
        if (std::isfinite(p.deadline_s)) p.deadline_s *= uniform(0.5, 1.2);
        if (std::isfinite(p.budget_usd)) p.budget_usd *= uniform(0.5, 1.2);
        p.overhead_s = uniform(0, 30);
      }
      const PlanResult plain = SolveExact(r.model, p);
      p.memo = &memo;
      const PlanResult memoized = SolveExact(r.model, p);
      remembered += memo.nodes() > 0;
      ASSERT_EQ(memoized.feasible, plain.feasible) << "instance " << i << " variant " << variant;
      EXPECT_EQ(memoized.nodes, plain.nodes) << "instance " << i << " variant " << variant;
      EXPECT_EQ(memoized.evaluated, plain.evaluated);
      if (!plain.feasible) continue;
      ++feasible;
      EXPECT_EQ(memoized.best.counts, plain.best.counts) << "instance " << i;
      EXPECT_EQ(memoized.best.cost_usd, plain.best.cost_usd);
      EXPECT_EQ(memoized.best.time_s, plain.best.time_s);
      if (variant == 3) {
        auto front = Frontier(r.model, p, Strategy::kExact);
        p.memo = nullptr;
        auto reference = Frontier(r.model, p, Strategy::kExact);
        ASSERT_TRUE(front.ok() && reference.ok());
        ASSERT_EQ(front->size(), reference->size()) << "instance " << i;
        for (size_t k = 0; k < front->size(); ++k) {
          EXPECT_EQ((*front)[k].counts, (*reference)[k].counts);
          EXPECT_EQ((*front)[k].cost_usd, (*reference)[k].cost_usd);
        }
      }
    }
  }
  EXPECT_GT(feasible, 200);
  EXPECT_GT(remembered, 100);
}

TEST(Replan, AnIterationsTargetPlansWhatIsLeft) {
  InstanceCatalog c;
  c.name = "gce";
  c.types = {{"k80", "K80", 1, 12, 0.2556, 0.723, 8}, {"v100", "V100", 1, 16, 0.861, 2.753, 8}};
  c.parameter_server = {.instance_type = "ps", .bandwidth_mb_per_s = 1000};
  c.pcie_bandwidth_mb_per_s = 10000;
  WorkloadProfile p;
  p.name = "resnet";
  p.variant = predictor::ModelVariant::kSharedPs;
  p.parameter_size_mb = 10.7;
  p.required_bandwidth_mb_per_s = 1000;
  p.shared_ps = predictor::SharedPsModel{.queueing = 0.22};
  p.compute = {{.gpu_type = "K80", .batch_per_gpu = 128, .compute_time_s = 0.196},
               {.gpu_type = "V100", .batch_per_gpu = 128, .compute_time_s = 0.047}};
  auto model = PerformanceModel::Create(p, c, {.require_loss_model = false});
  ASSERT_TRUE(model.ok()) << model.status();
  PlanProblem problem = DefaultProblem(*model, predictor::Target::Iterations(64000), 2400);
  problem.min_counts = {0, 2};  // two V100 survive
  auto replan = Replan(*model, problem,
                       {.elapsed_s = 600, .iterations_done = 24000, .cluster_before = {0, 3}});
  ASSERT_TRUE(replan.ok()) << replan.status();
  ASSERT_TRUE(replan->feasible);
  EXPECT_EQ(replan->remaining_amount, 40000);
  EXPECT_EQ(replan->plan.estimate.normalized_iterations, 40000);
  EXPECT_LE(replan->plan.time_s, 1800);
  // Epochs: the iterations done trained b_w samples each.
  PlanProblem epochs = DefaultProblem(*model, predictor::Target::Samples(100 * 50000.0), 2400);
  epochs.min_counts = {0, 2};
  auto by_epochs = Replan(*model, epochs,
                          {.elapsed_s = 600, .iterations_done = 10000, .cluster_before = {0, 3}});
  ASSERT_TRUE(by_epochs.ok()) << by_epochs.status();
  EXPECT_DOUBLE_EQ(by_epochs->remaining_amount, 100 * 50000.0 - 10000 * 128);
  // Done already, or a loss given for an iterations target: errors naming the field.
  auto done = Replan(*model, problem, {.iterations_done = 64000});
  EXPECT_EQ(done.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(done.status().message(), HasSubstr("done already"));
  auto lossy = Replan(*model, problem, {.current_loss = 1.0});
  EXPECT_THAT(lossy.status().message(), HasSubstr("progress.current_loss"));
  // A loss target on a profile without a loss model.
  PlanProblem loss = DefaultProblem(*model, 0.5);
  EXPECT_EQ(ValidateProblem(*model, loss).code(), absl::StatusCode::kFailedPrecondition);
}

// The prototype's inputs with convergence models of an accuracy and of a word error rate.
PerformanceModel PrototypeModelWithConvergence() {
  WorkloadProfile profile = predictor::testing_inputs::PrototypeProfile();
  for (auto [metric, higher] : {std::pair{"accuracy", true}, std::pair{"wer", false}}) {
    predictor::ConvergenceModel m;
    m.metric = metric;
    m.higher_is_better = higher;
    m.floor = 0.05;
    m.amplitude = 0.9;
    m.scale = 3000;
    profile.convergence.push_back(m);
  }
  return *PerformanceModel::Create(profile, predictor::testing_inputs::PrototypeCatalog());
}

// A metric target travels through the problem to the model unchanged, and a re-plan needs the
// cluster it trained on (the steps a metric needs depend on the cluster).
TEST(MetricTarget, TheProblemCarriesItToTheModel) {
  const PerformanceModel model = PrototypeModelWithConvergence();
  PlanProblem problem = DefaultProblem(model, predictor::Target::Accuracy(0.88), 3600);
  const predictor::Target t = problem.target();
  EXPECT_EQ(t.kind, predictor::Target::Kind::kMetric);
  EXPECT_EQ(t.metric, "accuracy");
  EXPECT_TRUE(t.higher_is_better);
  EXPECT_EQ(t.value, 0.88);
  EXPECT_TRUE(ValidateProblem(model, problem).ok()) << ValidateProblem(model, problem);
  PlanProblem lower = DefaultProblem(model, predictor::Target::Metric("wer", false, 0.1));
  EXPECT_FALSE(lower.target().higher_is_better);
  EXPECT_EQ(lower.target().Describe(), "wer <= 0.1");
  problem.current_loss = 2;
  EXPECT_THAT(ValidateProblem(model, problem).message(), HasSubstr("current_loss = 2"));
  problem.current_loss = kInf;
  auto no_cluster = Replan(model, problem, {.elapsed_s = 60, .iterations_done = 100});
  EXPECT_EQ(no_cluster.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_cluster.status().message(), HasSubstr("progress.cluster_before is required"));
  auto lossy = Replan(model, problem, {.elapsed_s = 60, .current_loss = 1.0});
  EXPECT_THAT(lossy.status().message(), HasSubstr("progress.current_loss = 1"));
}

// A metric the profile has no convergence model of (or only in the other direction) is refused
// as `predict` refuses it, FAILED_PRECONDITION naming the metric, the workload and the fix, not
// searched and answered "infeasible".
TEST(MetricTarget, WithoutAConvergenceModelIsRefusedNotInfeasible) {
  const PerformanceModel model = PrototypeModelWithConvergence();
  for (const predictor::Target& target : {predictor::Target::Metric("top5", true, 0.9),
                                          predictor::Target::Metric("accuracy", false, 0.5)}) {
    const PlanProblem problem = DefaultProblem(model, target, 3600);
    const absl::Status s = ValidateProblem(model, problem);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << target.Describe() << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("no convergence model of " + target.Describe()));
    EXPECT_THAT(s.message(), HasSubstr(model.profile().name));
    EXPECT_THAT(s.message(), HasSubstr("spotdnn profile fit"));
    auto solved = Solve(model, problem, Strategy::kExact);
    EXPECT_EQ(solved.status().code(), absl::StatusCode::kFailedPrecondition) << target.Describe();
  }
  // The prototype profile has no accuracy model at all.
  const PerformanceModel plain = PrototypeModel();
  EXPECT_EQ(
      ValidateProblem(plain, DefaultProblem(plain, predictor::Target::Accuracy(0.88), 3600)).code(),
      absl::StatusCode::kFailedPrecondition);
}

// A target no cluster reaches, beyond what the profile's runs reached: the reason says what they
// reached.
TEST(MetricTarget, BeyondTheRunsBestTheInfeasibleReasonSaysWhatTheyReached) {
  WorkloadProfile profile = predictor::testing_inputs::PrototypeProfile();
  predictor::ConvergenceModel m;
  m.metric = "accuracy";
  m.higher_is_better = true;
  m.floor = 0.07;
  m.amplitude = 0.9;
  m.scale = 3000;
  m.best_value = 0.925;
  profile.convergence.push_back(m);
  const PerformanceModel model =
      *PerformanceModel::Create(profile, predictor::testing_inputs::PrototypeCatalog());
  auto why =
      ExplainInfeasible(model, DefaultProblem(model, predictor::Target::Accuracy(0.99), 3600));
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_FALSE(why->fastest.feasible);
  EXPECT_THAT(why->reason, HasSubstr("(the profile's runs reached 0.925 at best)"));
}

TEST(Frontier, HoldsTheCheapestAndTheFastestPlan) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem problem = DefaultProblem(model, 0.9);
  auto front = Frontier(model, problem, Strategy::kExact);
  ASSERT_TRUE(front.ok());
  ASSERT_GE(front->size(), 2u);
  const PlanResult cheapest = SolveExact(model, problem);
  EXPECT_NEAR(front->back().cost_usd, cheapest.best.cost_usd, 1e-12);
  problem.objective = Objective::kMinTime;
  const PlanResult fastest = SolveExact(model, problem);
  EXPECT_NEAR(front->front().time_s, fastest.best.time_s, 1e-12);
}

TEST(BudgetMode, FastestWithinTheBudget) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem problem = DefaultProblem(model, 0.9);
  problem.objective = Objective::kMinTime;
  problem.budget_usd = 2.5;
  const PlanResult r = SolveExact(model, problem);
  ASSERT_TRUE(r.feasible);
  EXPECT_LE(r.best.cost_usd, 2.5);
  const PlanResult reference = *SolveExhaustive(model, problem);
  EXPECT_NEAR(r.best.time_s, reference.best.time_s, 1e-9);
  problem.budget_usd = 0.01;
  EXPECT_FALSE(SolveExact(model, problem).feasible);
}

TEST(Problem, InputsBeyondThePaper) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem problem = DefaultProblem(model, 0.9, 1800);
  // Quota overrides: without p2.xlarge the plan changes and costs more.
  PlanProblem no_p2 = problem;
  no_p2.max_counts[0] = 0;
  const PlanResult base = SolveExact(model, problem);
  const PlanResult without = SolveExact(model, no_p2);
  ASSERT_TRUE(base.feasible);
  if (without.feasible) {
    EXPECT_EQ(without.best.counts[0], 0);
    EXPECT_GT(without.best.cost_usd, base.best.cost_usd);
  }
  // Running instances stay in the plan.
  PlanProblem existing = problem;
  existing.min_counts[3] = 1;
  const PlanResult kept = SolveExact(model, existing);
  ASSERT_TRUE(kept.feasible);
  EXPECT_GE(kept.best.counts[3], 1);
  // On-demand prices cost more; overhead adds time; a size cap is honoured.
  PlanProblem od = problem;
  od.on_demand = true;
  od.deadline_s = kInf;
  const PlanResult on_demand = SolveExact(model, od);
  ASSERT_TRUE(on_demand.feasible);
  EXPECT_NEAR(on_demand.best.cost_usd,
              on_demand.best.time_s / 3600 * on_demand.best.estimate.on_demand_price_per_hour,
              1e-9);
  PlanProblem overhead = problem;
  overhead.overhead_s = 30;
  const PlanResult with_overhead = SolveExact(model, overhead);
  ASSERT_TRUE(with_overhead.feasible);
  EXPECT_NEAR(with_overhead.best.time_s, with_overhead.best.estimate.time_s + 30, 1e-9);
  PlanProblem capped = problem;
  capped.max_workers = 3;
  capped.deadline_s = kInf;
  const PlanResult small = SolveExact(model, capped);
  ASSERT_TRUE(small.feasible);
  EXPECT_LE(std::accumulate(small.best.counts.begin(), small.best.counts.end(), 0), 3);
}

TEST(Problem, ValidationNamesTheField) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem p = DefaultProblem(model, 0.9, 1800);
  p.min_counts[0] = 3;  // quota 2
  EXPECT_THAT(ValidateProblem(model, p).message(), HasSubstr("existing count of p2.xlarge = 3"));
  p = DefaultProblem(model, 0.9, -5);
  EXPECT_THAT(ValidateProblem(model, p).message(), HasSubstr("deadline_s = -5"));
  p = DefaultProblem(model, 0.9, 1800);
  p.max_counts[1] = -1;
  EXPECT_THAT(ValidateProblem(model, p).message(), HasSubstr("quota of g4dn.4xlarge = -1"));
}

TEST(Problem, HugeQuotasAndSizesAreRefusedNamingTheField) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem p = DefaultProblem(model, 0.9, 1800);
  p.max_counts[0] = 100'000;
  EXPECT_THAT(ValidateProblem(model, p).message(), HasSubstr("quota of p2.xlarge = 100000"));
  p.max_counts[0] = std::numeric_limits<int>::max();
  EXPECT_THAT(ValidateProblem(model, p).message(), HasSubstr("quota of p2.xlarge = 2147483647"));
  p = DefaultProblem(model, 0.9, 1800);
  p.max_workers = predictor::kMaxClusterSize + 1;
  EXPECT_THAT(ValidateProblem(model, p).message(), HasSubstr("max_cluster_size = 100001"));
  EXPECT_EQ(Solve(model, p, Strategy::kExact).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Problem, LargestQuotasStillPlan) {
  // Every type at the quota limit: sizes up to 50,000 workers; exact and the frontier stay finite.
  const PerformanceModel model = PrototypeModel();
  PlanProblem p = DefaultProblem(model, 0.9, 1800);
  for (int& q : p.max_counts) q = predictor::kMaxInstancesPerType;
  ASSERT_TRUE(ValidateProblem(model, p).ok());
  auto exact = Solve(model, p, Strategy::kExact);
  ASSERT_TRUE(exact.ok() && exact->feasible);
  const PlanResult small = SolveExact(model, DefaultProblem(model, 0.9, 1800));
  EXPECT_LE(exact->best.cost_usd, small.best.cost_usd) << "larger quotas cannot cost more";
  auto front = Frontier(model, p, Strategy::kExact);
  ASSERT_TRUE(front.ok());
  EXPECT_FALSE(front->empty());
}

TEST(Spotdnn, RefusesAListTooLongToSlideOverInsteadOfHanging) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem p = DefaultProblem(model, 0.9, 1800);
  for (int& q : p.max_counts) q = predictor::kMaxInstancesPerType;
  // 50,000 instances: about 2.5e9 windows.
  const absl::Status s = CheckSpotdnnSize(model, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("50000-instance list"));
  EXPECT_THAT(s.message(), HasSubstr("exact strategy"));
  EXPECT_EQ(Solve(model, p, Strategy::kSpotdnn).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const PlanResult direct = SolveSpotdnn(model, p);
  EXPECT_FALSE(direct.feasible);
  EXPECT_EQ(direct.evaluated, 0u);
  // A size cap bounds the window lengths: 10 lengths from each of the 50,000 starts.
  p.max_workers = 10;
  ASSERT_TRUE(CheckSpotdnnSize(model, p).ok());
  auto capped = Solve(model, p, Strategy::kSpotdnn);
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(capped->evaluated, 10u * 50'000);
}

// The heuristic's list is circular. With quotas g4dn.4xlarge 3, g3.8xlarge 2, g3.16xlarge 1 its
// list (fastest single worker first) is [g3.8x, g3.8x, g3.16x, g4dn, g4dn, g4dn]; one g4dn.4xlarge
// with one g3.8xlarge is only a window when it wraps from the list's end to its start (any
// window that does not wrap holds the g3.16xlarge between them). At loss 1.2 by 2271 s that
// wrapping window is the cheapest of all windows, checked here by scoring every window.
TEST(Spotdnn, BestWindowWrapsAroundTheList) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem p = DefaultProblem(model, 1.2, 2271);
  p.max_counts = {0, 3, 2, 1, 0};
  const auto& types = model.types();
  ASSERT_LT(types[2].single_worker_time_s, types[3].single_worker_time_s);
  ASSERT_LT(types[3].single_worker_time_s, types[1].single_worker_time_s);
  const std::vector<int> list = {2, 2, 3, 1, 1, 1};
  const int len = static_cast<int>(list.size());
  Candidate best_any, best_plain, c;
  for (int n = 1; n <= len; ++n) {
    for (int m = 0; m < len; ++m) {
      std::vector<int> counts(5, 0);
      for (int i = 0; i < n; ++i) ++counts[list[(m + i) % len]];
      if (!Score(model, p, counts, c) || !MeetsSlo(p, c)) continue;
      if (Better(c, best_any, p.objective)) best_any = c;
      if (m + n <= len && Better(c, best_plain, p.objective)) best_plain = c;
    }
  }
  ASSERT_THAT(best_any.counts, ElementsAreArray({0, 1, 1, 0, 0}));
  ASSERT_FALSE(best_plain.counts.empty());
  EXPECT_LT(best_any.cost_usd, best_plain.cost_usd) << "the wrapping window must win";
  const PlanResult r = SolveSpotdnn(model, p);
  ASSERT_TRUE(r.feasible);
  EXPECT_THAT(r.best.counts, ElementsAreArray(best_any.counts));
  EXPECT_EQ(r.best.cost_usd, best_any.cost_usd);
  EXPECT_EQ(r.evaluated, static_cast<uint64_t>((len - 1) * len + 1));
}

TEST(Exhaustive, RefusesAboveItsLimit) {
  const PerformanceModel model = PrototypeModel();
  const PlanProblem p = DefaultProblem(model, 0.9, 1800);
  EXPECT_EQ(SearchSpaceSize(p), 3u * 6 * 6 * 9 * 6);
  auto r = SolveExhaustive(model, p, 100);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("5832 clusters"));
  EXPECT_THAT(r.status().message(), HasSubstr("raise the limit"));
}

TEST(Replan, TakeoverInstancesMeetTheRemainingSlo) {
  const PerformanceModel model = PrototypeModel();
  // Plan (0.9, 1800): the optimum is [2,1,3,0,0]. Revoke a g3.8xlarge 600 s in.
  PlanProblem problem = DefaultProblem(model, 0.9, 1800);
  const PlanResult plan = SolveExact(model, problem);
  ASSERT_TRUE(plan.feasible);
  const double t_exp = plan.best.estimate.expected_iteration_time_s;
  JobProgress progress;
  progress.elapsed_s = 600;
  progress.cluster_before = plan.best.counts;
  progress.iterations_done = 600 / t_exp;
  std::vector<int> survivors = plan.best.counts;
  survivors[2] -= 1;
  problem.min_counts = survivors;
  problem.overhead_s = 30;
  auto r = Replan(model, problem, progress);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->feasible);
  EXPECT_NEAR(r->remaining_s, 1200, 1e-9);
  EXPECT_LE(r->plan.time_s, 1200);
  int launched = 0;
  for (size_t k = 0; k < survivors.size(); ++k) {
    EXPECT_GE(r->to_launch[k], 0);
    EXPECT_EQ(r->plan.counts[k], survivors[k] + r->to_launch[k]);
    launched += r->to_launch[k];
  }
  EXPECT_GE(launched, 1) << "the survivors alone are too slow for the rest of the job";
  // The rest of the job on the new cluster reaches the target: its loss curve from the current
  // loss ends at the target after the predicted iterations.
  EXPECT_GT(r->current_loss, 0.9);
  // Scoring the takeover cluster from the current loss gives the same answer.
  PlanProblem check = problem;
  check.current_loss = r->current_loss;
  Candidate again;
  ASSERT_TRUE(Score(model, check, r->plan.counts, again));
  EXPECT_NEAR(again.time_s, r->plan.time_s, 1e-9);
}

TEST(Replan, ImpossibleSaysSoWithTheBestFinishTime) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem problem = DefaultProblem(model, 0.9, 1800);
  problem.min_counts = {0, 0, 1, 0, 0};
  JobProgress progress;
  progress.elapsed_s = 1750;  // 50 s left, far too little
  progress.current_loss = 1.5;
  auto r = Replan(model, problem, progress);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->feasible);
  EXPECT_GT(r->best_finish_s, 1800);
  EXPECT_NEAR(r->best_finish_s, 1750 + r->fastest.time_s, 1e-9);
  // Past the deadline already: still the best finish.
  progress.elapsed_s = 2000;
  auto late = Replan(model, problem, progress);
  ASSERT_TRUE(late.ok());
  EXPECT_FALSE(late->feasible);
  EXPECT_GT(late->best_finish_s, 2000);
  // Already at the target: bad input.
  progress.current_loss = 0.8;
  EXPECT_EQ(Replan(model, problem, progress).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace spotdnn::provisioner

namespace spotdnn::provisioner {
namespace {

// The stop hook ends every strategy's search and its status comes back from Solve and Frontier.
TEST(StopCheck, EndsEverySearchWithItsStatus) {
  const PerformanceModel model = PrototypeModel();
  for (Strategy strategy : {Strategy::kExact, Strategy::kSpotdnn, Strategy::kExhaustive}) {
    PlanProblem p = DefaultProblem(model, 0.9, 1800);
    int polls = 0;
    p.stop = [&polls]() -> absl::Status {
      ++polls;
      return absl::DeadlineExceededError("stopped by the test");
    };
    // Every strategy polls at least once when it has more than a few thousand clusters or search
    // nodes to try (exact prunes well: it gets the largest quotas).
    for (int& quota : p.max_counts) quota = strategy == Strategy::kExact ? 10'000 : 40;
    auto result = Solve(model, p, strategy, /*exhaustive_limit=*/UINT64_MAX);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded)
        << static_cast<int>(strategy);
    EXPECT_EQ(result.status().message(), "stopped by the test");
    EXPECT_GE(polls, 1);
  }
  PlanProblem p = DefaultProblem(model, 0.9, 1800);
  for (int& quota : p.max_counts) quota = 40;
  p.stop = [] { return absl::CancelledError("left"); };
  EXPECT_EQ(Frontier(model, p, Strategy::kExact).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(Frontier(model, p, Strategy::kExhaustive, UINT64_MAX).status().code(),
            absl::StatusCode::kCancelled);
  // A check that never stops changes nothing.
  PlanProblem q = DefaultProblem(model, 0.9, 1800);
  const PlanResult plain = SolveExact(model, q);
  q.stop = [] { return absl::OkStatus(); };
  const PlanResult checked = SolveExact(model, q);
  EXPECT_TRUE(checked.stopped.ok());
  EXPECT_EQ(checked.best.counts, plain.best.counts);
  EXPECT_EQ(checked.evaluated, plain.evaluated);
}

TEST(Problem, ParameterServersAreBounded) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem p = DefaultProblem(model, 0.9, 1800);
  p.parameter_servers = 2147483647;
  const absl::Status s = ValidateProblem(model, p);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("parameter_servers = 2147483647: must be in [1, 1000]"));
}

}  // namespace
}  // namespace spotdnn::provisioner
