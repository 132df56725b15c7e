// The pollers against the emulator on 127.0.0.1: notices per cloud, token refresh, and faults.
#include "detector/metadata_poller.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <set>

#include "base/clock.h"
#include "detector/metadata_emulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace spotdnn::detector {
namespace {

using ::spotdnn::testing_util::Eventually;
using ::testing::HasSubstr;

// Collects poll results and waits for one that matches.
class Collector {
 public:
  void Add(const PollResult& r) {
    std::lock_guard<std::mutex> lock(mu_);
    results_.push_back(r);
    cv_.notify_all();
  }
  // The first result after index `from` for `id` that satisfies `pred`, within `timeout` (real
  // time: it only bounds a failing test).
  std::optional<PollResult> WaitFor(const std::string& id,
                                    const std::function<bool(const PollResult&)>& pred,
                                    size_t from = 0, absl::Duration timeout = absl::Seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    std::optional<PollResult> found;
    cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [&] {
      for (size_t i = from; i < results_.size(); ++i) {
        if (results_[i].instance_id == id && pred(results_[i])) {
          found = results_[i];
          return true;
        }
      }
      return false;
    });
    return found;
  }
  // Whether there are more than `from` results (of any target) within `timeout`.
  bool WaitForMore(size_t from, absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout),
                        [&] { return results_.size() > from; });
  }
  std::vector<PollResult> For(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<PollResult> out;
    for (const auto& r : results_) {
      if (r.instance_id == id) out.push_back(r);
    }
    return out;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return results_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PollResult> results_;
};

bool HasNotice(const PollResult& r, EventKind kind) {
  for (const Notice& n : r.notices) {
    if (n.kind == kind) return true;
  }
  return false;
}

class PollerTest : public ::testing::Test {
 protected:
  static constexpr absl::Duration kMaxBackoff = absl::Milliseconds(100);

  void SetUp() override { StartEmulator(); }
  // (Re)starts the emulator. Its long polls answer an unchanged value after 50 ms, as if their
  // timeout_sec had run out, so that rounds after a value stopped changing come quickly.
  void StartEmulator(base::Clock* clock = nullptr) {
    if (emulator_) emulator_->Stop();
    MetadataEmulator::Options options;
    options.clock = clock;
    options.max_long_poll = absl::Milliseconds(50);
    auto e = MetadataEmulator::Start(options);
    ASSERT_TRUE(e.ok()) << e.status();
    emulator_ = *std::move(e);
  }
  // A poller in real time (the GCE tests: their long polls are answered in real time, and the
  // times they check are the poller's against the emulator's).
  void StartPoller(PollerOptions options = {}) {
    if (options.interval == absl::Seconds(1)) options.interval = absl::Milliseconds(20);
    options.request_timeout = std::min(options.request_timeout, absl::Milliseconds(500));
    options.max_backoff = kMaxBackoff;
    options.gce_long_poll_timeout_s = 5;
    poller_ =
        std::make_unique<MetadataPoller>(options, [this](const PollResult& r) { results_.Add(r); });
    ASSERT_TRUE(poller_->Start().ok());
  }
  // A poller on fake time (clock_): its rounds, retries and token refreshes fall due only when
  // Until moves the clock on, one interval a step (no backoff is longer). Requests still go to
  // the emulator over 127.0.0.1, and their timeouts are real.
  void StartFakePoller(PollerOptions options = {}) {
    options.clock = &clock_;
    if (options.interval == absl::Seconds(1)) options.interval = absl::Milliseconds(100);
    step_ = std::max(options.interval, kMaxBackoff);
    StartPoller(options);
  }
  void Watch(const std::string& id, Cloud cloud) {
    ASSERT_TRUE(poller_->Add({id, cloud, emulator_->EndpointFor(id)}).ok());
    ++watched_;
    SyncTargets(watched_);
  }
  // Waits until the poller thread has taken in `n` targets: on fake time, a target taken in
  // after a step would have its first round one step later.
  void SyncTargets(size_t n) {
    if (step_ > absl::ZeroDuration()) {
      ASSERT_TRUE(Eventually([&] { return poller_->size() == n; }, absl::Seconds(10),
                             absl::Milliseconds(1)));
    }
  }
  // The first result for `id` after index `from` that satisfies `pred`. On fake time, moves the
  // clock on a step at a time until one comes, each step waiting (in real time, boundedly) for
  // the next result of any target: what fell due in that step.
  std::optional<PollResult> Until(const std::string& id,
                                  const std::function<bool(const PollResult&)>& pred,
                                  size_t from = 0) {
    if (step_ <= absl::ZeroDuration()) return results_.WaitFor(id, pred, from);
    for (int step = 0; step < 1000; ++step) {
      if (auto r = results_.WaitFor(id, pred, from, absl::ZeroDuration())) return r;
      const size_t seen = results_.size();
      clock_.Advance(step_);
      results_.WaitForMore(seen, absl::Milliseconds(200));
    }
    return results_.WaitFor(id, pred, from, absl::ZeroDuration());
  }
  void TearDown() override {
    if (poller_) poller_->Stop();
    emulator_->Stop();
  }

