// The deadline policies, the availability traces and the window replay.
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/deadline/availability_trace.h"
#include "provisioner/deadline/deadline_policy.h"
#include "provisioner/deadline/synthetic_trace.h"
#include "provisioner/deadline/window_replay.h"
#include "provisioner/deadline/zone_choice.h"

namespace spotdnn::provisioner::deadline {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

AvailabilityTrace Ticks(std::vector<int> counts, double gap = 100) {
  AvailabilityTrace t;
  t.source = "test";
  t.gap_s = gap;
  t.counts = std::move(counts);
  return t;
}

// ---- Traces ----

TEST(AvailabilityTraceTest, ParsesTheNsdiJson) {
  auto t = ParseJsonTrace(
      "{\"metadata\": {\"name\": \"us-east-1a\", \"gap_seconds\": 195},\n"
      " \"data\": [0, 1, 1,\n 0, 2]}",
      "a.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->gap_s, 195);
  EXPECT_EQ(t->counts, (std::vector<int>{0, 1, 1, 0, 2}));
  EXPECT_EQ(t->CountAt(194.9), 0);
  EXPECT_EQ(t->CountAt(195), 1);
  EXPECT_DOUBLE_EQ(t->duration_s(), 5 * 195);
}

TEST(AvailabilityTraceTest, ParsesTheBambooCsvInSecondsAndHours) {
  // Two rows at one time: the count before and after the change.
  auto s = ParseCsvTrace("0,2\n120,2\n120,1\n300,1\n300,3\n", "s.csv", false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->gap_s, kStepFileGapSeconds);
  EXPECT_EQ(s->counts, (std::vector<int>{2, 2, 1, 1, 1}));
  auto h = ParseCsvTrace("time,count\n0.000,0\n0.030,0\n0.030,9\n0.1,9\n", "h.csv", true);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(h->counts.size(), 6u);  // 0.1 h = 360 s
  EXPECT_EQ(h->counts[0], 0);       // 0-60 s
  EXPECT_EQ(h->counts[1], 0);       // 60-120 s: the rise comes at 108 s
  EXPECT_EQ(h->counts[2], 9);
}

TEST(AvailabilityTraceTest, ReadsEveryBambooFile) {
  const std::string dir = std::string(SPOTDNN_DATA_DIR) + "/bamboo-spot/";
  auto hours =
      ReadAvailabilityTrace(dir + "aws-spot-instances-p2-xlarge-2020-11-20-to-2020-11-23.csv");
  if (!hours.ok() && hours.status().code() == absl::StatusCode::kNotFound) {
    GTEST_SKIP() << "shared data not found: " << hours.status();
  }
  ASSERT_TRUE(hours.ok()) << hours.status();
  EXPECT_NEAR(hours->duration_s() / 3600, 88.7, 0.1);  // read in hours
  auto seconds = ReadAvailabilityTrace(
      dir + "aws-spot-instances-p2-xlarge-us-east-1e-2020-11-23-1700-to-2020-11-24-0700.csv");
  ASSERT_TRUE(seconds.ok()) << seconds.status();
  EXPECT_NEAR(seconds->duration_s() / 3600, 19, 0.1);
  EXPECT_EQ(seconds->counts[0], 10);
}

TEST(AvailabilityTraceTest, RefusesBrokenFilesNamingFileAndLine) {
  struct Case {
    std::string text;
    bool json;
    std::string want;
  };
  const std::vector<Case> cases = {
      {"{\"metadata\": {\"gap_seconds\": 195},\n\"data\": [1,\n2,\nx3]}", true, "f:4: data[2]"},
      {"{\"metadata\": {\"gap_seconds\": 195},\n\"data\": [1,\n-2]}", true, "f:3: data[1] = -2"},
      {"{\"metadata\": {\"gap_seconds\": 195},\n\"data\": []}", true, "f:2: data is empty"},
      {"{\"metadata\":\n {\"gap_seconds\": 0},\n\"data\": [1]}", true, "f:2: metadata.gap_seconds"},
      {"{\"data\": [1]}", true, "gap_seconds is missing"},
      {"0,1\n10,abc\n", false, "f:2: count = \"abc\""},
      {"0,1\n1e,2\n", false, "f:2: time = \"1e\""},
      {"0,1\n100,1\n50,1\n", false, "f:3: time = 50: goes back"},
      {"0,1\n10,-1\n", false, "f:2: count = -1"},
      {"time,count\n", false, "f:2: no time,count rows"},
      // A value written quoted is shown as written, not in a second pair of quotes.
      {"{\"metadata\": {\"gap_seconds\": 60}, \"data\": [1, 2, \"a\"]}", true,
       "f:1: data[2] = \"a\": not a whole number"},
      {"{\"metadata\": {\"gap_seconds\": 60}, \"data\": [\"a b\", 1]}", true,
       "f:1: data[0] = \"a b\": not a whole number"},
      {"{\"metadata\": {\"gap_seconds\": \"60\"}, \"data\": [1]}", true,
       "f:1: metadata.gap_seconds = \"60\": not a number"},
      {"0,1\n10,\"x\"\n", false, "f:2: count = \"x\": not a whole number"},
      {"0,1\n\"t\",2\n", false, "f:2: time = \"t\": not a number"},
  };
  for (const Case& c : cases) {
    auto t = c.json ? ParseJsonTrace(c.text, "f") : ParseCsvTrace(c.text, "f", false);
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(t.status().message()), HasSubstr(c.want)) << c.text;
    EXPECT_THAT(std::string(t.status().message()), Not(HasSubstr("\"\""))) << c.text;
  }
  EXPECT_EQ(ReadAvailabilityTrace("/nonexistent/trace.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(AvailabilityTraceTest, StatsCountUpPeriodsAndUsableTime) {
  const AvailabilityTrace t = Ticks({1, 1, 1, 0, 0, 1, 0, 1, 1, 1, 1});
  const AvailabilityStats s = TraceStats(t, 0, 1100, 1, 150);
  EXPECT_DOUBLE_EQ(s.observed_s, 1100);
  EXPECT_DOUBLE_EQ(s.available_s, 800);
  EXPECT_EQ(s.up_periods, 3);
  EXPECT_EQ(s.down_periods, 2);
  EXPECT_DOUBLE_EQ(s.usable_s, 150 + 0 + 250);
  EXPECT_DOUBLE_EQ(s.longest_down_s, 200);
}

// ---- Replay and the optimum ----

WindowJob Job(double work, double deadline, double d) {
  WindowJob j;
  j.work_s = work;
  j.deadline_s = deadline;
  j.changeover_s = d;
  j.spot_price_per_hour = 1;
  j.on_demand_price_per_hour = 3;
  return j;
}

TEST(WindowReplayTest, OnDemandOnlyCostsWorkPlusOneChangeover) {
  const AvailabilityTrace t = Ticks(std::vector<int>(100, 0));
  auto p = MakeDeadlinePolicy("on-demand");
  const WindowResult r = ReplayWindow(t, 0, Job(3600, 7200, 600), **p);
  EXPECT_TRUE(r.met);
  EXPECT_EQ(r.changeovers, 1);
  EXPECT_NEAR(r.on_demand_hours, 4200.0 / 3600, 1e-9);
  EXPECT_NEAR(r.cost_usd, 3 * 4200.0 / 3600, 1e-9);
  EXPECT_NEAR(r.finish_s, 4200, 1e-9);
}

TEST(WindowReplayTest, SpotAllTheWayCostsSpotOnly) {
  const AvailabilityTrace t = Ticks(std::vector<int>(100, 1));
  for (const char* name : {"ours", "greedy", "uniform-progress"}) {
    auto p = MakeDeadlinePolicy(name);
    const WindowResult r = ReplayWindow(t, 0, Job(3600, 7200, 600), **p);
    EXPECT_TRUE(r.met) << name;
    EXPECT_NEAR(r.cost_usd, 4200.0 / 3600, 1e-9) << name;
    EXPECT_EQ(r.on_demand_hours, 0) << name;
  }
  const WindowResult o = OptimumWindow(t, 0, Job(3600, 7200, 600));
  EXPECT_TRUE(o.met);
  EXPECT_NEAR(o.cost_usd, 4200.0 / 3600, 1e-9);
}

// Cases where the optimum needs no foresight: the cheapest schedule is the obvious online one, and
// ours must find exactly its cost.
TEST(WindowReplayTest, OursEqualsTheOptimumWhereNoForesightIsNeeded) {
  // A changeover short against the slack (ours keeps a reserve of changeovers).
  const WindowJob job = Job(3600, 7200, 60);
  // The window starts at 2000 s. Spot throughout; no spot at all (on-demand is the only way: ours
  // may wait first, at no cost, and must then pay exactly the work and one changeover); an outage
  // of 1000 s that the slack absorbs, then spot; spot that goes for good once the work is half
  // done (on-demand then is the only way, and waiting first costs nothing).
  std::vector<std::vector<int>> windows = {std::vector<int>(100, 1), std::vector<int>(100, 0)};
  std::vector<int> late(100, 1);
  for (int k = 0; k < 10; ++k) late[k] = 0;
  windows.push_back(late);
  std::vector<int> gone(100, 0);
  for (int k = 0; k < 24; ++k) gone[k] = 1;  // 60 s changeover + 2340 s of work
  windows.push_back(gone);
  for (const auto& window : windows) {
    std::vector<int> counts(20, 1);  // 2000 s of history with spot
    counts.insert(counts.end(), window.begin(), window.end());
    const AvailabilityTrace t = Ticks(counts);
    auto ours = MakeDeadlinePolicy("ours");
    const WindowResult r = ReplayWindow(t, 2000, job, **ours);
    const WindowResult o = OptimumWindow(t, 2000, job);
    EXPECT_TRUE(r.met);
    EXPECT_TRUE(o.met);
    EXPECT_NEAR(r.cost_usd, o.cost_usd, 1e-9);
  }
}

TEST(WindowReplayTest, OptimumUsesForesightAndIsALowerBound) {
  // Spot for the last 40% only: the optimum runs on-demand first and spot at the end.
  std::vector<int> counts(100, 0);
  for (int k = 50; k < 100; ++k) counts[k] = 1;
  const AvailabilityTrace t = Ticks(counts);
  const WindowJob job = Job(4000, 8000, 300);
  const WindowResult o = OptimumWindow(t, 0, job);
  ASSERT_TRUE(o.met);
  // Spot from 5000 s gives at most 3000 - 300 s of work by 8000 s; the other 1300 s are bought
  // on-demand (plus its changeover) before: 1600 s on-demand, 3000 s spot.
  EXPECT_NEAR(o.cost_usd, 3 * 1600.0 / 3600 + 1 * 3000.0 / 3600, 1e-9);
  for (const char* name : {"ours", "greedy", "uniform-progress", "on-demand"}) {
    auto p = MakeDeadlinePolicy(name);
    const WindowResult r = ReplayWindow(t, 0, job, **p);
    EXPECT_TRUE(r.met) << name;
    EXPECT_GE(r.cost_usd, o.cost_usd - 1e-9) << name;
  }
}

// The optimum reports the schedule it found, not only its cost: the foresight case above runs
// 1300 s of work on on-demand (after its changeover), then spot from 5000 s to the deadline.
TEST(WindowReplayTest, OptimumReportsItsFinishHoursAndChangeovers) {
  std::vector<int> counts(100, 0);
  for (int k = 50; k < 100; ++k) counts[k] = 1;
  const AvailabilityTrace t = Ticks(counts);
  const WindowJob job = Job(4000, 8000, 300);
  const WindowResult o = OptimumWindow(t, 0, job);
  ASSERT_TRUE(o.met);
  EXPECT_NEAR(o.on_demand_hours, 1600.0 / 3600, 1e-9);
  EXPECT_NEAR(o.spot_hours, 3000.0 / 3600, 1e-9);
  EXPECT_EQ(o.changeovers, 2);
  EXPECT_NEAR(o.finish_s, 8000, 1e-9);
  // The hours are the ones the cost was billed for.
  EXPECT_NEAR(o.cost_usd, o.spot_hours * 1 + o.on_demand_hours * 3, 1e-9);
  // Without the schedule: the same cost.
  EXPECT_NEAR(OptimumWindow(t, 0, job, /*with_schedule=*/false).cost_usd, o.cost_usd, 1e-9);
  // Spot all the way: one start, done after the changeover and the work.
  const WindowResult spot = OptimumWindow(Ticks(std::vector<int>(100, 1)), 0, Job(3600, 7200, 600));
  EXPECT_EQ(spot.changeovers, 1);
  EXPECT_NEAR(spot.finish_s, 4200, 1e-9);
  EXPECT_NEAR(spot.spot_hours, 4200.0 / 3600, 1e-9);
  EXPECT_EQ(spot.on_demand_hours, 0);
  // No schedule meets the deadline: on-demand from the start, one changeover, late.
  const WindowResult late = OptimumWindow(Ticks(std::vector<int>(100, 1)), 0, Job(3600, 3700, 600));
  EXPECT_FALSE(late.met);
  EXPECT_EQ(late.changeovers, 1);
  EXPECT_NEAR(late.finish_s, 4200, 1e-9);
  EXPECT_NEAR(late.on_demand_hours, 4200.0 / 3600, 1e-9);
}

// Spot dearer than on-demand (or as dear): every policy with a fallback runs on-demand, however
// much spot there is; spot only is what --fallback none asks for.
TEST(WindowReplayTest, PoliciesRunOnDemandWhenItIsNoDearerThanSpot) {
  const AvailabilityTrace t = Ticks(std::vector<int>(100, 1));
  for (double spot_price : {4.0, 3.0}) {
    WindowJob job = Job(3600, 7200, 600);
    job.spot_price_per_hour = spot_price;
    job.on_demand_price_per_hour = 3;
    for (const char* name : {"ours", "greedy", "uniform-progress"}) {
      auto p = MakeDeadlinePolicy(name);
      const WindowResult r = ReplayWindow(t, 0, job, **p);
      EXPECT_TRUE(r.met) << name;
      EXPECT_EQ(r.spot_hours, 0) << name << " at spot $" << spot_price;
      EXPECT_NEAR(r.cost_usd, 3 * 4200.0 / 3600, 1e-9) << name;
    }
    auto spot_only = MakeDeadlinePolicy("spot-only");
    EXPECT_GT(ReplayWindow(t, 0, job, **spot_only).spot_hours, 0);
  }
  // The reason says why.
  auto p = MakeDeadlinePolicy("ours");
  DeadlineInput in;
  in.time_left_s = 7200;
  in.work_left_s = 3600;
  in.changeover_s = 600;
  in.spot_available = 1;
  in.spot_price_per_hour = 4;
  in.on_demand_price_per_hour = 3;
  const DeadlineDecision d = (*p)->Decide(in);
  EXPECT_EQ(d.spot, 0);
  EXPECT_EQ(d.on_demand, 1);
  EXPECT_THAT(d.reason, HasSubstr("no dearer than spot"));
  // Unknown prices (0 and 0) are not a reason to avoid spot.
  in.spot_price_per_hour = in.on_demand_price_per_hour = 0;
  auto fresh = MakeDeadlinePolicy("ours");
  EXPECT_EQ((*fresh)->Decide(in).spot, 1);
}

// The property: over random traces, ours never misses a deadline that on-demand alone could meet,
// and never costs less than the optimum.
TEST(WindowReplayTest, OursNeverMissesADeadlineOnDemandCouldMeet) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  int windows = 0, tight = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SyntheticTraceOptions so;
    so.availability = 0.1 + 0.85 * u(rng);
    so.mean_outage_s = 600 + 6 * 3600 * u(rng);
    so.outage_shape = 1.2 + u(rng);
    so.duration_s = 6 * 86400;
    so.gap_s = trial % 3 == 0 ? 60 : 195;
    so.seed = trial + 1;
    const AvailabilityTrace t = SyntheticTrace(so);
    WindowJob job;
    job.work_s = 3600 * (1 + 20 * u(rng));
    job.changeover_s = 60 * (1 + 30 * u(rng));
    // From barely feasible (slack of one changeover) to loose.
    job.deadline_s = job.work_s + job.changeover_s * (1 + 3 * u(rng)) + 3600 * 10 * u(rng) * u(rng);
    if (trial % 4 == 0) job.deadline_s = job.work_s + job.changeover_s;  // on-demand just makes it
    tight += trial % 4 == 0;
    // (Uniform Progress as the paper states it may miss: its rule 2 takes spot with any slack.)
    for (const char* name : {"ours", "greedy", "on-demand"}) {
      auto summary = ReplayWindows(t, job, 5 * 3600 + 7, name);
      ASSERT_TRUE(summary.ok()) << summary.status();
      EXPECT_EQ(summary->missed_on_demand_could_meet, 0)
          << name << " on " << t.source << " work " << job.work_s << " deadline " << job.deadline_s
          << " changeover " << job.changeover_s;
      if (std::string(name) == "ours") windows += static_cast<int>(summary->windows.size());
    }
  }
  EXPECT_GT(windows, 500);
  EXPECT_GT(tight, 0);
}

TEST(WindowReplayTest, OursIsCloseToTheOptimumOnLongOutages) {
  // A regression guard of the tuned policy: on a few synthetic traces ours stays well ahead of
  // uniform-progress and close to the optimum (the bench measures the full grid).
  double ours = 0, up = 0, opt = 0;
  for (int seed = 1; seed <= 3; ++seed) {
    SyntheticTraceOptions so;
    so.availability = 0.25 * seed;
    so.mean_outage_s = 6 * 3600;
    so.duration_s = 12 * 86400;
    so.seed = seed;
    const AvailabilityTrace t = SyntheticTrace(so);
    WindowJob job;
    job.work_s = 24 * 3600;
    job.deadline_s = 36 * 3600;
    for (const char* name : {"ours", "uniform-progress"}) {
      auto s = ReplayWindows(t, job, 12 * 3600, name);
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->met_fraction, 1.0) << name;
      (std::string(name) == "ours" ? ours : up) += s->mean_cost_usd;
    }
    // The optimum's cost alone (its schedule is not needed here, and doubles its time).
    auto starts = WindowStarts(t, job, 12 * 3600);
    ASSERT_TRUE(starts.ok());
    double optimum = 0;
    for (double start : *starts) {
      const WindowResult w = OptimumWindow(t, start, job, /*with_schedule=*/false);
      EXPECT_TRUE(w.met);
      optimum += w.cost_usd;
    }
    opt += optimum / static_cast<double>(starts->size());
  }
  EXPECT_LT(ours, up);
  EXPECT_LT(ours, 1.06 * opt);
  EXPECT_GE(ours, opt - 1e-6);
}

