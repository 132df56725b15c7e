// `spotdnn plan` on a synchronous (all-reduce) workload, end to end through the CLI and the
// provisioner service, against provisioner::SyncPlanner run directly on the same profile.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "provisioner/sync_planner.h"
#include "services/common/convert.h"
#include "services/common/data_registry.h"
#include "tests/gateway/cli_runner.h"

namespace spotdnn::gateway {
namespace {

using ::testing::HasSubstr;
namespace pb = ::spotdnn::v1;

constexpr char kCatalog[] = "aws-spotdnn-prototype";  // K80, T4 and M60 types
constexpr int kIterations = 2000;
constexpr int kGlobalBatch = 512;

google::protobuf::Struct Json(const std::string& text) {
  google::protobuf::Struct s;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(text, &s).ok()) << text;
  return s;
}

pb::AllReduceModel Model(const std::string& gpu_type, double per_sample_s, double cross_fixed_s) {
  pb::AllReduceModel m;
  m.set_gpu_type(gpu_type);
  m.set_compute_fixed_s(0.02);
  m.set_compute_per_sample_s(per_sample_s);
  m.set_compute_contention(0.05);
  m.set_intra_fixed_s(0.01);
  m.set_intra_ring_s(0.03);
  m.set_cross_instance(true);
  m.set_cross_fixed_s(cross_fixed_s);
  m.set_cross_straggler_s(0.02);
  m.set_cross_per_gpu_s(0.01);
  m.set_overlap_gamma(2);
  return m;
}

class SyncPlanCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("spotdnn-sync-plan-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const services::DataRegistry registry = services::DataRegistry::WithBuiltins();
    // The built-in parameter-server profile, profiled synchronously too: T4 and M60 all-reduce
    // models (K80 has none, so its types are left out of a synchronous plan).
    auto ps = registry.ResolveWorkload("resnet110");
    ASSERT_TRUE(ps.ok()) << ps.status();
    profile_ = *ps;
    profile_.set_name("resnet110-both");
    profile_.set_sync(pb::SYNC_KIND_ALLREDUCE);
    *profile_.add_allreduce() = Model("T4", 2e-3, 0.03);
    *profile_.add_allreduce() = Model("M60", 3.5e-3, 0.05);
    workload_ = Write("W.json", profile_);
    pb::WorkloadProfile declared = profile_;
    declared.set_global_batch_size(kGlobalBatch);
    declared_ = Write("declared.json", declared);
    auto catalog = registry.ResolveCatalog(kCatalog);
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    catalog_ = services::ToDomain(*catalog);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const pb::WorkloadProfile& p) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << services::ToJson(p);
    return path;
  }

  // SyncPlanner's plan for the profile: `kIterations` by `deadline_s` (cheapest), or the fastest.
  provisioner::PlanResult Direct(double deadline_s, provisioner::Objective objective) const {
    predictor::WorkloadProfile domain = services::ToDomain(profile_);
    auto planner = provisioner::SyncPlanner::Create(domain, catalog_, kGlobalBatch);
    EXPECT_TRUE(planner.ok()) << planner.status();
    provisioner::PlanProblem problem =
        planner->DefaultProblem(predictor::Target::Iterations(kIterations), deadline_s);
    problem.objective = objective;
    EXPECT_TRUE(planner->Validate(problem).ok());
    return planner->SolveExact(problem);
  }

  // A deadline half again the fastest plan's time: whole seconds, so the CLI's flag says it.
  double Deadline() const {
    const provisioner::PlanResult fastest =
        Direct(provisioner::kInf, provisioner::Objective::kMinTime);
    EXPECT_TRUE(fastest.feasible);
    return std::ceil(1.5 * fastest.best.time_s);
  }

  std::vector<std::string> PlanArgs(const std::string& workload, double deadline_s,
                                    std::vector<std::string> extra) const {
    std::vector<std::string> args = {"plan",
                                     "--workload",
                                     workload,
                                     "--catalog",
                                     kCatalog,
                                     "--iterations",
                                     std::to_string(kIterations),
                                     "--deadline",
                                     std::to_string(static_cast<long long>(deadline_s)) + "s"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  // The plan's counts in the catalog's order, from `plan --json`'s "plan" object.
  std::vector<int> Counts(const google::protobuf::Struct& plan) const {
    std::vector<int> counts(catalog_.types.size(), 0);
    for (size_t k = 0; k < catalog_.types.size(); ++k) {
      auto it = plan.fields().find(catalog_.types[k].name);
      if (it != plan.fields().end()) counts[k] = static_cast<int>(it->second.number_value());
    }
    return counts;
  }

  std::filesystem::path dir_;
  pb::WorkloadProfile profile_;
  std::string workload_, declared_;
  predictor::InstanceCatalog catalog_;
};

TEST_F(SyncPlanCommandTest, PlansWhatTheSyncPlannerPlans) {
  const double deadline = Deadline();
  const provisioner::PlanResult direct = Direct(deadline, provisioner::Objective::kMinCost);
  ASSERT_TRUE(direct.feasible);

  const CliRun run = Cli(
      PlanArgs(workload_, deadline,
               {"--sync", "allreduce", "--global-batch", std::to_string(kGlobalBatch), "--json"}));
  ASSERT_EQ(run.code, 0) << run.err;
  const auto f = Json(run.out).fields();
  ASSERT_TRUE(f.at("feasible").bool_value()) << run.out;
  EXPECT_EQ(Counts(f.at("plan").struct_value()), direct.best.counts) << run.out;
  EXPECT_NEAR(f.at("cost_usd").number_value(), direct.best.cost_usd, 1e-9 * direct.best.cost_usd);
  EXPECT_NEAR(f.at("time_s").number_value(), direct.best.time_s, 1e-9 * direct.best.time_s);
  EXPECT_EQ(f.at("sync").string_value(), "allreduce");
  EXPECT_EQ(f.at("global_batch").number_value(), kGlobalBatch);
  EXPECT_EQ(f.at("accumulation_steps").number_value(), 1);
  // The local batches of the chosen types, summing to the global batch over every rank.
  const auto& local = f.at("local_batches").struct_value().fields();
  double samples = 0;
  for (size_t k = 0; k < catalog_.types.size(); ++k) {
    if (direct.best.counts[k] == 0) continue;
    ASSERT_TRUE(local.contains(catalog_.types[k].name)) << run.out;
    const double b = local.at(catalog_.types[k].name).number_value();
    EXPECT_GE(b, 1);
    samples += b * direct.best.counts[k] * catalog_.types[k].gpus;
  }
  EXPECT_NEAR(samples, kGlobalBatch, 1e-6) << run.out;
  // The K80 types have no all-reduce model: left out, and said so.
  EXPECT_THAT(run.out, HasSubstr("p2.xlarge: "));

  // The profile's global_batch_size and its sync stand in for the flags.
  const CliRun declared = Cli(PlanArgs(declared_, deadline, {"--json"}));
  ASSERT_EQ(declared.code, 0) << declared.err;
  EXPECT_EQ(Counts(Json(declared.out).fields().at("plan").struct_value()), direct.best.counts);

  // The table a person reads: each type's local batch.
  const CliRun table = Cli(PlanArgs(declared_, deadline, {}));
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("synchronous all-reduce"));
  EXPECT_THAT(table.out, HasSubstr("local batch"));
  EXPECT_THAT(table.out, HasSubstr("all-reduce (s)"));
  EXPECT_THAT(table.out, HasSubstr("cheapest homogeneous"));
}

