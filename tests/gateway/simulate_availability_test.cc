// spotdnn simulate --availability FILE --work ...: the one-instance form (issue 26), in-process.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class SimulateAvailabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("spotdnn-avail-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    // 4 days of 195 s ticks: spot for 20 h, then an outage of 10 h, repeated.
    std::ofstream f(Trace());
    f << "{\"metadata\": {\"gap_seconds\": 195}, \"data\": [";
    const int ticks = 4 * 86400 / 195;
    for (int k = 0; k < ticks; ++k) {
      const double h = k * 195.0 / 3600;
      f << (k ? "," : "") << (std::fmod(h, 30) < 20 ? 1 : 0);
    }
    f << "]}";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Trace() const { return (dir_ / "trace.json").string(); }
  std::vector<std::string> Args(std::vector<std::string> extra) const {
    std::vector<std::string> a = {"simulate", "--availability", Trace(), "--work",
                                  "10h",      "--deadline",     "16h",   "--changeover",
                                  "12m",      "--spot-price",   "0.918", "--on-demand-price",
                                  "3.06",     "--start-every",  "12h"};
    // A flag in `extra` that is already there replaces its value.
    for (size_t i = 0; i + 1 < extra.size(); ++i) {
      auto it = std::find(a.begin(), a.end(), extra[i]);
      if (it != a.end() && extra[i].rfind("--", 0) == 0 && it + 1 != a.end()) {
        *(it + 1) = extra[i + 1];
        extra.erase(extra.begin() + i, extra.begin() + i + 2);
        --i;
      }
    }
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  fs::path dir_;
};

google::protobuf::Struct Json(const std::string& text) {
  google::protobuf::Struct s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &s).ok()) << text;
  return s;
}

TEST_F(SimulateAvailabilityTest, JsonHasWindowsMetFractionAndMeanCost) {
  double optimum = 0;
  for (const char* policy : {"optimum", "ours", "uniform-progress", "greedy", "on-demand"}) {
    const CliRun r = Cli(Args({"--policy", policy, "--json"}));
    ASSERT_EQ(r.code, kExitOk) << policy << ": " << r.err;
    const auto f = Json(r.out).fields();
    const auto& windows = f.at("windows").list_value().values();
    ASSERT_EQ(windows.size(), 7) << policy;  // starts 0, 12h, ..., 72h (72h + 16h <= 96h)
    EXPECT_EQ(windows[1].struct_value().fields().at("start_s").number_value(), 12 * 3600);
    for (const auto& w : windows) {
      EXPECT_TRUE(w.struct_value().fields().at("met").bool_value()) << policy;
      EXPECT_GT(w.struct_value().fields().at("cost_usd").number_value(), 0);
    }
    EXPECT_EQ(f.at("met_fraction").number_value(), 1) << policy;
    const double mean = f.at("mean_cost_usd").number_value();
    if (std::string(policy) == "optimum") optimum = mean;
    EXPECT_GE(mean, optimum - 1e-9) << policy;
    if (std::string(policy) == "on-demand") {
      EXPECT_NEAR(mean, 10.2 * 3.06, 1e-6);  // work and one changeover
    }
  }
}

