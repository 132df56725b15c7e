// The synchronous example job end to end (deploy/examples/digits-ddp): PyTorch DDP under torchrun
// elastic on the local provider, every instance's torchrun meeting at the job's rendezvous on this
// side. `spotdnn run` profiles the workload under torchrun, plans it, and runs it; mid-run one
// instance gets a revocation notice: every rank stops at the same step, the survivors re-form the
// group from the checkpoint, the replacement joins, and the job still reaches its target.
// The restart is measured (the notice to every rank stepping again, the steps redone) and the
// global batch is the same on every step through every change of the cluster. Then the ways to go
// without a notice: an instance killed with `kill -9` (the survivors go on from the last periodic
// checkpoint, a replacement joins), and `spotdnn run` itself killed and resumed (the rendezvous
// taken up again, nothing launched twice).
#include <signal.h>

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <set>

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

using testing_util::Child;

constexpr char kJob[] = "ddp-e2e";

class DdpEndToEnd : public ExampleJobTest {
 protected:
  DdpEndToEnd() : ExampleJobTest(kJob, "digits-ddp") {}

  // The example's job with `delay` seconds of emulated compute per sample (a step is shorter on
  // more instances), 40-step profiling runs, a quota of `quota` instances and `deadline`, and
  // `edit`.
  std::string SlowJob(int quota, const std::string& deadline,
                      const std::function<void(nlohmann::json&)>& edit = nullptr,
                      const std::string& delay = "0.004") {
    return WriteJob([&](nlohmann::json& s) {
      s["quotas"] = {{"local.cpu", quota}};
      s["slo"]["deadline"] = deadline;
      for (auto& run : s["workload"]["profiling"]["runs"]) run["steps"] = 40;
      std::string command = s["commands"]["worker"].get<std::string>();
      const size_t at = command.find("--sample-delay 0.002");
      ASSERT_NE(at, std::string::npos) << command;
      command.replace(at, 20, "--sample-delay " + delay);
      s["commands"]["worker"] = command;
      if (edit) edit(s);
    });
  }

  // Waits until the job trains on `instances` instances past `steps` global steps (true), or
  // fails, or `seconds` pass (false, with the run's output reported).
  bool TrainsOn(size_t instances, double steps, int seconds) {
    const bool came = WaitFor(
        [&](job::JobStore& s) {
          auto r = s.GetJob(kJob);
          if (r.ok() && r->state == job::JobState::kFailed) return true;  // said below
          return r.ok() && r->state == job::JobState::kRunning && r->iterations_done >= steps &&
                 Running(launcher::Role::kWorker).size() == instances;
        },
        seconds);
    if (!came || Store()->GetJob(kJob)->state == job::JobState::kFailed) {
      ADD_FAILURE() << "the job did not train on " << instances
                    << " instances (a plan of another size: the machine's speed during "
                       "profiling, see `Plan for`); its output:\n"
                    << ReadAll(dir_ / "run.log");
      return false;
    }
    return true;
  }

  // Waits up to `seconds` for a `kind` event in the job's log.
  bool LogsEvent(const std::string& kind, int seconds) {
    const bool came = WaitFor(
        [&](job::JobStore& s) {
          auto events = s.Events(kJob);
          return events.ok() &&
                 std::any_of(events->begin(), events->end(),
                             [&](const job::JobEventRecord& e) { return e.kind == kind; });
        },
        seconds);
    if (!came) ADD_FAILURE() << "no " << kind << " event; output:\n" << ReadAll(dir_ / "run.log");
    return came;
  }
};

