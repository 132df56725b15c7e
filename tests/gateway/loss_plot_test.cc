// `spotdnn status --plot`: the predicted curve comes from the stored workload, catalog and first
// plan; the actual one from the recorded progress; both end up in the SVG.
#include "services/gateway/cli/loss_plot.h"

#include <algorithm>
#include <optional>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "predictor/convergence.h"
#include "predictor/performance_model.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/gateway/job/convergence_watch.h"

namespace spotdnn::gateway {
namespace {

namespace pb = ::spotdnn::v1;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &out).ok());
  return out;
}

// A finished job of ResNet-110 on the prototype's catalog, first plan 5 p2.8xlarge.
job::JobRecord Job() {
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  auto workload = registry.ResolveWorkload("resnet110");
  auto catalog = registry.ResolveCatalog("aws-spotdnn-prototype");
  EXPECT_TRUE(workload.ok() && catalog.ok());
  pb::Plan plan;
  plan.set_feasible(true);
  plan.set_time_s(38.1);
  pb::InstanceCount* c = plan.mutable_cluster()->add_instances();
  c->set_instance_type("p2.8xlarge");
  c->set_count(5);
  job::JobRecord job;
  job.id = "plot-me";
  job.spec_json = R"({"name": "plot-me", "workload": "resnet110", "slo": {"loss": 2.6,
      "deadline": "60s"}, "catalog": "aws-spotdnn-prototype", "provider": "local",
      "commands": {"worker": "true"}})";
  job.workload_json = Json(*workload);
  job.catalog_json = Json(*catalog);
  job.plan_json = Json(plan);
  job.started_ms = 1'000'000;
  job.finished_ms = 1'030'000;
  return job;
}

TEST(LossPlot, ThePredictedCurveIsTheModelsAndTheActualTheRecordedOne) {
  const job::JobRecord job = Job();
  std::vector<job::ProgressRecord> progress = {{.at_ms = 1'002'000, .iterations = 5, .loss = 0},
                                               {.at_ms = 1'004'000, .iterations = 10, .loss = 3.1},
                                               {.at_ms = 1'020'000, .iterations = 40, .loss = 2.7}};
  auto plot = LossPlotOf(job, progress);
  ASSERT_TRUE(plot.ok()) << plot.status();
  ASSERT_EQ(plot->actual.size(), 2u);  // the point without a loss is left out
  EXPECT_DOUBLE_EQ(plot->actual[0].time_s, 4);
  EXPECT_DOUBLE_EQ(plot->actual[1].loss, 2.7);
  EXPECT_DOUBLE_EQ(plot->target_loss, 2.6);
  EXPECT_DOUBLE_EQ(plot->predicted_time_s, 38.1);
  EXPECT_DOUBLE_EQ(plot->finished_s, 30);
  ASSERT_GT(plot->predicted.size(), 10u);
  // The model's own curve for the plan's cluster, up to the later of the two ends.
  const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
  auto model = predictor::PerformanceModel::Create(
      services::ToDomain(*registry.ResolveWorkload("resnet110")),
      services::ToDomain(*registry.ResolveCatalog("aws-spotdnn-prototype")));
  ASSERT_TRUE(model.ok());
  pb::Cluster cluster;
  cluster.add_instances()->set_instance_type("p2.8xlarge");
  cluster.mutable_instances(0)->set_count(5);
  auto domain = services::ToDomain(cluster, model->catalog());
  ASSERT_TRUE(domain.ok());
  const CurvePoint& mid = plot->predicted[plot->predicted.size() / 2];
  auto expected = model->LossAtTime(*domain, mid.time_s);
  ASSERT_TRUE(expected.ok());
  EXPECT_NEAR(mid.loss, *expected, 1e-9);
  EXPECT_NEAR(plot->predicted.back().time_s, 38.1, 1e-6);

  const std::string svg = LossPlotSvg(*plot);
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("class=\"predicted\""));
  EXPECT_THAT(svg, HasSubstr("class=\"actual\""));
  EXPECT_THAT(svg, HasSubstr("target 2.6"));
  EXPECT_THAT(svg, HasSubstr("predicted end 38.1s"));
  EXPECT_THAT(svg, HasSubstr("actual end 30s"));
  EXPECT_THAT(svg, HasSubstr("</svg>"));
}

