// spotdnn profile: the in-process profiler over a temporary database, and validate-speed on the
// CM-DARE measurements.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "profiler/profile_store.h"
#include "services/common/server.h"
#include "services/gateway/cli/cli.h"
#include "services/profiler/profiler_service.h"
#include "spotdnn/v1/profiler_mock.grpc.pb.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::gateway {
namespace {

using ::testing::_;
using ::testing::ContainsRegex;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::StartsWith;

std::string DataDir() {
  const char* env = std::getenv("SPOTDNN_DATA_DIR");
  return env != nullptr && *env != '\0' ? env : SPOTDNN_DATA_DIR;
}

class ProfileCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spotdnn-profile-cli-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    db_ = (dir_ / "profiles.db").string();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  CliRun Profile(std::vector<std::string> args) {
    args.insert(args.begin(), "profile");
    args.push_back("--db");
    args.push_back(db_);
    return Cli(args);
  }

  std::string Write(const std::string& name, const std::string& content) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << content;
    return path;
  }

  std::filesystem::path dir_;
  std::string db_;
};

TEST_F(ProfileCommandTest, ImportsSampleLinesFitsShowsAndExports) {
  // A training script's log: single-worker samples of one instance type with bytes and
  // communication time, plus one malformed line.
  std::string log = "epoch 1 starting\n";
  for (int step = 1; step <= 20; ++step) {
    log +=
        "I1122 SPOTDNN_SAMPLE job_id=r110 worker_id=0 instance_type=p2.xlarge gpus=1 "
        "batch_size=128 step=" +
        std::to_string(step) +
        " iteration_time_s=0.5 communication_time_s=0.16 bytes_sent=11540000 "
        "bytes_received=11540000 cluster_workers=1\n";
  }
  log += "SPOTDNN_SAMPLE job_id=r110 step=21 iteration_time_s=inf\n";
  const std::string path = Write("train.log", log);

  CliRun imported = Profile({"import", path});
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_THAT(imported.out, ContainsRegex("samples imported +20 new, 0 already stored\n"));
  EXPECT_THAT(imported.out, HasSubstr("train.log:22: iteration_time_s = inf: must be finite"));

  CliRun strict = Profile({"import", path, "--stop-on-error"});
  EXPECT_EQ(strict.code, kExitBadInput);
  EXPECT_THAT(strict.err, HasSubstr("train.log:22: iteration_time_s = inf: must be finite"));

  CliRun fit = Profile({"fit", "--name", "r110", "--require", "S_parm,B_req,T_comp"});
  ASSERT_EQ(fit.code, 0) << fit.err;
  EXPECT_THAT(fit.out, HasSubstr("Fitted profile r110 version 1"));
  EXPECT_THAT(fit.out, ContainsRegex("S_parm \\(MB\\) +11\\.540\n"));
  EXPECT_THAT(fit.out, ContainsRegex("B_req \\(MB/s\\) +144\\.25\n"));  // 2 * 11.54 / 0.16
  EXPECT_THAT(fit.out, HasSubstr("256.0"));                             // 128 samples / 0.5 s
  EXPECT_THAT(fit.out, HasSubstr("contention needs runs with at least 3 distinct worker counts"));

  CliRun unfittable = Profile({"fit", "--name", "r110", "--require", "contention"});
  EXPECT_EQ(unfittable.code, kExitBadInput);
  EXPECT_THAT(unfittable.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(unfittable.err, HasSubstr("got 1"));

  CliRun list = Profile({"list"});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("r110"));

  CliRun show = Profile({"show", "r110", "--json"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_THAT(show.out, HasSubstr("\"parameter_size_mb\":11.54"));

  CliRun missing = Profile({"show", "nope"});
  EXPECT_EQ(missing.code, kExitBadInput);
  EXPECT_THAT(missing.err, HasSubstr("profile \"nope\" is not stored"));
}

TEST_F(ProfileCommandTest, ExportedProfilesAreWhatPredictReads) {
  const std::string builtin = std::string(SPOTDNN_SOURCE_DIR) + "/deploy/workloads/resnet110.json";
  CliRun imported = Profile({"import", builtin});
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_THAT(imported.out, HasSubstr("Stored profile resnet110 version 1"));
  const std::string exported = (dir_ / "exported.json").string();
  CliRun exp = Profile({"export", "resnet110", "--out", exported});
  ASSERT_EQ(exp.code, 0) << exp.err;
  // The exported file predicts exactly what the built-in profile predicts.
  const std::vector<std::string> predict = {"predict",
                                            "--catalog",
                                            "aws-spotdnn-prototype",
                                            "--cluster",
                                            "p2.xlarge=2,g3.8xlarge=4",
                                            "--loss",
                                            "0.8",
                                            "--workload"};
  std::vector<std::string> from_file = predict, from_builtin = predict;
  from_file.push_back(exported);
  from_builtin.push_back("resnet110");
  CliRun a = Cli(from_file), b = Cli(from_builtin);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_THAT(a.out, HasSubstr("2351.08"));
  EXPECT_EQ(a.out, b.out);
  // A re-import of the export is version 2; delete removes both.
  CliRun again = Profile({"import", exported});
  EXPECT_THAT(again.out, HasSubstr("version 2"));
  CliRun deleted = Profile({"delete", "resnet110"});
  EXPECT_THAT(deleted.out, HasSubstr("Deleted 2 versions"));
}

// A profile's convergence models (with their schedules) survive the store, `profile
// export` and a re-import of the .json.
TEST_F(ProfileCommandTest, ConvergenceModelsRoundTripThroughImportAndExport) {
  std::ifstream in(std::string(SPOTDNN_SOURCE_DIR) + "/deploy/workloads/resnet110.json");
  std::stringstream text;
  text << in.rdbuf();
  v1::WorkloadProfile profile;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text.str(), &profile).ok());
  profile.set_name("r110-conv");
  v1::ConvergenceModel& m = *profile.add_convergence();
  m.set_metric("accuracy");
  m.set_higher_is_better(true);
  m.set_ceiling(0.98);
  m.set_amplitude(0.7);
  m.set_scale(12000.5);
  m.set_rho(0.35);
  m.set_noise_sd(0.013);
  m.set_eval_interval_steps(2000);
  m.set_runs(283);
  m.set_fitted_on("283 runs, 1-8 workers");
  m.mutable_schedule()->set_kind(v1::LrSchedule::KIND_STEP_DECAY);
  m.mutable_schedule()->add_drop_steps(32000);
  m.mutable_schedule()->add_drop_factors(0.1);
  m.mutable_schedule()->set_detected(true);
  std::string json;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(profile, &json).ok());
  CliRun imported = Profile({"import", Write("conv.json", json)});
  ASSERT_EQ(imported.code, 0) << imported.err;
  const std::string exported = (dir_ / "exported.json").string();
  CliRun exp = Profile({"export", "r110-conv", "--out", exported});
  ASSERT_EQ(exp.code, 0) << exp.err;
  std::ifstream back_in(exported);
  std::stringstream back_text;
  back_text << back_in.rdbuf();
  v1::WorkloadProfile back;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(back_text.str(), &back).ok())
      << back_text.str();
  ASSERT_EQ(back.convergence_size(), 1) << back_text.str();
  const v1::ConvergenceModel& b = back.convergence(0);
  EXPECT_EQ(b.metric(), "accuracy");
  EXPECT_TRUE(b.higher_is_better());
  EXPECT_EQ(b.ceiling(), 0.98);
  EXPECT_EQ(b.amplitude(), 0.7);
  EXPECT_EQ(b.scale(), 12000.5);
  EXPECT_EQ(b.rho(), 0.35);
  EXPECT_EQ(b.noise_sd(), 0.013);
  EXPECT_EQ(b.eval_interval_steps(), 2000);
  EXPECT_EQ(b.runs(), 283);
  EXPECT_EQ(b.fitted_on(), "283 runs, 1-8 workers");
  EXPECT_EQ(b.schedule().kind(), v1::LrSchedule::KIND_STEP_DECAY);
  ASSERT_EQ(b.schedule().drop_steps_size(), 1);
  EXPECT_EQ(b.schedule().drop_steps(0), 32000);
  EXPECT_EQ(b.schedule().drop_factors(0), 0.1);
  EXPECT_TRUE(b.schedule().detected());
  CliRun again = Profile({"import", exported});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_THAT(again.out, HasSubstr("version 2"));
}

