// At the service edge: metric targets (MetricTarget <-> predictor::Target), the
// convergence model and its schedule in a profile message (and its JSON), the prediction's
// 80% interval.
#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "services/common/request_check.h"
#include "spotdnn/v1/predictor.pb.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::services {
namespace {

using ::testing::HasSubstr;

pb::MetricTarget Metric(const std::string& name, pb::MetricTarget::Direction direction,
                        double value) {
  pb::MetricTarget m;
  m.set_metric(name);
  m.set_direction(direction);
  m.set_value(value);
  return m;
}

TEST(MetricTarget, BecomesAKMetricTargetOrALossTarget) {
  pb::PredictRequest request;
  *request.mutable_target_metric() = Metric("accuracy", pb::MetricTarget::DIRECTION_AT_LEAST, 0.85);
  auto target = TargetOfMessage(request);
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->kind, predictor::Target::Kind::kMetric);
  EXPECT_EQ(target->metric, "accuracy");
  EXPECT_TRUE(target->higher_is_better);
  EXPECT_EQ(target->value, 0.85);
  EXPECT_TRUE(target->is_metric());
  EXPECT_EQ(target->Describe(), "accuracy >= 0.85");

  pb::Slo slo;
  *slo.mutable_target_metric() = Metric("top5-err", pb::MetricTarget::DIRECTION_AT_MOST, 0.1);
  target = TargetOfMessage(slo, "slo.");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(target->kind, predictor::Target::Kind::kMetric);
  EXPECT_FALSE(target->higher_is_better);
  EXPECT_EQ(MetricTargetOf(*target).metric(), "top5-err");
  EXPECT_EQ(MetricTargetOf(*target).direction(), pb::MetricTarget::DIRECTION_AT_MOST);

  // "loss <= L" is the loss target of target_loss L.
  *slo.mutable_target_metric() = Metric("loss", pb::MetricTarget::DIRECTION_AT_MOST, 0.5);
  target = TargetOfMessage(slo, "slo.");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_TRUE(target->is_loss());
  EXPECT_EQ(target->value, 0.5);

  // Without target_metric, the old fields as before.
  pb::LossCurveRequest curve;
  curve.set_target_iterations(64000);
  target = TargetOfMessage(curve);
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(target->kind, predictor::Target::Kind::kIterations);
}

TEST(MetricTarget, BadTargetsNameTheField) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    pb::MetricTarget metric;
    double target_loss;
    std::string message;
  };
  const std::vector<Case> cases = {
      {Metric("accuracy", pb::MetricTarget::DIRECTION_AT_LEAST, 0.8), 0.5,
       "slo.target_metric is set, and slo.target_loss = 0.5"},
      {Metric("accuracy", pb::MetricTarget::DIRECTION_UNSPECIFIED, 0.8), 0,
       "slo.target_metric.direction = unspecified"},
      {Metric("", pb::MetricTarget::DIRECTION_AT_LEAST, 0.8), 0, "slo.target_metric.metric = \"\""},
      {Metric("a b", pb::MetricTarget::DIRECTION_AT_LEAST, 0.8), 0,
       "slo.target_metric.metric = \"a b\""},
      {Metric("top5", pb::MetricTarget::DIRECTION_AT_LEAST, nan), 0,
       "slo.target_metric.value = nan: must be a finite number"},
      {Metric("accuracy", pb::MetricTarget::DIRECTION_AT_LEAST, 88), 0,
       "slo.target_metric.value = 88: an accuracy is a fraction in (0, 1]"},
      {Metric("accuracy", pb::MetricTarget::DIRECTION_AT_MOST, 0.8), 0, "give at-least"},
      {Metric("loss", pb::MetricTarget::DIRECTION_AT_LEAST, 0.8), 0, "give at-most"},
  };
  for (const Case& c : cases) {
    pb::Slo slo;
    *slo.mutable_target_metric() = c.metric;
    slo.set_target_loss(c.target_loss);
    auto target = TargetOfMessage(slo, "slo.");
    EXPECT_EQ(target.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(target.status().message(), HasSubstr(c.message));
  }
  // The request checks refuse a direction the enum does not define, naming the field.
  pb::PredictRequest request;
  request.mutable_target_metric()->set_direction(static_cast<pb::MetricTarget::Direction>(7));
  EXPECT_THAT(CheckRequest(request).message(), HasSubstr("target_metric.direction"));
}

