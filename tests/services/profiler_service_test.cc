// Starts the profiler service on 127.0.0.1:0, streams samples to it and fits a profile.
#include "services/profiler/profiler_service.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "predictor/equations.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/common/server.h"
#include "services/detector/sample_forwarder.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;

class ProfilerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_ = std::filesystem::temp_directory_path() /
          ("spotdnn-profiler-service-" + std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db");
    Remove();
    auto store = profiler::ProfileStore::Open(db_.string());
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::shared_ptr<profiler::ProfileStore>(*std::move(store));
    service_ = std::make_unique<ProfilerServiceImpl>(store_);
    auto started = StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    ASSERT_GT(started->port, 0);
    target_ = "127.0.0.1:" + std::to_string(started->port);
    stub_ = pb::Profiler::NewStub(MakeChannel(target_));
  }
  void TearDown() override {
    server_->Shutdown();
    server_.reset();
    service_.reset();
    store_.reset();
    Remove();
  }
  void Remove() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db_.string() + suffix);
  }

  // Iteration time of the generating model: T_comp 0.3 s, S 100 MB, B_req 500 MB/s,
  // B_ps 1200 MB/s, a1 0.4, b1 -0.4.
  static double IterationTime(int n) {
    const double p = predictor::ContentionProbability({0.4, -0.4}, n);
    return 0.3 + 2 * 100 / predictor::WorkerBandwidth(500, 1200, n, p);
  }

  // Streams samples of a profiling job at cluster sizes 1, 2, 4, 6 and 8.
  pb::ReportSamplesResponse Stream(int bad_every = 0) {
    grpc::ClientContext context;
    pb::ReportSamplesResponse response;
    auto writer = stub_->ReportSamples(&context, &response);
    int i = 0;
    for (int n : {1, 2, 4, 6, 8}) {
      for (int worker = 0; worker < n; ++worker) {
        for (int step = 0; step < 40; ++step, ++i) {
          pb::Sample s;
          s.set_job_id("prof-n" + std::to_string(n));
          s.set_worker_id("w" + std::to_string(worker));
          s.set_instance_type("g4dn.xlarge");
          s.set_gpu_type("T4");
          s.set_gpus(1);
          s.set_batch_size(64);
          s.set_step(step);
          s.set_wall_time_s(1.7e9 + step);
          // +-1% deterministic jitter.
          s.set_iteration_time_s(IterationTime(n) * (1 + 0.01 * ((step % 5) - 2) / 2));
          s.set_bytes_sent(100'000'000);
          s.set_bytes_received(100'000'000);
          s.set_cluster_workers(n);
          if (n == 1) s.set_communication_time_s(2 * 100.0 / 500);
          if (bad_every > 0 && i % bad_every == 0) s.set_loss(-1);
          EXPECT_TRUE(writer->Write(s));
        }
      }
    }
    writer->WritesDone();
    EXPECT_TRUE(writer->Finish().ok());
    return response;
  }

  std::filesystem::path db_;
  std::string target_;
  std::shared_ptr<profiler::ProfileStore> store_;
  std::unique_ptr<ProfilerServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pb::Profiler::Stub> stub_;
};

