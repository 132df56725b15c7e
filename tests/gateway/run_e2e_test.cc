// `spotdnn run` end to end, everything as separate processes on 127.0.0.1: `spotdnn up` starts
// the four services and the metadata emulator; the gateway runs a job on the local provider
// whose workers are spotdnn-sim-worker (trains nothing, reports steps to the profiler at the pace
// the plan predicts); a worker is revoked mid-run with a spot notice on its metadata endpoint.
// The checks read the gateway's job store and the provider's own records.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/local_provider.h"
#include "services/gateway/cli/job_output.h"
#include "services/gateway/job/job_run.h"
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
using job::RevocationRecord;
using testing_util::Child;

class RunEndToEnd : public testing_util::LocalStackTest {
 protected:
  void SetUp() override {
    ASSERT_NO_FATAL_FAILURE(
        StartStack(absl::StrCat("spotdnn-run-e2e-", getpid(), "-",
                                ::testing::UnitTest::GetInstance()->current_test_info()->name())));
    ASSERT_THAT(up_.out, ::testing::HasSubstr("\"detector\":\"127.0.0.1:"));
  }

  // Writes the job spec: ResNet-110 (the prototype's profile), loss 2.6 within 60 s on the
  // prototype's catalog — the exact plan is 5 p2.8xlarge workers for a predicted 38 s.
  std::string WriteJob(const std::string& name) {
    const fs::path path = dir_ / (name + ".json");
    std::ofstream(path) << nlohmann::json{{"name", name},
                                          {"workload", {{"profile", "resnet110"}}},
                                          {"slo", {{"loss", 2.6}, {"deadline", "60s"}}},
                                          {"catalog", "aws-spotdnn-prototype"},
                                          {"provider", {{"name", "local"}}},
                                          {"quotas", {{"p2.8xlarge", 5}}},
                                          {"commands",
                                           {{"worker", bin_ + "/spotdnn-sim-worker"},
                                            {"parameter_server", bin_ + "/spotdnn-sim-worker"}}}}
                               .dump(2);
    return path.string();
  }

