// Against the real spotdnn-predictor: /metrics labels from a closed set whatever method
// names clients make up, /metrics clients that send slowly or not at all holding neither scrapes
// nor SIGTERM, and SIGTERM ending the process at once when nothing is in flight (an idle client
// connection open) and within the grace when a call is. Bounds here are hang checks, far above
// the expected figures (printed).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "spotdnn/v1/predictor.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/metrics_sample.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing_util::Child;
using testing_util::ReadPort;
using testing_util::SampleSum;
using Clock = std::chrono::steady_clock;

std::string Binary(const std::string& name) { return std::string(SPOTDNN_BINARY_DIR) + "/" + name; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// A TCP connection to 127.0.0.1:`port`; -1 on failure.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// A spotdnn-predictor on 127.0.0.1:0 with metrics on 127.0.0.1:0.
class PredictorProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base = ::testing::TempDir() + "/shutdown_binaries_" +
                             std::to_string(getpid()) + "_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    port_file_ = base + ".port";
    log_ = base + ".log";
    std::remove(port_file_.c_str());
    server_ = std::make_unique<Child>(
        std::vector<std::string>{Binary("spotdnn-predictor"), "--listen=127.0.0.1:0",
                                 "--port_file=" + port_file_, "--metrics_listen=127.0.0.1:0"},
        log_);
    port_ = ReadPort(port_file_);
    ASSERT_GT(port_, 0) << ReadAll(log_);
    metrics_port_ = testing_util::LoggedMetricsPort(log_);
    ASSERT_GT(metrics_port_, 0) << ReadAll(log_);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    channel_.reset();
    server_.reset();
    std::remove(port_file_.c_str());
    std::remove(log_.c_str());
  }

  // SIGTERM, then the seconds until the process exited (its status in `status`); fails the test
  // when it is still running after `limit`.
  double TerminateAndTime(std::chrono::seconds limit, int* status) {
    const auto start = Clock::now();
    kill(server_->pid(), SIGTERM);
    const std::optional<int> exited = server_->Wait(limit);
    const double took = SecondsSince(start);
    EXPECT_TRUE(exited.has_value()) << "still running " << limit.count() << " s after SIGTERM\n"
                                    << ReadAll(log_);
    if (!exited.has_value()) server_->Kill();
    *status = exited.value_or(-1);
    return took;
  }

  std::string port_file_, log_;
  std::unique_ptr<Child> server_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(PredictorProcess, MadeUpMethodNamesShareOneMetricsLabel) {
  // 300 calls to methods the server does not have, each with its own 2,000-byte name: before,
  // each became a label value kept for the life of the process (and in every scrape).
  for (int i = 0; i < 300; ++i) {
    const std::string method =
        "/spotdnn.v1.Predictor/Made" + std::to_string(i) + std::string(2000, 'x');
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::ByteBuffer response;
    grpc::Slice empty("");
    const grpc::Status s = grpc::internal::BlockingUnaryCall(
        channel_.get(),
        grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &context,
        grpc::ByteBuffer(&empty, 1), &response);
    ASSERT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  }
  {
    auto stub = v1::Predictor::NewStub(channel_);
    grpc::ClientContext context;
    v1::ListCatalogsResponse catalogs;
    ASSERT_TRUE(stub->ListCatalogs(&context, {}, &catalogs).ok());
  }
  httplib::Client client("127.0.0.1", metrics_port_);
  auto got = client.Get("/metrics");
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200);
  const std::string& scrape = got->body;
  EXPECT_THAT(scrape, Not(HasSubstr("Made")));
  EXPECT_THAT(scrape, Not(HasSubstr("xxxxxxxx")));
  EXPECT_EQ(
      SampleSum(scrape, "spotdnn_rpc_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"}"),
      300)
      << scrape;
  EXPECT_EQ(SampleSum(scrape,
                      "spotdnn_rpc_requests_total{method=\"/spotdnn.v1.Predictor/"
                      "ListCatalogs\",code=\"OK\"}"),
            1)
      << scrape;
  std::cout << "[measured] scrape after 300 made-up method names: " << scrape.size() << " bytes"
            << std::endl;
  EXPECT_LT(scrape.size(), 64u << 10);
}