TEST(WindowReplayTest, WindowsNeedAFittingDeadlineAndKnownPolicy) {
  const AvailabilityTrace t = Ticks(std::vector<int>(10, 1));
  EXPECT_THAT(std::string(ReplayWindows(t, Job(100, 2000, 10), 100, "ours").status().message()),
              HasSubstr("no window fits"));
  auto bad = ReplayWindows(t, Job(100, 500, 10), 100, "cheapest");
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("policy = \"cheapest\""));
  auto ok = ReplayWindows(t, Job(100, 500, 10), 100, "ours");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->windows.size(), 6u);  // starts 0, 100, ..., 500
}

// ---- Zones ----

Zone Z(std::string name, std::vector<int> counts, double price = -1, double gap = 100) {
  return Zone{std::move(name), Ticks(std::move(counts), gap), price};
}

// `n` zones at $1/h, each with capacity now.
std::vector<ZoneOption> OpenZones(int n) {
  std::vector<ZoneOption> z(n);
  for (ZoneOption& o : z) {
    o.spot_price_per_hour = 1;
    o.has_capacity = true;
  }
  return z;
}

TEST(ZoneChoiceTest, StaysWhileItHasCapacityElseTheCheapestThenTheMostAvailable) {
  std::vector<ZoneOption> z(3);
  for (ZoneOption& o : z) {
    o.spot_price_per_hour = 1;
    o.has_capacity = true;
    o.seen_s = 10 * 3600;
  }
  z[0].seen_up_s = 2 * 3600;
  z[1].seen_up_s = 9 * 3600;
  z[2].seen_up_s = 5 * 3600;
  ZoneJob job;
  job.work_left_s = 3600;
  job.changeover_s = 600;
  job.slack_s = 3600;
  EXPECT_EQ(ChooseSpotZone(z, job), 1);  // the most availability seen
  job.current = 2;
  EXPECT_EQ(ChooseSpotZone(z, job), 2);  // stays: no saving in moving
  z[2].has_capacity = false;
  EXPECT_EQ(ChooseSpotZone(z, job), 1);
  z[1].blocked = true;
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
  z[0].spot_price_per_hour = 0.5;  // cheaper than the others
  z[1].blocked = false;
  job.current = -1;
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
  for (ZoneOption& o : z) o.has_capacity = false;
  EXPECT_EQ(ChooseSpotZone(z, job), -1);
}

