// A global batch split over mixed GPU types by speed, within each GPU's memory, with gradient
// accumulation where it does not fit (predictor/allreduce.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "predictor/allreduce.h"
#include "tests/testing/allreduce_models.h"

namespace spotdnn::predictor {
namespace {

AllReduceModel RandomModel(std::mt19937& rng, const std::string& gpu_type) {
  return testing_models::RandomAllReduceModel(rng, gpu_type);
}

// Three GPU types of random speed, each on instances of 1 and 4 GPUs (GPUs of 16, 24 and 32 GiB).
struct World {
  WorkloadProfile profile;
  InstanceCatalog catalog;
};

World RandomWorld(std::mt19937& rng) {
  World w;
  w.profile.name = "w";
  w.profile.sync = SyncKind::kAllReduce;
  const char* gpus[] = {"A", "B", "C"};
  for (int g = 0; g < 3; ++g) {
    w.profile.allreduce.push_back(RandomModel(rng, gpus[g]));
    for (int k : {1, 4}) {
      InstanceType t;
      t.name = std::string(gpus[g]) + "x" + std::to_string(k);
      t.gpu_type = gpus[g];
      t.gpus = k;
      t.gpu_memory_gib = 16 + 8 * g;
      t.spot_price_per_hour = 0.5 * k;
      t.on_demand_price_per_hour = 1.5 * k;
      w.catalog.types.push_back(t);
    }
  }
  w.catalog.name = "c";
  return w;
}

Cluster RandomCluster(std::mt19937& rng, size_t types) {
  Cluster c;
  c.counts.assign(types, 0);
  std::uniform_int_distribution<int> count(0, 3);
  while (std::all_of(c.counts.begin(), c.counts.end(), [](int n) { return n == 0; })) {
    for (int& n : c.counts) n = count(rng);
  }
  return c;
}

int Ranks(const World& w, const Cluster& c) {
  int ranks = 0;
  for (size_t i = 0; i < c.counts.size(); ++i) ranks += c.counts[i] * w.catalog.types[i].gpus;
  return ranks;
}

// With the same global batch, the split by speed never takes longer than every rank at B / ranks,
// on any mix of GPU types and placements (the even split is one of the splits it chooses among).
TEST(AllReduceSplit, NeverSlowerThanTheEvenSplit) {
  std::mt19937 rng(33);
  int uneven_faster = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    const World w = RandomWorld(rng);
    const Cluster c = RandomCluster(rng, w.catalog.types.size());
    const int local = std::uniform_int_distribution<int>(1, 96)(rng);
    const int global = Ranks(w, c) * local;
    auto even = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(100), local);
    ASSERT_TRUE(even.ok()) << even.status();
    auto split = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(100), 0, global);
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_LE(split->estimate.expected_iteration_time_s,
              even->estimate.expected_iteration_time_s * (1 + 1e-12))
        << "trial " << trial << ", local batch " << local;
    EXPECT_EQ(split->estimate.wa_batch, global);
    EXPECT_EQ(split->accumulation_steps, 1);
    if (split->estimate.expected_iteration_time_s <
        even->estimate.expected_iteration_time_s * (1 - 1e-9)) {
      ++uneven_faster;
    }
  }
  // Mixed types of different speeds: the split is strictly faster in most trials.
  EXPECT_GT(uneven_faster, 1000);
}

// The slowest rank's compute of the best integer split, by trying every split (small cases).
double BruteForceCompute(const std::vector<RankGroup>& groups, int64_t global_batch) {
  std::vector<int> batches;  // one per rank
  std::vector<const RankGroup*> owner;
  for (const RankGroup& g : groups) {
    for (int64_t r = 0; r < g.ranks; ++r) owner.push_back(&g);
  }
  double best = std::numeric_limits<double>::infinity();
  std::function<void(size_t, int64_t, double)> go = [&](size_t r, int64_t left, double worst) {
    if (worst >= best) return;
    if (r + 1 == owner.size()) {
      if (left < 1 || left > owner[r]->cap) return;
      best = std::min(best, std::max(worst, owner[r]->fixed_s + owner[r]->per_sample_s * left));
      return;
    }
    for (int b = 1; b <= owner[r]->cap && b <= left; ++b) {
      go(r + 1, left - b, std::max(worst, owner[r]->fixed_s + owner[r]->per_sample_s * b));
    }
  };
  go(0, global_batch, 0);
  return best;
}

// The split sums to the global batch, keeps every rank in [1, its cap], and its slowest rank is
// the least any integer split achieves.
TEST(AllReduceSplit, SumsToTheGlobalBatchWithinCapsAndIsOptimal) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<RankGroup> groups(std::uniform_int_distribution<int>(1, 3)(rng));
    int64_t ranks = 0, capacity = 0;
    for (RankGroup& g : groups) {
      g.ranks = std::uniform_int_distribution<int>(1, 2)(rng);
      g.fixed_s = 0.05 * u(rng);
      g.per_sample_s = 1e-3 + 1e-2 * u(rng);
      g.cap = std::uniform_int_distribution<int>(1, 12)(rng);
      ranks += g.ranks;
      capacity += g.ranks * g.cap;
    }
    const int64_t global = std::uniform_int_distribution<int64_t>(ranks, capacity)(rng);
    auto split = SplitGlobalBatch(groups, global);
    ASSERT_TRUE(split.ok()) << split.status();
    int64_t sum = 0;
    double slowest = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      ASSERT_GE(split->high[i], 0);
      ASSERT_LT(split->high[i], groups[i].ranks);
      ASSERT_GE(split->low[i], 1);
      ASSERT_LE(split->low[i] + (split->high[i] > 0 ? 1 : 0), groups[i].cap) << "trial " << trial;
      sum += groups[i].ranks * split->low[i] + split->high[i];
      slowest = std::max(slowest, groups[i].fixed_s + groups[i].per_sample_s *
                                                          (split->low[i] + (split->high[i] > 0)));
    }
    EXPECT_EQ(sum, global) << "trial " << trial;
    EXPECT_DOUBLE_EQ(split->compute_s, slowest);
    EXPECT_NEAR(split->compute_s, BruteForceCompute(groups, global), 1e-12) << "trial " << trial;
  }
}

