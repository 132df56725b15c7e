// The job spec parser, the job store, planning a job with a profiling step, and the CLI's answers
// to bad input for run/jobs/status/up.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/local_provider.h"
#include "services/common/data_registry.h"
#include "services/gateway/cli/job_output.h"
#include "services/gateway/job/job_controller.h"
#include "services/gateway/job/job_spec.h"
#include "services/gateway/job/job_store.h"
#include "spotdnn/v1/profiler_mock.grpc.pb.h"
#include "spotdnn/v1/provisioner_mock.grpc.pb.h"
#include "tests/gateway/cli_runner.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using job::InstanceRecord;
using job::InstanceStatus;
using job::JobController;
using job::JobRecord;
using job::JobState;
using job::JobStore;
using job::LaunchReason;
using job::ParseJobSpec;
using job::ReadJobSpec;
using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Return;

constexpr char kGood[] = R"({
  "name": "j1",
  "workload": {"profile": "resnet110"},
  "slo": {"loss": 0.9, "deadline": "30m", "budget_usd": 5},
  "catalog": "aws-spotdnn-prototype",
  "provider": {"name": "aws", "region": "us-west-2", "image_id": "ami-1",
               "security_group_ids": ["sg-1", "sg-2"], "placement_scores": true},
  "quotas": {"p2.xlarge": 3},
  "parameter_servers": 2,
  "commands": {"worker": "python train.py"}
})";

TEST(JobSpecTest, ParsesEveryField) {
  auto spec = ParseJobSpec(kGood);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "j1");
  EXPECT_EQ(spec->workload, "resnet110");
  EXPECT_DOUBLE_EQ(spec->target_loss, 0.9);
  EXPECT_DOUBLE_EQ(spec->deadline_s, 1800);
  EXPECT_DOUBLE_EQ(spec->budget_usd, 5);
  EXPECT_EQ(spec->provider.name, "aws");
  EXPECT_EQ(spec->provider.options.at("region"), "us-west-2");
  EXPECT_EQ(spec->provider.options.at("image_id"), "ami-1");
  EXPECT_EQ(spec->provider.options.at("security_group_ids"), "sg-1,sg-2");
  EXPECT_EQ(spec->provider.options.at("placement_scores"), "true");
  EXPECT_EQ(spec->quotas.at("p2.xlarge"), 3);
  EXPECT_EQ(spec->parameter_servers, 2);
  EXPECT_EQ(spec->worker_command, "python train.py");
  EXPECT_EQ(spec->ps_command, "python train.py");  // defaults to the worker's
}

// A provider key's value is a string, true or false, or a list of strings; each is checked.
TEST(JobSpecTest, AProvidersBooleanIsTakenAndABadValueNamed) {
  std::string spec = kGood;
  spec.replace(spec.find("\"placement_scores\": true"), 24, "\"placement_scores\": \"maybe\"");
  EXPECT_THAT(ParseJobSpec(spec).status().message(),
              HasSubstr("provider.placement_scores = \"maybe\": expected true or false"));
  spec = kGood;
  spec.replace(spec.find("\"placement_scores\": true"), 24, "\"placement_scores\": 1");
  EXPECT_THAT(ParseJobSpec(spec).status().message(),
              HasSubstr("provider.placement_scores = 1: expected a string, true or false, or a "
                        "list of strings"));
}

// A checkpoint URI with a bucket per region: each region's folder of the job.
TEST(JobSpecTest, ACheckpointBucketPerRegionIsFilledInPerRegion) {
  auto spec = ParseJobSpec(R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60},
      "catalog": "c", "checkpoints": "s3://ckpt-{region}/spotdnn", "commands": {"worker": "x"}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(CheckpointsPerRegion(*spec));
  EXPECT_EQ(CheckpointUriIn(*spec, "j", "us-west-2"), "s3://ckpt-us-west-2/spotdnn/j");
  auto one = ParseJobSpec(R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60},
      "catalog": "c", "checkpoints": "s3://ckpt/spotdnn", "commands": {"worker": "x"}})");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_FALSE(CheckpointsPerRegion(*one));
  EXPECT_EQ(CheckpointUriIn(*one, "j", "us-west-2"), "s3://ckpt/spotdnn/j");
}

