// A synchronous (all-reduce) job: its spec ("sync", "global_batch", "elastic", and the
// parameter-server fields refused), its kind taken from the profile, the plan's split of the
// global batch as the elastic cluster's environment, and the rendezvous store on the control side
// (a real torch TCPStore process: started, found alive, restarted on its port, stopped).
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/local_provider.h"
#include "services/gateway/job/job_spec.h"
#include "services/gateway/job/rendezvous.h"
#include "services/gateway/job/sync_launch.h"

namespace spotdnn::job {
namespace {

using ::testing::HasSubstr;
namespace v1 = ::spotdnn::v1;

// A synchronous job spec with `extra` fields spliced in (each ending in a comma).
std::string SyncSpec(const std::string& extra, const std::string& commands) {
  return absl::StrCat(R"({"name": "ddp", "workload": "digits-mlp", "catalog": "local-cpu",
    "slo": {"iterations": 300, "deadline": "10m"}, "provider": "local", )",
                      extra, R"("commands": )", commands, "}");
}

TEST(SyncJobSpecTest, ParsesTheSynchronousFields) {
  auto spec = ParseJobSpec(SyncSpec(
      R"("sync": "allreduce", "global_batch": 96,
         "elastic": {"min_instances": 2, "max_restarts": 5, "join_timeout": "90s",
                     "rendezvous": {"host": "10.0.0.9", "port": 29400}},)",
      R"({"worker": "python3 train.py --epochs 3"})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sync, "allreduce");
  EXPECT_EQ(spec->global_batch, 96);
  EXPECT_EQ(spec->elastic.min_instances, 2);
  EXPECT_EQ(spec->elastic.max_restarts, 5);
  EXPECT_EQ(spec->elastic.join_timeout_s, 90);
  EXPECT_EQ(spec->elastic.host, "10.0.0.9");
  EXPECT_EQ(spec->elastic.port, 29400);
  EXPECT_EQ(spec->worker_command, "python3 train.py --epochs 3");
  EXPECT_FALSE(spec->has_ps_command);
  auto sync = ResolveSync(*spec, v1::SYNC_KIND_PS);  // the spec's kind wins over the profile's
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_EQ(*sync, v1::SYNC_KIND_ALLREDUCE);
}

TEST(SyncJobSpecTest, ASynchronousJobHasNoParameterServerRole) {
  auto spec = ParseJobSpec(SyncSpec(
      R"("sync": "allreduce",)",
      R"({"worker": "python3 train.py", "parameter_server": "python3 train.py --role ps"})"));
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(),
              HasSubstr("commands.parameter_server = \"python3 train.py --role ps\""));
  EXPECT_THAT(spec.status().message(), HasSubstr("no parameter-server role"));

  spec = ParseJobSpec(SyncSpec(R"("sync": "allreduce", "parameter_servers": 2,)",
                               R"({"worker": "python3 train.py"})"));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("parameter_servers = 2"));
}

TEST(SyncJobSpecTest, BadValuesAreNamed) {
  const std::string worker = R"({"worker": "python3 train.py"})";
  struct Case {
    std::string extra;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {R"("sync": "ring",)", "sync = \"ring\""},
           {R"("sync": "allreduce", "global_batch": 0,)", "global_batch = 0"},
           {R"("sync": "ps", "global_batch": 64,)", "global_batch = 64"},
           {R"("sync": "allreduce", "elastic": {"min_instances": 0},)",
            "elastic.min_instances = 0"},
           {R"("sync": "allreduce", "elastic": {"max_restarts": -1},)",
            "elastic.max_restarts = -1"},
           {R"("sync": "allreduce", "elastic": {"join_timeout": "0s"},)", "elastic.join_timeout"},
           {R"("sync": "allreduce", "elastic": {"rendezvous": {"port": 70000}},)",
            "elastic.rendezvous.port = 70000"},
           {R"("sync": "allreduce", "elastic": {"nodes": 3},)", "elastic.nodes: unknown field"},
           {R"("sync": "allreduce", "elastic": {"check_script": "no"},)",
            "elastic.check_script = \"no\""},
           {R"("sync": "ps", "elastic": {"min_instances": 1},)",
            "elastic: applies to a "
            "synchronous job"}}) {
    auto spec = ParseJobSpec(SyncSpec(c.extra, worker));
    ASSERT_FALSE(spec.ok()) << c.extra;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << c.extra;
    EXPECT_THAT(spec.status().message(), HasSubstr(c.field)) << c.extra;
  }
}

