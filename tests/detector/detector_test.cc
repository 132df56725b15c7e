// The detector core against the emulator: state machine, event log, persistence, heartbeats,
// and replicas sharing instances.
#include "detector/detector.h"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "base/clock.h"
#include "base/metrics.h"
#include "detector/metadata_emulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/metrics_sample.h"

namespace spotdnn::detector {
namespace {

using ::testing::HasSubstr;

using ::spotdnn::testing_util::Eventually;

// Waits for what the detector's poller does in real time (10 ms rounds), looking every
// millisecond.
bool Soon(const std::function<bool()>& pred) {
  return Eventually(pred, absl::Seconds(10), absl::Milliseconds(1));
}

// Counts what a detector reports (what spotdnn-detector exports as metrics).
class RecordingObserver final : public DetectorObserver {
 public:
  void OnPoll(Cloud cloud, bool healthy) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++polls[{cloud, healthy}];
  }
  void OnNotice(Cloud cloud, EventKind kind, absl::Duration latency) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++notices[{cloud, kind}];
    latencies.push_back(latency);
  }
  void OnLeaseChange(bool joined) override { ++(joined ? joins : losses); }
  int NoticesOf(Cloud cloud, EventKind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    return notices[{cloud, kind}];
  }
  int PollsOf(Cloud cloud, bool healthy) {
    std::lock_guard<std::mutex> lock(mu_);
    return polls[{cloud, healthy}];
  }
  size_t Latencies() {
    std::lock_guard<std::mutex> lock(mu_);
    return latencies.size();
  }

  std::atomic<int> joins{0}, losses{0};

 private:
  std::mutex mu_;
  std::map<std::pair<Cloud, bool>, int> polls;
  std::map<std::pair<Cloud, EventKind>, int> notices;
  std::vector<absl::Duration> latencies;
};

class DetectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // GCE long polls answer an unchanged value after 50 ms (as when their timeout_sec runs out).
    MetadataEmulator::Options emulator;
    emulator.max_long_poll = absl::Milliseconds(50);
    auto e = MetadataEmulator::Start(emulator);
    ASSERT_TRUE(e.ok()) << e.status();
    emulator_ = *std::move(e);
    db_ = std::filesystem::temp_directory_path() /
          ("detector_test_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db");
    std::filesystem::remove(db_);
  }
  void TearDown() override {
    emulator_->Stop();
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::filesystem::remove(db_.string() + suffix);
    }
  }
  // The detector runs on clock_ (its monitor acts only when the test advances it); its poller
  // asks the emulator in real time, which is what the emulator's notices are dated in.
  DetectorOptions Options(bool persistent = false) {
    DetectorOptions o;
    o.clock = &clock_;
    o.observer = &observer_;
    o.poller.clock = &base::RealClock::Get();
    o.poller.interval = absl::Milliseconds(10);
    o.poller.request_timeout = absl::Milliseconds(300);
    o.poller.max_backoff = absl::Milliseconds(50);  // every retry after the shortest backoff
    o.poller.gce_long_poll_timeout_s = 5;
    o.heartbeat_interval = absl::Milliseconds(100);
    o.lost_after_intervals = 3;
    if (persistent) o.db_path = db_.string();
    return o;
  }
  // Fed by hand (no poller); deadlines are checked with explicit times. (The fake clock stands
  // still, so the monitor thread never acts either.)
  DetectorOptions ByHand() {
    DetectorOptions o = Options();
    o.run_poller = false;
    o.heartbeat_interval = absl::Seconds(10);
    return o;
  }
  std::unique_ptr<Detector> OpenDetector(DetectorOptions o) {
    auto d = Detector::Open(std::move(o));
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : nullptr;
  }
  WatchedInstance Polled(const std::string& id, Cloud cloud, const std::string& job = "job") {
    WatchedInstance w;
    w.instance_id = id;
    w.job_id = job;
    w.cloud = cloud;
    w.metadata_endpoint = emulator_->EndpointFor(id);
    return w;
  }
  static InstanceState StateOf(const Detector& d, const std::string& id) {
    auto w = d.Get(id);
    return w.ok() ? w->state : InstanceState::kUnknown;
  }
  // A sample (or the sum of those it starts) in the process's metrics; -1 when there is none.
  // (The database layer's counters; the detector's own go to its observer.)
  static double Metric(const std::string& series) {
    return testing_util::SampleSum(metrics::DefaultRegistry().Render(), series);
  }
  static std::vector<Event> All(const Detector& d) {
    auto events = d.EventsAfter(0, "", 100000);
    EXPECT_TRUE(events.ok());
    return events.ok() ? *events : std::vector<Event>{};
  }

  // Starts at the real time: polled notices carry the emulator's real times.
  base::FakeClock clock_{absl::FromUnixMillis(base::RealClock::Get().NowUnixMs())};
  RecordingObserver observer_;
  std::unique_ptr<MetadataEmulator> emulator_;
  std::filesystem::path db_;
};