TEST_F(ProfileCommandTest, BadInputExitsTwoNamingTheFlag) {
  CliRun no_name = Profile({"fit"});
  EXPECT_EQ(no_name.code, kExitBadInput);
  EXPECT_THAT(no_name.err, HasSubstr("--name"));
  CliRun unknown = Profile({"frobnicate"});
  EXPECT_EQ(unknown.code, kExitBadInput);
  CliRun format = Profile({"import", "x.csv", "--format", "xml"});
  EXPECT_EQ(format.code, kExitBadInput);
  EXPECT_THAT(format.err, HasSubstr("format = \"xml\""));
  CliRun fit_workers =
      Cli({"profile", "validate-speed", "--runs", dir_.string(), "--fit-workers", "1,2"});
  EXPECT_EQ(fit_workers.code, kExitBadInput);
  EXPECT_THAT(fit_workers.err, HasSubstr("at least 3 distinct worker counts; got 2"));
  CliRun json = Profile({"show", "nope", "--json"});
  EXPECT_THAT(json.out, StartsWith("{\"error\":{\"code\":\"NOT_FOUND\""));
}

TEST_F(ProfileCommandTest, TalksToARunningProfilerWithServer) {
  auto store = profiler::ProfileStore::Open(db_);
  ASSERT_TRUE(store.ok()) << store.status();
  std::shared_ptr<profiler::ProfileStore> shared(*std::move(store));
  auto service_store_count = [shared] { return shared->CountSamples(); };
  services::ProfilerServiceImpl service(shared);
  auto started = services::StartServer("127.0.0.1:0", {&service});
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string server = "127.0.0.1:" + std::to_string(started->port);
  // A file goes to a remote server as content, under the job named by --job.
  const std::string log = Write("remote.log",
                                "SPOTDNN_SAMPLE step=1 iteration_time_s=0.5 loss=2\n"
                                "SPOTDNN_SAMPLE step=2 iteration_time_s=0.5 loss=1.9\n");
  CliRun imported =
      Cli({"profile", "import", log, "--job", "remote", "--server", server, "--json"});
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_THAT(imported.out, HasSubstr("\"imported\":\"2\""));
  // Sent again: nothing is stored twice.
  CliRun again = Cli({"profile", "import", log, "--job", "remote", "--server", server});
  ASSERT_EQ(again.code, 0) << again.err;
  // Said once, as what it is: none new, both already stored (not "2 imported" beside it).
  EXPECT_THAT(again.out, ContainsRegex("samples imported +0 new, 2 already stored\n"));
  EXPECT_EQ(*service_store_count(), 2);
  // A folder is imported by path, which a server without --import_root does not read.
  CliRun folder = Cli({"profile", "import", dir_.string(), "--server", server});
  EXPECT_EQ(folder.code, kExitBadInput);
  EXPECT_THAT(folder.err, HasSubstr("no --import_root"));
  CliRun list = Cli({"profile", "list", "--server", server});
  ASSERT_EQ(list.code, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("(no profiles stored)"));
  started->server->Shutdown();
}