// Two T4 instances (4 GPUs, 16 GiB) and one V100 (1 GPU, 32 GiB): the memory model a2 = 4,
// b2 = 0 caps a T4 at 64 and a V100 at 128 samples, 640 in all.
World CappedWorld() {
  World w;
  w.profile.name = "w";
  w.profile.sync = SyncKind::kAllReduce;
  w.profile.memory = MemoryModel{4, 0};
  std::mt19937 rng(1);
  w.profile.allreduce = {RandomModel(rng, "T4"), RandomModel(rng, "V100")};
  w.profile.allreduce[1].compute_per_sample_s = w.profile.allreduce[0].compute_per_sample_s / 4;
  InstanceType t4{.name = "t4x4", .gpu_type = "T4", .gpus = 4, .gpu_memory_gib = 16};
  InstanceType v100{.name = "v100", .gpu_type = "V100", .gpus = 1, .gpu_memory_gib = 32};
  w.catalog.name = "c";
  w.catalog.types = {t4, v100};
  return w;
}

TEST(AllReduceSplit, AccumulatesExactlyWhenTheBatchExceedsTheClusterMemory) {
  const World w = CappedWorld();
  const Cluster c{{2, 1}};
  EXPECT_EQ(LocalBatchCap(w.profile, 16), 64);
  EXPECT_EQ(LocalBatchCap(w.profile, 32), 128);
  for (int global = 600; global <= 1400; ++global) {
    auto p = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0, global);
    ASSERT_TRUE(p.ok()) << p.status();
    const int k = (global + 639) / 640;
    ASSERT_EQ(p->accumulation_steps, k) << "global batch " << global;
    for (const WorkerBreakdown& wb : p->workers) {
      EXPECT_LE(wb.local_batch, wb.type_index == 0 ? 64 : 128) << "global batch " << global;
    }
  }
  // At the caps' sum every rank is at its cap, in one step.
  auto full = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0, 640);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->workers[0].local_batch, 64);
  EXPECT_EQ(full->workers[1].local_batch, 128);
  // Twice the caps: two micro-steps at the caps, the all-reduce overlapping the second only.
  auto twice = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0, 1280);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->accumulation_steps, 2);
  EXPECT_EQ(twice->workers[0].local_batch, 64);
  const double compute = twice->workers[0].compute_time_s > twice->workers[1].compute_time_s
                             ? twice->workers[0].compute_time_s
                             : twice->workers[1].compute_time_s;
  EXPECT_NEAR(twice->estimate.expected_iteration_time_s,
              compute + full->estimate.expected_iteration_time_s, 1e-12);
}

// One local batch for every rank: each rank must hold it, as the split's ranks must.
TEST(AllReduceSplit, AnEvenLocalBatchAboveAGpusMemoryIsRefusedNamingTheType) {
  const World w = CappedWorld();
  const Cluster c{{2, 1}};
  auto fits = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 64);
  EXPECT_TRUE(fits.ok()) << fits.status();
  auto over = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 65);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(over.status().message().find("local_batch = 65"), std::string::npos) << over.status();
  EXPECT_NE(over.status().message().find("t4x4"), std::string::npos) << over.status();
  // The V100 alone holds 128.
  auto v100 = PredictAllReduce(w.profile, w.catalog, Cluster{{0, 1}}, Target::Iterations(10), 128);
  EXPECT_TRUE(v100.ok()) << v100.status();
}

TEST(AllReduceSplit, TakesTheProfilesGlobalBatchAndRefusesBadOnes) {
  World w = CappedWorld();
  const Cluster c{{2, 1}};  // 9 ranks
  // Neither a local nor a global batch: the message says what to give.
  auto none = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("global batch"), std::string::npos) << none.status();
  // The profile's global batch, unless the request gives one.
  w.profile.global_batch_size = 360;
  auto declared = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0);
  ASSERT_TRUE(declared.ok()) << declared.status();
  EXPECT_EQ(declared->estimate.wa_batch, 360);
  auto given = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0, 90);
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ(given->estimate.wa_batch, 90);
  // Fewer samples than ranks, a negative batch, both kinds at once.
  auto small = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0, 8);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("global_batch = 8"), std::string::npos);
  EXPECT_NE(small.status().message().find("9 ranks"), std::string::npos) << small.status();
  auto negative = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 0, -5);
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find("global_batch = -5"), std::string::npos);
  auto both = PredictAllReduce(w.profile, w.catalog, c, Target::Iterations(10), 8, 90);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  // A profile's own global batch is checked with it.
  w.profile.global_batch_size = -1;
  EXPECT_NE(w.profile.Validate().message().find("global_batch_size = -1"), std::string::npos);
}

}  // namespace
}  // namespace spotdnn::predictor
