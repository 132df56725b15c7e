// The job controller in simulated time: a fake clock, a fake cloud, a fake revocation feed and
// the generated gRPC mocks of the provisioner, profiler and detector. Finish, takeover, capacity
// re-plan, stall and resume, each in milliseconds.
#include "services/gateway/job/job_controller.h"

#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "grpcpp/test/mock_stream.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/common/data_registry.h"
#include "spotdnn/v1/detector_mock.grpc.pb.h"
#include "spotdnn/v1/profiler_mock.grpc.pb.h"
#include "spotdnn/v1/provisioner_mock.grpc.pb.h"

namespace spotdnn::job {
namespace {

namespace fs = std::filesystem;
using ::testing::_;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Invoke;
using ::testing::Not;
using ::testing::Return;

// Time that passes only when the controller sleeps; actions scheduled at a time run when it
// comes.
class FakeClock final : public base::FakeClock {
 public:
  FakeClock() : base::FakeClock(absl::FromUnixSeconds(1'800'000'000)) {}
  void Sleep(absl::Duration d) override {
    base::FakeClock::Sleep(d);
    while (!actions_.empty() && actions_.begin()->first <= Now()) {
      auto action = actions_.begin()->second;
      actions_.erase(actions_.begin());
      action();
    }
  }
  // Runs `action` once the clock reaches `start` + `after`.
  void At(absl::Duration after, std::function<void()> action) {
    actions_.emplace(start_ + after, std::move(action));
  }
  double Elapsed() { return absl::ToDoubleSeconds(Now() - start_); }

 private:
  const absl::Time start_ = absl::FromUnixSeconds(1'800'000'000);
  std::multimap<absl::Time, std::function<void()>> actions_;
};

// A cloud in memory: launches deduplicated by client token, capacity per type, instances that end
// when told.
class FakeCloud final : public launcher::CloudProvider {
 public:
  explicit FakeCloud(FakeClock& clock) : clock_(clock) {}
  std::string name() const override { return "fake"; }
  std::vector<std::string> ZonesFor(const std::string& type) const override {
    auto it = zones_for.find(type);
    return it == zones_for.end() ? std::vector<std::string>{} : it->second;
  }
  bool SharesFilesWithCaller() const override { return shares_files; }
  absl::StatusOr<std::map<std::string, int>> SpotPlacementScores(const std::string& type,
                                                                 int count) override {
    score_asks.emplace_back(type, count);
    if (!scores_error.ok()) return scores_error;
    return placement_scores;
  }
  absl::StatusOr<launcher::LaunchResult> Launch(const launcher::LaunchRequest& r) override {
    ++launch_calls[r.client_token];
    launcher::LaunchResult result{.requested = r.count};
    for (const launcher::Instance& i : instances_) {
      if (tokens_[i.id] == r.client_token) result.instances.push_back(i);
    }
    if (!result.instances.empty()) return result;
    launch_zones.push_back(r.zones);
    // Zones, when the request names them: the first with spot capacity for all of it.
    std::string zone;
    for (const std::string& z : r.zones) {
      auto cap = zone_capacity.find(z);
      if (r.market == launcher::Market::kSpot && cap != zone_capacity.end() &&
          cap->second < r.count) {
        continue;
      }
      zone = z;
      break;
    }
    if (!r.zones.empty() && zone.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("fake: no capacity for ", r.instance_type, " in any zone"));
    }
    int fits = r.count;
    // Capacity limits spot only, as a cloud's spare capacity does.
    if (auto cap = capacity.find(r.instance_type);
        cap != capacity.end() && r.market == launcher::Market::kSpot) {
      fits = std::min(fits, cap->second);
      if (fits < r.count) {
        result.error =
            absl::ResourceExhaustedError(absl::StrCat("fake: no capacity for ", r.instance_type));
      }
      if (fits == 0) return result.error;
    }
    for (int k = 0; k < fits; ++k) {
      launcher::Instance i{.id = absl::StrCat("i-", ++next_),
                           .instance_type = r.instance_type,
                           .state = launcher::InstanceState::kRunning,
                           .job_id = r.job_id,
                           .role = r.role,
                           .index = r.first_index + k,
                           .private_address = absl::StrCat("10.0.0.", next_),
                           .metadata_cloud = "gce",
                           .launch_time = clock_.Now(),
                           .market = r.market,
                           .zone = zone};
      tokens_[i.id] = r.client_token;
      instances_.push_back(i);
      result.instances.push_back(i);
      last_env[i.id] = r.extra_env;
      ps_addresses[i.id] = r.ps_addresses;
    }
    return result;
  }
  absl::StatusOr<std::vector<launcher::Instance>> Describe(const std::string& job) override {
    std::vector<launcher::Instance> out;
    for (const launcher::Instance& i : instances_) {
      if (i.job_id == job) out.push_back(i);
    }
    return out;
  }
  absl::Status Terminate(const std::vector<std::string>& ids) override {
    for (const std::string& id : ids) End(id);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<launcher::SpotPrice>> SpotPrices(const std::vector<std::string>&,
                                                              const std::string&) override {
    return absl::UnimplementedError("fake");
  }
  // Stops an instance now (a revocation's end, or a terminate).
  void End(const std::string& id) {
    for (launcher::Instance& i : instances_) {
      if (i.id == id && i.state == launcher::InstanceState::kRunning) {
        i.state = launcher::InstanceState::kTerminated;
        i.end_time = clock_.Now();
      }
    }
  }
  // Ends an instance as its command did by itself (status, last lines), not as a revocation.
  void Exit(const std::string& id, launcher::CommandEnd end) {
    for (launcher::Instance& i : instances_) {
      if (i.id == id && i.state == launcher::InstanceState::kRunning) {
        i.state = launcher::InstanceState::kTerminated;
        i.end_time = clock_.Now();
        i.command_end = end;
      }
    }
  }
  std::vector<launcher::Instance> Running() const {
    std::vector<launcher::Instance> out;
    for (const launcher::Instance& i : instances_) {
      if (i.state == launcher::InstanceState::kRunning) out.push_back(i);
    }
    return out;
  }
  int Launched() const { return static_cast<int>(instances_.size()); }

  std::map<std::string, int> capacity;
  std::map<std::string, std::vector<std::string>> zones_for;  // offered zones per type
  std::map<std::string, int> zone_capacity;             // spot capacity per zone (absent: any)
  std::vector<std::vector<std::string>> launch_zones;   // each launch's zones to try
  std::map<std::string, int> placement_scores;          // what SpotPlacementScores answers
  absl::Status scores_error;                            // ... or this failure
  std::vector<std::pair<std::string, int>> score_asks;  // (type, count) of each question
  bool shares_files = false;
  std::map<std::string, int> launch_calls;  // by client token
  std::map<std::string, std::map<std::string, std::string>> last_env;
  std::map<std::string, std::vector<std::string>> ps_addresses;

 private:
  FakeClock& clock_;
  std::vector<launcher::Instance> instances_;
  std::map<std::string, std::string> tokens_;
  int next_ = 0;
};

// Revocation events the test pushes.
class FakeFeed final : public RevocationFeed {
 public:
  explicit FakeFeed(std::deque<FeedItem>& items) : items_(items) {}
  std::vector<FeedItem> Drain() override {
    std::vector<FeedItem> out(items_.begin(), items_.end());
    items_.clear();
    return out;
  }

 private:
  std::deque<FeedItem>& items_;
};

pb::InstanceCount* Add(pb::Cluster* cluster, const std::string& type, int n) {
  pb::InstanceCount* c = cluster->add_instances();
  c->set_instance_type(type);
  c->set_count(n);
  return c;
}

void AddWorker(pb::Prediction* p, const std::string& type, int n, double iteration_s) {
  pb::WorkerPrediction* w = p->add_workers();
  w->set_instance_type(type);
  w->set_count(n);
  w->set_batch_size(64);
  w->set_iteration_time_s(iteration_s);
}

constexpr char kSpec[] = R"({
  "name": "job-x",
  "workload": "resnet110",
  "slo": {"loss": 2.6, "deadline": 600},
  "catalog": "aws-spotdnn-prototype",
  "commands": {"worker": "train", "parameter_server": "serve"}
})";

class JobControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("spotdnn-controller-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    store_ = *JobStore::Open((dir_ / "jobs.db").string());
    // The plan: 2 x p2.xlarge and 1 x g3.8xlarge, 100 iterations in a predicted 10 s.
    ON_CALL(provisioner_, Plan(_, _, _))
        .WillByDefault([](grpc::ClientContext*, const pb::PlanRequest&, pb::PlanResponse* out) {
          pb::Plan* plan = out->mutable_plan();
          plan->set_feasible(true);
          Add(plan->mutable_cluster(), "p2.xlarge", 2);
          Add(plan->mutable_cluster(), "g3.8xlarge", 1);
          plan->mutable_prediction()->set_normalized_iterations(100);
          AddWorker(plan->mutable_prediction(), "p2.xlarge", 2, 0.5);
          AddWorker(plan->mutable_prediction(), "g3.8xlarge", 1, 0.25);
          plan->set_time_s(10);
          plan->set_cost_usd(0.1);
          return grpc::Status::OK;
        });
    // A re-plan launches one p2.xlarge for the rest: 50 more iterations.
    ON_CALL(provisioner_, Replan(_, _, _))
        .WillByDefault(
            [this](grpc::ClientContext*, const pb::ReplanRequest& r, pb::ReplanResponse* out) {
              replans_.push_back(r);
              pb::Plan* plan = out->mutable_plan();
              plan->set_feasible(true);
              Add(plan->mutable_to_launch(), "p2.xlarge", 1);
              *plan->mutable_cluster() = r.survivors();
              plan->mutable_prediction()->set_normalized_iterations(50);
              AddWorker(plan->mutable_prediction(), "p2.xlarge", 1, 0.4);
              plan->set_time_s(8);
              return grpc::Status::OK;
            });
    // The profiler stores no profile: the job's workload is the built-in one it names.
    ON_CALL(profiler_, GetProfile(_, _, _))
        .WillByDefault(Return(grpc::Status(grpc::StatusCode::NOT_FOUND, "no stored profile")));
    // Progress: the workers report `rate_` steps per simulated second once launched.
    ON_CALL(profiler_, GetJobProgress(_, _, _))
        .WillByDefault([this](grpc::ClientContext*, const pb::GetJobProgressRequest&,
                              pb::GetJobProgressResponse* out) {
          if (!profiler_up_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
          double rate = rate_;
          if (rate_per_worker_ > 0) {
            rate = 0;
            for (const launcher::Instance& i : cloud_.Running()) {
              if (i.role == launcher::Role::kWorker) rate += rate_per_worker_;
            }
          }
          steps_ += rate * absl::ToDoubleSeconds(clock_.Now() - last_progress_);
          last_progress_ = clock_.Now();
          out->set_total_steps(static_cast<int64_t>(steps_));
          for (const launcher::Instance& i : cloud_.Running()) {
            if (i.role != launcher::Role::kWorker) continue;
            pb::WorkerProgress* w = out->add_workers();
            w->set_worker_id(i.id);
            w->set_steps(1);
            if (flat_loss_ > 0) {
              w->set_last_loss(flat_loss_);
            } else if (loss_) {
              w->set_last_loss(loss_(steps_ - rewound_));
            }
          }
          return grpc::Status::OK;
        });
    ON_CALL(detector_, RegisterInstance(_, _, _))
        .WillByDefault([this](grpc::ClientContext*, const pb::RegisterInstanceRequest& r,
                              pb::RegisterInstanceResponse*) {
          registered_.push_back(r.instance());
          return grpc::Status::OK;
        });
    ON_CALL(detector_, UnregisterInstance(_, _, _))
        .WillByDefault([this](grpc::ClientContext*, const pb::UnregisterInstanceRequest& r,
                              pb::UnregisterInstanceResponse*) {
          unregistered_.insert(r.instance_id());
          return grpc::Status::OK;
        });
  }
  void TearDown() override {
    store_.reset();
    fs::remove_all(dir_);
  }

  JobController Controller(GuardOptions guard = {}) {
    return JobController({.provisioner = &provisioner_client_,
                          .profiler = &profiler_client_,
                          .detector = &detector_client_,
                          .provider = &cloud_,
                          .store = store_.get(),
                          .clock = &clock_,
                          .open_feed =
                              [this](const std::string&, uint64_t after) {
                                feed_opened_after_.push_back(after);
                                return std::make_unique<FakeFeed>(feed_);
                              }},
                         {.profiler_address = "profiler:1",
                          .detector_address = "detector:2",
                          .stall_timeout = absl::Seconds(60),
                          .guard = guard},
                         [this](const JobEvent& e) {
                           events_.push_back(e);
                           if (on_event_) on_event_(e);
                         });
  }

  // What a controller of this fixture runs against: the fakes, and a plain revocation feed.
  JobServices Services() {
    return {.provisioner = &provisioner_client_,
            .profiler = &profiler_client_,
            .detector = &detector_client_,
            .provider = &cloud_,
            .store = store_.get(),
            .clock = &clock_,
            .open_feed = [this](const std::string&, uint64_t) {
              return std::make_unique<FakeFeed>(feed_);
            }};
  }

  // A controller that reads parameter servers' checkpoints under `root` (the cloud shares files).
  JobController CheckpointingController(const fs::path& root) {
    return JobController(Services(),
                         {.stall_timeout = absl::Seconds(60), .checkpoint_root = root.string()},
                         [this](const JobEvent& e) { events_.push_back(e); });
  }

  // Plans and runs the job to its end.
  absl::StatusOr<JobOutcome> PlanAndRun(JobController& controller, const char* spec = kSpec) {
    auto planned = controller.Plan(spec, services::DataRegistry::WithBuiltins());
    if (!planned.ok()) return planned.status();
    last_progress_ = clock_.Now();
    return controller.Run("job-x");
  }

  // A detector notice for instance `id`, effective `in` from now.
  void Notice(const std::string& id, absl::Duration in) {
    pb::RevocationEvent e;
    e.set_sequence(++sequence_);
    e.set_instance_id(id);
    e.set_job_id("job-x");
    e.set_kind(pb::RevocationEvent::KIND_NOTICE);
    e.set_action("instance-action");
    e.set_notice_unix_ms(absl::ToUnixMillis(clock_.Now()));
    e.set_effective_unix_ms(absl::ToUnixMillis(clock_.Now() + in));
    feed_.push_back(e);
  }

  std::string WorkerOf(const std::string& type) {
    for (const launcher::Instance& i : cloud_.Running()) {
      if (i.role == launcher::Role::kWorker && i.instance_type == type) return i.id;
    }
    return "";
  }

  template <typename E>
  int Count() const {
    int n = 0;
    for (const JobEvent& e : events_) n += std::holds_alternative<E>(e.what);
    return n;
  }

  std::vector<std::string> LogKinds() {
    std::vector<std::string> kinds;
    auto events = store_->Events("job-x");
    EXPECT_TRUE(events.ok());
    for (const JobEventRecord& e : *events) kinds.push_back(e.kind);
    return kinds;
  }

  // The job's event log, a line an event, for failure messages.
  // Runs the job to its end and returns the zones its first launch in us-east-1a's zones tried.
  std::vector<std::string> FirstZonedLaunchOfAFinishedJob() {
    JobController controller = Controller();
    auto outcome = PlanAndRun(controller);
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    if (outcome.ok()) {
      EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
    }
    for (const std::vector<std::string>& zones : cloud_.launch_zones) {
      if (absl::c_linear_search(zones, "us-east-1a")) return zones;
    }
    ADD_FAILURE() << "no launch tried us-east-1a";
    return {};
  }

  std::string LogText() {
    std::string text;
    auto events = store_->Events("job-x");
    if (!events.ok()) return text;
    for (const JobEventRecord& e : *events) {
      absl::StrAppend(&text, e.at_ms, " ", e.kind, ": ", e.detail.substr(0, 300), "\n");
    }
    return text;
  }

  fs::path dir_;
  FakeClock clock_;
  FakeCloud cloud_{clock_};
  std::unique_ptr<JobStore> store_;
  ::testing::NiceMock<pb::MockProvisionerStub> provisioner_;
  ::testing::NiceMock<pb::MockProfilerStub> profiler_;
  ::testing::NiceMock<pb::MockDetectorStub> detector_;
  clients::ProvisionerClient provisioner_client_{provisioner_};
  clients::ProfilerClient profiler_client_{profiler_, {.sleep = [](absl::Duration) {}}};
  clients::DetectorClient detector_client_{detector_};
  std::deque<FeedItem> feed_;
  std::function<void(const JobEvent&)> on_event_;  // called with each event after it is kept
  std::vector<uint64_t> feed_opened_after_;
  std::vector<JobEvent> events_;
  std::vector<pb::ReplanRequest> replans_;
  std::vector<pb::WatchedInstance> registered_;
  std::set<std::string> unregistered_;
  double rate_ = 10;  // steps per simulated second
  // When > 0: steps per simulated second per running worker (instead of rate_).
  double rate_per_worker_ = 0;
  // When > 0: the loss every worker reports (a parameter server gone quiet: the loss stands still).
  double flat_loss_ = 0;
  // Steps a parameter-server restore undid: the loss follows the curve at steps_ - rewound_.
  double rewound_ = 0;
  // The workers' reported loss after this many iterations; none when unset (like the simulator).
  std::function<double(double)> loss_;
  double steps_ = 0;
  absl::Time last_progress_;
  bool profiler_up_ = true;
  uint64_t sequence_ = 0;
};

TEST_F(JobControllerTest, RunsToTheTargetAndCleansUp) {
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  EXPECT_GE(outcome->record.iterations_done, 100);
  EXPECT_NEAR(clock_.Elapsed(), 10, 0.6);  // 100 iterations at 10 a second
  const JobSummary& s = outcome->summary;
  // Workers that report a loss only when loss_ is set: reached and met only if measured.
  EXPECT_NE(s.slo_met, false);
  EXPECT_EQ(s.instances_launched, 4);  // 1 parameter server, 3 workers
  EXPECT_NEAR(s.actual_time_s, clock_.Elapsed(), 1e-9);
  EXPECT_EQ(s.first_plan_iterations, 100);
  // Parameter servers first, their address to the workers; every instance registered with its
  // cloud and unregistered at the end; nothing left running.
  ASSERT_EQ(registered_.size(), 4u);
  EXPECT_EQ(registered_[0].cloud(), pb::CLOUD_GCE);
  EXPECT_EQ(unregistered_.size(), 4u);
  EXPECT_TRUE(cloud_.Running().empty());
  const std::string worker = registered_[1].instance_id();
  ASSERT_EQ(cloud_.ps_addresses[worker].size(), 1u);
  EXPECT_EQ(cloud_.ps_addresses[worker][0], "10.0.0.1:2222");
  EXPECT_EQ(cloud_.last_env[worker]["SPOTDNN_PROFILER"], "profiler:1");
  EXPECT_EQ(cloud_.launch_calls.count("job-x-ps"), 1u);
  EXPECT_EQ(cloud_.launch_calls.count("job-x-w-p2.xlarge"), 1u);
  EXPECT_EQ(Count<LaunchedEvent>(), 1);
  EXPECT_GE(Count<ProgressEvent>(), 5);  // every 2 simulated seconds
  ASSERT_TRUE(std::holds_alternative<EndedEvent>(events_.back().what));
  EXPECT_THAT(LogKinds(), Contains("finished"));
  // A finished job is answered as it is.
  auto again = controller.Run("job-x");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(cloud_.Launched(), 4);
}

TEST_F(JobControllerTest, ANoticeIsTakenOverBeforeTheInstanceGoes) {
  std::string victim;
  clock_.At(absl::Seconds(3), [&] {
    victim = WorkerOf("g3.8xlarge");
    Notice(victim, absl::Seconds(2));
  });
  clock_.At(absl::Seconds(5), [&] { cloud_.End(victim); });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  // The re-plan had the survivors and the progress so far on the cluster before (asked again
  // for the steps its cluster needs: more workers, more global steps).
  ASSERT_GE(replans_.size(), 1u);
  const pb::ReplanRequest& r = replans_[0];
  EXPECT_EQ(r.survivors().instances_size(), 1);
  EXPECT_EQ(r.survivors().instances(0).instance_type(), "p2.xlarge");
  EXPECT_EQ(r.survivors().instances(0).count(), 2);
  EXPECT_NEAR(r.progress().normalized_iterations_done(), 30, 3);
  EXPECT_NEAR(r.progress().elapsed_s(), 3, 0.3);
  // The takeover launched with its own token; the target became done + the rest.
  EXPECT_EQ(cloud_.launch_calls.count("job-x-takeover-1-p2.xlarge"), 1u);
  const JobSummary& s = outcome->summary;
  ASSERT_EQ(s.revocations.size(), 1u);
  EXPECT_EQ(s.revocations[0].status, RevocationStatus::kLaunched);
  EXPECT_EQ(s.revocations_handled, 1);
  EXPECT_EQ(s.takeover_instances, 1);
  ASSERT_TRUE(s.revocations[0].takeover_before_revoked_ended.has_value());
  EXPECT_TRUE(*s.revocations[0].takeover_before_revoked_ended);
  EXPECT_NEAR(*s.revocations[0].notice_to_takeover_running_s, 0, 0.3);
  ASSERT_TRUE(s.revocations[0].notice_to_takeover_training_s.has_value());
  // The rest of the job is the job's forecast for the new cluster: the steps the re-plan was
  // asked for.
  EXPECT_GT(replans_.back().slo().target_iterations(), 0);
  EXPECT_NEAR(s.target_iterations, replans_.back().slo().target_iterations(), 1);
  EXPECT_EQ(Count<NoticeEvent>(), 1);
  EXPECT_EQ(Count<TakeoverEvent>(), 1);
  EXPECT_EQ(Count<InstanceEndedEvent>(), 1);
  EXPECT_TRUE(cloud_.Running().empty());
}

TEST_F(JobControllerTest, AnInstanceGoneWithoutANoticeIsLostAndTakenOver) {
  // Killed with its agent (or taken away by the cloud): no notice, no command end.
  std::string victim;
  clock_.At(absl::Seconds(3), [&] {
    victim = WorkerOf("g3.8xlarge");
    cloud_.End(victim);
  });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  const JobSummary& s = outcome->summary;
  ASSERT_EQ(s.revocations.size(), 1u);
  EXPECT_EQ(s.revocations[0].instance, victim);
  EXPECT_EQ(s.revocations[0].status, RevocationStatus::kLaunched);
  auto stored = store_->Revocations("job-x");
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ((*stored)[0].kind, "lost");
  EXPECT_EQ(cloud_.launch_calls.count("job-x-takeover-1-p2.xlarge"), 1u);
  EXPECT_EQ(Count<TakeoverEvent>(), 1);
}

// Zones of one price (the built-in catalog prices every zone alike) are tried in the order of the
// cloud's placement scores for the launch; unscored zones last, in the catalog's order.
TEST_F(JobControllerTest, ZonesOfOnePriceAreTriedInTheOrderOfTheCloudsPlacementScores) {
  cloud_.zones_for["p2.xlarge"] = {"us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"};
  cloud_.placement_scores = {{"us-east-1b", 2}, {"us-east-1c", 9}};
  const std::vector<std::string> first = FirstZonedLaunchOfAFinishedJob();
  EXPECT_THAT(first, ElementsAre("us-east-1c", "us-east-1b", "us-east-1a", "us-east-1d"));
  ASSERT_FALSE(cloud_.score_asks.empty());
  EXPECT_EQ(cloud_.score_asks[0].first, "p2.xlarge");
  EXPECT_GE(cloud_.score_asks[0].second, 1);  // the plan's p2.xlarge count
}

// A cloud that will not score (no permission) leaves the catalog's order; the job's log says why,
// once.
TEST_F(JobControllerTest, PlacementScoresThatFailLeaveTheCatalogsOrderAndAreLoggedOnce) {
  cloud_.zones_for["p2.xlarge"] = {"us-east-1a", "us-east-1b", "us-east-1c"};
  cloud_.scores_error = absl::PermissionDeniedError(
      "EC2 GetSpotPlacementScores: UnauthorizedOperation: not authorized");
  const std::vector<std::string> first = FirstZonedLaunchOfAFinishedJob();
  EXPECT_THAT(first, ElementsAre("us-east-1a", "us-east-1b", "us-east-1c"));
  auto events = store_->Events("job-x");
  ASSERT_TRUE(events.ok());
  int logged = 0;
  for (const JobEventRecord& e : *events) {
    if (e.kind != "placement_scores") continue;
    ++logged;
    EXPECT_THAT(e.detail, HasSubstr("UnauthorizedOperation"));
  }
  EXPECT_EQ(logged, 1) << LogText();
}

// A checkpoint bucket per region: the workers' takeover finds no spot in the job's region and
// lands in another; the checkpoint is copied there once, before that launch, and the new workers
// use that region's bucket. A later launch in the same region copies nothing.
TEST_F(JobControllerTest, ATakeoverInAnotherRegionCopiesTheCheckpointThereOnce) {
  cloud_.zones_for["p2.xlarge"] = {"us-east-1a", "us-west-2a"};
  struct Copy {
    std::string from, from_region, to, to_region;
    int in_west_before = 0;  // instances in us-west-2a when it was made
  };
  std::vector<Copy> copies;
  JobServices services = Services();
  services.copy_checkpoint =
      [&](const std::string& from, const std::string& from_region, const std::string& to,
          const std::string& to_region) -> absl::StatusOr<launcher::SyncCounts> {
    int in_west = 0;
    for (const launcher::Instance& i : cloud_.Running()) in_west += i.zone == "us-west-2a";
    copies.push_back({from, from_region, to, to_region, in_west});
    return launcher::SyncCounts{.files = 2, .bytes = 1000};
  };
  JobController controller(services, {.stall_timeout = absl::Seconds(60)},
                           [this](const JobEvent& e) { events_.push_back(e); });
  // At 3 s us-east-1a has no spot left and both p2.xlarge workers go; at 6 s the one that moved
  // goes too (us-west-2a is tried first now: us-east-1a refused within the probe interval).
  std::vector<std::string> first_workers;
  std::string moved;
  clock_.At(absl::Seconds(3), [&] {
    cloud_.zone_capacity["us-east-1a"] = 0;
    for (const launcher::Instance& i : cloud_.Running()) {
      if (i.role == launcher::Role::kWorker && i.instance_type == "p2.xlarge") {
        first_workers.push_back(i.id);
        cloud_.End(i.id);
      }
    }
  });
  clock_.At(absl::Seconds(6), [&] {
    moved = WorkerOf("p2.xlarge");
    if (!moved.empty()) cloud_.End(moved);
  });
  std::string spec = kSpec;
  spec.insert(spec.rfind('}'), R"(, "checkpoints": "s3://ckpt-{region}/spotdnn")");
  auto outcome = PlanAndRun(controller, spec.c_str());
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message << LogText();
  ASSERT_EQ(first_workers.size(), 2u);
  for (const std::string& id : first_workers) {
    EXPECT_EQ(cloud_.last_env[id]["SPOTDNN_CHECKPOINT_URI"], "s3://ckpt-us-east-1/spotdnn/job-x");
  }
  ASSERT_EQ(copies.size(), 1u) << LogText();
  EXPECT_EQ(copies[0].from, "s3://ckpt-us-east-1/spotdnn/job-x");
  EXPECT_EQ(copies[0].from_region, "us-east-1");
  EXPECT_EQ(copies[0].to, "s3://ckpt-us-west-2/spotdnn/job-x");
  EXPECT_EQ(copies[0].to_region, "us-west-2");
  EXPECT_EQ(copies[0].in_west_before, 0) << "copied before the launch there";
  // Every p2.xlarge launched after the copy ran in us-west-2a, on its region's bucket.
  int in_west = 0;
  const auto all = cloud_.Describe("job-x");
  ASSERT_TRUE(all.ok());
  for (const launcher::Instance& i : *all) {
    if (i.instance_type != "p2.xlarge" || i.zone != "us-west-2a") continue;
    ++in_west;
    EXPECT_EQ(cloud_.last_env[i.id]["SPOTDNN_CHECKPOINT_URI"], "s3://ckpt-us-west-2/spotdnn/job-x");
  }
  EXPECT_GE(in_west, 2) << "the takeover and the takeover after it";
  ASSERT_FALSE(moved.empty());
  // No launch was asked to try zones of two regions at once.
  for (const std::vector<std::string>& zones : cloud_.launch_zones) {
    EXPECT_FALSE(absl::c_linear_search(zones, "us-east-1a") &&
                 absl::c_linear_search(zones, "us-west-2a"))
        << absl::StrJoin(zones, ",");
  }
  auto events = store_->Events("job-x");
  ASSERT_TRUE(events.ok());
  int copy_events = 0;
  for (const JobEventRecord& e : *events) {
    if (e.kind != "checkpoint_copy") continue;
    ++copy_events;
    const nlohmann::json d = nlohmann::json::parse(e.detail);
    EXPECT_EQ(d["from_region"], "us-east-1");
    EXPECT_EQ(d["to_region"], "us-west-2");
    EXPECT_EQ(d["files"], 2);
    EXPECT_EQ(d["bytes"], 1000);
  }
  EXPECT_EQ(copy_events, 1);
}

TEST_F(JobControllerTest, EveryWorkerLostAtOnceIsTakenOverNotGivenUp) {
  // No worker left for a moment: the takeover the losses start is pending, so the job goes on.
  clock_.At(absl::Seconds(3), [&] {
    for (const launcher::Instance& i : cloud_.Running()) {
      if (i.role == launcher::Role::kWorker) cloud_.End(i.id);
    }
  });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_EQ(outcome->summary.revocations.size(), 3u);
  EXPECT_GE(Count<TakeoverEvent>(), 1);
}

TEST_F(JobControllerTest, TheDetectorsLossReportAfterTheProvidersIsNotASecondTakeover) {
  std::string victim;
  clock_.At(absl::Seconds(3), [&] {
    victim = WorkerOf("g3.8xlarge");
    cloud_.End(victim);
  });
  clock_.At(absl::Seconds(5), [&] {
    pb::RevocationEvent e;
    e.set_sequence(++sequence_);
    e.set_instance_id(victim);
    e.set_job_id("job-x");
    e.set_kind(pb::RevocationEvent::KIND_LOST);
    feed_.push_back(e);
  });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_EQ(outcome->summary.revocations.size(), 1u);
  EXPECT_EQ(Count<TakeoverEvent>(), 1);
}

TEST_F(JobControllerTest, WorkersWhoseCommandsFailEndTheJobWithTheirLastLines) {
  clock_.At(absl::Seconds(3), [&] {
    for (const launcher::Instance& i : cloud_.Running()) {
      if (i.role != launcher::Role::kWorker) continue;
      cloud_.Exit(i.id, {.status = 1,
                         .how = "exit status 1",
                         .last_lines = {"Traceback (most recent call last):",
                                        "ValueError: the data folder is empty"}});
    }
  });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFailed);
  EXPECT_THAT(outcome->record.message, HasSubstr("no worker is left running"));
  EXPECT_THAT(outcome->record.message, HasSubstr("ended with exit status 1"));
  EXPECT_THAT(outcome->record.message, HasSubstr("ValueError: the data folder is empty"));
  // Not revocations: nothing was taken over, and the detector forgot them.
  EXPECT_TRUE(outcome->summary.revocations.empty());
  EXPECT_EQ(Count<TakeoverEvent>(), 0);
  EXPECT_THAT(LogKinds(), Contains("exited"));
  for (const launcher::Instance& i : cloud_.Running()) EXPECT_NE(i.role, launcher::Role::kWorker);
  EXPECT_GE(unregistered_.size(), 3u);
}

TEST_F(JobControllerTest, AnAgentsReportOfItsCommandsEndFailsTheJobAndStopsTheVm) {
  // On a cloud the VM runs on after its command ended: only its agent's report (through the
  // detector) says so. Without it the silence would be a loss, taken over again and again.
  std::vector<std::string> workers;
  clock_.At(absl::Seconds(3), [&] {
    for (const launcher::Instance& i : cloud_.Running()) {
      if (i.role != launcher::Role::kWorker) continue;
      workers.push_back(i.id);
      pb::RevocationEvent e;
      e.set_sequence(++sequence_);
      e.set_instance_id(i.id);
      e.set_job_id("job-x");
      e.set_kind(pb::RevocationEvent::KIND_EXITED);
      e.set_exit_status(2);
      e.set_detail("exit status 2");
      e.add_last_lines("Traceback (most recent call last):");
      e.add_last_lines("FileNotFoundError: /data/train");
      feed_.push_back(e);
      feed_.push_back(e);  // the agent sent it again (a new stream): once
    }
  });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  ASSERT_FALSE(workers.empty());
  EXPECT_EQ(outcome->record.state, JobState::kFailed);
  EXPECT_THAT(outcome->record.message, HasSubstr("no worker is left running"));
  EXPECT_THAT(outcome->record.message, HasSubstr("ended with exit status 2"));
  EXPECT_THAT(outcome->record.message, HasSubstr("FileNotFoundError: /data/train"));
  EXPECT_TRUE(outcome->summary.revocations.empty());
  EXPECT_EQ(Count<TakeoverEvent>(), 0);
  // Each worker's VM was stopped, and its end logged once.
  for (const launcher::Instance& i : cloud_.Running()) EXPECT_NE(i.role, launcher::Role::kWorker);
  const std::vector<std::string> kinds = LogKinds();
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "exited"), static_cast<long>(workers.size()));
  EXPECT_GE(unregistered_.size(), workers.size());
}

TEST_F(JobControllerTest, ATypeWithoutCapacityIsReplannedAround) {
  cloud_.capacity["g3.8xlarge"] = 0;
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  ASSERT_EQ(replans_.size(), 1u);
  // From iteration 0, with the type held at what runs (none).
  EXPECT_EQ(replans_[0].progress().normalized_iterations_done(), 0);
  bool capped = false;
  for (const pb::InstanceCount& q : replans_[0].options().quota_overrides()) {
    capped |= q.instance_type() == "g3.8xlarge" && q.count() == 0;
  }
  EXPECT_TRUE(capped);
  EXPECT_EQ(cloud_.launch_calls.count("job-x-capacity-1-p2.xlarge"), 1u);
  EXPECT_THAT(LogKinds(), Contains("capacity-replan"));
  EXPECT_EQ(Count<CapacityEvent>(), 1);
  EXPECT_EQ(outcome->summary.instances_launched, 4);  // ps, 2 planned p2, 1 capacity p2
  EXPECT_EQ(outcome->record.target_iterations, 50);   // the re-plan's, from iteration 0
}

// Workers that report a loss: the job ends when the (smoothed) loss reaches the target, not when
// the predicted iterations are done; the curve is recorded for the summary's plot.
TEST_F(JobControllerTest, ALossTargetIsMetByTheReportedLoss) {
  loss_ = [](double iterations) { return 3.0 - iterations / 100; };  // 2.6 at 40 iterations
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  EXPECT_LE(outcome->record.loss, 2.6);
  EXPECT_LT(outcome->record.iterations_done, 100);  // before the predicted 100
  EXPECT_EQ(outcome->summary.loss_reached, true);
  ASSERT_TRUE(outcome->summary.final_loss.has_value());
  EXPECT_LE(*outcome->summary.final_loss, 2.6);
  auto curve = store_->Progress("job-x");
  ASSERT_TRUE(curve.ok());
  ASSERT_GE(curve->size(), 2u);
  EXPECT_GT(curve->front().loss, curve->back().loss);
}

// A loss that does not come down, and a re-plan that finds no larger cluster: only then does the
// job fail, instead of training (and paying) for ever; its message says what the forecast said,
// what the re-plan tried and what the measured loss shows.
TEST_F(JobControllerTest, ALossThatNeverComesFailsTheJobWhenTheDeadlineCannotBeMet) {
  loss_ = [](double) { return 2.9; };
  ON_CALL(provisioner_, Replan(_, _, _))
      .WillByDefault(
          [this](grpc::ClientContext*, const pb::ReplanRequest& r, pb::ReplanResponse* out) {
            replans_.push_back(r);
            out->mutable_plan()->set_feasible(false);
            out->mutable_plan()->set_reason("every type is at its quota");
            return grpc::Status::OK;
          });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  SCOPED_TRACE(LogText());
  EXPECT_EQ(outcome->record.state, JobState::kFailed);
  EXPECT_THAT(outcome->record.message, HasSubstr("has not fallen"));
  EXPECT_THAT(outcome->record.message, HasSubstr("could not help"));
  EXPECT_THAT(outcome->record.message, HasSubstr("the job's forecast"));
  EXPECT_THAT(LogKinds(), Contains("refit-replan"));
  EXPECT_THAT(LogKinds(), Contains("decision"));
}

// A loss slower than the profile's but that can make the 600 s deadline (2.6 at 400 iterations,
// 4 times the 100 predicted): it runs on to its target.
TEST_F(JobControllerTest, ASlowerLossThatCanMakeTheDeadlineRunsToItsTarget) {
  loss_ = [](double iterations) { return 3.0 - iterations / 1000; };
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_GT(outcome->record.iterations_done, 300);
  EXPECT_EQ(outcome->summary.loss_reached, true);
}

// A revoked parameter server: the gateway waits for its last checkpoint, launches a replacement
// with its index (which restores the checkpoint), relaunches the workers against it, and counts
// the steps the rollback undid.
TEST_F(JobControllerTest, AParameterServerIsReplacedFromItsCheckpoint) {
  const fs::path checkpoints = dir_ / "checkpoints";
  std::string server;
  clock_.At(absl::Seconds(4), [&] {
    for (const launcher::Instance& i : cloud_.Running()) {
      if (i.role == launcher::Role::kParameterServer) server = i.id;
    }
    Notice(server, absl::Seconds(3));
  });
  clock_.At(absl::Seconds(5), [&] {
    // Its last checkpoint, at global step 30, then it exits.
    fs::create_directories(checkpoints / "job-x");
    std::ofstream(checkpoints / "job-x" / "ps-0.json") << R"({"step": 30, "file": "ps-0-30.pt"})";
    cloud_.End(server);
  });
  JobController controller = CheckpointingController(checkpoints);
  cloud_.shares_files = true;
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  // About 50 steps were made when it ended (10 a second); the checkpoint had 30.
  EXPECT_NEAR(outcome->record.steps_lost, 20, 3);
  EXPECT_EQ(outcome->summary.steps_lost, outcome->record.steps_lost);
  EXPECT_EQ(cloud_.launch_calls.count("job-x-takeover-1-ps"), 1u);
  EXPECT_EQ(cloud_.launch_calls.count("job-x-takeover-1-w-p2.xlarge"), 1u);
  EXPECT_EQ(cloud_.launch_calls.count("job-x-takeover-1-w-g3.8xlarge"), 1u);
  EXPECT_EQ(outcome->summary.instances_launched, 4 + 4);  // a new server and 3 new workers
  ASSERT_EQ(outcome->summary.revocations.size(), 1u);
  EXPECT_THAT(outcome->summary.revocations[0].detail,
              HasSubstr("restored from the checkpoint at step 30"));
  // The new workers train against the replacement, whose index is the revoked one's.
  std::string replacement;
  auto instances = store_->Instances("job-x");
  ASSERT_TRUE(instances.ok());
  for (const InstanceRecord& i : *instances) {
    if (i.role == launcher::Role::kParameterServer && i.id != server) {
      replacement = i.id;
      EXPECT_EQ(i.index, 0);
    }
  }
  ASSERT_FALSE(replacement.empty());
  std::string replacement_address;
  auto described = cloud_.Describe("job-x");
  ASSERT_TRUE(described.ok());
  for (const launcher::Instance& i : *described) {
    if (i.id == replacement) replacement_address = i.private_address + ":2222";
  }
  for (absl::string_view id : absl::StrSplit(outcome->summary.revocations[0].takeover, ',')) {
    if (id == replacement) continue;
    ASSERT_EQ(cloud_.ps_addresses[std::string(id)].size(), 1u) << id;
    EXPECT_EQ(cloud_.ps_addresses[std::string(id)][0], replacement_address) << id;
  }
  EXPECT_EQ(cloud_.last_env[replacement]["SPOTDNN_CHECKPOINT_DIR"],
            (checkpoints / "job-x").string());
}

// A 45 s deadline for a loss that falls slowly: 3.0 at the start, 2.6 at global step 2667, where
// the plan's 3 workers make 30 steps a second (89 s). The straight line through the first
// measurements misses the deadline from the start; the job's forecast sees it too, and the job
// re-plans (nine more workers) instead of stopping, and meets its deadline.
constexpr char kFortyFiveSecondSpec[] = R"({
  "name": "job-x",
  "workload": "resnet110",
  "slo": {"loss": 2.6, "deadline": 45},
  "catalog": "aws-spotdnn-prototype",
  "commands": {"worker": "train", "parameter_server": "serve"}
})";

