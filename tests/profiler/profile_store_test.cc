// The profile store on SQLite and PostgreSQL: round trips, versions, reopening, all-or-nothing
// batches, one sample per (job, worker, step), and concurrent writers.
#include "profiler/profile_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::profiler {
namespace {

using ::testing::HasSubstr;

using testing_util::StoreBackend;

// SQLite files (the tests of databases earlier releases wrote); ProfileStoreTest below runs on
// both backends.
class SqliteProfileStoreTest : public ::testing::Test {
 protected:
  virtual StoreBackend backend() const { return StoreBackend::kSqlite; }
  void SetUp() override {
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::replace(name.begin(), name.end(), '/', '-');
    dir_ = std::filesystem::temp_directory_path() /
           ("spotdnn-store-" + std::to_string(getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    auto spec = testing_util::FreshStoreSpec(backend(), (dir_ / "sub" / "profiles.db").string());
    ASSERT_TRUE(spec.ok()) << spec.status();
    path_ = *spec;
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
  std::string path_;  // the store's spec: a file, or a fresh PostgreSQL database
};

class ProfileStoreTest : public SqliteProfileStoreTest,
                         public ::testing::WithParamInterface<StoreBackend> {
 protected:
  StoreBackend backend() const override { return GetParam(); }
};

INSTANTIATE_TEST_SUITE_P(Backends, ProfileStoreTest,
                         ::testing::Values(StoreBackend::kSqlite, StoreBackend::kPostgres),
                         testing_util::StoreBackendName);

TEST_P(ProfileStoreTest, ProfilesAreVersionedByName) {
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

TEST_P(ProfileStoreTest, SamplesAndProfilesSurviveAReopen) {
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

TEST_P(ProfileStoreTest, ABatchWithABadSampleStoresNothing) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(store->AddSamples(std::vector<Sample>{MakeSample("a", 1)}, "t").ok());
  std::vector<Sample> batch;
  for (int i = 0; i < 1000; ++i) batch.push_back(MakeSample("b", i));
  batch[500].loss = std::nan("");
  const absl::Status s = store->AddSamples(batch, "t").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "samples[500]: loss = nan: must be finite");
  EXPECT_EQ(*store->CountSamples(), 1);
  EXPECT_EQ(store->ListRuns()->size(), 1u);
}

TEST_P(ProfileStoreTest, ConcurrentWritersOnTheSameFileLoseNothing) {
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
        for (int i = 0; i < kBatch; ++i) {
          batch.push_back(MakeSample("job" + std::to_string(w), b * kBatch + i));
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

TEST_P(ProfileStoreTest, NewSampleFieldsRoundTripAndAJobNamesItsRuns) {
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

TEST_P(ProfileStoreTest, SampleMetricsRoundTrip) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Sample s = MakeSample("m", 1);
  s.metrics = {{"top5", 0.1 + 0.2}, {"eval/BLEU", -27.125}, {"x:y", 1e-300}};
  Sample none = MakeSample("m", 2);
  ASSERT_TRUE(store->AddSamples({s, none}, "test").ok());
  auto back = store->LoadSamples({"m"});
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].metrics, s.metrics);  // exactly: 17 significant digits
  EXPECT_TRUE((*back)[1].metrics.empty());
  Sample bad = MakeSample("m", 3);
  bad.metrics["a,b"] = 1;  // a name the column could not hold is refused up front
  EXPECT_EQ(store->AddSamples({bad}, "test").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SqliteProfileStoreTest, ADatabaseFromBeforeTheNewColumnsIsMigrated) {
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

TEST_F(SqliteProfileStoreTest, OpenNamesAnUnusablePath) {
  auto store = ProfileStore::Open("/proc/no-such-dir/x.db");
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr("/proc/no-such-dir/x.db"));
}

}  // namespace
}  // namespace spotdnn::profiler

namespace spotdnn::profiler {
namespace {

TEST_P(ProfileStoreTest, StoresEachJobWorkerAndStepOnce) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::vector<Sample> batch;
  for (int step = 1; step <= 100; ++step) batch.push_back(MakeSample("job", step));
  auto first = store->AddSamples(batch, "t");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(*first, 100u);
  // A resend of everything plus ten new steps, and a step twice within one batch: only the ten
  // new ones are stored, the first copy kept.
  for (int step = 101; step <= 110; ++step) batch.push_back(MakeSample("job", step));
  Sample again = MakeSample("job", 105);
  again.loss = 9;
  batch.push_back(again);
  auto second = store->AddSamples(batch, "t");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*second, 10u);
  EXPECT_EQ(*store->CountSamples(), 110);
  // The same step of another worker, or of another job, is another sample.
  Sample other_worker = MakeSample("job", 1);
  other_worker.worker_id = "w2";
  EXPECT_EQ(*store->AddSamples(std::vector<Sample>{other_worker, MakeSample("job2", 1)}, "t"), 2u);
  const std::vector<std::string> job = {"job"};
  EXPECT_EQ(*store->CountSamples(job), 111);
  auto progress = store->JobProgress("job");
  ASSERT_TRUE(progress.ok());
  ASSERT_EQ(progress->size(), 2u);
  EXPECT_EQ((*progress)[0].worker_id, "w1");
  EXPECT_EQ((*progress)[0].samples, 110);
  EXPECT_EQ((*progress)[0].steps, 110);
  auto loaded = store->LoadSamples(job);
  ASSERT_TRUE(loaded.ok());
  for (const Sample& s : *loaded) {
    if (s.step == 105) {
      EXPECT_EQ(s.loss, 3.5);  // the first one stored
    }
  }
}

// A stream's progress says where it started: a rank restarted from a checkpoint reports under a
// new worker id from the step after the checkpoint on, and its first step and wall time are
// those of its first sample, not of the stream before it. A sample without a step or a wall time
// (a memory measurement) does not count as a start.
TEST_P(ProfileStoreTest, AStreamsProgressSaysItsFirstStepAndWallTime) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::vector<Sample> batch;
  for (int step = 1; step <= 40; ++step) batch.push_back(MakeSample("job", step));
  for (int step = 31; step <= 45; ++step) {  // resumed from step 30, 100 s later
    Sample s = MakeSample("job", step);
    s.worker_id = "w1-start2";
    s.wall_time_s += 100;
    batch.push_back(s);
  }
  Sample memory = MakeSample("job", 0);
  memory.worker_id = "w1-start2";
  memory.wall_time_s = 0;
  batch.push_back(memory);
  ASSERT_TRUE(store->AddSamples(batch, "t").ok());
  auto progress = store->JobProgress("job");
  ASSERT_TRUE(progress.ok()) << progress.status();
  ASSERT_EQ(progress->size(), 2u);
  EXPECT_EQ((*progress)[0].worker_id, "w1");
  EXPECT_EQ((*progress)[0].first_step, 1);
  EXPECT_DOUBLE_EQ((*progress)[0].first_wall_time_s, 1.7e9 + 1);
  EXPECT_EQ((*progress)[0].steps, 40);
  EXPECT_EQ((*progress)[1].worker_id, "w1-start2");
  EXPECT_EQ((*progress)[1].first_step, 31);
  EXPECT_DOUBLE_EQ((*progress)[1].first_wall_time_s, 1.7e9 + 131);
  EXPECT_EQ((*progress)[1].steps, 45);
  EXPECT_EQ((*progress)[1].samples, 16);
}

// A batch larger than one multi-row INSERT (256 rows, then halves: 602 samples go in 6
// statements): repeats within one statement and across statements keep the first copy, the
// samples keep their order, and a resend of the whole batch stores nothing.
TEST_P(ProfileStoreTest, ABatchOfSeveralStatementsKeepsItsOrderAndFirstCopies) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::vector<Sample> batch;
  std::int64_t step = 0;
  for (int i = 0; i < 602; ++i) {
    Sample s = MakeSample("big", i == 100 ? 50 : i == 601 ? 1 : ++step);
    if (i == 100 || i == 601) s.loss = 9;  // a repeat within the first statement, and the last
    batch.push_back(s);
  }
  ASSERT_EQ(step, 600);
  auto stored = store->AddSamples(batch, "t");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(*stored, 600u);
  auto loaded = store->LoadSamples({});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 600u);
  for (size_t i = 0; i < loaded->size(); ++i) {
    EXPECT_EQ((*loaded)[i].step, static_cast<std::int64_t>(i) + 1);
    EXPECT_EQ((*loaded)[i].loss, 3.5) << "step " << (*loaded)[i].step;
  }
  EXPECT_EQ(*store->AddSamples(batch, "t"), 0u);
  EXPECT_EQ(*store->CountSamples(), 600);
}