TEST(SyncJobSpecTest, TheKindComesFromTheProfileWhenTheSpecHasNone) {
  auto spec = ParseJobSpec(SyncSpec(
      "", R"({"worker": "python3 train.py", "parameter_server": "python3 train.py --role ps"})"));
  ASSERT_TRUE(spec.ok()) << spec.status();  // a parameter-server job, as far as the spec says
  auto ps = ResolveSync(*spec, v1::SYNC_KIND_UNSPECIFIED);
  ASSERT_TRUE(ps.ok());
  EXPECT_EQ(*ps, v1::SYNC_KIND_PS);
  // The profile trains synchronously: the parameter-server command is refused, named.
  auto sync = ResolveSync(*spec, v1::SYNC_KIND_ALLREDUCE);
  ASSERT_FALSE(sync.ok());
  EXPECT_THAT(sync.status().message(), HasSubstr("commands.parameter_server"));
  EXPECT_THAT(sync.status().message(), HasSubstr("the workload profile trains synchronously"));

  auto elastic = ParseJobSpec(
      SyncSpec(R"("elastic": {"min_instances": 2},)", R"({"worker": "python3 train.py"})"));
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_TRUE(ResolveSync(*elastic, v1::SYNC_KIND_ALLREDUCE).ok());
  EXPECT_THAT(ResolveSync(*elastic, v1::SYNC_KIND_PS).status().message(),
              HasSubstr("elastic: applies to a synchronous job"));
}

// A catalog of two types (one with 4 GPUs) and a prediction splitting 100 samples over them.
struct Plan {
  v1::InstanceCatalog catalog;
  v1::Prediction prediction;
  v1::WorkloadProfile workload;
};

Plan TwoTypes() {
  Plan p;
  v1::InstanceType* a = p.catalog.add_instance_types();
  a->set_name("small");
  a->set_gpus(1);
  v1::InstanceType* b = p.catalog.add_instance_types();
  b->set_name("big");
  b->set_gpus(4);
  v1::WorkerPrediction* wa = p.prediction.add_workers();
  wa->set_instance_type("small");
  wa->set_local_batch(9.5);  // some of its ranks get 9, some 10
  v1::WorkerPrediction* wb = p.prediction.add_workers();
  wb->set_instance_type("big");
  wb->set_local_batch(20);
  p.prediction.set_accumulation_steps(2);
  p.workload.set_global_batch_size(100);
  return p;
}