TEST(ZoneChoiceTest, MovesToACheaperZoneOnlyWhenThatPays) {
  std::vector<ZoneOption> z(2);
  z[0].spot_price_per_hour = 1.0;
  z[1].spot_price_per_hour = 0.9;
  for (ZoneOption& o : z) {
    o.has_capacity = true;
    o.expected_run_s = 10 * 3600;
  }
  ZoneJob job;
  job.current = 0;
  job.changeover_s = 600;
  job.slack_s = 4 * 3600;
  // 10% of $1/h over 10 h saves $1; two changeovers at $0.9/h cost $0.30: move.
  job.work_left_s = 20 * 3600;
  EXPECT_EQ(ChooseSpotZone(z, job), 1);
  // An hour left saves $0.10: stay.
  job.work_left_s = 3600;
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
  // Copying the checkpoint there costs more than the saving: stay.
  job.work_left_s = 20 * 3600;
  z[1].move_usd = 2;
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
  // No slack for a changeover more: stay.
  z[1].move_usd = 0;
  job.slack_s = 600;
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
}

TEST(ZoneChoiceTest, WhileTheSlackAllowsStartsOnlyWhereTheMedianStayIsWorthIt) {
  std::vector<ZoneOption> z = OpenZones(2);
  // Zone 0 has the longer mean stay (the odd long stretch) but mostly short bursts.
  z[0].expected_run_s = 3 * 3600;
  z[0].median_run_s = 0.3 * 3600;
  z[1].expected_run_s = 2 * 3600;
  z[1].median_run_s = 2 * 3600;
  ZoneJob job;
  job.changeover_s = 720;  // the floor: 10 changeovers, 2 h
  job.work_left_s = 10 * 3600;
  job.slack_s = 4 * 3600;  // worth: max(5 changeovers, 0.3 x 2 h) = 1 h
  EXPECT_EQ(ChooseSpotZone(z, job), 1);
  z[1].has_capacity = false;
  EXPECT_EQ(ChooseSpotZone(z, job), -1);  // waits for a better start
  job.slack_s = 1.5 * 3600;               // below the floor: any zone
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
  job.slack_s = 4 * 3600;
  job.work_left_s = 5 * 60;  // the burst is likely to finish the work
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
  job.work_left_s = 10 * 3600;
  job.current = 0;  // running there: stays
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
}

