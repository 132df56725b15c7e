// End to end: `spotdnn run` on the local provider whose spot capacity of the job's type
// is a trace (a trace hour a second). The spot capacity disappears mid-run: the plan's worker gets
// a spot notice and goes, its takeover finds no spot capacity, and the deadline guard runs the
// job on on-demand; when the trace gives spot back, a probe launches spot and the on-demand
// instance stops. The job meets its deadline and costs less than on-demand from the start. A
// `kill -9` of the gateway during the on-demand phase resumes without a second launch.
//
// The harness is run_e2e_test's: `spotdnn up` (the services and the metadata emulator as
// processes on 127.0.0.1:0), the gateway as a process, spotdnn-sim-worker instances.
//
// The numbers: 100 iterations of ResNet-110 on one p2.xlarge are planned at 0.5455 s each (55 s);
// the deadline is 60 s and the changeover (revocation_overhead) 5 s. The sim workers step every
// 0.2 s, faster than planned, so the slack grows while they train: when spot goes (at 4 s) the
// slack is too small to wait, and when it returns (at 10 s) there is room for a changeover back.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/local_provider.h"
#include "services/gateway/job/job_store.h"
#include "tests/gateway/cli_runner.h"
#include "tests/testing/child_process.h"
#include "tests/testing/local_stack.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using job::InstanceRecord;
using job::JobEventRecord;
using job::JobStore;
using launcher::Market;
using testing_util::Child;

