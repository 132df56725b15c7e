// Detector replicas sharing a PostgreSQL store, as processes and through faults: three
// spotdnn-detector replicas, one killed with SIGKILL and one stopped with SIGSTOP past its lease
// and resumed, while notices arrive (every notice exactly once on one WatchEvents stream); and a
// detector and a profiler store whose database is stopped for 5 s mid-run (no acknowledged
// registration, event or sample is lost, nothing is recorded twice).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "base/clock.h"
#include "detector/detector.h"
#include "detector/hash_ring.h"
#include "detector/metadata_emulator.h"
#include "gtest/gtest.h"
#include "libpq-fe.h"
#include "profiler/profile_store.h"
#include "services/common/server.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/health_check.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::services {
namespace {

using ::spotdnn::testing_util::Eventually;

// How long a test waits for what other processes do before it fails.
constexpr absl::Duration kPatience = absl::Seconds(20);

namespace d = ::spotdnn::detector;
namespace pb = ::spotdnn::v1;
using ::spotdnn::testing_util::Child;
using ::spotdnn::testing_util::ReadPort;

pb::ReplicaStatusResponse StatusOf(pb::Detector::Stub& stub) {
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  pb::ReplicaStatusResponse status;
  (void)stub.ReplicaStatus(&c, {}, &status);
  return status;
}

// Counts the notice events of one WatchEvents stream, by instance.
class Subscriber {
 public:
  explicit Subscriber(pb::Detector::Stub& stub) : stub_(stub) {
    thread_ = std::thread([this] {
      pb::WatchEventsRequest request;
      auto reader = stub_.WatchEvents(&context_, request);
      pb::RevocationEvent e;
      while (reader->Read(&e)) {
        std::lock_guard<std::mutex> lock(mu_);
        if (e.sequence() <= last_) out_of_order_ = true;
        last_ = e.sequence();
        if (e.kind() == pb::RevocationEvent::KIND_NOTICE) ++notices_[e.instance_id()];
      }
      ended_ = true;
    });
  }
  ~Subscriber() {
    context_.TryCancel();
    thread_.join();
  }
  std::map<std::string, int> notices() const {
    std::lock_guard<std::mutex> lock(mu_);
    return notices_;
  }
  bool out_of_order() const {
    std::lock_guard<std::mutex> lock(mu_);
    return out_of_order_;
  }
  bool ended() const { return ended_; }