TEST(ZoneChoiceTest, TheMoreSlackAboveTheFloorTheLongerTheStayWorthAStart) {
  std::vector<ZoneOption> z = OpenZones(2);
  z[0].expected_run_s = 5 * 3600;
  z[0].median_run_s = 2 * 3600;
  z[1].expected_run_s = 4 * 3600;
  z[1].median_run_s = 4 * 3600;
  ZoneJob job;
  job.changeover_s = 720;
  job.work_left_s = 12 * 3600;
  job.slack_s = 12 * 3600;  // worth: 0.3 x (12 h - 2 h) = 3 h
  EXPECT_EQ(ChooseSpotZone(z, job), 1);
  job.slack_s = 6 * 3600;  // 1.2 h
  EXPECT_EQ(ChooseSpotZone(z, job), 0);
}

TEST(ZoneHistoryTest, TheMedianFollowsTheBurstsAndTheMeanTheLongStretch) {
  ZoneHistory h;
  for (double up : {600.0, 600.0, 600.0, 6000.0}) {
    h.Observe(true, up);
    h.Observe(false, 300);
  }
  EXPECT_DOUBLE_EQ(h.ExpectedStay(), 7800.0 / 4);
  EXPECT_DOUBLE_EQ(h.MedianStay(), 600);
  h.Observe(true, 1200);  // past the bursts: only the long stretch lasted this long
  EXPECT_DOUBLE_EQ(h.MedianStay(), 4800);
  EXPECT_DOUBLE_EQ(h.ExpectedStay(), 4800);
}