// The sequence a user (and the check kept outside this repository) runs: one import per run file
// of the ICAC 2019 study, a fit, an export, and a prediction of a mixed cluster by iterations.
TEST_F(ProfileCommandTest, ImportFitExportAndPredictAMixedClusterByIterations) {
  const std::string icac = DataDir() + "/icac2019";
  if (!std::filesystem::exists(icac)) GTEST_SKIP() << "ICAC 2019 data not found under " << icac;
  struct Run {
    std::string file, gpu;
    int workers, servers;
  };
  const std::string e = icac + "/experiment_1ps_vs_2ps/";
  std::vector<Run> runs = {{icac + "/p100_v100_spot/v100/train_data.csv", "V100", 1, 1},
                           {icac + "/p100_v100_spot/p100/train_data.csv", "P100", 1, 1},
                           {icac + "/p100_v100_spot/4p100/4p100_train_data.csv", "P100", 4, 1},
                           {icac + "/k80_on_demand/k80-demand/train_data.csv", "K80", 1, 1},
                           {icac + "/k80_spot/4-spot/4-spot-train_data.csv", "K80", 4, 1}};
  for (int n : {2, 4, 6, 8}) {
    runs.push_back({e + "1ps" + std::to_string(n) + "v/train_data.csv", "V100", n, 1});
    runs.push_back({e + "2ps" + std::to_string(n) + "k/train_data.csv", "K80", n, 2});
  }
  int i = 0;
  for (const Run& r : runs) {
    std::string gpu_lower = r.gpu;
    for (char& c : gpu_lower) c = std::tolower(c);
    CliRun imported =
        Profile({"import", r.file, "--job", "J" + std::to_string(i++), "--gpu-type", r.gpu,
                 "--instance-type", "gce-" + gpu_lower, "--workers", std::to_string(r.workers),
                 "--parameter-servers", std::to_string(r.servers)});
    ASSERT_EQ(imported.code, 0) << r.file << ": " << imported.err;
    EXPECT_THAT(imported.out, HasSubstr("runs (jobs)"));
  }
  CliRun fit = Profile({"fit", "--name", "icac", "--ps-bandwidth", "1000"});
  ASSERT_EQ(fit.code, 0) << fit.err;
  EXPECT_THAT(fit.out, ContainsRegex("model variant +shared-ps\n"));
  EXPECT_THAT(fit.out, ContainsRegex("queueing +yes"));
  const std::string exported = (dir_ / "icac.json").string();
  CliRun out = Profile({"export", "icac", "--out", exported});
  ASSERT_EQ(out.code, 0) << out.err;
  const std::string catalog = Write("my-gce.json",
                                    R"({"name": "my-gce", "provider": "gce", "instance_types": [
        {"name": "gce-k80", "gpu_type": "K80", "gpus": 1, "quota": 8},
        {"name": "gce-p100", "gpu_type": "P100", "gpus": 1, "quota": 8},
        {"name": "gce-v100", "gpu_type": "V100", "gpus": 1, "quota": 8}],
        "parameter_server": {"bandwidth_mb_per_s": 1000}, "pcie_bandwidth_mb_per_s": 10000})");
  CliRun predicted = Cli({"predict", "--workload", exported, "--catalog", catalog, "--cluster",
                          "gce-v100=1,gce-p100=1,gce-k80=2", "--iterations", "64000",
                          "--parameter-servers", "1", "--json"});
  ASSERT_EQ(predicted.code, 0) << predicted.err;
  google::protobuf::Struct object;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(predicted.out, &object).ok())
      << predicted.out;
  const double time_s = object.fields().at("time_s").number_value();
  EXPECT_EQ(object.fields().at("normalized_iterations").number_value(), 64000);
  // 2 K80 + 1 P100 + 1 V100 train faster than 4 K80 alone (3518 s measured) and slower than
  // 4 V100 (1591 s measured).
  EXPECT_GT(time_s, 1591);
  EXPECT_LT(time_s, 3518);
  // Validation from the same database: fit on some runs, predict the others.
  CliRun validate = Profile({"validate", "--fit", "J0,J1,J3,J5,J6,J7,J8,J9,J10,J11,J12", "--check",
                             "J2,J4", "--ps-bandwidth", "1000"});
  ASSERT_EQ(validate.code, 0) << validate.err;
  EXPECT_THAT(validate.out, HasSubstr("gce-p100=4, 1 PS"));
  EXPECT_THAT(validate.out, HasSubstr("MAPE of the time: "));
  CliRun json = Profile({"validate", "--fit", "J0,J1,J3,J5,J6,J7,J8,J9,J10,J11,J12", "--check",
                         "J2,J4", "--ps-bandwidth", "1000", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &object).ok()) << json.out;
  EXPECT_EQ(object.fields().at("clusters").list_value().values_size(), 2);
  EXPECT_LT(object.fields().at("mape").number_value(), 5);
}

