// The real example job end to end (deploy/examples/digits): asynchronous parameter-server training
// in PyTorch on scikit-learn's handwritten digits, everything as separate processes on 127.0.0.1.
// `spotdnn up` starts the four services and the metadata emulator; `spotdnn run` profiles the
// workload from the spec's short runs, plans with its loss target and runs it on the local
// provider, every instance under spotdnn-agent (which streams the script's SPOTDNN_SAMPLE lines to
// the profiler). Mid-run a worker is revoked (its takeover must join and report), then the
// parameter server (its replacement must restore the checkpoint and the workers carry on). The
// job must still reach its loss target, with no sample stored twice.
//
// Needs Debian's python3-torch and python3-sklearn (deploy/setup.sh installs them).
#include <algorithm>
#include <iostream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/gateway/example_job_fixture.h"
#include "tests/testing/child_process.h"

namespace spotdnn::gateway {
namespace {

using job::InstanceRecord;
using job::RevocationRecord;
using testing_util::Child;

constexpr char kJob[] = "digits-e2e";

class DigitsEndToEnd : public ExampleJobTest {
 protected:
  DigitsEndToEnd() : ExampleJobTest(kJob, "digits") {}

  // A running instance of the job in `role` (the lowest index).
  std::string RunningId(launcher::Role role) {
    auto running = Running(role);
    return running.empty() ? std::string() : running.front().id;
  }

  // Every stored sample of the job's run, and how many distinct (worker, step) pairs they are.
  std::pair<int64_t, int64_t> SampleCounts() {
    const std::vector<int64_t> row = ProfilerRow(
        "SELECT COUNT(*), COUNT(DISTINCT worker_id || '/' || step) FROM samples WHERE job_id = ?1",
        2);
    return {row[0], row[1]};
  }
};

TEST_F(DigitsEndToEnd, ProfilesPlansAndTrainsToTheLossThroughWorkerAndServerRevocations) {
  const std::string spec = WriteJob();
  Child gateway({bin_ + "/spotdnn", "run", spec, "--json", "--data-dir", dir_.string()},
                (dir_ / "run.log").string());

  // Profiling, the plan, then the first steps of the real run.
  ASSERT_TRUE(WaitFor(
      [](job::JobStore& s) {
        auto r = s.GetJob(kJob);
        return r.ok() && r->state == job::JobState::kRunning && r->iterations_done >= 60;
      },
      420))
      << "the job did not start training; its output:\n"
      << ReadAll(dir_ / "run.log");
  const absl::Time training = absl::Now();

  // A worker's notice: its takeover joins and reports steps.
  const std::string worker = RunningId(launcher::Role::kWorker);
  ASSERT_FALSE(worker.empty());
  ASSERT_TRUE(provider_->Revoke(worker, absl::Seconds(3)).ok());
  ASSERT_TRUE(WaitFor(
      [&](job::JobStore& s) {
        auto r = RevocationOf(s, worker);
        return r.has_value() && r->takeover_reported_ms > 0;
      },
      120))
      << "the revoked worker's takeover never reported a step; output:\n"
      << ReadAll(dir_ / "run.log");

  // The parameter server's notice, once it has checkpointed some progress.
  const double before = Iterations();
  ASSERT_TRUE(WaitFor(
      [&](job::JobStore& s) {
        auto r = s.GetJob(kJob);
        return r.ok() && r->iterations_done >= before + 60;
      },
      120));
  const std::string server = RunningId(launcher::Role::kParameterServer);
  ASSERT_FALSE(server.empty());
  ASSERT_TRUE(provider_->Revoke(server, absl::Seconds(3)).ok());

  auto finished = Finished(gateway, 360);
  ASSERT_TRUE(finished.has_value());
  const int code = finished->first;
  const job::JobRecord* record = &finished->second;
  auto store = Store();
  ASSERT_NE(store, nullptr);
  // Exit 0, or 3 when the loss came but after the deadline (the revocations cost time).
  EXPECT_TRUE(code == 0 || code == 3) << code;
  EXPECT_GT(record->loss, 0);
  EXPECT_LE(record->loss, target_loss_) << "the job must end on its loss target";

  // Both revocations were taken over; the server's replacement restored a checkpoint.
  auto instances = store->Instances(kJob);
  ASSERT_TRUE(instances.ok());
  std::map<std::string, InstanceRecord> by_id;
  for (const InstanceRecord& i : *instances) by_id[i.id] = i;
  std::optional<RevocationRecord> w = RevocationOf(*store, worker);
  std::optional<RevocationRecord> ps = RevocationOf(*store, server);
  ASSERT_TRUE(w.has_value() && ps.has_value());
  EXPECT_EQ(w->status, job::RevocationStatus::kLaunched) << w->detail;
  EXPECT_EQ(ps->status, job::RevocationStatus::kLaunched) << ps->detail;
  std::string replacement;
  const std::vector<std::string> ids = absl::StrSplit(ps->takeover_ids, ',', absl::SkipEmpty());
  for (const std::string& id : ids) {
    ASSERT_EQ(by_id.count(id), 1u) << id;
    if (by_id[id].role == launcher::Role::kParameterServer) replacement = id;
  }
  ASSERT_FALSE(replacement.empty()) << "no replacement parameter server: " << ps->takeover_ids;
  EXPECT_EQ(by_id[replacement].index, by_id[server].index);
  const std::string replacement_log = ReadAll(dir_ / "local" / "logs" / (replacement + ".log"));
  EXPECT_THAT(replacement_log, ::testing::HasSubstr("restored the checkpoint at step"));
  EXPECT_THAT(replacement_log, ::testing::Not(::testing::HasSubstr("at step 0\n")));
  // Workers launched after the server's notice train against the replacement.
  int relaunched = 0;
  for (const auto& [id, i] : by_id) {
    if (i.role == launcher::Role::kWorker && i.launched_ms >= ps->received_ms) ++relaunched;
  }
  EXPECT_GT(relaunched, 0);

  // One forecast per job, through a parameter server's restore too: every progress line counts
  // against the current forecast (within the 2% it may move before a new forecast line), and the
  // job's record ends on it, not on a forecast made while the loss stood still.
  double current = 0;
  int progress_lines = 0;
  {
    std::ifstream in(dir_ / "run.log");
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
      if (!e.is_object()) continue;
      const std::string kind = e.value("event", "");
      if (kind == "forecast" && e.value("reachable", false)) {
        current = e["iterations_p50"].get<double>();
      } else if (kind == "progress" && e.value("predicted_by", "") == "forecast" &&
                 e["predicted_iterations"].is_number() && current > 0) {
        // A job past its forecast shows its steps done as the least it needs.
        const double expected = std::max(current, e["iterations_done"].get<double>());
        ++progress_lines;
        EXPECT_NEAR(e["predicted_iterations"].get<double>(), expected, 0.021 * expected) << line;
      }
    }
  }
  EXPECT_GT(progress_lines, 0);
  // The restore (the server's notice until its relaunched workers report) is no stall: the loss
  // stands still then, and no refit is made of it.
  auto job_events = store->Events(kJob);
  ASSERT_TRUE(job_events.ok());
  const int64_t restored =
      ps->takeover_reported_ms > 0 ? ps->takeover_reported_ms : record->finished_ms;
  for (const job::JobEventRecord& e : *job_events) {
    if (e.kind != "forecast" || e.at_ms < ps->received_ms || e.at_ms >= restored) continue;
    const nlohmann::json f = nlohmann::json::parse(e.detail, nullptr, false);
    EXPECT_NE(f.value("source", ""), "refit")
        << "a refit during the parameter server's restore, " << e.at_ms - ps->received_ms
        << " ms after its notice: " << e.detail;
  }
  EXPECT_NEAR(record->target_iterations, current, 0.021 * current)
      << "the job's record ends on another number than its last forecast";

