// spotdnn simulate --availability FILE --work ...: the one-instance form, in-process.
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
using ::testing::Not;

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

// Two zones: the test's trace as zone a, and zone b with spot while a has none (from an hour before
// a's outage to its end), on a coarser tick and a shorter span. The job moves to b instead of
// buying on-demand; the notes say how the traces were put on one grid.
TEST_F(SimulateAvailabilityTest, ZonesMoveTheJobInsteadOfBuyingOnDemand) {
  const std::string b = (dir_ / "b.json").string();
  {
    std::ofstream f(b);
    f << "{\"metadata\": {\"gap_seconds\": 390}, \"data\": [";
    const int ticks = 3 * 86400 / 390;
    for (int k = 0; k < ticks; ++k) {
      const double h = k * 390.0 / 3600;
      f << (k ? "," : "") << (std::fmod(h, 30) >= 19 ? 1 : 0);
    }
    f << "]}";
  }
  const std::string zones = "a=" + Trace() + ",b=" + b;
  const CliRun one = Cli(Args({"--json"}));
  ASSERT_EQ(one.code, kExitOk) << one.err;
  double optimum = 0;
  for (const char* policy : {"optimum", "ours", "greedy", "uniform-progress"}) {
    const CliRun r = Cli(Args({"--availability", zones, "--policy", policy, "--json"}));
    ASSERT_EQ(r.code, kExitOk) << policy << ": " << r.err;
    const auto f = Json(r.out).fields();
    const auto& windows = f.at("windows").list_value().values();
    ASSERT_EQ(windows.size(), 5) << policy;  // b's 3 days: starts 0, 12h, ..., 48h
    EXPECT_EQ(f.at("met_fraction").number_value(), 1) << policy;
    EXPECT_EQ(f.at("on_demand_hours").number_value(), 0) << policy;
    EXPECT_GT(f.at("moves").number_value(), 0) << policy;
    EXPECT_EQ(f.at("zones").list_value().values().size(), 2u);
    bool both = false;
    for (const auto& w : windows) {
      both |= w.struct_value().fields().at("zones").list_value().values().size() == 2;
    }
    EXPECT_TRUE(both) << policy << ": no window ran in both zones";
    const double mean = f.at("mean_cost_usd").number_value();
    if (std::string(policy) == "optimum") optimum = mean;
    EXPECT_GE(mean, optimum - 1e-9) << policy;
    const std::string notes = f.at("notes").list_value().values()[0].string_value();
    EXPECT_THAT(notes, HasSubstr("resampled to 3m 15s")) << policy;
    EXPECT_THAT(notes, HasSubstr("cut to the shortest, 2d 23h")) << policy;
  }
  // Zone a alone needs on-demand through its outages.
  EXPECT_GT(Json(one.out).fields().at("on_demand_hours").number_value(), 0);
  const CliRun table = Cli(Args({"--availability", zones}));
  ASSERT_EQ(table.code, kExitOk) << table.err;
  EXPECT_THAT(table.out, HasSubstr("2 zones"));
  EXPECT_THAT(table.out, HasSubstr("moves between zones in all"));
  EXPECT_THAT(table.out, HasSubstr("a,b"));
  // A cheaper zone b: the job starts there when it can.
  const CliRun cheap = Cli(Args({"--availability", zones, "--zone-price", "b=0.5", "--json"}));
  ASSERT_EQ(cheap.code, kExitOk) << cheap.err;
  EXPECT_EQ(Json(cheap.out)
                .fields()
                .at("zones")
                .list_value()
                .values()[1]
                .struct_value()
                .fields()
                .at("spot_price_per_hour")
                .number_value(),
            0.5);
  // Avoiding b leaves zone a alone: the one-zone answer.
  const CliRun avoid = Cli(Args({"--availability", zones, "--avoid-zone", "b", "--json"}));
  ASSERT_EQ(avoid.code, kExitOk) << avoid.err;
  EXPECT_GT(Json(avoid.out).fields().at("on_demand_hours").number_value(), 0);
  EXPECT_EQ(Json(avoid.out).fields().at("moves").number_value(), 0);
}