TEST(SyncLaunchTest, ThePlansSplitBecomesEachGroupsEnvironment) {
  auto spec = ParseJobSpec(SyncSpec(R"("sync": "allreduce", "elastic": {"min_instances": 9},)",
                                    R"({"worker": "python3 train.py"})"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const Plan plan = TwoTypes();
  auto cluster = ElasticClusterFor({.job_id = "ddp",
                                    .spec = &*spec,
                                    .workload = &plan.workload,
                                    .catalog = &plan.catalog,
                                    .prediction = &plan.prediction,
                                    .launch = {{"small", 2}, {"big", 1}},
                                    .first_index = 4,
                                    .token_prefix = "ddp-w-",
                                    .rendezvous = "127.0.0.1:29500",
                                    .max_instances = 3,
                                    .env = {{"SPOTDNN_CHECKPOINT_DIR", "/c/ddp"}}});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->launch.min_instances, 3);  // the spec's 9, held at the planned count
  EXPECT_EQ(cluster->launch.max_instances, 3);
  EXPECT_EQ(cluster->global_batch, 100);  // the profile's
  EXPECT_EQ(cluster->accumulation_steps, 2);
  ASSERT_EQ(cluster->groups.size(), 2u);
  EXPECT_EQ(cluster->groups[0].instance_type, "small");
  EXPECT_EQ(cluster->groups[0].first_index, 4);
  EXPECT_EQ(cluster->groups[0].procs_per_instance, 1);
  EXPECT_EQ(cluster->groups[0].local_batch, 10);  // 9.5 rounded
  EXPECT_EQ(cluster->groups[1].first_index, 6);
  EXPECT_EQ(cluster->groups[1].procs_per_instance, 4);
  EXPECT_EQ(cluster->groups[1].local_batch, 20);

  auto request = launcher::ElasticClusterRequest(*cluster);
  ASSERT_TRUE(request.ok()) << request.status();
  EXPECT_EQ(request->parameter_servers, 0);
  EXPECT_EQ(request->extra_env.at("SPOTDNN_GLOBAL_BATCH"), "100");
  EXPECT_EQ(request->extra_env.at("SPOTDNN_ACCUMULATION_STEPS"), "2");
  EXPECT_EQ(request->extra_env.at("SPOTDNN_CHECKPOINT_DIR"), "/c/ddp");
  EXPECT_EQ(request->workers[1].env.at("SPOTDNN_LOCAL_BATCH"), "20");
  EXPECT_THAT(request->command, HasSubstr("--rdzv_endpoint='127.0.0.1:29500'"));

  // The spec's global batch wins over the profile's; a type outside the catalog is named.
  spec->global_batch = 128;
  auto own = ElasticClusterFor({.job_id = "ddp",
                                .spec = &*spec,
                                .workload = &plan.workload,
                                .catalog = &plan.catalog,
                                .prediction = &plan.prediction,
                                .launch = {{"huge", 1}},
                                .rendezvous = "127.0.0.1:29500",
                                .max_instances = 1});
  ASSERT_FALSE(own.ok());
  EXPECT_THAT(own.status().message(), HasSubstr("\"huge\""));
}

TEST(SyncLaunchTest, AScriptThatNeverInitialisesTorchDistributedIsRefused) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / absl::StrCat("spotdnn-script-", getpid());
  std::filesystem::create_directories(dir);
  const std::string plain = (dir / "plain.py").string();
  std::ofstream(plain) << "import torch\nmodel = torch.nn.Linear(2, 1)\nprint('training alone')\n";
  const std::string ddp = (dir / "ddp.py").string();
  std::ofstream(ddp) << "import torch.distributed as dist\ndist.init_process_group('gloo')\n";
  const absl::Status refused =
      CheckTorchrunScript(absl::StrCat("/usr/bin/python3 ", plain, " --epochs 3"));
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr(plain));
  EXPECT_THAT(refused.message(), HasSubstr("init_process_group"));
  EXPECT_THAT(refused.message(), HasSubstr("\"check_script\": false"));
  EXPECT_TRUE(CheckTorchrunScript(absl::StrCat("python3 '", ddp, "' --epochs 3")).ok());
  // The example job's script is a torchrun script.
  EXPECT_TRUE(CheckTorchrunScript(absl::StrCat("python3 ", SPOTDNN_SOURCE_DIR,
                                               "/deploy/examples/digits-ddp/train.py"))
                  .ok());
  // A script that is not here (on the instances' image) or no script at all: not checked.
  EXPECT_TRUE(CheckTorchrunScript("python3 /opt/image/train.py").ok());
  EXPECT_TRUE(CheckTorchrunScript("./train.sh --epochs 3").ok());
  std::filesystem::remove_all(dir);
}

TEST(SyncLaunchTest, AJobsStepsAreTheHighestAnyRankReportedNotTheirSum) {
  v1::GetJobProgressResponse progress;
  for (int64_t steps : {40, 42, 41}) progress.add_workers()->set_steps(steps);
  progress.set_total_steps(123);  // what a parameter-server job counts
  EXPECT_EQ(SyncStepsDone(progress), 42);
  EXPECT_EQ(SyncStepsDone(v1::GetJobProgressResponse()), 0);
}

