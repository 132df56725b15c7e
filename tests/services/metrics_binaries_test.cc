// --metrics_listen on a real service binary: spotdnn-predictor serving 127.0.0.1:0 with metrics on
// 127.0.0.1:0, a few calls made, then GET /metrics scraped and its RPC counters and histogram read.
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "spotdnn/v1/predictor.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/metrics_sample.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;
using testing_util::Child;
using testing_util::LoggedMetricsPort;
using testing_util::ReadPort;
using testing_util::SampleSum;

std::string Binary(const std::string& name) { return std::string(SPOTDNN_BINARY_DIR) + "/" + name; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class MetricsBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One pair of files per test and process: CTest runs the tests in parallel.
    const std::string base = ::testing::TempDir() + "/metrics_binaries_" +
                             std::to_string(getpid()) + "_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    port_file_ = base + ".port";
    log_ = base + ".log";
    std::remove(port_file_.c_str());
  }
  void TearDown() override {
    std::remove(port_file_.c_str());
    std::remove(log_.c_str());
  }

  std::string port_file_;
  std::string log_;
};

TEST_F(MetricsBinaryTest, CountsCallsByMethodAndCode) {
  Child server({Binary("spotdnn-predictor"), "--listen=127.0.0.1:0", "--port_file=" + port_file_,
                "--metrics_listen=127.0.0.1:0"},
               log_);
  const int port = ReadPort(port_file_);
  ASSERT_GT(port, 0) << ReadAll(log_);
  const int metrics_port = LoggedMetricsPort(log_);
  ASSERT_GT(metrics_port, 0) << ReadAll(log_);

  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto stub = v1::Predictor::NewStub(channel);
  for (int i = 0; i < 2; ++i) {
    grpc::ClientContext context;
    v1::ListCatalogsResponse catalogs;
    ASSERT_TRUE(stub->ListCatalogs(&context, {}, &catalogs).ok());
  }
  {
    grpc::ClientContext context;
    v1::PredictResponse response;
    const grpc::Status s = stub->Predict(&context, v1::PredictRequest(), &response);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }

  {
    // Bytes that are no ListWorkloadsRequest: gRPC's INTERNAL becomes INVALID_ARGUMENT, and the
    // code counted is the one sent.
    grpc::ClientContext context;
    const std::string junk = "\xff\xff\xff";
    grpc::Slice slice(junk);
    grpc::ByteBuffer response;
    const grpc::Status s = grpc::internal::BlockingUnaryCall(
        channel.get(),
        grpc::internal::RpcMethod("/spotdnn.v1.Predictor/ListWorkloads",
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &context, grpc::ByteBuffer(&slice, 1), &response);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  }

  httplib::Client client("127.0.0.1", metrics_port);
  auto got = client.Get("/metrics");
  ASSERT_TRUE(got) << "no answer from the metrics port";
  ASSERT_EQ(got->status, 200);
  const std::string& scrape = got->body;
  EXPECT_THAT(scrape, HasSubstr("# TYPE spotdnn_rpc_requests_total counter\n"));
  EXPECT_THAT(scrape, HasSubstr("# TYPE spotdnn_rpc_duration_seconds histogram\n"));
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_requests_total{method=\"/spotdnn.v1.Predictor/"
                      "ListCatalogs\",code=\"OK\"}"),
            2)
      << scrape;
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_requests_total{method=\"/spotdnn.v1.Predictor/Predict\","
                      "code=\"INVALID_ARGUMENT\"}"),
            1)
      << scrape;
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_requests_total{method=\"/spotdnn.v1.Predictor/Predict\","
                      "code=\"OK\"}"),
            -1)
      << scrape;
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_duration_seconds_count{method=\"/spotdnn.v1.Predictor/"
                      "ListCatalogs\"}"),
            2)
      << scrape;
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_duration_seconds_bucket{method=\"/spotdnn.v1.Predictor/"
                      "ListCatalogs\",le=\"+Inf\"}"),
            2)
      << scrape;
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_requests_total{method=\"/spotdnn.v1.Predictor/ListWorkloads\","
                      "code=\"INVALID_ARGUMENT\"}"),
            1)
      << scrape;
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_requests_total{method=\"/spotdnn.v1.Predictor/ListWorkloads\","
                      "code=\"INTERNAL\"}"),
            -1)
      << scrape;
  stub.reset();  // no open channel to wait for at shutdown
  channel.reset();
  EXPECT_TRUE(server.Stop());
}

TEST_F(MetricsBinaryTest, DetectorServesItsInstanceGauges) {
  Child server({Binary("spotdnn-detector"), "--listen=127.0.0.1:0", "--port_file=" + port_file_,
                "--metrics_listen=127.0.0.1:0", "--db=:memory:"},
               log_);
  const int port = ReadPort(port_file_);
  ASSERT_GT(port, 0) << ReadAll(log_);
  const int metrics_port = LoggedMetricsPort(log_);
  ASSERT_GT(metrics_port, 0) << ReadAll(log_);
  httplib::Client client("127.0.0.1", metrics_port);
  const auto scrape = [&] {
    auto got = client.Get("/metrics");
    return got && got->status == 200 ? got->body : std::string();
  };
  EXPECT_EQ(SampleSum(scrape(), "spotdnn_detector_instances_watched"), 0);

  // An agent-fed instance (no endpoint): watched, not polled.
  auto stub = v1::Detector::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  v1::RegisterInstanceRequest request;
  request.mutable_instance()->set_instance_id("i-1");
  request.mutable_instance()->set_cloud(v1::CLOUD_AWS);
  grpc::ClientContext context;
  v1::RegisterInstanceResponse response;
  const grpc::Status s = stub->RegisterInstance(&context, request, &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  const std::string text = scrape();
  EXPECT_EQ(SampleSum(text, "spotdnn_detector_instances_watched"), 1) << text;
  EXPECT_EQ(SampleSum(text, "spotdnn_detector_instances_polled"), 0) << text;
  EXPECT_EQ(SampleSum(text,
                      "spotdnn_rpc_requests_total{method=\"/spotdnn.v1.Detector/"
                      "RegisterInstance\",code=\"OK\"}"),
            1)
      << text;
  stub.reset();
  EXPECT_TRUE(server.Stop());
}

TEST_F(MetricsBinaryTest, NoMetricsPortByDefault) {
  Child server({Binary("spotdnn-predictor"), "--listen=127.0.0.1:0", "--port_file=" + port_file_},
               log_);
  ASSERT_GT(ReadPort(port_file_), 0) << ReadAll(log_);
  EXPECT_THAT(ReadAll(log_), ::testing::Not(HasSubstr("metrics on")));
  EXPECT_TRUE(server.Stop());
}

TEST_F(MetricsBinaryTest, BadMetricsListenExitsWithStatus2NamingFlagAndValue) {
  // The profiler's own flag keeps its store in memory.
  for (const auto& [binary, own] :
       {std::pair<std::string, std::string>{"spotdnn-predictor", "--catalog_dir="},
        {"spotdnn-profiler", "--db=:memory:"}}) {
    Child server({Binary(binary), "--listen=127.0.0.1:0", "--port_file=" + port_file_,
                  "--metrics_listen=localhost:http", own},
                 log_);
    EXPECT_EQ(server.Wait(std::chrono::seconds(30)), std::optional<int>(2)) << binary;
    EXPECT_THAT(ReadAll(log_), HasSubstr("--metrics_listen = \"localhost:http\"")) << binary;
  }
}

}  // namespace
}  // namespace spotdnn::services