TEST_F(SyncPlanCommandTest, InfeasibleSaysWhy) {
  const double fastest = Direct(provisioner::kInf, provisioner::Objective::kMinTime).best.time_s;
  const CliRun run = Cli(PlanArgs(declared_, std::floor(fastest / 2), {"--json"}));
  EXPECT_EQ(run.code, 3) << run.err;
  const auto f = Json(run.out).fields();
  EXPECT_FALSE(f.at("feasible").bool_value());
  EXPECT_THAT(f.at("reason").string_value(), HasSubstr("the fastest reaches"));
  EXPECT_NEAR(f.at("fastest_time_s").number_value(), fastest, 1e-9 * fastest);
}

TEST_F(SyncPlanCommandTest, BadInputIsRefusedNamingTheFlag) {
  const double deadline = 3600;
  CliRun zero = Cli(PlanArgs(workload_, deadline, {"--global-batch", "0"}));
  EXPECT_EQ(zero.code, 2);
  EXPECT_THAT(zero.err, HasSubstr("--global-batch"));
  // Neither the flag nor the profile gives the global batch.
  CliRun missing = Cli(PlanArgs(workload_, deadline, {}));
  EXPECT_EQ(missing.code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--global-batch"));
  EXPECT_THAT(missing.err, HasSubstr("global_batch_size"));
  CliRun ring = Cli(PlanArgs(declared_, deadline, {"--sync", "ring"}));
  EXPECT_EQ(ring.code, 2);
  EXPECT_THAT(ring.err, HasSubstr("--sync = \"ring\""));
  CliRun heuristic = Cli(PlanArgs(declared_, deadline, {"--strategy", "spotdnn"}));
  EXPECT_EQ(heuristic.code, 2);
  EXPECT_THAT(heuristic.err, HasSubstr("exact or exhaustive"));
  CliRun servers = Cli(PlanArgs(declared_, deadline, {"--parameter-servers", "2"}));
  EXPECT_EQ(servers.code, 2);
  EXPECT_THAT(servers.err, HasSubstr("--parameter-servers"));
  // A parameter-server plan takes no global batch.
  CliRun ps = Cli(PlanArgs(declared_, deadline, {"--sync", "ps", "--global-batch", "64"}));
  EXPECT_EQ(ps.code, 2);
  EXPECT_THAT(ps.err, HasSubstr("--global-batch = 64"));
}

TEST_F(SyncPlanCommandTest, SyncFlagComparesTheOtherKind) {
  const double deadline = Deadline();
  const provisioner::PlanResult direct = Direct(deadline, provisioner::Objective::kMinCost);
  ASSERT_TRUE(direct.feasible);
  // A parameter-server plan, with the all-reduce one beside it.
  const CliRun ps = Cli(PlanArgs(declared_, deadline, {"--sync", "ps", "--json"}));
  ASSERT_EQ(ps.code, 0) << ps.err;
  const auto f = Json(ps.out).fields();
  EXPECT_FALSE(f.contains("local_batches")) << ps.out;
  const auto& other = f.at("other_sync").struct_value().fields();
  EXPECT_EQ(other.at("sync").string_value(), "allreduce");
  ASSERT_TRUE(other.at("feasible").bool_value()) << ps.out;
  EXPECT_EQ(Counts(other.at("plan").struct_value()), direct.best.counts);
  EXPECT_TRUE(other.contains("local_batches"));
  const CliRun ps_table = Cli(PlanArgs(declared_, deadline, {"--sync", "ps"}));
  ASSERT_EQ(ps_table.code, 0) << ps_table.err;
  EXPECT_THAT(ps_table.out, HasSubstr("all-reduce plan"));
  // And the other way round.
  const CliRun sync = Cli(PlanArgs(declared_, deadline, {"--sync", "allreduce"}));
  ASSERT_EQ(sync.code, 0) << sync.err;
  EXPECT_THAT(sync.out, HasSubstr("parameter-server plan"));
}

// Lifetimes that revoke every third instance within a few minutes (the rest live past GCE's 24 h):
// a job of minutes sees revocations. One section, so every type gets them (pooled).
std::string WriteLifetimes(const std::filesystem::path& dir) {
  const std::string path = (dir / "lifetimes.csv").string();
  std::ofstream f(path);
  f << "K80,,\nVM name,Start,Terminate\n";
  for (int i = 0; i < 30; ++i) {
    f << "vm-" << i << ",1/1/20 00:00,"
      << (i % 3 == 0 ? "1/1/20 00:0" + std::to_string(2 + i % 4) : std::string("1/2/20 00:05"))
      << "\n";
  }
  return path;
}

TEST_F(SyncPlanCommandTest, LifetimesAndConfidenceSimulateTheRestarts) {
  const double deadline = Deadline();
  const std::string lifetimes = WriteLifetimes(dir_);
  // The plan's probability under the lifetimes, as a synchronous job.
  const CliRun simulated =
      Cli(PlanArgs(declared_, deadline,
                   {"--lifetimes", lifetimes, "--runs", "300", "--restart", "1m", "--json"}));
  ASSERT_EQ(simulated.code, 0) << simulated.err;
  const auto f = Json(simulated.out).fields();
  EXPECT_EQ(f.at("sync").string_value(), "allreduce");
  const auto& risk = f.at("risk").struct_value().fields();
  EXPECT_TRUE(risk.at("synchronous").bool_value()) << simulated.out;
  EXPECT_EQ(risk.at("restart_s").number_value(), 60);
  EXPECT_GT(risk.at("restarts_per_run").number_value(), 0) << simulated.out;
  EXPECT_LT(f.at("p_meet_deadline").number_value(), 1) << simulated.out;

  // The risk-aware plan: the plain exact plan simulated beside it, both synchronous.
  const CliRun risky = Cli(PlanArgs(declared_, deadline,
                                    {"--confidence", "0.5", "--lifetimes", lifetimes, "--runs",
                                     "300", "--restart", "1m", "--json"}));
  ASSERT_TRUE(risky.code == 0 || risky.code == 3) << risky.err;
  const auto r = Json(risky.out).fields();
  const auto& plain = r.at("plain_plan").struct_value().fields();
  EXPECT_EQ(plain.at("sync").string_value(), "allreduce") << risky.out;
  EXPECT_TRUE(plain.at("risk").struct_value().fields().at("synchronous").bool_value());
  EXPECT_EQ(Counts(plain.at("plan").struct_value()),
            Direct(deadline, provisioner::Objective::kMinCost).best.counts);
  if (risky.code == 0) {
    EXPECT_GE(r.at("p_meet_deadline").number_value(), 0.5) << risky.out;
    EXPECT_EQ(r.at("sync").string_value(), "allreduce");
  }
  const CliRun table = Cli(PlanArgs(
      declared_, deadline, {"--confidence", "0.5", "--lifetimes", lifetimes, "--runs", "300"}));
  EXPECT_THAT(table.out, HasSubstr("plain exact")) << table.err;

  // `simulate` of a cluster: its steps, with the synchronous planner's speeds and re-plans.
  const CliRun cluster =
      Cli({"simulate", "--workload", declared_, "--catalog", kCatalog, "--iterations",
           std::to_string(kIterations), "--cluster", "g4dn.4xlarge=2,g3.8xlarge=1", "--deadline",
           std::to_string(static_cast<long long>(deadline)) + "s", "--lifetimes", lifetimes,
           "--runs", "300", "--restart", "1m"});
  ASSERT_EQ(cluster.code, 0) << cluster.err;
  EXPECT_THAT(cluster.out, HasSubstr("restarts per run"));
  EXPECT_THAT(cluster.out, HasSubstr("restarts every rank (1m 00s)"));
}

TEST_F(SyncPlanCommandTest, AvailabilityReplayChargesEachStartTheRestart) {
  const std::string up = (dir_ / "up.csv").string();
  std::ofstream(up) << "time,count\n0,20\n86400,20\n";
  const std::string traces = "g4dn.4xlarge=" + up + ",g3.8xlarge=" + up + ",g3.16xlarge=" + up;
  const CliRun run = Cli(PlanArgs(
      declared_, Deadline(),
      {"--availability", traces, "--restart", "2m", "--checkpoint-every", "10m", "--json"}));
  ASSERT_EQ(run.code, 0) << run.err;
  const auto f = Json(run.out).fields();
  EXPECT_EQ(f.at("sync").string_value(), "allreduce");
  const auto& a = f.at("availability").struct_value().fields();
  ASSERT_TRUE(a.contains("with_fallback")) << run.out;
  bool noted = false;
  for (const auto& n : a.at("notes").list_value().values()) {
    // 2 minutes of restart and half of 10 minutes redone: 7 minutes more per changeover.
    noted = noted || n.string_value().find("restarts every rank, 7m") != std::string::npos;
  }
  EXPECT_TRUE(noted) << run.out;
}

TEST_F(SyncPlanCommandTest, FrontierOfASyncWorkloadIsTheSyncPlannersOptimumAtEachPoint) {
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{"--sync", "allreduce", "--global-batch",
                                 std::to_string(kGlobalBatch)},
        std::vector<std::string>{}}) {
    std::vector<std::string> extra = {"--mode", "frontier", "--json"};
    extra.insert(extra.end(), how.begin(), how.end());
    const CliRun run = Cli(PlanArgs(how.empty() ? declared_ : workload_, Deadline(), extra));
    ASSERT_EQ(run.code, 0) << run.err;
    const auto f = Json(run.out).fields();
    const auto& points = f.at("frontier").list_value().values();
    ASSERT_GE(points.size(), 2u) << run.out;
    for (const auto& v : points) {
      const auto& p = v.struct_value().fields();
      EXPECT_EQ(p.at("sync").string_value(), "allreduce") << run.out;
      EXPECT_TRUE(p.contains("local_batches"));
      const provisioner::PlanResult at =
          Direct(p.at("time_s").number_value(), provisioner::Objective::kMinCost);
      ASSERT_TRUE(at.feasible);
      EXPECT_EQ(Counts(p.at("plan").struct_value()), at.best.counts) << run.out;
    }
  }
}

}  // namespace
}  // namespace spotdnn::gateway