// A rank's stream as the profiler reports it: its worker id, first and highest step, and when it
// began (seconds after t = 1000 s).
void AddStream(v1::GetJobProgressResponse& progress, const std::string& id, int64_t first,
               int64_t steps, double began_s) {
  v1::WorkerProgress* w = progress.add_workers();
  w->set_worker_id(id);
  w->set_first_step(first);
  w->set_steps(steps);
  w->set_first_wall_time_s(1000 + began_s);
  w->set_last_wall_time_s(1000 + began_s + (steps - first) * 0.1);
}

// Three one-rank instances; "c" gets its notice at step 120 (t = 1100 s) and goes. The two
// left resume from the checkpoint at step 100 (redoing 20 steps) and reach step 130; then the
// replacement "d" joins and the three resume from the checkpoint at 125 (5 more redone).
TEST(SyncRestartTest, ClosesWhenEveryRunningInstanceStepsAgainAndCountsTheStepsRedone) {
  v1::GetJobProgressResponse progress;
  for (const char* instance : {"a", "b", "c"}) {
    AddStream(progress, absl::StrCat(instance, "-rank0-start1"), 1, 120, 0);
  }
  RestartSummary restart{
      .instance = "c", .cause = "notice", .notice_ms = 1'100'000, .steps_at_notice = 120};
  const std::map<std::string, int> survivors = {{"a", 1}, {"b", 1}};
  EXPECT_FALSE(CloseSyncRestart(progress, survivors, restart));  // nobody stepped since
  AddStream(progress, "a-rank0-start2", 101, 110, 112);
  EXPECT_FALSE(CloseSyncRestart(progress, survivors, restart));  // "b" not yet
  EXPECT_FALSE(restart.stepping_s.has_value());
  AddStream(progress, "b-rank0-start2", 101, 110, 113.5);
  // The replacement is running too: the restart is over when it steps as well.
  const std::map<std::string, int> whole = {{"a", 1}, {"b", 1}, {"d", 1}};
  EXPECT_FALSE(CloseSyncRestart(progress, whole, restart));
  progress.mutable_workers(3)->set_steps(130);
  progress.mutable_workers(4)->set_steps(130);
  AddStream(progress, "a-rank0-start3", 126, 127, 150);
  AddStream(progress, "b-rank0-start3", 126, 127, 150);
  AddStream(progress, "d-rank0-start1", 126, 127, 151);
  ASSERT_TRUE(CloseSyncRestart(progress, whole, restart));
  EXPECT_DOUBLE_EQ(*restart.stepping_s, 51);        // d's first step after the notice
  EXPECT_DOUBLE_EQ(*restart.steps_redone, 20 + 5);  // 101-120, then 126-130
  EXPECT_EQ(restart.resumed_step, 101);
}

// An instance of two GPUs runs two ranks: it steps again when both of its streams do; a stream
// that began before the notice (the rank that went on) does not count.
TEST(SyncRestartTest, AnInstanceOfSeveralRanksNeedsAStreamPerRank) {
  v1::GetJobProgressResponse progress;
  AddStream(progress, "big-rank0-start1", 1, 50, 0);
  AddStream(progress, "big-rank1-start1", 1, 50, 0);
  RestartSummary restart{
      .instance = "gone", .cause = "lost", .notice_ms = 1'010'000, .steps_at_notice = 50};
  AddStream(progress, "big-rank0-start2", 41, 45, 30);
  EXPECT_FALSE(CloseSyncRestart(progress, {{"big", 2}}, restart));
  AddStream(progress, "big-rank1-start2", 41, 45, 31);
  // Another instance whose id begins the same ("big2") is not "big".
  AddStream(progress, "big2-rank0-start1", 41, 45, 31);
  EXPECT_FALSE(CloseSyncRestart(progress, {{"big", 2}, {"big2", 2}}, restart));
  ASSERT_TRUE(CloseSyncRestart(progress, {{"big", 2}}, restart));
  EXPECT_DOUBLE_EQ(*restart.stepping_s, 21);
  EXPECT_DOUBLE_EQ(*restart.steps_redone, 10);  // 41-50
  EXPECT_FALSE(CloseSyncRestart(progress, {}, restart)) << "no instance running: not over";
}