TEST_F(JobControllerTest, ALateForecastIsReplannedBeforeAStopIsConsidered) {
  loss_ = [](double j) { return 2.0 + 4000 / (j + 4000); };
  rate_per_worker_ = 10;
  ON_CALL(provisioner_, Replan(_, _, _))
      .WillByDefault(
          [this](grpc::ClientContext*, const pb::ReplanRequest& r, pb::ReplanResponse* out) {
            replans_.push_back(r);
            pb::Plan* plan = out->mutable_plan();
            plan->set_feasible(true);
            Add(plan->mutable_to_launch(), "p2.xlarge", 9);
            plan->mutable_prediction()->set_normalized_iterations(1500);
            plan->mutable_prediction()->set_worker_count(12);
            AddWorker(plan->mutable_prediction(), "p2.xlarge", 9, 0.1);
            plan->set_time_s(20);
            return grpc::Status::OK;
          });
  JobController controller = Controller();
  const absl::Time start = clock_.Now();
  auto outcome = PlanAndRun(controller, kFortyFiveSecondSpec);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  SCOPED_TRACE(LogText());
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_THAT(LogKinds(), Contains("refit-replan"));
  EXPECT_GE(cloud_.Launched(), 1 + 3 + 9);
  EXPECT_LE(absl::ToDoubleSeconds(clock_.Now() - start), 45);
  EXPECT_EQ(outcome->summary.deadline_met, true);
  EXPECT_EQ(outcome->summary.target_reached, true);
}