TEST_F(DdpEndToEnd, ThreeInstancesThroughANoticeRestartKeepTheGlobalBatchAndReachTheTarget) {
  // Three instances from the start: a deadline that two cannot meet, on a quota of three; so two
  // survivors cannot meet it either, the revoked instance is replaced, and the job still meets it
  // through two restarts (the notice's and the replacement's joining, about 20 s each). A step is
  // shorter on more instances: the example's emulated compute is per sample, here 6 ms, so 2,000
  // steps take about 400 s on two (the plan predicts about 390 s) and 290 s on three, and the two
  // 40-step profiling runs about 40 s of the 400 s: three finish in about 370 s with the
  // restarts, two would need about 430 s.
  const std::string spec = SlowJob(
      3, "400s", [](nlohmann::json& s) { s["slo"]["iterations"] = 2000; }, "0.006");
  Child gateway({bin_ + "/spotdnn", "run", spec, "--json", "--data-dir", dir_.string()},
                (dir_ / "run.log").string());
  ASSERT_TRUE(TrainsOn(3, 100, 420));

  // The notice for the highest-indexed instance (not the one whose rank 0 writes checkpoints).
  const std::string revoked = Running(launcher::Role::kWorker).back().id;
  const double at_notice = Iterations();
  ASSERT_TRUE(provider_->Revoke(revoked, absl::Seconds(3)).ok());
  ASSERT_TRUE(LogsEvent("restarted", 240)) << "every rank never stepped again after the notice";

  auto finished = Finished(gateway, 600);
  ASSERT_TRUE(finished.has_value());
  const int code = finished->first;
  const job::JobRecord* record = &finished->second;
  auto store = Store();
  ASSERT_NE(store, nullptr);
  EXPECT_GE(record->iterations_done, record->target_iterations)
      << "the job ended short of its target";
  // The target by the deadline: exit 0 (3 would say the deadline was missed).
  EXPECT_EQ(code, 0) << "the job missed its deadline; its output:\n" << ReadAll(dir_ / "run.log");
  EXPECT_GT(record->loss, 0);
  auto revocation = RevocationOf(*store, revoked);
  ASSERT_TRUE(revocation.has_value());
  EXPECT_EQ(revocation->status, job::RevocationStatus::kLaunched) << revocation->detail;

  // The summary's restart: caused by the notice, measured, resumed from a checkpoint at or
  // before the notice's step.
  CliRun status = Cli({"status", kJob, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  ASSERT_GE(summary["restarts"].size(), 1u) << summary.dump();
  const nlohmann::json& restart = summary["restarts"][0];
  EXPECT_EQ(restart["instance"], revoked);
  EXPECT_EQ(restart["cause"], "notice");
  ASSERT_TRUE(restart["stepping_s"].is_number()) << restart.dump();
  EXPECT_GT(restart["stepping_s"].get<double>(), 0);
  ASSERT_TRUE(restart["steps_redone"].is_number()) << restart.dump();
  EXPECT_GE(restart["steps_redone"].get<double>(), 0);
  EXPECT_GE(restart["resumed_step"].get<int64_t>(), 1);
  EXPECT_GE(restart["steps_at_notice"].get<double>(), at_notice);
  // The ranks go on until they see the notice: the step they resumed from, plus the steps they
  // computed again, is the furthest they came, at least where the job stood at the notice.
  EXPECT_GE(restart["resumed_step"].get<double>() - 1 + restart["steps_redone"].get<double>(),
            restart["steps_at_notice"].get<double>());
  EXPECT_EQ(summary["deadline_met"], true) << summary.dump();
  CliRun table = Cli({"status", kJob, "--data-dir", dir_.string()});
  EXPECT_THAT(table.out, ::testing::HasSubstr("notice -> all ranks stepping"));

  // The global batch, from the samples: every step of every rank, on the first three instances
  // and on the group with the replacement in it (the survivors may have trained as two before it
  // joined, or the replacement may have made the survivors' rendezvous), says the job's, and the
  // ranks' local batches make it up.
  const int64_t global = 64;
  const std::vector<int64_t> off = ProfilerRow(
      "SELECT COUNT(*), SUM(metrics NOT LIKE '%global_batch=64%'), "
      "SUM(ABS(batch_size * cluster_workers - 64) >= cluster_workers), "
      "COUNT(DISTINCT substr(worker_id, 1, instr(worker_id, '-rank') - 1)), "
      "MIN(cluster_workers), MAX(cluster_workers) FROM samples WHERE job_id = ?1",
      6);
  EXPECT_GT(off[0], 0) << "no samples";
  EXPECT_EQ(off[1], 0) << "samples whose global batch is not " << global;
  EXPECT_EQ(off[2], 0) << "samples whose local batch does not make up the global batch";
  EXPECT_EQ(off[3], 4) << "the three instances and the replacement";
  EXPECT_GE(off[4], 2);
  EXPECT_EQ(off[5], 3);

  std::cout << "[measured] ddp job: notice at step " << restart["steps_at_notice"]
            << ", all ranks stepping again " << restart["stepping_s"] << " s after it, resumed at "
            << restart["resumed_step"] << ", " << restart["steps_redone"] << " steps redone; ranks "
            << off[4] << "-" << off[5] << "; restarts " << summary["restarts"].size()
            << "; final loss " << summary["final_loss"] << " at " << summary["iterations_done"]
            << " steps in " << summary["actual_time_s"] << " s after " << summary["profiling_s"]
            << " s of profiling, deadline met " << summary["deadline_met"] << "; whole test "
            << absl::ToDoubleSeconds(absl::Now() - started_) << " s" << std::endl;
}

TEST_F(DdpEndToEnd, AnInstanceKilledWithoutNoticeThenAKilledGatewayResumedLaunchNothingTwice) {
  // Two instances: a deadline one cannot meet (700 steps of 4 ms per sample take about 175 s on
  // one and 95 s on two; profiling 30-58 s of the 170 s), on a quota of two. The restarts may
  // make it miss the deadline: the test accepts that (exit 3).
  const std::string spec =
      SlowJob(2, "170s", [](nlohmann::json& s) { s["slo"]["iterations"] = 700; });
  Child gateway({bin_ + "/spotdnn", "run", spec, "--json", "--data-dir", dir_.string()},
                (dir_ / "run.log").string());
  // Past the first periodic checkpoint (every 50 steps) and some way towards the next.
  ASSERT_TRUE(TrainsOn(2, 75, 300));

  // kill -9 of every process of the second instance (its agent, torchrun and ranks): no notice.
  const std::string victim = Running(launcher::Role::kWorker).back().id;
  auto group = provider_->ProcessGroup(victim);
  ASSERT_TRUE(group.ok()) << group.status();
  const double at_kill = Iterations();
  ASSERT_EQ(kill(-*group, SIGKILL), 0);
  ASSERT_TRUE(LogsEvent("restarted", 240)) << "every rank never stepped again after the kill";

  // kill -9 of `spotdnn run` mid-training; its instances and the rendezvous run on.
  std::set<std::string> before;
  for (const launcher::Instance& i : Running(launcher::Role::kWorker)) before.insert(i.id);
  ASSERT_EQ(before.size(), 2u) << "the survivor and the replacement";
  gateway.Kill();
  absl::SleepFor(absl::Seconds(2));
  Child resumed({bin_ + "/spotdnn", "run", "--resume", kJob, "--json", "--data-dir", dir_.string()},
                (dir_ / "resume.log").string());
  auto finished = Finished(resumed, 300);
  ASSERT_TRUE(finished.has_value()) << ReadAll(dir_ / "resume.log");
  EXPECT_TRUE(finished->first == 0 || finished->first == 3) << finished->first;
  EXPECT_GE(finished->second.iterations_done, finished->second.target_iterations);

  // Nothing launched twice: the two planned instances and one takeover, the resumed gateway
  // drove the instances that ran before it.
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto instances = store->Instances(kJob);
  ASSERT_TRUE(instances.ok());
  int planned = 0, takeovers = 0;
  std::set<std::string> ids;
  for (const job::InstanceRecord& i : *instances) {
    ids.insert(i.id);
    planned += i.reason == job::LaunchReason::kPlan;
    takeovers += i.reason == job::LaunchReason::kTakeover;
  }
  EXPECT_EQ(instances->size(), 3u);
  EXPECT_EQ(planned, 2);
  EXPECT_EQ(takeovers, 1);
  for (const std::string& id : before) EXPECT_EQ(ids.count(id), 1u) << id;
  auto revocation = RevocationOf(*store, victim);
  ASSERT_TRUE(revocation.has_value());
  EXPECT_EQ(revocation->kind, "lost");
  EXPECT_EQ(revocation->status, job::RevocationStatus::kLaunched) << revocation->detail;

  // The resumed gateway took the rendezvous up again (adopted while its process lives, else
  // restarted on its port).
  auto events = store->Events(kJob);
  ASSERT_TRUE(events.ok());
  std::vector<std::string> rendezvous;
  for (const job::JobEventRecord& e : *events) {
    if (e.kind == "rendezvous") {
      rendezvous.push_back(nlohmann::json::parse(e.detail).value("how", ""));
    }
  }
  ASSERT_GE(rendezvous.size(), 3u) << "started, taken up on resume, stopped";
  EXPECT_EQ(rendezvous.front(), "started");
  EXPECT_THAT(rendezvous[rendezvous.size() - 2], ::testing::AnyOf("adopted", "restarted"));
  EXPECT_EQ(rendezvous.back(), "stopped");

  // The restart: caused by the loss, resumed no earlier than the last periodic checkpoint (no
  // notice to checkpoint at), with the steps since it computed again.
  CliRun status = Cli({"status", kJob, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json summary = nlohmann::json::parse(status.out)["summary"];
  ASSERT_GE(summary["restarts"].size(), 1u) << summary.dump();
  const nlohmann::json& restart = summary["restarts"][0];
  EXPECT_EQ(restart["instance"], victim);
  EXPECT_EQ(restart["cause"], "lost");
  ASSERT_TRUE(restart["stepping_s"].is_number()) << restart.dump();
  const int64_t resumed_step = restart["resumed_step"].get<int64_t>();
  // From the last periodic checkpoint before the kill, or a later one the survivor wrote when
  // torchrun stopped it (the example checkpoints on SIGTERM).
  EXPECT_GE(resumed_step - 1, static_cast<int64_t>(at_kill) / 50 * 50) << resumed_step;
  EXPECT_LE(resumed_step - 1, at_kill + 50);
  EXPECT_GE(restart["steps_redone"].get<double>(), 0);

  std::cout << "[measured] ddp job, kill -9 of an instance at step " << at_kill
            << ": every rank stepping again " << restart["stepping_s"]
            << " s after its loss was seen, resumed at " << resumed_step << ", "
            << restart["steps_redone"]
            << " steps redone; rendezvous on resume: " << rendezvous[rendezvous.size() - 2] << "; "
            << summary["iterations_done"] << " steps in " << summary["actual_time_s"] << " s after "
            << summary["profiling_s"] << " s of profiling, deadline met " << summary["deadline_met"]
            << "; whole test " << absl::ToDoubleSeconds(absl::Now() - started_) << " s"
            << std::endl;
}

}  // namespace
}  // namespace spotdnn::gateway
