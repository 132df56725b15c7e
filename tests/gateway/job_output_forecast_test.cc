// How `spotdnn run` and `spotdnn status` show the live refit's forecasts (job_output.h).
#include <cmath>
#include <limits>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/cli/job_output.h"

namespace spotdnn::gateway {
namespace {

using ::testing::HasSubstr;

job::ConvergenceForecast First() {
  return {.prior = true,
          .workers = 1,
          .steps_per_s = 10,
          .reachable = true,
          .iterations_p10 = 513,
          .iterations_p50 = 540,
          .iterations_p90 = 567,
          .finish_p10_s = 51.3,
          .finish_p50_s = 54,
          .finish_p90_s = 56.7};
}

job::ConvergenceForecast Refit() {
  return {.elapsed_s = 5,
          .step = 50,
          .points = 10,
          .workers = 1,
          .steps_per_s = 10,
          .reachable = true,
          .iterations_p10 = 860,
          .iterations_p50 = 902,
          .iterations_p90 = 944,
          .finish_p10_s = 86,
          .finish_p50_s = 90.2,
          .finish_p90_s = 94.4};
}

TEST(JobOutputForecast, EventLinesSayTheForecastAndItsInterval) {
  job::ForecastEvent first{.prior = true,
                           .workers = 1,
                           .reachable = true,
                           .iterations_p10 = 513,
                           .iterations_p50 = 540,
                           .iterations_p90 = 567,
                           .finish_p10_s = 51.3,
                           .finish_p50_s = 54,
                           .finish_p90_s = 56.7,
                           .first_iterations_p50 = 540,
                           .deadline_s = 60};
  EXPECT_EQ(EventLine({.job_id = "j", .what = first}),
            "Forecast from the plan's model: 540 (p10 513, p90 567) global steps, finish at 54.0 "
            "(p10 51.3, p90 56.7) s; deadline 60 s");
  job::ForecastEvent refit{.step = 50,
                           .points = 10,
                           .workers = 1,
                           .reachable = true,
                           .iterations_p10 = 860,
                           .iterations_p50 = 902,
                           .iterations_p90 = 944,
                           .finish_p10_s = 86,
                           .finish_p50_s = 90.2,
                           .finish_p90_s = 94.4,
                           .first_iterations_p50 = 540,
                           .deadline_s = 60};
  EXPECT_EQ(EventLine({.job_id = "j", .what = refit}),
            "Refit (10 points, step 50, 1 worker): 902 (p10 860, p90 944) global steps (first "
            "forecast 540), finish at 90.2 (p10 86.0, p90 94.4) s; deadline 60 s");
  refit.reachable = false;
  refit.iterations_p50 = refit.finish_p50_s = std::numeric_limits<double>::infinity();
  EXPECT_THAT(EventLine({.job_id = "j", .what = refit}), HasSubstr("): never global steps"));
  const nlohmann::json doc = nlohmann::json::parse(EventJson({.job_id = "j", .what = refit}));
  EXPECT_EQ(doc["event"], "forecast");
  EXPECT_TRUE(doc["iterations_p50"].is_null());
  EXPECT_EQ(doc["iterations_p90"], 944);
  EXPECT_EQ(doc["deadline_s"], 60);
  job::ReplannedEvent replanned{.feasible = true,
                                .to_launch = {{"local.cpu", 3}},
                                .more_iterations = 850,
                                .predicted_time_s = 30,
                                .detail = "the convergence refit ...",
                                .refit = true};
  EXPECT_THAT(EventLine({.job_id = "j", .what = replanned}),
              HasSubstr("Re-planned after the convergence refit (the convergence refit ...): "
                        "launch local.cpu=3, 850 more global steps"));
  EXPECT_EQ(nlohmann::json::parse(EventJson({.job_id = "j", .what = replanned}))["reason"],
            "refit");
}

// The progress line counts against the job's current forecast and says what made it; a forecast
// that does not reach the target says so instead of a number.
TEST(JobOutputForecast, ProgressLinesCountAgainstTheCurrentForecast) {
  job::ProgressEvent p{.elapsed_s = 12.4,
                       .iterations_done = 290,
                       .target_iterations = 1667,
                       .first_plan_iterations = 49,
                       .predicted_iterations = 1667,
                       .predicted_by = "forecast",
                       .forecast_source = "refit",
                       .forecast_step = 276,
                       .workers_running = 5,
                       .deadline_in_s = 77};
  const std::string line = EventLine({.job_id = "j", .what = p});
  EXPECT_THAT(line, HasSubstr("290/1667 global steps (17.4%; forecast: refit at step 276; first "
                              "plan 49)"));
  EXPECT_THAT(line, HasSubstr("deadline in 1m 17s"));
  p.forecast_unreachable = true;
  EXPECT_THAT(EventLine({.job_id = "j", .what = p}),
              HasSubstr("290/? global steps (the forecast (refit at step 276) does not reach the "
                        "target)"));
  p.forecast_unreachable = false;
  p.forecast_source = "profile";
  p.predicted_iterations = 49;
  p.iterations_done = 10;
  p.deadline_in_s = -3;
  const std::string first = EventLine({.job_id = "j", .what = p});
  EXPECT_THAT(first, HasSubstr("10/49 global steps (20.4%; forecast: the plan's model)"));
  EXPECT_THAT(first, HasSubstr("deadline passed 3.0s ago"));
  const nlohmann::json doc = nlohmann::json::parse(EventJson({.job_id = "j", .what = p}));
  EXPECT_EQ(doc["predicted_by"], "forecast");
  EXPECT_EQ(doc["forecast_source"], "profile");
}

// A deadline decision says what runs, what the policy wants and what is kept; a probe says it is
// one, and what came of it is its own line: a refused probe never reads "spot is back".
TEST(JobOutputForecast, DeadlineLinesSayWhatRunsAndWhatAProbeFound) {
  job::DeadlineEvent probe{.instance_type = "p2.xlarge",
                           .trigger = "probe",
                           .reason = "spot is back",
                           .spot = 1,
                           .on_demand = 0,
                           .launch_spot = 1,
                           .stop_on_demand = 1,
                           .time_left_s = 42,
                           .work_left_s = 12,
                           .running_spot = 0,
                           .running_on_demand = 1,
                           .probe = true};
  const std::string line = EventLine({.job_id = "j", .what = probe});
  EXPECT_THAT(line, HasSubstr("running spot 0, on-demand 1"));
  EXPECT_THAT(line, HasSubstr("if the probe finds spot: spot is back"));
  EXPECT_THAT(line, HasSubstr("probing spot with 1 launch"));
  EXPECT_THAT(line, HasSubstr("stopping 1 on-demand once spot runs"));
  EXPECT_THAT(line, HasSubstr("42.0s left, 12.0s of work"));
  job::DeadlineDoneEvent refused{.instance_type = "p2.xlarge",
                                 .probe = true,
                                 .spot_refused = true,
                                 .running_spot = 0,
                                 .running_on_demand = 1,
                                 .next_probe_in_s = 120};
  EXPECT_EQ(EventLine({.job_id = "j", .what = refused}),
            "Deadline p2.xlarge: the spot probe was refused (no capacity); running spot 0, "
            "on-demand 1; next spot probe in 2m 00s");
  job::DeadlineEvent wait{.instance_type = "p2.xlarge",
                          .trigger = "check",
                          .reason = "ahead of the expected spot supply; waiting for spot",
                          .spot = 0,
                          .on_demand = 0,
                          .time_left_s = 40,
                          .work_left_s = 10,
                          .running_spot = 0,
                          .running_on_demand = 1,
                          .kept_on_demand = 1};
  EXPECT_THAT(EventLine({.job_id = "j", .what = wait}),
              HasSubstr("keeping 1 on-demand running until spot covers the workers wanted"));
  const nlohmann::json doc = nlohmann::json::parse(EventJson({.job_id = "j", .what = refused}));
  EXPECT_EQ(doc["event"], "deadline-done");
  EXPECT_EQ(doc["spot_refused"], true);
}

TEST(JobOutputForecast, StatusShowsTheFirstAndTheCurrentForecast) {
  std::vector<job::JobEventRecord> events = {
      {.kind = "planned", .detail = "local.cpu=1"},
      {.kind = job::kForecastEvent, .detail = job::ForecastJson(First())},
      {.kind = job::kForecastEvent, .detail = "damaged"},
      {.kind = job::kForecastEvent, .detail = job::ForecastJson(Refit())}};
  const JobForecasts forecasts = ForecastsOf(events);
  ASSERT_TRUE(forecasts.first.has_value() && forecasts.current.has_value());
  EXPECT_TRUE(forecasts.first->prior);
  EXPECT_DOUBLE_EQ(forecasts.current->iterations_p50, 902);
  std::ostringstream table;
  PrintForecasts(forecasts, 120, 60, table);
  EXPECT_THAT(table.str(), HasSubstr("first (the plan's model)"));
  EXPECT_THAT(table.str(), HasSubstr("current (refit at step 50)"));
  EXPECT_THAT(table.str(), HasSubstr("902"));
  EXPECT_THAT(table.str(), HasSubstr("iterations done"));
  EXPECT_THAT(table.str(), HasSubstr("Deadline: 60.0 s"));
  const nlohmann::json doc = nlohmann::json::parse(ForecastsJson(forecasts, 120, 60));
  EXPECT_EQ(doc["first"]["iterations_p50"], 540);
  EXPECT_EQ(doc["current"]["iterations_p90"], 944);
  EXPECT_EQ(doc["current"]["points"], 10);
  EXPECT_EQ(doc["iterations_done"], 120);
  // The event log's table shows them in a few words.
  EXPECT_EQ(EventDetailText(events[1]),
            "from the profile: 540 (p10 513, p90 567) steps, finish 54.0 (p10 51.3, p90 56.7) s");
  EXPECT_EQ(
      EventDetailText(events[3]),
      "10 points at step 50: 902 (p10 860, p90 944) steps, finish 90.2 (p10 86.0, p90 94.4) s");
  EXPECT_EQ(EventDetailText(events[2]), "damaged");
  EXPECT_EQ(EventDetailText(events[0]), "local.cpu=1");
  EXPECT_EQ(
      EventDetailText({.kind = "refit-replan", .detail = R"({"why": "late", "launch": "local.cpu=3",
                                           "iterations": 1234.0, "replan": {}})"}),
      "late; launch local.cpu=3 for 1234 iterations");
  EXPECT_EQ(EventDetailText({.kind = "refit-replan", .detail = "no larger cluster meets it"}),
            "no larger cluster meets it");
  // A job without forecasts: nulls, and no table.
  const JobForecasts none = ForecastsOf({{.kind = "planned"}});
  EXPECT_FALSE(none.first.has_value());
  std::ostringstream empty;
  PrintForecasts(none, 0, 0, empty);
  EXPECT_EQ(empty.str(), "");
  const nlohmann::json null_doc = nlohmann::json::parse(ForecastsJson(none, 0, 0));
  EXPECT_TRUE(null_doc["first"].is_null());
  EXPECT_TRUE(null_doc["deadline_s"].is_null());
}

}  // namespace
}  // namespace spotdnn::gateway