TEST_F(SimulateAvailabilityTest, BadZonesAreRefusedNamingTheFlagAndZone) {
  const std::string a = "a=" + Trace();
  struct Case {
    std::vector<std::string> extra;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{"--availability", a + "," + a}, "a is given twice"},
      {{"--availability", a + ",b"}, "\"b\" is not ZONE=FILE"},
      {{"--availability", a + ",b=" + (dir_ / "none.json").string()}, "none.json"},
      {{"--availability", a, "--avoid-zone", "c"}, "--avoid-zone = \"c\": no zone \"c\""},
      {{"--availability", a, "--avoid-zone", "a"}, "leaves no zone to run in"},
      {{"--availability", a, "--zone-price", "a=-1"}, "cannot be negative"},
      {{"--availability", a, "--zone-price", "z=1"}, "--zone-price = \"z=1\": no zone \"z\""},
      {{"--zone-price", "a=1"}, "--zone-price: needs zones"},
      {{"--avoid-zone", "a"}, "--avoid-zone: needs zones"},
      {{"--availability", Trace() + "," + Trace()}, "ZONE=FILE"},
      {{"--instances", "0"}, "--instances"},
  };
  for (const Case& c : cases) {
    const CliRun r = Cli(Args(c.extra));
    EXPECT_EQ(r.code, kExitBadInput) << c.want << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(c.want));
  }
}

