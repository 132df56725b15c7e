// The detector service on 127.0.0.1:0 with the metadata emulator: registration, watch streams
// and their resume, restarts, agents (and their failover), and replicas sharing a PostgreSQL
// store (the test binary's throwaway server, tests/testing/postgres_server.h).
#include "services/detector/detector_service.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "base/clock.h"
#include "detector/hash_ring.h"
#include "detector/metadata_emulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/common/convert.h"
#include "services/common/server.h"
#include "services/detector/agent.h"
#include "tests/testing/eventually.h"
#include "tests/testing/ports.h"
#include "tests/testing/postgres_server.h"

namespace spotdnn::services {
namespace {

using ::spotdnn::testing_util::Eventually;

using ::testing::HasSubstr;
namespace d = ::spotdnn::detector;

using testing_util::FreeLoopbackPort;

// One detector replica: core, service, server and a stub to it.
struct Replica {
  std::shared_ptr<d::Detector> detector;
  std::unique_ptr<DetectorServiceImpl> service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::unique_ptr<pb::Detector::Stub> stub;

  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  void Kill() {
    if (server) server->Shutdown(std::chrono::system_clock::now());
    if (service) service->Stop();
    if (detector) detector->Shutdown();
    server.reset();
  }
  ~Replica() { Kill(); }
};

class DetectorServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto e = d::MetadataEmulator::Start({});
    ASSERT_TRUE(e.ok()) << e.status();
    emulator_ = *std::move(e);
    db_ = std::filesystem::temp_directory_path() /
          ("detector_service_test_" + std::to_string(getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db");
    RemoveDb();
  }
  void TearDown() override {
    replicas_.clear();
    emulator_->Stop();
    RemoveDb();
  }
  void RemoveDb() {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db_.string() + suffix);
  }
  d::DetectorOptions Options(const std::string& replica = "replica-0", bool persistent = false) {
    d::DetectorOptions o;
    o.poller.interval = absl::Milliseconds(100);
    o.poller.request_timeout = absl::Milliseconds(300);
    o.poller.max_backoff = absl::Milliseconds(300);
    o.poller.gce_long_poll_timeout_s = 5;
    // Agents beat every 50 ms; lost after 1 s of silence leaves room for a loaded machine.
    o.heartbeat_interval = absl::Milliseconds(200);
    o.lost_after_intervals = 5;
    o.replica_id = replica;
    if (persistent) o.db_path = db_.string();
    return o;
  }
  // Options of a replica sharing this test's PostgreSQL database.
  d::DetectorOptions Shared(const std::string& replica) {
    if (pg_spec_.empty()) {
      auto spec = testing_util::FreshStoreSpec(testing_util::StoreBackend::kPostgres, "");
      EXPECT_TRUE(spec.ok()) << spec.status();
      pg_spec_ = spec.value_or("");
    }
    d::DetectorOptions o = Options(replica);
    o.db_path = pg_spec_;
    o.lease = absl::Milliseconds(900);
    o.sync_interval = absl::Milliseconds(100);
    return o;
  }
  Replica& StartReplica(d::DetectorOptions options, int port = 0) {
    auto r = std::make_unique<Replica>();
    auto detector = d::Detector::Open(std::move(options));
    EXPECT_TRUE(detector.ok()) << detector.status();
    r->detector = *std::move(detector);
    r->service = std::make_unique<DetectorServiceImpl>(r->detector);
    auto started = StartServer("127.0.0.1:" + std::to_string(port), {r->service.get()});
    EXPECT_TRUE(started.ok()) << started.status();
    r->server = std::move(started->server);
    r->port = started->port;
    r->stub = pb::Detector::NewStub(MakeChannel(r->address()));
    replicas_.push_back(std::move(r));
    return *replicas_.back();
  }
  pb::RegisterInstanceRequest Polled(const std::string& id, pb::Cloud cloud,
                                     const std::string& job = "job") {
    pb::RegisterInstanceRequest r;
    r.mutable_instance()->set_instance_id(id);
    r.mutable_instance()->set_job_id(job);
    r.mutable_instance()->set_cloud(cloud);
    r.mutable_instance()->set_metadata_endpoint(emulator_->EndpointFor(id));
    return r;
  }
  static grpc::Status Register(Replica& r, const pb::RegisterInstanceRequest& request) {
    grpc::ClientContext c;
    pb::RegisterInstanceResponse response;
    return r.stub->RegisterInstance(&c, request, &response);
  }
  static std::vector<pb::WatchedInstance> List(Replica& r, const std::string& job = "") {
    grpc::ClientContext c;
    pb::ListInstancesRequest request;
    request.set_job_id(job);
    pb::ListInstancesResponse response;
    EXPECT_TRUE(r.stub->ListInstances(&c, request, &response).ok());
    return {response.instances().begin(), response.instances().end()};
  }
  static pb::InstanceState StateOf(Replica& r, const std::string& id) {
    for (const auto& w : List(r)) {
      if (w.instance_id() == id) return w.state();
    }
    return pb::INSTANCE_STATE_UNKNOWN;
  }
  // Reads `n` events from a WatchEvents stream that starts after `after`.
  static std::vector<pb::RevocationEvent> Watch(Replica& r, uint64_t after, size_t n,
                                                const std::string& job = "") {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::WatchEventsRequest request;
    request.set_after_sequence(after);
    request.set_job_id(job);
    auto reader = r.stub->WatchEvents(&c, request);
    std::vector<pb::RevocationEvent> out;
    pb::RevocationEvent e;
    while (out.size() < n && reader->Read(&e)) out.push_back(e);
    c.TryCancel();
    return out;
  }