TEST(LossPlot, AJobWithoutALossPlotsItsProgressAndCostAndSaysWhatIsMissing) {
  job::JobRecord job = Job();
  const std::vector<job::InstanceRecord> instances = {
      {.id = "w1", .price_per_hour = 3.6, .launched_ms = 1'000'000, .ended_ms = 1'010'000}};
  const std::vector<job::RevocationRecord> revocations = {
      {.instance_id = "w1", .cloud_notice_ms = 1'005'000}};
  auto none = LossPlotOf(job,
                         {{.at_ms = 1'002'000, .iterations = 5, .loss = 0},
                          {.at_ms = 1'004'000, .iterations = 9, .loss = 0}},
                         instances, revocations);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->actual.empty());
  ASSERT_EQ(none->progress.size(), 2u);
  EXPECT_DOUBLE_EQ(none->progress[1].iterations, 9);
  EXPECT_NEAR(none->progress[1].cost_usd, 0.004, 1e-12);  // $3.6/h for 4 s
  EXPECT_NEAR(none->cost_usd, 0.01, 1e-12);               // to its end
  ASSERT_EQ(none->revocations.size(), 1u);
  EXPECT_DOUBLE_EQ(none->revocations[0].time_s, 5);
  EXPECT_THAT(none->missing, HasSubstr("no loss"));
  const std::string svg = LossPlotSvg(*none);
  EXPECT_THAT(svg, HasSubstr("class=\"iterations\""));
  EXPECT_THAT(svg, HasSubstr("class=\"revocation\""));
  EXPECT_THAT(svg, HasSubstr("revoked w1"));
  EXPECT_THAT(svg, HasSubstr("cost: $0.0100"));
  EXPECT_THAT(svg, HasSubstr("no loss"));
  job.started_ms = 0;
  auto unstarted = LossPlotOf(job, {});
  ASSERT_TRUE(unstarted.ok());
  EXPECT_THAT(unstarted->missing, HasSubstr("has not started"));
  // A title is escaped.
  LossPlot plot;
  plot.title = "a <b> & \"c\"";
  plot.actual = {{1, 2}, {2, 1}};
  EXPECT_THAT(LossPlotSvg(plot), HasSubstr("a &lt;b&gt; &amp; &quot;c&quot;"));
}

TEST(LossPlot, TicksAreRoundAndTheTargetLabelStandsApartFromTheEnds) {
  EXPECT_EQ(NiceTicks(0, 59.67), (std::vector<double>{0, 20, 40, 60}));
  const std::vector<double> loss = NiceTicks(2.1, 2.886);  // steps of 0.2, from 2 to 3
  ASSERT_EQ(loss.size(), 6u);
  for (size_t i = 0; i < loss.size(); ++i) EXPECT_NEAR(loss[i], 2.0 + 0.2 * i, 1e-12);
  LossPlot plot{.actual = {{1, 2.886}, {30, 2.5}},
                .target_loss = 2.6,
                .predicted_time_s = 38.1,
                .finished_s = 59.67};
  const std::string svg = LossPlotSvg(plot);
  EXPECT_THAT(svg, Not(HasSubstr(">2.886<")));
  EXPECT_THAT(svg, Not(HasSubstr(">59.67<")));
  EXPECT_THAT(svg, HasSubstr(">60<"));
  // The target's label at the left end (x = 84), away from the ends' labels at the right.
  EXPECT_THAT(svg, HasSubstr("x=\"84.0\""));
  EXPECT_THAT(svg, HasSubstr("text-anchor=\"start\" fill=\"#2a9d4a\">target 2.6"));
}

}  // namespace
}  // namespace spotdnn::gateway