  std::unique_ptr<Child> StartGateway(std::vector<std::string> args, const std::string& log) {
    std::vector<std::string> argv = {bin_ + "/spotdnn"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"--json", "--data-dir", dir_.string()});
    return std::make_unique<Child>(argv, (dir_ / log).string());
  }

  std::unique_ptr<JobStore> Store() {
    auto store = JobStore::Open((dir_ / "jobs.db").string());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Waits until the job runs its 5 planned workers and they have reported `iterations`.
  void WaitUntilTraining(const std::string& job, double iterations) {
    auto store = Store();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 600; ++i) {
      auto record = store->GetJob(job);
      if (record.ok() && record->state == job::JobState::kRunning &&
          record->iterations_done >= iterations) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    FAIL() << "job " << job << " did not start training within 60 s";
  }

  // Revokes the plan's worker with index 1 with a spot notice `notice` ahead, as a cloud would;
  // returns its id. The stop happens in the background; `revoked_end_` is when it came.
  std::string RevokeAWorker(const std::string& job, absl::Duration notice) {
    auto running = provider_->Describe(job);
    EXPECT_TRUE(running.ok());
    std::string victim;
    for (const auto& i : *running) {
      if (i.role == launcher::Role::kWorker && i.index == 1) victim = i.id;
    }
    EXPECT_FALSE(victim.empty());
    revoked_at_ = absl::Now();
    absl::Status s = provider_->Revoke(victim, notice);
    EXPECT_TRUE(s.ok()) << s;
    return victim;
  }

  static std::vector<nlohmann::json> JsonLines(const fs::path& path) {
    std::vector<nlohmann::json> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object()) out.push_back(j);
    }
    return out;
  }

  // The checks both tests share: the job finished, the notice reached the gateway through the
  // detector, a re-plan happened, the takeover ran before the revoked instance stopped, nothing
  // is left running, and the summary agrees with the store.
  void CheckRevocationHandled(const std::string& job, const std::string& victim) {
    auto store = Store();
    ASSERT_NE(store, nullptr);
    auto record = store->GetJob(job);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
    EXPECT_GE(record->iterations_done, record->target_iterations);

    // The notice came through the detector: the event log holds the detector's event for the
    // victim, with the emulator's instance-action in its detail.
    auto events = store->Events(job);
    ASSERT_TRUE(events.ok());
    bool notice_logged = false;
    for (const JobEventRecord& e : *events) {
      notice_logged |= e.kind == "notice" && absl::StrContains(e.detail, victim) &&
                       absl::StrContains(e.detail, "instance-action");
    }
    EXPECT_TRUE(notice_logged);

    auto revocations = store->Revocations(job);
    ASSERT_TRUE(revocations.ok());
    ASSERT_EQ(revocations->size(), 1u);
    const RevocationRecord& r = revocations->front();
    EXPECT_EQ(r.instance_id, victim);
    EXPECT_EQ(r.kind, "notice");
    EXPECT_EQ(r.status, job::RevocationStatus::kLaunched) << r.detail;
    EXPECT_GT(r.replanned_ms, 0);
    EXPECT_FALSE(r.replan_json.empty());
    EXPECT_GE(r.cloud_notice_ms, absl::ToUnixMillis(revoked_at_));
    EXPECT_GE(r.takeover_launched_ms, r.replanned_ms);
    const std::vector<std::string> takeover =
        absl::StrSplit(r.takeover_ids, ',', absl::SkipEmpty());
    ASSERT_FALSE(takeover.empty());

    // The revoked instance's own record (the provider wrote when it stopped it) and the store's.
    auto instances = store->Instances(job);
    ASSERT_TRUE(instances.ok());
    std::map<std::string, InstanceRecord> by_id;
    for (const InstanceRecord& i : *instances) by_id[i.id] = i;
    ASSERT_EQ(by_id.count(victim), 1u);
    EXPECT_GT(by_id[victim].ended_ms, 0);
    EXPECT_EQ(r.ended_ms, by_id[victim].ended_ms);
    EXPECT_LT(r.takeover_launched_ms, r.ended_ms)
        << "the takeover must run before the revoked instance is gone";
    for (const std::string& id : takeover) {
      ASSERT_EQ(by_id.count(id), 1u) << id;
      EXPECT_EQ(by_id[id].reason, job::LaunchReason::kTakeover);
      EXPECT_LT(by_id[id].launched_ms, r.ended_ms) << id;
    }
    for (const auto& [id, i] : by_id) EXPECT_EQ(i.state, job::InstanceStatus::kEnded) << id;
    auto left = provider_->Describe(job);
    ASSERT_TRUE(left.ok());
    for (const auto& i : *left) {
      EXPECT_EQ(i.state, launcher::InstanceState::kTerminated) << i.id << " is still running";
    }

    // The summary (`spotdnn status --json`) agrees with the store.
    CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
    ASSERT_EQ(status.code, 0) << status.err;
    nlohmann::json doc = nlohmann::json::parse(status.out);
    const nlohmann::json& summary = doc["summary"];
    EXPECT_EQ(summary["state"], "finished");
    // spotdnn-sim-worker reports no loss, so none is claimed: the loss and whether
    // it reached the target are unknown, and so is the SLO (the deadline and budget were met).
    EXPECT_TRUE(summary["final_loss"].is_null()) << summary;
    EXPECT_TRUE(summary["loss_reached"].is_null()) << summary;
    EXPECT_TRUE(summary["slo_met"].is_null()) << summary;
    EXPECT_EQ(summary["deadline_met"], true);
    CliRun text = Cli({"status", job, "--data-dir", dir_.string()});
    ASSERT_EQ(text.code, 0) << text.err;
    EXPECT_THAT(text.out, ::testing::HasSubstr("Target reached: unknown"));
    EXPECT_THAT(text.out, ::testing::HasSubstr("SLO met: unknown"));
    EXPECT_THAT(text.out, ::testing::Not(::testing::HasSubstr("Target reached: yes")));
    // --plot of a job without losses prints the status and draws its progress,
    // its cost and its revocation, saying the loss is missing.
    const std::string svg_path = (dir_ / "plot.svg").string();
    CliRun plot = Cli({"status", job, "--plot", svg_path, "--data-dir", dir_.string()});
    ASSERT_EQ(plot.code, 0) << plot.err;
    EXPECT_THAT(plot.out, ::testing::HasSubstr("Job " + job + ": finished"));
    EXPECT_THAT(plot.out, ::testing::HasSubstr("Chart written to " + svg_path));
    std::stringstream svg;
    svg << std::ifstream(svg_path).rdbuf();
    EXPECT_THAT(svg.str(), ::testing::HasSubstr("class=\"iterations\""));
    EXPECT_THAT(svg.str(), ::testing::HasSubstr("revoked " + victim));
    EXPECT_THAT(svg.str(), ::testing::HasSubstr("no loss"));
    EXPECT_THAT(svg.str(), ::testing::HasSubstr("cost: $"));
    EXPECT_EQ(summary["instances_launched"], instances->size());
    EXPECT_EQ(summary["takeover_instances"], takeover.size());
    EXPECT_EQ(summary["revocations_handled"], 1);
    EXPECT_DOUBLE_EQ(summary["actual_time_s"].get<double>(),
                     (record->finished_ms - record->started_ms) / 1000.0);
    EXPECT_DOUBLE_EQ(summary["iterations_done"].get<double>(), record->iterations_done);
    EXPECT_DOUBLE_EQ(summary["predicted_time_s"].get<double>(), record->predicted_time_s);
    // After the re-plan the prediction is the current plan's, as its iterations are: the time
    // until the re-plan, then the re-plan's time (not the first plan's time beside the re-plan's
    // iterations).
    const nlohmann::json replan = nlohmann::json::parse(r.replan_json);
    const double replan_time = replan["plan"].value("time_s", 0.0);
    ASSERT_GT(replan_time, 0) << r.replan_json;
    EXPECT_NEAR(summary["predicted_time_s"].get<double>(),
                (r.replanned_ms - record->started_ms) / 1000.0 + replan_time, 0.05);
    EXPECT_DOUBLE_EQ(summary["target_iterations"].get<double>(), record->target_iterations);
    double cost = 0;
    for (const InstanceRecord& i : *instances) {
      cost += i.price_per_hour * (i.ended_ms - i.launched_ms) / 3.6e6;
    }
    EXPECT_NEAR(summary["actual_cost_usd"].get<double>(), cost, 1e-12);
    const nlohmann::json& listed = summary["revocation_list"][0];
    EXPECT_EQ(listed["instance"], victim);
    EXPECT_EQ(listed["takeover_before_revoked_ended"], true);
    EXPECT_DOUBLE_EQ(listed["notice_to_takeover_running_s"].get<double>(),
                     (r.takeover_launched_ms - r.cloud_notice_ms) / 1000.0);

    // The figures the closing note reports.
    const double from_revoke = (r.takeover_launched_ms - absl::ToUnixMillis(revoked_at_)) / 1000.0;
    std::cout << "[measured] " << job << ": notice published -> takeover running " << from_revoke
              << " s; detector saw the notice -> takeover running "
              << listed["notice_to_takeover_running_s"] << " s; -> first takeover step reported "
              << listed.value("notice_to_takeover_training_s", -1.0) << " s; predicted "
              << summary["predicted_time_s"] << " s, actual " << summary["actual_time_s"]
              << " s; cost predicted " << summary["predicted_cost_usd"] << ", actual "
              << summary["actual_cost_usd"] << std::endl;
    RecordProperty("notice_to_takeover_running_ms",
                   static_cast<int>(r.takeover_launched_ms - absl::ToUnixMillis(revoked_at_)));
  }

  absl::Time revoked_at_;
};