TEST_F(DetectorTest, PolledNoticeBecomesOneEvent) {
  auto d = OpenDetector(Options());
  ASSERT_TRUE(d->Register(Polled("a", Cloud::kAws)).ok());
  ASSERT_TRUE(Soon([&] { return StateOf(*d, "a") == InstanceState::kHealthy; }));
  const int64_t effective = (clock_.NowUnixMs() / 1000 + 120) * 1000;
  emulator_->ScheduleNotice("a", {.cloud = Cloud::kAws, .effective_unix_ms = effective});
  emulator_->ScheduleNotice("a", {.cloud = Cloud::kAws, .kind = EventKind::kRebalance});
  ASSERT_TRUE(Soon([&] { return All(*d).size() >= 2; }));
  // Several more rounds see the same notices: still one event each.
  const int requests_before = emulator_->Stats("a").requests;
  ASSERT_TRUE(Soon([&] { return emulator_->Stats("a").requests >= requests_before + 6; }));
  auto events = All(*d);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].sequence + 1, events[1].sequence);
  int notices = 0;
  for (const Event& e : events) {
    EXPECT_EQ(e.instance_id, "a");
    EXPECT_EQ(e.job_id, "job");
    if (e.kind == EventKind::kNotice) {
      ++notices;
      EXPECT_EQ(e.action, "terminate");
      EXPECT_EQ(e.effective_unix_ms, effective);
    } else {
      EXPECT_EQ(e.kind, EventKind::kRebalance);
    }
  }
  EXPECT_EQ(notices, 1);
  EXPECT_EQ(StateOf(*d, "a"), InstanceState::kNotice);
  EXPECT_GE(observer_.PollsOf(Cloud::kAws, /*healthy=*/true), 1);
}

// A poll that was in flight when the detector stopped polling its instance (a replica's lease
// lapsed, or the ring gave the instance to another replica) answers afterwards: the notice it read
// is recorded all the same, once; the instance's state is left to its poller. An answer to a poll
// of an earlier lifetime of the id is not this lifetime's notice. (Fed by hand: without a poller
// the detector polls nothing, so every answer here is one for an instance it does not poll.)
TEST_F(DetectorTest, ANoticeReadByAPollInFlightWhenPollingStoppedIsRecorded) {
  auto d = OpenDetector(ByHand());
  ASSERT_TRUE(d->Register(Polled("p-1", Cloud::kAws)).ok());
  const int64_t lifetime = d->Get("p-1")->registered_unix_ms;
  PollResult earlier;
  earlier.instance_id = "p-1";
  earlier.tag = lifetime - 1;
  earlier.observed_unix_ms = clock_.NowUnixMs();
  earlier.notices.push_back({.action = "terminate", .key = "aws:instance-action:terminate:old"});
  d->HandlePollResult(earlier);
  EXPECT_EQ(d->last_sequence(), 0u);

  PollResult failed;
  failed.instance_id = "p-1";
  failed.tag = lifetime;
  failed.healthy = false;
  failed.reason = "what only the instance's poller may say";
  d->HandlePollResult(failed);
  EXPECT_EQ(StateOf(*d, "p-1"), InstanceState::kUnknown);
  EXPECT_NE(d->Get("p-1")->reason, failed.reason);

  PollResult late = earlier;
  late.tag = lifetime;
  late.notices = {{.action = "terminate", .key = "aws:instance-action:terminate:now"}};
  d->HandlePollResult(late);
  d->HandlePollResult(late);
  auto events = All(*d);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kNotice);
  EXPECT_EQ(events[0].instance_id, "p-1");
  EXPECT_EQ(StateOf(*d, "p-1"), InstanceState::kNotice);
}

TEST_F(DetectorTest, FaultyEndpointIsUnknownAndOthersAreServed) {
  auto d = OpenDetector(Options());
  emulator_->SetFault("bad", EmulatorFault::kGarbage);
  emulator_->ScheduleNotice("bad", {.cloud = Cloud::kAzure});
  ASSERT_TRUE(d->Register(Polled("bad", Cloud::kAzure)).ok());
  ASSERT_TRUE(d->Register(Polled("good", Cloud::kGce)).ok());
  ASSERT_TRUE(Soon([&] {
    auto w = d->Get("bad");
    return w.ok() && w->reason.find("not valid JSON") != std::string::npos;
  }));
  EXPECT_EQ(StateOf(*d, "bad"), InstanceState::kUnknown);
  emulator_->ScheduleNotice("good", {.cloud = Cloud::kGce});
  ASSERT_TRUE(Soon([&] { return StateOf(*d, "good") == InstanceState::kNotice; }));
  for (const Event& e : All(*d)) EXPECT_EQ(e.instance_id, "good");
  // The fault clears: the real notice arrives, once.
  emulator_->SetFault("bad", EmulatorFault::kNone);
  ASSERT_TRUE(Soon([&] { return StateOf(*d, "bad") == InstanceState::kNotice; }));
  auto events = All(*d);
  EXPECT_EQ(std::count_if(events.begin(), events.end(),
                          [](const Event& e) { return e.instance_id == "bad"; }),
            1);
}

