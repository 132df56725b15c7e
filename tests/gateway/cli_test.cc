#include "services/gateway/cli/cli.h"

#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "services/common/server.h"
#include "services/gateway/cli/command.h"
#include "services/predictor/predictor_service.h"
#include "spotdnn/v1/predictor_mock.grpc.pb.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::gateway {
namespace {

using ::testing::_;
using ::testing::HasSubstr;
using ::testing::Return;

google::protobuf::Struct ParseJsonObject(const std::string& text) {
  google::protobuf::Struct object;
  auto status = google::protobuf::util::JsonStringToMessage(text, &object);
  EXPECT_TRUE(status.ok()) << status.message() << "\n" << text;
  return object;
}

const std::vector<std::string> kPredict = {"predict",
                                           "--workload",
                                           "resnet110",
                                           "--catalog",
                                           "aws-spotdnn-prototype",
                                           "--cluster",
                                           "p2.xlarge=2,g3.8xlarge=4",
                                           "--loss",
                                           "0.8"};

TEST(PredictCommand, PrintsATableWithTheModelsNumbers) {
  const CliRun r = Cli(kPredict);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("p2.xlarge"));
  EXPECT_THAT(r.out, HasSubstr("7807.57"));  // cluster speed
  EXPECT_THAT(r.out, HasSubstr("17926"));    // normalized iterations
  EXPECT_THAT(r.out, HasSubstr("2351.08"));  // time
  EXPECT_THAT(r.out, HasSubstr("$2.9859"));  // spot cost
  EXPECT_THAT(r.out, HasSubstr("1024.0"));   // WA batch
}

TEST(PredictCommand, JsonIsOneObjectWithSnakeCaseFields) {
  std::vector<std::string> args = kPredict;
  args.push_back("--json");
  const CliRun r = Cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto object = ParseJsonObject(r.out);
  const auto& f = object.fields();
  EXPECT_EQ(f.at("workload").string_value(), "resnet110");
  EXPECT_NEAR(f.at("time_s").number_value(), 2351.08, 0.01);
  EXPECT_NEAR(f.at("cost_usd").number_value(), 2.985872, 1e-6);
  EXPECT_EQ(f.at("normalized_iterations").number_value(), 17926);
  EXPECT_EQ(f.at("wa_batch").number_value(), 1024);
  EXPECT_TRUE(f.contains("convergence_coefficient"));
  EXPECT_TRUE(f.contains("on_demand_cost_usd"));
  EXPECT_EQ(f.at("workers").list_value().values_size(), 2);
}

TEST(PredictCommand, CurveAddsTheLossCurve) {
  std::vector<std::string> args = kPredict;
  args.insert(args.end(), {"--curve", "5", "--json"});
  const CliRun r = Cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto object = ParseJsonObject(r.out);
  EXPECT_EQ(object.fields()
                .at("loss_curve")
                .struct_value()
                .fields()
                .at("points")
                .list_value()
                .values_size(),
            5);
}

TEST(PredictCommand, BadInputExitsTwoNamingIt) {
  auto with = [](const std::string& flag, const std::string& value) {
    std::vector<std::string> args = kPredict;
    auto it = std::find(args.begin(), args.end(), flag);
    *(it + 1) = value;
    return Cli(args);
  };
  CliRun r = with("--loss", "0.4");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--loss = 0.4"));
  EXPECT_THAT(r.err,
              ::testing::Not(HasSubstr("target_loss")));  // the flag the user typed, not the field
  r = with("--cluster", "p2.xlarge=2,x1.huge=1");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("x1.huge"));
  r = with("--catalog", "nowhere");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("catalog \"nowhere\" not found"));
  r = with("--workload", "/nonexistent/w.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/w.json"));
  r = Cli({"predict", "--workload", "resnet110"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("missing required flag --catalog"));
  r = Cli({"predict", "--bogus", "1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--bogus: unknown flag"));
}