TEST(SyncRestartTest, TheEventDetailRoundTrips) {
  RestartSummary r{.instance = "w-3",
                   .cause = "notice",
                   .notice_ms = 1795000000123,
                   .steps_at_notice = 170,
                   .stepping_s = 23.5,
                   .steps_redone = 20,
                   .resumed_step = 151};
  auto back = ParseRestartJson(RestartJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->instance, "w-3");
  EXPECT_EQ(back->notice_ms, 1795000000123);
  EXPECT_EQ(*back->stepping_s, 23.5);
  EXPECT_EQ(*back->steps_redone, 20);
  EXPECT_EQ(back->resumed_step, 151);
  RestartSummary open{.instance = "w-3", .cause = "lost", .notice_ms = 5};
  back = ParseRestartJson(RestartJson(open));
  ASSERT_TRUE(back.ok());
  EXPECT_FALSE(back->stepping_s.has_value());
  EXPECT_FALSE(ParseRestartJson("{\"cause\": 1}").ok());
}

// The rendezvous store needs Debian's python3-torch.
bool HaveTorch() {
  return std::filesystem::exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import torch.distributed' >/dev/null 2>&1") == 0;
}

TEST(RendezvousTest, StartsIsFoundAliveRestartsOnItsPortAndStops) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch.distributed";
  const std::string job = absl::StrCat("rdzv-test-", getpid());
  auto started = StartRendezvous(job, "127.0.0.1", 0, {});
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_GT(started->port, 0);
  EXPECT_GT(started->pid, 0);
  EXPECT_EQ(started->Endpoint(), absl::StrCat("127.0.0.1:", started->port));
  EXPECT_TRUE(RendezvousAlive(job, *started));
  EXPECT_FALSE(RendezvousAlive("another-job", *started));  // the pid is checked to be the job's

  // As the job log keeps it.
  auto parsed = ParseRendezvousJson(RendezvousJson(*started));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->port, started->port);
  EXPECT_EQ(parsed->pid, started->pid);
  EXPECT_EQ(parsed->host, "127.0.0.1");

  // Killed (as a crash would): no longer alive; started again on the same port.
  ASSERT_EQ(kill(static_cast<pid_t>(started->pid), SIGKILL), 0);
  for (int i = 0; i < 200 && RendezvousAlive(job, *started); ++i) usleep(20'000);
  EXPECT_FALSE(RendezvousAlive(job, *started));
  auto again = StartRendezvous(job, "127.0.0.1", started->port, {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->port, started->port);
  EXPECT_TRUE(RendezvousAlive(job, *again));

  ASSERT_TRUE(StopRendezvous(job, *again).ok());
  EXPECT_FALSE(RendezvousAlive(job, *again));
  EXPECT_TRUE(StopRendezvous(job, *again).ok());  // gone already: nothing to do
}

// A store its starter did not record (a profiling run's, its gateway killed) is found by its
// command line and stopped; another job's is left alone.
TEST(RendezvousTest, AStaleStoreIsFoundByItsJobAndStopped) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch.distributed";
  const std::string job = absl::StrCat("rdzv-stale-", getpid());
  const std::string other = absl::StrCat("rdzv-other-", getpid());
  auto left = StartRendezvous(job, "127.0.0.1", 0, {});
  ASSERT_TRUE(left.ok()) << left.status();
  auto kept = StartRendezvous(other, "127.0.0.1", 0, {});
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(StopStaleRendezvous(job), 1);
  EXPECT_FALSE(RendezvousAlive(job, *left));
  EXPECT_TRUE(RendezvousAlive(other, *kept));
  EXPECT_EQ(StopStaleRendezvous(job), 0);
  ASSERT_TRUE(StopRendezvous(other, *kept).ok());
}

TEST(RendezvousTest, AStoreThatCannotStartSaysWhy) {
  auto missing =
      StartRendezvous("rdzv-bad", "127.0.0.1", 0,
                      {.python = "/nonexistent/python3", .start_timeout = absl::Seconds(30)});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/python3"));

  EXPECT_THAT(StartRendezvous("rdzv-bad", "", 0, {}).status().message(),
              HasSubstr("elastic.rendezvous.host"));
  EXPECT_THAT(ParseRendezvousJson("{\"host\": 1}").status().message(), HasSubstr("not readable"));
}

