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
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/local_provider.h"
#include "services/gateway/job/job_store.h"
#include "tests/gateway/cli_runner.h"
#include "tests/testing/child_process.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using job::InstanceRecord;
using job::RevocationRecord;
using testing_util::Child;

constexpr char kJob[] = "digits-e2e";
constexpr char kPython[] = "/usr/bin/python3";

std::string ReadAll(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class DigitsEndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(std::system(absl::StrCat(kPython, " -c 'import torch, sklearn' 2>/dev/null").c_str()),
              0)
        << kPython << " cannot import torch and sklearn: run deploy/setup.sh (it installs "
        << "python3-torch and python3-sklearn)";
    started_ = absl::Now();
    dir_ = fs::temp_directory_path() / absl::StrCat("spotdnn-digits-e2e-", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    CliRun up = Cli({"up", "--data-dir", dir_.string(), "--bin-dir", bin_, "--json"});
    ASSERT_EQ(up.code, 0) << up.err;
    auto provider =
        launcher::LocalProvider::Create({.state_dir = (dir_ / "local").string(), .owner = false});
    ASSERT_TRUE(provider.ok()) << provider.status();
    provider_ = std::move(*provider);
  }

  void TearDown() override {
    if (provider_ != nullptr) {
      auto left = provider_->Describe("");
      if (left.ok()) {
        std::vector<std::string> ids;
        for (const auto& i : *left) ids.push_back(i.id);
        (void)provider_->Terminate(ids);
      }
      provider_.reset();
    }
    Cli({"down", "--data-dir", dir_.string()});
    if (!HasFailure()) fs::remove_all(dir_);  // kept for a look at the logs otherwise
  }

  // The example's spec as a user runs it, renamed, with the script's absolute path.
  std::string WriteJob() {
    std::ifstream in(fs::path(SPOTDNN_SOURCE_DIR) / "deploy/examples/digits/job.json");
    nlohmann::json spec = nlohmann::json::parse(in);
    spec["name"] = kJob;
    const std::string script =
        (fs::path(SPOTDNN_SOURCE_DIR) / "deploy/examples/digits/train.py").string();
    for (auto& [role, command] : spec["commands"].items()) {
      std::string text = command.get<std::string>();
      const size_t at = text.find("deploy/examples/digits/train.py");
      EXPECT_NE(at, std::string::npos) << role << ": " << text;
      if (at != std::string::npos) text.replace(at, 31, script);
      command = text;
    }
    target_loss_ = spec["slo"]["loss"].get<double>();
    const fs::path path = dir_ / "job.json";
    std::ofstream(path) << spec.dump(2);
    return path.string();
  }

  std::unique_ptr<job::JobStore> Store() {
    auto store = job::JobStore::Open((dir_ / "jobs.db").string());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  // Polls the job store until `done` holds (true) or `seconds` pass (false).
  bool WaitFor(const std::function<bool(job::JobStore&)>& done, int seconds) {
    auto store = Store();
    if (store == nullptr) return false;
    const absl::Time give_up = absl::Now() + absl::Seconds(seconds);
    while (absl::Now() < give_up) {
      if (done(*store)) return true;
      absl::SleepFor(absl::Milliseconds(200));
    }
    return false;
  }

  double Iterations() {
    auto store = Store();
    if (store == nullptr) return 0;
    auto record = store->GetJob(kJob);
    return record.ok() ? record->iterations_done : 0;
  }

  // A running instance of the job in `role` (the lowest index).
  std::string Running(launcher::Role role) {
    auto running = provider_->Describe(kJob);
    EXPECT_TRUE(running.ok());
    std::string id;
    int index = 1 << 30;
    for (const auto& i : *running) {
      if (i.role == role && i.state == launcher::InstanceState::kRunning && i.index < index) {
        id = i.id;
        index = i.index;
      }
    }
    return id;
  }

  // The revocation record of `instance`, once the gateway has one.
  std::optional<RevocationRecord> RevocationOf(job::JobStore& store, const std::string& instance) {
    auto revocations = store.Revocations(kJob);
    if (!revocations.ok()) return std::nullopt;
    for (const RevocationRecord& r : *revocations) {
      if (r.instance_id == instance) return r;
    }
    return std::nullopt;
  }

  // Every stored sample of the job's run, and how many distinct (worker, step) pairs they are.
  std::pair<int64_t, int64_t> SampleCounts() {
    sqlite3* db = nullptr;
    std::pair<int64_t, int64_t> counts{-1, -1};
    if (sqlite3_open_v2((dir_ / "profiles.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) ==
        SQLITE_OK) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db,
                             "SELECT COUNT(*), COUNT(DISTINCT worker_id || '/' || step) FROM "
                             "samples WHERE job_id = ?",
                             -1, &stmt, nullptr) == SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, kJob, -1, SQLITE_STATIC);
        if (sqlite3_step(stmt) == SQLITE_ROW) {
          counts = {sqlite3_column_int64(stmt, 0), sqlite3_column_int64(stmt, 1)};
        }
        sqlite3_finalize(stmt);
      }
    }
    sqlite3_close(db);
    return counts;
  }

  const std::string bin_ = SPOTDNN_BINARY_DIR;
  fs::path dir_;
  std::unique_ptr<launcher::LocalProvider> provider_;
  double target_loss_ = 0;
  absl::Time started_;
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
  const std::string worker = Running(launcher::Role::kWorker);
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
  const std::string server = Running(launcher::Role::kParameterServer);
  ASSERT_FALSE(server.empty());
  ASSERT_TRUE(provider_->Revoke(server, absl::Seconds(3)).ok());

  std::optional<int> code = gateway.Wait(std::chrono::seconds(360));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job; output:\n"
                                << ReadAll(dir_ / "run.log");
  provider_->WaitForRevocations();
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob(kJob);
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_EQ(record->state, job::JobState::kFinished) << record->message << "\n"
                                                     << ReadAll(dir_ / "run.log");
  // Exit 0, or 3 when the loss came but after the deadline (the revocations cost time).
  EXPECT_TRUE(*code == 0 || *code == 3) << *code;
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
