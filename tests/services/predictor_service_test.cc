// Starts the predictor service on 127.0.0.1:0 and checks it against the in-process model.
#include "services/predictor/predictor_service.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "services/common/convert.h"
#include "services/common/server.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;

class PredictorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_ = std::make_shared<DataRegistry>(DataRegistry::WithBuiltins());
    service_ = std::make_unique<PredictorServiceImpl>(registry_);
    auto started = StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    ASSERT_GT(started->port, 0);
    port_ = started->port;
    stub_ = pb::Predictor::NewStub(MakeChannel("127.0.0.1:" + std::to_string(started->port)));
    auto model = predictor::PerformanceModel::Create(
        ToDomain(*registry_->ResolveWorkload("resnet110")),
        ToDomain(*registry_->ResolveCatalog("aws-spotdnn-prototype")));
    ASSERT_TRUE(model.ok());
    model_ = std::make_unique<predictor::PerformanceModel>(*std::move(model));
  }
  void TearDown() override { server_->Shutdown(); }

  static pb::PredictRequest Request(std::vector<std::pair<std::string, int>> counts, double loss) {
    pb::PredictRequest r;
    r.mutable_workload()->set_name("resnet110");
    r.mutable_catalog()->set_name("aws-spotdnn-prototype");
    for (const auto& [type, n] : counts) {
      auto* c = r.mutable_cluster()->add_instances();
      c->set_instance_type(type);
      c->set_count(n);
    }
    r.set_target_loss(loss);
    return r;
  }

  grpc::Status Call(const pb::PredictRequest& request, pb::PredictResponse* response) {
    grpc::ClientContext context;
    return stub_->Predict(&context, request, response);
  }

  void ExpectInvalid(const pb::PredictRequest& request, const std::string& names) {
    pb::PredictResponse response;
    const grpc::Status s = Call(request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(names));
  }

  int port_ = 0;
  std::shared_ptr<DataRegistry> registry_;
  std::unique_ptr<PredictorServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<pb::Predictor::Stub> stub_;
  std::unique_ptr<predictor::PerformanceModel> model_;
};

TEST_F(PredictorServiceTest, PredictEqualsTheInProcessModel) {
  pb::PredictResponse response;
  ASSERT_TRUE(Call(Request({{"p2.xlarge", 2}, {"g3.8xlarge", 4}}, 0.8), &response).ok());
  auto expected = model_->Predict({.counts = {2, 0, 4, 0, 0}}, 0.8);
  ASSERT_TRUE(expected.ok());
  const pb::Prediction& p = response.prediction();
  EXPECT_EQ(p.time_s(), expected->estimate.time_s);
  EXPECT_EQ(p.cost_usd(), expected->estimate.cost_usd);
  EXPECT_EQ(p.normalized_iterations(), 17926);
  EXPECT_EQ(p.wa_batch(), expected->estimate.wa_batch);
  EXPECT_EQ(p.convergence_coefficient(), expected->estimate.convergence_coefficient);
  EXPECT_EQ(p.on_demand_cost_usd(), expected->estimate.on_demand_cost_usd);
  ASSERT_EQ(p.workers_size(), 2);
  EXPECT_EQ(p.workers(1).instance_type(), "g3.8xlarge");
  EXPECT_EQ(p.workers(1).iteration_time_s(), expected->workers[1].iteration_time_s);
  EXPECT_EQ(response.workload(), "resnet110");
}

TEST_F(PredictorServiceTest, PredictBatchEqualsTheInProcessModel) {
  pb::PredictBatchRequest request;
  request.mutable_workload()->set_name("resnet110");
  request.mutable_catalog()->set_name("aws-spotdnn-prototype");
  request.set_target_loss(0.9);
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> count(0, 4);
  std::vector<std::vector<int>> clusters;
  const auto& types = model_->catalog().types;
  while (clusters.size() < 500) {
    std::vector<int> counts(types.size());
    for (int& c : counts) c = count(rng);
    if (std::accumulate(counts.begin(), counts.end(), 0) == 0) continue;
    pb::Cluster* cluster = request.add_clusters();
    for (size_t k = 0; k < counts.size(); ++k) {
      auto* c = cluster->add_instances();
      c->set_instance_type(types[k].name);
      c->set_count(counts[k]);
    }
    clusters.push_back(counts);
  }
  pb::PredictBatchResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->PredictBatch(&context, request, &response).ok());
  ASSERT_EQ(response.items_size(), 500);
  int errors = 0;
  for (size_t i = 0; i < clusters.size(); ++i) {
    const predictor::Estimate e = model_->Evaluate(clusters[i], 0.9);
    const pb::BatchItem& item = response.items(i);
    ASSERT_EQ(item.error_code() == 0, e.ok()) << i;
    if (!e.ok()) {
      ++errors;
      continue;
    }
    EXPECT_EQ(item.prediction().time_s(), e.time_s);
    EXPECT_EQ(item.prediction().cost_usd(), e.cost_usd);
    EXPECT_EQ(item.prediction().normalized_iterations(), e.normalized_iterations);
    EXPECT_EQ(item.prediction().workers_size(), 0) << "no breakdown unless detailed";
  }
  // The batch reported per item what the model said; at loss 0.9 most of these small clusters
  // have an answer, so a batch that failed them all cannot pass as "equal".
  EXPECT_LT(errors, static_cast<int>(clusters.size()) / 10)
      << errors << " of " << clusters.size() << " clusters had no answer";
}