TEST_F(DetectorTest, RestartLosesAndRepeatsNothing) {
  {
    auto d = OpenDetector(Options(true));
    ASSERT_TRUE(d->Register(Polled("a", Cloud::kAws, "j1")).ok());
    ASSERT_TRUE(d->Register(Polled("b", Cloud::kAws, "j2")).ok());
    emulator_->ScheduleNotice("a", {.cloud = Cloud::kAws});
    ASSERT_TRUE(Soon([&] { return d->last_sequence() == 1; }));
  }
  auto d = OpenDetector(Options(true));
  auto listed = d->List("");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].instance_id, "a");
  EXPECT_EQ(listed[0].state, InstanceState::kNotice);
  EXPECT_EQ(listed[1].job_id, "j2");
  auto events = All(*d);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].sequence, 1u);
  EXPECT_EQ(d->store_errors(), 0u) << d->last_store_error();
  EXPECT_EQ(events[0].kind, EventKind::kNotice);
  // The restarted detector polls again, sees the same notice, and does not report it twice; a
  // new notice continues the sequence.
  const int requests_before = emulator_->Stats("a").requests;
  ASSERT_TRUE(Soon([&] { return emulator_->Stats("a").requests >= requests_before + 4; }));
  EXPECT_EQ(d->last_sequence(), 1u);
  emulator_->ScheduleNotice("b", {.cloud = Cloud::kAws});
  ASSERT_TRUE(Soon([&] { return d->last_sequence() == 2; }));
  EXPECT_EQ(All(*d).back().instance_id, "b");
}

TEST_F(DetectorTest, HeartbeatLossIsLostThenRecovered) {
  auto d = OpenDetector(ByHand());
  ASSERT_TRUE(d->Heartbeat("h", "job", Cloud::kAws, clock_.NowUnixMs()).ok());
  EXPECT_EQ(StateOf(*d, "h"), InstanceState::kHealthy);
  const int64_t now = clock_.NowUnixMs();
  d->CheckDeadlines(now + 20000);  // 2 intervals: not yet
  EXPECT_EQ(StateOf(*d, "h"), InstanceState::kHealthy);
  d->CheckDeadlines(now + 31000);
  auto w = d->Get("h");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->state, InstanceState::kLost);
  EXPECT_THAT(w->reason, HasSubstr("no heartbeat"));
  d->CheckDeadlines(now + 60000);  // lost once, not again
  ASSERT_TRUE(d->Heartbeat("h", "job", Cloud::kAws, clock_.NowUnixMs()).ok());
  auto events = All(*d);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, EventKind::kLost);
  EXPECT_EQ(events[1].kind, EventKind::kRecovered);
  EXPECT_EQ(StateOf(*d, "h"), InstanceState::kHealthy);
}

TEST_F(DetectorTest, RegisteredInstanceHasItsBootGraceBeforeItsFirstHeartbeat) {
  // The gateway registers a VM when it launches it; its agent reports once the VM has booted.
  // Losing it after lost_after_intervals (30 s here) would take over every VM that boots slower
  // than that (on a loaded host, seconds; in a cloud, minutes).
  DetectorOptions o = ByHand();
  o.boot_grace = absl::Minutes(5);
  auto d = OpenDetector(o);
  WatchedInstance booting;
  booting.instance_id = "booting";
  booting.job_id = "job";
  booting.cloud = Cloud::kAzure;
  ASSERT_TRUE(d->Register(booting).ok());
  const int64_t now = clock_.NowUnixMs();
  d->CheckDeadlines(now + 120000);
  EXPECT_EQ(StateOf(*d, "booting"), InstanceState::kUnknown);
  EXPECT_TRUE(All(*d).empty());
  // Its first heartbeat (the detector's clock decides): from then on the usual deadline.
  ASSERT_TRUE(d->Heartbeat("booting", "job", Cloud::kAzure, clock_.NowUnixMs()).ok());
  const int64_t heard = clock_.NowUnixMs();
  d->CheckDeadlines(heard + 20000);
  EXPECT_EQ(StateOf(*d, "booting"), InstanceState::kHealthy);
  d->CheckDeadlines(heard + 31000);
  EXPECT_EQ(StateOf(*d, "booting"), InstanceState::kLost);
  // One that never reports is lost once its boot grace is over.
  WatchedInstance never;
  never.instance_id = "never";
  never.job_id = "job";
  never.cloud = Cloud::kAzure;
  ASSERT_TRUE(d->Register(never).ok());
  const int64_t registered = clock_.NowUnixMs();
  d->CheckDeadlines(registered + 299000);
  EXPECT_EQ(StateOf(*d, "never"), InstanceState::kUnknown);
  d->CheckDeadlines(registered + 301000);
  auto w = d->Get("never");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->state, InstanceState::kLost);
  EXPECT_THAT(w->reason, HasSubstr("boot grace"));
}

TEST_F(DetectorTest, MonitorMarksSilentAgentsLost) {
  DetectorOptions o = Options();
  o.run_poller = false;
  auto d = OpenDetector(o);
  ASSERT_TRUE(d->Heartbeat("h", "job", Cloud::kGce, clock_.NowUnixMs()).ok());
  const int64_t heard = clock_.NowUnixMs();
  // The monitor checks every tick (10 ms here) of the detector's clock: time goes on, an
  // interval at a time, until it acts. No real time passes for the detector.
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(absl::Milliseconds(100));
    return StateOf(*d, "h") == InstanceState::kLost;
  }));
  EXPECT_GT(clock_.NowUnixMs() - heard, 300);  // after 3 intervals of 100 ms
}

