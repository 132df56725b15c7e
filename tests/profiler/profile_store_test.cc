// The SQLite profile store: round trips, versions, reopening, all-or-nothing batches and
// concurrent writers.
#include "profiler/profile_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace spotdnn::profiler {
namespace {

using ::testing::HasSubstr;

class ProfileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spotdnn-store-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    path_ = (dir_ / "sub" / "profiles.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ProfileStore> OpenStore() {
    auto store = ProfileStore::Open(path_);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  static Sample MakeSample(const std::string& job, std::int64_t step) {
    Sample s;
    s.job_id = job;
    s.worker_id = "w1";
    s.instance_type = "p3.2xlarge";
    s.gpu_type = "V100";
    s.gpus = 1;
    s.batch_size = 128;
    s.step = step;
    s.wall_time_s = 1.7e9 + step;
    s.iteration_time_s = 0.25;
    s.loss = 3.5;
    s.bytes_sent = 11'540'000;
    s.bytes_received = 11'540'001;
    s.gpu_memory_gib = 7.5;
    s.cluster_workers = 4;
    s.communication_time_s = 0.08;
    s.cluster_steps_per_s = 15.5;
    return s;
  }

  std::filesystem::path dir_;
  std::string path_;
};

TEST_F(ProfileStoreTest, ProfilesAreVersionedByName) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto doc = [](const std::string& body) {
    return [body](int version) { return body + "@" + std::to_string(version); };
  };
  EXPECT_EQ(*store->PutProfile("resnet", doc("a")), 1);
  EXPECT_EQ(*store->PutProfile("resnet", doc("b")), 2);
  EXPECT_EQ(*store->PutProfile("vgg", doc("c")), 1);
  EXPECT_EQ(store->GetProfile("resnet")->json, "b@2");
  EXPECT_EQ(store->GetProfile("resnet", 1)->json, "a@1");
  auto list = store->ListProfiles();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "resnet");
  EXPECT_EQ((*list)[0].version, 2);
  EXPECT_EQ((*list)[1].name, "vgg");

  auto missing = store->GetProfile("resnet", 9);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(), "profile \"resnet\" has no version 9");
  EXPECT_EQ(store->GetProfile("bert").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->PutProfile("", doc("x")).status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(*store->DeleteProfile("resnet", 2), 1);
  EXPECT_EQ(store->GetProfile("resnet")->version, 1);
  EXPECT_EQ(*store->DeleteProfile("resnet"), 1);
  EXPECT_EQ(store->DeleteProfile("resnet").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ProfileStoreTest, SamplesAndProfilesSurviveAReopen) {
  {
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    std::vector<Sample> samples = {MakeSample("a", 1), MakeSample("a", 2), MakeSample("b", 1)};
    ASSERT_TRUE(store->AddSamples(samples, "test").ok());
    ASSERT_TRUE(
        store->PutProfile("p", [](int v) { return "{\"version\":" + std::to_string(v) + "}"; })
            .ok());
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->CountSamples(), 3);
  const std::vector<std::string> only_a = {"a"};
  auto loaded = store->LoadSamples(only_a);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  const Sample expected = MakeSample("a", 2);
  const Sample& s = (*loaded)[1];
  EXPECT_EQ(s.job_id, expected.job_id);
  EXPECT_EQ(s.worker_id, expected.worker_id);
  EXPECT_EQ(s.instance_type, expected.instance_type);
  EXPECT_EQ(s.gpu_type, expected.gpu_type);
  EXPECT_EQ(s.gpus, expected.gpus);
  EXPECT_EQ(s.batch_size, expected.batch_size);
  EXPECT_EQ(s.step, expected.step);
  EXPECT_DOUBLE_EQ(s.wall_time_s, expected.wall_time_s);
  EXPECT_DOUBLE_EQ(s.iteration_time_s, expected.iteration_time_s);
  EXPECT_DOUBLE_EQ(s.loss, expected.loss);
  EXPECT_EQ(s.bytes_sent, expected.bytes_sent);
  EXPECT_EQ(s.bytes_received, expected.bytes_received);
  EXPECT_DOUBLE_EQ(s.gpu_memory_gib, expected.gpu_memory_gib);
  EXPECT_EQ(s.cluster_workers, expected.cluster_workers);
  EXPECT_DOUBLE_EQ(s.communication_time_s, expected.communication_time_s);
  EXPECT_DOUBLE_EQ(s.cluster_steps_per_s, expected.cluster_steps_per_s);
  EXPECT_EQ(store->GetProfile("p")->json, "{\"version\":1}");
  auto runs = store->ListRuns();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[0].samples, 2);
  EXPECT_EQ((*runs)[0].source, "test");
}

TEST_F(ProfileStoreTest, ABatchWithABadSampleStoresNothing) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->AddSamples(std::vector<Sample>{MakeSample("a", 1)}, "t").ok());
  std::vector<Sample> batch;
  for (int i = 0; i < 1000; ++i) batch.push_back(MakeSample("b", i));
  batch[500].loss = std::nan("");
  const absl::Status s = store->AddSamples(batch, "t");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "samples[500]: loss = nan: must be finite");
  EXPECT_EQ(*store->CountSamples(), 1);
  EXPECT_EQ(store->ListRuns()->size(), 1u);
}