// The fallback (on-demand by default, with the "ours" policy) and the local provider's
// capacity trace.
TEST(JobSpecTest, TheFallbackAndALocalCapacityTraceParse) {
  auto defaults = ParseJobSpec(kGood);
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->fallback, "on-demand");
  EXPECT_EQ(defaults->deadline_policy, "ours");
  auto spec = ParseJobSpec(R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60},
      "catalog": "c", "fallback": "none", "deadline_policy": "uniform-progress",
      "provider": {"name": "local", "capacity_trace": {"p2.xlarge": "/t/p2.csv"},
                   "capacity_trace_time_scale": 3600},
      "commands": {"worker": "x"}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->fallback, "none");
  EXPECT_EQ(spec->deadline_policy, "uniform-progress");
  EXPECT_EQ(spec->provider.capacity_trace.at("p2.xlarge"), "/t/p2.csv");
  EXPECT_DOUBLE_EQ(spec->provider.capacity_trace_time_scale, 3600);
  auto elsewhere =
      ParseJobSpec(R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60},
      "catalog": "c", "provider": {"name": "aws", "image_id": "ami-1",
                                   "capacity_trace": {"p2.xlarge": "/t/p2.csv"}},
      "commands": {"worker": "x"}})");
  EXPECT_EQ(elsewhere.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobSpecTest, TheSloTakesIterationsOrEpochsInsteadOfALoss) {
  const std::string base = R"({"name": "j", "workload": "w", "catalog": "c",
    "commands": {"worker": "x"}, "slo": )";
  auto iterations = ParseJobSpec(base + R"({"iterations": 64000, "deadline": "1h"}})");
  ASSERT_TRUE(iterations.ok()) << iterations.status();
  EXPECT_EQ(iterations->target_iterations, 64000);
  EXPECT_EQ(iterations->target_loss, 0);
  auto epochs = ParseJobSpec(base + R"({"epochs": 90, "dataset_size": 50000, "budget_usd": 3}})");
  ASSERT_TRUE(epochs.ok()) << epochs.status();
  EXPECT_EQ(epochs->target_epochs, 90);
  EXPECT_EQ(epochs->dataset_size, 50000);
  for (const auto& [slo, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"iterations": 0, "deadline": 60})", "slo.iterations = 0"},
           {R"({"iterations": 1.5, "deadline": 60})", "slo.iterations = 1.5"},
           {R"({"epochs": -2, "dataset_size": 10, "deadline": 60})", "slo.epochs = -2"},
           {R"({"epochs": 2, "deadline": 60})", "slo.dataset_size is required"},
           {R"({"dataset_size": 10, "loss": 1, "deadline": 60})", "slo.dataset_size = 10"},
           {R"({"loss": 1, "iterations": 10, "deadline": 60})", "give one target"},
           {R"({"deadline": 60})", "slo.loss is required (or slo.iterations"}}) {
    auto spec = ParseJobSpec(base + slo + "}");
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << slo;
    EXPECT_THAT(spec.status().message(), HasSubstr(message)) << slo;
  }
}

// An accuracy or any metric with a direction, beside the loss (the old forms unchanged).
TEST(JobSpecTest, TheSloTakesAnAccuracyOrAMetricTarget) {
  const std::string base = R"({"name": "j", "workload": "w", "catalog": "c",
    "commands": {"worker": "x"}, "slo": )";
  for (const std::string& slo : {std::string(R"({"accuracy": 0.88, "deadline": "1h"})"),
                                 std::string(R"({"target": "accuracy>=0.88", "deadline": 60})"),
                                 std::string(R"({"target": {"accuracy": 0.88}, "deadline": 60})"),
                                 std::string(R"({"target": {"metric": "accuracy", "direction":
                                     "at-least", "value": 0.88}, "deadline": 60})")}) {
    auto spec = ParseJobSpec(base + slo + "}");
    ASSERT_TRUE(spec.ok()) << slo << ": " << spec.status();
    ASSERT_TRUE(spec->target_metric.has_value()) << slo;
    EXPECT_EQ(spec->target_metric->metric(), "accuracy");
    EXPECT_EQ(spec->target_metric->direction(), v1::MetricTarget::DIRECTION_AT_LEAST);
    EXPECT_DOUBLE_EQ(spec->target_metric->value(), 0.88);
    EXPECT_EQ(spec->target_loss, 0);
    v1::Slo out;
    job::SetSloTarget(*spec, &out);
    EXPECT_TRUE(out.has_target_metric());
    EXPECT_EQ(out.target_metric().metric(), "accuracy");
    EXPECT_EQ(out.target_loss(), 0);
  }
  auto top5 = ParseJobSpec(base + R"({"target": "top5 <= 0.1", "deadline": 60}})");
  ASSERT_TRUE(top5.ok()) << top5.status();
  EXPECT_EQ(top5->target_metric->metric(), "top5");
  EXPECT_EQ(top5->target_metric->direction(), v1::MetricTarget::DIRECTION_AT_MOST);
  // A loss given as a target is the plain loss target.
  for (const std::string& slo : {std::string(R"({"target": "loss<=0.5", "deadline": 60})"),
                                 std::string(R"({"target": {"loss": 0.5}, "deadline": 60})")}) {
    auto loss = ParseJobSpec(base + slo + "}");
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_FALSE(loss->target_metric.has_value());
    EXPECT_DOUBLE_EQ(loss->target_loss, 0.5);
    v1::Slo out;
    job::SetSloTarget(*loss, &out);
    EXPECT_FALSE(out.has_target_metric());
    EXPECT_DOUBLE_EQ(out.target_loss(), 0.5);
  }
  for (const auto& [slo, message] : std::vector<std::pair<std::string, std::string>>{
           {R"({"target": "accuracy=>0.8", "deadline": 60})",
            "slo.target accuracy=>0.8: expected METRIC>=VALUE or METRIC<=VALUE"},
           {R"({"accuracy": 88, "deadline": 60})", "a fraction in (0, 1]"},
           {R"({"accuracy": "high", "deadline": 60})",
            "slo.accuracy = \"high\": expected a number"},
           {R"({"target": "accuracy<=0.8", "deadline": 60})", "give accuracy>=0.8"},
           {R"({"target": "loss>=0.8", "deadline": 60})", "give loss<=0.8"},
           {R"({"target": {"metric": "top5", "direction": "up", "value": 1}, "deadline": 60})",
            "slo.target.direction = \"up\""},
           {R"({"target": {"metric": "top5", "value": 1}, "deadline": 60})", "slo.target = "},
           {R"({"target": 5, "deadline": 60})", "slo.target = 5"},
           {R"({"loss": 1, "accuracy": 0.9, "deadline": 60})", "give one target"},
           {R"({"target": "a b>=1", "deadline": 60})", "must be 1 to 128 letters"}}) {
    auto spec = ParseJobSpec(base + slo + "}");
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << slo;
    EXPECT_THAT(spec.status().message(), HasSubstr(message)) << slo;
  }
}