// A parameter server's notice: while it writes its checkpoint (10 s here) and the workers are
// relaunched, the loss the old workers report stands still. That is a restore, not a stall: no
// refit takes those points and no re-plan launches workers for them.
TEST_F(JobControllerTest, ALossFlatDuringAParameterServerRestoreIsNotRefitted) {
  loss_ = [](double j) { return 2.0 + 300 / (j + 300); };  // 2.6 at 1200: 120 s of 600
  const fs::path checkpoints = dir_ / "checkpoints";
  std::string server;
  double at_notice = 0;
  clock_.At(absl::Seconds(20), [&] {
    for (const launcher::Instance& i : cloud_.Running()) {
      if (i.role == launcher::Role::kParameterServer) server = i.id;
    }
    at_notice = steps_;
    flat_loss_ = loss_(steps_);
    Notice(server, absl::Seconds(10));
  });
  clock_.At(absl::Seconds(30), [&] {
    // Its last checkpoint, at the step of the notice, then it exits; the restored workers train
    // from there.
    fs::create_directories(checkpoints / "job-x");
    std::ofstream(checkpoints / "job-x" / "ps-0.json")
        << absl::StrCat(R"({"step": )", static_cast<int>(at_notice), R"(, "file": "ps.pt"})");
    rewound_ = steps_ - at_notice;
    flat_loss_ = 0;
    cloud_.End(server);
  });
  JobController controller = CheckpointingController(checkpoints);
  cloud_.shares_files = true;
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  SCOPED_TRACE(LogText());
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_THAT(LogKinds(), Not(Contains("refit-replan")));
  EXPECT_NEAR(outcome->record.steps_lost, 100, 5);  // 10 s of steps past the checkpoint
  // The job's prediction at the end is its forecast, not one made of the flat loss.
  EXPECT_LT(outcome->record.target_iterations, 2 * outcome->record.iterations_done);
}