TEST_F(ProfilerServiceTest, StreamsSamplesAndFitsAProfileFromThem) {
  const pb::ReportSamplesResponse streamed = Stream();
  EXPECT_EQ(streamed.accepted(), 21u * 40u);
  EXPECT_EQ(streamed.rejected(), 0u);

  pb::FitProfileRequest request;
  request.set_name("bench-net");
  request.set_parameter_server_bandwidth_mb_per_s(1200);
  request.add_require("S_parm");
  request.add_require("B_req");
  request.add_require("contention");
  grpc::ClientContext context;
  pb::FitProfileResponse response;
  const grpc::Status status = stub_->FitProfile(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const pb::WorkloadProfile& p = response.profile();
  EXPECT_EQ(p.name(), "bench-net");
  EXPECT_EQ(p.version(), 1);
  EXPECT_NEAR(p.parameter_size_mb(), 100, 0.01);
  EXPECT_NEAR(p.required_bandwidth_mb_per_s(), 500, 1);
  // The jitter is 1%: a1 and b1 come back within 0.05.
  EXPECT_NEAR(p.contention().a1(), 0.4, 0.05);
  EXPECT_NEAR(p.contention().b1(), -0.4, 0.05);
  ASSERT_EQ(p.compute_size(), 1);
  EXPECT_EQ(p.compute(0).instance_type(), "g4dn.xlarge");
  EXPECT_NEAR(p.compute(0).measured_samples_per_s(), 64 / IterationTime(1), 1);
  bool loss_unidentified = false;
  for (const pb::FitQuality& q : response.quality()) {
    if (q.parameter() == "g1..g5") loss_unidentified = !q.identified();
  }
  EXPECT_TRUE(loss_unidentified);  // no loss in these samples

  // Stored: Get returns the same profile, a second fit is version 2.
  grpc::ClientContext get_context;
  pb::GetProfileRequest get;
  get.set_name("bench-net");
  pb::WorkloadProfile fetched;
  ASSERT_TRUE(stub_->GetProfile(&get_context, get, &fetched).ok());
  EXPECT_EQ(fetched.SerializeAsString(), p.SerializeAsString());
  grpc::ClientContext again;
  ASSERT_TRUE(stub_->FitProfile(&again, request, &response).ok());
  EXPECT_EQ(response.profile().version(), 2);
}

TEST_F(ProfilerServiceTest, FitProfileRefusesABaseThatPutProfileRefuses) {
  Stream();
  struct Case {
    std::function<void(pb::WorkloadProfile*)> set;
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](pb::WorkloadProfile* b) { b->mutable_compute(0)->set_batch_per_gpu((1 << 20) + 1); },
       "base.compute[0].batch_per_gpu = 1048577"},
      {[](pb::WorkloadProfile* b) { b->mutable_compute(0)->set_batch_per_gpu(-5); },
       "base.compute[0].batch_per_gpu = -5"},
      {[](pb::WorkloadProfile* b) { b->set_parameter_size_mb(-1); }, "base.parameter_size_mb = -1"},
  };
  for (const Case& c : cases) {
    pb::FitProfileRequest request;
    request.set_name("bad-base");
    request.set_parameter_server_bandwidth_mb_per_s(1200);
    pb::WorkloadProfile* base = request.mutable_base();
    base->set_name("b");
    base->set_parameter_size_mb(100);
    base->set_required_bandwidth_mb_per_s(500);
    pb::ComputeProfile* compute = base->add_compute();
    compute->set_instance_type("g4dn.xlarge");
    compute->set_batch_per_gpu(64);
    compute->set_measured_samples_per_s(100);
    c.set(base);
    // PutProfile refuses the same values.
    grpc::ClientContext put_context;
    pb::WorkloadProfile put_response;
    EXPECT_EQ(stub_->PutProfile(&put_context, *base, &put_response).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT)
        << c.says;
    grpc::ClientContext context;
    pb::FitProfileResponse response;
    const grpc::Status s = stub_->FitProfile(&context, request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.says;
    EXPECT_THAT(s.error_message(), HasSubstr(c.says));
  }
  // Nothing was stored.
  grpc::ClientContext list_context;
  pb::ListProfilesResponse listed;
  ASSERT_TRUE(stub_->ListProfiles(&list_context, {}, &listed).ok());
  for (const pb::WorkloadProfile& p : listed.profiles()) {
    EXPECT_NE(p.name(), "bad-base");
    EXPECT_NE(p.name(), "b");
  }
}