TEST(ZoneChoiceTest, ThePlainRuleIsTheCheapestWithCapacityWithNoHistory) {
  std::vector<ZoneOption> z = OpenZones(3);
  z[1].expected_run_s = z[1].median_run_s = 20 * 3600;  // history is ignored
  z[1].seen_s = z[1].seen_up_s = 20 * 3600;
  EXPECT_EQ(CheapestSpotZone(z, -1), 0);  // the first listed on ties
  z[2].spot_price_per_hour = 0.5;
  EXPECT_EQ(CheapestSpotZone(z, -1), 2);
  EXPECT_EQ(CheapestSpotZone(z, 1), 1);  // stays while it has capacity
  z[1].has_capacity = false;
  z[2].blocked = true;
  EXPECT_EQ(CheapestSpotZone(z, 1), 0);
  z[0].has_capacity = false;
  EXPECT_EQ(CheapestSpotZone(z, 1), -1);
  EXPECT_TRUE((*MakeDeadlinePolicy("greedy"))->plain_zone_choice());
  EXPECT_FALSE((*MakeDeadlinePolicy("ours"))->plain_zone_choice());
}

TEST(ZoneReplayTest, AlignsTicksAndLengthsAndRefusesBadZones) {
  auto aligned =
      AlignZones({Z("a", {1, 0, 1, 1}, -1, 200), Z("b", {1, 1, 1, 0, 1, 1, 1}, -1, 100)});
  ASSERT_TRUE(aligned.ok()) << aligned.status();
  ASSERT_EQ(aligned->size(), 2u);
  EXPECT_EQ((*aligned)[0].trace.gap_s, 100);
  EXPECT_EQ((*aligned)[0].trace.counts, (std::vector<int>{1, 1, 0, 0, 1, 1, 1}));
  EXPECT_EQ((*aligned)[1].trace.counts, (std::vector<int>{1, 1, 1, 0, 1, 1, 1}));
  // A coarser tick is the least count of the finer ticks it overlaps.
  auto coarse = AlignZones({Z("a", {2, 1, 2, 2}, -1, 50), Z("b", {3, 3}, -1, 100)});
  ASSERT_TRUE(coarse.ok());
  EXPECT_EQ((*coarse)[0].trace.counts, (std::vector<int>{2, 1, 2, 2}));
  EXPECT_EQ((*coarse)[1].trace.counts, (std::vector<int>{3, 3, 3, 3}));
  EXPECT_FALSE(AlignZones({}).ok());
  EXPECT_THAT(std::string(AlignZones({Z("a", {1}), Z("a", {1})}).status().message()),
              HasSubstr("\"a\": given twice"));
  EXPECT_FALSE(AlignZones({Z("", {1})}).ok());
}