TEST(JobSpecTest, TheExampleInDeployParses) {
  auto spec = ReadJobSpec(std::string(SPOTDNN_SOURCE_DIR) + "/deploy/examples/job.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->provider.name, "local");
}

TEST(JobSpecTest, BadInputNamesTheFieldAndTheValue) {
  struct Case {
    std::string json;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"[", "not valid JSON"},
      {R"({"name": "a b"})", "name = \"a b\""},
      {R"({"name": "j", "workload": 3})", "workload = 3"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": -1}})", "slo.loss = -1"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": "soon"}})", "slo.deadline"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1}})", "give a deadline"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "quotas": {"p2.xlarge": -2}, "commands": {"worker": "x"}})",
       "quotas.p2.xlarge = -2"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": "nimbus", "commands": {"worker": "x"}})",
       "provider.name = \"nimbus\""},
      // Where the job may run.
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "zones": {"avoid": "us-east-1a"}, "commands": {"worker": "x"}})",
       "zones.avoid = \"us-east-1a\": expected a list of zone names"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "zones": {"zone": "us-east-1a", "avoid": ["us-east-1a"]}, "commands": {"worker": "x"}})",
       "zones.zone = \"us-east-1a\": is also in zones.avoid"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "zones": {"checkpoint_mb": -5}, "commands": {"worker": "x"}})",
       "zones.checkpoint_mb = -5"},
      // A checkpoint bucket per region: {region} is the one placeholder, the bucket still valid.
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "checkpoints": "s3://ckpt-{zone}/p", "commands": {"worker": "x"}})",
       "checkpoints = \"s3://ckpt-{zone}/p\": the only placeholder is {region}"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "checkpoints": "s3://Ckpt_{region}", "commands": {"worker": "x"}})",
       "checkpoints = \"s3://Ckpt_{region}\": expected an s3://BUCKET/PREFIX URI with a valid "
       "bucket name"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "zones": {"prefer": "a"}, "commands": {"worker": "x"}})",
       "zones.prefer"},
      // The on-demand fallback and the local provider's capacity trace.
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "fallback": "spot", "commands": {"worker": "x"}})",
       "fallback = \"spot\": expected on-demand or none"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "deadline_policy": "psychic", "commands": {"worker": "x"}})",
       "deadline_policy = \"psychic\""},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "local", "capacity_trace": {"p2.xlarge": 3}},
           "commands": {"worker": "x"}})",
       "provider.capacity_trace.p2.xlarge = 3"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "local", "capacity_trace_time_scale": 0},
           "commands": {"worker": "x"}})",
       "provider.capacity_trace_time_scale = 0"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": "gce", "commands": {"worker": "x"}})",
       "provider.project is required for gce"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "gce", "project": "p-1", "zone": "us-central1",
                        "image": "i"}, "commands": {"worker": "x"}})",
       "provider.zone = \"us-central1\""},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "azure", "subscription": "s", "resource_group": "g",
                        "location": "eastus", "image": "i", "subnet_id": "/s", "region": "x"},
           "commands": {"worker": "x"}})",
       "provider.region: unknown key for azure"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c"})",
       "commands is required"},
      {R"({"name": "j", "workloads": "w"})", "workloads: unknown field"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "quotas": {"p2.xlarge": 4294967297}, "commands": {"worker": "x"}})",
       "quotas.p2.xlarge = 4294967297"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "parameter_servers": 4294967297, "commands": {"worker": "x"}})",
       "parameter_servers = 4294967297"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "aws", "image_id": "ami-1", "subnet": "s-1"},
           "commands": {"worker": "x"}})",
       "provider.subnet: unknown key for aws"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "aws", "region": "us-east-1"}, "commands": {"worker": "x"}})",
       "provider.image_id is required"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "local", "capacity": {"p2.xlarge": "two"}},
           "commands": {"worker": "x"}})",
       "provider.capacity.p2.xlarge = \"two\""},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60}, "catalog": "c",
           "provider": {"name": "aws", "image_id": "ami-1", "capacity": {"p2.xlarge": 1}},
           "commands": {"worker": "x"}})",
       "only the local provider"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60, "confidence": 1},
           "catalog": "c", "commands": {"worker": "x"}})",
       "slo.confidence = 1"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "budget_usd": 3, "confidence": 0.9},
           "catalog": "c", "commands": {"worker": "x"}})",
       "needs slo.deadline"},
      {R"({"name": "j", "workload": "w", "slo": {"loss": 1, "deadline": 60, "lifetimes": "x.csv"},
           "catalog": "c", "commands": {"worker": "x"}})",
       "slo.lifetimes = \"x.csv\": applies with slo.confidence"},
      {R"({"name": "j", "workload": "w",
           "slo": {"loss": 1, "deadline": 60, "confidence": 0.9, "notice": "soon"},
           "catalog": "c", "commands": {"worker": "x"}})",
       "slo.notice"},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(c.json);
    ASSERT_FALSE(spec.ok()) << c.json;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(spec.status().message(), HasSubstr(c.message)) << c.json;
  }
}

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("spotdnn-job-store-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// The job store itself, on SQLite and PostgreSQL.
class JobStoreBackendTest : public JobStoreTest,
                            public ::testing::WithParamInterface<testing_util::StoreBackend> {
 protected:
  void SetUp() override {
    JobStoreTest::SetUp();
    auto spec = testing_util::FreshStoreSpec(GetParam(), (dir_ / "jobs.db").string());
    ASSERT_TRUE(spec.ok()) << spec.status();
    spec_ = *spec;
  }
  std::string spec_;
};

INSTANTIATE_TEST_SUITE_P(Backends, JobStoreBackendTest,
                         ::testing::Values(testing_util::StoreBackend::kSqlite,
                                           testing_util::StoreBackend::kPostgres),
                         testing_util::StoreBackendName);

TEST_P(JobStoreBackendTest, JobsInstancesRevocationsAndEventsSurviveAReopen) {
  {
    auto store = JobStore::Open(spec_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(
        (*store)->CreateJob({.id = "j", .state = JobState::kLaunching, .created_ms = 1}).ok());
    EXPECT_EQ((*store)->CreateJob({.id = "j"}).code(), absl::StatusCode::kAlreadyExists);
    JobRecord job = *(*store)->GetJob("j");
    job.iterations_done = 12.5;
    job.ps_addresses = "127.0.0.1:1";
    ASSERT_TRUE((*store)->UpdateJob(job).ok());
    EXPECT_EQ((*store)->UpdateJob({.id = "other"}).code(), absl::StatusCode::kNotFound);
    ASSERT_TRUE((*store)
                    ->PutInstance({.job_id = "j",
                                   .id = "i-1",
                                   .role = launcher::Role::kWorker,
                                   .price_per_hour = 0.9,
                                   .launched_ms = 10})
                    .ok());
    InstanceRecord again{.job_id = "j",
                         .id = "i-1",
                         .role = launcher::Role::kWorker,
                         .reason = LaunchReason::kTakeover,
                         .metadata_cloud = "gce",
                         .state = InstanceStatus::kEnded};
    ASSERT_TRUE((*store)->PutInstance(again).ok());  // replaces, never duplicates
    ASSERT_TRUE(
        (*store)
            ->PutRevocation({.job_id = "j", .instance_id = "i-1", .takeover_first_index = 5})
            .ok());
    ASSERT_TRUE((*store)->AddEvent("j", "notice", "i-1", 77).ok());
  }
  auto store = JobStore::Open(spec_);
  ASSERT_TRUE(store.ok());
  auto job = (*store)->GetJob("j");
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->state, JobState::kLaunching);
  EXPECT_DOUBLE_EQ(job->iterations_done, 12.5);
  EXPECT_EQ(job->ps_addresses, "127.0.0.1:1");
  auto instances = (*store)->Instances("j");
  ASSERT_TRUE(instances.ok());
  ASSERT_EQ(instances->size(), 1u);
  EXPECT_EQ((*instances)[0].state, InstanceStatus::kEnded);
  EXPECT_EQ((*instances)[0].reason, LaunchReason::kTakeover);
  EXPECT_EQ((*instances)[0].metadata_cloud, "gce");
  auto revocations = (*store)->Revocations("j");
  ASSERT_EQ(revocations->size(), 1u);
  EXPECT_EQ((*revocations)[0].takeover_first_index, 5);
  ASSERT_EQ((*store)->Events("j")->size(), 1u);
  EXPECT_EQ((*store)->Events("j")->front().at_ms, 77);
  EXPECT_EQ((*store)->GetJob("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->ListJobs()->size(), 1u);
}

// Rows come back per job in the order they were first written (a replaced instance keeps its
// place), jobs by creation time, and the training curve point by point.
TEST_P(JobStoreBackendTest, RowsKeepTheirOrderAndJobsStayApart) {
  auto store = JobStore::Open(spec_);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->CreateJob({.id = "late", .created_ms = 20}).ok());
  ASSERT_TRUE((*store)->CreateJob({.id = "early", .created_ms = 10}).ok());
  for (const char* id : {"i-b", "i-a", "i-c"}) {
    ASSERT_TRUE((*store)->PutInstance({.job_id = "early", .id = id, .index = 1}).ok());
  }
  ASSERT_TRUE((*store)->PutInstance({.job_id = "late", .id = "i-a", .index = 9}).ok());
  ASSERT_TRUE((*store)->PutInstance({.job_id = "early", .id = "i-b", .index = 2}).ok());
  auto instances = (*store)->Instances("early");
  ASSERT_TRUE(instances.ok()) << instances.status();
  ASSERT_EQ(instances->size(), 3u);
  EXPECT_EQ((*instances)[0].id, "i-b");
  EXPECT_EQ((*instances)[0].index, 2);
  EXPECT_EQ((*instances)[1].id, "i-a");
  EXPECT_EQ((*instances)[1].index, 1);  // the other job's i-a is its own
  EXPECT_EQ((*instances)[2].id, "i-c");
  auto jobs = (*store)->ListJobs();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].id, "early");
  for (int i = 3; i >= 1; --i) {
    ASSERT_TRUE(
        (*store)->AddProgress("late", {.at_ms = i, .iterations = i * 1.5, .loss = 0.1}).ok());
  }
  auto progress = (*store)->Progress("late");
  ASSERT_TRUE(progress.ok());
  ASSERT_EQ(progress->size(), 3u);
  EXPECT_EQ((*progress)[0].at_ms, 3);
  EXPECT_DOUBLE_EQ((*progress)[2].iterations, 1.5);
  EXPECT_TRUE((*store)->Progress("early")->empty());
}