  // No sample stored twice; the job's count is within what was stored.
  const auto [samples, distinct] = SampleCounts();
  EXPECT_GT(samples, 0);
  EXPECT_EQ(samples, distinct) << "a sample was stored twice";
  EXPECT_LE(record->iterations_done + record->steps_lost, static_cast<double>(distinct));

  // The summary shows the steps lost and both curves plot.
  CliRun status = Cli({"status", kJob, "--json", "--data-dir", dir_.string(), "--plot",
                       (dir_ / "loss.svg").string()});
  ASSERT_EQ(status.code, 0) << status.err;
  nlohmann::json doc = nlohmann::json::parse(status.out);
  const nlohmann::json& summary = doc["summary"];
  ASSERT_TRUE(summary.contains("steps_lost"));
  EXPECT_DOUBLE_EQ(summary["steps_lost"].get<double>(), record->steps_lost);
  EXPECT_EQ(summary["revocations_handled"], 2);
  const std::string svg = ReadAll(dir_ / "loss.svg");
  EXPECT_THAT(svg, ::testing::HasSubstr("class=\"predicted\""));
  EXPECT_THAT(svg, ::testing::HasSubstr("class=\"actual\""));

  std::cout << "[measured] digits job: predicted " << summary["first_plan_time_s"] << " s / "
            << summary["first_plan_iterations"] << " iterations, actual "
            << summary["actual_time_s"] << " s / " << summary["iterations_done"]
            << " iterations (training from launch to the first 60 steps: "
            << absl::ToDoubleSeconds(training - started_) << " s since `up`), final loss "
            << summary["final_loss"] << " (target " << target_loss_ << "), steps lost "
            << summary["steps_lost"] << ", samples stored " << samples << ", worker takeover "
            << "first step " << (w->takeover_reported_ms - w->cloud_notice_ms) / 1000.0
            << " s after its notice; whole test " << absl::ToDoubleSeconds(absl::Now() - started_)
            << " s" << std::endl;
}

}  // namespace
}  // namespace spotdnn::gateway