TEST(PredictCommand, IterationAndEpochTargets) {
  const std::vector<std::string> base = {"predict",   "--workload",    "resnet32-cifar10-gce",
                                         "--catalog", "gce-icac-2019", "--cluster",
                                         "gce-v100=4"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return Cli(args);
  };
  CliRun iterations = with({"--iterations", "64000", "--json"});
  ASSERT_EQ(iterations.code, 0) << iterations.err;
  const auto object = ParseJsonObject(iterations.out);
  EXPECT_EQ(object.fields().at("normalized_iterations").number_value(), 64000);
  EXPECT_EQ(object.fields().at("target_iterations").number_value(), 64000);
  const double time_s = object.fields().at("time_s").number_value();
  EXPECT_GT(object.fields().at("cost_usd").number_value(), 0);
  // 4 V100 and 1 server: the study measured 1591 s for 64,000 steps.
  EXPECT_NEAR(time_s, 1591, 0.05 * 1591);
  CliRun epochs = with({"--epochs", "163.84", "--dataset-size", "50000", "--json"});
  ASSERT_EQ(epochs.code, 0) << epochs.err;
  EXPECT_NEAR(ParseJsonObject(epochs.out).fields().at("time_s").number_value(), time_s, 1e-6);
  CliRun table = with({"--iterations", "64000", "--parameter-servers", "2"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("target 64000 iterations"));
  EXPECT_THAT(table.out, HasSubstr("parameter-server utilisation W"));
  // Bad targets name the flag.
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--iterations", "0"}, "--iterations = \"0\""},
           {{"--iterations", "-5"}, "--iterations = \"-5\""},
           {{"--epochs", "-1", "--dataset-size", "100"}, "--epochs = \"-1\""},
           {{"--epochs", "3"}, "missing required flag --dataset-size"},
           {{"--iterations", "10", "--dataset-size", "100"}, "--dataset-size: only with --epochs"},
           {{"--iterations", "10", "--loss", "0.5"}, "give one target"},
           {{}, "missing the target"},
           {{"--loss", "0.5"}, "no loss model"}}) {
    CliRun r = with(args);
    EXPECT_EQ(r.code, 2) << message;
    EXPECT_THAT(r.err, HasSubstr(message));
  }
  // A cluster of a type the profile has no speed for names it.
  CliRun unknown =
      Cli({"predict", "--workload", "resnet32-cifar10-gce", "--catalog", "aws-paper-2023",
           "--cluster", "p3.2xlarge=1,g4dn.4xlarge=1", "--iterations", "100"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("g4dn.4xlarge (T4)"));
}

TEST(PlanCommand, PlansForIterations) {
  CliRun plan = Cli({"plan", "--workload", "resnet32-cifar10-gce", "--catalog", "gce-icac-2019",
                     "--iterations", "64000", "--deadline", "40m", "--json"});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto object = ParseJsonObject(plan.out);
  EXPECT_EQ(object.fields().at("feasible").bool_value(), true);
  EXPECT_LE(object.fields().at("time_s").number_value(), 2400);
  EXPECT_EQ(object.fields().at("normalized_iterations").number_value(), 64000);
  CliRun bad = Cli({"plan", "--workload", "resnet32-cifar10-gce", "--catalog", "gce-icac-2019",
                    "--iterations", "0", "--deadline", "40m"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--iterations = \"0\""));
}

TEST(PredictCommand, JsonErrorsAreJsonToo) {
  std::vector<std::string> args = kPredict;
  args[8] = "0.1";
  args.push_back("--json");
  const CliRun r = Cli(args);
  EXPECT_EQ(r.code, 2);
  const auto object = ParseJsonObject(r.out);
  EXPECT_EQ(object.fields().at("error").struct_value().fields().at("code").string_value(),
            "INVALID_ARGUMENT");
}

TEST(PredictCommand, TalksToARunningServerWithServerFlag) {
  services::PredictorServiceImpl service(
      std::make_shared<services::DataRegistry>(services::DataRegistry::WithBuiltins()));
  auto started = services::StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(started.ok());
  std::vector<std::string> args = kPredict;
  args.insert(args.end(), {"--server", "127.0.0.1:" + std::to_string(started->port), "--json"});
  const CliRun r = Cli(args);
  started->server->Shutdown();
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ParseJsonObject(r.out).fields().at("normalized_iterations").number_value(), 17926);
}

