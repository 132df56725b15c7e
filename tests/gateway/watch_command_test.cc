// spotdnn watch against a real detector service on 127.0.0.1:0.
#include <sstream>
#include <thread>

#include "detector/detector.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/common/server.h"
#include "services/detector/detector_service.h"
#include "services/gateway/cli.h"

namespace spotdnn::gateway {
namespace {

using ::testing::HasSubstr;
namespace d = ::spotdnn::detector;

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

class WatchCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    d::DetectorOptions options;
    options.run_poller = false;
    options.heartbeat_interval = absl::Seconds(60);  // reported instances never go lost here
    auto detector = d::Detector::Open(options);
    ASSERT_TRUE(detector.ok());
    detector_ = *std::move(detector);
    service_ = std::make_unique<services::DetectorServiceImpl>(detector_);
    auto started = services::StartServer("127.0.0.1:0", {service_.get()});
    ASSERT_TRUE(started.ok());
    server_ = std::move(started->server);
    address_ = "127.0.0.1:" + std::to_string(started->port);
  }
  void TearDown() override {
    service_->Stop();
    server_->Shutdown(std::chrono::system_clock::now());
    detector_->Shutdown();
  }
  void Notice(const std::string& id, const std::string& job, const std::string& key) {
    d::Notice n{d::EventKind::kNotice, "terminate", 0, d::NowUnixMs() + 120000, key, "test"};
    ASSERT_TRUE(detector_->ReportNotice(id, job, d::Cloud::kAws, n, d::NowUnixMs()).ok());
  }
  CliRun Cli(std::vector<std::string> args) {
    std::ostringstream out, err;
    const int code = RunCli(args, out, err);
    return {code, out.str(), err.str()};
  }

  std::shared_ptr<d::Detector> detector_;
  std::unique_ptr<services::DetectorServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

TEST_F(WatchCommandTest, ReplaysAndPrintsOneLinePerEvent) {
  Notice("i-1", "j", "k1");
  Notice("i-2", "j", "k2");
  auto run = Cli({"watch", "--server", address_, "--after", "0", "--count", "2"});
  ASSERT_EQ(run.code, kExitOk) << run.err;
  EXPECT_THAT(run.out, HasSubstr("#1  "));
  EXPECT_THAT(run.out, HasSubstr("notice"));
  EXPECT_THAT(run.out, HasSubstr("i-2  job j  terminate  effective "));
  EXPECT_EQ(std::count(run.out.begin(), run.out.end(), '\n'), 2);
}

TEST_F(WatchCommandTest, JsonLinesOfNewEventsForOneJob) {
  Notice("old", "j", "k0");  // before the watch starts: not printed
  std::thread later([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Notice("other", "x", "k1");
    Notice("mine", "j", "k2");
  });
  auto run = Cli({"watch", "--server", address_, "--job", "j", "--count", "1", "--json"});
  later.join();
  ASSERT_EQ(run.code, kExitOk) << run.err;
  google::protobuf::Struct object;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.out, &object).ok()) << run.out;
  EXPECT_EQ(object.fields().at("instance_id").string_value(), "mine");
  EXPECT_EQ(object.fields().at("kind").string_value(), "KIND_NOTICE");
  EXPECT_EQ(object.fields().at("sequence").string_value(), "3");
}

TEST_F(WatchCommandTest, TimeoutStopsCleanly) {
  auto run = Cli({"watch", "--server", address_, "--timeout", "0.3s"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "");
}

TEST_F(WatchCommandTest, BadFlagsNameTheFlag) {
  auto count = Cli({"watch", "--server", address_, "--count", "zero"});
  EXPECT_EQ(count.code, kExitBadInput);
  EXPECT_THAT(count.err, HasSubstr("--count"));
  auto after = Cli({"watch", "--server", address_, "--after", "-1"});
  EXPECT_EQ(after.code, kExitBadInput);
  EXPECT_THAT(after.err, HasSubstr("--after = \"-1\""));
  auto server = Cli({"watch", "--server", "nohostport"});
  EXPECT_EQ(server.code, kExitBadInput);
  EXPECT_THAT(Cli({"help", "watch"}).out, HasSubstr("Usage: spotdnn watch"));
}

}  // namespace
}  // namespace spotdnn::gateway