  // Fake time, for the tests that share it between the poller and the emulator (declared first:
  // it outlives both).
  base::FakeClock clock_{absl::FromUnixMillis(base::RealClock::Get().NowUnixMs())};
  std::unique_ptr<MetadataEmulator> emulator_;
  std::unique_ptr<MetadataPoller> poller_;
  Collector results_;
  absl::Duration step_;  // how far Until moves the fake clock a step; zero: real time
  size_t watched_ = 0;
};

TEST_F(PollerTest, AwsNoticeWithActionAndTime) {
  StartFakePoller();
  Watch("a", Cloud::kAws);
  ASSERT_TRUE(Until("a", [](const PollResult& r) { return r.healthy; }));
  const int64_t effective = (base::RealClock::Get().NowUnixMs() / 1000 + 120) * 1000;
  emulator_->ScheduleNotice(
      "a", {.cloud = Cloud::kAws, .action = "hibernate", .effective_unix_ms = effective});
  auto r = Until("a", [](const PollResult& r) { return !r.notices.empty(); });
  ASSERT_TRUE(r);
  ASSERT_EQ(r->notices.size(), 1u);
  EXPECT_EQ(r->notices[0].kind, EventKind::kNotice);
  EXPECT_EQ(r->notices[0].action, "hibernate");
  EXPECT_EQ(r->notices[0].effective_unix_ms, effective);
  EXPECT_TRUE(r->healthy);
  EXPECT_EQ(emulator_->Stats("a").unauthorized, 0);
}

TEST_F(PollerTest, AwsRebalanceRecommendation) {
  StartFakePoller();
  Watch("r", Cloud::kAws);
  emulator_->ScheduleNotice("r", {.cloud = Cloud::kAws, .kind = EventKind::kRebalance});
  auto r = Until("r", [](const PollResult& r) { return HasNotice(r, EventKind::kRebalance); });
  ASSERT_TRUE(r);
  EXPECT_FALSE(HasNotice(*r, EventKind::kNotice));
  EXPECT_GT(r->notices[0].issued_unix_ms, 0);
}

TEST_F(PollerTest, AwsTokenRefreshedBeforeExpiry) {
  // On fake time, shared with the emulator (which expires its tokens on it).
  StartEmulator(&clock_);
  PollerOptions options;
  options.interval = absl::Milliseconds(100);
  options.aws_token_ttl_s = 2;
  options.aws_token_refresh_margin = absl::Seconds(1);
  StartFakePoller(options);
  Watch("t", Cloud::kAws);
  ASSERT_TRUE(
      Until("t", [this](const PollResult&) { return emulator_->Stats("t").token_requests >= 3; }));
  // Three tokens of 2 s each, refreshed 1 s before expiry: about 2 s of (fake) time went by.
  EXPECT_GE(clock_.SteadyNow(), absl::Seconds(2));
  // Refreshed before expiry: no request was ever refused.
  EXPECT_EQ(emulator_->Stats("t").unauthorized, 0);
  for (const PollResult& r : results_.For("t")) EXPECT_TRUE(r.healthy) << r.reason;
}

TEST_F(PollerTest, AwsTokenRefreshedAfter401) {
  StartFakePoller();
  Watch("t", Cloud::kAws);
  ASSERT_TRUE(Until("t", [](const PollResult& r) { return r.healthy; }));
  emulator_->ExpireTokens("t");
  ASSERT_TRUE(Until("t", [this](const PollResult& r) {
    return r.healthy && emulator_->Stats("t").token_requests == 2;
  }));
  EXPECT_GT(emulator_->Stats("t").unauthorized, 0);
  // The 401 was retried within the round with a fresh token, so no round was unhealthy.
  for (const PollResult& r : results_.For("t")) EXPECT_TRUE(r.healthy) << r.reason;
}