TEST_F(PredictorProcess, SlowMetricsClientsHoldNeitherScrapesNorShutdown) {
  // 40 clients that sent half a request and nothing more, and 3 that send a header line every
  // 200 ms (before: 2 HTTP threads, both stuck in read_headers; SIGTERM waited for them).
  std::vector<int> idle;
  for (int i = 0; i < 40; ++i) {
    const int fd = Connect(metrics_port_);
    ASSERT_GE(fd, 0);
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    ASSERT_EQ(send(fd, half.data(), half.size(), MSG_NOSIGNAL), static_cast<ssize_t>(half.size()));
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> tricklers;
  for (int i = 0; i < 3; ++i) {
    tricklers.emplace_back([&] {
      const int fd = Connect(metrics_port_);
      if (fd < 0) return;
      const std::string start = "GET /metrics HTTP/1.1\r\n";
      send(fd, start.data(), start.size(), MSG_NOSIGNAL);
      for (int line = 0; !stop && line < 200; ++line) {
        const std::string header = "X-Slow-" + std::to_string(line) + ": 1\r\n";
        if (send(fd, header.data(), header.size(), MSG_NOSIGNAL) < 0) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      close(fd);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // Scrapes are still answered, each at its first try, and more slow clients than the server
  // keeps (64) only push the oldest slow ones out.
  for (int i = 0; i < 40; ++i) {
    const int fd = Connect(metrics_port_);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  const auto scrape_start = Clock::now();
  int scraped = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    httplib::Client client("127.0.0.1", metrics_port_);
    client.set_read_timeout(3, 0);
    client.set_connection_timeout(3, 0);
    auto got = client.Get("/metrics");
    if (got && got->status == 200) {
      ++scraped;
    } else {
      std::cout << "scrape " << attempt << ": "
                << (got ? std::to_string(got->status) : httplib::to_string(got.error()))
                << std::endl;
    }
  }
  const double scrape_s = SecondsSince(scrape_start);
  EXPECT_EQ(scraped, 5) << "scrapes not answered beside 83 slow clients";
  int status = -1;
  const double exit_s = TerminateAndTime(std::chrono::seconds(4), &status);
  stop = true;
  for (std::thread& t : tricklers) t.join();
  for (int fd : idle) close(fd);
  EXPECT_EQ(status, 0) << ReadAll(log_);
  std::cout << "[measured] beside 83 slow /metrics clients: 5 scrapes answered in " << scrape_s
            << " s, exit " << exit_s << " s after SIGTERM" << std::endl;
}

TEST_F(PredictorProcess, SigtermExitsAtOnceWhenNothingIsInFlight) {
  // A client that made a call and keeps its connection open (before: exit took the whole 5 s
  // grace, gRPC waiting for the connection to close).
  auto stub = v1::Predictor::NewStub(channel_);
  grpc::ClientContext context;
  v1::ListCatalogsResponse catalogs;
  ASSERT_TRUE(stub->ListCatalogs(&context, {}, &catalogs).ok());
  int status = -1;
  const double exit_s = TerminateAndTime(std::chrono::seconds(4), &status);
  EXPECT_EQ(status, 0) << ReadAll(log_);
  EXPECT_THAT(ReadAll(log_), HasSubstr("0 calls in flight"));
  std::cout << "[measured] SIGTERM with an idle client connection: exit after " << exit_s << " s"
            << std::endl;
}

TEST_F(PredictorProcess, SigtermEndsWorkInFlightWithinTheGrace) {
  // A PredictBatch of 1,000,000 clusters in flight (before: 9.7-10.8 s to exit).
  v1::PredictBatchRequest request;
  request.mutable_workload()->set_name("resnet110");
  request.mutable_catalog()->set_name("aws-spotdnn-prototype");
  request.set_target_loss(0.9);
  v1::Cluster cluster;
  for (const char* type : {"p2.xlarge", "p2.8xlarge", "g4dn.4xlarge", "g3.8xlarge"}) {
    auto* instance = cluster.add_instances();
    instance->set_instance_type(type);
    instance->set_count(2);
  }
  for (int i = 0; i < 1'000'000; ++i) *request.add_clusters() = cluster;
  const auto started = Clock::now();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port_),
                                           grpc::InsecureChannelCredentials(), args);
  auto call = std::async(std::launch::async, [&] {
    auto stub = v1::Predictor::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    v1::PredictBatchResponse response;
    const grpc::Status status = stub->PredictBatch(&context, request, &response);
    return std::make_pair(status, SecondsSince(started));
  });
  // SIGTERM once the server counts the call in flight (its metrics say so).
  bool in_flight = false;
  for (int i = 0; i < 1000 && !in_flight; ++i) {
    httplib::Client client("127.0.0.1", metrics_port_);
    auto got = client.Get("/metrics");
    in_flight =
        got && got->status == 200 && SampleSum(got->body, "spotdnn_rpc_calls_in_flight") >= 1;
    if (!in_flight) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(in_flight) << "the PredictBatch never showed as in flight";
  const double signalled_s = SecondsSince(started);
  int status = -1;
  // The grace is 5 s; a handler still running 1 s after it does not hold the exit.
  const double exit_s = TerminateAndTime(std::chrono::seconds(8), &status);
  EXPECT_EQ(status, 0) << ReadAll(log_);
  const auto [answered, call_s] = call.get();
  // Work that ends within the grace is answered, not cut off.
  if (call_s - signalled_s < 4) {
    EXPECT_TRUE(answered.ok()) << answered.error_message();
  }
  if (exit_s > 5) std::cout << ReadAll(log_);
  std::cout << "[measured] SIGTERM " << signalled_s
            << " s into a 1,000,000-cluster PredictBatch: exit after " << exit_s
            << " s; the call ended after " << call_s << " s with " << answered.error_code() << " "
            << answered.error_message() << std::endl;
}

}  // namespace
}  // namespace spotdnn::services