// Step 0 is a sample without a step number (a memory measurement): those differ by their fields.
TEST_P(ProfileStoreTest, SamplesWithoutAStepAreToldApartByTheirFields) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::vector<Sample> memory;
  for (int batch : {32, 64, 128}) {
    Sample s = MakeSample("memory", 0);
    s.batch_size = batch;
    s.gpu_memory_gib = batch / 16.0;
    memory.push_back(s);
  }
  EXPECT_EQ(*store->AddSamples(memory, "t"), 3u);
  EXPECT_EQ(*store->AddSamples(memory, "t"), 0u);  // the same rows again: a resend
  EXPECT_EQ(*store->CountSamples(), 3);
}

TEST_F(SqliteProfileStoreTest, ADatabaseFromBeforeTheKeyLosesItsDuplicatesOnOpen) {
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  // The schema before samples were keyed, with a step stored twice and once.
  const char* old_schema = R"sql(
    CREATE TABLE runs (job_id TEXT PRIMARY KEY, source TEXT NOT NULL, created_unix_s REAL NOT NULL);
    CREATE TABLE samples (job_id TEXT NOT NULL, worker_id TEXT NOT NULL, instance_type TEXT NOT
      NULL, gpu_type TEXT NOT NULL, gpus INTEGER NOT NULL, batch_size INTEGER NOT NULL, step
      INTEGER NOT NULL, wall_time_s REAL NOT NULL, iteration_time_s REAL NOT NULL, loss REAL NOT
      NULL, bytes_sent INTEGER NOT NULL, bytes_received INTEGER NOT NULL, gpu_memory_gib REAL NOT
      NULL, cluster_workers INTEGER NOT NULL, communication_time_s REAL NOT NULL,
      cluster_steps_per_s REAL NOT NULL);
    CREATE INDEX samples_by_job ON samples (job_id);
    INSERT INTO runs VALUES ('j', 'grpc', 0);
    INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 1, 1, 1, 1.5, 0, 0, 0, 1, 0, 0);
    INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 1, 1, 1, 2.5, 0, 0, 0, 1, 0, 0);
    INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 2, 1, 1, 1.5, 0, 0, 0, 1, 0, 0);
    INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 0, 1, 1, 1.5, 0, 0, 0, 1, 0, 0);
    INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 0, 1, 1, 1.5, 0, 0, 0, 1, 0, 0);
    INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 16, 0, 1, 1, 1.5, 0, 0, 0, 1, 0, 0);
  )sql";
  ASSERT_EQ(sqlite3_exec(db, old_schema, nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);

  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(*store->CountSamples(), 4);  // steps 1 and 2, and two different step-0 rows
  auto loaded = store->LoadSamples({});
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->size(), 4u);
  EXPECT_EQ((*loaded)[0].loss, 1.5);  // the first of the two kept
  Sample resend = MakeSample("j", 2);
  resend.worker_id = "w";
  EXPECT_EQ(*store->AddSamples(std::vector<Sample>{resend}, "t"), 0u);
}