TEST_F(DetectorTest, AgentNoticeThenRevokedAtItsDeadline) {
  auto d = OpenDetector(ByHand());
  const int64_t now = clock_.NowUnixMs();
  Notice n{EventKind::kNotice, "Preempt", 0, now + 30000, "azure:1", "evicted"};
  ASSERT_TRUE(d->ReportNotice("z", "job", Cloud::kAzure, n, now).ok());
  ASSERT_TRUE(d->ReportNotice("z", "job", Cloud::kAzure, n, now).ok());  // repeated: once
  EXPECT_EQ(observer_.NoticesOf(Cloud::kAzure, EventKind::kNotice), 1);
  EXPECT_EQ(observer_.Latencies(), 1u);
  EXPECT_EQ(StateOf(*d, "z"), InstanceState::kNotice);
  d->CheckDeadlines(now + 30001);
  EXPECT_EQ(StateOf(*d, "z"), InstanceState::kRevoked);
  auto events = All(*d);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, EventKind::kNotice);
  EXPECT_EQ(events[0].cloud, Cloud::kAzure);
  EXPECT_EQ(events[1].kind, EventKind::kRevoked);
  Notice bad = n;
  bad.key = "";
  EXPECT_EQ(d->ReportNotice("z", "job", Cloud::kAzure, bad, now).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(DetectorTest, ACommandThatEndedByItselfIsExitedNeverLost) {
  // An agent whose command ended reports it and stops: its silence is not a loss.
  DetectorOptions o = ByHand();
  o.db_path = db_.string();
  auto d = OpenDetector(o);
  WatchedInstance w;
  w.instance_id = "x";
  w.job_id = "job";
  w.cloud = Cloud::kGce;
  w.instance_type = "n1-v100";
  ASSERT_TRUE(d->Register(w).ok());
  ASSERT_TRUE(d->Heartbeat("x", "job", Cloud::kGce, clock_.NowUnixMs()).ok());
  const int64_t now = clock_.NowUnixMs();
  const Notice exit = ExitNotice(
      {.status = 3, .how = "exit status 3", .last_lines = {"loading data", "ValueError: boom"}});
  ASSERT_TRUE(d->ReportNotice("x", "job", Cloud::kGce, exit, now).ok());
  ASSERT_TRUE(d->ReportNotice("x", "job", Cloud::kGce, exit, now).ok());  // sent again: once
  auto got = d->Get("x");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->state, InstanceState::kExited);
  EXPECT_EQ(got->reason, "exit status 3");
  d->CheckDeadlines(now + 600000);
  EXPECT_EQ(StateOf(*d, "x"), InstanceState::kExited);
  auto events = All(*d);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, EventKind::kExited);
  const CommandExit back = ExitOf(events[0].action, events[0].detail);
  EXPECT_EQ(back.status, 3);
  EXPECT_EQ(back.how, "exit status 3");
  EXPECT_THAT(back.last_lines, ::testing::ElementsAre("loading data", "ValueError: boom"));
  // Its lifetime ended there, censored (not a revocation), and stays so after a restart.
  d.reset();
  d = OpenDetector(o);
  EXPECT_EQ(StateOf(*d, "x"), InstanceState::kExited);
  auto lifetimes = d->Lifetimes("n1-v100");
  ASSERT_TRUE(lifetimes.ok());
  ASSERT_EQ(lifetimes->size(), 1u);
  EXPECT_EQ((*lifetimes)[0].how, "exited");
  EXPECT_FALSE((*lifetimes)[0].revoked);
  // The id used again (a VM started anew) is a new lifetime, watched as usual.
  ASSERT_TRUE(d->Register(w).ok());
  EXPECT_EQ(StateOf(*d, "x"), InstanceState::kUnknown);
  ASSERT_TRUE(d->Heartbeat("x", "job", Cloud::kGce, clock_.NowUnixMs()).ok());
  d->CheckDeadlines(clock_.NowUnixMs() + 31000);
  EXPECT_EQ(StateOf(*d, "x"), InstanceState::kLost);
}

TEST(CommandExitTest, KeepsTheNewestLinesWithinTheDetailLimit) {
  std::vector<std::string> lines;
  for (int i = 0; i < 40; ++i) lines.push_back(std::string(100, 'a' + i % 26) + std::to_string(i));
  const Notice n =
      ExitNotice({.status = 137, .how = "killed by signal 9 (Killed)", .last_lines = lines});
  EXPECT_EQ(n.kind, EventKind::kExited);
  EXPECT_EQ(n.action, "137");
  EXPECT_LE(n.detail.size(), 1024u);
  const CommandExit back = ExitOf(n.action, n.detail);
  EXPECT_EQ(back.status, 137);
  EXPECT_EQ(back.how, "killed by signal 9 (Killed)");
  ASSERT_GE(back.last_lines.size(), 5u);
  ASSERT_LT(back.last_lines.size(), 40u);
  EXPECT_EQ(back.last_lines.back(), lines.back());
  EXPECT_EQ(back.last_lines.front(), lines[40 - back.last_lines.size()]);
}