TEST_F(ProfileCommandTest, ImportFlagsAndValidateSayWhatIsWrong) {
  const std::string csv = Write("train_data.csv",
                                "Wall Time,Step,Accuracy,Run\n100,0,0.1,1\n200,1000,0.5,1\n"
                                "300,2000,0.6,1\n");
  CliRun both = Profile({"import", csv, "--job", "j", "--batch", "64", "--batch-size", "64"});
  EXPECT_EQ(both.code, kExitBadInput);
  EXPECT_THAT(both.err, HasSubstr("--batch and --batch-size"));
  CliRun imported = Profile({"import", csv, "--job", "j", "--gpu-type", "V100", "--workers", "2",
                             "--parameter-servers", "2", "--batch-size", "64"});
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_THAT(imported.out, ContainsRegex("runs \\(jobs\\) +1\n"));
  CliRun cluster = Profile({"import", csv, "--job", "m", "--cluster", "V100=1,K80=2"});
  ASSERT_EQ(cluster.code, 0) << cluster.err;
  CliRun ambiguous =
      Profile({"import", csv, "--job", "m", "--cluster", "V100=1", "--gpu-type", "V100"});
  EXPECT_EQ(ambiguous.code, kExitBadInput);
  CliRun variant = Profile({"fit", "--name", "x", "--model-variant", "best"});
  EXPECT_EQ(variant.code, kExitBadInput);
  EXPECT_THAT(variant.err, HasSubstr("--model_variant = \"best\""));
  CliRun no_check = Profile({"validate", "--fit", "j"});
  EXPECT_EQ(no_check.code, kExitBadInput);
  EXPECT_THAT(no_check.err, HasSubstr("--check"));
  CliRun unknown = Profile({"validate", "--fit", "j", "--check", "nope"});
  EXPECT_EQ(unknown.code, kExitBadInput);
  EXPECT_THAT(unknown.err, HasSubstr("check_job_ids[0] = \"nope\": no samples stored"));
  // One run of one size cannot separate compute from the servers' time.
  CliRun thin = Profile({"validate", "--fit", "j", "--check", "m", "--ps-bandwidth", "1000"});
  EXPECT_EQ(thin.code, kExitBadInput);
  EXPECT_THAT(thin.err, HasSubstr("2 or more cluster sizes"));
}