  std::unique_ptr<d::MetadataEmulator> emulator_;
  std::filesystem::path db_;
  std::string pg_spec_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

TEST_F(DetectorServiceTest, RegisterListAndValidate) {
  Replica& r = StartReplica(Options());
  ASSERT_TRUE(Register(r, Polled("a", pb::CLOUD_AWS, "j1")).ok());
  ASSERT_TRUE(Register(r, Polled("g", pb::CLOUD_GCE, "j2")).ok());
  ASSERT_TRUE(Eventually([&] { return StateOf(r, "a") == pb::INSTANCE_STATE_HEALTHY; }));
  auto j2 = List(r, "j2");
  ASSERT_EQ(j2.size(), 1u);
  EXPECT_EQ(j2[0].instance_id(), "g");
  EXPECT_EQ(j2[0].replica(), "replica-0");
  auto bad = Polled("b", pb::CLOUD_AWS);
  bad.mutable_instance()->set_metadata_endpoint("not a url");
  grpc::Status s = Register(r, bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("instance.metadata_endpoint = \"not a url\""));
  grpc::ClientContext c;
  pb::UnregisterInstanceRequest u;
  u.set_instance_id("nope");
  pb::UnregisterInstanceResponse ur;
  s = r.stub->UnregisterInstance(&c, u, &ur);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("instance_id = \"nope\""));
}

TEST_F(DetectorServiceTest, UnreachableMetadataIsUnknownWithReason) {
  Replica& r = StartReplica(Options());
  auto req = Polled("down", pb::CLOUD_AZURE);
  req.mutable_instance()->set_metadata_endpoint("http://127.0.0.1:" +
                                                std::to_string(FreeLoopbackPort()));
  ASSERT_TRUE(Register(r, req).ok());
  ASSERT_TRUE(Eventually([&] {
    auto l = List(r);
    return l.size() == 1 && l[0].reason().find("connect") != std::string::npos;
  }));
  EXPECT_EQ(StateOf(r, "down"), pb::INSTANCE_STATE_UNKNOWN);
}

TEST_F(DetectorServiceTest, WatchResumesAfterReconnectMissingNothing) {
  Replica& r = StartReplica(Options());
  for (const char* id : {"a", "b", "c", "d"})
    ASSERT_TRUE(Register(r, Polled(id, pb::CLOUD_AWS)).ok());
  emulator_->ScheduleNotice("a", {.cloud = d::Cloud::kAws, .action = "stop"});
  auto first = Watch(r, 0, 1);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].instance_id(), "a");
  EXPECT_EQ(first[0].kind(), pb::RevocationEvent::KIND_NOTICE);
  EXPECT_EQ(first[0].action(), "stop");
  EXPECT_GT(first[0].effective_unix_ms(), first[0].notice_unix_ms());
  // The subscriber is gone while three more notices happen.
  for (const char* id : {"b", "c", "d"}) emulator_->ScheduleNotice(id, {.cloud = d::Cloud::kAws});
  ASSERT_TRUE(Eventually([&] { return r.detector->last_sequence() == 4; }));
  // The first subscriber's call ended on the server too.
  ASSERT_TRUE(Eventually([&] { return r.service->open_streams() == 0; }));
  auto resumed = Watch(r, first[0].sequence(), 3);
  ASSERT_EQ(resumed.size(), 3u);
  std::set<std::string> ids;
  uint64_t previous = first[0].sequence();
  for (const auto& e : resumed) {
    EXPECT_EQ(e.sequence(), previous + 1);
    previous = e.sequence();
    ids.insert(e.instance_id());
  }
  EXPECT_EQ(ids, (std::set<std::string>{"b", "c", "d"}));
  // Nothing beyond: a fresh stream from the last sequence gets no extra event.
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(400));
  pb::WatchEventsRequest request;
  request.set_after_sequence(previous);
  auto reader = r.stub->WatchEvents(&c, request);
  pb::RevocationEvent extra;
  EXPECT_FALSE(reader->Read(&extra));
}

