// The elastic launcher's command line and environment: the words torchrun (or the fallback
// `python3 -m torch.distributed.run`) gets, run through /bin/sh with stand-ins on PATH; commands
// it cannot run refused naming the field; and the launch of a synchronous cluster on each
// provider: the local provider's instances start the launcher with their environment, and the
// AWS, GCE and Azure start scripts carry the rendezvous's address and port.
#include "provisioner/launcher/elastic_launch.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/azure_provider.h"
#include "provisioner/launcher/gce_provider.h"
#include "provisioner/launcher/http.h"
#include "provisioner/launcher/local_provider.h"
#include "tests/launcher/fake_azure.h"
#include "tests/launcher/fake_ec2.h"
#include "tests/launcher/fake_gce.h"
#include "tests/testing/eventually.h"

namespace spotdnn::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::spotdnn::testing_util::Eventually;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

class ElasticLaunchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("spotdnn-elastic-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "bin");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // An executable `name` in bin/ that writes its arguments, one a line, to out/NAME.args (or
  // out/NAME-$SPOTDNN_INSTANCE_ID.args) and its SPOTDNN_* environment beside them.
  void StandIn(const std::string& name) {
    const fs::path out = dir_ / "out";
    fs::create_directories(out);
    const fs::path path = dir_ / "bin" / name;
    std::ofstream(path) << "#!/bin/sh\nPATH=/usr/bin:/bin\n"
                        << "f='" << out.string() << "/" << name << "'${SPOTDNN_INSTANCE_ID:+-}"
                        << "$SPOTDNN_INSTANCE_ID\n"
                        << "env | grep ^SPOTDNN_ | sort > \"$f.env.tmp\"\n"
                        << "printf '%s\\n' \"$@\" > \"$f.args.tmp\"\n"
                        << "mv \"$f.env.tmp\" \"$f.env\"; mv \"$f.args.tmp\" \"$f.args\"\n";
    fs::permissions(path, fs::perms::owner_all);
  }

  // Runs `command` with /bin/sh -c and PATH = bin/ and the basic folders; its exit status.
  int RunShell(const std::string& command, const std::string& path) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("PATH", path.c_str(), 1);
      execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::vector<std::string> Lines(const fs::path& file) {
    std::ifstream in(file);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

  static ElasticLaunchOptions Options() {
    return {.job_id = "digits-ddp",
            .rendezvous = "10.0.0.9:29400",
            .min_instances = 2,
            .max_instances = 3,
            .procs_per_instance = 4,
            .max_restarts = 5,
            .join_timeout_s = 45,
            .script = "python3 train.py --epochs 3 --name 'a b'",
            .log_dir = "/var/tmp/logs"};
  }

  fs::path dir_;
};

TEST_F(ElasticLaunchTest, TorchrunGetsTheRendezvousTheRangeAndTheScript) {
  StandIn("torchrun");
  auto command = ElasticLaunchCommand(Options());
  ASSERT_TRUE(command.ok()) << command.status();
  ASSERT_EQ(RunShell(*command, (dir_ / "bin").string() + ":/usr/bin:/bin"), 0) << *command;
  EXPECT_THAT(Lines(dir_ / "out" / "torchrun.args"),
              ElementsAre("--nnodes=2:3", "--nproc_per_node=4", "--rdzv_backend=c10d",
                          "--rdzv_endpoint=10.0.0.9:29400", "--rdzv_id=digits-ddp",
                          "--rdzv_conf=is_host=false,join_timeout=45,last_call_timeout=5",
                          "--max_restarts=5", "--redirects", "1", "--tee", "1", "--log_dir",
                          "/var/tmp/logs", "train.py", "--epochs", "3", "--name", "a b"));
}

TEST_F(ElasticLaunchTest, WithoutTorchrunTheNamedInterpreterRunsTheModule) {
  // No torchrun on PATH: the interpreter the command names runs torch.distributed.run.
  StandIn("python3.11");
  ElasticLaunchOptions options = Options();
  options.script = "python3.11 -m digits.train --epochs 3";
  options.procs_per_instance = 0;  // from the environment
  auto command = ElasticLaunchCommand(options);
  ASSERT_TRUE(command.ok()) << command.status();
  ASSERT_EQ(RunShell(absl::StrCat("SPOTDNN_PROCS_PER_INSTANCE=2; export "
                                  "SPOTDNN_PROCS_PER_INSTANCE; ",
                                  *command),
                     (dir_ / "bin").string()),  // /bin is /usr/bin on Debian: its torchrun
            0)
      << *command;
  const std::vector<std::string> args = Lines(dir_ / "out" / "python3.11.args");
  ASSERT_GE(args.size(), 4u);
  EXPECT_EQ(args[0], "-m");
  EXPECT_EQ(args[1], "torch.distributed.run");
  const std::vector<std::string> want = {"--nproc_per_node=2", "--module", "digits.train", "3"};
  EXPECT_THAT(args, IsSupersetOf(want));
}

TEST_F(ElasticLaunchTest, AnExecutableRunsWithNoPython) {
  StandIn("torchrun");
  ElasticLaunchOptions options = Options();
  options.script = "./train.sh fast";
  auto command = ElasticLaunchCommand(options);
  ASSERT_TRUE(command.ok()) << command.status();
  ASSERT_EQ(RunShell(*command, (dir_ / "bin").string() + ":/bin"), 0);
  const std::vector<std::string> args = Lines(dir_ / "out" / "torchrun.args");
  ASSERT_GE(args.size(), 3u);
  EXPECT_THAT(std::vector<std::string>(args.end() - 3, args.end()),
              ElementsAre("--no_python", "./train.sh", "fast"));
}

TEST_F(ElasticLaunchTest, CommandsTorchrunCannotRunAreRefusedNamingTheField) {
  for (const std::string& script :
       {std::string(""), std::string("python3 train.py; rm -rf /"), std::string("a | b"),
        std::string("python3 train.py --lr $LR"), std::string("python3 'train.py"),
        std::string("python3"), std::string("python3 -u train.py"), std::string("python3 -m")}) {
    ElasticLaunchOptions options = Options();
    options.script = script;
    auto command = ElasticLaunchCommand(options);
    ASSERT_FALSE(command.ok()) << script;
    EXPECT_EQ(command.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(command.status().message(), HasSubstr("commands.worker = \"" + script + "\""));
  }
  ElasticLaunchOptions options = Options();
  options.min_instances = 4;  // above max_instances (3)
  EXPECT_THAT(ElasticLaunchCommand(options).status().message(), HasSubstr("max_instances = \"3\""));
  options = Options();
  options.min_instances = 0;
  EXPECT_THAT(ElasticLaunchCommand(options).status().message(), HasSubstr("min_instances"));
  options = Options();
  options.rendezvous = "10.0.0.9";
  EXPECT_THAT(ElasticLaunchCommand(options).status().message(),
              HasSubstr("rendezvous = \"10.0.0.9\""));
}

ElasticCluster Cluster(const std::string& rendezvous, const std::string& type_a,
                       const std::string& type_b) {
  ElasticCluster cluster{.launch = {.job_id = "job-e",
                                    .rendezvous = rendezvous,
                                    .min_instances = 1,
                                    .max_instances = 3,
                                    .max_restarts = 3,
                                    .script = "python3 train.py --epochs 3"},
                         .global_batch = 96,
                         .accumulation_steps = 1,
                         .worker_token_prefix = "job-e-w-",
                         .extra_env = {{"SPOTDNN_CHECKPOINT_DIR", "/ckpt/job-e"}}};
  cluster.groups.push_back({.instance_type = type_a,
                            .count = 2,
                            .first_index = 0,
                            .procs_per_instance = 1,
                            .local_batch = 40});
  cluster.groups.push_back({.instance_type = type_b,
                            .count = 1,
                            .first_index = 2,
                            .procs_per_instance = 2,
                            .local_batch = 8});
  return cluster;
}

TEST_F(ElasticLaunchTest, LocalInstancesStartTheLauncherWithTheirEnvironment) {
  StandIn("torchrun");
  LocalProvider::Options options{.state_dir = (dir_ / "state").string(),
                                 .allow_revoke_without_metadata = true,
                                 .stop_grace = absl::Seconds(1),
                                 .bin_dir = (dir_ / "bin").string()};
  auto provider = LocalProvider::Create(options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  auto request = ElasticClusterRequest(Cluster("127.0.0.1:29500", "local.cpu", "local.big"));
  ASSERT_TRUE(request.ok()) << request.status();
  auto result = LaunchCluster(**provider, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->complete()) << result->error;
  ASSERT_EQ(result->instances.size(), 3u);  // no parameter server
  for (const Instance& instance : result->instances) {
    EXPECT_EQ(instance.role, Role::kWorker);
    const fs::path args = dir_ / "out" / ("torchrun-" + instance.id + ".args");
    ASSERT_TRUE(Eventually([&] { return fs::exists(args); }, absl::Seconds(20))) << args;
    const bool big = instance.instance_type == "local.big";
    const std::vector<std::string> want_args = {
        "--nnodes=1:3", "--rdzv_endpoint=127.0.0.1:29500", "--rdzv_id=job-e",
        std::string("--nproc_per_node=") + (big ? "2" : "1"), "train.py"};
    EXPECT_THAT(Lines(args), IsSupersetOf(want_args));
    const std::vector<std::string> want_env = {
        "SPOTDNN_SYNC=allreduce",
        "SPOTDNN_RENDEZVOUS=127.0.0.1:29500",
        "SPOTDNN_GLOBAL_BATCH=96",
        "SPOTDNN_ACCUMULATION_STEPS=1",
        "SPOTDNN_CHECKPOINT_DIR=/ckpt/job-e",
        std::string("SPOTDNN_LOCAL_BATCH=") + (big ? "8" : "40"),
        std::string("SPOTDNN_PROCS_PER_INSTANCE=") + (big ? "2" : "1"),
        "SPOTDNN_ROLE=worker"};
    EXPECT_THAT(Lines(dir_ / "out" / ("torchrun-" + instance.id + ".env")), IsSupersetOf(want_env));
  }
}

std::string Base64Decode(const std::string& text) {
  std::string out;
  return absl::Base64Unescape(text, &out) ? out : std::string();
}

// What every cloud's start script must say of an elastic cluster's instance.
void ExpectElasticScript(const std::string& script, const std::string& rendezvous,
                         const std::string& local_batch) {
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_RENDEZVOUS='" + rendezvous + "'"));
  EXPECT_THAT(script, HasSubstr("--rdzv_endpoint="));
  EXPECT_THAT(script, HasSubstr(rendezvous));
  EXPECT_THAT(script, HasSubstr("torchrun"));
  EXPECT_THAT(script, HasSubstr("is_host=false"));
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_LOCAL_BATCH='" + local_batch + "'"));
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_GLOBAL_BATCH='96'"));
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_SYNC='allreduce'"));
}

TEST_F(ElasticLaunchTest, AwsUserDataCarriesTheRendezvous) {
  testing::FakeEc2 fake("AKIDTEST", "secret", "");
  AwsProvider::Options options;
  options.region = "us-east-1";
  options.endpoint_url = fake.url();
  options.credentials = {.access_key_id = "AKIDTEST", .secret_access_key = "secret"};
  options.image_id = "ami-0123456789abcdef0";
  options.retry.sleep = [](absl::Duration) {};
  auto provider = AwsProvider::Create(options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  auto request = ElasticClusterRequest(Cluster("10.0.0.9:29400", "g4dn.xlarge", "g4dn.12xlarge"));
  ASSERT_TRUE(request.ok()) << request.status();
  auto result = LaunchCluster(**provider, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->complete()) << result->error;
  int runs = 0;
  for (auto run : fake.requests()) {
    if (run["Action"] != "RunInstances") continue;
    ++runs;
    const std::string user_data = Base64Decode(run["UserData"]);
    ExpectElasticScript(user_data, "10.0.0.9:29400",
                        run["InstanceType"] == "g4dn.12xlarge" ? "8" : "40");
    EXPECT_THAT(user_data, ::testing::Not(HasSubstr("SPOTDNN_ROLE='ps'")));
  }
  EXPECT_EQ(runs, 2);  // one launch per group, no parameter server
}

// A token the fake issued (from its metadata server), for a StaticTokenSource.
std::string TokenFrom(const std::string& url, bool azure) {
  absl::StatusOr<HttpResponse> got =
      azure ? HttpSend({.url = url + "/metadata/identity/oauth2/token?api-version=2018-02-01&"
                                     "resource=https%3A%2F%2Fmanagement.azure.com%2F",
                        .headers = {{"Metadata", "true"}}})
            : HttpSend({.url = url + "/computeMetadata/v1/instance/service-accounts/default/token",
                        .headers = {{"Metadata-Flavor", "Google"}}});
  EXPECT_TRUE(got.ok());
  return json::parse(got->body)["access_token"].get<std::string>();
}

TEST_F(ElasticLaunchTest, GceStartupScriptCarriesTheRendezvous) {
  testing::FakeGce fake({});
  auto provider = GceProvider::Create(
      {.project = "spotdnn-test",
       .zone = "us-central1-a",
       .endpoint_url = fake.compute_url(),
       .token_source = std::make_shared<StaticTokenSource>(TokenFrom(fake.url(), false)),
       .image = "projects/p/global/images/i",
       .retry = {.sleep = [](absl::Duration) {}}});
  ASSERT_TRUE(provider.ok()) << provider.status();
  auto request = ElasticClusterRequest(
      Cluster("10.128.0.2:29400", "n1-standard-8+nvidia-tesla-t4:1", "a2-highgpu-2g"));
  ASSERT_TRUE(request.ok()) << request.status();
  auto result = LaunchCluster(**provider, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->complete()) << result->error;
  ASSERT_EQ(fake.inserts().size(), 3u);
  for (const json& insert : fake.inserts()) {
    std::string script;
    for (const json& item : insert["metadata"]["items"]) {
      if (item["key"] == "startup-script") script = item["value"];
    }
    ExpectElasticScript(
        script, "10.128.0.2:29400",
        absl::StrContains(insert["machineType"].get<std::string>(), "a2-highgpu") ? "8" : "40");
  }
}

TEST_F(ElasticLaunchTest, AzureCustomDataCarriesTheRendezvous) {
  testing::FakeAzure fake({.client_secret = "s"});
  AzureProvider::Options options;
  options.subscription = "0b1f6471-1bf0-4dda-aec3-cb9272f09590";
  options.resource_group = "spotdnn-rg";
  options.location = "eastus";
  options.endpoint_url = fake.url();
  options.token_source = std::make_shared<StaticTokenSource>(TokenFrom(fake.url(), true));
  options.image = "a:b:c:d";
  options.subnet_id = "/subscriptions/x/subnets/y";
  options.operation_poll = absl::Milliseconds(1);
  options.retry.sleep = [](absl::Duration) {};
  auto provider = AzureProvider::Create(options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  auto request =
      ElasticClusterRequest(Cluster("10.1.0.4:29400", "Standard_NC6s_v3", "Standard_NC12s_v3"));
  ASSERT_TRUE(request.ok()) << request.status();
  auto result = LaunchCluster(**provider, *request);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->complete()) << result->error;
  ASSERT_EQ(fake.vms().size(), 3u);
  for (const testing::FakeAzure::Vm& vm : fake.vms()) {
    const std::string script =
        Base64Decode(vm.resource["properties"]["osProfile"]["customData"].get<std::string>());
    ExpectElasticScript(
        script, "10.1.0.4:29400",
        vm.resource["properties"]["hardwareProfile"]["vmSize"] == "Standard_NC12s_v3" ? "8" : "40");
  }
}

TEST_F(ElasticLaunchTest, BadGroupsAreRefusedNamingTheField) {
  ElasticCluster cluster = Cluster("127.0.0.1:29500", "a", "b");
  cluster.groups[1].procs_per_instance = 0;
  EXPECT_THAT(ElasticClusterRequest(cluster).status().message(),
              HasSubstr("groups[b].procs_per_instance"));
  cluster = Cluster("127.0.0.1:29500", "a", "b");
  cluster.accumulation_steps = 0;
  EXPECT_THAT(ElasticClusterRequest(cluster).status().message(), HasSubstr("accumulation_steps"));
}

}  // namespace
}  // namespace spotdnn::launcher