TEST(ValidateSpeedCommand, EachCmdareFolderAloneMeetsTheTarget) {
  for (const char* gpu : {"k80", "p100"}) {
    const std::string dir = DataDir() + "/cmdare/" + gpu;
    if (!std::filesystem::exists(dir)) GTEST_SKIP() << "CM-DARE data not found under " << dir;
    CliRun json =
        Cli({"profile", "validate-speed", "--runs", dir, "--fit-workers", "1,2,4,7", "--json"});
    ASSERT_EQ(json.code, 0) << json.err;
    google::protobuf::Struct object;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &object).ok()) << json.out;
    EXPECT_EQ(object.fields().at("held_out_points").number_value(), 16) << gpu;
    EXPECT_LE(object.fields().at("overall_mape").number_value(), 5.0) << gpu;
  }
  CliRun paper = Cli({"profile", "validate-speed", "--runs", DataDir() + "/cmdare/k80",
                      "--fit-workers", "1,2,4,7", "--model", "paper"});
  EXPECT_EQ(paper.code, 0) << paper.err;
  EXPECT_THAT(paper.out, HasSubstr("comm share c"));
  CliRun bad = Cli({"profile", "validate-speed", "--runs", DataDir() + "/cmdare/k80",
                    "--fit-workers", "1,2,4,7", "--model", "best"});
  EXPECT_EQ(bad.code, kExitBadInput);
  EXPECT_THAT(bad.err, HasSubstr("--model = \"best\""));
}