TEST_F(DetectorServiceTest, WatchPastTheNewestEventIsOutOfRange) {
  Replica& r = StartReplica(Options());
  ASSERT_TRUE(Register(r, Polled("a", pb::CLOUD_AWS)).ok());
  emulator_->ScheduleNotice("a", {.cloud = d::Cloud::kAws});
  ASSERT_TRUE(Eventually([&] { return r.detector->last_sequence() == 1; }));
  // A subscriber resuming after 50 (its detector's log was wiped, or it moved replica): told at
  // once, rather than left waiting while events 2..50 go by unseen.
  grpc::ClientContext c;
  c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  pb::WatchEventsRequest request;
  request.set_after_sequence(50);
  auto reader = r.stub->WatchEvents(&c, request);
  pb::RevocationEvent e;
  EXPECT_FALSE(reader->Read(&e));
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::OUT_OF_RANGE) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("after_sequence = 50"));
  EXPECT_THAT(s.error_message(), HasSubstr("newest event, 1"));
  // At the newest event the stream opens, and says so before any event arrives.
  grpc::ClientContext ok;
  ok.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  request.set_after_sequence(1);
  auto open = r.stub->WatchEvents(&ok, request);
  open->WaitForInitialMetadata();
  const auto& metadata = ok.GetServerInitialMetadata();
  auto header =
      metadata.find(grpc::string_ref(kWatchOpenedHeader.data(), kWatchOpenedHeader.size()));
  ASSERT_NE(header, metadata.end());
  EXPECT_EQ(std::string(header->second.data(), header->second.size()), "1");
  EXPECT_FALSE(open->Read(&e));
  EXPECT_EQ(open->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

TEST_F(DetectorServiceTest, RevokedInstanceRegisteredAgainIsWatchedAgain) {
  Replica& r = StartReplica(Options());
  ASSERT_TRUE(Register(r, Polled("a", pb::CLOUD_AWS)).ok());
  ASSERT_TRUE(Eventually([&] { return StateOf(r, "a") == pb::INSTANCE_STATE_HEALTHY; }));
  const int64_t effective = (base::RealClock::Get().NowUnixMs() / 1000 + 2) * 1000;
  emulator_->ScheduleNotice(
      "a", {.cloud = d::Cloud::kAws, .action = "stop", .effective_unix_ms = effective});
  ASSERT_TRUE(Eventually([&] { return StateOf(r, "a") == pb::INSTANCE_STATE_REVOKED; }));
  // A registration of the healthy instance repeated meanwhile changes nothing...
  ASSERT_TRUE(Register(r, Polled("b", pb::CLOUD_AWS)).ok());
  ASSERT_TRUE(Eventually([&] { return StateOf(r, "b") == pb::INSTANCE_STATE_HEALTHY; }));
  ASSERT_TRUE(Register(r, Polled("b", pb::CLOUD_AWS)).ok());
  EXPECT_EQ(StateOf(r, "b"), pb::INSTANCE_STATE_HEALTHY);
  // ...but "a" started again under its id and registered again is watched again.
  emulator_->ClearNotices("a");
  ASSERT_TRUE(Register(r, Polled("a", pb::CLOUD_AWS)).ok());
  emulator_->ScheduleNotice("a", {.cloud = d::Cloud::kAws, .action = "terminate"});
  auto events = Watch(r, 2, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].instance_id(), "a");
  EXPECT_EQ(events[0].kind(), pb::RevocationEvent::KIND_NOTICE);
  EXPECT_EQ(events[0].action(), "terminate");
}