// A prediction is safe to repeat: an unavailable predictor is asked three times in all (the
// clients' retry policy), then the command gives up with exit status 1.
TEST(PredictCommand, ServiceFailureIsRetriedThenExitsOne) {
  pb::MockPredictorStub stub;
  EXPECT_CALL(stub, Predict(_, _, _))
      .Times(3)
      .WillRepeatedly(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused")));
  auto args =
      Args::Parse({"--workload", "resnet110", "--catalog", "c", "--cluster", "a=1", "--loss", "1"},
                  {.values = {"--workload", "--catalog", "--cluster", "--loss"}});
  ASSERT_TRUE(args.ok());
  std::ostringstream out, err;
  const int code = Predict(*args, stub, services::DataRegistry::WithBuiltins(), {out, err});
  EXPECT_EQ(code, 1);
  EXPECT_THAT(err.str(), HasSubstr("UNAVAILABLE: connection refused"));
}

TEST(Cli, HelpUnknownCommandAndListings) {
  EXPECT_EQ(Cli({"--help"}).code, 0);
  EXPECT_THAT(Cli({"help", "predict"}).out, HasSubstr("--cluster TYPE=N"));
  const CliRun unknown = Cli({"plan-it"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown command \"plan-it\""));
  const CliRun catalogs = Cli({"catalogs"});
  EXPECT_EQ(catalogs.code, 0);
  EXPECT_THAT(catalogs.out, HasSubstr("aws-paper-2023"));
  // Its zones: how many, in which regions.
  EXPECT_THAT(catalogs.out, HasSubstr("8 in us-east-1, us-west-2"));
  EXPECT_THAT(catalogs.out, HasSubstr("7 in us-east1, us-central1"));
  // The built-in ones only: a data directory with no stored profiles.
  const CliRun workloads = Cli({"workloads", "--json", "--data-dir", "/nonexistent/spotdnn-home"});
  EXPECT_EQ(workloads.code, 0);
  EXPECT_EQ(ParseJsonObject(workloads.out).fields().at("workloads").list_value().values_size(), 6);
}

// A mistyped command or subcommand: one line naming it and the nearest name, exit 2, not the
// overview or the group's help.
TEST(Cli, AMistypedCommandSuggestsTheNearestInOneLine) {
  struct Case {
    std::vector<std::string> argv;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {{"plann"}, "spotdnn: unknown command \"plann\"; did you mean \"plan\"?\n"},
           {{"local", "revok", "i-1"},
            "spotdnn local: unknown subcommand \"revok\"; did you mean \"revoke\"?\n"},
           {{"profile", "fitt", "--name", "x"},
            "spotdnn profile: unknown subcommand \"fitt\"; did you mean \"fit\"?\n"},
           {{"help", "plann"}, "spotdnn help: unknown command \"plann\"; did you mean \"plan\"?\n"},
           {{"help", "local", "revok"},
            "spotdnn help: unknown subcommand \"revok\"; did you mean \"revoke\"?\n"},
           {{"zzqqxx"}, "spotdnn: unknown command \"zzqqxx\"; `spotdnn help` lists the commands\n"},
       }) {
    const CliRun r = Cli(c.argv);
    EXPECT_EQ(r.code, kExitBadInput) << c.argv[0];
    EXPECT_EQ(r.err, c.says);
    EXPECT_EQ(r.out, "");
  }
}

