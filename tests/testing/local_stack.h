// The fixture of the end-to-end tests that run jobs on the local stack: a folder of the test's
// own (the data dir), `spotdnn up` there (the four services and the metadata emulator as
// processes on 127.0.0.1:0, started from SPOTDNN_BINARY_DIR), and a local provider that watches
// the stack's instances (it does not own them). StopStack leaves nothing behind: every instance
// terminated, `spotdnn down`, the folder removed.
#ifndef SPOTDNN_TESTS_TESTING_LOCAL_STACK_H_
#define SPOTDNN_TESTS_TESTING_LOCAL_STACK_H_

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "provisioner/launcher/local_provider.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::testing_util {

class LocalStackTest : public ::testing::Test {
 protected:
  // Starts the stack in a fresh folder `folder` under the temporary directory: `spotdnn up
  // --json` (what it printed is in up_) and the watching provider. Fails the test fatally when
  // either does not start; call it inside ASSERT_NO_FATAL_FAILURE.
  void StartStack(const std::string& folder) {
    dir_ = std::filesystem::temp_directory_path() / folder;
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    up_ = gateway::Cli({"up", "--data-dir", dir_.string(), "--bin-dir", bin_, "--json"});
    stack_up_ = true;
    ASSERT_EQ(up_.code, 0) << up_.err;
    auto provider =
        launcher::LocalProvider::Create({.state_dir = (dir_ / "local").string(), .owner = false});
    ASSERT_TRUE(provider.ok()) << provider.status();
    provider_ = std::move(*provider);
  }

  // Nothing left behind, whatever happened: the instances left terminated, `spotdnn down`, and
  // the folder removed unless `keep_dir` (kept for a look at the logs).
  void StopStack(bool keep_dir = false) {
    if (provider_ != nullptr) {
      auto left = provider_->Describe("");
      if (left.ok()) {
        std::vector<std::string> ids;
        for (const auto& i : *left) ids.push_back(i.id);
        (void)provider_->Terminate(ids);
      }
      provider_.reset();
    }
    if (stack_up_) gateway::Cli({"down", "--data-dir", dir_.string()});
    stack_up_ = false;
    if (!keep_dir && !dir_.empty()) std::filesystem::remove_all(dir_);
  }

  void TearDown() override { StopStack(); }

  const std::string bin_ = SPOTDNN_BINARY_DIR;  // where spotdnn and the services are
  std::filesystem::path dir_;                   // the stack's data dir
  std::unique_ptr<launcher::LocalProvider> provider_;
  gateway::CliRun up_;  // what `spotdnn up --json` printed

 private:
  bool stack_up_ = false;
};

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_LOCAL_STACK_H_