TEST_F(RunEndToEnd, AnIterationsTargetRunsUntilTheWorkersStepsReachIt) {
  const fs::path path = dir_ / "e2e-steps.json";
  std::ofstream(path) << nlohmann::json{{"name", "e2e-steps"},
                                        {"workload", {{"profile", "resnet110"}}},
                                        {"slo", {{"iterations", 20}, {"deadline", "30s"}}},
                                        {"catalog", "aws-spotdnn-prototype"},
                                        {"provider", {{"name", "local"}}},
                                        {"commands",
                                         {{"worker", bin_ + "/spotdnn-sim-worker"},
                                          {"parameter_server", bin_ + "/spotdnn-sim-worker"}}}}
                             .dump(2);
  auto gateway = StartGateway({"run", path.string()}, "steps.log");
  std::optional<int> code = gateway->Wait(std::chrono::seconds(110));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  EXPECT_EQ(*code, 0);
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob("e2e-steps");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
  EXPECT_EQ(record->target_iterations, 20);  // the SLO's iterations, not a loss's j
  EXPECT_GE(record->iterations_done, 20);
  EXPECT_LE(record->predicted_time_s, 30);
}

// A worker that is only a shell loop printing SPOTDNN_SAMPLE lines (no gRPC, no library): the
// instance wrapper streams its lines to the profiler, so the job sees its progress and finishes.
TEST_F(RunEndToEnd, APlainScriptThatOnlyPrintsSamplesRunsToItsTarget) {
  const fs::path path = dir_ / "e2e-script.json";
  const std::string worker =
      "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); echo \"SPOTDNN_SAMPLE step=$i "
      "iteration_time_s=0.05 loss=1.5 batch_size=128\"; sleep 0.05; done";
  std::ofstream(path) << nlohmann::json{{"name", "e2e-script"},
                                        {"workload", {{"profile", "resnet110"}}},
                                        {"slo", {{"iterations", 60}, {"deadline", "60s"}}},
                                        {"catalog", "aws-spotdnn-prototype"},
                                        {"provider", {{"name", "local"}}},
                                        {"commands",
                                         {{"worker", worker}, {"parameter_server", "sleep 600"}}}}
                             .dump(2);
  auto gateway = StartGateway({"run", path.string()}, "script.log");
  std::optional<int> code = gateway->Wait(std::chrono::seconds(110));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job (a stall?)";
  EXPECT_EQ(*code, 0);
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob("e2e-script");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
  EXPECT_GE(record->iterations_done, 60);
  EXPECT_DOUBLE_EQ(record->loss, 1.5);  // the script's loss, as its lines said
  auto instances = store->Instances("e2e-script");
  ASSERT_TRUE(instances.ok());
  for (const InstanceRecord& i : *instances) {
    EXPECT_EQ(i.state, job::InstanceStatus::kEnded) << i.id;
  }
}