// A missing argument is said once, naming it, with one pointer to --help.
TEST(Cli, AMissingArgumentIsNamedOnce) {
  const CliRun r = Cli({"local", "revoke"});
  EXPECT_EQ(r.code, kExitBadInput);
  EXPECT_THAT(r.err, HasSubstr("missing argument INSTANCE"));
  size_t hints = 0;
  for (size_t at = r.err.find("--help"); at != std::string::npos;
       at = r.err.find("--help", at + 1)) {
    ++hints;
  }
  EXPECT_EQ(hints, 1u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
  EXPECT_THAT(Cli({"profile", "show"}).err, HasSubstr("missing argument NAME"));
}

// The command table: each command takes only its own flags, stray arguments are refused, and
// --help is generated from the table, so every flag a command takes is documented.
TEST(Cli, EveryCommandTakesOnlyItsOwnFlagsAndDocumentsThem) {
  const CliRun foreign = Cli({"jobs", "--stall-timeout", "5m"});
  EXPECT_EQ(foreign.code, 2);
  EXPECT_THAT(foreign.err, HasSubstr("--stall-timeout: unknown flag"));
  const CliRun stray = Cli({"plan", "--workload", "resnet110", "--catalog", "aws-spotdnn-prototype",
                            "--loss", "0.9", "--deadline", "30m", "extra"});
  EXPECT_EQ(stray.code, 2);
  EXPECT_THAT(stray.err, HasSubstr("unexpected argument \"extra\""));
  for (const Command& c : CommandTable()) {
    std::vector<std::string> argv = absl::StrSplit(c.name, ' ');
    argv.push_back("--help");
    const CliRun help = Cli(argv);
    EXPECT_EQ(help.code, 0) << c.name;
    EXPECT_THAT(help.out, HasSubstr("Usage: spotdnn " + c.name)) << c.name;
    for (const FlagHelp& f : c.flags) EXPECT_THAT(help.out, HasSubstr(f.flag)) << c.name;
    EXPECT_EQ(Cli({"help", c.name}).out, help.out) << c.name;
    // The last line names the command's page of the manual, a page of docs/ that shows it.
    const std::string page = ManualPage(c.name);
    EXPECT_THAT(page, ::testing::StartsWith("docs/")) << c.name;
    EXPECT_THAT(help.out, ::testing::EndsWith("\n\nManual: " + page + "\n")) << c.name;
    std::ifstream file(std::string(SPOTDNN_SOURCE_DIR) + "/" + page);
    ASSERT_TRUE(file) << c.name << ": " << page << " does not exist";
    const std::string text((std::istreambuf_iterator<char>(file)), {});
    EXPECT_THAT(text, HasSubstr("spotdnn " + c.name.substr(0, c.name.find(' '))))
        << c.name << ": " << page;
  }
  EXPECT_EQ(ManualPage("plan"), "docs/planning.md");
  EXPECT_EQ(ManualPage("profile import"), "docs/profiling.md");
  EXPECT_EQ(ManualPage("profile validate-convergence"), "docs/convergence.md");
  EXPECT_EQ(ManualPage("catalog hazards"), "docs/simulation.md");
  EXPECT_THAT(Cli({"plan", "--help"}).out, ::testing::EndsWith("\nManual: docs/planning.md\n"));
  EXPECT_THAT(Cli({"help"}).out,
              ::testing::EndsWith("\nManual: README.md, and a page per topic in "
                                  "docs/ (its \"Where to read next\" lists them)\n"));
  // Flags the old hand-written usage texts forgot.
  const CliRun plan = Cli({"plan", "--help"});
  for (const char* flag : {"--mode", "--parameter-servers", "--exhaustive-limit"}) {
    EXPECT_THAT(plan.out, HasSubstr(flag));
  }
  EXPECT_THAT(Cli({"profile"}).err, HasSubstr("Subcommands:"));
  // The summaries line up past the longest subcommand's name.
  const CliRun profile = Cli({"profile", "--help"});
  EXPECT_THAT(profile.out, HasSubstr("\n  validate-convergence  fit the convergence model"));
  EXPECT_THAT(profile.out, HasSubstr("\n  import                import training logs"));
  EXPECT_EQ(Cli({"profile"}).code, 2);
  const CliRun unknown_sub = Cli({"profile", "frobnicate"});
  EXPECT_EQ(unknown_sub.code, 2);
  EXPECT_THAT(unknown_sub.err, HasSubstr("unknown subcommand \"frobnicate\" (expected import"));
  const CliRun nosuch = Cli({"help", "nosuch"});
  EXPECT_EQ(nosuch.code, 2);
  EXPECT_THAT(nosuch.err, HasSubstr("unknown command \"nosuch\""));
  const CliRun version = Cli({"--version"});
  EXPECT_EQ(version.code, 0);
  EXPECT_THAT(version.out, ::testing::StartsWith("spotdnn 0."));
}

}  // namespace
}  // namespace spotdnn::gateway