// After a reboot or a crash, a pid in stack.json may belong to another program: `spotdnn down`
// must leave it alone (and still forget the stack).
TEST_F(JobStoreTest, DownNeverSignalsAProcessThatIsNotTheStacks) {
  fs::create_directories(dir_);
  const pid_t stranger = fork();
  ASSERT_GE(stranger, 0);
  if (stranger == 0) {
    execl("/bin/sleep", "sleep", "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  nlohmann::json doc;
  for (const char* key : {"predictor", "provisioner", "profiler", "detector"}) {
    doc[key] = {{"address", "127.0.0.1:1"}, {"pid", stranger}, {"log", "x.log"}};
  }
  doc["emulator"] = {{"address", "http://127.0.0.1:1"}, {"pid", stranger}, {"log", "x.log"}};
  std::ofstream(dir_ / "stack.json") << doc.dump();
  CliRun down = Cli({"down", "--data-dir", dir_.string()});
  EXPECT_EQ(down.code, 0) << down.err;
  EXPECT_FALSE(fs::exists(dir_ / "stack.json"));
  absl::SleepFor(absl::Milliseconds(200));
  int status = 0;
  EXPECT_EQ(waitpid(stranger, &status, WNOHANG), 0) << "spotdnn down signalled a stranger";
  kill(stranger, SIGKILL);
  waitpid(stranger, &status, 0);
}

// --store picks the job store; a bad spec (or a password in the URI) is bad input naming the flag.
TEST_P(JobStoreBackendTest, TheCliReadsTheStoreNamedByStore) {
  {
    auto store = JobStore::Open(spec_);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->CreateJob({.id = "elsewhere", .created_ms = 1}).ok());
  }
  CliRun jobs = Cli({"jobs", "--store", spec_, "--data-dir", dir_.string()});
  EXPECT_EQ(jobs.code, kExitOk) << jobs.err;
  EXPECT_THAT(jobs.out, HasSubstr("elsewhere"));
  CliRun data_dir = Cli({"jobs", "--data-dir", dir_.string() + "/other"});
  EXPECT_EQ(data_dir.code, kExitOk) << data_dir.err;
  EXPECT_THAT(data_dir.out, ::testing::Not(HasSubstr("elsewhere")));
}

// One gateway per job: a second is refused naming the job and the first, until the first lets go
// (on PostgreSQL an advisory lock, so this holds across hosts; see db::Database::TryHoldLock).
TEST_P(JobStoreBackendTest, OneGatewayHoldsAJobAtATime) {
  auto a = JobStore::Open(spec_), b = JobStore::Open(spec_);
  ASSERT_TRUE(a.ok() && b.ok());
  auto held = (*a)->HoldJob("j", "pid 1 on host-a");
  ASSERT_TRUE(held.ok()) << held.status();
  auto refused = (*b)->HoldJob("j", "pid 2 on host-b");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("job \"j\" is being run by another gateway (pid 1 on host-a)"));
  EXPECT_THAT(refused.status().message(), HasSubstr("spotdnn run --resume j"));
  auto other = (*b)->HoldJob("k", "pid 2 on host-b");
  EXPECT_TRUE(other.ok()) << other.status();
  held->reset();
  EXPECT_TRUE((*b)->HoldJob("j", "pid 2 on host-b").ok());
}