TEST_P(ProfileStoreTest, RefusesIdsLongerThanTheLimitQuotingAPrefix) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Sample s = MakeSample(std::string(10 << 20, 'j'), 1);
  const absl::Status status = store->AddSamples(std::vector<Sample>{s}, "t").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("samples[0]: job_id = \"jjjj"));
  EXPECT_THAT(status.message(), HasSubstr("(10485760 bytes): longer than 256 bytes"));
  EXPECT_LT(status.message().size(), 200u);
  EXPECT_EQ(*store->CountSamples(), 0);
}

}  // namespace
}  // namespace spotdnn::profiler

namespace spotdnn::profiler {
namespace {

// CountSamples counts what LoadSamples reads: a job with its runs ("J/..."), each sample once
// however the ids overlap, and nothing of a job that only looks alike ("J-x", "J0", "J2").
TEST_P(ProfileStoreTest, CountSamplesCountsAJobWithItsRunsOnce) {
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  std::vector<Sample> batch;
  for (const char* job : {"J", "J/run-1", "J/zone/run-2", "J/", "J-x", "J0", "J2", "K/run-1"}) {
    for (int step = 1; step <= 3; ++step) batch.push_back(MakeSample(job, step));
    batch.push_back(MakeSample(job, 0));  // and one without a step
  }
  ASSERT_TRUE(store->AddSamples(batch, "t").ok());
  for (const std::vector<std::string>& ids :
       std::vector<std::vector<std::string>>{{"J"},
                                             {"J/run-1"},
                                             {"J", "J/run-1"},
                                             {"J/zone/run-2", "J", "J"},
                                             {"J/zone", "J/zone/run-2"},
                                             {"J-x", "J0", "K"},
                                             {"nosuch"},
                                             {}}) {
    auto loaded = store->LoadSamples(ids);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto counted = store->CountSamples(ids);
    ASSERT_TRUE(counted.ok()) << counted.status();
    EXPECT_EQ(*counted, static_cast<std::int64_t>(loaded->size()))
        << "ids: " << (ids.empty() ? "(all)" : ids[0]);
  }
  EXPECT_EQ(*store->CountSamples(std::vector<std::string>{"J"}), 16);  // J, J/, J/run-1, J/zone/…
  EXPECT_EQ(*store->CountSamples(std::vector<std::string>{"K"}), 4);
  EXPECT_EQ(*store->CountSamples(), 32);
}

// A database made by the store before the added columns were in the sample key (its key on all
// fields of a sample without a step, "samples_without_step", lacked accuracy, parameter_servers
// and cluster) gets the key on every field: two such samples differing only in a new field are two.
TEST_F(SqliteProfileStoreTest, ADatabaseWithTheEarlierFieldKeyGetsTheNewOne) {
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    const char* schema = R"sql(
      CREATE TABLE runs (job_id TEXT PRIMARY KEY, source TEXT NOT NULL,
        created_unix_s REAL NOT NULL);
      CREATE TABLE samples (job_id TEXT NOT NULL, worker_id TEXT NOT NULL, instance_type TEXT NOT
        NULL, gpu_type TEXT NOT NULL, gpus INTEGER NOT NULL, batch_size INTEGER NOT NULL, step
        INTEGER NOT NULL, wall_time_s REAL NOT NULL, iteration_time_s REAL NOT NULL, loss REAL NOT
        NULL, bytes_sent INTEGER NOT NULL, bytes_received INTEGER NOT NULL, gpu_memory_gib REAL NOT
        NULL, cluster_workers INTEGER NOT NULL, communication_time_s REAL NOT NULL,
        cluster_steps_per_s REAL NOT NULL);
      CREATE UNIQUE INDEX samples_by_key ON samples (job_id, worker_id, step) WHERE step > 0;
      CREATE UNIQUE INDEX samples_without_step ON samples (job_id, worker_id, instance_type,
        gpu_type, gpus, batch_size, wall_time_s, iteration_time_s, loss, bytes_sent,
        bytes_received, gpu_memory_gib, cluster_workers, communication_time_s,
        cluster_steps_per_s) WHERE step = 0;
      INSERT INTO runs VALUES ('j', 'grpc', 0);
      INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 0, 1, 1, 1.5, 0, 0, 0, 1, 0, 0);
    )sql";
    ASSERT_EQ(sqlite3_exec(db, schema, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  Sample a = MakeSample("j", 0);
  a.accuracy = 0.5;
  Sample b = a;
  b.accuracy = 0.75;
  EXPECT_EQ(*store->AddSamples(std::vector<Sample>{a, b}, "t"), 2u);
  EXPECT_EQ(*store->AddSamples(std::vector<Sample>{a, b}, "t"), 0u);  // a resend
  EXPECT_EQ(*store->CountSamples(), 3);
  store.reset();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  std::set<std::string> indexes;
  sqlite3_stmt* q = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'index'", -1, &q,
                               nullptr),
            SQLITE_OK);
  while (sqlite3_step(q) == SQLITE_ROW) {
    indexes.insert(reinterpret_cast<const char*>(sqlite3_column_text(q, 0)));
  }
  sqlite3_finalize(q);
  sqlite3_close(db);
  EXPECT_TRUE(indexes.count("samples_by_fields"));
  EXPECT_TRUE(indexes.count("samples_by_key"));
  EXPECT_FALSE(indexes.count("samples_without_step"));
}

