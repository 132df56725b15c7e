#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/gateway/cli.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::gateway {
namespace {

using ::testing::HasSubstr;

google::protobuf::Struct Json(const std::string& text) {
  google::protobuf::Struct s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &s).ok()) << text;
  return s;
}

std::vector<std::string> PlanArgs(std::vector<std::string> extra) {
  std::vector<std::string> args = {"plan", "--workload", "resnet110", "--catalog",
                                   "aws-spotdnn-prototype"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(PlanCommand, TableShowsThePlanAndTheComparisons) {
  const CliRun r = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("g4dn.4xlarge"));
  EXPECT_THAT(r.out, HasSubstr("$2.1191"));
  EXPECT_THAT(r.out, HasSubstr("spotdnn heuristic"));
  EXPECT_THAT(r.out, HasSubstr("$2.2028"));
  EXPECT_THAT(r.out, HasSubstr("cheapest homogeneous"));
  EXPECT_THAT(r.out, HasSubstr("spot saves"));
}

TEST(PlanCommand, JsonHasTheAgreedFields) {
  const CliRun r = Cli(PlanArgs({"--loss", "1.2", "--deadline", "900s", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto f = Json(r.out).fields();
  EXPECT_TRUE(f.at("feasible").bool_value());
  EXPECT_EQ(f.at("plan").struct_value().fields().at("g4dn.4xlarge").number_value(), 2);
  EXPECT_EQ(f.at("plan").struct_value().fields().at("g3.8xlarge").number_value(), 5);
  EXPECT_NEAR(f.at("cost_usd").number_value(), 1.491196, 1e-6);
  EXPECT_NEAR(f.at("time_s").number_value(), 897.95, 1e-6);
  EXPECT_EQ(f.at("normalized_iterations").number_value(), 8993);
  EXPECT_EQ(f.at("strategy").string_value(), "exact");
  EXPECT_TRUE(f.contains("solve_ms"));
  EXPECT_NEAR(f.at("baselines")
                  .struct_value()
                  .fields()
                  .at("spotdnn")
                  .struct_value()
                  .fields()
                  .at("cost_usd")
                  .number_value(),
              1.65, 0.005);
}

TEST(PlanCommand, InfeasibleExitsThree) {
  const CliRun r = Cli(PlanArgs({"--loss", "0.7", "--deadline", "5m", "--json"}));
  EXPECT_EQ(r.code, 3);
  const auto f = Json(r.out).fields();
  EXPECT_FALSE(f.at("feasible").bool_value());
  EXPECT_GT(f.at("fastest_time_s").number_value(), 300);
}

TEST(PlanCommand, BadInputExitsTwo) {
  CliRun r = Cli(PlanArgs({"--loss", "0.9", "--deadline", "soon"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--deadline = \"soon\""));
  r = Cli(PlanArgs({"--loss", "0.9"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--deadline"));
  r = Cli(PlanArgs({"--loss", "0.9", "--deadline", "1h", "--strategy", "magic"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--strategy = \"magic\""));
  r = Cli(PlanArgs({"--loss", "0.9", "--deadline", "1h", "--quota", "nope=1"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("\"nope\""));
  r = Cli(PlanArgs({"--loss", "0.9", "--mode", "budget"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--budget"));
}

TEST(PlanCommand, OptionsReachThePlanner) {
  // Without p2.xlarge the plan cannot use it; existing instances stay.
  CliRun r = Cli(PlanArgs({"--loss", "0.9", "--deadline", "1h", "--quota", "p2.xlarge=0",
                           "--existing", "g3.16xlarge=1", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  auto plan = Json(r.out).fields().at("plan").struct_value().fields();
  EXPECT_FALSE(plan.contains("p2.xlarge"));
  EXPECT_GE(plan.at("g3.16xlarge").number_value(), 1);
  auto launch = Json(r.out).fields().at("to_launch").struct_value().fields();
  EXPECT_EQ(launch.contains("g3.16xlarge") ? launch.at("g3.16xlarge").number_value() : 0,
            plan.at("g3.16xlarge").number_value() - 1);
}

TEST(PlanCommand, FrontierWritesAnSvgChart) {
  const std::string svg = (std::filesystem::temp_directory_path() /
                           ("spotdnn-frontier-" + std::to_string(::getpid()) + ".svg"))
                              .string();
  const CliRun r = Cli(PlanArgs(
      {"--loss", "0.9", "--deadline", "40m", "--mode", "frontier", "--plot", svg, "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  const auto f = Json(r.out).fields();
  const int points = f.at("frontier").list_value().values_size();
  EXPECT_GE(points, 2);
  std::ifstream in(svg);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("<svg"));
  EXPECT_THAT(text.str(), HasSubstr("fill=\"#d03030\""));  // our plan, marked
  EXPECT_THAT(text.str(), HasSubstr("deadline"));
  std::filesystem::remove(svg);
  const CliRun bad = Cli(PlanArgs({"--loss", "0.9", "--deadline", "40m", "--plot", svg}));
  EXPECT_EQ(bad.code, 2);
}

}  // namespace
}  // namespace spotdnn::gateway