// The example job, stored as `spotdnn run` stores it before it launches, with `instances`.
void StoreExampleJob(JobStore& store, const std::vector<InstanceRecord>& instances) {
  std::ifstream in(std::string(SPOTDNN_SOURCE_DIR) + "/deploy/examples/job.json");
  std::stringstream spec;
  spec << in.rdbuf();
  ASSERT_TRUE(store
                  .CreateJob({.id = "resnet110-demo",
                              .spec_json = spec.str(),
                              .state = JobState::kRunning,
                              .created_ms = 1})
                  .ok());
  for (const InstanceRecord& i : instances) ASSERT_TRUE(store.PutInstance(i).ok());
}

// `spotdnn run --resume` of a job another gateway holds is refused before it touches anything.
TEST_P(JobStoreBackendTest, ResumingAJobAnotherGatewayRunsIsRefused) {
  auto store = JobStore::Open(spec_);
  ASSERT_TRUE(store.ok()) << store.status();
  StoreExampleJob(**store, {});
  auto held = (*store)->HoldJob("resnet110-demo", "pid 1 on host-a");
  ASSERT_TRUE(held.ok()) << held.status();
  CliRun second = Cli(
      {"run", "--resume", "resnet110-demo", "--store", spec_, "--data-dir", (dir_ / "b").string()});
  EXPECT_EQ(second.code, kExitBadInput) << second.err;
  EXPECT_THAT(second.err, HasSubstr("job \"resnet110-demo\" is being run by another gateway "
                                    "(pid 1 on host-a)"));
}