// A revocation is re-planned from the job's forecast: the steps the current model says the new
// cluster needs, as an iterations target, not the profile's model's loss at the steps done.
TEST_F(JobControllerTest, ATakeoverIsReplannedFromTheJobsForecast) {
  loss_ = [](double j) { return 2.0 + 300 / (j + 300); };
  clock_.At(absl::Seconds(10), [&] { Notice(WorkerOf("p2.xlarge"), absl::Seconds(5)); });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  SCOPED_TRACE(LogText());
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  ASSERT_FALSE(replans_.empty());
  const pb::ReplanRequest& r = replans_.front();
  EXPECT_EQ(r.slo().target_loss(), 0);
  EXPECT_GT(r.slo().target_iterations(), r.progress().normalized_iterations_done());
  EXPECT_EQ(r.progress().current_loss(), 0);
  EXPECT_EQ(outcome->summary.revocations_handled, 1);
}

// A job with an iterations target whose workers report no loss: the summary names the target it
// judged (the global steps, measured) and claims nothing about a loss.
TEST_F(JobControllerTest, TheSummaryNamesTheTargetItJudged) {
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller, R"({
    "name": "job-x", "workload": "resnet110", "slo": {"iterations": 60, "deadline": 600},
    "catalog": "aws-spotdnn-prototype",
    "commands": {"worker": "train", "parameter_server": "serve"}})");
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  const JobSummary& s = outcome->summary;
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  EXPECT_FALSE(s.loss_reached.has_value()) << "no loss target, no loss measured";
  EXPECT_EQ(s.target_kind, "iterations");
  EXPECT_EQ(s.target_reached, true);
  ASSERT_TRUE(s.target_measured.has_value());
  EXPECT_GE(*s.target_measured, 60);
  EXPECT_THAT(s.target_measure, HasSubstr("global steps"));
}