TEST_F(DetectorServiceTest, WatchFiltersByJob) {
  Replica& r = StartReplica(Options());
  ASSERT_TRUE(Register(r, Polled("x", pb::CLOUD_GCE, "other")).ok());
  ASSERT_TRUE(Register(r, Polled("y", pb::CLOUD_GCE, "mine")).ok());
  emulator_->ScheduleNotice("x", {.cloud = d::Cloud::kGce});
  ASSERT_TRUE(Eventually([&] { return r.detector->last_sequence() == 1; }));
  emulator_->ScheduleNotice("y", {.cloud = d::Cloud::kGce});
  auto mine = Watch(r, 0, 1, "mine");
  ASSERT_EQ(mine.size(), 1u);
  EXPECT_EQ(mine[0].instance_id(), "y");
  EXPECT_EQ(mine[0].cloud(), pb::CLOUD_GCE);
}

TEST_F(DetectorServiceTest, RestartedDetectorLosesNothing) {
  uint64_t sequence = 0;
  {
    Replica& r = StartReplica(Options("replica-0", true));
    ASSERT_TRUE(Register(r, Polled("a", pb::CLOUD_AZURE)).ok());
    ASSERT_TRUE(Register(r, Polled("b", pb::CLOUD_AZURE)).ok());
    emulator_->ScheduleNotice("a", {.cloud = d::Cloud::kAzure});
    auto e = Watch(r, 0, 1);
    ASSERT_EQ(e.size(), 1u);
    sequence = e[0].sequence();
    replicas_.clear();
  }
  // While it is down, b gets a notice.
  emulator_->ScheduleNotice("b", {.cloud = d::Cloud::kAzure});
  Replica& r = StartReplica(Options("replica-0", true));
  EXPECT_EQ(List(r).size(), 2u);
  auto all = Watch(r, 0, 2);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].sequence(), sequence);
  EXPECT_EQ(all[0].instance_id(), "a");
  EXPECT_EQ(all[1].instance_id(), "b");
  EXPECT_EQ(all[1].sequence(), sequence + 1);
  EXPECT_EQ(StateOf(r, "a"), pb::INSTANCE_STATE_NOTICE);
}

AgentOptions AgentFor(const std::string& id, d::Cloud cloud, const std::string& endpoint,
                      std::vector<std::string> detectors) {
  AgentOptions o;
  o.detectors = std::move(detectors);
  o.instance_id = id;
  o.job_id = "job";
  o.cloud = cloud;
  o.metadata_endpoint = endpoint;
  o.heartbeat_interval = absl::Milliseconds(50);
  o.reconnect_backoff = absl::Milliseconds(50);
  o.poller.interval = absl::Milliseconds(100);
  o.poller.request_timeout = absl::Milliseconds(300);
  o.poller.max_backoff = absl::Milliseconds(300);
  o.poller.gce_long_poll_timeout_s = 5;
  return o;
}

TEST_F(DetectorServiceTest, AgentStreamsNoticesAndHeartbeatLossIsLost) {
  Replica& r = StartReplica(Options());
  Agent agent(AgentFor("i-1", d::Cloud::kGce, emulator_->EndpointFor("i-1"), {r.address()}));
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(Eventually([&] { return StateOf(r, "i-1") == pb::INSTANCE_STATE_HEALTHY; }));
  emulator_->ScheduleNotice("i-1", {.cloud = d::Cloud::kGce});
  auto events = Watch(r, 0, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].instance_id(), "i-1");
  EXPECT_EQ(events[0].kind(), pb::RevocationEvent::KIND_NOTICE);
  EXPECT_EQ(events[0].action(), "preempt");
  EXPECT_EQ(agent.replica(), "replica-0");
  // The agent (and so its heartbeats) stops: the instance is lost.
  agent.Stop();
  EXPECT_TRUE(Eventually([&] { return r.service->open_streams() == 0; }));
  auto lost = Watch(r, events[0].sequence(), 1);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].kind(), pb::RevocationEvent::KIND_LOST);
  EXPECT_EQ(StateOf(r, "i-1"), pb::INSTANCE_STATE_LOST);
}

// A command that ends at the notice's signal ends the agent right away: a notice read just then
// still reaches the detector (Flush), rather than being dropped with the stream.
TEST_F(DetectorServiceTest, AgentStoppedRightAfterANoticeStillDeliversIt) {
  Replica& r = StartReplica(Options());
  std::promise<void> noticed;
  AgentOptions o = AgentFor("i-4", d::Cloud::kAws, emulator_->EndpointFor("i-4"), {r.address()});
  o.on_notice = [&noticed](const d::Notice&) { noticed.set_value(); };
  Agent agent(o);
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(Eventually([&] { return StateOf(r, "i-4") == pb::INSTANCE_STATE_HEALTHY; }));
  emulator_->ScheduleNotice("i-4", {.cloud = d::Cloud::kAws});
  ASSERT_EQ(noticed.get_future().wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_TRUE(agent.Flush(absl::Seconds(10)));
  agent.Stop();
  auto events = Watch(r, 0, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].instance_id(), "i-4");
  EXPECT_EQ(events[0].kind(), pb::RevocationEvent::KIND_NOTICE);
}

