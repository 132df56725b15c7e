// In the CLI: --accuracy and --target METRIC>=V|<=V beside --loss, and the 80% interval
// in `spotdnn predict` (its --json keys and its table).
#include "services/gateway/cli/target_flags.h"

#include <sstream>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/gateway/cli/cli.h"
#include "spotdnn/v1/predictor_mock.grpc.pb.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::gateway {
namespace {

using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;

const FlagSpec kTargetFlags = {.values = {"--loss", "--accuracy", "--target", "--iterations",
                                          "--epochs", "--dataset-size", "--workload", "--catalog",
                                          "--cluster", "--parameter-servers"}};

absl::StatusOr<TargetFlags> Parse(const std::vector<std::string>& argv) {
  auto args = Args::Parse(argv, kTargetFlags);
  if (!args.ok()) return args.status();
  return ParseTargetFlags(*args);
}

TEST(TargetFlags, AccuracyAndTargetGiveAMetricTarget) {
  auto t = Parse({"--accuracy", "0.85"});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->metric.has_value());
  EXPECT_EQ(t->metric->metric(), "accuracy");
  EXPECT_EQ(t->metric->direction(), v1::MetricTarget::DIRECTION_AT_LEAST);
  EXPECT_EQ(t->metric->value(), 0.85);
  EXPECT_EQ(t->loss, 0);
  EXPECT_EQ(t->Describe(), "accuracy >= 0.85");