TEST(MetricTarget, ParsesTheTextForm) {
  auto m = ParseMetricTarget("--target", "accuracy>=0.88");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->metric(), "accuracy");
  EXPECT_EQ(m->direction(), pb::MetricTarget::DIRECTION_AT_LEAST);
  EXPECT_EQ(m->value(), 0.88);
  m = ParseMetricTarget("--target", " eval/top5 <= 1e-1 ");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->metric(), "eval/top5");
  EXPECT_EQ(m->direction(), pb::MetricTarget::DIRECTION_AT_MOST);
  EXPECT_EQ(m->value(), 0.1);
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"accuracy=>0.8", "--target accuracy=>0.8: expected METRIC>=VALUE or METRIC<=VALUE"},
           {"accuracy>0.8", "expected METRIC>=VALUE"},
           {"accuracy>=0.8<=0.9", "expected METRIC>=VALUE"},
           {">=0.8", "expected METRIC>=VALUE"},
           {"accuracy>=", "expected METRIC>=VALUE"},
           {"accuracy>=nan", "the value \"nan\" must be a finite number"},
           {"accuracy>=x", "the value \"x\" must be a finite number"},
           {"accuracy>=1.5", "a fraction in (0, 1]"},
           {"loss>=0.5", "give loss<=0.5"}}) {
    auto parsed = ParseMetricTarget("--target", text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr(message)) << text;
  }
}

predictor::ConvergenceModel HandBuiltModel() {
  predictor::ConvergenceModel m;
  m.metric = "accuracy";
  m.higher_is_better = true;
  m.ceiling = 0.99;
  m.form = predictor::ConvergenceModel::Form::kEq3;
  m.floor = 0.05;
  m.floor_exp = 0.1;
  m.amplitude = 0.8;
  m.scale = 9000;
  m.scale_exp = 0.6;
  m.g1 = 100;
  m.g3 = 30;
  m.g4 = 0.2;
  m.g5 = 0.04;
  m.schedule.kind = predictor::LrSchedule::Kind::kStepDecay;
  m.schedule.drop_steps = {32000, 48000};
  m.schedule.drop_factors = {0.1, 0.5};
  m.schedule.cosine_horizon_steps = 64000;
  m.schedule.warmup_steps = 500;
  m.schedule.detected = true;
  m.rho = 0.4;
  m.drop_time_steps = 300;
  m.noise_sd = 0.02;
  m.noise_exp = 0.3;
  m.noise_sd_after = 0.005;
  m.noise_exp_after = 0.2;
  m.noise_run_share = 0.39;
  m.eval_interval_steps = 2000;
  m.runs = 283;
  m.points = 9000;
  m.fitted_on = "283 runs, 1-8 workers";
  return m;
}

void ExpectSame(const predictor::ConvergenceModel& a, const predictor::ConvergenceModel& b) {
  EXPECT_EQ(a.metric, b.metric);
  EXPECT_EQ(a.higher_is_better, b.higher_is_better);
  EXPECT_EQ(a.ceiling, b.ceiling);
  EXPECT_EQ(a.form, b.form);
  EXPECT_EQ(a.floor, b.floor);
  EXPECT_EQ(a.floor_exp, b.floor_exp);
  EXPECT_EQ(a.amplitude, b.amplitude);
  EXPECT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.scale_exp, b.scale_exp);
  EXPECT_EQ(a.g1, b.g1);
  EXPECT_EQ(a.g3, b.g3);
  EXPECT_EQ(a.g4, b.g4);
  EXPECT_EQ(a.g5, b.g5);
  EXPECT_EQ(a.schedule.kind, b.schedule.kind);
  EXPECT_EQ(a.schedule.drop_steps, b.schedule.drop_steps);
  EXPECT_EQ(a.schedule.drop_factors, b.schedule.drop_factors);
  EXPECT_EQ(a.schedule.cosine_horizon_steps, b.schedule.cosine_horizon_steps);
  EXPECT_EQ(a.schedule.warmup_steps, b.schedule.warmup_steps);
  EXPECT_EQ(a.schedule.detected, b.schedule.detected);
  EXPECT_EQ(a.rho, b.rho);
  EXPECT_EQ(a.drop_time_steps, b.drop_time_steps);
  EXPECT_EQ(a.noise_sd, b.noise_sd);
  EXPECT_EQ(a.noise_exp, b.noise_exp);
  EXPECT_EQ(a.noise_sd_after, b.noise_sd_after);
  EXPECT_EQ(a.noise_exp_after, b.noise_exp_after);
  EXPECT_EQ(a.noise_run_share, b.noise_run_share);
  EXPECT_EQ(a.eval_interval_steps, b.eval_interval_steps);
  EXPECT_EQ(a.runs, b.runs);
  EXPECT_EQ(a.points, b.points);
  EXPECT_EQ(a.fitted_on, b.fitted_on);
}