TEST_F(DetectorServiceTest, AgentReportsMetadataProblemsAsUnknown) {
  Replica& r = StartReplica(Options());
  emulator_->SetFault("i-2", d::EmulatorFault::kServerError);
  Agent agent(AgentFor("i-2", d::Cloud::kAws, emulator_->EndpointFor("i-2"), {r.address()}));
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(Eventually([&] {
    auto l = List(r);
    return l.size() == 1 && l[0].reason().find("HTTP 500") != std::string::npos;
  }));
  EXPECT_EQ(StateOf(r, "i-2"), pb::INSTANCE_STATE_UNKNOWN);
  EXPECT_EQ(r.detector->last_sequence(), 0u);  // no event from a fault
}

TEST_F(DetectorServiceTest, AgentFailsOverToTheNextReplica) {
  Replica& a = StartReplica(Options("a"));
  Replica& b = StartReplica(Options("b"));
  Agent agent(
      AgentFor("i-3", d::Cloud::kAws, emulator_->EndpointFor("i-3"), {a.address(), b.address()}));
  ASSERT_TRUE(agent.Start().ok());
  ASSERT_TRUE(Eventually([&] { return agent.replica() == "a"; }));
  a.Kill();
  ASSERT_TRUE(Eventually([&] { return agent.replica() == "b"; }));
  emulator_->ScheduleNotice("i-3", {.cloud = d::Cloud::kAws});
  auto events = Watch(b, 0, 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].instance_id(), "i-3");
}

TEST_F(DetectorServiceTest, ReplicasOnPostgresShareRegistrationsAndTakeOver) {
  Replica& a = StartReplica(Shared("a"));
  Replica& b = StartReplica(Shared("b"));
  ASSERT_TRUE(Eventually([&] { return a.service->LiveReplicas().size() == 2; }));
  for (int i = 0; i < 12; ++i) {
    ASSERT_TRUE(Register(a, Polled("s" + std::to_string(i), pb::CLOUD_AWS)).ok());
  }
  // Both read the registry back and share the polling, each instance polled by one.
  ASSERT_TRUE(Eventually([&] { return List(b).size() == 12u; }));
  ASSERT_TRUE(Eventually([&] {
    return a.detector->polled() + b.detector->polled() == 12u && b.detector->polled() > 0;
  }));
  for (const auto& w : List(b)) EXPECT_TRUE(w.replica() == "a" || w.replica() == "b");
  // A replica that stops leaves its lease: the other takes every instance.
  b.Kill();
  ASSERT_TRUE(Eventually([&] { return a.detector->polled() == 12u; }));
  EXPECT_EQ(a.service->LiveReplicas(), std::vector<std::string>{"a"});
  for (const auto& w : List(a)) EXPECT_EQ(w.replica(), "a");
  // Unregistered through a: gone from a's list.
  grpc::ClientContext c;
  pb::UnregisterInstanceRequest request;
  request.set_instance_id("s0");
  pb::UnregisterInstanceResponse response;
  ASSERT_TRUE(a.stub->UnregisterInstance(&c, request, &response).ok());
  EXPECT_EQ(List(a).size(), 11u);
}