TEST_F(JobControllerTest, WorkersThatNeverReportFailTheJobAfterTheStallTimeout) {
  rate_ = 0;
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFailed);
  EXPECT_THAT(outcome->record.message, HasSubstr("no worker reported a new iteration for 1m"));
  EXPECT_NEAR(clock_.Elapsed(), 60, 1);
  EXPECT_NE(outcome->summary.slo_met, true);
  EXPECT_TRUE(cloud_.Running().empty());
}

TEST_F(JobControllerTest, AProfilerOutageIsAWarningOnceNotAFailure) {
  clock_.At(absl::Seconds(2), [&] { profiler_up_ = false; });
  clock_.At(absl::Seconds(6), [&] { profiler_up_ = true; });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  auto events = store_->Events("job-x");
  ASSERT_TRUE(events.ok());
  int warnings = 0;
  for (const JobEventRecord& e : *events) {
    warnings += e.kind == "warning" && absl::StrContains(e.detail, "profiler");
  }
  EXPECT_EQ(warnings, 1) << LogText();
}

// A gateway killed after the takeover decision was written but before it launched: the resumed
// one launches that takeover once, with the same token, and nothing else twice.
TEST_F(JobControllerTest, AResumedJobLaunchesNothingTwice) {
  std::string victim;
  {
    JobController first = Controller();
    clock_.At(absl::Seconds(3), [&] {
      victim = WorkerOf("p2.xlarge");
      Notice(victim, absl::Seconds(10));
    });
    clock_.At(absl::Seconds(4), [&] { first.Detach(); });
    auto detached = PlanAndRun(first);
    EXPECT_EQ(detached.status().code(), absl::StatusCode::kCancelled);
  }
  const int launched = cloud_.Launched();
  EXPECT_EQ(launched, 5);  // ps, 3 planned workers, 1 takeover
  auto record = store_->GetJob("job-x");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->state, JobState::kRunning);
  // The notice's sequence is remembered: the resumed feed starts after it.
  EXPECT_EQ(record->last_event_seq, 1);
  registered_.clear();
  JobController second = Controller();
  auto outcome = second.Run("job-x");
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  EXPECT_EQ(cloud_.Launched(), launched);
  EXPECT_EQ(feed_opened_after_.back(), 1u);
  EXPECT_EQ(Count<ResumedEvent>(), 1);
  // Re-registered: the running instances, not the one being revoked.
  for (const pb::WatchedInstance& w : registered_) EXPECT_NE(w.instance_id(), victim);
  EXPECT_EQ(registered_.size(), 4u);
  EXPECT_EQ(outcome->summary.revocations_handled, 1);
  EXPECT_THAT(LogKinds(), Contains("resumed"));
}

