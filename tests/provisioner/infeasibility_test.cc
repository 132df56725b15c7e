// Why no plan meets an SLO (provisioner/infeasibility.h): the fastest and cheapest plans that
// show it, and a reason that names the limit no cluster meets.
#include "provisioner/infeasibility.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/prototype_inputs.h"

namespace spotdnn::provisioner {
namespace {

using ::testing::HasSubstr;

PerformanceModel PrototypeModel() {
  return *PerformanceModel::Create(predictor::testing_inputs::PrototypeProfile(),
                                   predictor::testing_inputs::PrototypeCatalog());
}

TEST(Infeasibility, ATooShortDeadlineQuotesTheFastestPlan) {
  const PerformanceModel model = PrototypeModel();
  const PlanResult unlimited = SolveFastest(model, DefaultProblem(model, 0.8));
  ASSERT_TRUE(unlimited.feasible);
  // Half the fastest time: nothing within the quotas makes it.
  PlanProblem problem = DefaultProblem(model, 0.8, unlimited.best.time_s / 2);
  ASSERT_FALSE(SolveExact(model, problem).feasible);
  auto why = ExplainInfeasible(model, problem);
  ASSERT_TRUE(why.ok()) << why.status();
  ASSERT_TRUE(why->fastest.feasible);
  EXPECT_DOUBLE_EQ(why->fastest.best.time_s, unlimited.best.time_s);
  EXPECT_FALSE(BudgetBinds(problem, why->cheapest));
  EXPECT_THAT(why->reason, HasSubstr("the fastest reaches loss 0.8 in"));
  EXPECT_THAT(why->reason, HasSubstr("budget none"));
}

TEST(Infeasibility, ATooSmallBudgetQuotesTheCheapestPlan) {
  const PerformanceModel model = PrototypeModel();
  PlanProblem problem = DefaultProblem(model, 0.8);
  const PlanResult cheapest = SolveCheapest(model, problem);
  ASSERT_TRUE(cheapest.feasible);
  problem.budget_usd = cheapest.best.cost_usd / 2;
  ASSERT_FALSE(SolveExact(model, problem).feasible);
  EXPECT_TRUE(BudgetBinds(problem, cheapest));
  auto why = ExplainInfeasible(model, problem);
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_DOUBLE_EQ(why->cheapest.best.cost_usd, cheapest.best.cost_usd);
  EXPECT_THAT(why->reason, HasSubstr("the cheapest that reaches loss 0.8"));
  EXPECT_THAT(why->reason, HasSubstr("(budget $"));
}

TEST(Infeasibility, AnUnreachableLossSaysSo) {
  const PerformanceModel model = PrototypeModel();
  // A loss below what the loss model ever reaches.
  const PlanProblem problem = DefaultProblem(model, 1e-9);
  auto why = ExplainInfeasible(model, problem);
  ASSERT_TRUE(why.ok()) << why.status();
  EXPECT_FALSE(why->fastest.feasible);
  EXPECT_EQ(why->reason, "no cluster within the quotas reaches the target loss under the model");
}

}  // namespace
}  // namespace spotdnn::provisioner