TEST_F(DetectorServiceTest, ReplicasOnPostgresStreamOneLogAndRecordANoticeOnce) {
  Replica& a = StartReplica(Shared("a"));
  Replica& b = StartReplica(Shared("b"));
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(Register(a, Polled("n" + std::to_string(i), pb::CLOUD_AWS)).ok());
    emulator_->ScheduleNotice("n" + std::to_string(i), {.cloud = d::Cloud::kAws});
  }
  // The same notice reported by agents to both replicas, twice each: one event.
  const d::Notice notice{.kind = d::EventKind::kNotice, .action = "terminate", .key = "agent-k"};
  for (int round = 0; round < 2; ++round) {
    EXPECT_TRUE(a.detector->ReportNotice("m-1", "job", d::Cloud::kAws, notice, 0).ok());
    EXPECT_TRUE(b.detector->ReportNotice("m-1", "job", d::Cloud::kAws, notice, 0).ok());
  }
  // Every replica streams the same log: each notice once, in one order.
  const auto from_a = Watch(a, 0, 5);
  const auto from_b = Watch(b, 0, 5);
  ASSERT_EQ(from_a.size(), 5u);
  ASSERT_EQ(from_b.size(), 5u);
  std::set<std::string> instances;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(from_a[i].sequence(), from_b[i].sequence());
    EXPECT_EQ(from_a[i].instance_id(), from_b[i].instance_id());
    EXPECT_EQ(from_a[i].kind(), pb::RevocationEvent::KIND_NOTICE);
    if (i > 0) {
      EXPECT_GT(from_a[i].sequence(), from_a[i - 1].sequence());
    }
    instances.insert(from_a[i].instance_id());
  }
  EXPECT_EQ(instances.size(), 5u);
  // A subscriber that moves replica resumes after the sequence the other gave it.
  const auto resumed = Watch(b, from_a[2].sequence(), 2);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed[0].sequence(), from_a[3].sequence());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // polls go on: nothing again
  const auto later = a.detector->EventsAfter(from_a[4].sequence(), "", 100);
  for (const d::Event& e : *later) {
    EXPECT_NE(e.kind, d::EventKind::kNotice) << e.instance_id;  // m-1 goes lost, no more
  }
}

TEST_F(DetectorServiceTest, RestartedReplicaDoesNotReportARevokedInstanceAgain) {
  // An instance that replica a holds while both are up.
  d::HashRing ring({"a", "b"});
  std::string id;
  for (int i = 0; id.empty(); ++i) {
    if (ring.Owner("x" + std::to_string(i)) == "a") id = "x" + std::to_string(i);
  }
  Replica& a = StartReplica(Shared("a"));
  Replica* b = &StartReplica(Shared("b"));
  ASSERT_TRUE(Eventually([&] { return a.service->LiveReplicas().size() == 2; }));
  ASSERT_TRUE(Register(*b, Polled(id, pb::CLOUD_AWS)).ok());
  const int64_t effective = (base::RealClock::Get().NowUnixMs() / 1000 + 2) * 1000;
  emulator_->ScheduleNotice(id, {.cloud = d::Cloud::kAws, .effective_unix_ms = effective});
  ASSERT_TRUE(Eventually([&] { return StateOf(a, id) == pb::INSTANCE_STATE_REVOKED; }));
  ASSERT_TRUE(Eventually([&] { return a.detector->last_sequence() >= 2u; }));
  const uint64_t last = a.detector->last_sequence();
  // b restarts; the notice is still visible; a restart of a would change nothing either.
  b->Kill();
  b = &StartReplica(Shared("b"));
  ASSERT_TRUE(Eventually([&] { return a.service->LiveReplicas().size() == 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // many polls and syncs
  EXPECT_EQ(StateOf(*b, id), pb::INSTANCE_STATE_REVOKED);
  EXPECT_EQ(a.detector->last_sequence(), last);  // notice, revoked: nothing reported again
  EXPECT_EQ(b->detector->EventsAfter(0, "", 10)->size(), 2u);
}

TEST_F(DetectorServiceTest, AReplicaWhoseLeaseIsTakenStopsPollingAndJoinsAgain) {
  Replica& a = StartReplica(Shared("a"));
  ASSERT_TRUE(Register(a, Polled("f0", pb::CLOUD_AWS)).ok());
  ASSERT_TRUE(Eventually([&] { return a.detector->polled() == 1u; }));
  EXPECT_EQ(a.detector->lease_changes(), 1u);
  // Another process joins as "a" (what a replica paused past its lease meets when it resumes):
  // a's renewal fails, it is fenced (lease lost) and joins again with a newer epoch.
  auto other = d::DetectorStore::Open(pg_spec_);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE((*other)->JoinLease("a", 60000).ok());
  ASSERT_TRUE(Eventually([&] { return a.detector->lease_changes() >= 3u; }));
  ASSERT_TRUE(Eventually([&] { return a.detector->polled() == 1u && a.detector->serving(); }));
  // Still one event per notice.
  emulator_->ScheduleNotice("f0", {.cloud = d::Cloud::kAws});
  ASSERT_EQ(Watch(a, 0, 1).size(), 1u);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(a.detector->EventsAfter(0, "", 10)->size(), 1u);
}

}  // namespace
}  // namespace spotdnn::services