// Killed in the middle of the capacity re-plan rounds: the resumed gateway replays the logged
// re-plan with the same tokens instead of planning again.
TEST_F(JobControllerTest, AResumedCapacityReplanIsReplayedNotRedone) {
  cloud_.capacity["g3.8xlarge"] = 0;
  {
    JobController first = Controller();
    clock_.At(absl::Seconds(1), [&] { first.Detach(); });
    auto detached = PlanAndRun(first);
    EXPECT_EQ(detached.status().code(), absl::StatusCode::kCancelled);
  }
  // Simulate a crash between the logged re-plan and its launch: forget that launch's result.
  // The resumed gateway reissues it with the same token, which the cloud deduplicates.
  const int launched = cloud_.Launched();
  auto job = store_->GetJob("job-x");
  job->state = JobState::kLaunching;
  ASSERT_TRUE(store_->UpdateJob(*job).ok());
  JobController second = Controller();
  auto outcome = second.Run("job-x");
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished);
  EXPECT_EQ(replans_.size(), 1u) << "the logged re-plan is replayed, not asked again";
  EXPECT_EQ(cloud_.Launched(), launched);
  EXPECT_EQ(cloud_.launch_calls["job-x-capacity-1-p2.xlarge"], 2);  // the same token, twice
}

// A detector whose event log restarted: the job numbers afresh and registers its running
// instances again.
TEST_F(JobControllerTest, ADetectorLogRestartReRegistersTheRunningInstances) {
  clock_.At(absl::Seconds(2), [&] { feed_.push_back(std::nullopt); });
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(registered_.size(), 8u);  // 4 at launch, 4 again
  EXPECT_EQ(outcome->record.last_event_seq, 0);
}