// A database with the added columns but no keys yet (as main's store made it) loses its
// duplicate steps on open, the first kept.
TEST_F(SqliteProfileStoreTest, ADatabaseWithTheNewColumnsButNoKeyLosesItsDuplicates) {
  std::filesystem::create_directories(std::filesystem::path(path_).parent_path());
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    const char* schema = R"sql(
      CREATE TABLE runs (job_id TEXT PRIMARY KEY, source TEXT NOT NULL,
        created_unix_s REAL NOT NULL);
      CREATE TABLE samples (job_id TEXT NOT NULL, worker_id TEXT NOT NULL, instance_type TEXT NOT
        NULL, gpu_type TEXT NOT NULL, gpus INTEGER NOT NULL, batch_size INTEGER NOT NULL, step
        INTEGER NOT NULL, wall_time_s REAL NOT NULL, iteration_time_s REAL NOT NULL, loss REAL NOT
        NULL, bytes_sent INTEGER NOT NULL, bytes_received INTEGER NOT NULL, gpu_memory_gib REAL NOT
        NULL, cluster_workers INTEGER NOT NULL, communication_time_s REAL NOT NULL,
        cluster_steps_per_s REAL NOT NULL, accuracy REAL NOT NULL DEFAULT 0, parameter_servers
        INTEGER NOT NULL DEFAULT 0, cluster TEXT NOT NULL DEFAULT '');
      CREATE INDEX samples_by_job ON samples (job_id);
      INSERT INTO runs VALUES ('j', 'grpc', 0);
      INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 7, 1, 1, 1.5, 0, 0, 0, 1, 0, 0, 0.25,
        2, 'a=1');
      INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 7, 1, 1, 2.5, 0, 0, 0, 1, 0, 0, 0.5,
        2, 'a=1');
      INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 0, 1, 1, 1.5, 0, 0, 0, 1, 0, 0, 0.25,
        2, 'a=1');
      INSERT INTO samples VALUES ('j', 'w', 't', 'g', 1, 8, 0, 1, 1, 1.5, 0, 0, 0, 1, 0, 0, 0.5,
        2, 'a=1');
    )sql";
    ASSERT_EQ(sqlite3_exec(db, schema, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  auto loaded = store->LoadSamples(std::vector<std::string>{"j"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 3u);  // step 7 once; the two step-0 rows differ in accuracy
  EXPECT_EQ((*loaded)[0].step, 7);
  EXPECT_DOUBLE_EQ((*loaded)[0].accuracy, 0.25);  // the first kept
  EXPECT_EQ((*loaded)[0].cluster, "a=1");
  Sample resend = MakeSample("j", 7);
  resend.worker_id = "w";
  EXPECT_EQ(*store->AddSamples(std::vector<Sample>{resend}, "t"), 0u);
}

}  // namespace
}  // namespace spotdnn::profiler