TEST_F(SimulateAvailabilityTest, TableShowsWindowsAndTotals) {
  const CliRun r = Cli(Args({}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("policy ours"));
  EXPECT_THAT(r.out, HasSubstr("changeovers"));
  EXPECT_THAT(r.out, HasSubstr("7 windows: deadline met in 100.0%"));
  EXPECT_THAT(r.out, HasSubstr("on-demand only $31.2120"));
}

TEST_F(SimulateAvailabilityTest, FallbackNoneMayMiss) {
  const CliRun r = Cli(Args({"--fallback", "none", "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  EXPECT_EQ(f.at("policy").string_value(), "spot-only");
  EXPECT_LT(f.at("met_fraction").number_value(), 1);
  EXPECT_GT(f.at("missed_where_on_demand_could_meet").number_value(), 0);
}

TEST_F(SimulateAvailabilityTest, BadFlagsNameFlagAndValue) {
  struct Case {
    std::vector<std::string> extra;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{"--policy", "cheapest"}, "--policy = \"cheapest\""},
      {{"--fallback", "spot"}, "--fallback = \"spot\""},
      {{"--start-every", "soon"}, "--start-every = \"soon\""},
      {{"--changeover", "-3m"}, "--changeover = \"-3m\""},
  };
  for (const Case& c : cases) {
    const CliRun r = Cli(Args(c.extra));
    EXPECT_EQ(r.code, kExitBadInput) << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.want));
  }
  CliRun r = Cli(Args({"--work", "ten"}));
  EXPECT_THAT(r.err, HasSubstr("--work = \"ten\""));
  r = Cli(Args({"--on-demand-price", "x"}));
  EXPECT_THAT(r.err, HasSubstr("--on-demand-price = \"x\""));
  r = Cli(Args({"--deadline", "30d"}));  // longer than the trace
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("--deadline"));
  // A broken trace names the file and line.
  std::ofstream(dir_ / "bad.csv") << "0,1\n100,1\n50,1\n";
  r = Cli(Args({"--availability", (dir_ / "bad.csv").string()}));
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("bad.csv:3: time = 50"));
  r = Cli(Args({"--availability", (dir_ / "missing.json").string()}));
  EXPECT_THAT(r.err, HasSubstr("missing.json"));
}

// The cluster forms: simulate and plan with TYPE=FILE traces (no revocation model in this catalog,
// so simulate replays the cheapest plan's capacity alone).
TEST_F(SimulateAvailabilityTest, ClusterSimulateAndPlanReplayTheTraces) {
  const std::string csv = (dir_ / "p2.csv").string();
  std::ofstream(csv) << "time,count\n0,1\n36000,1\n36000,0\n43200,0\n43200,1\n200000,1\n";
  const std::vector<std::string> common = {"--workload",     "resnet110",
                                           "--catalog",      "aws-spotdnn-prototype",
                                           "--loss",         "0.9",
                                           "--deadline",     "1h",
                                           "--availability", "p2.xlarge=" + csv,
                                           "--changeover",   "2m",
                                           "--start-every",  "2h",
                                           "--json"};
  std::vector<std::string> a = {"simulate"};
  a.insert(a.end(), common.begin(), common.end());
  CliRun r = Cli(a);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  auto f = Json(r.out).fields();
  const auto& av = f.at("availability").struct_value().fields();
  EXPECT_EQ(av.at("policy").string_value(), "ours");
  EXPECT_EQ(av.at("met_fraction").number_value(), 1);
  EXPECT_GT(av.at("on_demand_hours").number_value(), 0);  // the outage from 10 h to 12 h
  EXPECT_GT(av.at("windows").list_value().values_size(), 20);
  a.push_back("--fallback");
  a.push_back("none");
  r = Cli(a);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  f = Json(r.out).fields();
  EXPECT_LT(f.at("availability").struct_value().fields().at("met_fraction").number_value(), 1);

  std::vector<std::string> plan = {"plan"};
  plan.insert(plan.end(), common.begin(), common.end());
  r = Cli(plan);
  ASSERT_EQ(r.code, kExitOk) << r.err;
  f = Json(r.out).fields();
  const auto& pa = f.at("availability").struct_value().fields();
  EXPECT_EQ(pa.at("with_fallback").struct_value().fields().at("p_meet_deadline").number_value(), 1);
  EXPECT_LT(pa.at("spot_only").struct_value().fields().at("p_meet_deadline").number_value(), 1);
  plan.pop_back();  // the table
  r = Cli(plan);
  EXPECT_THAT(r.out, HasSubstr("with the on-demand fallback"));
  plan.push_back("--json");
  plan[10] = "p2.xlarge";  // not TYPE=FILE
  r = Cli(plan);
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("--availability = \"p2.xlarge\""));
}

}  // namespace
}  // namespace spotdnn::gateway