TEST_F(PollerTest, Aws401LoopIsUnknownNotANotice) {
  StartFakePoller();
  emulator_->SetFault("u", EmulatorFault::kUnauthorized);
  emulator_->ScheduleNotice("u", {.cloud = Cloud::kAws});
  Watch("u", Cloud::kAws);
  auto r = Until("u", [](const PollResult& r) { return !r.healthy; });
  ASSERT_TRUE(r);
  EXPECT_THAT(r->reason, HasSubstr("401"));
  EXPECT_TRUE(r->notices.empty());
}

struct FaultCase {
  Cloud cloud;
  EmulatorFault fault;
  const char* reason;
};

// Stable names and printouts (CTest lists the tests by name).
std::string FaultCaseName(const FaultCase& c) {
  const char* fault = c.fault == EmulatorFault::kServerError    ? "Http500"
                      : c.fault == EmulatorFault::kGarbage      ? "Garbage"
                      : c.fault == EmulatorFault::kTruncated    ? "Truncated"
                      : c.fault == EmulatorFault::kSlow         ? "SlowBeyondTimeout"
                      : c.fault == EmulatorFault::kUnauthorized ? "Unauthorized"
                                                                : "None";
  return std::string(CloudName(c.cloud)) + fault;
}
void PrintTo(const FaultCase& c, std::ostream* os) { *os << FaultCaseName(c); }

class PollerFaultTest : public PollerTest, public ::testing::WithParamInterface<FaultCase> {};

TEST_P(PollerFaultTest, FaultIsUnknownWithReasonAndNoFalseNotice) {
  const FaultCase c = GetParam();
  PollerOptions options;
  // (Real time: how long a slow answer is waited for. The other faults answer at once.)
  options.request_timeout = absl::Milliseconds(c.fault == EmulatorFault::kSlow ? 50 : 200);
  StartFakePoller(options);
  // The faulty instance has a real notice behind the fault (the only one it will ever have); its
  // neighbour keeps being served. Whole seconds: AWS and Azure times carry no milliseconds.
  const int64_t effective = (base::RealClock::Get().NowUnixMs() / 1000 + 300) * 1000;
  emulator_->SetFault("bad", c.fault, 1000);
  emulator_->ScheduleNotice("bad", {.cloud = c.cloud, .effective_unix_ms = effective});
  Watch("bad", c.cloud);
  Watch("good", c.cloud);
  // (GCE has two channels; either may report first, so wait for the one named.)
  auto bad = Until("bad", [&](const PollResult& r) {
    return !r.healthy && r.reason.find(c.reason) != std::string::npos;
  });
  ASSERT_TRUE(bad) << "no unhealthy result with \"" << c.reason << "\"";
  emulator_->ScheduleNotice("good", {.cloud = c.cloud});
  ASSERT_TRUE(Until("good", [](const PollResult& r) { return !r.notices.empty(); }));
  const size_t faulted = results_.For("bad").size();
  for (const PollResult& r : results_.For("bad")) {
    EXPECT_TRUE(r.notices.empty()) << "notice from a faulty answer";
  }
  // Once the fault clears, the original notice comes through (nothing new was scheduled): it was
  // not dropped while the answers were faulty.
  emulator_->SetFault("bad", EmulatorFault::kNone);
  ASSERT_TRUE(Until("bad", [](const PollResult& r) { return !r.notices.empty(); }));
  const size_t cleared = results_.For("bad").size();
  ASSERT_TRUE(Until(
      "bad", [](const PollResult&) { return true; }, cleared + 2));
  // Exactly that one notice: every round after the fault shows the same key (the detector
  // reports a key once), and never anything else.
  std::set<std::string> keys;
  std::vector<PollResult> all = results_.For("bad");
  for (size_t i = faulted; i < all.size(); ++i) {
    for (const Notice& n : all[i].notices) {
      EXPECT_EQ(n.kind, EventKind::kNotice);
      if (c.cloud != Cloud::kGce) {
        EXPECT_EQ(n.effective_unix_ms, effective);
      }
      keys.insert(n.key);
    }
  }
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_TRUE(Until("bad", [](const PollResult& r) { return r.healthy; }));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, PollerFaultTest,
    ::testing::Values(FaultCase{Cloud::kAws, EmulatorFault::kServerError, "HTTP 500"},
                      FaultCase{Cloud::kAws, EmulatorFault::kGarbage, "not valid JSON"},
                      FaultCase{Cloud::kAws, EmulatorFault::kTruncated, "not valid JSON"},
                      FaultCase{Cloud::kAws, EmulatorFault::kSlow, "timed out"},
                      FaultCase{Cloud::kGce, EmulatorFault::kServerError, "HTTP 500"},
                      FaultCase{Cloud::kGce, EmulatorFault::kGarbage, "expected TRUE or FALSE"},
                      FaultCase{Cloud::kGce, EmulatorFault::kTruncated, "expected TRUE or FALSE"},
                      FaultCase{Cloud::kGce, EmulatorFault::kSlow, "timed out"},
                      FaultCase{Cloud::kAzure, EmulatorFault::kServerError, "HTTP 500"},
                      FaultCase{Cloud::kAzure, EmulatorFault::kGarbage, "not valid JSON"},
                      FaultCase{Cloud::kAzure, EmulatorFault::kTruncated, "not valid JSON"},
                      FaultCase{Cloud::kAzure, EmulatorFault::kSlow, "timed out"}),
    [](const ::testing::TestParamInfo<FaultCase>& info) { return FaultCaseName(info.param); });