TEST_F(PredictorServiceTest, DetailedBatchCarriesTheBreakdown) {
  pb::PredictBatchRequest request;
  request.mutable_workload()->set_name("resnet110");
  request.mutable_catalog()->set_name("aws-spotdnn-prototype");
  request.set_target_loss(0.8);
  request.set_detailed(true);
  *request.add_clusters() = Request({{"p2.xlarge", 2}, {"g3.8xlarge", 4}}, 0.8).cluster();
  pb::PredictBatchResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->PredictBatch(&context, request, &response).ok());
  ASSERT_EQ(response.items_size(), 1);
  EXPECT_EQ(response.items(0).prediction().workers_size(), 2);
  EXPECT_NEAR(response.items(0).prediction().cost_usd(), 2.985872, 1e-6);
}

TEST_F(PredictorServiceTest, BadInputIsInvalidArgumentNamingIt) {
  ExpectInvalid(Request({{"p2.xlarge", -2}}, 0.8), "count = -2");
  ExpectInvalid(Request({{"p9.huge", 1}}, 0.8), "\"p9.huge\"");
  ExpectInvalid(Request({{"p2.xlarge", 1}}, std::nan("")), "target_loss = nan");
  ExpectInvalid(Request({{"p2.xlarge", 1}}, 0.5), "g5 = 0.5");
  ExpectInvalid(Request({{"p2.xlarge", 1}}, 0.3), "g5 = 0.5");
  ExpectInvalid(Request({{"p2.xlarge", 0}}, 0.8), "empty");
  ExpectInvalid(Request({}, 0.8), "empty");
  ExpectInvalid(Request({{"p2.xlarge", 1}, {"p2.xlarge", 1}}, 0.8), "more than once");
  pb::PredictRequest no_workload = Request({{"p2.xlarge", 1}}, 0.8);
  no_workload.clear_workload();
  ExpectInvalid(no_workload, "workload");
  pb::PredictRequest path = Request({{"p2.xlarge", 1}}, 0.8);
  path.mutable_catalog()->set_name("/etc/passwd");
  ExpectInvalid(path, "reads no files");
  pb::PredictRequest inline_bad = Request({{"p2.xlarge", 1}}, 0.8);
  *inline_bad.mutable_catalog()->mutable_catalog() =
      *registry_->ResolveCatalog("aws-spotdnn-prototype");
  inline_bad.mutable_catalog()
      ->mutable_catalog()
      ->mutable_instance_types(0)
      ->set_spot_price_per_hour(-1);
  ExpectInvalid(inline_bad, "spot_price_per_hour = -1");
}