TEST_F(ProfileStoreTest, ConcurrentWritersOnTheSameFileLoseNothing) {
  auto first = OpenStore();
  ASSERT_NE(first, nullptr);
  constexpr int kWriters = 4, kBatches = 25, kBatch = 200;
  std::vector<std::thread> writers;
  std::vector<std::vector<int>> versions(kWriters);
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      // Each writer its own connection, as separate processes would have.
      auto store = ProfileStore::Open(path_);
      ASSERT_TRUE(store.ok()) << store.status();
      for (int b = 0; b < kBatches; ++b) {
        std::vector<Sample> batch;
        // Steps go on from batch to batch (the same step again would be the same sample).
        for (int i = 0; i < kBatch; ++i) {
          batch.push_back(MakeSample("job" + std::to_string(w), b * kBatch + i + 1));
        }
        ASSERT_TRUE((*store)->AddSamples(batch, "t").ok());
        auto v = (*store)->PutProfile("shared", [](int v) { return std::to_string(v); });
        ASSERT_TRUE(v.ok()) << v.status();
        versions[w].push_back(*v);
      }
    });
  }
  for (std::thread& t : writers) t.join();
  EXPECT_EQ(*first->CountSamples(), kWriters * kBatches * kBatch);
  std::set<int> all;
  for (const auto& v : versions) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kWriters * kBatches));  // no version given twice
  EXPECT_EQ(*all.rbegin(), kWriters * kBatches);
  EXPECT_EQ(first->GetProfile("shared")->version, kWriters * kBatches);
}

TEST_F(ProfileStoreTest, NewSampleFieldsRoundTripAndAJobNamesItsRuns) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Sample s = MakeSample("icac/v100-4/run-1", 0);
  s.accuracy = 0.92;
  s.parameter_servers = 2;
  s.cluster = "gce-k80=2,gce-v100=1";
  s.cluster_workers = 3;
  Sample other = MakeSample("icac/v100-4/run-2", 0);
  Sample unrelated = MakeSample("icac-other", 0);
  Sample lookalike = MakeSample("icac/v100-40/run-1", 0);
  ASSERT_TRUE(store->AddSamples({s, other, unrelated, lookalike}, "test").ok());
  auto runs = store->LoadSamples({"icac/v100-4"});
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);  // its two runs, not "icac-other" or "icac/v100-40"
  EXPECT_DOUBLE_EQ((*runs)[0].accuracy, 0.92);
  EXPECT_EQ((*runs)[0].parameter_servers, 2);
  EXPECT_EQ((*runs)[0].cluster, "gce-k80=2,gce-v100=1");
  // Naming a job and one of its runs reads the run once.
  auto both = store->LoadSamples({"icac", "icac/v100-4/run-1"});
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(both->size(), 3u);
}

TEST_F(ProfileStoreTest, ADatabaseFromBeforeTheNewColumnsIsMigrated) {
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  {
    // The samples table as the first release made it.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    const char* schema =
        "CREATE TABLE runs (job_id TEXT PRIMARY KEY, source TEXT NOT NULL, created_unix_s REAL "
        "NOT NULL);"
        "CREATE TABLE samples (job_id TEXT NOT NULL, worker_id TEXT NOT NULL, instance_type "
        "TEXT NOT NULL, gpu_type TEXT NOT NULL, gpus INTEGER NOT NULL, batch_size INTEGER NOT "
        "NULL, step INTEGER NOT NULL, wall_time_s REAL NOT NULL, iteration_time_s REAL NOT "
        "NULL, loss REAL NOT NULL, bytes_sent INTEGER NOT NULL, bytes_received INTEGER NOT "
        "NULL, gpu_memory_gib REAL NOT NULL, cluster_workers INTEGER NOT NULL, "
        "communication_time_s REAL NOT NULL, cluster_steps_per_s REAL NOT NULL);"
        "INSERT INTO runs VALUES ('old', 'x', 0);"
        "INSERT INTO samples VALUES ('old', 'w', 'p3.2xlarge', 'V100', 1, 64, 5, 1.0, 0.5, 2.0, "
        "0, 0, 0, 1, 0, 0);";
    ASSERT_EQ(sqlite3_exec(db, schema, nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Sample s = MakeSample("new", 1);
  s.parameter_servers = 2;
  ASSERT_TRUE(store->AddSamples({s}, "test").ok());
  auto all = store->LoadSamples({});
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].job_id, "old");
  EXPECT_EQ((*all)[0].parameter_servers, 0);
  EXPECT_EQ((*all)[1].parameter_servers, 2);
}

TEST_F(ProfileStoreTest, OpenNamesAnUnusablePath) {
  auto store = ProfileStore::Open("/proc/no-such-dir/x.db");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr("/proc/no-such-dir/x.db"));
}

}  // namespace
}  // namespace spotdnn::profiler

namespace spotdnn::profiler {
namespace {

// Issue 18: importing the same samples twice stores them once (a sample is its job, worker and
// step); samples without a step (0) are never taken for the same one.
TEST_F(ProfileStoreTest, TheSameJobWorkerAndStepIsStoredOnce) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::vector<Sample> batch = {MakeSample("j", 1), MakeSample("j", 2), MakeSample("j", 3)};
  std::int64_t duplicates = -1;
  ASSERT_TRUE(store->AddSamples(batch, "a.log", &duplicates).ok());
  EXPECT_EQ(duplicates, 0);
  batch.push_back(MakeSample("j", 4));
  ASSERT_TRUE(store->AddSamples(batch, "a.log", &duplicates).ok());
  EXPECT_EQ(duplicates, 3);
  EXPECT_EQ(*store->CountSamples(), 4);
  // Another worker, or another job, at the same steps: new samples.
  Sample other = MakeSample("j", 1);
  other.worker_id = "w2";
  ASSERT_TRUE(store->AddSamples({other, MakeSample("k", 1)}, "b.log", &duplicates).ok());
  EXPECT_EQ(duplicates, 0);
  // Step 0 (a log without steps): every sample counts.
  ASSERT_TRUE(store->AddSamples({MakeSample("z", 0), MakeSample("z", 0)}, "c.log").ok());
  EXPECT_EQ(*store->CountSamples(), 8);
}

}  // namespace
}  // namespace spotdnn::profiler