// The agent's sink: a batch the profiler answers for with INVALID_ARGUMENT because one message
// could not be parsed (a string that is not UTF-8) is an answer for the whole batch (its valid
// samples stored, the bad one rejected), not a failure to retry.
TEST_F(ProfilerServiceTest, TheAgentsSinkTakesARefusalWithCountsAsTheAnswer) {
  std::unique_ptr<SampleSink> sink = MakeProfilerSink(target_);
  std::vector<pb::Sample> batch(3);
  for (int i = 0; i < 3; ++i) {
    batch[i].set_job_id("sink-utf8");
    batch[i].set_worker_id("w0");
    batch[i].set_step(i + 1);
    batch[i].set_iteration_time_s(0.1);
  }
  batch[1].set_instance_type("\xc3\x28");  // not UTF-8: the profiler cannot parse it
  absl::StatusOr<SinkReply> reply = sink->Send(batch);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->accepted, 2u);
  EXPECT_EQ(reply->rejected, 1u);
  ASSERT_FALSE(reply->errors.empty());
  EXPECT_THAT(reply->errors[0], HasSubstr("samples[1]"));
  grpc::ClientContext context;
  pb::GetJobProgressRequest request;
  request.set_job_id("sink-utf8");
  pb::GetJobProgressResponse progress;
  ASSERT_TRUE(stub_->GetJobProgress(&context, request, &progress).ok());
  ASSERT_EQ(progress.workers_size(), 1);
  EXPECT_EQ(progress.workers(0).samples(), 2);
  EXPECT_EQ(progress.workers(0).steps(), 3);
}

TEST_F(ProfilerServiceTest, JobProgressSumsEachWorkersHighestStep) {
  Stream();  // job prof-n4: workers w0..w3 at steps 0..39
  grpc::ClientContext context;
  pb::GetJobProgressRequest request;
  request.set_job_id("prof-n4");
  pb::GetJobProgressResponse progress;
  ASSERT_TRUE(stub_->GetJobProgress(&context, request, &progress).ok());
  ASSERT_EQ(progress.workers_size(), 4);
  EXPECT_EQ(progress.workers(2).worker_id(), "w2");
  EXPECT_EQ(progress.workers(2).steps(), 39);
  EXPECT_EQ(progress.workers(2).samples(), 40);
  EXPECT_EQ(progress.workers(2).last_wall_time_s(), 1.7e9 + 39);
  EXPECT_EQ(progress.total_steps(), 4 * 39);

  grpc::ClientContext unknown_context;
  request.set_job_id("no-such-job");
  ASSERT_TRUE(stub_->GetJobProgress(&unknown_context, request, &progress).ok());
  EXPECT_EQ(progress.workers_size(), 0);
  EXPECT_EQ(progress.total_steps(), 0);

  grpc::ClientContext empty_context;
  request.set_job_id("");
  grpc::Status empty = stub_->GetJobProgress(&empty_context, request, &progress);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty.error_message(), HasSubstr("job_id"));
}

TEST_F(ProfilerServiceTest, JobProgressSaturatesInsteadOfWrapping) {
  // Two workers at step 2^63-1: the sum is not representable and must not wrap to -2.
  grpc::ClientContext context;
  pb::ReportSamplesResponse response;
  auto writer = stub_->ReportSamples(&context, &response);
  for (const char* worker : {"w0", "w1"}) {
    pb::Sample s;
    s.set_job_id("huge-steps");
    s.set_worker_id(worker);
    s.set_step(std::numeric_limits<std::int64_t>::max());
    s.set_iteration_time_s(0.5);
    ASSERT_TRUE(writer->Write(s));
  }
  writer->WritesDone();
  ASSERT_TRUE(writer->Finish().ok());
  ASSERT_EQ(response.accepted(), 2u);
  grpc::ClientContext progress_context;
  pb::GetJobProgressRequest request;
  request.set_job_id("huge-steps");
  pb::GetJobProgressResponse progress;
  ASSERT_TRUE(stub_->GetJobProgress(&progress_context, request, &progress).ok());
  ASSERT_EQ(progress.workers_size(), 2);
  EXPECT_EQ(progress.total_steps(), std::numeric_limits<std::int64_t>::max());
}

TEST_F(ProfilerServiceTest, RejectsBadSamplesWithTheirReason) {
  const pb::ReportSamplesResponse streamed = Stream(/*bad_every=*/100);
  EXPECT_EQ(streamed.rejected(), 9u);
  EXPECT_EQ(streamed.accepted(), 21u * 40u - 9u);
  ASSERT_GT(streamed.errors_size(), 0);
  EXPECT_EQ(streamed.errors(0), "samples[0]: loss = -1: must not be negative");
  EXPECT_EQ(*store_->CountSamples(), static_cast<std::int64_t>(streamed.accepted()));
}