// A print-only script whose loss falls more slowly than the profile predicts (the job's loss
// 3.0 - 0.01 a second since the test started: 2.6 about 40 s in, whatever the cluster, where the
// plan predicted 38 s for 49 global steps) is not stopped at a multiple of the prediction while
// the loss falls and the deadline (120 s) is far: it runs to its target. Its progress is shown
// against the job's current forecast (never "N/M" with N > M at 100%), with the cost so far and
// never the same line twice.
TEST_F(RunEndToEnd, ASlowerLossThanPredictedRunsOnWhileTheDeadlineCanBeMet) {
  const fs::path path = dir_ / "e2e-slow.json";
  const fs::path t0 = dir_ / "t0";
  std::ofstream(t0) << absl::ToUnixMillis(absl::Now());
  const std::string worker = absl::StrCat(
      "t0=$(cat ", t0.string(),
      "); i=0; while [ $i -lt 100000 ]; do i=$((i+1)); "
      "l=$((3000-($(date +%s%3N)-t0)/100)); [ $l -lt 100 ] && l=100; "
      "echo \"SPOTDNN_SAMPLE step=$i iteration_time_s=0.05 loss=$((l/1000)).$(printf %03d "
      "$((l%1000))) batch_size=128\"; sleep 0.05; done");
  std::ofstream(path) << nlohmann::json{{"name", "e2e-slow"},
                                        {"workload", {{"profile", "resnet110"}}},
                                        {"slo", {{"loss", 2.6}, {"deadline", "120s"}}},
                                        {"catalog", "aws-spotdnn-prototype"},
                                        {"provider", {{"name", "local"}}},
                                        {"commands",
                                         {{"worker", worker}, {"parameter_server", "sleep 600"}}}}
                             .dump(2);
  auto gateway = StartGateway({"run", path.string()}, "slow.log");
  std::optional<int> code = gateway->Wait(std::chrono::seconds(110));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob("e2e-slow");
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
  EXPECT_EQ(*code, 0);
  EXPECT_LE(record->loss, 2.6);
  spotdnn::v1::Plan plan;
  ASSERT_TRUE(job::FromStoredJson(record->plan_json, "plan", &plan).ok());
  EXPECT_GT(record->iterations_done, 3 * plan.prediction().normalized_iterations())
      << "the test needs a loss slower than 3x the plan's prediction";
  EXPECT_FALSE(record->worker_losses.empty());  // the raw last losses beside the smoothed one

  std::vector<nlohmann::json> progress;
  for (const auto& e : JsonLines(dir_ / "slow.log")) {
    if (e.value("event", "") == "progress") progress.push_back(e);
  }
  ASSERT_GE(progress.size(), 3u);
  bool repredicted = false;
  for (size_t i = 0; i < progress.size(); ++i) {
    const nlohmann::json& p = progress[i];
    const double done = p["iterations_done"].get<double>();
    if (p["predicted_iterations"].is_number()) {
      // The end shown is the job's current forecast, never one the job has passed.
      EXPECT_GE(p["predicted_iterations"].get<double>(), done * 0.999) << p;
      repredicted |=
          p.value("predicted_by", "") == "forecast" && p.value("forecast_source", "") == "refit";
    }
    EXPECT_GE(p["cost_usd"].get<double>(), 0) << p;
    if (i > 0) {
      EXPECT_NE(p["iterations_done"], progress[i - 1]["iterations_done"])
          << "the same progress shown twice: " << p;
    }
  }
  EXPECT_TRUE(repredicted) << "no progress line counted against a refit of the measured loss";
  EXPECT_GT(progress.back()["cost_usd"].get<double>(), 0);
  // The summary names the loss's smoothing and the raw values.
  CliRun status = Cli({"status", "e2e-slow", "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_EQ(summary["loss_reached"], true);
  EXPECT_THAT(summary["loss_smoothing"].get<std::string>(), ::testing::HasSubstr("average"));
  EXPECT_FALSE(summary["worker_last_losses"].empty());
}

// Profiling is a phase of the job. A spec with a profiling run (the job's own
// command: a shell loop that prints SPOTDNN_SAMPLE lines and stops after $SPOTDNN_MAX_STEPS,
// 0.1 s a step) is stored from its start: `spotdnn jobs` and `status` list it as profiling while
// the run goes, the run prints its progress with an ETA, its time and cost are in the summary
// (text and --json) and in the job's cost, and the deadline is counted from the start of the
// profiling: the plan and the progress lines get the deadline less the profiling's time.
TEST_F(RunEndToEnd, ProfilingIsAPhaseOfTheJobWithItsProgressTimeAndCost) {
  const std::string job = "e2e-profiled";
  const double deadline_s = 150;
  const fs::path path = dir_ / "profiled.json";
  const std::string worker =
      "n=${SPOTDNN_MAX_STEPS:-100000}; i=0; while [ $i -lt $n ]; do i=$((i+1)); "
      "echo \"SPOTDNN_SAMPLE step=$i iteration_time_s=0.1 batch_size=128\"; sleep 0.1; done";
  std::ofstream(path) << nlohmann::json{
      {"name", job},
      {"workload",
       {{"profile", "e2e-profiled-fit"},
        {"profiling",
         {{"runs", {{{"cluster", {{"p2.xlarge", 1}}}, {"steps", 80}}}}, {"base", "resnet110"}}}}},
      {"slo", {{"iterations", 30}, {"deadline", absl::StrCat(deadline_s, "s")}}},
      {"catalog", "aws-spotdnn-prototype"},
      {"provider", {{"name", "local"}}},
      {"commands",
       {{"worker", worker},
        {"parameter_server",
         "sleep 600"}}}}.dump(2);
  const absl::Time begun = absl::Now();
  auto gateway = StartGateway({"run", path.string()}, "profiled.log");

  // While the profiling run goes: the job is stored, in state profiling, with its time and cost
  // so far, and `spotdnn jobs` (the binary, as a user runs it) and `status` show it so.
  auto store = Store();
  ASSERT_NE(store, nullptr);
  bool seen_profiling = false;
  for (int i = 0; i < 600 && !seen_profiling; ++i) {
    auto record = store->GetJob(job);
    seen_profiling =
        record.ok() && record->state == job::JobState::kProfiling && record->profiling_cost_usd > 0;
    if (!seen_profiling) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(seen_profiling) << "the job was not stored as profiling within 60 s";
  const std::string jobs_out = (dir_ / "jobs.out").string();
  ASSERT_EQ(std::system(absl::StrCat(bin_, "/spotdnn jobs --data-dir ", dir_.string(), " > ",
                                     jobs_out, " 2>&1")
                            .c_str()),
            0);
  std::stringstream listed;
  listed << std::ifstream(jobs_out).rdbuf();
  EXPECT_THAT(listed.str(), ::testing::HasSubstr("profiling"));
  EXPECT_THAT(listed.str(), ::testing::ContainsRegex(job + " +profiling "));
  CliRun during = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(during.code, 0) << during.err;
  const nlohmann::json during_summary = nlohmann::json::parse(during.out)["summary"];
  EXPECT_EQ(during_summary["state"], "profiling") << during_summary;
  EXPECT_GT(during_summary["profiling_s"].get<double>(), 0) << during_summary;
  EXPECT_GT(during_summary["profiling_cost_usd"].get<double>(), 0) << during_summary;
  EXPECT_TRUE(during_summary["on_track"].is_null()) << during_summary;  // no plan yet
  CliRun during_text = Cli({"status", job, "--data-dir", dir_.string()});
  ASSERT_EQ(during_text.code, 0) << during_text.err;
  EXPECT_THAT(during_text.out, ::testing::HasSubstr("Job " + job + ": profiling"));
  EXPECT_THAT(during_text.out, ::testing::HasSubstr("Status: profiling ("));
  EXPECT_THAT(during_text.out, ::testing::HasSubstr("profiling (before; cost included)"));
  EXPECT_THAT(during_text.out, ::testing::Not(::testing::HasSubstr("on track")));
  auto still = store->GetJob(job);
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(still->state, job::JobState::kProfiling)
      << "the profiling ended before `jobs` ran: the test cannot tell what it listed";

  std::optional<int> code = gateway->Wait(std::chrono::seconds(150));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  EXPECT_EQ(*code, 0);
  const double wall_s = absl::ToDoubleSeconds(absl::Now() - begun);
  auto record = store->GetJob(job);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;

  // The profiling run's progress: launched, in progress (steps of all, time, cost, an ETA), done.
  std::vector<nlohmann::json> runs, progress;
  bool launched = false, done = false, fitted = false;
  for (const auto& e : JsonLines(dir_ / "profiled.log")) {
    if (e.value("event", "") == "progress") progress.push_back(e);
    if (e.value("event", "") != "profiling") continue;
    fitted |= e.value("profile", "") == "e2e-profiled-fit";
    if (!e.contains("run")) continue;
    EXPECT_EQ(e["run"], job + "-profiling-1");
    if (e["in_progress"] == true) {
      runs.push_back(e);
    } else {
      (e["done"] == true ? done : launched) = true;
    }
  }
  EXPECT_TRUE(launched);
  EXPECT_TRUE(done);
  EXPECT_TRUE(fitted);
  ASSERT_FALSE(runs.empty()) << "no progress line while profiling";
  bool with_eta = false;
  for (size_t i = 0; i < runs.size(); ++i) {
    const nlohmann::json& r = runs[i];
    EXPECT_EQ(r["steps_total"], 80) << r;  // 80 steps x 1 worker
    EXPECT_LE(r["steps_done"].get<int>(), 80) << r;
    EXPECT_GT(r["elapsed_s"].get<double>(), 0) << r;
    EXPECT_GT(r["cost_usd"].get<double>(), 0) << r;
    if (r["eta_s"].is_number()) {
      with_eta = true;
      EXPECT_GT(r["steps_done"].get<int>(), 0) << r;
      EXPECT_GE(r["eta_s"].get<double>(), 0) << r;
    }
    if (i > 0) {
      EXPECT_GE(r["elapsed_s"].get<double>(), runs[i - 1]["elapsed_s"].get<double>());
      EXPECT_GE(r["cost_usd"].get<double>(), runs[i - 1]["cost_usd"].get<double>());
    }
  }
  EXPECT_TRUE(with_eta) << "no profiling progress line had an ETA";
  // The same lines as text (the first progress event, as `run` without --json prints it).
  job::ProfilingEvent first{.run = runs.front()["run"],
                            .steps = 80,
                            .in_progress = true,
                            .steps_done = runs.front()["steps_done"].get<int64_t>(),
                            .steps_total = 80,
                            .elapsed_s = runs.front()["elapsed_s"].get<double>(),
                            .cost_usd = runs.front()["cost_usd"].get<double>()};
  if (runs.front()["eta_s"].is_number()) first.eta_s = runs.front()["eta_s"].get<double>();
  EXPECT_THAT(EventLine({.job_id = job, .what = first}),
              ::testing::ContainsRegex("profiling run " + job + "-profiling-1: [0-9]+/80 steps"));
  if (first.eta_s) {
    EXPECT_THAT(EventLine({.job_id = job, .what = first}), ::testing::HasSubstr(" left"));
  }

  // The profiling's time and cost are the job's: stored, in the summary, in the total cost.
  EXPECT_GT(record->profiling_started_ms, 0);
  EXPECT_LE(record->profiling_started_ms, record->started_ms);
  EXPECT_GT(record->profiling_s, 0.8);  // 80 steps at 0.1 s at least
  EXPECT_LT(record->profiling_s, wall_s);
  EXPECT_GE((record->started_ms - record->profiling_started_ms) / 1000.0,
            record->profiling_s - 0.01);
  EXPECT_GT(record->profiling_cost_usd, 0);
  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_DOUBLE_EQ(summary["profiling_s"].get<double>(), record->profiling_s);
  EXPECT_DOUBLE_EQ(summary["profiling_cost_usd"].get<double>(), record->profiling_cost_usd);
  auto instances = store->Instances(job);
  ASSERT_TRUE(instances.ok());
  double cost = 0;
  for (const InstanceRecord& i : *instances) {
    cost += i.price_per_hour * (i.ended_ms - i.launched_ms) / 3.6e6;
  }
  EXPECT_NEAR(summary["actual_cost_usd"].get<double>(), cost + record->profiling_cost_usd, 1e-12);
  EXPECT_EQ(summary["deadline_met"], true);
  CliRun text = Cli({"status", job, "--data-dir", dir_.string()});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_THAT(text.out, ::testing::HasSubstr("profiling (before; cost included)"));
  CliRun after = Cli({"jobs", "--data-dir", dir_.string()});
  ASSERT_EQ(after.code, 0) << after.err;
  EXPECT_THAT(after.out, ::testing::ContainsRegex(job + " +finished "));

  // The deadline runs from the profiling's start: each progress line's time to the deadline is
  // the deadline less the profiling's time and the run's, and the plan had what was left.
  ASSERT_FALSE(progress.empty());
  for (const nlohmann::json& p : progress) {
    ASSERT_TRUE(p["deadline_in_s"].is_number()) << p;
    EXPECT_NEAR(p["deadline_in_s"].get<double>() + p["elapsed_s"].get<double>(),
                deadline_s - record->profiling_s, 1e-3)
        << p;
  }
  EXPECT_LE(record->predicted_time_s, deadline_s - record->profiling_s);
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> kinds;
  for (const JobEventRecord& e : *events) kinds.push_back(e.kind);
  EXPECT_THAT(kinds, ::testing::IsSupersetOf({"profiling", "profiled"}));
  std::cout << "[measured] " << job << ": profiling " << record->profiling_s << " s, $"
            << record->profiling_cost_usd << "; " << runs.size() << " profiling progress lines; "
            << progress.size() << " training progress lines" << std::endl;
}

TEST_F(RunEndToEnd, RevocationIsTakenOverBeforeTheInstanceGoes) {
  const std::string spec = WriteJob("e2e-revoke");
  auto gateway = StartGateway({"run", spec}, "run.log");
  WaitUntilTraining("e2e-revoke", 5);
  // Revoked first, early in the job, so that the instance goes (6 s on; the takeover runs within
  // about 1 s) while the job still runs, on a busy machine too; the check of a second gateway
  // comes after.
  const std::string victim = RevokeAWorker("e2e-revoke", absl::Seconds(6));
  // A second gateway on the same job is refused while this one runs it.
  CliRun second = Cli({"run", "--resume", "e2e-revoke", "--data-dir", dir_.string()});
  EXPECT_NE(second.code, 0);
  EXPECT_THAT(second.err, ::testing::HasSubstr("is being run by another gateway (pid "));
  std::optional<int> code = gateway->Wait(std::chrono::seconds(110));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  EXPECT_EQ(*code, 0);
  provider_->WaitForRevocations();

  std::vector<std::string> kinds;
  for (const auto& e : JsonLines(dir_ / "run.log")) kinds.push_back(e.value("event", ""));
  for (const char* kind : {"planned", "launched", "progress", "notice", "replanned", "takeover",
                           "ended", "finished"}) {
    EXPECT_THAT(kinds, ::testing::Contains(kind)) << "no " << kind << " event in the --json output";
  }
  // One job, one model: the plan's global steps and the first forecast's are the same number,
  // and the first progress lines count against it.
  std::optional<double> planned, forecast, first_progress;
  for (const auto& e : JsonLines(dir_ / "run.log")) {
    const std::string kind = e.value("event", "");
    if (kind == "planned" && !planned) planned = e["target_iterations"].get<double>();
    if (kind == "forecast" && !forecast) forecast = e["iterations_p50"].get<double>();
    if (kind == "progress" && !first_progress && e["predicted_iterations"].is_number()) {
      first_progress = e["predicted_iterations"].get<double>();
    }
  }
  ASSERT_TRUE(planned && forecast && first_progress);
  EXPECT_NEAR(*forecast, *planned, 1) << "the plan and the first forecast disagree";
  EXPECT_NEAR(*first_progress, *planned, 1) << "the first progress line counts against another";
  CheckRevocationHandled("e2e-revoke", victim);
}

// A revocation near the target, on a job whose loss falls more slowly (in global steps) than its
// profile says: the re-plan starts from the job's measured progress (its forecast), not from where
// the profile's model says the loss is by now, and the revocation is handled (a takeover, or a
// logged decision not to replace). The workers follow loss = 1300 / (j + 500) + 2 at global step
// j, 2.6 at step 1667 (about 17 s at 100 steps a second); the profile's eq. 3 put 2.6 at 49.
TEST_F(RunEndToEnd, ARevocationNearTheTargetIsHandled) {
  const std::string job = "e2e-near";
  const fs::path path = dir_ / "near.json";
  const std::string worker = bin_ +
                             "/spotdnn-sim-worker --iteration_time_s=0.05 "
                             "--loss_curve=1300,500,2 --loss_noise=0.002";
  std::ofstream(path) << nlohmann::json{{"name", job},
                                        {"workload", {{"profile", "resnet110"}}},
                                        {"slo", {{"loss", 2.6}, {"deadline", "90s"}}},
                                        {"catalog", "aws-spotdnn-prototype"},
                                        {"provider", {{"name", "local"}}},
                                        {"quotas", {{"p2.8xlarge", 5}}},
                                        {"commands",
                                         {{"worker", worker},
                                          {"parameter_server", bin_ + "/spotdnn-sim-worker"}}}}
                             .dump(2);
  auto gateway = StartGateway({"run", path.string()}, "near.log");
  WaitUntilTraining(job, 1000);  // loss about 2.87
  const std::string victim = RevokeAWorker(job, absl::Seconds(10));
  std::optional<int> code = gateway->Wait(std::chrono::seconds(110));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  provider_->WaitForRevocations();
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob(job);
  ASSERT_TRUE(record.ok()) << record.status();
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  std::string log;
  for (const JobEventRecord& e : *events) {
    absl::StrAppend(&log, e.at_ms - record->started_ms, " ms ", e.kind, ": ",
                    e.detail.substr(0, 300), "\n");
  }
  SCOPED_TRACE(log);
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
  EXPECT_EQ(*code, 0);
  auto revocations = store->Revocations(job);
  ASSERT_TRUE(revocations.ok());
  ASSERT_EQ(revocations->size(), 1u);
  const RevocationRecord& r = revocations->front();
  EXPECT_EQ(r.instance_id, victim);
  EXPECT_TRUE(r.status == job::RevocationStatus::kLaunched ||
              r.status == job::RevocationStatus::kNoneNeeded)
      << "status " << static_cast<int>(r.status) << ": " << r.detail;
  if (r.status == job::RevocationStatus::kNoneNeeded) {
    EXPECT_THAT(r.detail, ::testing::HasSubstr("not replaced: "));
  }
  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_EQ(summary["revocations_handled"], 1) << summary;
  EXPECT_EQ(summary["target_reached"], true) << summary;
  EXPECT_EQ(summary["target_kind"], "loss") << summary;
  std::cout << "[measured] " << job << ": revocation " << r.detail << "; finished at "
            << record->iterations_done << " global steps in "
            << (record->finished_ms - record->started_ms) / 1000.0 << " s" << std::endl;
}

TEST_F(RunEndToEnd, KilledGatewayResumesWithoutLaunchingTwice) {
  // The longest name a job may have (64 characters): its launch tokens ("NAME-w-p2.8xlarge", ...)
  // are longer than a cloud's client token may be, so they are hashed, and the resumed gateway
  // must ask with the same ones.
  const std::string job = "e2e-resume-" + std::string(53, 'x');
  ASSERT_EQ(job.size(), 64u);
  const std::string spec = WriteJob(job);
  auto gateway = StartGateway({"run", spec}, "run.log");
  WaitUntilTraining(job, 3);
  // A healthy running job is on track or behind, driven by its
  // gateway, not "SLO met: NO"; --plot prints the status too.
  CliRun healthy =
      Cli({"status", job, "--plot", (dir_ / "mid.svg").string(), "--data-dir", dir_.string()});
  ASSERT_EQ(healthy.code, 0) << healthy.err;
  EXPECT_THAT(healthy.out, ::testing::HasSubstr("Job " + job + ": running"));
  EXPECT_THAT(healthy.out, ::testing::ContainsRegex("Status: running, (on track|behind)"));
  EXPECT_THAT(healthy.out, ::testing::HasSubstr("Driven by gateway pid "));
  EXPECT_THAT(healthy.out, ::testing::Not(::testing::HasSubstr("SLO met: NO")));
  EXPECT_THAT(healthy.out, ::testing::Not(::testing::HasSubstr("Target reached: NO")));
  gateway->Kill();  // kill -9, mid-job

  // The job is shown as having no gateway, with the command to resume it.
  CliRun orphan = Cli({"status", job, "--data-dir", dir_.string()});
  ASSERT_EQ(orphan.code, 0) << orphan.err;
  EXPECT_THAT(orphan.out, ::testing::HasSubstr("No gateway is driving it"));
  EXPECT_THAT(orphan.out, ::testing::HasSubstr("`spotdnn run --resume " + job + "`"));
  CliRun orphan_json = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(orphan_json.code, 0) << orphan_json.err;
  const nlohmann::json gateway_json = nlohmann::json::parse(orphan_json.out)["gateway"];
  EXPECT_EQ(gateway_json["driven"], false) << gateway_json;
  EXPECT_EQ(gateway_json["resume"], "spotdnn run --resume " + job);
  CliRun listed = Cli({"jobs", "--data-dir", dir_.string()});
  EXPECT_THAT(listed.out, ::testing::HasSubstr("running (no gateway)"));

  // The instances outlive the gateway, as cloud instances do.
  auto running = provider_->Describe(job);
  ASSERT_TRUE(running.ok());
  std::set<std::string> planned;
  for (const auto& i : *running) {
    EXPECT_EQ(i.state, launcher::InstanceState::kRunning) << i.id;
    planned.insert(i.id);
  }
  ASSERT_EQ(planned.size(), 6u);  // 1 parameter server and 5 workers

  // A revocation while no gateway runs: the detector keeps the event for the resumed one.
  // A notice long enough for a gateway started 1.5 s later to take over even on a loaded machine
  // under the sanitizers (10 s was not always).
  const std::string victim = RevokeAWorker(job, absl::Seconds(20));
  absl::SleepFor(absl::Milliseconds(1500));

  auto resumed = StartGateway({"run", "--resume", job}, "resume.log");
  std::optional<int> code = resumed->Wait(std::chrono::seconds(110));
  ASSERT_TRUE(code.has_value()) << "the resumed gateway did not finish the job";
  EXPECT_EQ(*code, 0);
  provider_->WaitForRevocations();
  bool resumed_event = false;
  for (const auto& e : JsonLines(dir_ / "resume.log")) resumed_event |= e["event"] == "resumed";
  EXPECT_TRUE(resumed_event);

  // Nothing launched twice: the plan's instances are exactly those that ran before the kill, and
  // every other instance is a takeover.
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto instances = store->Instances(job);
  ASSERT_TRUE(instances.ok());
  std::set<std::string> planned_after, all;
  for (const InstanceRecord& i : *instances) {
    EXPECT_TRUE(all.insert(i.id).second) << i.id << " recorded twice";
    if (i.reason == job::LaunchReason::kPlan) planned_after.insert(i.id);
  }
  EXPECT_EQ(planned_after, planned);
  CheckRevocationHandled(job, victim);
}

// A cloud with no capacity for the planned type (EC2's InsufficientInstanceCapacity; here the
// local provider's capacity of 0): the gateway re-plans without more of it and the job runs on
// what the re-plan names. Loss 2.6 by 150 s plans one p2.xlarge; without it the cheapest plan is
// one g3.16xlarge. The workers step every 0.1 s instead of at the predicted pace, so it is short.
TEST_F(RunEndToEnd, NoCapacityForAPlannedTypeIsReplannedAround) {
  const std::string job = "e2e-capacity";
  const fs::path spec = dir_ / "capacity.json";
  std::ofstream(spec)
      << nlohmann::json{{"name", job},
                        {"workload", {{"profile", "resnet110"}}},
                        {"slo", {{"loss", 2.6}, {"deadline", "150s"}}},
                        {"catalog", "aws-spotdnn-prototype"},
                        {"provider", {{"name", "local"}, {"capacity", {{"p2.xlarge", 0}}}}},
                        {"commands",
                         {{"worker", bin_ + "/spotdnn-sim-worker --iteration_time_s=0.1"},
                          {"parameter_server", bin_ + "/spotdnn-sim-worker"}}}}
             .dump(2);
  auto gateway = StartGateway({"run", spec.string()}, "run.log");
  std::optional<int> code = gateway->Wait(std::chrono::seconds(90));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  EXPECT_EQ(*code, 0);

  std::vector<std::string> kinds;
  std::string planned_cluster;
  for (const auto& e : JsonLines(dir_ / "run.log")) {
    kinds.push_back(e.value("event", ""));
    if (e.value("event", "") == "planned") planned_cluster = e.value("cluster", "");
  }
  EXPECT_EQ(planned_cluster, "p2.xlarge=1");
  EXPECT_THAT(kinds, ::testing::Contains("capacity"));
  EXPECT_THAT(kinds, ::testing::Contains("replanned"));
  EXPECT_THAT(kinds, ::testing::Contains("finished"));

  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob(job);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
  EXPECT_GE(record->iterations_done, record->target_iterations);
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  int replans = 0;
  for (const JobEventRecord& e : *events) replans += e.kind == "capacity-replan";
  EXPECT_EQ(replans, 1);
  auto instances = store->Instances(job);
  ASSERT_TRUE(instances.ok());
  std::map<std::string, int> workers;
  for (const InstanceRecord& i : *instances) {
    if (i.role == launcher::Role::kWorker) {
      ++workers[i.instance_type];
      EXPECT_EQ(i.reason, job::LaunchReason::kCapacity) << i.id;
    }
    EXPECT_EQ(i.state, job::InstanceStatus::kEnded) << i.id;
  }
  EXPECT_EQ(workers, (std::map<std::string, int>{{"g3.16xlarge", 1}}));
  // The target is the re-plan's (the same loss on the cluster that trains), and it was met.
  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  EXPECT_TRUE(summary["slo_met"].is_null());  // no loss measured
  EXPECT_EQ(summary["deadline_met"], true);
  EXPECT_DOUBLE_EQ(summary["target_iterations"].get<double>(), 123);
}

// Workers that never report a step: the job fails after --stall-timeout with a message that says
// what to check and where the instances' output is, instead of waiting for ever; nothing is left
// running and the output is kept.
TEST_F(RunEndToEnd, WorkersThatNeverReportFailTheJobAfterTheStallTimeout) {
  const std::string job = "e2e-stall";
  const fs::path spec = dir_ / "stall.json";
  std::ofstream(spec) << nlohmann::json{
      {"name", job},
      {"workload", {{"profile", "resnet110"}}},
      {"slo", {{"loss", 2.6}, {"deadline", "150s"}}},
      {"catalog", "aws-spotdnn-prototype"},
      {"provider", "local"},
      {"commands",
       {{"worker", "echo worker-started-but-silent; sleep 60"},
        {"parameter_server",
         "sleep 60"}}}}.dump(2);
  auto gateway = StartGateway({"run", spec.string(), "--stall-timeout", "3s"}, "run.log");
  std::optional<int> code = gateway->Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << "the gateway kept waiting";
  EXPECT_EQ(*code, 3);
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob(job);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFailed);
  EXPECT_THAT(record->message, ::testing::HasSubstr("no worker reported a new iteration for 3s"));
  const fs::path logs = dir_ / "local" / "logs";
  EXPECT_THAT(record->message, ::testing::HasSubstr(logs.string()));
  auto left = provider_->Describe(job);
  ASSERT_TRUE(left.ok());
  for (const auto& i : *left) {
    EXPECT_EQ(i.state, launcher::InstanceState::kTerminated) << i.id << " is still running";
  }
  bool output_kept = false;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(logs, ec)) {
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    output_kept |= absl::StrContains(text.str(), "worker-started-but-silent");
  }
  EXPECT_TRUE(output_kept) << "no worker output under " << logs;
}

}  // namespace
}  // namespace spotdnn::gateway
