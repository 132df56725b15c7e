// The harness of the end-to-end tests that run a real example job (deploy/examples/*), on the
// local stack of LocalStackTest (tests/testing/local_stack.h): the local provider's instances are
// processes on this machine (spotdnn-agent around the example's script), and the test watches the
// job store, revokes instances and reads what the job left behind. Needs Debian's python3-torch and
// python3-sklearn (deploy/setup.sh installs them).
#ifndef SPOTDNN_TESTS_GATEWAY_EXAMPLE_JOB_FIXTURE_H_
#define SPOTDNN_TESTS_GATEWAY_EXAMPLE_JOB_FIXTURE_H_

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/local_provider.h"
#include "services/gateway/job/job_store.h"
#include "tests/gateway/cli_runner.h"
#include "tests/testing/child_process.h"
#include "tests/testing/local_stack.h"

namespace spotdnn::gateway {

inline std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class ExampleJobTest : public testing_util::LocalStackTest {
 protected:
  static constexpr char kPython[] = "/usr/bin/python3";

  // `job`: the name the test gives the example's job; `example`: its folder under
  // deploy/examples.
  ExampleJobTest(std::string job, std::string example)
      : job_(std::move(job)), example_(std::move(example)) {}

  void SetUp() override {
    ASSERT_EQ(std::system(absl::StrCat(kPython, " -c 'import torch, sklearn' 2>/dev/null").c_str()),
              0)
        << kPython << " cannot import torch and sklearn: run deploy/setup.sh (it installs "
        << "python3-torch and python3-sklearn)";
    started_ = absl::Now();
    ASSERT_NO_FATAL_FAILURE(StartStack(absl::StrCat("spotdnn-", job_, "-", getpid())));
  }

  void TearDown() override {
    StopStack(/*keep_dir=*/HasFailure());  // kept for a look at the logs
  }

  // The example's job.json as a user runs it, renamed, with the script's absolute path, changed
  // by `edit`; returns the file's path.
  std::string WriteJob(const std::function<void(nlohmann::json&)>& edit = nullptr) {
    const std::filesystem::path folder =
        std::filesystem::path(SPOTDNN_SOURCE_DIR) / "deploy/examples" / example_;
    std::ifstream in(folder / "job.json");
    nlohmann::json spec = nlohmann::json::parse(in);
    spec["name"] = job_;
    const std::string relative = absl::StrCat("deploy/examples/", example_, "/train.py");
    for (auto& [role, command] : spec["commands"].items()) {
      std::string text = command.get<std::string>();
      const size_t at = text.find(relative);
      EXPECT_NE(at, std::string::npos) << role << ": " << text;
      if (at != std::string::npos)
        text.replace(at, relative.size(), (folder / "train.py").string());
      command = text;
    }
    if (edit) edit(spec);
    if (spec["slo"].contains("loss")) target_loss_ = spec["slo"]["loss"].get<double>();
    const std::filesystem::path path = dir_ / "job.json";
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
    auto record = store->GetJob(job_);
    return record.ok() ? record->iterations_done : 0;
  }

  // Waits up to `seconds` for `gateway` (the test's `spotdnn run`) to end and for the provider's
  // revocations to finish; then the run's exit status and the job's record, which must say
  // finished. Absent (the failure reported, with the run's output) otherwise.
  std::optional<std::pair<int, job::JobRecord>> Finished(testing_util::Child& gateway,
                                                         int seconds) {
    std::optional<int> code = gateway.Wait(std::chrono::seconds(seconds));
    if (!code.has_value()) {
      ADD_FAILURE() << "the gateway did not finish the job; output:\n" << ReadAll(dir_ / "run.log");
      return std::nullopt;
    }
    provider_->WaitForRevocations();
    auto store = Store();
    if (store == nullptr) return std::nullopt;
    auto record = store->GetJob(job_);
    if (!record.ok()) {
      ADD_FAILURE() << record.status();
      return std::nullopt;
    }
    if (record->state != job::JobState::kFinished) {
      ADD_FAILURE() << "the job ended " << job::Name(record->state) << ": " << record->message
                    << "\n"
                    << ReadAll(dir_ / "run.log");
      return std::nullopt;
    }
    return std::make_pair(*code, *std::move(record));
  }

  // The job's running instances in `role`, lowest index first.
  std::vector<launcher::Instance> Running(launcher::Role role) {
    auto described = provider_->Describe(job_);
    EXPECT_TRUE(described.ok());
    std::vector<launcher::Instance> running;
    if (!described.ok()) return running;
    for (const auto& i : *described) {
      if (i.role == role && i.state == launcher::InstanceState::kRunning) running.push_back(i);
    }
    std::sort(running.begin(), running.end(),
              [](const auto& a, const auto& b) { return a.index < b.index; });
    return running;
  }

  // The revocation record of `instance`, once the gateway has one.
  std::optional<job::RevocationRecord> RevocationOf(job::JobStore& store,
                                                    const std::string& instance) {
    auto revocations = store.Revocations(job_);
    if (!revocations.ok()) return std::nullopt;
    for (const job::RevocationRecord& r : *revocations) {
      if (r.instance_id == instance) return r;
    }
    return std::nullopt;
  }

  // Runs `sql` (one row of integers, the job's id bound to ?1) on the profiler's database.
  std::vector<int64_t> ProfilerRow(const std::string& sql, int columns) {
    sqlite3* db = nullptr;
    std::vector<int64_t> row(columns, -1);
    if (sqlite3_open_v2((dir_ / "profiles.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) ==
        SQLITE_OK) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
        sqlite3_bind_text(stmt, 1, job_.c_str(), -1, SQLITE_TRANSIENT);
        if (sqlite3_step(stmt) == SQLITE_ROW) {
          for (int c = 0; c < columns; ++c) row[c] = sqlite3_column_int64(stmt, c);
        }
        sqlite3_finalize(stmt);
      }
    }
    sqlite3_close(db);
    return row;
  }

  const std::string job_;
  const std::string example_;
  double target_loss_ = 0;
  absl::Time started_;
};

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_TESTS_GATEWAY_EXAMPLE_JOB_FIXTURE_H_