namespace spotdnn::gateway {
namespace {

// The live refit's latest forecast is drawn beside the first plan's curve: its mean curve from
// the step it was made at, at the measured speed, to its p90 finish, and the finish interval.
TEST(LossPlot, TheLatestRefitIsDrawnWithItsFinishInterval) {
  const job::JobRecord job = Job();
  std::vector<job::ProgressRecord> progress = {{.at_ms = 1'004'000, .iterations = 10, .loss = 3.1},
                                               {.at_ms = 1'020'000, .iterations = 40, .loss = 2.7}};
  job::ConvergenceForecast first{.prior = true,
                                 .steps_per_s = 1.3,
                                 .reachable = true,
                                 .iterations_p50 = 49,
                                 .finish_p50_s = 38.1};
  job::ConvergenceForecast refit{.elapsed_s = 20,
                                 .step = 40,
                                 .points = 30,
                                 .workers = 5,
                                 .steps_per_s = 2,
                                 .reachable = true,
                                 .iterations_p10 = 70,
                                 .iterations_p50 = 80,
                                 .iterations_p90 = 90,
                                 .finish_p10_s = 35,
                                 .finish_p50_s = 40,
                                 .finish_p90_s = 45};
  refit.model.form = predictor::ConvergenceModel::Form::kEq3;
  refit.model.g1 = 10;
  refit.model.g3 = 5;
  refit.model.g4 = 1;
  refit.model.g5 = 2;
  std::vector<job::JobEventRecord> events = {
      {.kind = job::kForecastEvent, .detail = job::ForecastJson(first)},
      {.kind = "warning", .detail = "x"},
      {.kind = job::kForecastEvent, .detail = job::ForecastJson(refit)}};
  auto plot = LossPlotOf(job, progress, {}, {}, events);
  ASSERT_TRUE(plot.ok()) << plot.status();
  ASSERT_GT(plot->refitted.size(), 10u);
  EXPECT_DOUBLE_EQ(plot->refitted.front().time_s, 20);
  EXPECT_NEAR(plot->refitted.back().time_s, 45, 1e-9);
  EXPECT_DOUBLE_EQ(plot->refitted.front().loss, predictor::MeanValueAt(refit.model, 5, 0, 40));
  EXPECT_DOUBLE_EQ(plot->refit_finish_p50_s, 40);
  EXPECT_THAT(plot->refit_label, HasSubstr("refitted at step 40 (30 points)"));
  const std::string svg = LossPlotSvg(*plot);
  EXPECT_THAT(svg, HasSubstr("class=\"refitted\""));
  EXPECT_THAT(svg, HasSubstr("class=\"refit-interval\""));
  EXPECT_THAT(svg, HasSubstr("refitted end 40s"));
  EXPECT_THAT(svg, HasSubstr("class=\"predicted\""));
  // Without a refit (the profile's forecast alone) nothing more is drawn.
  plot = LossPlotOf(job, progress, {}, {}, {events[0]});
  ASSERT_TRUE(plot.ok());
  EXPECT_TRUE(plot->refitted.empty());
  EXPECT_THAT(LossPlotSvg(*plot), Not(HasSubstr("refitted")));
}

// The refitted curve is the forecast's own model, whatever its form: a stretched exponential
// (shape 0.5, as fits of real losses come out) is drawn as the forecast computed it, and it
// crosses the target loss where the forecast's p50 finish says, not above the target at its end.
TEST(LossPlot, TheRefittedCurveCrossesTheTargetWhereItsForecastSays) {
  const job::JobRecord job = Job();  // loss target 2.6
  std::vector<job::ProgressRecord> progress = {{.at_ms = 1'004'000, .iterations = 10, .loss = 3.9},
                                               {.at_ms = 1'020'000, .iterations = 40, .loss = 3.3}};
  job::ConvergenceForecast refit{
      .elapsed_s = 20, .step = 40, .points = 30, .workers = 5, .steps_per_s = 2, .reachable = true};
  refit.model.metric = "loss";
  refit.model.higher_is_better = false;
  refit.model.form = predictor::ConvergenceModel::Form::kSaturating;
  refit.model.floor = 0.5;
  refit.model.amplitude = 4;
  refit.model.scale = 300;
  refit.model.shape = 0.5;
  const double crossing = predictor::MeanStepAt(refit.model, 5, 0, 2.6);
  ASSERT_GT(crossing, 100);  // about 124.5 global steps
  refit.iterations_p10 = crossing - 10;
  refit.iterations_p50 = crossing;
  refit.iterations_p90 = crossing + 20;
  const auto finish = [&](double step) { return 20 + (step - 40) / 2; };
  refit.finish_p10_s = finish(refit.iterations_p10);
  refit.finish_p50_s = finish(crossing);
  refit.finish_p90_s = finish(refit.iterations_p90);
  auto plot = LossPlotOf(job, progress, {}, {},
                         {{.kind = job::kForecastEvent, .detail = job::ForecastJson(refit)}});
  ASSERT_TRUE(plot.ok()) << plot.status();
  ASSERT_GT(plot->refitted.size(), 10u);
  std::optional<double> first_below;
  double spacing = 0;
  for (size_t i = 0; i < plot->refitted.size(); ++i) {
    const CurvePoint& p = plot->refitted[i];
    const double step = 40 + (p.time_s - 20) * 2;
    EXPECT_NEAR(p.loss, predictor::MeanValueAt(refit.model, 5, 0, step), 1e-9) << p.time_s;
    if (!first_below && p.loss <= 2.6) first_below = p.time_s;
    if (i > 0) spacing = std::max(spacing, p.time_s - plot->refitted[i - 1].time_s);
  }
  ASSERT_TRUE(first_below.has_value()) << "the refitted curve never reaches the target";
  EXPECT_GE(*first_below, refit.finish_p50_s - 1e-9);
  EXPECT_LE(*first_below, refit.finish_p50_s + spacing + 1e-9);
}

}  // namespace
}  // namespace spotdnn::gateway