// The detector's feed over a WatchEvents stream (a gRPC mock stream): events in order, and a
// restarted numbering (OUT_OF_RANGE after some events) as a std::nullopt.
TEST(DetectorFeedTest, ForwardsEventsAndReportsARestartedLog) {
  pb::MockDetectorStub stub;
  std::atomic<int> streams{0};
  EXPECT_CALL(stub, WatchEventsRaw(_, _))
      .WillRepeatedly([&](grpc::ClientContext*, const pb::WatchEventsRequest& request) {
        auto* reader = new grpc::testing::MockClientReader<pb::RevocationEvent>();
        const int n = streams++;
        if (n == 0) {
          EXPECT_EQ(request.after_sequence(), 3u);
          EXPECT_EQ(request.job_id(), "j");
          EXPECT_CALL(*reader, Read(_))
              .WillOnce([](pb::RevocationEvent* e) {
                e->set_sequence(4);
                return true;
              })
              .WillOnce(Return(false));
          EXPECT_CALL(*reader, Finish())
              .WillOnce(Return(grpc::Status(grpc::StatusCode::OUT_OF_RANGE, "reset")));
        } else {
          EXPECT_CALL(*reader, Read(_)).WillRepeatedly(Return(false));
          EXPECT_CALL(*reader, Finish())
              .WillRepeatedly(Return(grpc::Status(grpc::StatusCode::CANCELLED, "")));
        }
        return reader;
      });
  const clients::DetectorClient client(stub);
  std::vector<FeedItem> items;
  {
    DetectorFeed feed(client, "j", 3);
    for (int i = 0; i < 500 && items.size() < 2; ++i) {
      for (FeedItem& item : feed.Drain()) items.push_back(std::move(item));
      absl::SleepFor(absl::Milliseconds(2));
    }
  }
  ASSERT_EQ(items.size(), 2u);
  ASSERT_TRUE(items[0].has_value());
  EXPECT_EQ(items[0]->sequence(), 4u);
  EXPECT_FALSE(items[1].has_value());
}

}  // namespace
}  // namespace spotdnn::job

namespace spotdnn::job {
namespace {

// A takeover the cloud has no spot capacity for (g3.8xlarge: spot $0.684/h, on-demand
// $2.28/h; the catalog's p2.xlarge spot costs more than on-demand, where a policy rightly stays on
// on-demand). The deadline guard runs the missing
// worker on on-demand (the slack is too small to wait), probes spot once a second with backoff,
// and goes back to spot when a probe gets it (and the slack has room for the changeover), stopping
// the on-demand worker. The re-plan leaves
// 200 iterations (20 s at the plan's pace) with 22.75 s left and a 2 s changeover; the workers
// then train 4x faster than planned, so there is room to change back.
constexpr char kTightSpec[] = R"({
  "name": "job-x",
  "workload": "resnet110",
  "slo": {"iterations": 100, "deadline": 26},
  "catalog": "aws-spotdnn-prototype",
  "revocation_overhead": 2,
  "commands": {"worker": "train", "parameter_server": "serve"}
})";