// Every field of the model survives the profile message and the profile's JSON (the store and
// `profile export`/`import` keep profiles as this JSON).
TEST(ConvergenceModelProto, RoundTripsThroughTheProfileAndItsJson) {
  predictor::WorkloadProfile profile;
  profile.name = "w";
  profile.convergence.push_back(HandBuiltModel());
  predictor::ConvergenceModel loss;  // the defaults (ceiling, scale and rho 1)
  loss.schedule.kind = predictor::LrSchedule::Kind::kCosine;
  loss.schedule.cosine_horizon_steps = 64000;
  profile.convergence.push_back(loss);

  const pb::WorkloadProfile message = ToProto(profile);
  ASSERT_EQ(message.convergence_size(), 2);
  EXPECT_EQ(message.convergence(0).schedule().kind(), pb::LrSchedule::KIND_STEP_DECAY);
  EXPECT_EQ(message.convergence(0).form(), pb::ConvergenceModel::FORM_EQ3);
  const std::string json = ToJson(message);
  EXPECT_THAT(json, HasSubstr("\"convergence\":[{\"metric\":\"accuracy\""));
  EXPECT_THAT(json, HasSubstr("\"drop_steps\":[32000,48000]"));
  pb::WorkloadProfile read;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &read).ok());
  const predictor::WorkloadProfile back = ToDomain(read);
  ASSERT_EQ(back.convergence.size(), 2u);
  ExpectSame(back.convergence[0], profile.convergence[0]);
  ExpectSame(back.convergence[1], profile.convergence[1]);
  EXPECT_EQ(back.convergence[1].schedule.kind, predictor::LrSchedule::Kind::kCosine);

  // A hand-written model that leaves out ceiling, scale and rho gets the model's defaults (1),
  // not proto3's 0.
  pb::WorkloadProfile sparse;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"name": "w", "convergence": [{"metric": "accuracy",
                      "higher_is_better": true, "amplitude": 0.9,
                      "schedule": {"kind": "KIND_STEP_DECAY", "drop_steps": [32000],
                                   "drop_factors": [0.1]}}]})",
                  &sparse)
                  .ok());
  const predictor::ConvergenceModel m = ToDomain(sparse).convergence.at(0);
  EXPECT_EQ(m.ceiling, 1);
  EXPECT_EQ(m.scale, 1);
  EXPECT_EQ(m.rho, 1);
  EXPECT_EQ(m.amplitude, 0.9);
  EXPECT_EQ(m.schedule.drop_steps, std::vector<double>{32000});
}

TEST(PredictionProto, CarriesTheIntervalAndThePointWithoutASpread) {
  predictor::Estimate e;
  e.normalized_iterations = 1000;
  e.time_s = 50;
  pb::Prediction point;
  EstimateToProto(e, &point);
  EXPECT_FALSE(point.has_spread());
  EXPECT_EQ(point.iterations_p10(), 1000);
  EXPECT_EQ(point.iterations_p50(), 1000);
  EXPECT_EQ(point.iterations_p90(), 1000);
  EXPECT_EQ(point.time_p10_s(), 50);
  EXPECT_EQ(point.time_p90_s(), 50);

  e.has_spread = true;
  e.iterations_p10 = 900;
  e.iterations_p50 = 1000;
  e.iterations_p90 = 1200;
  e.time_p10_s = 45;
  e.time_p50_s = 50;
  e.time_p90_s = 60;
  pb::Prediction spread;
  EstimateToProto(e, &spread);
  EXPECT_TRUE(spread.has_spread());
  EXPECT_EQ(spread.iterations_p10(), 900);
  EXPECT_EQ(spread.iterations_p90(), 1200);
  EXPECT_EQ(spread.time_p10_s(), 45);
  EXPECT_EQ(spread.time_p90_s(), 60);
  const std::string json = ToJson(spread);
  for (const char* key :
       {"\"iterations_p10\":900", "\"iterations_p50\":1000", "\"iterations_p90\":1200",
        "\"time_p10_s\":45", "\"time_p50_s\":50", "\"time_p90_s\":60"}) {
    EXPECT_THAT(json, HasSubstr(key));
  }

  // A metric target goes back into the prediction.
  predictor::Prediction p;
  p.target = predictor::Target::Accuracy(0.88);
  predictor::InstanceCatalog catalog;
  const pb::Prediction out = ToProto(p, catalog);
  EXPECT_EQ(out.target_metric().metric(), "accuracy");
  EXPECT_EQ(out.target_metric().direction(), pb::MetricTarget::DIRECTION_AT_LEAST);
  EXPECT_EQ(out.target_metric().value(), 0.88);
}

}  // namespace
}  // namespace spotdnn::services
