#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/common/data_registry.h"
#include "services/common/server.h"
#include "services/gateway/cli/cli.h"
#include "services/provisioner/provisioner_service.h"
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

// `plan` refuses a metric the profile has no convergence model of as `predict` does: exit 2, the
// same FAILED_PRECONDITION naming the metric, the workload and what to do (not exit 3,
// "No plan meets the SLO").
TEST(PlanCommand, AMetricWithoutAConvergenceModelIsRefusedAsPredictRefusesIt) {
  for (const std::vector<std::string>& target : {std::vector<std::string>{"--target", "top5>=0.9"},
                                                 std::vector<std::string>{"--accuracy", "0.9"}}) {
    std::vector<std::string> plan = {"plan",      "--workload",    "resnet32-cifar10-gce",
                                     "--catalog", "gce-icac-2019", "--deadline",
                                     "2h"};
    plan.insert(plan.end(), target.begin(), target.end());
    const CliRun planned = Cli(plan);
    EXPECT_EQ(planned.code, 2) << planned.out << planned.err;
    EXPECT_THAT(planned.out, ::testing::Not(HasSubstr("No plan meets the SLO")));
    EXPECT_THAT(planned.err, HasSubstr("FAILED_PRECONDITION"));
    EXPECT_THAT(planned.err,
                HasSubstr("workload \"resnet32-cifar10-gce\" has no convergence model"));
    EXPECT_THAT(planned.err, HasSubstr("spotdnn profile import"));
    std::vector<std::string> predict = {"predict",   "--workload",    "resnet32-cifar10-gce",
                                        "--catalog", "gce-icac-2019", "--cluster",
                                        "gce-k80=2"};
    predict.insert(predict.end(), target.begin(), target.end());
    const CliRun predicted = Cli(predict);
    EXPECT_EQ(predicted.code, 2);
    // The same message after the command's name.
    auto after = [](const std::string& err) { return err.substr(err.find(": ") + 2); };
    EXPECT_EQ(after(planned.err), after(predicted.err));
    plan.push_back("--json");
    const CliRun json = Cli(plan);
    EXPECT_EQ(json.code, 2);
    EXPECT_EQ(Json(json.out).fields().at("error").struct_value().fields().at("code").string_value(),
              "FAILED_PRECONDITION")
        << json.out;
  }
}

