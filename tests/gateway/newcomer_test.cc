// The newcomer's path, as a new user meets it: the built `spotdnn` and service
// binaries run as processes, with HOME and SPOTDNN_HOME pointing at fresh folders.
#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/cli/job_output.h"
#include "services/gateway/cli/watch_command.h"
#include "services/gateway/job/job_outlook.h"
#include "tests/testing/child_process.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

struct Proc {
  int code = -1;
  std::string out, err;
};

// A count of a protobuf JSON answer: uint64 fields are strings there, and 0 may be left out.
long long Count(const nlohmann::json& j, const std::string& key) {
  if (!j.contains(key)) return 0;
  return j[key].is_string() ? std::stoll(j[key].get<std::string>()) : j[key].get<long long>();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh folder per test, HOME and SPOTDNN_HOME inside it.
class Newcomer : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/spotdnn-newcomer.XXXXXX";
    dir_ = mkdtemp(pattern);
    fs::create_directories(dir_ + "/home");
    env_ = {{"HOME", dir_ + "/home"}, {"SPOTDNN_HOME", dir_ + "/spotdnn-home"}};
  }
  void TearDown() override { fs::remove_all(dir_); }

  // BINARY ARGS... with `input` on standard input (a file's path; /dev/null when empty).
  Proc Run(const std::string& binary, const std::vector<std::string>& args,
           const std::string& input = "") {
    const std::string out = dir_ + "/.out", err = dir_ + "/.err";
    const pid_t pid = fork();
    if (pid == 0) {
      for (const auto& [k, v] : env_) setenv(k.c_str(), v.c_str(), 1);
      const int in = open(input.empty() ? "/dev/null" : input.c_str(), O_RDONLY);
      const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(in, 0);
      dup2(o, 1);
      dup2(e, 2);
      if (chdir(dir_.c_str()) != 0) _exit(126);
      std::vector<std::string> argv = {absl::StrCat(SPOTDNN_BINARY_DIR, "/", binary)};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> raw;
      for (std::string& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      execv(raw[0], raw.data());
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadAll(out), ReadAll(err)};
  }
  Proc Spotdnn(const std::vector<std::string>& args, const std::string& input = "") {
    return Run("spotdnn", args, input);
  }

  // The README's example log (deploy/examples/make-train-log.sh), STEPS global iterations a run.
  std::string TrainLog(int steps = 800) {
    const std::string path = dir_ + "/train.log";
    const std::string command = absl::StrCat("STEPS=", steps, " sh ", SPOTDNN_SOURCE_DIR,
                                             "/deploy/examples/make-train-log.sh > ", path);
    EXPECT_EQ(std::system(command.c_str()), 0);
    return path;
  }

  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    return path;
  }

  std::string Data() const { return dir_ + "/data"; }

  // Imports the README's log into Data() and fits `name` from `jobs`.
  void ImportAndFit(const std::string& name, const std::string& jobs,
                    const std::vector<std::string>& more = {}) {
    Proc imported = Spotdnn({"profile", "import", TrainLog(), "--data-dir", Data()});
    ASSERT_EQ(imported.code, 0) << imported.err;
    std::vector<std::string> fit = {"profile",        "fit",  "--name",     name,  "--jobs", jobs,
                                    "--ps-bandwidth", "1200", "--data-dir", Data()};
    fit.insert(fit.end(), more.begin(), more.end());
    Proc fitted = Spotdnn(fit);
    ASSERT_EQ(fitted.code, 0) << fitted.err;
    fit_output_ = fitted.out;
  }

  std::string dir_;
  std::map<std::string, std::string> env_;
  std::string fit_output_;
};

// 1. One data directory.