TEST_F(DetectorTest, EventsAfterResumesAndFiltersByJob) {
  auto d = OpenDetector(ByHand());
  for (int i = 0; i < 6; ++i) {
    Notice n{EventKind::kRebalance, "rebalance", 0, 0, "k" + std::to_string(i), ""};
    ASSERT_TRUE(
        d->ReportNotice("i" + std::to_string(i), i % 2 ? "odd" : "even", Cloud::kAws, n, 0).ok());
  }
  auto after3 = d->EventsAfter(3, "", 100);
  ASSERT_TRUE(after3.ok());
  ASSERT_EQ(after3->size(), 3u);
  EXPECT_EQ((*after3)[0].sequence, 4u);
  auto odd = d->EventsAfter(0, "odd", 100);
  ASSERT_EQ(odd->size(), 3u);
  for (const Event& e : *odd) EXPECT_EQ(e.job_id, "odd");
  EXPECT_EQ(d->EventsAfter(0, "", 2)->size(), 2u);
  EXPECT_FALSE(d->WaitForEvents(6, absl::Milliseconds(20)));
  EXPECT_TRUE(d->WaitForEvents(5, absl::Milliseconds(20)));
}

TEST_F(DetectorTest, EventsAfterPastTheNewestIsOutOfRangeNamingBoth) {
  auto d = OpenDetector(ByHand());
  // A fresh (or wiped) log: 0 is fine, anything past it is not.
  EXPECT_TRUE(d->EventsAfter(0, "", 10).ok());
  auto empty = d->EventsAfter(5, "", 10);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("after_sequence = 5"));
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("newest event, 0"));
  for (int i = 0; i < 3; ++i) {
    Notice n{EventKind::kRebalance, "rebalance", 0, 0, "k" + std::to_string(i), ""};
    ASSERT_TRUE(d->ReportNotice("i", "", Cloud::kAws, n, 0).ok());
  }
  EXPECT_TRUE(d->EventsAfter(3, "", 10).ok());
  auto past = d->EventsAfter(57, "", 10);
  EXPECT_EQ(past.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(past.status().message()), HasSubstr("after_sequence = 57"));
  EXPECT_THAT(std::string(past.status().message()), HasSubstr("newest event, 3"));
}

TEST_F(DetectorTest, ReRegistrationIsIdempotentUntilANewLifetime) {
  DetectorOptions o = ByHand();
  o.db_path = db_.string();
  o.lost_after_intervals = 100;  // 1000 s: only the explicit checks below make anything lost
  auto d = OpenDetector(o);
  WatchedInstance w;
  w.instance_id = "i";
  w.job_id = "job";
  w.cloud = Cloud::kGce;
  ASSERT_TRUE(d->Register(w).ok());
  const int64_t now = clock_.NowUnixMs();
  // GCE's preemption notice has the same key in every lifetime of an instance.
  Notice n{EventKind::kNotice, "preempt", 0, now + 30000, "gce:preempted", "preempted"};
  ASSERT_TRUE(d->ReportNotice("i", "job", Cloud::kGce, n, now).ok());
  ASSERT_EQ(d->last_sequence(), 1u);
  // Registered again while the notice is out (a forwarded registration, a runner resuming):
  // nothing changes and the notice is not reported twice.
  ASSERT_TRUE(d->Register(w).ok());
  EXPECT_EQ(StateOf(*d, "i"), InstanceState::kNotice);
  ASSERT_TRUE(d->ReportNotice("i", "job", Cloud::kGce, n, now).ok());
  EXPECT_EQ(d->last_sequence(), 1u);
  d->CheckDeadlines(now + 30001);
  ASSERT_EQ(StateOf(*d, "i"), InstanceState::kRevoked);
  ASSERT_EQ(d->last_sequence(), 2u);
  // The id is in use again (the preemptible instance restarted): a new lifetime.
  ASSERT_TRUE(d->Register(w).ok());
  auto again = d->Get("i");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state, InstanceState::kUnknown);
  EXPECT_THAT(again->reason, HasSubstr("was revoked"));
  // It survives a restart: the old notice key is forgotten in the store too.
  d.reset();
  d = OpenDetector(o);
  EXPECT_EQ(StateOf(*d, "i"), InstanceState::kUnknown);
  d->CheckDeadlines(now + 60000);  // the old deadline is gone: not revoked again
  EXPECT_EQ(StateOf(*d, "i"), InstanceState::kUnknown);
  const int64_t later = clock_.NowUnixMs();
  Notice second = n;
  second.effective_unix_ms = later + 30000;
  ASSERT_TRUE(d->ReportNotice("i", "job", Cloud::kGce, second, later).ok());
  auto events = All(*d);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].kind, EventKind::kNotice);
  EXPECT_EQ(events[2].effective_unix_ms, later + 30000);
  EXPECT_EQ(StateOf(*d, "i"), InstanceState::kNotice);
  // A lost instance registered again starts over as well.
  ASSERT_TRUE(d->Heartbeat("h", "job", Cloud::kAws, clock_.NowUnixMs()).ok());
  d->CheckDeadlines(clock_.NowUnixMs() + 2000000);
  ASSERT_EQ(StateOf(*d, "h"), InstanceState::kLost);
  WatchedInstance h;
  h.instance_id = "h";
  h.job_id = "job";
  ASSERT_TRUE(d->Register(h).ok());
  auto lost_again = d->Get("h");
  ASSERT_TRUE(lost_again.ok());
  EXPECT_EQ(lost_again->state, InstanceState::kUnknown);
  EXPECT_EQ(lost_again->cloud, Cloud::kAws);  // an unspecified cloud keeps the known one
  EXPECT_EQ(d->store_errors(), 0u) << d->last_store_error();
}