  t = Parse({"--target", "accuracy>=0.88"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->metric->metric(), "accuracy");
  EXPECT_EQ(t->metric->value(), 0.88);

  t = Parse({"--target", "top5>=0.9"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->metric->metric(), "top5");
  EXPECT_EQ(t->Describe(), "top5 >= 0.9");

  t = Parse({"--target", "perplexity<=20"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->metric->direction(), v1::MetricTarget::DIRECTION_AT_MOST);

  // loss<=L is --loss L: the old request, no metric target.
  t = Parse({"--target", "loss<=0.5"});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->metric.has_value());
  EXPECT_EQ(t->loss, 0.5);
  EXPECT_EQ(t->Describe(), "loss 0.5");

  // ApplyTo writes the request's target fields.
  v1::PredictRequest request;
  request.set_target_loss(3);
  Parse({"--accuracy", "0.85"})->ApplyTo(&request);
  EXPECT_EQ(request.target_loss(), 0);
  EXPECT_EQ(request.target_metric().metric(), "accuracy");
  v1::Slo slo;
  Parse({"--loss", "0.7"})->ApplyTo(&slo);
  EXPECT_FALSE(slo.has_target_metric());
  EXPECT_EQ(slo.target_loss(), 0.7);
}

TEST(TargetFlags, BadTargetsNameTheFlagAndTheValue) {
  for (const auto& [argv, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--target", "accuracy=>0.8"},
            "--target accuracy=>0.8: expected METRIC>=VALUE or METRIC<=VALUE"},
           {{"--target", "accuracy"}, "--target accuracy: expected METRIC>=VALUE"},
           {{"--target", "accuracy>=nan"}, "the value \"nan\" must be a finite number"},
           {{"--target", "accuracy<=0.8"}, "give accuracy>=0.8"},
           {{"--target", "loss>=0.8"}, "give loss<=0.8"},
           {{"--target", "top 5>=0.8"}, "the metric \"top 5\" must be 1 to 128 letters"},
           {{"--accuracy", "88"}, "--accuracy = \"88\": an accuracy is a fraction in (0, 1]"},
           {{"--accuracy", "0"}, "--accuracy = \"0\""},
           {{"--accuracy", "nan"}, "--accuracy = \"nan\": not a finite number"},
           {{"--accuracy", "0.8", "--loss", "0.5"},
            "--loss 0.5, --accuracy 0.8: give one target, not several"},
           {{"--accuracy", "0.8", "--target", "top5>=0.9"}, "give one target"},
           {{"--target", "top5>=0.9", "--iterations", "100"}, "give one target"},
           {{"--target", "a>=1", "--target", "b>=1"}, "--target"},
           {{}, "--accuracy A, --target METRIC>=V"}}) {
    auto t = Parse(argv);
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(t.status().message(), HasSubstr(message));
  }
}

google::protobuf::Struct ParseJsonObject(const std::string& text) {
  google::protobuf::Struct object;
  auto status = google::protobuf::util::JsonStringToMessage(text, &object);
  EXPECT_TRUE(status.ok()) << status.message() << "\n" << text;
  return object;
}

// The keys the acceptance check reads are top-level keys of the prediction object; a
// target without a spread prints p10 = p50 = p90.
TEST(PredictInterval, JsonHasThePercentileKeysWithoutASpread) {
  const CliRun r =
      Cli({"predict", "--workload", "resnet32-cifar10-gce", "--catalog", "gce-icac-2019",
           "--cluster", "gce-v100=4", "--iterations", "64000", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto f = ParseJsonObject(r.out).fields();
  for (const char* key : {"iterations_p10", "iterations_p50", "iterations_p90"}) {
    ASSERT_TRUE(f.contains(key)) << key;
    EXPECT_EQ(f.at(key).number_value(), 64000) << key;
  }
  const double time_s = f.at("time_s").number_value();
  for (const char* key : {"time_p10_s", "time_p50_s", "time_p90_s"}) {
    ASSERT_TRUE(f.contains(key)) << key;
    EXPECT_EQ(f.at(key).number_value(), time_s) << key;
  }
  EXPECT_FALSE(f.at("has_spread").bool_value());
  // The old keys stay.
  for (const char* key : {"workload", "catalog", "normalized_iterations", "cost_usd", "workers"}) {
    EXPECT_TRUE(f.contains(key)) << key;
  }
  const CliRun table = Cli({"predict", "--workload", "resnet32-cifar10-gce", "--catalog",
                            "gce-icac-2019", "--cluster", "gce-v100=4", "--iterations", "64000"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("iterations (p10 / p50 / p90)"));
  EXPECT_THAT(table.out, HasSubstr("64000 / 64000 / 64000 (no spread)"));
}

// `predict --accuracy A` sends a metric target (not a loss) and prints the service's interval.
TEST(PredictInterval, AccuracyTargetTravelsAsAMetricTargetAndTheIntervalIsPrinted) {
  v1::MockPredictorStub stub;
  v1::PredictRequest sent;
  v1::PredictResponse answer;
  answer.set_workload("w");
  answer.set_catalog("c");
  v1::Prediction& p = *answer.mutable_prediction();
  p.set_worker_count(4);
  p.set_parameter_servers(1);
  p.set_normalized_iterations(30000);
  p.set_time_s(1500);
  p.set_expected_iteration_time_s(0.05);
  p.set_iterations_p10(27000);
  p.set_iterations_p50(30000);
  p.set_iterations_p90(34000);
  p.set_time_p10_s(1350);
  p.set_time_p50_s(1500);
  p.set_time_p90_s(1700);
  p.set_has_spread(true);
  *p.mutable_target_metric() = [] {
    v1::MetricTarget m;
    m.set_metric("accuracy");
    m.set_direction(v1::MetricTarget::DIRECTION_AT_LEAST);
    m.set_value(0.85);
    return m;
  }();
  EXPECT_CALL(stub, Predict(_, _, _))
      .Times(2)
      .WillRepeatedly(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(answer), Return(grpc::Status::OK)));
  auto args =
      Args::Parse({"--workload", "resnet110", "--catalog", "aws-spotdnn-prototype", "--cluster",
                   "p2.xlarge=4", "--parameter-servers", "1", "--accuracy", "0.85"},
                  kTargetFlags);
  ASSERT_TRUE(args.ok()) << args.status();
  std::ostringstream out, err;
  ASSERT_EQ(Predict(*args, stub, services::DataRegistry::WithBuiltins(), {out, err, true}), 0)
      << err.str();
  EXPECT_TRUE(sent.has_target_metric());
  EXPECT_EQ(sent.target_metric().metric(), "accuracy");
  EXPECT_EQ(sent.target_metric().direction(), v1::MetricTarget::DIRECTION_AT_LEAST);
  EXPECT_EQ(sent.target_metric().value(), 0.85);
  EXPECT_EQ(sent.target_loss(), 0);
  const auto f = ParseJsonObject(out.str()).fields();
  EXPECT_EQ(f.at("iterations_p10").number_value(), 27000);
  EXPECT_EQ(f.at("iterations_p50").number_value(), 30000);
  EXPECT_EQ(f.at("iterations_p90").number_value(), 34000);
  EXPECT_EQ(f.at("time_p10_s").number_value(), 1350);
  EXPECT_EQ(f.at("time_p50_s").number_value(), 1500);
  EXPECT_EQ(f.at("time_p90_s").number_value(), 1700);
  EXPECT_EQ(f.at("target_metric").struct_value().fields().at("metric").string_value(), "accuracy");

  std::ostringstream table, table_err;
  ASSERT_EQ(Predict(*args, stub, services::DataRegistry::WithBuiltins(), {table, table_err}), 0)
      << table_err.str();
  EXPECT_THAT(table.str(), HasSubstr("target accuracy >= 0.85"));
  EXPECT_THAT(table.str(), HasSubstr("27000 / 30000 / 34000"));
  EXPECT_THAT(table.str(), ::testing::Not(HasSubstr("no spread")));
}

TEST(PredictInterval, HelpListsTheTargetFlags) {
  for (const char* command : {"predict", "plan", "simulate"}) {
    const CliRun r = Cli({"help", command});
    EXPECT_THAT(r.out, HasSubstr("--accuracy")) << command;
    EXPECT_THAT(r.out, HasSubstr("--target")) << command;
  }
}

}  // namespace
}  // namespace spotdnn::gateway