// A job on the local provider resumed where its instances are not (another host sharing the
// PostgreSQL store, or another --data-dir): refused, saying where they are, instead of taking
// them all for lost and launching them again.
TEST_P(JobStoreBackendTest, ALocalJobIsResumedOnlyWhereItsInstancesRun) {
  auto store = JobStore::Open(spec_);
  ASSERT_TRUE(store.ok()) << store.status();
  StoreExampleJob(**store, {{.job_id = "resnet110-demo", .id = "local-w0", .launched_ms = 5},
                            {.job_id = "resnet110-demo",
                             .id = "local-w1",
                             .state = InstanceStatus::kEnded,
                             .launched_ms = 5}});
  const std::string elsewhere = (dir_ / "other-host").string();
  CliRun resumed = Cli({"run", "--resume", "resnet110-demo", "--store", spec_, "--data-dir",
                        elsewhere, "--provisioner", "127.0.0.1:1", "--profiler", "127.0.0.1:1",
                        "--detector", "127.0.0.1:1"});
  EXPECT_EQ(resumed.code, kExitBadInput) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("job \"resnet110-demo\" runs on the local provider"));
  EXPECT_THAT(resumed.err, HasSubstr("(local-w0)"));  // the running one, not the ended one
  EXPECT_THAT(resumed.err, HasSubstr(elsewhere + "/local here has none of them"));
  // Nothing was launched or written in the job's name.
  auto instances = (*store)->Instances("resnet110-demo");
  ASSERT_TRUE(instances.ok());
  EXPECT_EQ(instances->size(), 2u);
}

TEST_F(JobStoreTest, ABadStoreSpecIsBadInputNamingTheFlag) {
  for (const char* bad : {"mysql://db/jobs", "postgres://me:secret@db/jobs"}) {
    CliRun status = Cli({"status", "j", "--store", bad, "--data-dir", dir_.string()});
    EXPECT_EQ(status.code, kExitBadInput) << bad;
    EXPECT_THAT(status.err, HasSubstr("--store = \""));
    EXPECT_THAT(status.err, ::testing::Not(HasSubstr("secret")));
  }
}

TEST_F(JobStoreTest, CliExplainsWhatIsMissing) {
  const std::string data = dir_.string();
  CliRun no_stack = Cli(
      {"run", std::string(SPOTDNN_SOURCE_DIR) + "/deploy/examples/job.json", "--data-dir", data});
  EXPECT_EQ(no_stack.code, kExitFailure) << no_stack.err;  // no service to run it: exit 1
  EXPECT_THAT(no_stack.err, HasSubstr("spotdnn up"));

  CliRun no_spec = Cli({"run", (dir_ / "missing.json").string(), "--data-dir", data});
  EXPECT_THAT(no_spec.err, HasSubstr("missing.json\" cannot be read"));

  fs::create_directories(dir_);
  std::ofstream(dir_ / "bad.json") << R"({"name": "j", "workload": "w", "slo": {"loss": 0}})";
  CliRun bad = Cli({"run", (dir_ / "bad.json").string(), "--data-dir", data});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_THAT(bad.err, HasSubstr("slo.loss = 0"));

  CliRun both = Cli({"run", "x.json", "--resume", "j", "--data-dir", data});
  EXPECT_EQ(both.code, kExitBadInput);

  CliRun unknown = Cli({"status", "nope", "--data-dir", data});
  EXPECT_NE(unknown.code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("job \"nope\" is not in the job store"));

  CliRun jobs = Cli({"jobs", "--data-dir", data});
  EXPECT_EQ(jobs.code, 0);
  EXPECT_THAT(jobs.out, HasSubstr("No jobs"));

  CliRun down = Cli({"down", "--data-dir", data});  // nothing to stop: said, and not a failure
  EXPECT_EQ(down.code, 0) << down.err;
  EXPECT_THAT(down.out, HasSubstr("No spotdnn stack is up"));

  CliRun up = Cli({"up", "--data-dir", data, "--bin-dir", (dir_ / "nowhere").string()});
  EXPECT_NE(up.code, 0);
  EXPECT_THAT(up.err, HasSubstr("is not there"));
}