TEST_F(ProfilerServiceTest, FitNamesWhatIsMissing) {
  grpc::ClientContext context;
  pb::FitProfileRequest request;
  request.set_name("x");
  pb::FitProfileResponse response;
  grpc::Status status = stub_->FitProfile(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), HasSubstr("no samples"));

  Stream();
  request.add_job_ids("prof-n1");
  request.add_job_ids("nope");
  grpc::ClientContext c2;
  status = stub_->FitProfile(&c2, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "job_ids[1] = \"nope\": no samples stored");

  request.clear_job_ids();
  request.add_job_ids("prof-n1");
  request.add_require("contention");
  grpc::ClientContext c3;
  status = stub_->FitProfile(&c3, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(),
            "required parameter contention not identified: contention needs runs with at least "
            "3 distinct worker counts; got 1");
}

TEST_F(ProfilerServiceTest, ImportLogIsAllOrNothingWithStopOnError) {
  const std::string log =
      "Wall time,Step,Value\n1568069781.1,101,8.5\n1568069791.1,201,8.6\n1568069801.1,301,inf\n";
  pb::ImportLogRequest request;
  request.set_job_id("tb");
  request.set_content(log);
  request.set_path("upload.csv");
  request.set_stop_on_error(true);
  pb::ImportLogResponse response;
  grpc::ClientContext c1;
  grpc::Status status = stub_->ImportLog(&c1, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "upload.csv:4: cluster_steps_per_s = inf: must be finite");
  EXPECT_EQ(*store_->CountSamples(), 0);

  request.set_stop_on_error(false);
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->ImportLog(&c2, request, &response).ok());
  EXPECT_EQ(response.imported(), 2u);
  EXPECT_EQ(response.skipped(), 1u);
  ASSERT_EQ(response.errors_size(), 1);
  EXPECT_EQ(response.errors(0), "upload.csv:4: cluster_steps_per_s = inf: must be finite");
  EXPECT_EQ(*store_->CountSamples(), 2);

  grpc::ClientContext c3;
  pb::ImportLogRequest empty;
  EXPECT_EQ(stub_->ImportLog(&c3, empty, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

// A checkpoint export of one run: `speed` global steps/s, a checkpoint every 4000 steps.
std::string CheckpointCsv(double speed, int runs = 2) {
  std::string csv = "Wall Time,Step,Accuracy,Run\n";
  for (int run = 1; run <= runs; ++run) {
    for (int step = 0; step <= 32000; step += 4000) {
      csv += absl::StrFormat("%.6f,%d,0.5,%d\n",
                             1.55e9 + run * 1e5 + step / (speed * (1 + 0.002 * run)), step, run);
    }
  }
  return csv;
}

TEST_F(ProfilerServiceTest, FitsTheSharedPsModelFromCheckpointExportsAndValidatesIt) {
  // Speeds the shared-ps model gives for z = 0.2 (K80), 0.05 (V100), d = 0.02 s, kappa 0.3.
  auto speed = [](const std::vector<std::pair<double, int>>& workers, int servers) {
    std::vector<int> counts;
    std::vector<double> z;
    for (const auto& [compute, n] : workers) {
      counts.push_back(n);
      z.push_back(compute);
    }
    const predictor::PsLoad load = predictor::SharedPsLoad(counts, z, 0.02 / servers, 0.3);
    double rate = 0;
    for (size_t i = 0; i < z.size(); ++i) rate += counts[i] / (z[i] + load.response_time_s);
    return rate;
  };
  auto import = [&](const std::string& job, const std::string& gpu, int n, int servers,
                    const std::string& cluster, double steps_per_s) {
    pb::ImportLogRequest request;
    request.set_job_id(job);
    request.set_path(job + ".csv");
    request.set_content(CheckpointCsv(steps_per_s));
    if (cluster.empty()) {
      request.set_gpu_type(gpu);
      request.set_cluster_workers(n);
    } else {
      request.set_cluster(cluster);
    }
    request.set_parameter_servers(servers);
    request.set_batch_size(128);
    pb::ImportLogResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub_->ImportLog(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.errors_size(), 0) << response.errors(0);
    EXPECT_EQ(response.runs(), 2u);
    EXPECT_EQ(response.imported(), 18u);
  };
  for (int n : {1, 2, 4, 6, 8}) {
    import(absl::StrCat("study/k80-", n), "K80", n, 1, "", speed({{ 0.2, n }}, 1));
    import(absl::StrCat("study/v100-", n), "V100", n, 1, "", speed({{ 0.05, n }}, 1));
    import(absl::StrCat("study/k80-2ps-", n), "K80", n, 2, "", speed({{ 0.2, n }}, 2));
  }
  import("mixed/a", "", 0, 1, "V100=2,K80=2", speed({{0.2, 2}, { 0.05, 2 }}, 1));
  import("mixed/b", "", 0, 2, "V100=4", speed({{ 0.05, 4 }}, 2));

  pb::FitProfileRequest fit;
  fit.set_name("study");
  fit.add_job_ids("study");  // the jobs under "study/"
  fit.set_parameter_server_bandwidth_mb_per_s(1000);
  fit.add_require("ps");
  fit.add_require("kappa");
  pb::FitProfileResponse fitted;
  grpc::ClientContext c1;
  const grpc::Status status = stub_->FitProfile(&c1, fit, &fitted);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const pb::WorkloadProfile& p = fitted.profile();
  EXPECT_EQ(p.model_variant(), pb::MODEL_VARIANT_SHARED_PS);
  EXPECT_NEAR(p.parameter_size_mb(), 10, 0.3);  // d B_ps / 2
  EXPECT_NEAR(p.shared_ps().queueing(), 0.3, 0.1);
  ASSERT_EQ(p.compute_size(), 2);
  for (const pb::ComputeProfile& c : p.compute()) {
    EXPECT_NEAR(c.compute_time_s(), c.gpu_type() == "K80" ? 0.2 : 0.05, 0.004) << c.gpu_type();
    EXPECT_EQ(c.batch_per_gpu(), 128);
  }

  pb::ValidateProfileRequest validate;
  validate.add_fit_job_ids("study");
  validate.add_check_job_ids("mixed");
  validate.set_parameter_server_bandwidth_mb_per_s(1000);
  pb::ValidateProfileResponse checked;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->ValidateProfile(&c2, validate, &checked).ok());
  ASSERT_EQ(checked.clusters_size(), 2);
  EXPECT_LT(checked.mape(), 1.5);
  EXPECT_EQ(checked.clusters(0).runs(), 2);
  EXPECT_NEAR(checked.clusters(0).iterations(), 32000, 1e-9);

  validate.add_check_job_ids("nope");
  grpc::ClientContext c3;
  const grpc::Status missing = stub_->ValidateProfile(&c3, validate, &checked);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(missing.error_message(), "check_job_ids[1] = \"nope\": no samples stored");

  // A composition and a type at once is ambiguous.
  pb::ImportLogRequest both;
  both.set_job_id("x");
  both.set_content(CheckpointCsv(10));
  both.set_cluster("V100=1");
  both.set_gpu_type("V100");
  pb::ImportLogResponse response;
  grpc::ClientContext c4;
  const grpc::Status ambiguous = stub_->ImportLog(&c4, both, &response);
  EXPECT_EQ(ambiguous.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(ambiguous.error_message(), HasSubstr("give one or the other"));

  // The request limits cover the new fields: server counts, variants, iterations.
  pb::ImportLogRequest servers;
  servers.set_job_id("x");
  servers.set_content(CheckpointCsv(10));
  servers.set_gpu_type("V100");
  servers.set_parameter_servers(1001);
  grpc::ClientContext c5;
  const grpc::Status too_many = stub_->ImportLog(&c5, servers, &response);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(too_many.error_message(),
            "parameter_servers = 1001: must be in [0, 1000] (0 = as the log says)");
  pb::ValidateProfileRequest bad = validate;
  bad.set_model_variant(static_cast<pb::ModelVariant>(7));
  grpc::ClientContext c6;
  const grpc::Status variant = stub_->ValidateProfile(&c6, bad, &checked);
  EXPECT_EQ(variant.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(variant.error_message(),
              HasSubstr("model_variant = 7: not a spotdnn.v1.ModelVariant"));
  bad = validate;
  bad.set_iterations(1e16);
  grpc::ClientContext c7;
  const grpc::Status iterations = stub_->ValidateProfile(&c7, bad, &checked);
  EXPECT_EQ(iterations.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(iterations.error_message(), HasSubstr("iterations = 1e+16"));

  // A validation stops at the server's limit on a fit.
  ProfilerOptions options;
  options.max_fit_time = absl::Nanoseconds(1);
  ProfilerServiceImpl limited(store_, std::move(options));
  auto started = StartServer("", {&limited});
  ASSERT_TRUE(started.ok()) << started.status();
  auto stub = pb::Profiler::NewStub(started->server->InProcessChannel(DefaultChannelArguments()));
  validate.mutable_check_job_ids()->RemoveLast();  // "nope"
  grpc::ClientContext c8;
  const grpc::Status stopped = stub->ValidateProfile(&c8, validate, &checked);
  EXPECT_EQ(stopped.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_THAT(stopped.error_message(), HasSubstr("the validation was stopped"));
  started->server->Shutdown();
}

// Importing the same runs again stores none of their samples twice; the runs are still counted.
TEST_F(ProfilerServiceTest, ReimportingCheckpointRunsCountsThemAsDuplicates) {
  pb::ImportLogRequest request;
  request.set_job_id("again");
  request.set_content(CheckpointCsv(10));
  request.set_gpu_type("V100");
  request.set_cluster_workers(2);
  pb::ImportLogResponse first, second;
  grpc::ClientContext c1, c2;
  ASSERT_TRUE(stub_->ImportLog(&c1, request, &first).ok());
  ASSERT_TRUE(stub_->ImportLog(&c2, request, &second).ok());
  EXPECT_EQ(first.runs(), 2u);
  EXPECT_EQ(first.duplicates(), 0u);
  EXPECT_EQ(second.runs(), 2u);
  EXPECT_EQ(second.imported(), first.imported());
  EXPECT_EQ(second.duplicates(), first.imported());
  EXPECT_EQ(*store_->CountSamples(std::vector<std::string>{"again"}),
            static_cast<std::int64_t>(first.imported()));
}

TEST_F(ProfilerServiceTest, PutListGetDeleteProfiles) {
  const DataRegistry registry = DataRegistry::WithBuiltins();
  pb::WorkloadProfile resnet = *registry.ResolveWorkload("resnet110");
  pb::WorkloadProfile stored;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->PutProfile(&c1, resnet, &stored).ok());
  EXPECT_EQ(stored.version(), 1);
  pb::WorkloadProfile unnamed;
  grpc::ClientContext c2;
  EXPECT_EQ(stub_->PutProfile(&c2, unnamed, &stored).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext c3;
  pb::ListProfilesResponse list;
  ASSERT_TRUE(stub_->ListProfiles(&c3, pb::ListProfilesRequest(), &list).ok());
  ASSERT_EQ(list.profiles_size(), 1);
  pb::WorkloadProfile expected = resnet;
  expected.set_version(1);
  EXPECT_EQ(list.profiles(0).SerializeAsString(), expected.SerializeAsString());

  grpc::ClientContext c4;
  pb::DeleteProfileRequest del;
  del.set_name("resnet110");
  pb::DeleteProfileResponse deleted;
  ASSERT_TRUE(stub_->DeleteProfile(&c4, del, &deleted).ok());
  EXPECT_EQ(deleted.deleted(), 1);
  grpc::ClientContext c5;
  pb::GetProfileRequest get;
  get.set_name("resnet110");
  EXPECT_EQ(stub_->GetProfile(&c5, get, &stored).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ProfilerServiceTest, ImportsTheCmdareFolderFromAPath) {
  const char* env = std::getenv("SPOTDNN_DATA_DIR");
  const std::string dir =
      std::string(env != nullptr && *env != '\0' ? env : SPOTDNN_DATA_DIR) + "/cmdare/p100";
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "CM-DARE data not found at " << dir;
  pb::ImportLogRequest request;
  request.set_path(dir);
  request.set_job_id("p100");
  pb::ImportLogResponse response;
  // The fixture's server has no import roots: it reads no path.
  grpc::ClientContext refused;
  const grpc::Status status = stub_->ImportLog(&refused, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(status.error_message(), HasSubstr("no --import_root"));

  // A server whose import root holds the folder reads it.
  ProfilerOptions options;
  auto roots = profiler::ImportRoots::Create({std::filesystem::path(dir).parent_path().string()});
  ASSERT_TRUE(roots.ok()) << roots.status();
  options.import_roots = *std::move(roots);
  ProfilerServiceImpl rooted(store_, std::move(options));
  auto started = StartServer("", {&rooted});
  ASSERT_TRUE(started.ok()) << started.status();
  auto stub = pb::Profiler::NewStub(started->server->InProcessChannel(DefaultChannelArguments()));
  grpc::ClientContext context;
  const grpc::Status imported = stub->ImportLog(&context, request, &response);
  ASSERT_TRUE(imported.ok()) << imported.error_message();
  EXPECT_EQ(response.files(), 32u);
  EXPECT_EQ(response.imported(), 1520u);
  EXPECT_EQ(response.duplicates(), 0u);
  EXPECT_EQ(*store_->CountSamples(), 1520);
  // Importing it again stores nothing twice.
  grpc::ClientContext again;
  ASSERT_TRUE(stub->ImportLog(&again, request, &response).ok());
  EXPECT_EQ(response.imported(), 1520u);
  EXPECT_EQ(response.duplicates(), 1520u);
  EXPECT_EQ(*store_->CountSamples(), 1520);
  started->server->Shutdown();
}

// The real binary over one database file, started twice: what the first stored, the second serves.
class ProfilerBinary {
 public:
  ProfilerBinary(const std::string& db, const std::string& port_file) : port_file_(port_file) {
    const std::string binary = std::string(SPOTDNN_BINARY_DIR) + "/spotdnn-profiler";
    std::filesystem::remove(port_file);
    pid_ = fork();
    if (pid_ == 0) {
      const std::string port_flag = "--port_file=" + port_file, db_flag = "--db=" + db;
      execl(binary.c_str(), binary.c_str(), "--listen=127.0.0.1:0", port_flag.c_str(),
            db_flag.c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < 200 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream in(port_file);
      in >> port_;
    }
  }
  // Sends SIGTERM and returns the exit status (-1 when killed by a signal).
  int Stop() {
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    std::filesystem::remove(port_file_);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  std::string port_file_;
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST(ProfilerBinaryTest, ServesOnAFreePortAndKeepsProfilesAcrossRestarts) {
  ASSERT_TRUE(std::filesystem::exists(std::string(SPOTDNN_BINARY_DIR) + "/spotdnn-profiler"));
  const std::string base = std::filesystem::temp_directory_path() /
                           ("spotdnn-profiler-binary-" + std::to_string(::getpid()));
  const std::string db = base + ".db";
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
  {
    ProfilerBinary server(db, base + ".port");
    ASSERT_GT(server.pid(), 0);
    ASSERT_GT(server.port(), 0) << "no port written";
    auto stub = pb::Profiler::NewStub(MakeChannel("127.0.0.1:" + std::to_string(server.port())));
    pb::WorkloadProfile profile = *DataRegistry::WithBuiltins().ResolveWorkload("resnet110");
    pb::WorkloadProfile stored;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status s = stub->PutProfile(&context, profile, &stored);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(server.Stop(), 0);
  }
  {
    ProfilerBinary server(db, base + ".port");
    ASSERT_GT(server.port(), 0) << "no port written";
    auto stub = pb::Profiler::NewStub(MakeChannel("127.0.0.1:" + std::to_string(server.port())));
    pb::GetProfileRequest get;
    get.set_name("resnet110");
    pb::WorkloadProfile fetched;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    const grpc::Status s = stub->GetProfile(&context, get, &fetched);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(fetched.version(), 1);
    EXPECT_EQ(fetched.loss().g3(), 2507.6);
    EXPECT_EQ(server.Stop(), 0);
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db + suffix);
}

}  // namespace
}  // namespace spotdnn::services