// The built-in ICAC profile with an accuracy model (plateau 0.93) whose runs reached `best`
// (0: not known), written to a file named after `tag`.
std::string ProfileWithAccuracyModel(const std::string& tag, double best) {
  auto profile = services::DataRegistry::WithBuiltins().ResolveWorkload("resnet32-cifar10-gce");
  EXPECT_TRUE(profile.ok()) << profile.status();
  v1::ConvergenceModel* m = profile->add_convergence();
  m->set_metric("accuracy");
  m->set_higher_is_better(true);
  m->set_floor(0.07);
  m->set_amplitude(0.9);
  m->set_scale(4000);
  if (best > 0) m->set_best_value(best);
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("plan-" + tag + "-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::ofstream(file) << services::ToJson(*profile);
  return file;
}

// The metric target has one shape in every --json: {"metric", "direction", "value"}, the
// direction as the enum's name without its prefix.
TEST(PlanCommand, JsonTargetMetricIsAnObjectAsInPredict) {
  const std::string file = ProfileWithAccuracyModel("target-json", 0);
  const std::vector<std::string> common = {"--workload", file,   "--catalog", "gce-icac-2019",
                                           "--accuracy", "0.85", "--json"};
  std::vector<std::string> plan = {"plan", "--deadline", "4h"};
  plan.insert(plan.end(), common.begin(), common.end());
  std::vector<std::string> predict = {"predict", "--cluster", "gce-v100=2"};
  predict.insert(predict.end(), common.begin(), common.end());
  for (const auto& argv : {plan, predict}) {
    const CliRun r = Cli(argv);
    ASSERT_EQ(r.code, 0) << argv[0] << ": " << r.err;
    const auto f = Json(r.out).fields();
    ASSERT_TRUE(f.contains("target_metric")) << argv[0] << ": " << r.out;
    const auto& t = f.at("target_metric").struct_value().fields();
    EXPECT_EQ(t.at("metric").string_value(), "accuracy") << argv[0];
    EXPECT_EQ(t.at("direction").string_value(), "at-least") << argv[0];
    EXPECT_EQ(t.at("value").number_value(), 0.85) << argv[0];
  }
  std::filesystem::remove(file);
}

// A target beyond the best value the profile's runs reached is flagged as an extrapolation, with
// that best value, in `predict` and `plan` (table and --json); a target within it is not.
TEST(PlanCommand, ATargetBeyondTheRunsBestIsFlaggedAsAnExtrapolation) {
  const std::string file = ProfileWithAccuracyModel("best-0.9", 0.9);
  for (const char* command : {"plan", "predict"}) {
    std::vector<std::string> argv = {command, "--workload", file, "--catalog", "gce-icac-2019"};
    if (std::string(command) == "plan") {
      argv.insert(argv.end(), {"--deadline", "4h"});
    } else {
      argv.insert(argv.end(), {"--cluster", "gce-v100=2"});
    }
    for (const char* target : {"0.92", "0.85"}) {
      std::vector<std::string> a = argv;
      a.insert(a.end(), {"--accuracy", target, "--json"});
      const CliRun r = Cli(a);
      ASSERT_EQ(r.code, 0) << command << " " << target << ": " << r.err;
      const auto f = Json(r.out).fields();
      const bool beyond = std::string(target) == "0.92";
      ASSERT_TRUE(f.contains("extrapolated")) << command << ": " << r.out;
      EXPECT_EQ(f.at("extrapolated").bool_value(), beyond) << command << " " << target;
      EXPECT_EQ(f.at("data_best").number_value(), 0.9) << command;
      a.pop_back();
      const CliRun table = Cli(a);
      ASSERT_EQ(table.code, 0) << table.err;
      if (beyond) {
        EXPECT_THAT(table.out, HasSubstr("an extrapolation: the runs reached 0.9 at best"))
            << command;
      } else {
        EXPECT_THAT(table.out, ::testing::Not(HasSubstr("an extrapolation"))) << command;
      }
    }
  }
  std::filesystem::remove(file);
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

TEST(PlanCommand, HugeQuotasAreRefusedNamingTheFlag) {
  const CliRun r =
      Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--quota", "p2.xlarge=100000"}));
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--quota: p2.xlarge=100000: must be at most 10000"));
  const CliRun existing =
      Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--existing", "g3.8xlarge=2147483647"}));
  EXPECT_EQ(existing.code, 2);
  EXPECT_THAT(existing.err, HasSubstr("--existing: g3.8xlarge=2147483647"));
  const CliRun size = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--max-size", "200000"}));
  EXPECT_EQ(size.code, 2);
  EXPECT_THAT(size.err, HasSubstr("--max-size = 200000"));
}

TEST(PlanCommand, HugeQuotasSkipTheHeuristicBaselineAndSaySo) {
  const std::string all =
      "p2.xlarge=10000,g4dn.4xlarge=10000,g3.8xlarge=10000,"
      "g3.16xlarge=10000,p2.8xlarge=10000";
  const CliRun r = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--quota", all}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("skipped (see below)"));
  EXPECT_THAT(r.out, HasSubstr("spotdnn baseline skipped: "));
  EXPECT_THAT(r.out, HasSubstr("50000-instance list"));
  const CliRun json =
      Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--quota", all, "--json"}));
  ASSERT_EQ(json.code, 0) << json.err;
  const auto spotdnn =
      Json(json.out).fields().at("baselines").struct_value().fields().at("spotdnn").struct_value();
  EXPECT_FALSE(spotdnn.fields().at("feasible").bool_value());
  EXPECT_TRUE(spotdnn.fields().at("skipped").bool_value());
  EXPECT_THAT(spotdnn.fields().at("reason").string_value(), HasSubstr("50000-instance list"));
  // As the chosen strategy it is refused with the reason, not run.
  const CliRun heuristic = Cli(
      PlanArgs({"--loss", "0.9", "--deadline", "30m", "--quota", all, "--strategy", "spotdnn"}));
  EXPECT_EQ(heuristic.code, 2);
  EXPECT_THAT(heuristic.err, HasSubstr("windows"));
}

TEST(PlanCommand, ExhaustiveLimitMustBeAWholeNumberInRange) {
  for (const char* bad : {"1e30", "18446744073709551616", "0", "-3", "2.5", "nan", "many"}) {
    const CliRun r = Cli(PlanArgs({"--loss", "1.2", "--deadline", "900s", "--strategy",
                                   "exhaustive", "--exhaustive-limit", bad}));
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_THAT(r.err, HasSubstr(std::string("--exhaustive-limit = \"") + bad + "\"")) << bad;
  }
  for (const char* good : {"1e9", "18446744073709551615", "6000"}) {
    const CliRun r = Cli(PlanArgs({"--loss", "1.2", "--deadline", "900s", "--strategy",
                                   "exhaustive", "--exhaustive-limit", good, "--json"}));
    EXPECT_EQ(r.code, 0) << good << ": " << r.err;
  }
  // The limit reaches the planner: the prototype's 5832 clusters are above 100.
  const CliRun refused = Cli(PlanArgs({"--loss", "1.2", "--deadline", "900s", "--strategy",
                                       "exhaustive", "--exhaustive-limit", "100"}));
  EXPECT_EQ(refused.code, 2);
  EXPECT_THAT(refused.err, HasSubstr("5832 clusters"));
}

TEST(PlanCommand, ZeroOverheadInAnyUnit) {
  for (const char* zero : {"0", "0s", "0m", "0.0h"}) {
    const CliRun r =
        Cli(PlanArgs({"--loss", "1.2", "--deadline", "900s", "--overhead", zero, "--json"}));
    ASSERT_EQ(r.code, 0) << zero << ": " << r.err;
    EXPECT_NEAR(Json(r.out).fields().at("cost_usd").number_value(), 1.491196, 1e-6) << zero;
  }
  const CliRun bad = Cli(PlanArgs({"--loss", "1.2", "--deadline", "900s", "--overhead", "-1s"}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--overhead = \"-1s\""));
}

TEST(PlanCommand, InfeasibleFrontierSaysWhyAndTheFastestTime) {
  const CliRun r = Cli(PlanArgs({"--loss", "0.7", "--deadline", "5m", "--mode", "frontier"}));
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.out, HasSubstr("0 plans"));
  EXPECT_THAT(r.out,
              HasSubstr("No plan meets the SLO: no cluster within the quotas meets the SLO"));
  EXPECT_THAT(r.out, HasSubstr("Fastest achievable: "));
  const CliRun json =
      Cli(PlanArgs({"--loss", "0.7", "--deadline", "5m", "--mode", "frontier", "--json"}));
  EXPECT_EQ(json.code, 3);
  const auto f = Json(json.out).fields();
  EXPECT_FALSE(f.at("feasible").bool_value());
  EXPECT_THAT(f.at("reason").string_value(), HasSubstr("fastest"));
  EXPECT_GT(f.at("fastest_time_s").number_value(), 300);
  EXPECT_GT(f.at("fastest_cost_usd").number_value(), 0);
  EXPECT_EQ(f.at("frontier").list_value().values_size(), 0);
  // The deadline mode gives the same fastest time.
  const CliRun deadline = Cli(PlanArgs({"--loss", "0.7", "--deadline", "5m", "--json"}));
  EXPECT_EQ(Json(deadline.out).fields().at("fastest_time_s").number_value(),
            f.at("fastest_time_s").number_value());
}

// The prototype catalog with its zones, g3.8xlarge and g4dn.4xlarge 30% cheaper in us-west-2b,
// written to a file named after `tag`.
std::string CatalogWithACheaperZone(const std::string& tag) {
  auto catalog = services::DataRegistry::WithBuiltins().ResolveCatalog("aws-spotdnn-prototype");
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  catalog->set_name("zoned-" + tag);
  for (v1::InstanceType& t : *catalog->mutable_instance_types()) {
    EXPECT_GT(t.zones_size(), 5) << t.name() << ": the built-in catalog lists its zones";
    for (v1::InstanceZone& z : *t.mutable_zones()) {
      if (z.name() == "us-west-2b" && (t.name() == "g3.8xlarge" || t.name() == "g4dn.4xlarge")) {
        z.set_spot_price_per_hour(0.7 * t.spot_price_per_hour());
      }
    }
  }
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("zoned-" + tag + "-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::ofstream(file) << services::ToJson(*catalog);
  return file;
}

TEST(PlanCommand, ABuiltInCatalogsZonesOfEqualPriceKeepThePlanInTheFirstRegion) {
  const CliRun r = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("$2.1191"));
  EXPECT_THAT(r.out, HasSubstr("us-east-1 (every type in us-east-1a)"));
  EXPECT_THAT(r.out, HasSubstr("Zones considered, cheapest first:\n  us-east-1: $2.1191 in "));
  EXPECT_THAT(r.out, HasSubstr("\n  us-west-2: $2.1191 in "));
}

TEST(PlanCommand, ZoneFlagsPlaceThePlanAndJsonSaysWhere) {
  const std::string catalog = CatalogWithACheaperZone("flags");
  auto plan = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"plan",   "--workload", "resnet110",  "--catalog", catalog,
                                     "--loss", "0.9",        "--deadline", "30m",       "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliRun r = Cli(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return Json(r.out);
  };
  // The cheaper region, its types in their cheapest zones there.
  const auto cheapest = plan({}).fields();
  EXPECT_EQ(cheapest.at("region").string_value(), "us-west-2");
  EXPECT_EQ(cheapest.at("zone").string_value(), "");
  EXPECT_LT(cheapest.at("cost_usd").number_value(), 2.1);
  bool g3_in_2b = false;
  for (const auto& z : cheapest.at("zones").list_value().values()) {
    g3_in_2b = g3_in_2b || z.string_value() == "g3.8xlarge=us-west-2b";
  }
  EXPECT_TRUE(g3_in_2b);
  const auto& considered = cheapest.at("zones_considered").list_value();
  ASSERT_EQ(considered.values_size(), 2);
  EXPECT_THAT(considered.values(0).string_value(), ::testing::StartsWith("us-west-2: $"));
  EXPECT_THAT(considered.values(1).string_value(), ::testing::StartsWith("us-east-1: $2.1191"));
  // --avoid-zone us-west-2b: us-west-2's other zones are at the catalog's prices; us-east-1 is
  // listed first.
  const auto avoided = plan({"--avoid-zone", "us-west-2b"}).fields();
  EXPECT_EQ(avoided.at("region").string_value(), "us-east-1");
  EXPECT_NEAR(avoided.at("cost_usd").number_value(), 2.119135, 1e-6);
  // --region and --zone pin it.
  EXPECT_EQ(plan({"--region", "us-east-1"}).fields().at("region").string_value(), "us-east-1");
  const auto pinned = plan({"--zone", "us-east-1c"}).fields();
  EXPECT_EQ(pinned.at("zone").string_value(), "us-east-1c");
  EXPECT_EQ(pinned.at("zones").list_value().values(0).string_value(), "p2.xlarge=us-east-1c");
  // The table says where.
  const CliRun table = Cli({"plan", "--workload", "resnet110", "--catalog", catalog, "--loss",
                            "0.9", "--deadline", "30m", "--zone", "us-west-2b"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("us-west-2b"));
  EXPECT_THAT(table.out, HasSubstr("Zones considered, cheapest first:\n  us-west-2b: $"));
  std::filesystem::remove(catalog);
}

TEST(PlanCommand, ZoneErrorsNameTheFlagAndTheZone) {
  const CliRun unknown =
      Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--zone", "us-east-1z"}));
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("--zone: zone \"us-east-1z\" is not in catalog "
                                     "aws-spotdnn-prototype (its zones: us-east-1a, us-east-1b"));
  const CliRun region = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--region", "mars-1"}));
  EXPECT_EQ(region.code, 2);
  EXPECT_THAT(region.err, HasSubstr("--region: region \"mars-1\" is not in catalog"));
  const CliRun all = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--region", "us-west-2",
                                   "--avoid-zone", "us-west-2a,us-west-2b,us-west-2c"}));
  EXPECT_EQ(all.code, 2);
  EXPECT_THAT(all.err, HasSubstr("--avoid-zone = \"us-west-2a,us-west-2b,us-west-2c\": leaves no "
                                 "zone to run in (the zones of region us-west-2"));
  const CliRun both = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--zone", "us-east-1a",
                                    "--avoid-zone", "us-east-1a"}));
  EXPECT_EQ(both.code, 2);
  EXPECT_THAT(both.err, HasSubstr("--zone: zone \"us-east-1a\" is also in --avoid-zone"));
  const CliRun empty = Cli(PlanArgs({"--loss", "0.9", "--deadline", "30m", "--avoid-zone", "a,"}));
  EXPECT_EQ(empty.code, 2);
  EXPECT_THAT(empty.err, HasSubstr("--avoid-zone = \"a,\": an empty zone name"));
  const CliRun frontier =
      Cli(PlanArgs({"--loss", "0.9", "--mode", "frontier", "--zone", "us-east-1a"}));
  EXPECT_EQ(frontier.code, 2);
  EXPECT_THAT(frontier.err, HasSubstr("--zone: the frontier is of the catalog as it is"));
  // A catalog without zones has none to pin.
  auto catalog = services::DataRegistry::WithBuiltins().ResolveCatalog("aws-spotdnn-prototype");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  catalog->set_name("no-zones");
  for (v1::InstanceType& t : *catalog->mutable_instance_types()) t.clear_zones();
  const std::string file = (std::filesystem::temp_directory_path() /
                            ("no-zones-" + std::to_string(::getpid()) + ".json"))
                               .string();
  std::ofstream(file) << services::ToJson(*catalog);
  const CliRun plain = Cli({"plan", "--workload", "resnet110", "--catalog", file, "--loss", "0.9",
                            "--deadline", "30m", "--zone", "us-east-1a"});
  std::filesystem::remove(file);
  EXPECT_EQ(plain.code, 2);
  EXPECT_THAT(plain.err, HasSubstr("--zone = \"us-east-1a\": catalog no-zones lists no zones"));
}

TEST(PlanCommand, TalksToARunningServerWithServerFlag) {
  services::ProvisionerServiceImpl service(
      std::make_shared<services::DataRegistry>(services::DataRegistry::WithBuiltins()));
  auto started = services::StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string server = "127.0.0.1:" + std::to_string(started->port);
  const std::vector<std::string> args =
      PlanArgs({"--loss", "1.2", "--deadline", "900s", "--json", "--server", server});
  const CliRun r = Cli(args);
  started->server->Shutdown();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NEAR(Json(r.out).fields().at("cost_usd").number_value(), 1.491196, 1e-6);
  // With the server gone the same command fails: it did not fall back to the in-process planner.
  const CliRun gone = Cli(args);
  EXPECT_EQ(gone.code, 1) << gone.out;
}

}  // namespace
}  // namespace spotdnn::gateway