// A job with a profiling step: its logs are imported into the profiler under JOB-profiling, fitted
// into the named profile over the base, and that profile (not a built-in) is what gets planned
// and stored with the job.
TEST_F(JobStoreTest, AnIterationsSloIsPlannedForAndBecomesTheJobsTarget) {
  pb::MockProfilerStub profiler;
  pb::MockProvisionerStub provisioner;
  EXPECT_CALL(provisioner, Plan(_, _, _))
      .WillOnce([](grpc::ClientContext*, const pb::PlanRequest& r, pb::PlanResponse* out) {
        EXPECT_EQ(r.slo().target_iterations(), 64000);
        EXPECT_EQ(r.slo().target_loss(), 0);
        out->mutable_plan()->set_feasible(true);
        pb::InstanceCount* c = out->mutable_plan()->mutable_cluster()->add_instances();
        c->set_instance_type("gce-v100");
        c->set_count(4);
        out->mutable_plan()->mutable_prediction()->set_normalized_iterations(64000);
        out->mutable_plan()->set_time_s(1600);
        return grpc::Status::OK;
      });
  auto store = JobStore::Open((dir_ / "jobs.db").string());
  ASSERT_TRUE(store.ok());
  auto provider =
      launcher::LocalProvider::Create({.state_dir = (dir_ / "local").string(), .owner = false});
  ASSERT_TRUE(provider.ok());
  const clients::ProvisionerClient provisioner_client(provisioner);
  const clients::ProfilerClient profiler_client(profiler);
  JobController controller({.provisioner = &provisioner_client,
                            .profiler = &profiler_client,
                            .provider = provider->get(),
                            .store = store->get()},
                           {}, nullptr);
  const services::DataRegistry local = services::DataRegistry::WithBuiltins();
  const std::string spec = R"({"name": "steps-job", "workload": "resnet32-cifar10-gce",
    "slo": {"iterations": 64000, "deadline": "40m"}, "catalog": "gce-icac-2019",
    "commands": {"worker": "true"}})";
  EXPECT_CALL(profiler, GetProfile(_, _, _))
      .WillRepeatedly([](grpc::ClientContext*, const pb::GetProfileRequest&, pb::WorkloadProfile*) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "not stored");
      });
  auto job = controller.Plan(spec, local);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->target_iterations, 64000);
}

TEST_F(JobStoreTest, ProfilingStepImportsFitsAndPlansWithTheFittedProfile) {
  pb::MockProfilerStub profiler;
  pb::MockProvisionerStub provisioner;
  std::vector<std::string> imported;
  EXPECT_CALL(profiler, ImportLog(_, _, _))
      .Times(2)
      .WillRepeatedly(
          [&](grpc::ClientContext*, const pb::ImportLogRequest& r, pb::ImportLogResponse*) {
            EXPECT_EQ(r.job_id(), "fitted-job-profiling");
            EXPECT_EQ(r.content(), "SPOTDNN_SAMPLE step=1\n");  // sent as content
            imported.push_back(fs::path(r.path()).filename().string());
            return grpc::Status::OK;
          });
  EXPECT_CALL(profiler, FitProfile(_, _, _))
      .WillOnce([](grpc::ClientContext*, const pb::FitProfileRequest& r, pb::FitProfileResponse*) {
        EXPECT_EQ(r.name(), "mynet");
        EXPECT_EQ(r.job_ids_size(), 1);
        EXPECT_EQ(r.base().name(), "resnet110");  // the base the spec names
        return grpc::Status::OK;
      });
  const services::DataRegistry local = services::DataRegistry::WithBuiltins();
  pb::WorkloadProfile fitted = *local.ResolveWorkload("resnet110");
  fitted.set_name("mynet");
  EXPECT_CALL(profiler, GetProfile(_, _, _))
      .WillOnce(
          [&](grpc::ClientContext*, const pb::GetProfileRequest& r, pb::WorkloadProfile* out) {
            EXPECT_EQ(r.name(), "mynet");
            *out = fitted;
            return grpc::Status::OK;
          });
  EXPECT_CALL(provisioner, Plan(_, _, _))
      .WillOnce([](grpc::ClientContext*, const pb::PlanRequest& r, pb::PlanResponse* out) {
        EXPECT_EQ(r.workload().profile().name(), "mynet");
        EXPECT_EQ(r.slo().target_loss(), 2.6);
        out->mutable_plan()->set_feasible(true);
        pb::InstanceCount* c = out->mutable_plan()->mutable_cluster()->add_instances();
        c->set_instance_type("p2.xlarge");
        c->set_count(2);
        out->mutable_plan()->mutable_prediction()->set_normalized_iterations(40);
        out->mutable_plan()->set_time_s(20);
        return grpc::Status::OK;
      });
  auto store = JobStore::Open((dir_ / "jobs.db").string());
  ASSERT_TRUE(store.ok());
  auto provider =
      launcher::LocalProvider::Create({.state_dir = (dir_ / "local").string(), .owner = false});
  ASSERT_TRUE(provider.ok());
  const clients::ProvisionerClient provisioner_client(provisioner);
  const clients::ProfilerClient profiler_client(profiler);
  JobController controller({.provisioner = &provisioner_client,
                            .profiler = &profiler_client,
                            .provider = provider->get(),
                            .store = store->get()},
                           {}, nullptr);
  fs::create_directories(dir_);
  for (const char* log : {"a.csv", "b.csv"}) std::ofstream(dir_ / log) << "SPOTDNN_SAMPLE step=1\n";
  const std::string spec = absl::StrCat(R"({"name": "fitted-job",
    "workload": {"profile": "mynet", "profiling": {"logs": [")",
                                        (dir_ / "a.csv").string(), R"(", ")",
                                        (dir_ / "b.csv").string(), R"("], "base": "resnet110"}},
    "slo": {"loss": 2.6, "deadline": 60}, "catalog": "aws-spotdnn-prototype",
    "commands": {"worker": "true"}})");
  auto job = controller.Plan(spec, local);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(imported, (std::vector<std::string>{"a.csv", "b.csv"}));
  EXPECT_EQ(job->state, JobState::kLaunching);
  EXPECT_EQ(job->target_iterations, 40);
  EXPECT_THAT(job->workload_json, HasSubstr("\"mynet\""));
  EXPECT_EQ(controller.Plan(spec, local).status().code(), absl::StatusCode::kAlreadyExists);
}