class OnDemandEndToEnd : public testing_util::LocalStackTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(
        StartStack(absl::StrCat("spotdnn-ondemand-e2e-", getpid(), "-",
                                ::testing::UnitTest::GetInstance()->current_test_info()->name())));
  }

  // The job: 100 iterations within 60 s on a catalog with one type, p2.xlarge (spot $0.27/h,
  // on-demand $0.90/h), whose spot capacity is 1 until trace hour `gone_h` and 0 until `back_h`.
  std::string WriteJob(const std::string& name, int gone_h, int back_h) {
    const fs::path catalog = dir_ / "p2-only.json";
    std::ofstream(catalog) << nlohmann::json{
        {"name", "p2-only"},
        {"instance_types",
         {{{"name", "p2.xlarge"},
           {"gpu_type", "K80"},
           {"gpus", 1},
           {"gpu_memory_gib", 12},
           {"spot_price_per_hour", 0.27},
           {"on_demand_price_per_hour", 0.90},
           {"quota", 1}}}},
        {"parameter_server", {{"instance_type", "m5.xlarge"}, {"bandwidth_mb_per_s", 1200}}},
        {"pcie_bandwidth_mb_per_s",
         10000}}.dump(2);
    const fs::path trace = dir_ / "p2-trace.csv";
    std::ofstream(trace) << "time_h,count\n0,1\n"
                         << gone_h << ",1\n"
                         << gone_h << ",0\n"
                         << back_h << ",0\n"
                         << back_h << ",1\n";
    const fs::path path = dir_ / (name + ".json");
    std::ofstream(path) << nlohmann::json{{"name", name},
                                          {"workload", {{"profile", "resnet110"}}},
                                          {"slo", {{"iterations", 100}, {"deadline", "60s"}}},
                                          {"catalog", catalog.string()},
                                          {"provider",
                                           {{"name", "local"},
                                            {"capacity_trace", {{"p2.xlarge", trace.string()}}},
                                            {"capacity_trace_time_scale", 3600}}},
                                          {"revocation_overhead", "5s"},
                                          {"commands",
                                           {{"worker",
                                             bin_ + "/spotdnn-sim-worker --iteration_time_s=0.2"},
                                            {"parameter_server", bin_ + "/spotdnn-sim-worker"}}}}
                               .dump(2);
    return path.string();
  }

  // The job above on a catalog whose p2.xlarge runs in two zones: us-east-1a (spot $0.27/h,
  // capacity 1 until trace hour `gone_h`, then 0) and `other` (spot $0.30/h, in `other_region`,
  // capacity 1 throughout). `checkpoint_mb` sizes the checkpoint a move across regions copies
  // (at 100 MB/s).
  std::string WriteZonedJob(const std::string& name, int gone_h, const std::string& other,
                            const std::string& other_region, double checkpoint_mb) {
    return WriteZonedJob(name, absl::StrCat("time_h,count\n0,1\n", gone_h, ",1\n", gone_h, ",0\n"),
                         0.27, other, other_region, checkpoint_mb);
  }
  // The same with us-east-1a's capacity trace (`zone_a_trace`, a time_h,count CSV) and spot price
  // given.
  std::string WriteZonedJob(const std::string& name, const std::string& zone_a_trace,
                            double zone_a_price, const std::string& other,
                            const std::string& other_region, double checkpoint_mb) {
    const fs::path catalog = dir_ / "p2-zones.json";
    std::ofstream(catalog) << nlohmann::json{
        {"name", "p2-zones"},
        {"region", "us-east-1"},
        {"instance_types",
         {{{"name", "p2.xlarge"},
           {"gpu_type", "K80"},
           {"gpus", 1},
           {"gpu_memory_gib", 12},
           {"spot_price_per_hour", 0.27},
           {"on_demand_price_per_hour", 0.90},
           {"quota", 1},
           {"zones",
            {{{"name", "us-east-1a"},
              {"region", "us-east-1"},
              {"spot_price_per_hour", zone_a_price}},
             {{"name", other}, {"region", other_region}, {"spot_price_per_hour", 0.30}}}}}}},
        {"parameter_server", {{"instance_type", "m5.xlarge"}, {"bandwidth_mb_per_s", 1200}}},
        {"moves", {{"transfer_price_per_gib", 0.02}, {"transfer_mb_per_s", 100}}},
        {"pcie_bandwidth_mb_per_s",
         10000}}.dump(2);
    const fs::path gone = dir_ / "zone-a.csv";
    std::ofstream(gone) << zone_a_trace;
    const fs::path stays = dir_ / "zone-b.csv";
    std::ofstream(stays) << "time_h,count\n0,1\n";
    const fs::path path = dir_ / (name + ".json");
    std::ofstream(path) << nlohmann::json{{"name", name},
                                          {"workload", {{"profile", "resnet110"}}},
                                          {"slo", {{"iterations", 100}, {"deadline", "60s"}}},
                                          {"catalog", catalog.string()},
                                          {"provider",
                                           {{"name", "local"},
                                            {"capacity_trace",
                                             {{"p2.xlarge@us-east-1a", gone.string()},
                                              {"p2.xlarge@" + other, stays.string()}}},
                                            {"capacity_trace_time_scale", 3600}}},
                                          {"zones", {{"checkpoint_mb", checkpoint_mb}}},
                                          {"revocation_overhead", "5s"},
                                          {"commands",
                                           {{"worker",
                                             bin_ + "/spotdnn-sim-worker --iteration_time_s=0.2"},
                                            {"parameter_server", bin_ + "/spotdnn-sim-worker"}}}}
                               .dump(2);
    return path.string();
  }

  // The first instance of `job` on record that `wanted` says is the one, polled every 50 ms for
  // up to 40 s ("" when none came).
  std::string FirstInstance(const std::string& job,
                            const std::function<bool(const InstanceRecord&)>& wanted) {
    auto store = Store();
    if (store == nullptr) return "";
    for (int i = 0; i < 800; ++i) {
      auto instances = store->Instances(job);
      for (const InstanceRecord& r : instances.ok() ? *instances : std::vector<InstanceRecord>{}) {
        if (wanted(r)) return r.id;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    return "";
  }

  // Runs the gateway (`args`, its output in `log`) to the end of job `job`: exit 0, the job
  // finished; its instances.
  void RunToTheEnd(const std::string& job, std::vector<std::string> args, const std::string& log,
                   std::vector<InstanceRecord>* instances) {
    auto gateway = StartGateway(std::move(args), log);
    std::optional<int> code = gateway->Wait(std::chrono::seconds(110));
    ASSERT_TRUE(code.has_value()) << "the gateway (" << log << ") did not finish the job";
    EXPECT_EQ(*code, 0);
    auto store = Store();
    ASSERT_NE(store, nullptr);
    auto record = store->GetJob(job);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
    auto listed = store->Instances(job);
    ASSERT_TRUE(listed.ok());
    *instances = *std::move(listed);
  }

  std::unique_ptr<Child> StartGateway(std::vector<std::string> args, const std::string& log) {
    std::vector<std::string> argv = {bin_ + "/spotdnn"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--spot-probe-every", "1s", "--json", "--data-dir", dir_.string()});
    return std::make_unique<Child>(argv, (dir_ / log).string());
  }

  std::unique_ptr<JobStore> Store() {
    auto store = JobStore::Open((dir_ / "jobs.db").string());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Trace time 0 of `job`: when the gateway's provider first replayed the trace (kept in the
  // state dir).
  absl::Time TraceOrigin(const std::string& job) {
    std::ifstream in(launcher::CapacityTraceOriginPath((dir_ / "local").string(), job));
    int64_t ms = 0;
    std::string text;
    EXPECT_TRUE(std::getline(in, text) && absl::SimpleAtoi(text, &ms)) << text;
    return absl::FromUnixMillis(ms);
  }

  std::vector<nlohmann::json> DetailsOf(const std::vector<JobEventRecord>& events,
                                        const std::string& kind) {
    std::vector<nlohmann::json> out;
    for (const JobEventRecord& e : events) {
      if (e.kind == kind) out.push_back(nlohmann::json::parse(e.detail, nullptr, false));
    }
    return out;
  }
};

TEST_F(OnDemandEndToEnd, SpotGoneMidRunFallsBackToOnDemandAndReturnsToSpot) {
  const std::string job = "e2e-ondemand";
  const std::string spec = WriteJob(job, /*gone_h=*/4, /*back_h=*/10);
  const absl::Time start = absl::Now();
  auto gateway = StartGateway({"run", spec}, "run.log");
  std::optional<int> code = gateway->Wait(std::chrono::seconds(110));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(*code, 0);
  const absl::Time origin = TraceOrigin(job);
  const int64_t gone_ms = absl::ToUnixMillis(origin + absl::Seconds(4));
  const int64_t back_ms = absl::ToUnixMillis(origin + absl::Seconds(10));

  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob(job);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
  EXPECT_GE(record->iterations_done, 100);
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> kinds;
  for (const JobEventRecord& e : *events) kinds.push_back(e.kind);
  // Spot went short, the guard decided (each decision with its reason), spot came back.
  EXPECT_THAT(kinds, ::testing::Contains("spot-short"));
  EXPECT_THAT(kinds, ::testing::Contains("spot-back"));
  const std::vector<nlohmann::json> decisions = DetailsOf(*events, "deadline");
  ASSERT_FALSE(decisions.empty());
  int launched_on_demand = 0, probes = 0;
  for (const nlohmann::json& d : decisions) {
    ASSERT_TRUE(d.is_object());
    EXPECT_FALSE(d.value("reason", "").empty()) << d;
    launched_on_demand += d.value("launch_on_demand", 0);
    probes += d.value("trigger", "") == "probe";
  }
  EXPECT_EQ(launched_on_demand, 1);
  EXPECT_GE(probes, 1);
  // What was carried out: one on-demand worker stopped, once the spot probe got capacity.
  const std::vector<nlohmann::json> done = DetailsOf(*events, "deadline-done");
  EXPECT_EQ(done.size(), decisions.size());
  size_t stopped = 0;
  for (const nlohmann::json& d : done) stopped += d["stopped"].size();
  EXPECT_EQ(stopped, 1u);

  // The instances: the plan's spot worker went when the trace said so, one on-demand worker ran
  // while spot was gone, and a spot worker launched once it was back took over from it.
  auto instances = store->Instances(job);
  ASSERT_TRUE(instances.ok());
  std::vector<InstanceRecord> on_demand, spot_after;
  for (const InstanceRecord& i : *instances) {
    EXPECT_EQ(i.state, job::InstanceStatus::kEnded) << i.id;
    if (i.role != launcher::Role::kWorker) continue;
    if (i.market == Market::kOnDemand) {
      on_demand.push_back(i);
      EXPECT_EQ(i.reason, job::LaunchReason::kDeadline) << i.id;
      EXPECT_DOUBLE_EQ(i.price_per_hour, 0.90);
    } else if (i.reason == job::LaunchReason::kDeadline) {
      spot_after.push_back(i);
      EXPECT_DOUBLE_EQ(i.price_per_hour, 0.27);
    } else if (i.reason == job::LaunchReason::kPlan) {
      EXPECT_GE(i.ended_ms, gone_ms) << "the plan's worker went before the trace said so";
    }
  }
  ASSERT_EQ(on_demand.size(), 1u);
  ASSERT_EQ(spot_after.size(), 1u);
  EXPECT_GE(on_demand[0].launched_ms, gone_ms);
  EXPECT_GE(spot_after[0].launched_ms, back_ms) << "spot launched before the trace gave it back";
  EXPECT_LT(on_demand[0].ended_ms, record->finished_ms) << "on-demand ran to the end";
  EXPECT_GE(on_demand[0].ended_ms, spot_after[0].launched_ms);

  // `spotdnn status`: the hours and costs by market; the deadline met; less than on-demand
  // from the start would have cost.
  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_EQ(summary["deadline_met"], true) << summary;
  EXPECT_GT(summary["spot_instance_hours"].get<double>(), 0);
  EXPECT_GT(summary["on_demand_instance_hours"].get<double>(), 0);
  EXPECT_NEAR(summary["on_demand_cost_usd"].get<double>(),
              0.90 * summary["on_demand_instance_hours"].get<double>(), 1e-9);
  EXPECT_EQ(summary["on_demand_instances"], 1);
  EXPECT_GE(summary["deadline_decisions"].get<int>(), 2);
  ASSERT_TRUE(summary["on_demand_only_cost_usd"].is_number()) << summary;
  EXPECT_LT(summary["actual_cost_usd"].get<double>(),
            summary["on_demand_only_cost_usd"].get<double>());
  CliRun text = Cli({"status", job, "--data-dir", dir_.string()});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::ContainsRegex("on-demand +0\\.0[0-9]+ +\\$"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("Deadline decisions: "));
  EXPECT_THAT(text.out, ::testing::HasSubstr("spot-short"));
  for (const JobEventRecord& e : *events) {
    if (e.kind == "deadline" || e.kind == "spot-short" || e.kind == "spot-back") {
      std::cout << "  " << (e.at_ms - absl::ToUnixMillis(origin)) / 1000.0 << " s " << e.kind << " "
                << e.detail << "\n";
    }
  }

  // The gateway's own stream has the decisions as events.
  std::ifstream log(dir_ / "run.log");
  std::string line;
  int streamed = 0;
  while (std::getline(log, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    streamed += j.is_object() && j.value("event", "") == "deadline";
  }
  EXPECT_EQ(streamed, static_cast<int>(decisions.size()));
  std::cout << "[measured] " << job << ": " << wall_s << " s wall; spot "
            << summary["spot_instance_hours"] << " h $" << summary["spot_cost_usd"]
            << ", on-demand " << summary["on_demand_instance_hours"] << " h $"
            << summary["on_demand_cost_usd"] << ", total $" << summary["actual_cost_usd"]
            << " vs on-demand from the start $" << summary["on_demand_only_cost_usd"]
            << "; finished " << summary["actual_time_s"] << " s after launch (deadline 60 s)"
            << std::endl;
}

TEST_F(OnDemandEndToEnd, KilledDuringTheOnDemandPhaseResumesWithoutASecondLaunch) {
  const std::string job = "e2e-ondemand-resume";
  // Spot goes at 4 s and stays gone for the rest of the job.
  const std::string spec = WriteJob(job, /*gone_h=*/4, /*back_h=*/200);
  auto gateway = StartGateway({"run", spec}, "run.log");
  // Until the on-demand worker is on record and running.
  auto store = Store();
  ASSERT_NE(store, nullptr);
  const std::string on_demand_id =
      FirstInstance(job, [](const InstanceRecord& r) { return r.market == Market::kOnDemand; });
  ASSERT_FALSE(on_demand_id.empty()) << "no on-demand worker within 40 s";
  absl::SleepFor(absl::Milliseconds(500));
  gateway->Kill();  // kill -9, in the on-demand phase

  // The on-demand worker runs on without its gateway.
  auto running = provider_->Describe(job);
  ASSERT_TRUE(running.ok());
  bool still_running = false;
  for (const auto& i : *running) {
    if (i.id == on_demand_id) {
      still_running = i.state == launcher::InstanceState::kRunning;
      EXPECT_EQ(i.market, Market::kOnDemand);
    }
  }
  EXPECT_TRUE(still_running);
  auto before = store->Instances(job);
  ASSERT_TRUE(before.ok());

  std::vector<InstanceRecord> after;
  ASSERT_NO_FATAL_FAILURE(RunToTheEnd(job, {"run", "--resume", job}, "resume.log", &after));

  // Nothing launched twice: one on-demand worker in all (the one from before the kill), every
  // instance recorded once.
  std::set<std::string> ids;
  std::vector<std::string> on_demand;
  for (const InstanceRecord& i : after) {
    EXPECT_TRUE(ids.insert(i.id).second) << i.id << " recorded twice";
    if (i.market == Market::kOnDemand) on_demand.push_back(i.id);
  }
  EXPECT_EQ(on_demand, std::vector<std::string>{on_demand_id});
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  int launches = 0;
  for (const nlohmann::json& d : DetailsOf(*events, "deadline")) {
    launches += d.value("launch_on_demand", 0);
  }
  EXPECT_EQ(launches, 1);
  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_EQ(summary["deadline_met"], true) << summary;
  EXPECT_EQ(summary["on_demand_instances"], 1);
}

TEST_F(OnDemandEndToEnd, SpotGoneInOneZoneMovesTheJobToAnotherZoneNotOnDemand) {
  const std::string job = "e2e-zones";
  const std::string spec = WriteZonedJob(job, /*gone_h=*/4, "us-east-1b", "us-east-1", 500);
  std::vector<InstanceRecord> instances;
  ASSERT_NO_FATAL_FAILURE(RunToTheEnd(job, {"run", spec}, "run.log", &instances));
  auto store = Store();
  ASSERT_NE(store, nullptr);
  // The plan went to the cheaper zone; when its spot went, the takeover ran on spot in the other.
  int planned_in_a = 0, moved_to_b = 0;
  for (const InstanceRecord& i : instances) {
    if (i.role != launcher::Role::kWorker) continue;
    EXPECT_EQ(i.market, Market::kSpot) << i.id << " ran on-demand";
    if (i.reason == job::LaunchReason::kPlan) planned_in_a += i.zone == "us-east-1a";
    if (i.reason != job::LaunchReason::kPlan && i.zone == "us-east-1b") {
      ++moved_to_b;
      EXPECT_DOUBLE_EQ(i.price_per_hour, 0.30) << "the zone's own spot price";
    }
  }
  EXPECT_EQ(planned_in_a, 1);
  EXPECT_EQ(moved_to_b, 1);
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  const std::vector<nlohmann::json> moves = DetailsOf(*events, "move");
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0]["from"], "us-east-1a");
  EXPECT_EQ(moves[0]["to"], "us-east-1b");
  EXPECT_EQ(moves[0]["across_regions"], false);
  // A changeover (5 s) at $0.30/h; no copy within the region.
  EXPECT_NEAR(moves[0]["cost_usd"].get<double>(), 0.30 * 5 / 3600, 1e-9);
  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_EQ(summary["deadline_met"], true) << summary;
  EXPECT_EQ(summary["moves"], 1);
  EXPECT_EQ(summary["on_demand_instances"], 0);
  CliRun text = Cli({"status", job, "--data-dir", dir_.string()});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("Moves between zones: 1"));
  EXPECT_THAT(text.out, ::testing::HasSubstr("us-east-1a -> us-east-1b"));
  EXPECT_THAT(text.out, ::testing::ContainsRegex("zone +market"));
}

TEST_F(OnDemandEndToEnd, ACheaperZoneThatGetsSpotBackIsReturnedToWhenItPays) {
  // us-east-1a ($0.10/h) has no spot until trace hour 2: the plan's worker lands in us-east-1b
  // ($0.30/h). Once us-east-1a has spot again, the job moves its worker there: the saving over the
  // work left ($0.20/h for about 15 s) pays for the move's two changeovers (2 x 5 s at $0.10/h).
  const std::string job = "e2e-zones-return";
  const std::string spec =
      WriteZonedJob(job, "time_h,count\n0,0\n2,0\n2,1\n", 0.10, "us-east-1b", "us-east-1", 500);
  std::vector<InstanceRecord> instances;
  ASSERT_NO_FATAL_FAILURE(RunToTheEnd(job, {"run", spec}, "run.log", &instances));
  auto store = Store();
  ASSERT_NE(store, nullptr);
  int planned_in_b = 0, returned_to_a = 0;
  for (const InstanceRecord& i : instances) {
    if (i.role != launcher::Role::kWorker) continue;
    EXPECT_EQ(i.market, Market::kSpot) << i.id << " ran on-demand";
    if (i.reason == job::LaunchReason::kPlan) planned_in_b += i.zone == "us-east-1b";
    if (i.reason == job::LaunchReason::kZoneReturn) {
      EXPECT_EQ(i.zone, "us-east-1a");
      EXPECT_DOUBLE_EQ(i.price_per_hour, 0.10) << "the zone's own spot price";
      ++returned_to_a;
    }
  }
  EXPECT_EQ(planned_in_b, 1);
  EXPECT_EQ(returned_to_a, 1) << "returned once, not back and forth";
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  const std::vector<nlohmann::json> returns = DetailsOf(*events, "zone-return");
  ASSERT_EQ(returns.size(), 1u);
  EXPECT_EQ(returns[0]["from"], "us-east-1b");
  EXPECT_EQ(returns[0]["to"], "us-east-1a");
  const std::vector<nlohmann::json> done = DetailsOf(*events, "zone-return-done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0]["launched"].size(), 1u);
  EXPECT_EQ(done[0]["stopped"].size(), 1u) << "the worker in us-east-1b stopped";
  const std::vector<nlohmann::json> moves = DetailsOf(*events, "move");
  ASSERT_EQ(moves.size(), 1u);
  EXPECT_EQ(moves[0]["from"], "us-east-1b");
  EXPECT_EQ(moves[0]["to"], "us-east-1a");
  EXPECT_TRUE(DetailsOf(*events, "takeover").empty()) << "the stop is not a revocation";
  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_EQ(summary["deadline_met"], true) << summary;
  EXPECT_EQ(summary["moves"], 1);
  EXPECT_EQ(summary["revocations"], 0) << summary;
}

TEST_F(OnDemandEndToEnd, AMoveAcrossRegionsTheDeadlineCannotAffordRunsOnDemandInstead) {
  // The other zone is in another region and the checkpoint (50 GB at 100 MB/s: 500 s) cannot
  // be copied within the slack: the deadline guard runs on-demand where the job is.
  const std::string job = "e2e-zones-tight";
  const std::string spec = WriteZonedJob(job, /*gone_h=*/4, "us-west-2a", "us-west-2", 50000);
  std::vector<InstanceRecord> instances;
  ASSERT_NO_FATAL_FAILURE(RunToTheEnd(job, {"run", spec}, "run.log", &instances));
  auto store = Store();
  ASSERT_NE(store, nullptr);
  int on_demand = 0;
  for (const InstanceRecord& i : instances) {
    if (i.role != launcher::Role::kWorker) continue;
    EXPECT_NE(i.zone, "us-west-2a") << i.id << " moved across regions";
    on_demand += i.market == Market::kOnDemand;
  }
  EXPECT_EQ(on_demand, 1);
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  EXPECT_TRUE(DetailsOf(*events, "move").empty());
}

TEST_F(OnDemandEndToEnd, KilledRightAfterAMoveResumesWithoutASecondLaunch) {
  const std::string job = "e2e-zones-resume";
  const std::string spec = WriteZonedJob(job, /*gone_h=*/4, "us-east-1b", "us-east-1", 500);
  auto gateway = StartGateway({"run", spec}, "run.log");
  auto store = Store();
  ASSERT_NE(store, nullptr);
  const std::string moved = FirstInstance(job, [](const InstanceRecord& r) {
    return r.reason != job::LaunchReason::kPlan && r.zone == "us-east-1b";
  });
  ASSERT_FALSE(moved.empty()) << "no takeover in the other zone within 40 s";
  gateway->Kill();  // kill -9, right after the move's launch
  std::vector<InstanceRecord> after;
  ASSERT_NO_FATAL_FAILURE(RunToTheEnd(job, {"run", "--resume", job}, "resume.log", &after));
  std::set<std::string> ids;
  int in_b = 0;
  for (const InstanceRecord& i : after) {
    EXPECT_TRUE(ids.insert(i.id).second) << i.id << " recorded twice";
    in_b += i.role == launcher::Role::kWorker && i.zone == "us-east-1b";
  }
  EXPECT_EQ(in_b, 1) << "the move was launched twice";
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  EXPECT_EQ(DetailsOf(*events, "move").size(), 1u);
}

}  // namespace
}  // namespace spotdnn::gateway