TEST_F(JobControllerTest, NoSpotForATakeoverRunsOnDemandUntilAProbeGetsSpotBack) {
  ON_CALL(provisioner_, Replan(_, _, _))
      .WillByDefault(
          [this](grpc::ClientContext*, const pb::ReplanRequest& r, pb::ReplanResponse* out) {
            replans_.push_back(r);
            pb::Plan* plan = out->mutable_plan();
            plan->set_feasible(true);
            Add(plan->mutable_to_launch(), "g3.8xlarge", 1);
            *plan->mutable_cluster() = r.survivors();
            plan->mutable_prediction()->set_normalized_iterations(200);
            AddWorker(plan->mutable_prediction(), "g3.8xlarge", 1, 0.4);
            plan->set_time_s(20);
            return grpc::Status::OK;
          });
  std::string victim;
  clock_.At(absl::Seconds(3), [&] {
    cloud_.capacity["g3.8xlarge"] = 0;
    victim = WorkerOf("g3.8xlarge");
    Notice(victim, absl::Seconds(2));
  });
  // Once the on-demand worker runs (the policy may wait a tick or two first), the workers train
  // 8x faster than planned.
  clock_.At(absl::Seconds(4.5), [&] { rate_ = 80; });
  clock_.At(absl::Seconds(5), [&] {
    cloud_.End(victim);
    cloud_.capacity.erase("g3.8xlarge");
  });
  JobController controller = Controller({.probe_every = absl::Seconds(1),
                                         .probe_max = absl::Seconds(8),
                                         .check_every = absl::Seconds(1)});
  auto outcome = PlanAndRun(controller, kTightSpec);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_THAT(LogKinds(), Contains("spot-short"));
  EXPECT_THAT(LogKinds(), Contains("spot-back"));
  // One on-demand launch, with a token of its own (JOB-deadline-N-TYPE-on-demand).
  int on_demand_launches = 0;
  for (const auto& [token, calls] : cloud_.launch_calls) {
    if (absl::StartsWith(token, "job-x-deadline-") && absl::EndsWith(token, "-on-demand")) {
      on_demand_launches += calls;
    }
  }
  EXPECT_EQ(on_demand_launches, 1);
  auto instances = store_->Instances("job-x");
  ASSERT_TRUE(instances.ok());
  std::vector<InstanceRecord> on_demand, spot_back;
  for (const InstanceRecord& i : *instances) {
    if (i.market == launcher::Market::kOnDemand) on_demand.push_back(i);
    if (i.market == launcher::Market::kSpot && i.reason == LaunchReason::kDeadline) {
      spot_back.push_back(i);
    }
  }
  ASSERT_EQ(on_demand.size(), 1u);
  ASSERT_EQ(spot_back.size(), 1u);
  EXPECT_EQ(on_demand[0].reason, LaunchReason::kDeadline);
  EXPECT_DOUBLE_EQ(on_demand[0].price_per_hour, 2.28);            // the catalog's on-demand price
  EXPECT_LT(on_demand[0].ended_ms, outcome->record.finished_ms);  // stopped when spot came back
  EXPECT_GE(spot_back[0].launched_ms, absl::ToUnixMillis(absl::FromUnixSeconds(1'800'000'005)));
  EXPECT_EQ(on_demand[0].ended_ms, spot_back[0].launched_ms);
  // The spot launch that brought it back was a probe of capacity.
  int probes = 0;
  auto events = store_->Events("job-x");
  ASSERT_TRUE(events.ok());
  for (const JobEventRecord& e : *events) {
    if (e.kind == "deadline") probes += absl::StrContains(e.detail, "\"trigger\":\"probe\"");
  }
  EXPECT_GE(probes, 1);
  const JobSummary& s = outcome->summary;
  EXPECT_EQ(s.on_demand_instances, 1);
  EXPECT_GT(s.on_demand_instance_hours, 0);
  EXPECT_NEAR(s.on_demand_cost_usd, 2.28 * s.on_demand_instance_hours, 1e-12);
  ASSERT_EQ(s.revocations.size(), 1u);
  EXPECT_EQ(s.revocations[0].status, RevocationStatus::kNoneNeeded);
  EXPECT_THAT(s.revocations[0].detail, HasSubstr("deadline guard"));
  EXPECT_GE(Count<DeadlineEvent>(), 2);
  EXPECT_TRUE(cloud_.Running().empty());
}

// A gateway that logged a deadline decision and died before it was done (simulated: the
// decision logged again after its end) carries it out again when resumed, with the same client
// token: the cloud answers with the instance it launched, and nothing is launched twice.
TEST_F(JobControllerTest, AResumedDecisionIsReissuedWithItsTokenAndLaunchesNothingTwice) {
  ON_CALL(provisioner_, Replan(_, _, _))
      .WillByDefault(
          [this](grpc::ClientContext*, const pb::ReplanRequest& r, pb::ReplanResponse* out) {
            replans_.push_back(r);
            pb::Plan* plan = out->mutable_plan();
            plan->set_feasible(true);
            Add(plan->mutable_to_launch(), "g3.8xlarge", 1);
            *plan->mutable_cluster() = r.survivors();
            plan->mutable_prediction()->set_normalized_iterations(200);
            AddWorker(plan->mutable_prediction(), "g3.8xlarge", 1, 0.4);
            plan->set_time_s(20);
            return grpc::Status::OK;
          });
  std::string victim;
  clock_.At(absl::Seconds(3), [&] {
    cloud_.capacity["g3.8xlarge"] = 0;
    victim = WorkerOf("g3.8xlarge");
    Notice(victim, absl::Seconds(2));
  });
  clock_.At(absl::Seconds(5), [&] { cloud_.End(victim); });
  JobController first = Controller({.probe_every = absl::Seconds(1)});
  int number = 0;  // of the decision that launched on-demand
  on_event_ = [&](const JobEvent& e) {
    const auto* d = std::get_if<DeadlineEvent>(&e.what);
    if (d != nullptr && d->launch_on_demand > 0) first.Detach();
  };
  auto stopped = PlanAndRun(first, kTightSpec);
  ASSERT_EQ(stopped.status().code(), absl::StatusCode::kCancelled) << stopped.status();
  on_event_ = nullptr;
  auto events = store_->Events("job-x");
  ASSERT_TRUE(events.ok());
  std::string decision;
  for (const JobEventRecord& e : *events) {
    if (e.kind == "deadline" && absl::StrContains(e.detail, "\"launch_on_demand\":1")) {
      decision = e.detail;
      number = nlohmann::json::parse(e.detail).value("number", 0);
    }
  }
  ASSERT_GT(number, 0) << "no decision launched on-demand";
  const std::string token = absl::StrCat("job-x-deadline-", number, "-g3.8xlarge-on-demand");
  ASSERT_EQ(cloud_.launch_calls[token], 1);
  ASSERT_TRUE(
      store_->AddEvent("job-x", "deadline", decision, absl::ToUnixMillis(clock_.Now())).ok());

  JobController resumed = Controller({.probe_every = absl::Seconds(1)});
  auto outcome = resumed.Run("job-x");
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_EQ(cloud_.launch_calls[token], 2);  // asked again, with the same token
  EXPECT_EQ(outcome->summary.on_demand_instances, 1);
  std::set<std::string> ids;
  auto instances = store_->Instances("job-x");
  ASSERT_TRUE(instances.ok());
  for (const InstanceRecord& i : *instances) EXPECT_TRUE(ids.insert(i.id).second) << i.id;
  EXPECT_EQ(static_cast<int>(ids.size()), cloud_.Launched());
  EXPECT_THAT(LogKinds(), Contains("resumed"));
}

// A worker type that runs in a dear zone while a cheaper one has no spot returns to the cheaper one
// once it has (the saving over the work left pays for the move), replacing its workers there;
// a zone that refused is tried again only after the probe interval. A return logged by a gateway
// that then died is finished by the resumed one with the same client token: nothing twice.
TEST_F(JobControllerTest, AWorkerTypeReturnsToACheaperZoneAndAResumedReturnLaunchesNothingTwice) {
  services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  auto catalog = registry.ResolveCatalog("aws-spotdnn-prototype");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  catalog->set_name("zoned");
  for (pb::InstanceType& t : *catalog->mutable_instance_types()) {
    if (t.name() != "p2.xlarge") continue;
    t.clear_zones();
    pb::InstanceZone* cheap = t.add_zones();
    cheap->set_name("us-east-1a");
    cheap->set_spot_price_per_hour(t.spot_price_per_hour() / 3);
    t.add_zones()->set_name("us-east-1b");
  }
  ASSERT_TRUE(registry.AddCatalog(*catalog).ok());
  cloud_.zones_for["p2.xlarge"] = {"us-east-1a", "us-east-1b"};
  cloud_.zone_capacity["us-east-1a"] = 0;  // no spot there until 3 s
  rate_ = 5;                               // 100 iterations in about 20 s
  clock_.At(absl::Seconds(3), [&] { cloud_.zone_capacity.erase("us-east-1a"); });
  JobController first = Controller({.probe_every = absl::Seconds(2)});
  // The gateway stops right after the return's launch (as one killed there would).
  on_event_ = [&](const JobEvent& e) {
    if (std::holds_alternative<MovedEvent>(e.what)) first.Detach();
  };
  std::string spec = kSpec;
  spec.replace(spec.find("aws-spotdnn-prototype"), 21, "zoned");
  auto planned = first.Plan(spec, registry);
  ASSERT_TRUE(planned.ok()) << planned.status();
  last_progress_ = clock_.Now();
  auto stopped = first.Run("job-x");
  ASSERT_EQ(stopped.status().code(), absl::StatusCode::kCancelled) << stopped.status();
  on_event_ = nullptr;
  auto events = store_->Events("job-x");
  ASSERT_TRUE(events.ok());
  std::string decision;  // the last one, which launched
  for (const JobEventRecord& e : *events) {
    if (e.kind == "zone-return") decision = e.detail;
  }
  ASSERT_FALSE(decision.empty()) << LogText();
  const int number = nlohmann::json::parse(decision).value("number", 0);
  const std::string token = absl::StrCat("job-x-zone-", number, "-p2.xlarge");
  ASSERT_EQ(cloud_.launch_calls[token], 1);
  const int launched = cloud_.Launched();
  // Its completion never reached the log: the resumed gateway asks again, with the same token.
  ASSERT_TRUE(
      store_->AddEvent("job-x", "zone-return", decision, absl::ToUnixMillis(clock_.Now())).ok());
  JobController resumed = Controller({.probe_every = absl::Seconds(2)});
  auto outcome = resumed.Run("job-x");
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message << LogText();
  EXPECT_EQ(cloud_.launch_calls[token], 2);
  EXPECT_EQ(cloud_.Launched(), launched) << "nothing launched twice";
  EXPECT_THAT(LogText(), ::testing::HasSubstr("resuming zone return"));
  std::set<std::string> ids;
  auto instances = store_->Instances("job-x");
  ASSERT_TRUE(instances.ok());
  for (const InstanceRecord& i : *instances) EXPECT_TRUE(ids.insert(i.id).second) << i.id;
  events = store_->Events("job-x");
  ASSERT_TRUE(events.ok());
  int returns = 0, tries = 0;
  for (const JobEventRecord& e : *events) {
    tries += e.kind == "zone-return";
    if (e.kind != "zone-return-done") continue;
    const nlohmann::json done = nlohmann::json::parse(e.detail);
    if (done["launched"].empty()) continue;  // refused: us-east-1a had no spot yet
    ++returns;
    EXPECT_EQ(done["launched"].size(), 2u) << e.detail;
  }
  EXPECT_EQ(returns, 2) << "the return, and its resumption finding the same instances";
  // Tried at most once a probe interval while refused (3 s of refusals, a try every 2 s), plus
  // the return that launched and its copy in the log.
  EXPECT_LE(tries, 4) << LogText();
  for (const launcher::Instance& i : cloud_.Running()) {
    EXPECT_NE(i.zone, "us-east-1b") << i.id << ": the dear zone's workers stopped";
  }
  int in_a = 0;
  for (const InstanceRecord& i : *instances) {
    in_a += i.zone == "us-east-1a" && i.reason == LaunchReason::kZoneReturn;
  }
  EXPECT_EQ(in_a, 2);
  EXPECT_EQ(outcome->summary.revocations.size(), 0u) << "a stop is not a revocation";
}

// No spot capacity for a planned type at launch and no spot plan without it: the job
// does not fail; the deadline guard runs the type on on-demand.
TEST_F(JobControllerTest, NoSpotAtLaunchAndNoSpotPlanWithoutItRunsOnDemand) {
  cloud_.capacity["g3.8xlarge"] = 0;
  ON_CALL(provisioner_, Replan(_, _, _))
      .WillByDefault([](grpc::ClientContext*, const pb::ReplanRequest&, pb::ReplanResponse* out) {
        out->mutable_plan()->set_feasible(false);
        out->mutable_plan()->set_reason("too slow without g3.8xlarge");
        return grpc::Status::OK;
      });
  constexpr char kSpec11[] = R"({
    "name": "job-x",
    "workload": "resnet110",
    "slo": {"loss": 2.6, "deadline": 11},
    "catalog": "aws-spotdnn-prototype",
    "revocation_overhead": 0.5,
    "commands": {"worker": "train", "parameter_server": "serve"}
  })";
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller, kSpec11);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFinished) << outcome->record.message;
  EXPECT_EQ(outcome->summary.on_demand_instances, 1);
  EXPECT_THAT(LogKinds(), Contains("spot-short"));
}

// With "fallback": "none" the job keeps today's behaviour: no spot plan, no job.
TEST_F(JobControllerTest, WithoutTheFallbackNoSpotAndNoPlanFailsTheJob) {
  cloud_.capacity["g3.8xlarge"] = 0;
  ON_CALL(provisioner_, Replan(_, _, _))
      .WillByDefault([](grpc::ClientContext*, const pb::ReplanRequest&, pb::ReplanResponse* out) {
        out->mutable_plan()->set_feasible(false);
        out->mutable_plan()->set_reason("too slow without g3.8xlarge");
        return grpc::Status::OK;
      });
  constexpr char kNoFallback[] = R"({
    "name": "job-x",
    "workload": "resnet110",
    "slo": {"loss": 2.6, "deadline": 11},
    "catalog": "aws-spotdnn-prototype",
    "fallback": "none",
    "commands": {"worker": "train", "parameter_server": "serve"}
  })";
  JobController controller = Controller();
  auto outcome = PlanAndRun(controller, kNoFallback);
  ASSERT_TRUE(outcome.ok()) << outcome.status();
  EXPECT_EQ(outcome->record.state, JobState::kFailed);
  EXPECT_THAT(outcome->record.message, HasSubstr("no capacity for g3.8xlarge"));
  EXPECT_EQ(outcome->summary.on_demand_instances, 0);
}

}  // namespace
}  // namespace spotdnn::job