TEST_F(PredictorServiceTest, UnknownNamesAreNotFoundAndMissingDataFailedPrecondition) {
  pb::PredictRequest unknown = Request({{"p2.xlarge", 1}}, 0.8);
  unknown.mutable_workload()->set_name("gpt-9");
  pb::PredictResponse response;
  grpc::Status s = Call(unknown, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("gpt-9"));
  pb::PredictRequest vgg = Request({{"p3.2xlarge", 1}}, 0.8);
  vgg.mutable_workload()->set_name("vgg19");
  vgg.mutable_catalog()->set_name("aws-paper-2023");
  s = Call(vgg, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  // resnet110 has no compute time for p3.2xlarge.
  pb::PredictRequest v100 = Request({{"p3.2xlarge", 1}}, 0.8);
  v100.mutable_catalog()->set_name("aws-paper-2023");
  s = Call(v100, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("p3.2xlarge"));
}

TEST_F(PredictorServiceTest, BatchBadInputNamesTheCluster) {
  pb::PredictBatchRequest request;
  request.mutable_workload()->set_name("resnet110");
  request.mutable_catalog()->set_name("aws-spotdnn-prototype");
  request.set_target_loss(0.8);
  for (int i = 0; i < 4; ++i) *request.add_clusters() = Request({{"p2.xlarge", 1}}, 0.8).cluster();
  request.mutable_clusters(3)->mutable_instances(0)->set_count(-1);
  pb::PredictBatchResponse response;
  grpc::ClientContext context;
  const grpc::Status s = stub_->PredictBatch(&context, request, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("clusters[3].instances[0].count = -1"));
  request.mutable_clusters(3)->mutable_instances(0)->set_count(0);
  grpc::ClientContext context2;
  const grpc::Status empty = stub_->PredictBatch(&context2, request, &response);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(empty.error_message(), HasSubstr("clusters[3] is empty"));
  request.mutable_clusters(3)->mutable_instances(0)->set_count(1);
  request.set_target_loss(0.2);
  grpc::ClientContext context3;
  EXPECT_EQ(stub_->PredictBatch(&context3, request, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(PredictorServiceTest, LossCurveEndsAtTheTarget) {
  pb::LossCurveRequest request;
  request.mutable_workload()->set_name("resnet110");
  request.mutable_catalog()->set_name("aws-spotdnn-prototype");
  *request.mutable_cluster() = Request({{"p2.xlarge", 1}}, 1.0).cluster();
  request.set_target_loss(1.0);
  request.set_points(20);
  pb::LossCurveResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->LossCurve(&context, request, &response).ok());
  ASSERT_EQ(response.points_size(), 20);
  EXPECT_NEAR(response.points(19).time_s(), 2034.30, 0.01);
  // j is rounded to an integer in the prototype, so the end is within rounding of the target.
  EXPECT_NEAR(response.points(19).loss(), 1.0, 1e-3);
  EXPECT_GT(response.points(0).loss(), response.points(19).loss());
}

TEST_F(PredictorServiceTest, InlineProfileAndCatalogWork) {
  pb::PredictRequest request = Request({{"p2.xlarge", 1}}, 1.0);
  *request.mutable_workload()->mutable_profile() = *registry_->ResolveWorkload("resnet110");
  *request.mutable_catalog()->mutable_catalog() =
      *registry_->ResolveCatalog("aws-spotdnn-prototype");
  pb::PredictResponse response;
  ASSERT_TRUE(Call(request, &response).ok());
  EXPECT_EQ(response.prediction().normalized_iterations(), 3729);
}

TEST_F(PredictorServiceTest, PredictsIterationAndEpochTargets) {
  // The fitted GCE workload has no loss model: targets in iterations or epochs.
  pb::PredictRequest r;
  r.mutable_workload()->set_name("resnet32-cifar10-gce");
  r.mutable_catalog()->set_name("gce-icac-2019");
  for (const auto& [type, n] :
       std::vector<std::pair<std::string, int>>{{"gce-v100", 1}, {"gce-p100", 1}, {"gce-k80", 2}}) {
    auto* c = r.mutable_cluster()->add_instances();
    c->set_instance_type(type);
    c->set_count(n);
  }
  r.set_target_iterations(64000);
  pb::PredictResponse by_iterations;
  ASSERT_TRUE(Call(r, &by_iterations).ok());
  const pb::Prediction& p = by_iterations.prediction();
  EXPECT_EQ(p.normalized_iterations(), 64000);
  EXPECT_EQ(p.target_iterations(), 64000);
  EXPECT_NEAR(p.time_s(), 64000 * p.expected_iteration_time_s(), 1e-6);
  EXPECT_GT(p.cost_usd(), 0);
  EXPECT_GT(p.ps_utilization(), 0);
  EXPECT_EQ(p.workers_size(), 3);
  // 163.84 epochs of 50,000 samples at batch 128 are the same 64,000 iterations.
  r.set_target_iterations(0);
  r.set_target_epochs(163.84);
  r.set_dataset_size(50000);
  pb::PredictResponse by_epochs;
  ASSERT_TRUE(Call(r, &by_epochs).ok());
  EXPECT_NEAR(by_epochs.prediction().normalized_iterations(), 64000, 1e-6);
  EXPECT_NEAR(by_epochs.prediction().time_s(), p.time_s(), 1e-6);
  EXPECT_EQ(by_epochs.prediction().dataset_size(), 50000);
  // The batch call answers the same.
  pb::PredictBatchRequest batch;
  *batch.mutable_workload() = r.workload();
  *batch.mutable_catalog() = r.catalog();
  *batch.add_clusters() = r.cluster();
  batch.set_target_iterations(64000);
  pb::PredictBatchResponse items;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->PredictBatch(&context, batch, &items).ok());
  ASSERT_EQ(items.items_size(), 1);
  EXPECT_NEAR(items.items(0).prediction().time_s(), p.time_s(), 1e-6);
  // Bad targets name the field; a loss needs a loss model.
  r.set_dataset_size(0);
  ExpectInvalid(r, "dataset_size is required with target_epochs");
  r.set_target_epochs(-1);
  r.set_dataset_size(50000);
  ExpectInvalid(r, "target_epochs = -1");
  r.set_target_epochs(0);
  r.set_dataset_size(0);
  r.set_target_iterations(0.5);
  ExpectInvalid(r, "target_iterations = 0.5");
  r.set_target_iterations(100);
  r.set_target_loss(0.5);
  ExpectInvalid(r, "give one target");
  r.set_target_iterations(0);
  pb::PredictResponse none;
  const grpc::Status no_loss = Call(r, &none);
  EXPECT_EQ(no_loss.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(no_loss.error_message(), HasSubstr("no loss model"));
  // A paper-variant profile needs no loss model for iterations either (the prototype's
  // ResNet-110, which has one, gives the same time for its own j).
  pb::PredictRequest loss = Request({{"p2.xlarge", 2}, {"g3.8xlarge", 1}}, 0.9);
  pb::PredictResponse by_loss;
  ASSERT_TRUE(Call(loss, &by_loss).ok());
  loss.set_target_loss(0);
  loss.set_target_iterations(by_loss.prediction().normalized_iterations());
  pb::PredictResponse same;
  ASSERT_TRUE(Call(loss, &same).ok());
  EXPECT_DOUBLE_EQ(same.prediction().time_s(), by_loss.prediction().time_s());
}

TEST_F(PredictorServiceTest, ListsTheBuiltins) {
  pb::ListCatalogsResponse catalogs;
  grpc::ClientContext c1;
  ASSERT_TRUE(stub_->ListCatalogs(&c1, {}, &catalogs).ok());
  EXPECT_EQ(catalogs.catalogs_size(), 4);  // with local-cpu (the digits example)
  pb::ListWorkloadsResponse workloads;
  grpc::ClientContext c2;
  ASSERT_TRUE(stub_->ListWorkloads(&c2, {}, &workloads).ok());
  EXPECT_EQ(workloads.workloads_size(), 6);
}

// Every spotdnn server answers the standard health check (grpc.health.v1.Health/Check) with
// SERVING. The call is made with a generic stub and hand-encoded messages: the request is an empty
// HealthCheckRequest (service "", the whole server), the answer {status: SERVING} is 08 01.
TEST_F(PredictorServiceTest, AnswersTheStandardHealthCheck) {
  grpc::GenericStub generic(MakeChannel("127.0.0.1:" + std::to_string(port_)));
  grpc::ByteBuffer request, response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  std::promise<grpc::Status> done;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  generic.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request,
                    &response, [&](grpc::Status s) { done.set_value(s); });
  const grpc::Status status = done.get_future().get();
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

// The real binary: --listen=127.0.0.1:0, the port it wrote, a call, and a clean SIGTERM exit.
TEST(PredictorBinary, ServesOnAFreePortAndStopsOnSigterm) {
  const std::string binary = std::string(SPOTDNN_BINARY_DIR) + "/spotdnn-predictor";
  ASSERT_TRUE(std::filesystem::exists(binary)) << binary;
  const std::string port_file = std::filesystem::temp_directory_path() /
                                ("spotdnn-predictor-port-" + std::to_string(::getpid()));
  std::filesystem::remove(port_file);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string port_flag = "--port_file=" + port_file;
    execl(binary.c_str(), binary.c_str(), "--listen=127.0.0.1:0", port_flag.c_str(), nullptr);
    _exit(127);
  }
  int port = 0;
  for (int i = 0; i < 200 && port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream in(port_file);
    in >> port;
  }
  ASSERT_GT(port, 0) << "no port written to " << port_file;
  auto stub = pb::Predictor::NewStub(MakeChannel("127.0.0.1:" + std::to_string(port)));
  pb::PredictRequest request;
  request.mutable_workload()->set_name("resnet110");
  request.mutable_catalog()->set_name("aws-spotdnn-prototype");
  auto* c = request.mutable_cluster()->add_instances();
  c->set_instance_type("g3.16xlarge");
  c->set_count(8);
  request.set_target_loss(0.8);
  pb::PredictResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status s = stub->Predict(&context, request, &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.prediction().normalized_iterations(), 18904);
  stub.reset();  // an open connection would hold shutdown for its grace period
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by a signal instead of exiting";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::filesystem::remove(port_file);
}

}  // namespace
}  // namespace spotdnn::services