// A job of several instances at once: a zone with fewer never serves it.
TEST_F(SimulateAvailabilityTest, InstancesNeedThatManyInOneZone) {
  const CliRun r = Cli(Args({"--instances", "2", "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  EXPECT_EQ(f.at("instances").number_value(), 2);
  EXPECT_EQ(f.at("spot_hours").number_value(), 0);  // the trace never has two
  EXPECT_NEAR(f.at("on_demand_only_cost_usd").number_value(), 2 * 10.2 * 3.06, 1e-6);
  EXPECT_NEAR(f.at("mean_cost_usd").number_value(), 2 * 10.2 * 3.06, 1e-6);
}

// The cluster forms: simulate and plan with TYPE=FILE traces (no revocation model in this catalog,
// so simulate replays the cheapest plan's capacity alone).
TEST_F(SimulateAvailabilityTest, ClusterSimulateAndPlanReplayTheTraces) {
  // Spot for 10 h, an outage of 2 h, spot again. (Not for p2.xlarge: its spot price is above its
  // on-demand price, so the replay buys it on-demand; the quota leaves it out.)
  const std::string csv = (dir_ / "spot.csv").string();
  std::ofstream(csv) << "time,count\n0,9\n36000,9\n36000,0\n43200,0\n43200,9\n200000,9\n";
  std::string traces;
  for (const char* type : {"g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge", "p2.8xlarge"}) {
    traces += (traces.empty() ? "" : ",") + std::string(type) + "=" + csv;
  }
  const std::vector<std::string> common = {
      "--workload",   "resnet110",   "--catalog",      "aws-spotdnn-prototype",
      "--loss",       "0.9",         "--deadline",     "1h",
      "--quota",      "p2.xlarge=0", "--availability", traces,
      "--changeover", "2m",          "--start-every",  "2h",
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
  plan[12] = "p2.xlarge";  // not TYPE=FILE
  r = Cli(plan);
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("--availability = \"p2.xlarge\""));
}

// --policy optimum shows the schedule it found like the other policies: a finish, spot and
// on-demand hours, changeovers.
TEST_F(SimulateAvailabilityTest, OptimumShowsFinishHoursAndChangeovers) {
  CliRun r = Cli(Args({"--policy", "optimum", "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  for (const auto& v : f.at("windows").list_value().values()) {
    const auto& w = v.struct_value().fields();
    ASSERT_TRUE(w.at("met").bool_value());
    // Done within the deadline, after at least the work and one changeover.
    EXPECT_GE(w.at("finish_s").number_value(), 10.2 * 3600 - 1e-6);
    EXPECT_LE(w.at("finish_s").number_value(), 16 * 3600 + 1e-6);
    const double spot = w.at("spot_hours").number_value(),
                 od = w.at("on_demand_hours").number_value();
    EXPECT_GE(spot + od, 10.2 - 1e-9);
    EXPECT_NEAR(w.at("cost_usd").number_value(), spot * 0.918 + od * 3.06, 1e-6);
    EXPECT_GE(w.at("changeovers").number_value(), 1);
  }
  EXPECT_GT(f.at("spot_hours").number_value(), 0);
  EXPECT_GT(f.at("changeovers").number_value(), 0);
  r = Cli(Args({"--policy", "optimum"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("spot h"));
  EXPECT_THAT(r.out, HasSubstr("changeovers in all"));
  EXPECT_THAT(r.out, Not(HasSubstr(" 0.0s\n")));  // no window finishes at 0
}

// Spot dearer than on-demand (or as dear): the policies run on-demand, and the output says why.
TEST_F(SimulateAvailabilityTest, SpotNoCheaperThanOnDemandRunsOnDemandAndSaysSo) {
  for (const char* policy : {"ours", "greedy", "uniform-progress"}) {
    CliRun r =
        Cli(Args({"--spot-price", "4", "--on-demand-price", "3", "--policy", policy, "--json"}));
    ASSERT_EQ(r.code, kExitOk) << r.err;
    const auto f = Json(r.out).fields();
    EXPECT_EQ(f.at("spot_hours").number_value(), 0) << policy;
    EXPECT_NEAR(f.at("mean_cost_usd").number_value(), 10.2 * 3, 1e-6) << policy;
    ASSERT_EQ(f.at("notes").list_value().values_size(), 1) << policy;
    EXPECT_THAT(f.at("notes").list_value().values(0).string_value(),
                HasSubstr("costs no more than spot"));
  }
  CliRun r = Cli(Args({"--spot-price", "4", "--on-demand-price", "3"}));
  EXPECT_THAT(r.out, HasSubstr("Note: on-demand ($3.0000/h) costs no more than spot ($4.0000/h)"));
}

// A deadline without room for a changeover: every window misses, and the output says why and what
// would help.
TEST_F(SimulateAvailabilityTest, NoRoomForAChangeoverIsExplained) {
  CliRun r = Cli(Args({"--deadline", "10h05m", "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  auto f = Json(r.out).fields();
  EXPECT_EQ(f.at("met_fraction").number_value(), 0);
  ASSERT_EQ(f.at("notes").list_value().values_size(), 1);
  const std::string note = f.at("notes").list_value().values(0).string_value();
  EXPECT_THAT(note, HasSubstr("less than one changeover (12m 00s)"));
  EXPECT_THAT(note, HasSubstr("a later --deadline (at least 10h 12m)"));
  EXPECT_THAT(note, HasSubstr("a --changeover under 5m 00s"));
  // Room for on-demand but not for spot: the policy never tries spot, and says so.
  r = Cli(Args({"--deadline", "10h20m", "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  f = Json(r.out).fields();
  EXPECT_EQ(f.at("met_fraction").number_value(), 1);
  EXPECT_EQ(f.at("spot_hours").number_value(), 0);
  EXPECT_THAT(f.at("notes").list_value().values(0).string_value(), HasSubstr("never starts spot"));
}

// The README's own plan (loss 0.9 by 30 minutes) and a catalog without a revocation model.
class ClusterAvailabilityTest : public SimulateAvailabilityTest {
 protected:
  // Spot capacity of 20 instances for a day: always there.
  std::string AlwaysUp() const {
    const std::string csv = (dir_ / "up.csv").string();
    std::ofstream(csv) << "time,count\n0,20\n86400,20\n";
    return csv;
  }
  std::vector<std::string> Readme(const std::string& command, std::vector<std::string> extra) {
    std::vector<std::string> a = {
        command, "--workload", "resnet110", "--catalog", "aws-spotdnn-prototype", "--loss", "0.9"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
};

TEST_F(ClusterAvailabilityTest, WithoutLifetimesTheTracesAloneAreUsedForAGivenCluster) {
  const CliRun r =
      Cli(Readme("simulate", {"--deadline", "1h", "--cluster", "g3.8xlarge=4", "--availability",
                              "g3.8xlarge=" + AlwaysUp(), "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  EXPECT_EQ(f.at("cluster_from").string_value(), "given");
  const auto& av = f.at("availability").struct_value().fields();
  EXPECT_EQ(av.at("met_fraction").number_value(), 1);
  EXPECT_GT(av.at("spot_hours").number_value(), 0);
}

// The cluster form through zones (TYPE@ZONE=FILE): the cluster runs in one zone at a time; when
// zone a's capacity drops below the cluster's 4 at 6 h, the windows then running move to zone b
// (up from 5 h) instead of buying on-demand.
TEST_F(ClusterAvailabilityTest, ZonedTracesMoveTheClusterBetweenZones) {
  const std::string a = (dir_ / "a.csv").string(), b = (dir_ / "b.csv").string();
  std::ofstream(a) << "time,count\n0,20\n21600,20\n21600,2\n86400,2\n";
  std::ofstream(b) << "time,count\n0,1\n18000,1\n18000,20\n86400,20\n";
  const std::vector<std::string> flags = {"--deadline",    "1h30m", "--cluster",     "g3.8xlarge=4",
                                          "--start-every", "20m",   "--availability"};
  std::vector<std::string> zoned = flags;
  zoned.push_back("g3.8xlarge@a=" + a + ",g3.8xlarge@b=" + b);
  zoned.push_back("--json");
  const CliRun r = Cli(Readme("simulate", zoned));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto av = Json(r.out).fields().at("availability").struct_value().fields();
  EXPECT_EQ(av.at("met_fraction").number_value(), 1);
  EXPECT_EQ(av.at("on_demand_hours").number_value(), 0);
  EXPECT_GT(av.at("moves").number_value(), 0);
  // Zone a alone buys on-demand after 6 h.
  std::vector<std::string> alone = flags;
  alone.push_back("g3.8xlarge=" + a);
  alone.push_back("--json");
  const CliRun one = Cli(Readme("simulate", alone));
  ASSERT_EQ(one.code, kExitOk) << one.err;
  EXPECT_GT(Json(one.out)
                .fields()
                .at("availability")
                .struct_value()
                .fields()
                .at("on_demand_hours")
                .number_value(),
            0);
  // A zone without a trace for one of the cluster's types is not used, and says so.
  std::vector<std::string> two = {
      "--deadline",
      "1h30m",
      "--cluster",
      "g3.8xlarge=4,g4dn.4xlarge=1",
      "--availability",
      "g3.8xlarge@a=" + a + ",g3.8xlarge@b=" + b + ",g4dn.4xlarge@b=" + AlwaysUp(),
      "--json"};
  const CliRun partial = Cli(Readme("simulate", two));
  ASSERT_EQ(partial.code, kExitOk) << partial.err;
  EXPECT_THAT(partial.out, HasSubstr("zone a has no trace for g4dn.4xlarge: not used"));
  // Every trace names a zone, or none does; the type must be in the catalog.
  const CliRun mixed =
      Cli(Readme("simulate", {"--deadline", "1h30m", "--cluster", "g3.8xlarge=4", "--availability",
                              "g3.8xlarge@a=" + a + ",g3.8xlarge=" + b}));
  EXPECT_EQ(mixed.code, kExitBadInput);
  EXPECT_THAT(mixed.err, HasSubstr("give every trace a zone"));
  const CliRun unknown = Cli(Readme("simulate", {"--deadline", "1h30m", "--cluster", "g3.8xlarge=4",
                                                 "--availability", "g9@a=" + a}));
  EXPECT_EQ(unknown.code, kExitBadInput);
  EXPECT_THAT(unknown.err, HasSubstr("instance type \"g9\" is not in catalog"));
}

TEST_F(ClusterAvailabilityTest, NoRevocationModelNamesTheFlagsThatGiveOne) {
  const CliRun r = Cli(Readme("simulate", {"--deadline", "30m"}));
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("nothing to simulate"));
  EXPECT_THAT(r.err, HasSubstr("give lifetimes (--lifetimes FILE)"));
  EXPECT_THAT(r.err, HasSubstr("--availability TYPE=FILE"));
  EXPECT_THAT(r.err, Not(HasSubstr("spotdnn --lifetimes")));
}

TEST_F(ClusterAvailabilityTest, ATraceForATypeNotInTheCatalogIsRefused) {
  for (const char* command : {"plan", "simulate"}) {
    const CliRun r =
        Cli(Readme(command, {"--deadline", "30m", "--availability", "p9.xlarge=" + AlwaysUp()}));
    EXPECT_EQ(r.code, kExitBadInput) << command << ": " << r.out;
    EXPECT_THAT(r.err, HasSubstr("instance type \"p9.xlarge\" is not in catalog "
                                 "\"aws-spotdnn-prototype\"; did you mean p2.xlarge?"))
        << command;
  }
}

TEST_F(ClusterAvailabilityTest, APlanWithoutRoomForAChangeoverIsExplainedWithWhatHelps) {
  const std::string up = AlwaysUp();
  std::string traces;
  for (const char* type :
       {"p2.xlarge", "g4dn.4xlarge", "g3.8xlarge", "g3.16xlarge", "p2.8xlarge"}) {
    traces += (traces.empty() ? "" : ",") + std::string(type) + "=" + up;
  }
  auto notes_of = [](const google::protobuf::Struct& availability) {
    std::string notes;
    for (const auto& n : availability.fields().at("notes").list_value().values()) {
      notes += n.string_value() + "\n";
    }
    return notes;
  };
  // The cheapest plan uses the whole deadline: 5 s spare, less than the 5-minute changeover.
  CliRun r = Cli(Readme("simulate", {"--deadline", "30m", "--availability", traces, "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  auto av = Json(r.out).fields().at("availability").struct_value();
  EXPECT_EQ(av.fields().at("met_fraction").number_value(), 0);
  EXPECT_LT(av.fields().at("slack_s").number_value(), 300);
  EXPECT_THAT(notes_of(av), HasSubstr("less than one changeover (5m 00s): no window can meet"));
  EXPECT_THAT(notes_of(av), HasSubstr("What would help: --overhead 5m 00s"));
  // What the note suggests works: with a changeover budgeted every window meets the deadline (on
  // on-demand: spot needs two changeovers of room, and the next note says so).
  r = Cli(Readme("simulate",
                 {"--deadline", "30m", "--overhead", "5m", "--availability", traces, "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  av = Json(r.out).fields().at("availability").struct_value();
  EXPECT_EQ(av.fields().at("met_fraction").number_value(), 1);
  EXPECT_EQ(av.fields().at("spot_hours").number_value(), 0);
  EXPECT_THAT(notes_of(av), HasSubstr("never starts spot"));
  EXPECT_THAT(notes_of(av), HasSubstr("For spot to be tried: --overhead 10m 00s"));
  // plan --availability: the 45-minute plan leaves no room either; P = 0 comes with the note.
  r = Cli(Readme("plan", {"--deadline", "45m", "--availability", traces}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("with the on-demand fallback            0.0000"));
  EXPECT_THAT(r.out, HasSubstr("Note: the cluster's predicted time (44m 22s) leaves"));
  EXPECT_THAT(r.out, HasSubstr("What would help: --overhead 5m 00s"));
}

// The prototype's p2.xlarge costs more on spot than on-demand: the replay buys it on-demand (no
// trace needed), and plan says so.
TEST_F(ClusterAvailabilityTest, SpotDearerTypesAreBoughtOnDemandAndNamed) {
  // The README's plan uses two p2.xlarge: with no trace for it, and an outage of every other type
  // all day, the replay still buys p2.xlarge on-demand (needing no trace) and says so.
  const std::string down = (dir_ / "down.csv").string();
  std::ofstream(down) << "time,count\n0,0\n86400,0\n";
  CliRun r = Cli(Readme("simulate", {"--deadline", "30m", "--availability",
                                     "g4dn.4xlarge=" + down + ",g3.8xlarge=" + down, "--json"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  const auto f = Json(r.out).fields();
  const auto& av = f.at("availability").struct_value().fields();
  ASSERT_EQ(av.at("bought_on_demand").list_value().values_size(), 1) << r.out;
  EXPECT_EQ(av.at("bought_on_demand").list_value().values(0).string_value(), "p2.xlarge");
  EXPECT_EQ(av.at("without_trace").list_value().values_size(), 0) << r.out;
  EXPECT_THAT(av.at("notes").list_value().values(0).string_value(),
              HasSubstr("p2.xlarge=2 bought on-demand in every window"));
  // Its spot price ($0.918/h) counts as on-demand ($0.90/h) in the unit's spot price: 2 x $0.018
  // below the plan's spot price per hour.
  EXPECT_NEAR(av.at("spot_price_per_hour").number_value(), 0.918 * 2 + 0.3612 + 0.684 * 3 - 0.036,
              1e-9);
  // plan says so too, beside the plan itself.
  r = Cli(Readme("plan", {"--deadline", "30m"}));
  ASSERT_EQ(r.code, kExitOk) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Note: p2.xlarge costs $0.9180/h on spot, not less than $0.9000/h "
                               "on-demand: the plan's 2 would cost no more on-demand"));
}

}  // namespace
}  // namespace spotdnn::gateway