// Zone A has spot for the first half of the window, zone B for the second: the job moves to B when
// A runs dry (one more changeover), with no on-demand; alone in A it would need on-demand.
TEST(ZoneReplayTest, MovesToAnotherZoneInsteadOfBuyingOnDemand) {
  std::vector<int> a(100, 0), b(100, 0);
  for (int k = 0; k < 50; ++k) a[k] = 1;
  for (int k = 45; k < 100; ++k) b[k] = 1;
  auto zones = AlignZones({Z("A", a), Z("B", b)});
  ASSERT_TRUE(zones.ok());
  const WindowJob job = Job(7000, 9000, 300);
  for (const char* name : {"ours", "greedy", "uniform-progress"}) {
    auto p = MakeDeadlinePolicy(name);
    const WindowResult r = ReplayZonesWindow(*zones, 0, job, **p);
    EXPECT_TRUE(r.met) << name;
    EXPECT_EQ(r.on_demand_hours, 0) << name;
    EXPECT_EQ(r.moves, 1) << name;
    EXPECT_EQ(r.zones, (std::vector<std::string>{"A", "B"})) << name;
    EXPECT_EQ(r.changeovers, 2) << name;
    EXPECT_NEAR(r.cost_usd, (7000.0 + 600) / 3600, 1e-9) << name;
  }
  const WindowResult o = OptimumZonesWindow(*zones, 0, job);
  EXPECT_TRUE(o.met);
  EXPECT_NEAR(o.cost_usd, (7000.0 + 600) / 3600, 1e-9);
  EXPECT_EQ(o.moves, 1);
  EXPECT_EQ(o.zones, (std::vector<std::string>{"A", "B"}));
  // In A alone the same job needs on-demand for what spot cannot do before the deadline.
  auto ours = MakeDeadlinePolicy("ours");
  EXPECT_GT(ReplayWindow((*zones)[0].trace, 0, job, **ours).on_demand_hours, 0);
  EXPECT_GT(OptimumWindow((*zones)[0].trace, 0, job).cost_usd, o.cost_usd + 1e-6);
}