TEST(ProfileCommand, AFailingServiceIsRetriedThenExitsOne) {
  pb::MockProfilerStub stub;
  EXPECT_CALL(stub, ListProfiles(_, _, _))
      .Times(3)
      .WillRepeatedly(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connection refused")));
  std::ostringstream out, err;
  const Io io{out, err, false};
  auto args = Args::Parse({}, {});
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(Profile("list", *args, stub, io), kExitFailure);
  EXPECT_THAT(err.str(), HasSubstr("UNAVAILABLE: connection refused"));
}

// The fit table: a row that only counts (the runs) shows no residual statistics, a small MAPE
// keeps its digits (not "0.00"), and a fit worse than the data's mean is flagged in --json.
TEST(ProfileCommand, TheFitTableShowsWhatWasMeasuredWithItsDigits) {
  pb::MockProfilerStub stub;
  pb::FitProfileResponse answer;
  answer.mutable_profile()->set_name("icac");
  answer.mutable_profile()->set_version(1);
  pb::FitQuality* runs = answer.add_quality();
  runs->set_parameter("runs");
  runs->set_identified(true);
  runs->set_points(70);
  runs->set_note("70 runs in 14 cluster configurations");
  pb::FitQuality* k80 = answer.add_quality();
  k80->set_parameter("T_comp[K80]");
  k80->set_identified(true);
  k80->set_points(7);
  k80->set_rmse(0.01);
  k80->set_r_squared(0.9986);
  k80->set_mape(0.00431);
  pb::FitQuality* conv = answer.add_quality();
  conv->set_parameter("convergence[accuracy]");
  conv->set_identified(true);
  conv->set_points(1830);
  conv->set_rmse(0.2);
  conv->set_r_squared(-0.31);
  conv->set_mape(48.2);
  conv->set_worse_than_mean(true);
  conv->set_note("worse than the data's mean (R^2 = -0.31 < 0): 274 runs");
  EXPECT_CALL(stub, FitProfile(_, _, _))
      .Times(2)
      .WillRepeatedly(
          ::testing::DoAll(::testing::SetArgPointee<2>(answer), Return(grpc::Status::OK)));
  auto args = Args::Parse({"--name", "icac"}, {.values = {"--name"}});
  ASSERT_TRUE(args.ok()) << args.status();
  std::ostringstream out, err;
  ASSERT_EQ(Profile("fit", *args, stub, {out, err, false}), kExitOk) << err.str();
  const std::string table = out.str();
  EXPECT_THAT(table, ContainsRegex("runs +yes +70 +- +- +- +70 runs"));
  EXPECT_THAT(table, HasSubstr("0.00431"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr(" 0.00 ")));
  EXPECT_THAT(table, ContainsRegex("-0.3100 +48.2 +worse than the data's mean"));
  std::ostringstream json, json_err;
  ASSERT_EQ(Profile("fit", *args, stub, {json, json_err, true}), kExitOk);
  EXPECT_THAT(json.str(), HasSubstr("\"worse_than_mean\":true"));
}

TEST(ValidateSpeedCommand, MeetsTheTargetOnCmdareK80AndP100) {
  const std::string k80 = DataDir() + "/cmdare/k80", p100 = DataDir() + "/cmdare/p100";
  if (!std::filesystem::exists(k80) || !std::filesystem::exists(p100)) {
    GTEST_SKIP() << "CM-DARE data not found under " << DataDir();
  }
  CliRun table =
      Cli({"profile", "validate-speed", "--runs", k80 + "," + p100, "--fit-workers", "1,2,4,7"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("p100/shakebig100"));
  EXPECT_THAT(table.out, HasSubstr("held out"));
  EXPECT_THAT(table.out, EndsWith("over 32 points\n"));
  const std::string last = table.out.substr(table.out.rfind('\n', table.out.size() - 2) + 1);
  EXPECT_THAT(last, StartsWith("overall held-out MAPE: "));

  CliRun json = Cli({"profile", "validate-speed", "--runs", k80 + "," + p100, "--fit-workers",
                     "1,2,4,7", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  google::protobuf::Struct object;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &object).ok()) << json.out;
  EXPECT_EQ(object.fields().at("held_out_points").number_value(), 32);
  EXPECT_EQ(object.fields().at("series").list_value().values_size(), 8);
  EXPECT_LE(object.fields().at("overall_mape").number_value(), 5.0);
}

}  // namespace
}  // namespace spotdnn::gateway