TEST_F(PollerTest, EndpointDownIsUnknownForEveryCloud) {
  // A port that was free a moment ago: nothing listens there.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  StartFakePoller();
  const std::string endpoint = "http://127.0.0.1:" + std::to_string(port);
  for (Cloud cloud : {Cloud::kAws, Cloud::kGce, Cloud::kAzure}) {
    const std::string id = "down-" + std::string(CloudName(cloud));
    ASSERT_TRUE(poller_->Add({id, cloud, endpoint + "/i/" + id}).ok());
  }
  SyncTargets(3);
  for (Cloud cloud : {Cloud::kAws, Cloud::kGce, Cloud::kAzure}) {
    const std::string id = "down-" + std::string(CloudName(cloud));
    auto r = Until(id, [](const PollResult& r) { return !r.healthy; });
    ASSERT_TRUE(r) << id;
    EXPECT_THAT(r->reason, HasSubstr("connect")) << id;
    for (const PollResult& each : results_.For(id)) {
      EXPECT_TRUE(each.notices.empty()) << id;
      EXPECT_FALSE(each.healthy) << id;
    }
  }
}

TEST_F(PollerTest, AwsNoticeReportedWhileRebalanceAnswersGarbage) {
  StartFakePoller();
  // instance-action answers 200 with a real notice; the rebalance answer is garbage.
  emulator_->SetFault("p", EmulatorFault::kGarbage, 0,
                      "/latest/meta-data/events/recommendations/rebalance");
  const int64_t effective = (base::RealClock::Get().NowUnixMs() / 1000 + 120) * 1000;
  emulator_->ScheduleNotice("p", {.cloud = Cloud::kAws, .effective_unix_ms = effective});
  emulator_->ScheduleNotice("p", {.cloud = Cloud::kAws, .kind = EventKind::kRebalance});
  Watch("p", Cloud::kAws);
  auto r = Until("p", [](const PollResult& r) { return !r.notices.empty(); });
  ASSERT_TRUE(r);
  ASSERT_EQ(r->notices.size(), 1u);
  EXPECT_EQ(r->notices[0].kind, EventKind::kNotice);
  EXPECT_EQ(r->notices[0].action, "terminate");
  EXPECT_EQ(r->notices[0].effective_unix_ms, effective);
  // The garbage is visible as the round's reason, and makes no rebalance event.
  EXPECT_FALSE(r->healthy);
  EXPECT_THAT(r->reason, HasSubstr("rebalance"));
  EXPECT_THAT(r->reason, HasSubstr("not valid JSON"));
  for (const PollResult& each : results_.For("p")) {
    EXPECT_FALSE(HasNotice(each, EventKind::kRebalance));
  }
}