// Prices per zone: spot runs in the cheaper zone with capacity, and one zone alone is the
// single-trace replay exactly.
TEST(ZoneReplayTest, PricesPerZoneAndOneZoneIsTheSingleTraceReplay) {
  auto zones = AlignZones(
      {Z("dear", std::vector<int>(100, 1), 2.0), Z("cheap", std::vector<int>(100, 1), 0.5)});
  ASSERT_TRUE(zones.ok());
  auto p = MakeDeadlinePolicy("ours");
  const WindowResult r = ReplayZonesWindow(*zones, 0, Job(3600, 7200, 600), **p);
  EXPECT_EQ(r.zones, std::vector<std::string>{"cheap"});
  EXPECT_NEAR(r.cost_usd, 0.5 * 4200 / 3600, 1e-9);
  EXPECT_NEAR(OptimumZonesWindow(*zones, 0, Job(3600, 7200, 600)).cost_usd, 0.5 * 4200 / 3600,
              1e-9);
  std::mt19937 rng(7);
  std::vector<int> counts(300);
  for (int& c : counts) c = rng() % 4 == 0 ? 0 : 1;
  const AvailabilityTrace t = Ticks(counts);
  auto one = AlignZones({Zone{"only", t, -1}});
  ASSERT_TRUE(one.ok());
  const WindowJob job = Job(9000, 15000, 300);
  for (const char* name : {"ours", "greedy", "uniform-progress", "on-demand"}) {
    auto a = MakeDeadlinePolicy(name);
    auto b = MakeDeadlinePolicy(name);
    const WindowResult x = ReplayWindow(t, 5000, job, **a);
    const WindowResult y = ReplayZonesWindow(*one, 5000, job, **b);
    EXPECT_NEAR(x.cost_usd, y.cost_usd, 1e-9) << name;
    EXPECT_EQ(x.changeovers, y.changeovers) << name;
    EXPECT_EQ(y.moves, 0) << name;
  }
  EXPECT_NEAR(OptimumWindow(t, 5000, job).cost_usd, OptimumZonesWindow(*one, 5000, job).cost_usd,
              1e-9);
}

// --instances N: a zone serves the job while its count is at least N; prices are per instance.
TEST(ZoneReplayTest, AJobOfSeveralInstancesNeedsThemAllInOneZone) {
  auto zones =
      AlignZones({Z("two", std::vector<int>(100, 2)), Z("three", std::vector<int>(100, 3))});
  ASSERT_TRUE(zones.ok());
  WindowJob job = Job(3600, 7200, 600);
  job.instances = 3;
  auto p = MakeDeadlinePolicy("ours");
  const WindowResult r = ReplayZonesWindow(*zones, 0, job, **p);
  EXPECT_EQ(r.zones, std::vector<std::string>{"three"});
  EXPECT_NEAR(r.cost_usd, 3 * 4200.0 / 3600, 1e-9);
  EXPECT_NEAR(r.spot_hours, 3 * 4200.0 / 3600, 1e-9);
  job.instances = 4;  // no zone has four: on-demand
  auto q = MakeDeadlinePolicy("ours");
  const WindowResult od = ReplayZonesWindow(*zones, 0, job, **q);
  EXPECT_EQ(od.spot_hours, 0);
  EXPECT_NEAR(od.cost_usd, 4 * 3 * 4200.0 / 3600, 1e-9);
  EXPECT_NEAR(OptimumZonesWindow(*zones, 0, job).cost_usd, od.cost_usd, 1e-9);
  job.instances = 0;
  EXPECT_FALSE(ReplayZoneWindows(*zones, job, 3600, "ours").ok());
}