TEST_F(Newcomer, ProfileFollowsSpotdnnHomeNotTheHomeFolder) {
  Proc p = Spotdnn({"profile", "import", TrainLog(200)});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(fs::exists(dir_ + "/spotdnn-home/profiles.db"));
  EXPECT_FALSE(fs::exists(dir_ + "/home/.spotdnn"));
  // --data-dir wins over SPOTDNN_HOME, and every command of the group reads the same file.
  p = Spotdnn({"profile", "import", TrainLog(200), "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(fs::exists(Data() + "/profiles.db"));
  p = Spotdnn({"profile", "fit", "--name", "mine", "--ps-bandwidth", "1200", "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  p = Spotdnn({"profile", "list", "--data-dir", Data()});
  EXPECT_THAT(p.out, HasSubstr("mine"));
  p = Spotdnn({"profile", "list"});  // SPOTDNN_HOME's database has no fit
  EXPECT_THAT(p.out, Not(HasSubstr("mine")));
}

TEST_F(Newcomer, LocalTakesTheDataDirectory) {
  Proc p = Spotdnn({"local", "list", "--data-dir", Data(), "--json"});
  EXPECT_EQ(p.code, 0) << p.err;
  for (const char* sub : {"local launch", "local list", "local revoke", "local terminate"}) {
    p = Spotdnn({"help", sub});
    EXPECT_THAT(p.out, HasSubstr("--data-dir")) << sub;
  }
}

// 2. Stored profiles everywhere.

TEST_F(Newcomer, PredictPlanAndSimulateFindAStoredProfileByName) {
  ImportAndFit("resnet110-mine", "r110-1w,r110-2w,r110-4w,r110-8w");
  Proc p = Spotdnn({"predict", "--workload", "resnet110-mine", "--catalog", "aws-paper-2023",
                    "--cluster", "p3.2xlarge=4", "--loss", "1", "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("resnet110-mine (stored profile, version 1)"));
  p = Spotdnn({"plan", "--workload", "resnet110-mine", "--catalog", "aws-paper-2023", "--loss", "1",
               "--deadline", "2h", "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("Plan: resnet110-mine (stored profile, version 1)"));
  // `workloads` lists it beside the built-in ones.
  p = Spotdnn({"workloads", "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, ::testing::ContainsRegex("resnet110-mine .*stored, version 1"));
  EXPECT_THAT(p.out, ::testing::ContainsRegex("resnet110 .*built in"));
  // simulate resolves it too: what stops it here is the catalog's missing revocation model,
  // not the workload.
  p = Spotdnn({"simulate", "--workload", "resnet110-mine", "--catalog", "aws-paper-2023", "--loss",
               "1", "--deadline", "2h", "--data-dir", Data()});
  EXPECT_THAT(p.err, HasSubstr("nothing to simulate"));
  EXPECT_THAT(p.err, Not(HasSubstr("--workload")));
  // SPOTDNN_HOME the same way.
  env_["SPOTDNN_HOME"] = Data();
  p = Spotdnn({"predict", "--workload", "resnet110-mine", "--catalog", "aws-paper-2023",
               "--cluster", "p3.2xlarge=2", "--iterations", "1000", "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  // A name that is neither stored nor built in says where it looked.
  p = Spotdnn({"predict", "--workload", "nosuch", "--catalog", "aws-paper-2023", "--cluster",
               "p3.2xlarge=2", "--iterations", "1000"});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("--workload = \"nosuch\": no stored profile"));
}

// 3. Profiles a user can fit.

TEST_F(Newcomer, AFitWithoutContentionRunsSaysHowToFixIt) {
  // The 1- and 2-worker runs never share the 1200 MB/s server (B_ps / B_req = 3): the paper's
  // variant has no a1, b1 from them.
  ImportAndFit("small", "r110-1w,r110-2w", {"--model-variant", "paper"});
  EXPECT_THAT(fit_output_, HasSubstr("No contention model (a1, b1)"));
  EXPECT_THAT(fit_output_, HasSubstr("--base W"));
  Proc p = Spotdnn({"predict", "--workload", "small", "--catalog", "aws-paper-2023", "--cluster",
                    "p3.2xlarge=4", "--iterations", "1000", "--data-dir", Data()});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("no contention model"));
  EXPECT_THAT(p.err, HasSubstr("--base W"));
  // The fix, as said: a1, b1 from a built-in profile.
  p = Spotdnn({"profile", "fit", "--name", "small", "--jobs", "r110-1w,r110-2w", "--ps-bandwidth",
               "1200", "--base", "resnet110", "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  p = Spotdnn({"predict", "--workload", "small", "--catalog", "aws-paper-2023", "--cluster",
               "p3.2xlarge=4", "--iterations", "1000", "--data-dir", Data()});
  EXPECT_EQ(p.code, 0) << p.err;
  // Its export no longer claims to be the base's measurements.
  p = Spotdnn({"profile", "export", "small", "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  const auto exported = nlohmann::json::parse(p.out);
  EXPECT_THAT(exported.value("description", ""), HasSubstr("fitted from samples"));
  EXPECT_THAT(exported.value("description", ""), HasSubstr("resnet110"));
}

TEST_F(Newcomer, AFitThatIdentifiesNothingStoresNoVersion) {
  std::string log;
  for (int i = 1; i <= 20; ++i) {
    log += absl::StrFormat("SPOTDNN_SAMPLE job_id=bare worker_id=0 step=%d wall_time_s=%d\n", i,
                           1700000000 + i);
  }
  Proc p = Spotdnn({"profile", "import", Write("bare.log", log), "--data-dir", Data()});
  ASSERT_EQ(p.code, 0) << p.err;
  p = Spotdnn({"profile", "fit", "--name", "nothing", "--data-dir", Data()});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("no version is stored"));
  p = Spotdnn({"profile", "list", "--data-dir", Data(), "--json"});
  EXPECT_THAT(p.out, Not(HasSubstr("nothing")));
}

// 4. Import.

TEST_F(Newcomer, ImportReadsStandardInputAndStoresASampleOnce) {
  const std::string log = TrainLog(100);
  Proc p = Spotdnn({"profile", "import", "-", "--data-dir", Data(), "--json"}, log);
  ASSERT_EQ(p.code, 0) << p.err;
  const auto first = nlohmann::json::parse(p.out);
  // 100 global iterations a run: 100 + 2 x 50 + 4 x 25 + 8 x 12 samples.
  EXPECT_EQ(Count(first, "imported"), 396) << p.out;
  // The same samples again: already stored, not again.
  p = Spotdnn({"profile", "import", log, "--data-dir", Data(), "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  const auto second = nlohmann::json::parse(p.out);
  EXPECT_EQ(Count(second, "duplicates"), 396) << p.out;
  // /dev/stdin is read, not taken for an empty file.
  std::string other;
  for (int i = 1; i <= 10; ++i) {
    other += absl::StrFormat(
        "SPOTDNN_SAMPLE job_id=piped worker_id=0 step=%d wall_time_s=%d iteration_time_s=0.5\n", i,
        1700000000 + i);
  }
  p = Spotdnn({"profile", "import", "/dev/stdin", "--data-dir", Data(), "--json"},
              Write("other.log", other));
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(Count(nlohmann::json::parse(p.out), "imported"), 10) << p.out;
  // Nothing on standard input is an error, not "0 imported".
  p = Spotdnn({"profile", "import", "-", "--data-dir", Data()});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("nothing on standard input"));
}

// 5. Help and versions.

TEST_F(Newcomer, EveryBinaryListsItsFlagsAndItsVersion) {
  const std::map<std::string, std::string> flag_of = {
      {"spotdnn-predictor", "--listen"},   {"spotdnn-provisioner", "--listen"},
      {"spotdnn-profiler", "--db"},        {"spotdnn-detector", "--poll_interval"},
      {"spotdnn-agent", "--detector"},     {"spotdnn-metadata-emulator", "--port"},
      {"spotdnn-sim-worker", "--profiler"}};
  for (const auto& [binary, flag] : flag_of) {
    Proc p = Run(binary, {"--help"});
    const std::string all = p.out + p.err;
    EXPECT_THAT(all, Not(HasSubstr("No flags matched"))) << binary;
    EXPECT_THAT(all, HasSubstr(flag)) << binary;
    p = Run(binary, {"--version"});
    EXPECT_EQ(p.code, 0) << binary;
    EXPECT_THAT(p.out, ::testing::StartsWith(binary + " ")) << binary;
  }
  Proc p = Spotdnn({"--version"});
  EXPECT_EQ(p.code, 0);
  EXPECT_THAT(p.out, ::testing::StartsWith("spotdnn "));
  EXPECT_EQ(Spotdnn({"help", "nosuch"}).code, 2);
  p = Spotdnn({"plan", "--help"});
  for (const char* flag : {"--mode", "--parameter-servers", "--exhaustive-limit", "--data-dir",
                           "--profiler", "--budget", "--quota"}) {
    EXPECT_THAT(p.out, HasSubstr(flag)) << flag;
  }
}

// 6. Arguments and errors.

TEST_F(Newcomer, ErrorsNameTheFlagsAndFollowTheExitTable) {
  const std::vector<std::string> plan = {"plan",           "--workload", "resnet110", "--catalog",
                                         "aws-paper-2023", "--deadline", "30m"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> args = plan;
    args.insert(args.end(), more.begin(), more.end());
    return Spotdnn(args);
  };
  Proc p = with({"--iterations", "1000", "extra"});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("unexpected argument \"extra\""));
  p = with({"--iterations", "1000", "--quota", "nosuch.type=2"});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("--quota"));
  EXPECT_THAT(p.err, Not(HasSubstr("options.quota_overrides")));
  p = with({"--loss", "0.01"});  // below the model's floor: the service's slo.target_loss
  EXPECT_NE(p.code, 0);
  EXPECT_THAT(p.err + p.out, Not(HasSubstr("slo.target_loss")));
  p = with({"--iterations", "1000", "--parameter-servers", "99999999999"});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("too big"));
  EXPECT_THAT(p.err, Not(HasSubstr("not a whole number")));
  // A budget too small (the deadline alone can be met): the cheapest plan, not the fastest.
  p = Spotdnn({"plan", "--workload", "resnet110", "--catalog", "aws-paper-2023", "--deadline", "2h",
               "--iterations", "64000", "--budget", "0.0001"});
  EXPECT_EQ(p.code, 3) << p.err;
  EXPECT_THAT(p.out, HasSubstr("Cheapest possible:"));
  EXPECT_THAT(p.out, Not(HasSubstr("Fastest achievable")));
  // `run` with no stack up: a service failure (1); `down` with none: 0, saying so.
  p = Spotdnn(
      {"run", std::string(SPOTDNN_SOURCE_DIR) + "/deploy/examples/job.json", "--data-dir", Data()});
  EXPECT_EQ(p.code, 1) << p.err;
  EXPECT_THAT(p.err, HasSubstr("spotdnn up"));
  p = Spotdnn({"down", "--data-dir", Data()});
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("nothing to stop"));
}

// A second `up` starts nothing and does not say it does.
TEST_F(Newcomer, ASecondUpSaysItStartedNothing) {
  Proc first = Spotdnn({"up", "--data-dir", Data()});
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr("Starting the spotdnn stack"));
  Proc second = Spotdnn({"up", "--data-dir", Data()});
  EXPECT_EQ(second.code, 0) << second.err;
  EXPECT_THAT(second.out, Not(HasSubstr("Starting")));
  EXPECT_THAT(second.out, HasSubstr("Already up in " + Data() + ", nothing started"));
  Proc json = Spotdnn({"up", "--data-dir", Data(), "--json"});
  EXPECT_THAT(json.out, HasSubstr("\"already_up\":true"));
  EXPECT_EQ(Spotdnn({"down", "--data-dir", Data()}).code, 0);
}

// The service binaries refuse bad flags as the CLI does, and --help is 0.
TEST_F(Newcomer, ServiceBinariesRefuseBadFlagsAndHelpExitsZero) {
  for (const char* binary :
       {"spotdnn-predictor", "spotdnn-provisioner", "spotdnn-profiler", "spotdnn-detector"}) {
    Proc p = Run(binary, {"--lisen=127.0.0.1:0"});
    EXPECT_EQ(p.code, 2) << binary;
    EXPECT_THAT(p.err, HasSubstr("did you mean --listen?")) << binary;
    p = Run(binary, {"extra-arg"});
    EXPECT_EQ(p.code, 2) << binary;
    p = Run(binary, {"--help"});
    EXPECT_EQ(p.code, 0) << binary;
    EXPECT_THAT(p.out, HasSubstr("Serving:")) << binary;
    EXPECT_THAT(p.out, Not(HasSubstr(SPOTDNN_SOURCE_DIR))) << binary;
  }
}

// 7. Output a person reads.

TEST_F(Newcomer, TheFrontierChartsChosenPlanLabelStaysOnTheCanvas) {
  const std::string svg = dir_ + "/frontier.svg";
  Proc p = Spotdnn({"plan", "--workload", "resnet110", "--catalog", "aws-paper-2023", "--loss", "1",
                    "--deadline", "2h", "--mode", "frontier", "--plot", svg});
  ASSERT_EQ(p.code, 0) << p.err;
  const std::string text = ReadAll(svg);
  const std::regex label(
      "<text x=\"([0-9.-]+)\" y=\"[0-9.-]+\" text-anchor=\"(start|end|middle)\" "
      "fill=\"#d03030\">([^<]*)</text>");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, label)) << text;
  const double x = std::stod(m[1]), width = 7.0 * m[3].length();
  const std::string anchor = m[2];
  const double left = anchor == "start" ? x : anchor == "end" ? x - width : x - width / 2;
  EXPECT_GE(left, 0) << m[0];
  EXPECT_LE(left + width, 760) << m[0];
}

TEST_F(Newcomer, WatchJsonIsInTheStyleOfTheOtherCommands) {
  pb::RevocationEvent e;
  e.set_sequence(7);
  e.set_kind(pb::RevocationEvent::KIND_NOTICE);
  e.set_instance_id("i-1");
  e.set_cloud(pb::CLOUD_AWS);
  e.set_notice_unix_ms(1700000000000);
  const auto json = nlohmann::json::parse(RevocationEventJson(e));
  EXPECT_EQ(json["sequence"], 7);  // a number, not "7"
  EXPECT_EQ(json["kind"], "notice");
  EXPECT_EQ(json["cloud"], "aws");
  EXPECT_EQ(json["notice_unix_ms"], 1700000000000);
  EXPECT_TRUE(json["effective_unix_ms"].is_null());
}

TEST_F(Newcomer, ProgressAndSummarySayWhichPlanTheirNumbersComeFrom) {
  job::ProgressEvent progress{.elapsed_s = 6.3,
                              .iterations_done = 10,
                              .target_iterations = 137,
                              .first_plan_iterations = 49,
                              .workers_running = 1};
  const std::string line = EventLine({.at = absl::Now(), .job_id = "j", .what = progress});
  EXPECT_THAT(line, HasSubstr("10/137 global steps"));
  EXPECT_THAT(line, HasSubstr("first plan 49"));
  EXPECT_THAT(line, HasSubstr("1 worker running"));  // not "1 workers"
  job::JobSummary summary{.job_id = "j",
                          .first_plan_iterations = 49,
                          .first_plan_time_s = 38.1,
                          .first_plan_cost_usd = 0.11,
                          .target_iterations = 137,
                          .iterations_done = 137,
                          .predicted_time_s = 30,
                          .predicted_cost_usd = 0.1,
                          .actual_time_s = 27,
                          .actual_cost_usd = 0.09};
  std::ostringstream out;
  PrintSummary(summary, out);
  EXPECT_THAT(out.str(), HasSubstr("first plan"));
  EXPECT_THAT(out.str(), HasSubstr("current"));
  // No budget, no loss target: null, as `plan --json` says them.
  const auto json = nlohmann::json::parse(SummaryJson(summary));
  EXPECT_TRUE(json["budget_usd"].is_null());
  EXPECT_TRUE(json["deadline_s"].is_null());
  EXPECT_TRUE(json["target_loss"].is_null());
}

// What a job's summary and progress claim is what was measured.
TEST_F(Newcomer, ASummaryClaimsOnlyWhatWasMeasured) {
  job::JobSummary none{.job_id = "j",
                       .state = job::JobState::kFinished,
                       .target_loss = 0.1,
                       .deadline_s = 60,
                       .actual_time_s = 30,
                       .actual_cost_usd = 1795.37,
                       .deadline_met = true,
                       .budget_met = true};
  std::ostringstream out;
  PrintSummary(none, out);
  EXPECT_THAT(out.str(), HasSubstr("Target reached: unknown"));
  EXPECT_THAT(out.str(), HasSubstr("SLO met: unknown"));
  EXPECT_THAT(out.str(), HasSubstr("not measured"));
  const std::string text = SummaryJson(none);
  EXPECT_THAT(text, HasSubstr("\"actual_cost_usd\":1795.37,"));  // not 1795.3700000000001
  const auto json = nlohmann::json::parse(text);
  EXPECT_TRUE(json["final_loss"].is_null());
  EXPECT_TRUE(json["loss_reached"].is_null());
  EXPECT_TRUE(json["slo_met"].is_null());
  // A measured loss is named with its smoothing, the raw last values beside it.
  job::JobSummary measured = none;
  measured.final_loss = 0.0996;
  measured.loss_smoothing = job::kLossSmoothingName;
  measured.worker_last_losses = {{"w-1", 0.118}, {"w-2", 0.111}};
  measured.loss_reached = true;
  measured.target_kind = "loss";
  measured.target = "loss <= 0.1";
  measured.target_measure = "the workers' smoothed loss";
  measured.target_measured = 0.0996;
  measured.target_reached = true;
  measured.slo_met = true;
  std::ostringstream out2;
  PrintSummary(measured, out2);
  EXPECT_THAT(out2.str(), HasSubstr("moving average"));
  EXPECT_THAT(out2.str(), HasSubstr("w-1 0.118, w-2 0.111"));
  EXPECT_THAT(out2.str(), HasSubstr("Target reached: yes"));
  EXPECT_THAT(out2.str(),
              HasSubstr("Target loss <= 0.1: judged by the workers' smoothed loss (0.0996)"));
  // A running job is on track or behind, not "SLO met: NO".
  job::JobSummary running = none;
  running.state = job::JobState::kRunning;
  std::ostringstream out3;
  PrintSummary(running, out3);
  EXPECT_THAT(out3.str(), HasSubstr("running, on track"));
  EXPECT_THAT(out3.str(), Not(HasSubstr("SLO met")));
  // Past the prediction: re-predicted, the plan's kept, the cost and what is left.
  job::ProgressEvent past{.elapsed_s = 43.3,
                          .iterations_done = 371,
                          .target_iterations = 360,
                          .first_plan_iterations = 360,
                          .predicted_iterations = 520,
                          .cost_usd = 0.0123,
                          .eta_s = 12,
                          .workers_running = 2};
  const std::string line = EventLine({.at = absl::Now(), .job_id = "j", .what = past});
  EXPECT_THAT(line, HasSubstr("371/520 global steps (71.3%; re-predicted"));
  EXPECT_THAT(line, HasSubstr("the plan's 360"));
  EXPECT_THAT(line, HasSubstr("$0.0123 so far"));
  EXPECT_THAT(line, HasSubstr("left"));
  EXPECT_THAT(line, Not(HasSubstr("100.0%")));
}

// 8. Register an instance without grpcurl.

TEST_F(Newcomer, DetectorRegisterListUnregister) {
  const std::string port_file = dir_ + "/detector.port";
  testing_util::Child detector(
      {absl::StrCat(SPOTDNN_BINARY_DIR, "/spotdnn-detector"), "--listen=127.0.0.1:0",
       "--port_file=" + port_file, "--db=" + dir_ + "/detector.db"},
      dir_ + "/detector.log");
  const int port = testing_util::ReadPort(port_file);
  ASSERT_GT(port, 0) << ReadAll(dir_ + "/detector.log");
  const std::string server = absl::StrCat("127.0.0.1:", port);
  Proc p = Spotdnn({"detector", "register", "i-1", "--job", "j", "--cloud", "aws",
                    "--metadata-endpoint", "http://127.0.0.1:9/i/i-1", "--server", server});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_THAT(p.out, HasSubstr("Registered i-1"));
  p = Spotdnn({"detector", "register", "i-2", "--job", "j", "--server", server});
  ASSERT_EQ(p.code, 0) << p.err;
  p = Spotdnn(
      {"detector", "register", "i-3", "--metadata-endpoint", "http://x", "--server", server});
  EXPECT_EQ(p.code, 2);
  EXPECT_THAT(p.err, HasSubstr("--cloud"));
  p = Spotdnn({"detector", "list", "--server", server, "--json"});
  ASSERT_EQ(p.code, 0) << p.err;
  auto listed = nlohmann::json::parse(p.out);
  ASSERT_EQ(listed["instances"].size(), 2u) << p.out;
  EXPECT_EQ(listed["instances"][0]["instance_id"], "i-1");
  EXPECT_EQ(listed["instances"][0]["cloud"], "aws");
  EXPECT_TRUE(listed["instances"][1]["cloud"].is_null());
  p = Spotdnn({"detector", "unregister", "i-1", "i-2", "--server", server});
  ASSERT_EQ(p.code, 0) << p.err;
  p = Spotdnn({"detector", "list", "--server", server});
  EXPECT_THAT(p.out, HasSubstr("watches no instances"));
  p = Spotdnn({"detector", "unregister", "i-9", "--server", server});
  EXPECT_EQ(p.code, 2) << p.err;
  EXPECT_THAT(p.err, HasSubstr("i-9"));
  detector.Stop();
  // Nothing listening: exit 1, naming the address.
  p = Spotdnn({"detector", "list", "--server", server});
  EXPECT_EQ(p.code, 1);
  EXPECT_THAT(p.err, HasSubstr(server));
}

}  // namespace
}  // namespace spotdnn::gateway