// Two local instances, each a real torchrun around a script that joins the process group, meet
// at the store this side started (no instance hosts it) and all-reduce across both.
TEST(RendezvousTest, TwoInstancesMeetAtTheStoreOnTheControlSide) {
  if (!HaveTorch()) GTEST_SKIP() << "/usr/bin/python3 has no torch.distributed";
  if (!std::filesystem::exists("/usr/bin/torchrun")) GTEST_SKIP() << "no /usr/bin/torchrun";
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("spotdnn-rdzv-meet-", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "out");
  std::ofstream(dir / "meet.py")
      << "import os, sys, torch, torch.distributed as dist\n"
         "dist.init_process_group('gloo')\n"
         "t = torch.ones(1)\n"
         "dist.all_reduce(t)\n"
         "rank = os.environ['RANK']\n"
         "with open(os.path.join(sys.argv[1], 'rank-' + rank + '.tmp'), 'w') as f:\n"
         "    f.write('%s %d %s' % (os.environ['WORLD_SIZE'], int(t.item()),\n"
         "                          os.environ['SPOTDNN_LOCAL_BATCH']))\n"
         "os.replace(os.path.join(sys.argv[1], 'rank-' + rank + '.tmp'),\n"
         "           os.path.join(sys.argv[1], 'rank-' + rank))\n"
         "dist.destroy_process_group()\n";
  const std::string job = absl::StrCat("rdzv-meet-", getpid());
  auto store = StartRendezvous(job, "127.0.0.1", 0, {});
  ASSERT_TRUE(store.ok()) << store.status();
  {
    auto provider = launcher::LocalProvider::Create({.state_dir = (dir / "state").string(),
                                                     .allow_revoke_without_metadata = true,
                                                     .stop_grace = absl::Seconds(1)});
    ASSERT_TRUE(provider.ok()) << provider.status();
    auto request = launcher::ElasticClusterRequest(
        {.launch = {.job_id = job,
                    .rendezvous = store->Endpoint(),
                    .min_instances = 2,
                    .max_instances = 2,
                    .max_restarts = 0,
                    .join_timeout_s = 60,
                    .script = absl::StrCat("/usr/bin/python3 ", (dir / "meet.py").string(), " ",
                                           (dir / "out").string())},
         .global_batch = 64,
         .groups = {{.instance_type = "local.cpu", .count = 2, .local_batch = 32}},
         .worker_token_prefix = job + "-w-"});
    ASSERT_TRUE(request.ok()) << request.status();
    auto launched = launcher::LaunchCluster(**provider, *request);
    ASSERT_TRUE(launched.ok()) << launched.status();
    ASSERT_TRUE(launched->complete()) << launched->error;
    bool both = false;
    for (int i = 0; i < 1200 && !both; ++i) {  // at most two minutes
      both = fs::exists(dir / "out" / "rank-0") && fs::exists(dir / "out" / "rank-1");
      if (!both) usleep(100'000);
    }
    std::string output;
    for (const launcher::Instance& instance : launched->instances) {
      std::ifstream log(dir / "state" / absl::StrCat(instance.id, ".log"));
      std::stringstream text;
      text << log.rdbuf();
      absl::StrAppend(&output, instance.id, ":\n", text.str(), "\n");
    }
    ASSERT_TRUE(both) << "the ranks did not meet; their output:\n" << output;
    for (const char* rank : {"rank-0", "rank-1"}) {
      std::ifstream in(dir / "out" / rank);
      std::stringstream text;
      text << in.rdbuf();
      EXPECT_EQ(text.str(), "2 2 32") << rank;  // WORLD_SIZE, the all-reduced sum, local batch
    }
  }                                           // the provider terminates its instances
  EXPECT_TRUE(RendezvousAlive(job, *store));  // no instance took the store with it
  EXPECT_TRUE(StopRendezvous(job, *store).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace spotdnn::job