 private:
  pb::Detector::Stub& stub_;
  grpc::ClientContext context_;
  mutable std::mutex mu_;
  std::map<std::string, int> notices_;
  uint64_t last_ = 0;
  bool out_of_order_ = false;
  std::atomic<bool> ended_{false};
  std::thread thread_;
};

TEST(DetectorReplicas, KilledAndPausedReplicasLoseAndRepeatNoNotice) {
  auto server = testing_util::SharedPostgresServer();
  ASSERT_TRUE(server.ok()) << server.status();
  auto dsn = (*server)->CreateDatabase();
  ASSERT_TRUE(dsn.ok()) << dsn.status();
  auto emulator = d::MetadataEmulator::Start({});
  ASSERT_TRUE(emulator.ok()) << emulator.status();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("detector_replicas_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);

  std::vector<std::unique_ptr<Child>> replicas;
  std::vector<std::unique_ptr<pb::Detector::Stub>> stubs;
  for (int i = 0; i < 3; ++i) {
    const std::string id = "r" + std::to_string(i);
    replicas.push_back(std::make_unique<Child>(
        std::vector<std::string>{SPOTDNN_BINARY_DIR "/spotdnn-detector", "--listen=127.0.0.1:0",
                                 "--port_file=" + (dir / id).string(), "--store=" + *dsn,
                                 "--replica_id=" + id, "--lease=1s", "--poll_interval=100ms",
                                 "--request_timeout=300ms", "--gce_long_poll_timeout_s=5",
                                 "--heartbeat_interval=200ms", "--lost_after_intervals=5"},
        (dir / (id + ".log")).string()));
    const int port = ReadPort((dir / id).string());
    ASSERT_GT(port, 0) << id << " wrote no port; its log:\n"
                       << testing_util::FileText((dir / (id + ".log")).string());
    stubs.push_back(pb::Detector::NewStub(MakeChannel("127.0.0.1:" + std::to_string(port))));
  }
  ASSERT_TRUE(Eventually([&] { return StatusOf(*stubs[2]).live_replicas_size() == 3; }, kPatience));

  // Instances registered through r0, on all three clouds; a notice for each over 6 s.
  constexpr int kInstances = 30;
  const d::Cloud clouds[3] = {d::Cloud::kAws, d::Cloud::kAzure, d::Cloud::kGce};
  const pb::Cloud pb_clouds[3] = {pb::CLOUD_AWS, pb::CLOUD_AZURE, pb::CLOUD_GCE};
  for (int i = 0; i < kInstances; ++i) {
    pb::RegisterInstanceRequest request;
    const std::string id = "i-" + std::to_string(i);
    request.mutable_instance()->set_instance_id(id);
    request.mutable_instance()->set_job_id("job");
    request.mutable_instance()->set_cloud(pb_clouds[i % 3]);
    request.mutable_instance()->set_metadata_endpoint((*emulator)->EndpointFor(id));
    grpc::ClientContext c;
    pb::RegisterInstanceResponse response;
    ASSERT_TRUE(stubs[0]->RegisterInstance(&c, request, &response).ok()) << id;
  }
  Subscriber subscriber(*stubs[2]);
  const int64_t start = base::RealClock::Get().NowUnixMs();
  for (int i = 0; i < kInstances; ++i) {
    (*emulator)->ScheduleNotice(
        "i-" + std::to_string(i),
        {.cloud = clouds[i % 3], .visible_at_unix_ms = start + 1500 + 200 * i});
  }
  // r0 crashes; r1 is paused for 2.5 s (its 1 s lease expires) and resumed.
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));
  replicas[0]->Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  ASSERT_EQ(kill(replicas[1]->pid(), SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ASSERT_EQ(kill(replicas[1]->pid(), SIGCONT), 0);

  EXPECT_TRUE(
      Eventually([&] { return subscriber.notices().size() == kInstances; }, absl::Seconds(30)));
  // r1 found its lease gone, was fenced and joined again with a new epoch.
  EXPECT_TRUE(Eventually([&] { return StatusOf(*stubs[1]).lease_changes() >= 3u; }, kPatience));
  EXPECT_TRUE(Eventually([&] { return StatusOf(*stubs[2]).live_replicas_size() == 2; }, kPatience));
  std::this_thread::sleep_for(std::chrono::seconds(2));  // polls go on: nothing is repeated
  const auto notices = subscriber.notices();
  int lost = 0, duplicated = 0;
  for (int i = 0; i < kInstances; ++i) {
    auto it = notices.find("i-" + std::to_string(i));
    if (it == notices.end()) {
      ++lost;
      ADD_FAILURE() << "i-" << i << ": no notice event";
    } else if (it->second != 1) {
      duplicated += it->second - 1;
      ADD_FAILURE() << "i-" << i << ": " << it->second << " notice events";
    }
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(duplicated, 0);
  EXPECT_EQ(notices.size(), static_cast<size_t>(kInstances));
  EXPECT_FALSE(subscriber.out_of_order());
  EXPECT_FALSE(subscriber.ended());
  for (auto& r : replicas) r->Stop();
  (*emulator)->Stop();
  std::filesystem::remove_all(dir);
}

// One step's sample of worker w1 of job "restart".
profiler::Sample SampleAt(int64_t step) {
  profiler::Sample s;
  s.job_id = "restart";
  s.worker_id = "w1";
  s.instance_type = "p3.2xlarge";
  s.gpu_type = "V100";
  s.gpus = 1;
  s.batch_size = 128;
  s.step = step;
  s.wall_time_s = 1.7e9 + static_cast<double>(step);
  s.iteration_time_s = 0.25;
  s.loss = 3.5;
  return s;
}

TEST(DetectorReplicas, ADatabaseStoppedForFiveSecondsLosesNothingAcknowledged) {
  auto server = testing_util::PostgresServer::Create();  // its own: this test stops it
  ASSERT_TRUE(server.ok()) << server.status();
  auto dsn = (*server)->CreateDatabase();
  ASSERT_TRUE(dsn.ok()) << dsn.status();
  auto samples_dsn = (*server)->CreateDatabase();
  ASSERT_TRUE(samples_dsn.ok()) << samples_dsn.status();
  auto samples = profiler::ProfileStore::Open(*samples_dsn);
  ASSERT_TRUE(samples.ok()) << samples.status();
  // Batches of 5 samples (a ReportSamples call each), and which were acknowledged.
  std::vector<std::vector<profiler::Sample>> batches;
  std::set<int64_t> acknowledged_steps;
  auto Report = [&] {
    std::vector<profiler::Sample> batch;
    for (int k = 0; k < 5; ++k)
      batch.push_back(SampleAt(static_cast<int64_t>(batches.size()) * 5 + k + 1));
    batches.push_back(batch);
    if ((*samples)->AddSamples(batch, "test").ok()) {
      for (const profiler::Sample& s : batch) acknowledged_steps.insert(s.step);
    }
  };
  Report();
  auto emulator = d::MetadataEmulator::Start({});
  ASSERT_TRUE(emulator.ok()) << emulator.status();
  d::DetectorOptions options;
  options.db_path = *dsn;
  options.replica_id = "only";
  options.poller.interval = absl::Milliseconds(100);
  options.poller.request_timeout = absl::Milliseconds(300);
  options.poller.max_backoff = absl::Milliseconds(300);
  options.lease = absl::Seconds(1);
  options.sync_interval = absl::Milliseconds(100);
  auto opened = d::Detector::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<d::Detector> detector = *std::move(opened);
  auto Instance = [&](const std::string& id) {
    d::WatchedInstance w;
    w.instance_id = id;
    w.job_id = "job";
    w.cloud = d::Cloud::kAws;
    w.metadata_endpoint = (*emulator)->EndpointFor(id);
    return w;
  };
  std::set<std::string> acknowledged;
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(detector->Register(Instance("a-" + std::to_string(i))).ok());
    acknowledged.insert("a-" + std::to_string(i));
  }
  // Notices that show while the database is down, and one before.
  const int64_t now = base::RealClock::Get().NowUnixMs();
  (*emulator)->ScheduleNotice("a-0", {.cloud = d::Cloud::kAws});
  for (int i = 1; i < 6; ++i) {
    (*emulator)->ScheduleNotice(
        "a-" + std::to_string(i),
        {.cloud = d::Cloud::kAws, .visible_at_unix_ms = now + 1500 + 500 * i});
  }
  ASSERT_TRUE(Eventually([&] { return detector->last_sequence() >= 1; }, kPatience));
  ASSERT_TRUE((*server)->Stop().ok());
  const auto stopped = std::chrono::steady_clock::now();
  // Samples reported meanwhile, on a thread of their own: each call retries for seconds.
  std::atomic<bool> outage{true};
  std::thread reporter([&] {
    while (outage) {
      Report();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  // Registrations while it is down: each either acknowledged (kept) or refused (UNAVAILABLE).
  int refused = 0;
  bool reported_not_serving = false;
  for (int i = 0; std::chrono::steady_clock::now() - stopped < std::chrono::seconds(5); ++i) {
    const std::string id = "b-" + std::to_string(i);
    const absl::Status s = detector->Register(Instance(id));
    if (s.ok()) {
      acknowledged.insert(id);
    } else {
      EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
      ++refused;
    }
    reported_not_serving |= !detector->serving();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE((*server)->Start().ok());
  outage = false;
  reporter.join();
  Report();
  EXPECT_GT(refused, 0) << "the database was down for 5 s: some registration must have failed";
  EXPECT_TRUE(reported_not_serving);
  ASSERT_TRUE(Eventually([&] { return detector->serving(); }, absl::Seconds(30)));
  // Every notice recorded once, the ones that showed during the outage too.
  ASSERT_TRUE(Eventually(
      [&] {
        std::set<std::string> with_notice;
        const auto events = detector->EventsAfter(0, "", 1000);
        for (const d::Event& e : *events) {
          if (e.kind == d::EventKind::kNotice) with_notice.insert(e.instance_id);
        }
        return with_notice.size() == 6;
      },
      absl::Seconds(30)));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::map<std::string, int> notices;
  const auto events = detector->EventsAfter(0, "", 1000);
  for (const d::Event& e : *events) {
    if (e.kind == d::EventKind::kNotice) ++notices[e.instance_id];
  }
  for (const auto& [id, n] : notices) EXPECT_EQ(n, 1) << id;
  detector.reset();
  // What a fresh replica reads from the database: every acknowledged registration, and the same
  // notices.
  options.replica_id = "fresh";
  auto fresh = d::Detector::Open(options);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  std::set<std::string> stored;
  for (const d::WatchedInstance& w : (*fresh)->List("")) stored.insert(w.instance_id);
  for (const std::string& id : acknowledged) EXPECT_TRUE(stored.count(id)) << id << " was lost";
  std::map<std::string, int> fresh_notices;
  const auto fresh_events = (*fresh)->EventsAfter(0, "", 1000);
  for (const d::Event& e : *fresh_events) {
    if (e.kind == d::EventKind::kNotice) ++fresh_notices[e.instance_id];
  }
  EXPECT_EQ(fresh_notices, notices);
  (*fresh)->Shutdown();
  (*emulator)->Stop();

  // Every acknowledged sample is stored; every batch sent again (a reporter retrying what failed,
  // and what it is unsure of) is stored once.
  auto stored_samples = (*samples)->LoadSamples({});
  ASSERT_TRUE(stored_samples.ok()) << stored_samples.status();
  std::set<int64_t> stored_steps;
  for (const profiler::Sample& s : *stored_samples) stored_steps.insert(s.step);
  for (int64_t step : acknowledged_steps) EXPECT_TRUE(stored_steps.count(step)) << "step " << step;
  EXPECT_EQ(stored_samples->size(), stored_steps.size());
  for (const auto& batch : batches) ASSERT_TRUE((*samples)->AddSamples(batch, "test").ok());
  EXPECT_EQ((*samples)->CountSamples().value_or(-1), static_cast<int64_t>(batches.size() * 5));
  EXPECT_GE(batches.size(), 3u);  // before, while (each call retries for seconds) and after
}

TEST(DetectorReplicas, HealthIsNotServingWhileTheDatabaseIsAway) {
  auto server = testing_util::PostgresServer::Create();  // its own: this test stops it
  ASSERT_TRUE(server.ok()) << server.status();
  auto dsn = (*server)->CreateDatabase();
  ASSERT_TRUE(dsn.ok()) << dsn.status();
  const auto dir =
      std::filesystem::temp_directory_path() / ("detector_health_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  Child replica(
      {SPOTDNN_BINARY_DIR "/spotdnn-detector", "--listen=127.0.0.1:0",
       "--port_file=" + (dir / "port").string(), "--store=" + *dsn, "--replica_id=h", "--lease=1s"},
      (dir / "h.log").string());
  const int port = ReadPort((dir / "port").string());
  ASSERT_GT(port, 0);
  auto channel = MakeChannel("127.0.0.1:" + std::to_string(port));
  // The whole server and the Detector service by name, as probes ask.
  auto health = [&](const std::string& service) {
    std::string answer;
    return testing_util::HealthCheck(*channel, service, &answer).ok() ? answer : "unreachable";
  };
  ASSERT_TRUE(Eventually([&] { return health("") == testing_util::kServing; }, kPatience));
  EXPECT_EQ(health("spotdnn.v1.Detector"), testing_util::kServing);
  ASSERT_TRUE((*server)->Stop().ok());
  EXPECT_TRUE(Eventually(
      [&] {
        return health("") == testing_util::kNotServing &&
               health("spotdnn.v1.Detector") == testing_util::kNotServing;
      },
      kPatience));
  ASSERT_TRUE((*server)->Start().ok());
  EXPECT_TRUE(Eventually(
      [&] {
        return health("") == testing_util::kServing &&
               health("spotdnn.v1.Detector") == testing_util::kServing;
      },
      kPatience));
  EXPECT_TRUE(replica.Stop());
  std::filesystem::remove_all(dir);
}

// Under load a replica's database calls slow down, and a renewal queued behind a slow
// read of the event log arrived past the fence (p99 notice latency 7.3 s beside a test run, 1.4 s
// idle). Here the event log is locked for three leases by another session: reading it back blocks,
// and the lease must still be renewed (its own connection and thread), so the replica neither
// fences itself nor loses its instances.
// A replica with a 1 s lease on a fresh database of the shared PostgreSQL server, polling
// nothing, once it serves (the test fails when it cannot have one).
std::unique_ptr<d::Detector> ServingReplica(const std::string& replica_id, std::string* dsn_out) {
  auto server = testing_util::SharedPostgresServer();
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return nullptr;
  auto dsn = (*server)->CreateDatabase();
  EXPECT_TRUE(dsn.ok()) << dsn.status();
  if (!dsn.ok()) return nullptr;
  *dsn_out = *dsn;
  d::DetectorOptions options;
  options.db_path = *dsn;
  options.replica_id = replica_id;
  options.run_poller = false;
  options.lease = absl::Seconds(1);
  options.sync_interval = absl::Milliseconds(100);
  auto opened = d::Detector::Open(options);
  EXPECT_TRUE(opened.ok()) << opened.status();
  if (!opened.ok()) return nullptr;
  std::unique_ptr<d::Detector> detector = *std::move(opened);
  EXPECT_TRUE(Eventually([&] { return detector->serving(); }, kPatience));
  return detector;
}

TEST(DetectorReplicas, ALeaseIsRenewedWhileTheEventLogIsLocked) {
  std::string dsn;
  std::unique_ptr<d::Detector> detector = ServingReplica("slow-log", &dsn);
  ASSERT_TRUE(detector != nullptr && detector->serving());
  const uint64_t changes_before = detector->lease_changes();

  PGconn* locker = PQconnectdb(dsn.c_str());
  ASSERT_EQ(PQstatus(locker), CONNECTION_OK) << PQerrorMessage(locker);
  PGresult* begun =
      PQexec(locker, "BEGIN; LOCK TABLE spotdnn_detector.events IN ACCESS EXCLUSIVE MODE");
  ASSERT_EQ(PQresultStatus(begun), PGRES_COMMAND_OK) << PQerrorMessage(locker);
  PQclear(begun);
  // Three leases with the log locked; the replica must stay serving throughout.
  bool always_serving = true;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until) {
    always_serving = always_serving && detector->serving();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  PGresult* committed = PQexec(locker, "COMMIT");
  EXPECT_EQ(PQresultStatus(committed), PGRES_COMMAND_OK) << PQerrorMessage(locker);
  PQclear(committed);
  PQfinish(locker);
  EXPECT_TRUE(always_serving) << "the replica fenced itself while the event log was locked";
  EXPECT_EQ(detector->lease_changes(), changes_before);
  detector.reset();
}

// On a busy host (load 20 on 2 cores) a thread holding the detector's lock was
// descheduled for up to 2 s, and the lease loop, which took that lock around every renewal, lost
// the lease again and again (the renewal itself took 0-336 ms). Here the lock is held for three
// leases: the lease must stay live in the database throughout, and the replica must not fence
// itself when the lock comes free.
TEST(DetectorReplicas, ALeaseIsRenewedWhileTheDetectorsLockIsHeld) {
  std::string dsn;
  std::unique_ptr<d::Detector> detector = ServingReplica("busy", &dsn);
  ASSERT_TRUE(detector != nullptr && detector->serving());
  const uint64_t changes_before = detector->lease_changes();
  auto watcher = d::DetectorStore::Open(dsn);
  ASSERT_TRUE(watcher.ok()) << watcher.status();

  std::thread holder([&] { detector->HoldLockForTesting(absl::Seconds(3)); });
  int reads = 0, live = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(2900);
  while (std::chrono::steady_clock::now() < until) {
    auto leases = (*watcher)->LiveLeases();
    ASSERT_TRUE(leases.ok()) << leases.status();
    ++reads;
    live += std::any_of(leases->begin(), leases->end(),
                        [](const d::Lease& l) { return l.replica_id == "busy"; });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  holder.join();
  EXPECT_EQ(live, reads) << "the lease expired while the detector's lock was held";
  // The monitor applies the renewals once the lock is free: no fence, no new epoch.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_TRUE(detector->serving());
  EXPECT_EQ(detector->lease_changes(), changes_before);
  detector.reset();
}

// A starved host, simulated. A replica runs on a fake clock: its lease loop, monitor and
// background loop act only when the test moves that clock, so the test decides when a renewal is
// tried and when a refused write is tried again; its poller asks the metadata emulator in real
// time. Its lease in the database lasts a minute of real time and never runs out by itself here:
// where a starved replica's lease would lapse (a renewal descheduled past the lease), the test
// takes the lease over, as a join of the same replica id does, which has the same effect on the
// replica: its writes are refused, its next renewal fails, it fences itself and joins again with a
// new epoch. Nothing here asserts how long anything took.
class StarvedReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing_util::SharedPostgresServer();
    ASSERT_TRUE(server.ok()) << server.status();
    auto dsn = (*server)->CreateDatabase();
    ASSERT_TRUE(dsn.ok()) << dsn.status();
    dsn_ = *dsn;
    auto emulator = d::MetadataEmulator::Start({});
    ASSERT_TRUE(emulator.ok()) << emulator.status();
    emulator_ = *std::move(emulator);
    auto other = d::DetectorStore::Open(dsn_);
    ASSERT_TRUE(other.ok()) << other.status();
    other_ = *std::move(other);
    sql_ = PQconnectdb(dsn_.c_str());
    ASSERT_EQ(PQstatus(sql_), CONNECTION_OK) << PQerrorMessage(sql_);
  }
  void TearDown() override {
    if (sql_ != nullptr) {
      // A test that failed while the event log was locked unlocks it.
      if (PQtransactionStatus(sql_) != PQTRANS_IDLE) Sql("ROLLBACK");
      PQfinish(sql_);
    }
    if (emulator_) emulator_->Stop();
  }

  // Counts the detector's polls of instances it holds.
  class Polls final : public d::DetectorObserver {
   public:
    void OnPoll(d::Cloud, bool healthy) override { healthy_ += healthy ? 1 : 0; }
    int healthy() const { return healthy_; }

   private:
    std::atomic<int> healthy_{0};
  };

  // Replica `id` on this test's database, on the fake clock; `poll`: with its poller (10 ms rounds
  // in real time). Once it serves.
  std::unique_ptr<d::Detector> Replica(const std::string& id, bool poll) {
    d::DetectorOptions o;
    o.db_path = dsn_;
    o.replica_id = id;
    o.clock = &clock_;
    o.observer = &polls_;
    o.run_poller = poll;
    o.poller.clock = &base::RealClock::Get();
    o.poller.interval = absl::Milliseconds(10);
    o.poller.request_timeout = absl::Milliseconds(300);
    o.poller.max_backoff = absl::Milliseconds(50);
    o.lease = absl::Minutes(1);
    o.sync_interval = absl::Milliseconds(100);
    o.heartbeat_interval = absl::Seconds(1);  // the monitor applies lease news every 100 ms
    auto opened = d::Detector::Open(o);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return nullptr;
    std::unique_ptr<d::Detector> replica = *std::move(opened);
    EXPECT_TRUE(Advancing([&] { return replica->serving(); }));
    return replica;
  }
  d::WatchedInstance Polled(const std::string& id) {
    d::WatchedInstance w;
    w.instance_id = id;
    w.job_id = "job";
    w.cloud = d::Cloud::kAws;
    w.metadata_endpoint = emulator_->EndpointFor(id);
    return w;
  }
  // Moves the replicas' time on, 100 ms at a time, until `pred` holds (false if it never does).
  bool Advancing(const std::function<bool()>& pred) {
    return Eventually(
        [&] {
          clock_.Advance(absl::Milliseconds(100));
          return pred();
        },
        kPatience, absl::Milliseconds(2));
  }
  // What a lapsed lease does to replica `id`: another holder of its id, with a newer epoch.
  void TakeLease(const std::string& id) { ASSERT_TRUE(other_->JoinLease(id, 60000).ok()); }
  // Runs `sql` on the test's own connection; its first value ("" for none).
  std::string Sql(const std::string& sql) {
    PGresult* r = PQexec(sql_, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    EXPECT_TRUE(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        << sql << ": " << PQerrorMessage(sql_);
    std::string value =
        st == PGRES_TUPLES_OK && PQntuples(r) > 0 && PQnfields(r) > 0 ? PQgetvalue(r, 0, 0) : "";
    PQclear(r);
    return value;
  }
  // Counts the attempts to append to the event log from now on (SELECT n FROM
  // public.append_attempts), by a trigger.
  void CountAppends() {
    Sql("CREATE TABLE public.append_attempts (n INTEGER); INSERT INTO public.append_attempts "
        "VALUES (0)");
    Sql("CREATE FUNCTION public.count_append() RETURNS trigger AS $$ BEGIN UPDATE "
        "public.append_attempts SET n = n + 1; RETURN NEW; END $$ LANGUAGE plpgsql");
    Sql("CREATE TRIGGER count_append BEFORE INSERT ON spotdnn_detector.events FOR EACH ROW "
        "EXECUTE FUNCTION public.count_append()");
  }
  // The first instance id PREFIX0, PREFIX1, ... that replica `owner` owns on the ring of a and b.
  static std::string OwnedBy(const std::string& owner, const std::string& prefix) {
    const d::HashRing ring({"a", "b"});
    for (int i = 0;; ++i) {
      const std::string id = prefix + std::to_string(i);
      if (ring.Owner(id) == owner) return id;
    }
  }
  // A notice's effective time far beyond the time the tests move through (no revocation).
  static int64_t InAnHour() { return base::RealClock::Get().NowUnixMs() + 3'600'000; }
  static int Notices(const d::Detector& replica, const std::string& instance_id) {
    int n = 0;
    for (const d::Event& e : replica.EventsAfter(0, "", 1000).value_or(std::vector<d::Event>{})) {
      n += e.kind == d::EventKind::kNotice && e.instance_id == instance_id;
    }
    return n;
  }

  base::FakeClock clock_{absl::FromUnixMillis(base::RealClock::Get().NowUnixMs())};
  Polls polls_;
  std::string dsn_;
  std::unique_ptr<d::MetadataEmulator> emulator_;
  std::unique_ptr<d::DetectorStore> other_;  // another process's connection to the store
  PGconn* sql_ = nullptr;
};

// A replica that lost its lease joins again at once, even while another replica holds the
// store's writer lock (here for as long as the test likes: its append waits on a locked event
// log): a join does not queue behind event appends. Joining behind them, a starved replica's
// instances went unpolled for seconds after every lease loss.
TEST_F(StarvedReplicaTest, AReplicaJoinsAgainWhileTheStoresWriterLockIsHeld) {
  auto a = Replica("a", /*poll=*/false);
  ASSERT_NE(a, nullptr);
  const uint64_t changes = a->lease_changes();
  TakeLease("a");
  // Another replica appends an event while the log is locked: it holds the writer lock meanwhile.
  auto holder = d::DetectorStore::Open(dsn_);
  ASSERT_TRUE(holder.ok()) << holder.status();
  auto epoch = (*holder)->JoinLease("h", 60000);
  ASSERT_TRUE(epoch.ok()) << epoch.status();
  Sql("BEGIN");
  Sql("LOCK TABLE spotdnn_detector.events IN ACCESS EXCLUSIVE MODE");
  absl::StatusOr<bool> appended;
  std::thread append([&] {
    d::Event event;
    event.instance_id = "held";
    event.kind = d::EventKind::kNotice;
    d::StoredInstance instance;
    instance.instance.instance_id = "held";
    appended = (*holder)->AppendSharedEvent(event, 1, "k", instance, "h", *epoch);
  });
  EXPECT_TRUE(Eventually([&] {
    return Sql("SELECT count(*) FROM pg_locks WHERE locktype = 'relation' AND NOT granted") != "0";
  }));
  // The replica finds its lease gone at its next renewal, fences itself and joins again.
  EXPECT_TRUE(Advancing([&] { return a->lease_changes() >= changes + 2 && a->serving(); }))
      << "lease changes " << a->lease_changes() - changes << ", serving " << a->serving();
  Sql("COMMIT");
  append.join();
  EXPECT_TRUE(appended.ok()) << appended.status();
}

// A replica that lost its lease and joined again does not write the notices it had recorded
// again (each such write waits for the store's writer lock; on a starved host, losing the lease
// every few seconds, they crowded out the new notices). Counted by a trigger on the event log.
TEST_F(StarvedReplicaTest, AReplicaThatJoinsAgainDoesNotWriteItsRecordedNoticesAgain) {
  auto a = Replica("a", /*poll=*/true);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Register(Polled("i-1")).ok());
  emulator_->ScheduleNotice("i-1", {.cloud = d::Cloud::kAws, .effective_unix_ms = InAnHour()});
  ASSERT_TRUE(Advancing([&] { return a->last_sequence() == 1; }));
  CountAppends();

  const uint64_t changes = a->lease_changes();
  TakeLease("a");
  ASSERT_TRUE(Advancing([&] { return a->lease_changes() >= changes + 2 && a->serving(); }));
  // Polled again (a new poll target since the fence), the notice read again every round.
  const int polls = polls_.healthy();
  ASSERT_TRUE(Eventually([&] { return polls_.healthy() >= polls + 5; }, kPatience));
  EXPECT_EQ(Sql("SELECT n FROM public.append_attempts"), "0");
  EXPECT_EQ(Notices(*a, "i-1"), 1);
}

// A replica that takes an instance over (its owner left, or lapsed) does not write the notices
// the owner recorded again: it learnt their keys from the event log it reads back. On a starved
// host, where leases lapse and instances move every few seconds, each such write waited for the
// store's writer lock ahead of new notices.
TEST_F(StarvedReplicaTest, AReplicaTakingAnInstanceOverDoesNotWriteItsRecordedNoticesAgain) {
  const std::string id = OwnedBy("a", "t-");
  auto a = Replica("a", /*poll=*/true);
  auto b = Replica("b", /*poll=*/true);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_TRUE(a->Register(Polled(id)).ok());
  ASSERT_TRUE(Advancing([&] {
    return a->LiveReplicas().size() == 2 && b->LiveReplicas().size() == 2 && a->polled() == 1;
  }));
  emulator_->ScheduleNotice(id, {.cloud = d::Cloud::kAws, .effective_unix_ms = InAnHour()});
  ASSERT_TRUE(Advancing([&] { return b->last_sequence() == 1; }));
  CountAppends();

  a.reset();  // leaves its lease: b takes the instance over
  ASSERT_TRUE(Advancing([&] { return b->LiveReplicas().size() == 1 && b->polled() == 1; }));
  const int polls = polls_.healthy();
  ASSERT_TRUE(Eventually([&] { return polls_.healthy() >= polls + 5; }, kPatience));
  EXPECT_EQ(Sql("SELECT n FROM public.append_attempts"), "0");
  EXPECT_EQ(Notices(*b, id), 1);
}

// A notice whose write was refused (the replica's lease lapsed between its poll and its write) is
// recorded by that replica once it joins again, although the instance moved meanwhile to another
// live replica, one that does not poll it (as a starved one does not). It was dropped for the new
// owner to find, and the new owner never polled.
TEST_F(StarvedReplicaTest, ARefusedNoticeIsRecordedAfterItsInstanceMoved) {
  const std::string id = OwnedBy("b", "m-");
  auto a = Replica("a", /*poll=*/true);
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Register(Polled(id)).ok());
  ASSERT_TRUE(Eventually([&] { return a->Get(id)->state == d::InstanceState::kHealthy; }));
  // The lease lapses; the replica does not know yet (its clock stands still), polls on, reads the
  // notice, and the store refuses its write.
  TakeLease("a");
  const uint64_t errors = a->store_errors();
  emulator_->ScheduleNotice(id, {.cloud = d::Cloud::kAws, .effective_unix_ms = InAnHour()});
  ASSERT_TRUE(Eventually([&] { return a->store_errors() > errors; }, kPatience));
  // Replica b joins (and never polls): the ring gives it the instance. a fences itself, joins
  // again, and records the notice it read.
  ASSERT_TRUE(other_->JoinLease("b", 60000).ok());
  EXPECT_TRUE(Advancing([&] { return a->last_sequence() >= 1; }))
      << "live " << a->LiveReplicas().size() << ", serving " << a->serving() << ", polled "
      << a->polled();
  EXPECT_EQ(a->OwnerOf(id), "b");
  EXPECT_EQ(a->polled(), 0u);
  EXPECT_EQ(Notices(*a, id), 1);
}

}  // namespace
}  // namespace spotdnn::services
