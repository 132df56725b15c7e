// spotdnn simulate, plan --confidence / --lifetimes and catalog hazards, in-process (and against a
// real detector service on 127.0.0.1:0 for --from-detector).
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/clock.h"
#include "detector/detector.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/common/server.h"
#include "services/detector/detector_service.h"
#include "services/gateway/cli/cli.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

google::protobuf::Struct Json(const std::string& text) {
  google::protobuf::Struct s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &s).ok()) << text;
  return s;
}

class RiskCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("spotdnn-risk-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // K80 lifetimes: every third within the first 40 minutes, the rest past GCE's 24 h limit.
    std::ofstream f(Lifetimes());
    f << "K80,,\r\nVM name,Start,Terminate\r\n";
    for (int i = 0; i < 30; ++i) {
      const int minutes = i % 3 == 0 ? 10 + i : 24 * 60 + 5;
      f << "vm-" << i << ",1/1/20 00:00," << (minutes >= 24 * 60 ? "1/2/20 00:05" : "")
        << (minutes < 24 * 60 ? "1/1/20 00:" + std::to_string(minutes) : "") << "\r\n";
    }
    f << "Previous experiments,,\r\ntest3,1046985:50:22,1047004:26:50\r\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Lifetimes() const { return (dir_ / "lifetimes.csv").string(); }

  std::vector<std::string> PlanArgs(std::vector<std::string> extra) const {
    std::vector<std::string> args = {
        "plan",   "--workload", "resnet110",  "--catalog", "aws-spotdnn-prototype",
        "--loss", "0.9",        "--deadline", "30m"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  fs::path dir_;
};

TEST_F(RiskCommandTest, PlanWithConfidenceShowsBothPlansAndTheirProbabilities) {
  const CliRun r = Cli(PlanArgs({"--confidence", "0.9", "--lifetimes", Lifetimes(), "--runs",
                                 "2000", "--notice", "30s", "--takeover-delay", "60s", "--json"}));
  ASSERT_TRUE(r.code == kExitOk || r.code == kExitInfeasible) << r.err;
  const auto f = Json(r.out).fields();
  ASSERT_TRUE(f.contains("plain_plan"));
  const auto& plain = f.at("plain_plan").struct_value().fields();
  EXPECT_TRUE(plain.at("feasible").bool_value());
  EXPECT_GE(plain.at("p_meet_deadline").number_value(), 0);
  EXPECT_GT(plain.at("expected_cost_usd").number_value(), 0);
  EXPECT_EQ(plain.at("risk").struct_value().fields().at("runs").number_value(), 2000);
  EXPECT_EQ(f.at("confidence").number_value(), 0.9);
  EXPECT_EQ(f.at("revocation_models").list_value().values_size(), 5);
  if (r.code == kExitOk) {
    EXPECT_GE(f.at("p_meet_deadline").number_value(), 0.9);
    EXPECT_GT(f.at("expected_cost_usd").number_value(), 0);
    EXPECT_EQ(f.at("strategy").string_value(), "risk-aware");
    EXPECT_GE(f.at("p_meet_deadline").number_value(), plain.at("p_meet_deadline").number_value());
  }
  // The table: both plans, the premium, where the lifetimes came from.
  const CliRun table = Cli(PlanArgs({"--confidence", "0.9", "--lifetimes", Lifetimes(), "--runs",
                                     "2000", "--notice", "30s", "--takeover-delay", "60s"}));
  EXPECT_THAT(table.out, HasSubstr("Probability of meeting the deadline"));
  EXPECT_THAT(table.out, HasSubstr("plain exact"));
  EXPECT_THAT(table.out, HasSubstr("section \"K80\""));
  EXPECT_THAT(table.out, HasSubstr("pooled sections K80"));
}

TEST_F(RiskCommandTest, PlanWithLifetimesOnlySimulatesThePlan) {
  const CliRun r = Cli(PlanArgs({"--lifetimes", Lifetimes(), "--runs", "500", "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  EXPECT_EQ(f.at("strategy").string_value(), "exact");
  EXPECT_EQ(f.at("risk").struct_value().fields().at("runs").number_value(), 500);
  EXPECT_TRUE(f.contains("p_meet_deadline"));
}

TEST_F(RiskCommandTest, FrontierChartIsColouredByProbability) {
  const std::string svg = (dir_ / "frontier.svg").string();
  const CliRun r = Cli({"plan", "--workload", "resnet110", "--catalog", "aws-spotdnn-prototype",
                        "--loss", "0.9", "--deadline", "40m", "--mode", "frontier", "--lifetimes",
                        Lifetimes(), "--runs", "300", "--plot", svg, "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  const auto& points = f.at("frontier").list_value().values();
  ASSERT_GT(points.size(), 1);
  for (const auto& p : points) {
    EXPECT_TRUE(p.struct_value().fields().contains("p_meet_deadline"));
  }
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("hsl("));
  EXPECT_THAT(text.str(), HasSubstr("P(meet deadline), simulated"));
  EXPECT_THAT(text.str(), HasSubstr("P(meet deadline) "));
}

TEST_F(RiskCommandTest, PlanRiskFlagsAreChecked) {
  struct Case {
    std::vector<std::string> extra;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--confidence", "1"}, "--confidence = \"1\""},
      {{"--confidence", "0.9", "--mode", "budget", "--budget", "5"}, "--mode deadline"},
      {{"--confidence", "0.9"}, "--confidence: no instance type"},
      {{"--lifetimes", "/nonexistent/x.csv"}, "--lifetimes: lifetime file \"/nonexistent/x.csv\""},
      {{"--map", "T4=K80"}, "give --lifetimes FILE"},
      {{"--lifetimes", Lifetimes(), "--unmatched", "maybe"}, "--unmatched = \"maybe\""},
      {{"--lifetimes", Lifetimes(), "--runs", "0"}, "--runs"},
      {{"--lifetimes", Lifetimes(), "--seed", "-1"}, "--seed = \"-1\""},
      {{"--lifetimes", Lifetimes(), "--notice", "soon"}, "--notice"},
      {{"--lifetimes", Lifetimes(), "--unmatched", "refuse"}, "g4dn.4xlarge"},
      {{"--lifetimes", Lifetimes(), "--map", "A100=K80"}, "A100"},
  };
  for (const Case& c : cases) {
    const CliRun r = Cli(PlanArgs(c.extra));
    EXPECT_EQ(r.code, kExitBadInput) << c.message << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.message));
  }
}

TEST_F(RiskCommandTest, SimulateReportsTheDistributionsAndIsDeterministicForASeed) {
  const std::vector<std::string> args = {
      "simulate",         "--workload", "resnet110",  "--catalog", "aws-spotdnn-prototype",
      "--loss",           "0.9",        "--deadline", "30m",       "--lifetimes",
      Lifetimes(),        "--runs",     "3000",       "--seed",    "7",
      "--takeover-delay", "60s",        "--json"};
  const CliRun a = Cli(args);
  ASSERT_EQ(a.code, kExitOk) << a.err;
  const CliRun b = Cli(args);
  EXPECT_EQ(a.out, b.out.substr(0, b.out.find("\"simulate_ms\"")) +
                       a.out.substr(a.out.find("\"simulate_ms\"")));
  const auto f = Json(a.out).fields();
  EXPECT_EQ(f.at("runs").number_value(), 3000);
  EXPECT_EQ(f.at("seed").number_value(), 7);  // a number, as the other counts
  EXPECT_EQ(f.at("cluster_from").string_value(), "plan");
  for (const char* key : {"p_meet_deadline", "p_meet_deadline_low", "p_meet_deadline_high",
                          "expected_cost_usd", "cost_p50_usd", "cost_p90_usd", "expected_time_s",
                          "time_p50_s", "time_p90_s", "revocations_per_run"}) {
    EXPECT_TRUE(f.contains(key)) << key;
  }
  EXPECT_GT(f.at("revocations_per_run").number_value(), 0);
  EXPECT_LE(f.at("time_p50_s").number_value(), f.at("time_p90_s").number_value());

  const CliRun cluster =
      Cli({"simulate", "--workload", "resnet110", "--catalog", "aws-spotdnn-prototype",
           "--iterations", "5000", "--cluster", "g3.8xlarge=4", "--deadline", "40m", "--lifetimes",
           Lifetimes(), "--runs", "500"});
  ASSERT_EQ(cluster.code, kExitOk) << cluster.err;
  EXPECT_THAT(cluster.out, HasSubstr("cluster g3.8xlarge=4 (given)"));
  EXPECT_THAT(cluster.out, HasSubstr("P(meet deadline)"));
  EXPECT_THAT(cluster.out, HasSubstr("revocations per run"));

  const CliRun missing = Cli({"simulate", "--workload", "resnet110", "--catalog",
                              "aws-spotdnn-prototype", "--deadline", "30m"});
  EXPECT_EQ(missing.code, kExitBadInput);
  EXPECT_THAT(missing.err, HasSubstr("--loss L and --iterations N"));
  const CliRun iterations =
      Cli({"simulate", "--workload", "resnet110", "--catalog", "aws-spotdnn-prototype",
           "--deadline", "30m", "--iterations", "100"});
  EXPECT_THAT(iterations.err, HasSubstr("--iterations needs --cluster"));
  const CliRun impossible =
      Cli({"simulate", "--workload", "resnet110", "--catalog", "aws-spotdnn-prototype", "--loss",
           "0.9", "--deadline", "1m", "--lifetimes", Lifetimes()});
  EXPECT_EQ(impossible.code, kExitInfeasible) << impossible.err;
  const CliRun help = Cli({"help", "simulate"});
  EXPECT_THAT(help.out, HasSubstr("--takeover-delay"));
}

TEST_F(RiskCommandTest, SimulateASynchronousJobReportsRestartsAndTheWorkRedone) {
  const std::vector<std::string> asp = {
      "simulate",         "--workload", "resnet110",  "--catalog", "aws-spotdnn-prototype",
      "--loss",           "0.9",        "--deadline", "30m",       "--lifetimes",
      Lifetimes(),        "--runs",     "2000",       "--seed",    "7",
      "--takeover-delay", "60s",        "--json"};
  std::vector<std::string> sync = asp;
  for (const char* a : {"--sync", "allreduce", "--restart", "2m", "--checkpoint-every", "10m"}) {
    sync.push_back(a);
  }
  const CliRun a = Cli(asp);
  const CliRun s = Cli(sync);
  ASSERT_EQ(a.code, kExitOk) << a.err;
  ASSERT_EQ(s.code, kExitOk) << s.err;
  const auto fa = Json(a.out).fields();
  const auto fs = Json(s.out).fields();
  EXPECT_FALSE(fa.contains("restarts_per_run"));
  EXPECT_TRUE(fs.at("synchronous").bool_value());
  EXPECT_EQ(fs.at("restart_s").number_value(), 120);
  EXPECT_EQ(fs.at("checkpoint_every_s").number_value(), 600);
  // The same lifetimes (seed and plan); the longer synchronous runs see at least as many
  // revocations, each a restart, and the joins are restarts too.
  EXPECT_GE(fs.at("revocations_per_run").number_value(),
            fa.at("revocations_per_run").number_value());
  EXPECT_GE(fs.at("restarts_per_run").number_value(), fs.at("revocations_per_run").number_value());
  EXPECT_GT(fs.at("redone_mean_s").number_value(), 0);
  EXPECT_GT(fs.at("redone_mean_steps").number_value(), 0);
  EXPECT_LE(fs.at("redone_p50_s").number_value(), fs.at("redone_p90_s").number_value());
  EXPECT_GT(fs.at("expected_time_s").number_value(), fa.at("expected_time_s").number_value());

  sync.erase(std::find(sync.begin(), sync.end(), "--json"));  // the table
  const CliRun table = Cli(sync);
  ASSERT_EQ(table.code, kExitOk) << table.err;
  EXPECT_THAT(table.out, HasSubstr("restarts per run"));
  EXPECT_THAT(table.out, HasSubstr("training redone"));
  EXPECT_THAT(table.out, HasSubstr("steps redone"));

  // Bad input names the flag or the field.
  std::vector<std::string> base(asp.begin(), asp.end() - 1);
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  };
  const CliRun negative = with({"--sync", "allreduce", "--restart", "-5"});
  EXPECT_EQ(negative.code, kExitBadInput);
  EXPECT_THAT(negative.err, HasSubstr("--restart"));
  const CliRun zero = with({"--sync", "allreduce", "--checkpoint-every", "0"});
  EXPECT_EQ(zero.code, kExitBadInput);
  EXPECT_THAT(zero.err, HasSubstr("--checkpoint-every"));
  const CliRun asp_restart = with({"--restart", "1m"});
  EXPECT_EQ(asp_restart.code, kExitBadInput);
  EXPECT_THAT(asp_restart.err, HasSubstr("restart_s: applies to a synchronous"));
  const CliRun kind = with({"--sync", "ring"});
  EXPECT_THAT(kind.err, HasSubstr("--sync = \"ring\""));
  // A profile's own restart_s and checkpoint_every_s, checked like the flags.
  std::ifstream in(std::string(SPOTDNN_SOURCE_DIR) + "/deploy/workloads/resnet110.json");
  std::stringstream text;
  text << in.rdbuf();
  std::string profile = text.str();
  const size_t brace = profile.find('{');
  ASSERT_NE(brace, std::string::npos);
  profile.insert(brace + 1, "\"restart_s\": -5, \"checkpoint_every_s\": 300,");
  const std::string path = (dir_ / "w.json").string();
  std::ofstream(path) << profile;
  base[2] = path;
  const CliRun bad_profile = with({"--sync", "allreduce"});
  EXPECT_EQ(bad_profile.code, kExitBadInput) << bad_profile.err;
  EXPECT_THAT(bad_profile.err, HasSubstr("restart_s = -5"));
}

TEST_F(RiskCommandTest, CatalogHazardsFromAFileWritesTheLifetimesIntoTheCatalog) {
  const std::string out = (dir_ / "with-lifetimes.json").string();
  const CliRun r = Cli({"catalog", "hazards", "--catalog", "aws-spotdnn-prototype", "--lifetimes",
                        Lifetimes(), "--out", out, "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  EXPECT_EQ(f.at("rows_used").number_value(), 30);
  EXPECT_EQ(f.at("rows_skipped").number_value(), 1);
  const auto& types = f.at("types").list_value().values();
  ASSERT_EQ(types.size(), 5);
  const auto& k80 = types[0].struct_value().fields();
  EXPECT_EQ(k80.at("instance_type").string_value(), "p2.xlarge");
  EXPECT_EQ(k80.at("model").string_value(), "kaplan-meier");
  EXPECT_EQ(k80.at("lifetimes").number_value(), 30);
  EXPECT_EQ(k80.at("revocations").number_value(), 10);
  EXPECT_NEAR(k80.at("survival").struct_value().fields().at("1h").number_value(), 2.0 / 3, 1e-9);
  // The written catalog plans with confidence without --lifetimes.
  const CliRun plan = Cli({"plan", "--workload", "resnet110", "--catalog", out, "--loss", "0.9",
                           "--deadline", "30m", "--confidence", "0.5", "--runs", "300", "--json"});
  EXPECT_TRUE(plan.code == kExitOk || plan.code == kExitInfeasible) << plan.err;
  EXPECT_THAT(plan.out, HasSubstr("from " + Lifetimes()));
  const CliRun text = Cli({"catalog", "hazards", "--catalog", "aws-spotdnn-prototype",
                           "--lifetimes", Lifetimes(), "--censor-at", "none"});
  ASSERT_EQ(text.code, kExitOk) << text.err;
  EXPECT_THAT(text.out, HasSubstr("S(24h)"));
  EXPECT_THAT(text.out, HasSubstr("30 lifetimes (30 revoked, 0 censored)"));
  const CliRun neither = Cli({"catalog", "hazards", "--catalog", "aws-spotdnn-prototype"});
  EXPECT_EQ(neither.code, kExitBadInput);
  EXPECT_THAT(neither.err, HasSubstr("--lifetimes FILE and --from-detector"));
}

TEST_F(RiskCommandTest, CatalogHazardsFromTheDetectorsHistory) {
  namespace d = ::spotdnn::detector;
  d::DetectorOptions options;
  options.run_poller = false;
  options.heartbeat_interval = absl::Seconds(60);
  auto detector = d::Detector::Open(options);
  ASSERT_TRUE(detector.ok());
  std::shared_ptr<d::Detector> shared = *std::move(detector);
  services::DetectorServiceImpl service(shared);
  auto started = services::StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(started.ok());
  // Two p2.xlarge: one revoked, one unregistered; a g3.8xlarge still running; one without a type.
  for (const auto& [id, type] : std::vector<std::pair<std::string, std::string>>{
           {"i-1", "p2.xlarge"}, {"i-2", "p2.xlarge"}, {"i-3", "g3.8xlarge"}, {"i-4", ""}}) {
    ASSERT_TRUE(shared->Register({.instance_id = id, .job_id = "j", .instance_type = type}).ok());
  }
  d::Notice notice{.kind = d::EventKind::kNotice, .action = "terminate", .key = "n1"};
  ASSERT_TRUE(
      shared->ReportNotice("i-1", "j", d::Cloud::kAws, notice, base::RealClock::Get().NowUnixMs())
          .ok());
  ASSERT_TRUE(shared->Unregister("i-2").ok());
  ASSERT_TRUE(shared->Unregister("i-1").ok());  // already revoked: recorded once
  auto lifetimes = shared->Lifetimes("");
  ASSERT_TRUE(lifetimes.ok());
  ASSERT_EQ(lifetimes->size(), 4u);
  int revoked = 0;
  for (const d::Lifetime& l : *lifetimes) revoked += l.revoked;
  EXPECT_EQ(revoked, 1);

  const std::string target = "127.0.0.1:" + std::to_string(started->port);
  const CliRun r = Cli({"catalog", "hazards", "--catalog", "aws-spotdnn-prototype",
                        "--from-detector", target, "--unmatched", "never", "--json"});
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto types = Json(r.out).fields().at("types").list_value().values();
  const auto& p2 = types[0].struct_value().fields();
  EXPECT_EQ(p2.at("instance_type").string_value(), "p2.xlarge");
  EXPECT_EQ(p2.at("lifetimes").number_value(), 2);
  EXPECT_EQ(p2.at("revocations").number_value(), 1);
  const auto& g3 = types[2].struct_value().fields();
  EXPECT_EQ(g3.at("instance_type").string_value(), "g3.8xlarge");
  EXPECT_EQ(g3.at("lifetimes").number_value(), 1);
  EXPECT_EQ(g3.at("revocations").number_value(), 0);
  EXPECT_EQ(types[1].struct_value().fields().at("model").string_value(), "never");
  const CliRun text = Cli({"catalog", "hazards", "--catalog", "aws-spotdnn-prototype",
                           "--from-detector", target, "--unmatched", "never"});
  EXPECT_THAT(text.out, HasSubstr("1 without an instance type left out"));
  started->server->Shutdown();
  service.Stop();
}

}  // namespace
}  // namespace spotdnn::gateway