// The optimum through zones against every schedule, enumerated: per interval idle, on-demand or
// spot in a zone with capacity; a change of what runs is a start (a changeover); the work may end
// inside an interval (billed to there).
double BruteForce(const std::vector<Zone>& zones, const WindowJob& job) {
  const int K = static_cast<int>(job.deadline_s / zones[0].trace.gap_s);
  const int Zn = static_cast<int>(zones.size());
  const int kinds = Zn + 2;  // idle, on-demand, spot per zone
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> choice(K, 0);
  const double gap = zones[0].trace.gap_s;
  while (true) {
    double cost = 0, progress = 0, rem = 0;
    int prev = 0;
    bool ok = true, done = false;
    for (int k = 0; k < K && ok && !done; ++k) {
      const int c = choice[k];
      if (c >= 2 && zones[c - 2].trace.counts[k] < job.instances) ok = false;
      if (!ok || c == 0) {
        prev = c;
        continue;
      }
      if (c != prev) rem = job.changeover_s;
      const double price =
          (c == 1 ? job.on_demand_price_per_hour
                  : (zones[c - 2].spot_price_per_hour < 0 ? job.spot_price_per_hour
                                                          : zones[c - 2].spot_price_per_hour)) *
          job.instances / 3600;
      const double unproductive = std::min(gap, rem);
      rem -= unproductive;
      const double gain = gap - unproductive;
      if (progress + gain >= job.work_s - 1e-9) {
        cost += price * (unproductive + job.work_s - progress);
        done = true;
      } else {
        cost += price * gap;
        progress += gain;
      }
      prev = c;
    }
    if (ok && done) best = std::min(best, cost);
    int i = 0;
    while (i < K && ++choice[i] == kinds) choice[i++] = 0;
    if (i == K) break;
  }
  return best;
}

TEST(ZoneReplayTest, TheOptimumThroughZonesIsTheCheapestOfEverySchedule) {
  std::mt19937 rng(11);
  for (int round = 0; round < 12; ++round) {
    const int K = 8;
    std::vector<Zone> zones;
    for (int z = 0; z < 2; ++z) {
      std::vector<int> counts(K);
      for (int& c : counts) c = static_cast<int>(rng() % 3);  // 0, 1 or 2 instances
      zones.push_back(Z(std::string(1, static_cast<char>('a' + z)), counts,
                        round % 2 == 0 ? -1 : 0.5 + 0.5 * z));
    }
    auto aligned = AlignZones(zones);
    ASSERT_TRUE(aligned.ok());
    WindowJob job = Job(400 + 100 * (round % 3), 800, 100);
    job.instances = 1 + round % 2;
    const double brute = BruteForce(*aligned, job);
    const WindowResult o = OptimumZonesWindow(*aligned, 0, job);
    ASSERT_TRUE(std::isfinite(brute)) << round;  // on-demand alone meets every one of these
    EXPECT_TRUE(o.met) << round;
    EXPECT_NEAR(o.cost_usd, brute, 1e-9) << round;
    EXPECT_NEAR(OptimumZonesWindow(*aligned, 0, job, false).cost_usd, brute, 1e-9) << round;
    // Every online policy pays at least that, and never misses.
    for (const char* name : {"ours", "greedy", "uniform-progress"}) {
      auto p = MakeDeadlinePolicy(name);
      const WindowResult r = ReplayZonesWindow(*aligned, 0, job, **p);
      EXPECT_TRUE(r.met) << round << " " << name;
      EXPECT_GE(r.cost_usd, brute - 1e-9) << round << " " << name;
    }
  }
}

TEST(DeadlinePolicyTest, NamesAndReasons) {
  for (const char* name : kDeadlinePolicyNames) {
    auto p = MakeDeadlinePolicy(name);
    ASSERT_TRUE(p.ok()) << name;
    EXPECT_EQ((*p)->name(), name);
  }
  auto p = MakeDeadlinePolicy("ours");
  DeadlineInput in;
  in.time_left_s = 10 * 3600;
  in.work_left_s = 9.9 * 3600;
  in.changeover_s = 600;
  in.spot_available = 0;
  in.decision_interval_s = 195;
  const DeadlineDecision d = (*p)->Decide(in);
  EXPECT_EQ(d.on_demand, 1);
  EXPECT_EQ(d.spot, 0);
  EXPECT_FALSE(d.reason.empty());
}

}  // namespace
}  // namespace spotdnn::provisioner::deadline