TEST_F(PollerTest, GcePreemptedByLongPoll) {
  StartPoller();
  Watch("g", Cloud::kGce);
  ASSERT_TRUE(Until("g", [](const PollResult& r) { return r.healthy; }));
  const int64_t scheduled = base::RealClock::Get().NowUnixMs() + 30;
  emulator_->ScheduleNotice("g", {.cloud = Cloud::kGce, .visible_at_unix_ms = scheduled});
  auto r = Until("g", [](const PollResult& r) { return !r.notices.empty(); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->notices[0].kind, EventKind::kNotice);
  EXPECT_EQ(r->notices[0].action, "preempt");
  EXPECT_GE(r->observed_unix_ms, scheduled);
  EXPECT_GT(r->notices[0].effective_unix_ms, r->observed_unix_ms);
}

TEST_F(PollerTest, GceHeldLongPollGoesStraightBackOutWhateverTheClock) {
  // On fake time that stands still once the first round has come: a long poll that the server
  // held (50 ms of real time here) goes straight back out. (Whether an answer came at once, from
  // a server without long polls, is real time; judged on a fake clock, every answer came at once
  // and waited an interval that never passed.)
  StartFakePoller();
  Watch("g", Cloud::kGce);
  const auto any = [](const PollResult&) { return true; };
  ASSERT_TRUE(Until("g", any));
  const size_t seen = results_.size();
  ASSERT_TRUE(results_.WaitFor("g", any, seen + 3));  // two more long polls of each channel
  EXPECT_EQ(clock_.NowUnixMs(), results_.For("g").back().observed_unix_ms);
}

TEST_F(PollerTest, GceMaintenanceEvent) {
  StartPoller();
  Watch("m", Cloud::kGce);
  emulator_->ScheduleNotice("m", {.cloud = Cloud::kGce,
                                  .kind = EventKind::kMaintenance,
                                  .action = "MIGRATE_ON_HOST_MAINTENANCE"});
  auto r = Until("m", [](const PollResult& r) { return HasNotice(r, EventKind::kMaintenance); });
  ASSERT_TRUE(r);
  EXPECT_EQ(r->notices[0].action, "MIGRATE_ON_HOST_MAINTENANCE");
  emulator_->ScheduleNotice("m", {.cloud = Cloud::kGce,
                                  .kind = EventKind::kMaintenance,
                                  .action = "TERMINATE_ON_HOST_MAINTENANCE"});
  auto t = Until("m", [](const PollResult& r) { return HasNotice(r, EventKind::kNotice); });
  ASSERT_TRUE(t);
  EXPECT_EQ(t->notices[0].action, "TERMINATE_ON_HOST_MAINTENANCE");
}

TEST_F(PollerTest, AzurePreemptWithNotBeforeAndAck) {
  PollerOptions options;
  options.azure_ack = true;
  StartFakePoller(options);
  Watch("z", Cloud::kAzure);
  const int64_t not_before = (base::RealClock::Get().NowUnixMs() / 1000 + 30) * 1000;
  emulator_->ScheduleNotice("z", {.cloud = Cloud::kAzure, .effective_unix_ms = not_before});
  emulator_->ScheduleNotice(
      "z", {.cloud = Cloud::kAzure, .kind = EventKind::kMaintenance, .action = "Freeze"});
  auto r = Until("z", [](const PollResult& r) {
    return HasNotice(r, EventKind::kNotice) && HasNotice(r, EventKind::kMaintenance);
  });
  ASSERT_TRUE(r);
  for (const Notice& n : r->notices) {
    if (n.kind == EventKind::kNotice) {
      EXPECT_EQ(n.action, "Preempt");
      EXPECT_EQ(n.effective_unix_ms, not_before);
    } else {
      EXPECT_EQ(n.action, "Freeze");
    }
  }
  ASSERT_TRUE(Until(
      "z", [this](const PollResult&) { return emulator_->Stats("z").azure_acks.size() == 1; }));
}

TEST_F(PollerTest, AzureActsOnlyOnEventsNamingItsVm) {
  // Azure shows every VM of an availability set the events of all of them: "mine" sees its
  // neighbour's eviction (Resources ["other"]), which is neither its notice nor its to approve.
  PollerOptions options;
  options.azure_ack = true;
  StartFakePoller(options);
  emulator_->ScheduleNotice("other", {.cloud = Cloud::kAzure, .azure_all_instances = true});
  Watch("mine", Cloud::kAzure);
  ASSERT_TRUE(Until("mine", [](const PollResult& r) { return r.healthy; }));
  const size_t seen = results_.size();
  ASSERT_TRUE(Until(
      "mine", [](const PollResult& r) { return r.healthy; }, seen + 5));
  for (const PollResult& r : results_.For("mine")) {
    EXPECT_TRUE(r.notices.empty()) << "a notice from another VM's event: " << r.notices[0].detail;
  }
  EXPECT_TRUE(emulator_->Stats("mine").azure_acks.empty()) << "approved another VM's eviction";
  // Its own eviction is its notice, and the only event it approves.
  emulator_->ScheduleNotice("mine", {.cloud = Cloud::kAzure});
  auto r = Until("mine", [](const PollResult& r) { return !r.notices.empty(); });
  ASSERT_TRUE(r);
  ASSERT_EQ(r->notices.size(), 1u);
  EXPECT_EQ(r->notices[0].kind, EventKind::kNotice);
  ASSERT_TRUE(Until("mine", [this](const PollResult&) {
    return emulator_->Stats("mine").azure_acks.size() == 1;
  }));
  EXPECT_EQ("azure:" + emulator_->Stats("mine").azure_acks[0], r->notices[0].key);
}

TEST_F(PollerTest, AzureReadsNoEventUntilItKnowsItsName) {
  StartFakePoller();
  emulator_->SetFault("z", EmulatorFault::kServerError, 0, "/metadata/instance/compute");
  emulator_->ScheduleNotice("z", {.cloud = Cloud::kAzure});
  Watch("z", Cloud::kAzure);
  auto r = Until("z", [](const PollResult& r) { return !r.healthy; });
  ASSERT_TRUE(r);
  EXPECT_THAT(r->reason, HasSubstr("/metadata/instance/compute: HTTP 500"));
  EXPECT_THAT(r->reason, HasSubstr("name is unknown"));
  const size_t failed = results_.size();
  ASSERT_TRUE(Until(
      "z", [](const PollResult&) { return true; }, failed + 2));
  for (const PollResult& each : results_.For("z")) EXPECT_TRUE(each.notices.empty());
  // Once the name answers, the notice that was there all along comes through.
  emulator_->SetFault("z", EmulatorFault::kNone);
  auto notice = Until("z", [](const PollResult& r) { return !r.notices.empty(); });
  ASSERT_TRUE(notice);
  EXPECT_TRUE(notice->healthy) << notice->reason;
}

TEST_F(PollerTest, AzureNotAcknowledgedUnlessAsked) {
  StartFakePoller();
  Watch("z", Cloud::kAzure);
  emulator_->ScheduleNotice("z", {.cloud = Cloud::kAzure});
  auto r = Until("z", [](const PollResult& r) { return !r.notices.empty(); });
  ASSERT_TRUE(r);
  const size_t seen = results_.size();
  ASSERT_TRUE(Until(
      "z", [](const PollResult&) { return true; }, seen + 2));
  EXPECT_TRUE(emulator_->Stats("z").azure_acks.empty());
}

TEST_F(PollerTest, RejectsBadTargetsAndRemoves) {
  StartFakePoller();
  EXPECT_FALSE(poller_->Add({"", Cloud::kAws, "http://127.0.0.1:1"}).ok());
  EXPECT_FALSE(poller_->Add({"x", Cloud::kUnspecified, "http://127.0.0.1:1"}).ok());
  auto bad = poller_->Add({"x", Cloud::kAws, "ftp://host"});
  EXPECT_THAT(std::string(bad.message()), HasSubstr("metadata_endpoint = \"ftp://host\""));
  Watch("x", Cloud::kAws);
  Watch("y", Cloud::kAws);  // stays: its rounds show that the poller went on
  const auto any = [](const PollResult&) { return true; };
  ASSERT_TRUE(Until("x", any));
  poller_->Remove("x");
  // The poller thread applies the removal (then no result of x is reported) before it counts it.
  ASSERT_TRUE(Eventually([&] { return poller_->size() == 1; }));
  const size_t before = results_.For("x").size();
  const size_t seen = results_.size();
  ASSERT_TRUE(Until("y", any, seen));
  ASSERT_TRUE(Until("y", any, results_.size()));  // two more rounds of y
  EXPECT_EQ(results_.For("x").size(), before);
  poller_->Remove("y");
  EXPECT_TRUE(Eventually([&] { return poller_->size() == 0; }));
}

}  // namespace
}  // namespace spotdnn::detector