// slo.confidence: the plan request carries the confidence and the lifetime file's sections; the
// stored plan's predicted probability goes into the summary beside whether the deadline was met.
TEST_F(JobStoreTest, ConfidencePlansWithTheLifetimesAndTheSummaryShowsThePrediction) {
  fs::create_directories(dir_);
  const fs::path lifetimes = dir_ / "lifetimes.csv";
  std::ofstream(lifetimes) << "K80,,\nVM name,Start,Terminate\na,2/18/19 23:40,2/19/19 14:58\n"
                              "b,2/18/19 23:40,2/19/19 23:46\n";
  pb::MockProvisionerStub provisioner;
  EXPECT_CALL(provisioner, Plan(_, _, _))
      .WillOnce([](grpc::ClientContext*, const pb::PlanRequest& r, pb::PlanResponse* out) {
        EXPECT_EQ(r.options().confidence(), 0.9);
        const pb::SimulationOptions& sim = r.options().simulation();
        EXPECT_EQ(sim.notice_s(), 30);
        EXPECT_EQ(sim.takeover_delay_s(), 90);
        EXPECT_EQ(sim.lifetime_groups_size(), 1);
        EXPECT_EQ(sim.lifetime_groups(0).name(), "K80");
        EXPECT_EQ(sim.lifetime_groups(0).observations_size(), 2);
        EXPECT_TRUE(sim.lifetime_groups(0).observations(1).censored());  // past 24 h
        pb::Plan* p = out->mutable_plan();
        p->set_feasible(true);
        pb::InstanceCount* c = p->mutable_cluster()->add_instances();
        c->set_instance_type("p2.xlarge");
        c->set_count(2);
        p->mutable_prediction()->set_normalized_iterations(40);
        p->set_time_s(20);
        p->mutable_risk()->set_p_meet_deadline(0.93);
        p->mutable_risk()->set_p_meet_deadline_low(0.92);
        p->mutable_risk()->set_p_meet_deadline_high(0.94);
        p->mutable_risk()->set_runs(10000);
        return grpc::Status::OK;
      })
      .WillOnce([](grpc::ClientContext*, const pb::PlanRequest&, pb::PlanResponse* out) {
        out->mutable_plain_plan()->set_feasible(true);
        out->mutable_plan()->set_feasible(false);
        out->mutable_plan()->set_reason("no candidate plan meets the deadline in at least 0.9");
        return grpc::Status::OK;
      });
  auto store = JobStore::Open((dir_ / "jobs.db").string());
  ASSERT_TRUE(store.ok());
  auto provider =
      launcher::LocalProvider::Create({.state_dir = (dir_ / "local").string(), .owner = false});
  ASSERT_TRUE(provider.ok());
  pb::MockProfilerStub profiler;
  EXPECT_CALL(profiler, GetProfile(_, _, _))
      .WillRepeatedly([](grpc::ClientContext*, const pb::GetProfileRequest&, pb::WorkloadProfile*) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such profile");
      });
  const clients::ProvisionerClient provisioner_client(provisioner);
  const clients::ProfilerClient profiler_client(profiler);
  JobController controller({.provisioner = &provisioner_client,
                            .profiler = &profiler_client,
                            .provider = provider->get(),
                            .store = store->get()},
                           {}, nullptr);
  const services::DataRegistry local = services::DataRegistry::WithBuiltins();
  const std::string spec = absl::StrCat(R"({"name": "risky", "workload": "resnet110",
    "slo": {"loss": 2.6, "deadline": 60, "confidence": 0.9, "lifetimes": ")",
                                        lifetimes.string(), R"(", "notice": "30s",
            "takeover_delay": 90},
    "catalog": "aws-spotdnn-prototype", "commands": {"worker": "true"}})");
  auto job = controller.Plan(spec, local);
  ASSERT_TRUE(job.ok()) << job.status();
  auto summary = job::SummarizeJob(**store, "risky", 0);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_TRUE(summary->predicted_p_meet_deadline.has_value());
  EXPECT_NEAR(*summary->predicted_p_meet_deadline, 0.93, 1e-9);
  EXPECT_EQ(summary->confidence, 0.9);
  EXPECT_THAT(SummaryJson(*summary), HasSubstr("\"predicted_p_meet_deadline\":0.93"));
  EXPECT_THAT(SummaryJson(*summary), HasSubstr("\"deadline_met\""));
  // No plan reaching the confidence: the job is refused, naming it.
  std::string other = spec;
  other.replace(other.find("risky"), 5, "other");
  auto refused = controller.Plan(other, local);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("slo.confidence"));
}

}  // namespace
}  // namespace spotdnn::gateway