TEST_F(DetectorTest, ReRegistrationWithAnotherEndpointIsANewLifetime) {
  auto d = OpenDetector(ByHand());
  WatchedInstance w;
  w.instance_id = "i";
  w.cloud = Cloud::kAws;
  ASSERT_TRUE(d->Register(w).ok());
  Notice n{EventKind::kNotice,           "stop", 0, clock_.NowUnixMs() + 120000,
           "aws:instance-action:stop:t", ""};
  ASSERT_TRUE(d->ReportNotice("i", "", Cloud::kAws, n, 0).ok());
  // An endpoint given to an instance that had none: the same machine, nothing reset.
  w.metadata_endpoint = "http://127.0.0.1:1/i/i";
  ASSERT_TRUE(d->Register(w).ok());
  EXPECT_EQ(StateOf(*d, "i"), InstanceState::kNotice);
  ASSERT_TRUE(d->ReportNotice("i", "", Cloud::kAws, n, 0).ok());
  EXPECT_EQ(d->last_sequence(), 1u);
  // Another endpoint: another machine answers for the id now.
  w.metadata_endpoint = "http://127.0.0.1:2/i/i";
  ASSERT_TRUE(d->Register(w).ok());
  EXPECT_EQ(StateOf(*d, "i"), InstanceState::kUnknown);
  ASSERT_TRUE(d->ReportNotice("i", "", Cloud::kAws, n, 0).ok());
  EXPECT_EQ(d->last_sequence(), 2u);
  // Another cloud likewise.
  w.cloud = Cloud::kAzure;
  ASSERT_TRUE(d->Register(w).ok());
  EXPECT_EQ(StateOf(*d, "i"), InstanceState::kUnknown);
}

TEST_F(DetectorTest, RevokedInstanceRegisteredAgainIsPolledAgain) {
  auto d = OpenDetector(Options());
  ASSERT_TRUE(d->Register(Polled("a", Cloud::kAws)).ok());
  ASSERT_TRUE(Soon([&] { return StateOf(*d, "a") == InstanceState::kHealthy; }));
  // A stop notice whose deadline comes quickly (AWS times have whole seconds).
  const int64_t effective = (clock_.NowUnixMs() / 1000 + 2) * 1000;
  emulator_->ScheduleNotice(
      "a", {.cloud = Cloud::kAws, .action = "stop", .effective_unix_ms = effective});
  ASSERT_TRUE(Soon([&] { return StateOf(*d, "a") == InstanceState::kNotice; }));
  clock_.Advance(absl::Milliseconds(effective - clock_.NowUnixMs()));  // the deadline comes
  ASSERT_TRUE(Eventually([&] {
    clock_.Advance(absl::Milliseconds(10));  // the monitor's next tick
    return StateOf(*d, "a") == InstanceState::kRevoked;
  }));
  EXPECT_EQ(d->polled(), 0u);
  // The instance is started again under the same id and registered again.
  emulator_->ClearNotices("a");
  ASSERT_TRUE(d->Register(Polled("a", Cloud::kAws)).ok());
  EXPECT_EQ(d->polled(), 1u);
  ASSERT_TRUE(Soon([&] { return StateOf(*d, "a") == InstanceState::kHealthy; }));
  emulator_->ScheduleNotice("a", {.cloud = Cloud::kAws, .action = "terminate"});
  ASSERT_TRUE(Soon([&] { return StateOf(*d, "a") == InstanceState::kNotice; }));
  auto events = All(*d);
  ASSERT_EQ(events.size(), 3u);  // notice, revoked, notice
  EXPECT_EQ(events[2].kind, EventKind::kNotice);
  EXPECT_EQ(events[2].action, "terminate");
}

TEST_F(DetectorTest, NoticeBehindAFaultArrivesOnceWhenItClears) {
  auto d = OpenDetector(Options());
  const std::vector<std::pair<std::string, Cloud>> instances = {
      {"f-aws", Cloud::kAws}, {"f-gce", Cloud::kGce}, {"f-azure", Cloud::kAzure}};
  for (const auto& [id, cloud] : instances) {
    emulator_->SetFault(id, EmulatorFault::kServerError);
    emulator_->ScheduleNotice(id, {.cloud = cloud});
    ASSERT_TRUE(d->Register(Polled(id, cloud)).ok());
  }
  for (const auto& [id, cloud] : instances) {
    ASSERT_TRUE(Soon([&, id = id] {
      auto w = d->Get(id);
      return w.ok() && w->reason.find("HTTP 500") != std::string::npos;
    })) << id;
  }
  EXPECT_EQ(d->last_sequence(), 0u);  // nothing from a faulty answer
  for (const auto& [id, cloud] : instances) emulator_->SetFault(id, EmulatorFault::kNone);
  for (const auto& [id, cloud] : instances) {
    ASSERT_TRUE(Soon([&, id = id] { return StateOf(*d, id) == InstanceState::kNotice; })) << id;
  }
  // More rounds see the same notices: still one event each.
  const int requests_before = emulator_->Stats("f-azure").requests;
  ASSERT_TRUE(Soon([&] { return emulator_->Stats("f-azure").requests >= requests_before + 4; }));
  auto events = All(*d);
  for (const auto& [id, cloud] : instances) {
    EXPECT_EQ(std::count_if(events.begin(), events.end(),
                            [&, id = id](const Event& e) {
                              return e.instance_id == id && e.kind == EventKind::kNotice;
                            }),
              1)
        << id;
  }
  EXPECT_EQ(events.size(), 3u);
}

