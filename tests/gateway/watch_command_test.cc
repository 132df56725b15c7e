// spotdnn watch against a real detector service on 127.0.0.1:0.
#include "services/gateway/cli/watch_command.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sstream>
#include <thread>

#include "base/clock.h"
#include "detector/detector.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/common/server.h"
#include "services/detector/detector_service.h"
#include "services/gateway/cli/cli.h"
#include "tests/testing/ports.h"

namespace spotdnn::gateway {
namespace {

using ::testing::HasSubstr;
namespace d = ::spotdnn::detector;

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

using testing_util::FreeLoopbackPort;

// A detector service for `detector` on 127.0.0.1:`port` that a test can stop and start again.
struct Served {
  Served(std::shared_ptr<d::Detector> detector, int port) {
    service = std::make_unique<services::DetectorServiceImpl>(std::move(detector));
    auto started = services::StartServer("127.0.0.1:" + std::to_string(port), {service.get()});
    EXPECT_TRUE(started.ok()) << started.status();
    if (started.ok()) server = std::move(started->server);
  }
  ~Served() { Kill(); }
  void Kill() {
    if (service) service->Stop();
    if (server) server->Shutdown(std::chrono::system_clock::now());
    server.reset();
  }
  std::unique_ptr<services::DetectorServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
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
    d::Notice n{d::EventKind::kNotice,
                "terminate",
                0,
                base::RealClock::Get().NowUnixMs() + 120000,
                key,
                "test"};
    ASSERT_TRUE(
        detector_->ReportNotice(id, job, d::Cloud::kAws, n, base::RealClock::Get().NowUnixMs())
            .ok());
  }
  CliRun Cli(std::vector<std::string> args) {
    std::ostringstream out, err;
    const int code = RunCli(args, out, err);
    return {code, out.str(), err.str()};
  }
  // `spotdnn watch ARGS` against `address` with explicit retry bounds.
  static CliRun WatchWith(const std::string& address, std::vector<std::string> args,
                          const WatchRetryLimits& limits) {
    args.insert(args.begin(), {"--server", address});
    auto parsed =
        Args::Parse(args, {.values = {"--server", "--job", "--after", "--count", "--timeout"},
                           .switches = {"--json"}});
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) return {-1, "", ""};
    auto stub = pb::Detector::NewStub(services::MakeChannel(address));
    std::ostringstream out, err;
    Io io{out, err, false};
    const int code = WatchWithLimits(*parsed, *stub, io, limits);
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
  // As the other commands' JSON: enum labels without their prefix, numbers as numbers.
  EXPECT_EQ(object.fields().at("kind").string_value(), "notice");
  EXPECT_EQ(object.fields().at("sequence").number_value(), 3);
}

TEST_F(WatchCommandTest, TimeoutStopsCleanly) {
  auto run = Cli({"watch", "--server", address_, "--timeout", "0.3s"});
  EXPECT_EQ(run.code, kExitOk) << run.err;
  EXPECT_EQ(run.out, "");
}

TEST_F(WatchCommandTest, AfterPastTheNewestEventExitsNamingBothNumbers) {
  Notice("i-1", "j", "k1");
  Notice("i-2", "j", "k2");
  // The --timeout only bounds the test: the answer must come at once, and be an error.
  auto run = Cli({"watch", "--server", address_, "--after", "10", "--timeout", "5s"});
  EXPECT_EQ(run.code, kExitBadInput) << run.err;
  EXPECT_THAT(run.err, HasSubstr("OUT_OF_RANGE"));
  EXPECT_THAT(run.err, HasSubstr("--after = 10"));
  EXPECT_THAT(run.err, HasSubstr("after_sequence = 10"));
  EXPECT_THAT(run.err, HasSubstr("newest event, 2"));
  EXPECT_EQ(run.out, "");
}

TEST_F(WatchCommandTest, UnreachableServerExitsNamingIt) {
  const std::string nowhere = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  // With --after (straight to the stream) and without (the newest sequence is asked first).
  for (std::vector<std::string> args :
       {std::vector<std::string>{"watch", "--server", nowhere, "--after", "0", "--timeout", "1s"},
        std::vector<std::string>{"watch", "--server", nowhere, "--timeout", "1s"}}) {
    const auto start = std::chrono::steady_clock::now();
    auto run = Cli(args);
    EXPECT_EQ(run.code, kExitFailure) << run.err;
    EXPECT_THAT(run.err, HasSubstr("cannot reach the detector at " + nowhere));
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  }
  // Without --timeout the first-connection bound applies.
  WatchRetryLimits limits;
  limits.first_connect = absl::Seconds(1);
  const auto start = std::chrono::steady_clock::now();
  auto run = WatchWith(nowhere, {"--after", "0"}, limits);
  EXPECT_EQ(run.code, kExitFailure) << run.err;
  EXPECT_THAT(run.err, HasSubstr("cannot reach the detector at " + nowhere + " within 1"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(WatchCommandTest, BrokenStreamResumesThenGivesUpWithinTheBound) {
  // The waits for a stream to open or close allow 30 s: a busy machine (the sanitizer build beside
  // other tests) has taken more than the 5 s they once allowed.
  const int port = FreeLoopbackPort();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  auto served = std::make_unique<Served>(detector_, port);
  Notice("i-1", "j", "k1");
  WatchRetryLimits limits;
  limits.resume = absl::Seconds(10);
  limits.retry_every = absl::Milliseconds(100);
  CliRun resumed;
  std::thread watch([&] {
    resumed = WatchWith(address, {"--after", "0", "--count", "2"}, limits);
  });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 3000 && served->service->open_streams() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return served->service->open_streams() > 0;
  }());
  // The detector restarts; the second event happens while it is down.
  served->Kill();
  Notice("i-2", "j", "k2");
  served = std::make_unique<Served>(detector_, port);
  watch.join();
  ASSERT_EQ(resumed.code, kExitOk) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr("resuming after #1"));
  EXPECT_THAT(resumed.out, HasSubstr("#1  "));
  EXPECT_THAT(resumed.out, HasSubstr("#2  "));

  // This time it does not come back: the watch gives up once the resume bound has passed.
  ASSERT_TRUE([&] {  // the first watch's stream is gone
    for (int i = 0; i < 3000 && served->service->open_streams() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return served->service->open_streams() == 0;
  }());
  limits.resume = absl::Seconds(1);
  CliRun lost;
  const auto start = std::chrono::steady_clock::now();
  std::thread lose([&] {
    lost = WatchWith(address, {"--after", "2", "--timeout", "20s"}, limits);
  });
  ASSERT_TRUE([&] {
    for (int i = 0; i < 3000 && served->service->open_streams() == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return served->service->open_streams() > 0;
  }());
  served->Kill();
  lose.join();
  EXPECT_EQ(lost.code, kExitFailure) << lost.err;
  EXPECT_THAT(lost.err, HasSubstr("lost the detector at " + address));
  EXPECT_THAT(lost.err, HasSubstr("--after 2"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
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
