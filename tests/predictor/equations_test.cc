// Each equation against values worked by hand from the paper's formulas.
#include "predictor/equations.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace spotdnn::predictor {
namespace {

TEST(ContentionProbability, Eq9IsClampedToZeroAndOne) {
  const ContentionModel prototype{.a1 = 0.8, .b1 = -1.92};
  EXPECT_NEAR(ContentionProbability(prototype, 9), 0.8 * 3 - 1.92, 1e-12);  // 0.48
  EXPECT_NEAR(ContentionProbability(prototype, 6), 0.8 * std::sqrt(6.0) - 1.92, 1e-12);
  EXPECT_EQ(ContentionProbability(prototype, 1), 0.0);   // -1.12 clamps to 0
  EXPECT_EQ(ContentionProbability(prototype, 16), 1.0);  // 1.28 clamps to 1
}

TEST(WorkerBandwidth, Eq8SharesPsBandwidthOnlyWhenNeedExceedsShare) {
  // 9 workers on 1200 MB/s: share 133.33 < 142, so P * share + (1 - P) * B_req.
  EXPECT_NEAR(WorkerBandwidth(142, 1200, 9, 0.48), 0.48 * 1200.0 / 9 + 0.52 * 142, 1e-12);
  EXPECT_NEAR(WorkerBandwidth(142, 1200, 9, 0.48), 137.84, 1e-9);
  // 6 workers: share 200 >= 142, the worker gets what it needs whatever P is.
  EXPECT_EQ(WorkerBandwidth(142, 1200, 6, 0.9), 142);
  // Full contention: exactly the share.
  EXPECT_NEAR(WorkerBandwidth(300, 1000, 9, 1.0), 1000.0 / 9, 1e-12);
}

TEST(CommunicationTime, Eq7NetworkPlusPcie) {
  // 2 * 11.5 / 142 + 2 * 2 * 11.5 / 10000
  EXPECT_NEAR(CommunicationTime(11.5, 142, 2, 10000), 0.16197183098591550 + 0.0046, 1e-15);
  // The prototype's iteration time leaves the PCIe term out (weight 0).
  EXPECT_NEAR(CommunicationTime(11.5, 142, 8, 10000, 0.0), 23.0 / 142, 1e-15);
}

TEST(ExpectedIterationTime, Eq2HarmonicSum) {
  const std::vector<double> t = {0.5, 0.25};
  EXPECT_NEAR(ExpectedIterationTime(t), 1.0 / 6.0, 1e-15);
  const std::vector<double> same = {0.6, 0.6, 0.6};
  EXPECT_NEAR(ExpectedIterationTime(same), 0.2, 1e-15);
}

TEST(ConvergenceCoefficient, Eq5RelativeToTheFastestWorker) {
  // Local training ([1, 0, ...]) is the reference: one worker gives R = 0.
  EXPECT_EQ(ConvergenceCoefficient(std::vector<double>{5}), 0);
  // v = 4: w = [0.75, 0.25] -> sqrt(0.25^2 + 0.25^2).
  EXPECT_NEAR(ConvergenceCoefficient(std::vector<double>{1, 3}), std::sqrt(0.125), 1e-15);
  // Two equal workers: sqrt(0.5^2 + 0.5^2).
  EXPECT_NEAR(ConvergenceCoefficient(std::vector<double>{2, 2}), std::sqrt(0.5), 1e-15);
  // Four equal: sqrt(0.75^2 + 3 * 0.25^2) = sqrt(0.75).
  EXPECT_NEAR(ConvergenceCoefficient(std::vector<double>{7, 7, 7, 7}), std::sqrt(0.75), 1e-15);
}

TEST(Loss, Eq3AndItsInverse) {
  const LossModel m{.g1 = 100, .g2 = -0.5, .g3 = 1000, .g4 = 1, .g5 = 0.2};
  // (-0.5 * 200 + 1000) * sqrt((0.5 + 1) * 4) / (900 + 100) + 0.2
  const double expected = 900 * std::sqrt(6.0) / 1000 + 0.2;
  EXPECT_NEAR(LossAfter(m, 200, 0.5, 4, 900), expected, 1e-12);
  EXPECT_NEAR(expected, 2.4045407685048604, 1e-12);
  EXPECT_NEAR(IterationsToLoss(m, 200, 0.5, 4, expected), 900, 1e-9);
  // L = 1.2: 900 * sqrt(6) / 1.0 - 100
  EXPECT_NEAR(IterationsToLoss(m, 200, 0.5, 4, 1.2), 900 * std::sqrt(6.0) - 100, 1e-9);
}

TEST(LargestBatch, Eq10PowerOfTwoFloor) {
  const MemoryModel m{.a2 = 100, .b2 = -50};
  EXPECT_EQ(LargestBatch(m, 16), 1024);  // 1550 -> 2^10
  EXPECT_EQ(LargestBatch(m, 12), 1024);  // 1150 -> 2^10
  EXPECT_EQ(LargestBatch(m, 8), 512);    // 750 -> 2^9
  EXPECT_EQ(LargestBatch(m, 0.4), 0);    // -10: no batch fits
  EXPECT_EQ(LargestBatch({.a2 = 0, .b2 = 1}, 8), 1);
}

}  // namespace
}  // namespace spotdnn::predictor