TEST_F(DetectorTest, RetentionTrimsAndSaysSo) {
  DetectorOptions o = ByHand();
  o.event_retention = 3;
  auto d = OpenDetector(o);
  for (int i = 0; i < 5; ++i) {
    Notice n{EventKind::kRebalance, "rebalance", 0, 0, "k" + std::to_string(i), ""};
    ASSERT_TRUE(d->ReportNotice("i", "", Cloud::kAws, n, 0).ok());
  }
  EXPECT_EQ(d->EventsAfter(0, "", 10).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(d->EventsAfter(2, "", 10)->size(), 3u);
}

TEST_F(DetectorTest, StoreFailuresAreCountedAndEventsStillServed) {
  DetectorOptions o = ByHand();
  o.db_path = db_.string();
  auto d = OpenDetector(o);
  // Someone drops the events table under the detector.
  sqlite3* other = nullptr;
  ASSERT_EQ(sqlite3_open(db_.string().c_str(), &other), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(other, "DROP TABLE events", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(other);
  Notice n{EventKind::kNotice, "stop", 0, 0, "k", ""};
  const std::string errors = "spotdnn_store_errors_total{store=\"spotdnn_detector\"";
  const double errors_before = std::max(0.0, Metric(errors));
  ASSERT_TRUE(d->ReportNotice("i", "", Cloud::kAws, n, 0).ok());
  EXPECT_EQ(d->store_errors(), 1u);
  EXPECT_GE(Metric(errors), errors_before + 1);
  EXPECT_THAT(d->last_store_error(), HasSubstr("events"));
  EXPECT_EQ(All(*d).size(), 1u);
}

TEST_F(DetectorTest, RegistrationValidation) {
  auto d = OpenDetector(Options());
  WatchedInstance w;
  EXPECT_THAT(std::string(d->Register(w).message()), HasSubstr("instance.instance_id"));
  w.instance_id = "x";
  w.metadata_endpoint = "169.254.169.254";
  w.cloud = Cloud::kAws;
  EXPECT_THAT(std::string(d->Register(w).message()),
              HasSubstr("instance.metadata_endpoint = \"169.254.169.254\""));
  w.metadata_endpoint = "http://127.0.0.1:1";
  w.cloud = Cloud::kUnspecified;
  EXPECT_THAT(std::string(d->Register(w).message()), HasSubstr("instance.cloud"));
  EXPECT_EQ(d->Unregister("nope").code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(d->Register(Polled("x", Cloud::kAws)).ok());
  EXPECT_EQ(d->polled(), 1u);
  ASSERT_TRUE(d->Unregister("x").ok());
  EXPECT_EQ(d->polled(), 0u);
  EXPECT_TRUE(d->List("").empty());
}

// Ids, keys and texts the detector would keep for good are bounded; what its own poller reads is
// cut to the same limits instead.
TEST_F(DetectorTest, StringsAreBoundedBeforeTheyAreKept) {
  auto d = OpenDetector(ByHand());
  const std::string long_id(257, 'i');
  WatchedInstance w;
  w.instance_id = "x";
  w.job_id = std::string(10 << 20, 'j');
  absl::Status s = d->Register(w);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("instance.job_id = \"jjj"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("(10485760 bytes): longer than 256 bytes"));
  EXPECT_LT(s.message().size(), 200u);
  EXPECT_THAT(std::string(d->Heartbeat(long_id, "job", Cloud::kAws, 0).message()),
              HasSubstr("instance_id = \"iii"));
  EXPECT_THAT(
      std::string(d->Heartbeat("x", "job", Cloud::kAws, 0, std::string(1025, 'p')).message()),
      HasSubstr("problem = \"ppp"));
  Notice n;
  n.key = std::string(257, 'k');
  n.detail = "d";
  EXPECT_THAT(std::string(d->ReportNotice("x", "job", Cloud::kAws, n, 0).message()),
              HasSubstr("notice_key = \"kkk"));
  n.key = "k";
  n.detail = std::string(1025, 'd');
  EXPECT_THAT(std::string(d->ReportNotice("x", "job", Cloud::kAws, n, 0).message()),
              HasSubstr("event.detail = \"ddd"));
  // The instance type main added for lifetimes is a name like the others.
  WatchedInstance typed;
  typed.instance_id = "x";
  typed.instance_type = std::string(257, 't');
  EXPECT_THAT(std::string(d->Register(typed).message()),
              HasSubstr("instance.instance_type = \"ttt"));
  EXPECT_TRUE(d->List("").empty());
  EXPECT_TRUE(All(*d).empty());
}

// Lifetimes for revocation models: from registration to the first notice (revoked, at its
// effective time), or censored when unregistered, lost or registered again; kept across a restart
// with the instance type.
TEST_F(DetectorTest, RecordsLifetimesPerInstanceType) {
  DetectorOptions o = ByHand();
  o.db_path = db_.string();
  auto d = OpenDetector(o);
  for (const char* id : {"a", "b", "c"}) {
    WatchedInstance w;
    w.instance_id = id;
    w.job_id = "job";
    w.cloud = Cloud::kAws;
    w.instance_type = std::string(id) == "c" ? "g3.8xlarge" : "p2.xlarge";
    ASSERT_TRUE(d->Register(w).ok());
  }
  auto a = d->Get("a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->instance_type, "p2.xlarge");
  EXPECT_GT(a->registered_unix_ms, 0);
  const int64_t now = clock_.NowUnixMs();
  Notice n{EventKind::kNotice, "terminate", 0, now + 120000, "aws:1", "spot"};
  ASSERT_TRUE(d->ReportNotice("a", "job", Cloud::kAws, n, now).ok());
  // A second notice of the same lifetime records nothing more.
  Notice n2 = n;
  n2.key = "aws:2";
  ASSERT_TRUE(d->ReportNotice("a", "job", Cloud::kAws, n2, now).ok());
  ASSERT_TRUE(d->Unregister("b").ok());
  // A re-registration without a type keeps the one known.
  WatchedInstance c;
  c.instance_id = "c";
  c.job_id = "job";
  ASSERT_TRUE(d->Register(c).ok());
  d.reset();
  d = OpenDetector(o);
  auto p2 = d->Lifetimes("p2.xlarge");
  ASSERT_TRUE(p2.ok()) << p2.status();
  ASSERT_EQ(p2->size(), 2u);
  EXPECT_EQ((*p2)[0].instance_id, "a");
  EXPECT_TRUE((*p2)[0].revoked);
  EXPECT_EQ((*p2)[0].how, "notice");
  EXPECT_EQ((*p2)[0].ended_unix_ms, now + 120000);
  EXPECT_EQ((*p2)[1].instance_id, "b");
  EXPECT_FALSE((*p2)[1].revoked);
  EXPECT_EQ((*p2)[1].how, "unregistered");
  auto g3 = d->Lifetimes("g3.8xlarge");
  ASSERT_TRUE(g3.ok());
  ASSERT_EQ(g3->size(), 1u);
  EXPECT_EQ((*g3)[0].how, "running");
  EXPECT_FALSE((*g3)[0].revoked);
  EXPECT_EQ(d->Lifetimes("")->size(), 3u);
}

TEST_F(DetectorTest, OpensADatabaseFromBeforeInstanceTypes) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_.string().c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE instances (instance_id TEXT PRIMARY KEY, job_id TEXT, "
                         "cloud INTEGER, endpoint TEXT, state INTEGER, reason TEXT, "
                         "last_heartbeat_ms INTEGER, notice_effective_ms INTEGER);"
                         "INSERT INTO instances VALUES ('old', 'job', 1, '', 1, '', 5, 0);",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  DetectorOptions o = ByHand();
  o.db_path = db_.string();
  auto d = OpenDetector(o);
  ASSERT_NE(d, nullptr);
  auto old = d->Get("old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->instance_type, "");
  EXPECT_EQ(old->registered_unix_ms, 0);
  // Its start is unknown: no lifetime is made up for it.
  ASSERT_TRUE(d->Unregister("old").ok());
  EXPECT_TRUE(d->Lifetimes("")->empty());
}

TEST(HashRingTest, SpreadsAndMovesOnlyTheFailedReplicasInstances) {
  HashRing three({"a", "b", "c"});
  HashRing two({"a", "c"});
  std::map<std::string, int> counts;
  int moved_wrongly = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string id = "i-" + std::to_string(i);
    const std::string& owner = three.Owner(id);
    ++counts[owner];
    if (owner != "b" && two.Owner(id) != owner) ++moved_wrongly;
    EXPECT_NE(two.Owner(id), "b");
  }
  EXPECT_EQ(moved_wrongly, 0);
  for (const auto& [replica, n] : counts) EXPECT_GT(n, 600) << replica;
  EXPECT_EQ(HashRing().Owner("x"), "");
}

TEST_F(DetectorTest, ReplicasShareInstancesAndTakeOverOnFailure) {
  DetectorOptions oa = Options();
  oa.replica_id = "a";
  DetectorOptions ob = Options();
  ob.replica_id = "b";
  auto a = OpenDetector(oa);
  auto b = OpenDetector(ob);
  a->SetLiveReplicas({"a", "b"});
  b->SetLiveReplicas({"a", "b"});
  for (int i = 0; i < 20; ++i) {
    const auto w = Polled("r" + std::to_string(i), Cloud::kAws);
    ASSERT_TRUE(a->Register(w).ok());
    ASSERT_TRUE(b->Register(w).ok());
  }
  EXPECT_EQ(a->polled() + b->polled(), 20u);
  EXPECT_GT(a->polled(), 0u);
  EXPECT_GT(b->polled(), 0u);
  // An instance held by b gets a notice: only b reports it.
  std::string on_b;
  for (const WatchedInstance& w : b->List("")) {
    if (w.replica == "b") on_b = w.instance_id;
  }
  ASSERT_FALSE(on_b.empty());
  emulator_->ScheduleNotice(on_b, {.cloud = Cloud::kAws});
  ASSERT_TRUE(Soon([&] { return b->last_sequence() == 1; }));
  // b fails: a takes over all 20, and sees b's notice too (at-least-once across replicas).
  b.reset();
  a->SetLiveReplicas({"a"});
  EXPECT_EQ(a->polled(), 20u);
  ASSERT_TRUE(Soon([&] { return StateOf(*a, on_b) == InstanceState::kNotice; }));
  for (const WatchedInstance& w : a->List("")) EXPECT_EQ(w.replica, "a");
}

}  // namespace
}  // namespace spotdnn::detector
