// The local provider with real processes: the environment they get, revocation with a notice on
// the metadata endpoint, terminate, and nothing left behind (destructor, crash of the launcher).
#include "provisioner/launcher/local_provider.h"

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "detector/metadata_emulator.h"
#include "detector/metadata_parsers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"

namespace spotdnn::launcher {
namespace {

using ::spotdnn::testing_util::Eventually;

// How long a test waits for what other processes do before it fails.
constexpr absl::Duration kPatience = absl::Seconds(20);

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// Records the notices the provider publishes.
class RecordingMetadata : public LocalMetadataService {
 public:
  std::string EndpointFor(const std::string& id) const override {
    return "http://127.0.0.1:9/i/" + id;
  }
  std::string ControlUrl() const override { return ""; }
  absl::Status PublishSpotNotice(const std::string& id, absl::Time at) override {
    std::lock_guard<std::mutex> lock(mu);
    notices[id] = at;
    return absl::OkStatus();
  }
  std::mutex mu;
  std::map<std::string, absl::Time> notices;
};

// No process left in the group at all: kill(-pgid, 0) fails with ESRCH only once every member,
// zombies included, has been reaped (a killed shell's children are reaped by init soon after).
bool GroupGone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

std::map<std::string, std::string> ReadEnv(const std::string& path) {
  std::ifstream in(path);
  std::map<std::string, std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

class LocalProviderTest : public ::testing::Test {
 protected:
  // The state of job-local's instance `id` as `provider` describes it (pending: not listed).
  static InstanceState StateOf(LocalProvider& provider, const std::string& id) {
    auto described = provider.Describe("job-local");
    for (const Instance& i : described.ok() ? *described : std::vector<Instance>{}) {
      if (i.id == id) return i.state;
    }
    return InstanceState::kPending;
  }

  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("spotdnn-local-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "out");
    metadata_ = std::make_shared<RecordingMetadata>();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<LocalProvider> Provider(bool owner = true) {
    LocalProvider::Options options{.state_dir = (dir_ / "state").string(),
                                   .metadata = metadata_,
                                   .owner = owner,
                                   .stop_grace = absl::Seconds(1)};
    auto provider = LocalProvider::Create(options);
    EXPECT_TRUE(provider.ok()) << provider.status();
    return std::move(*provider);
  }

  // Writes its SPOTDNN_* environment to out/ID.env, then sleeps (in a child of the shell, so the
  // group has two processes).
  std::string EnvThenSleep() const {
    return absl::StrCat("env | grep ^SPOTDNN_ > '", (dir_ / "out").string(),
                        "'/$SPOTDNN_INSTANCE_ID.env.tmp && mv '", (dir_ / "out").string(),
                        "'/$SPOTDNN_INSTANCE_ID.env.tmp '", (dir_ / "out").string(),
                        "'/$SPOTDNN_INSTANCE_ID.env; sleep 60 & wait");
  }

  LaunchRequest Request(Role role, int count, int first_index = 0) const {
    return LaunchRequest{.job_id = "job-local",
                         .instance_type = role == Role::kWorker ? "g4dn.4xlarge" : "m5.xlarge",
                         .count = count,
                         .role = role,
                         .first_index = first_index,
                         .command = EnvThenSleep(),
                         .ps_addresses = {"127.0.0.1:40001"},
                         .batch_size = 32};
  }

  fs::path dir_;
  std::shared_ptr<RecordingMetadata> metadata_;
};

TEST_F(LocalProviderTest, ClusterGetsItsEnvironmentAndRevocationAndTerminate) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> ps = provider->Launch(Request(Role::kParameterServer, 1));
  absl::StatusOr<LaunchResult> workers = provider->Launch(Request(Role::kWorker, 2));
  ASSERT_TRUE(ps.ok() && workers.ok());
  ASSERT_THAT(ps->instances, SizeIs(1));
  ASSERT_THAT(workers->instances, SizeIs(2));

  std::vector<Instance> all = ps->instances;
  all.insert(all.end(), workers->instances.begin(), workers->instances.end());
  std::map<std::string, pid_t> groups;
  for (const Instance& instance : all) {
    std::string env_file = (dir_ / "out" / (instance.id + ".env")).string();
    ASSERT_TRUE(Eventually([&] { return fs::exists(env_file); }, kPatience)) << env_file;
    std::map<std::string, std::string> env = ReadEnv(env_file);
    EXPECT_EQ(env["SPOTDNN_JOB_ID"], "job-local");
    EXPECT_EQ(env["SPOTDNN_INSTANCE_ID"], instance.id);
    EXPECT_EQ(env["SPOTDNN_ROLE"], instance.role == Role::kWorker ? "worker" : "ps");
    EXPECT_EQ(env["SPOTDNN_INDEX"], absl::StrCat(instance.index));
    EXPECT_EQ(env["SPOTDNN_PS_ADDRESSES"], "127.0.0.1:40001");
    EXPECT_EQ(env["SPOTDNN_BATCH_SIZE"], "32");
    EXPECT_EQ(env["SPOTDNN_INSTANCE_TYPE"], instance.instance_type);
    EXPECT_EQ(env["SPOTDNN_METADATA_ENDPOINT"], "http://127.0.0.1:9/i/" + instance.id);
    absl::StatusOr<pid_t> pgid = provider->ProcessGroup(instance.id);
    ASSERT_TRUE(pgid.ok()) << pgid.status();
    groups[instance.id] = *pgid;
  }
  EXPECT_EQ(workers->instances[0].index, 0);
  EXPECT_EQ(workers->instances[1].index, 1);

  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-local");
  ASSERT_TRUE(described.ok());
  ASSERT_THAT(*described, SizeIs(3));
  for (const Instance& instance : *described) {
    EXPECT_EQ(instance.state, InstanceState::kRunning);
  }

  // Revoke worker 1 with a notice: the notice is published at once, the process stops at the
  // notice time.
  const std::string victim = workers->instances[1].id;
  absl::Time before = absl::Now();
  ASSERT_TRUE(provider->Revoke(victim, absl::Seconds(1)).ok());
  {
    std::lock_guard<std::mutex> lock(metadata_->mu);
    ASSERT_EQ(metadata_->notices.count(victim), 1u);
    EXPECT_GE(metadata_->notices[victim], before + absl::Seconds(1));
  }
  provider->WaitForRevocations();
  EXPECT_GE(absl::Now(), before + absl::Seconds(1));  // not stopped before its notice time
  EXPECT_TRUE(Eventually([&] { return GroupGone(groups[victim]); }, kPatience));
  described = provider->Describe("job-local");
  ASSERT_TRUE(described.ok());
  for (const Instance& instance : *described) {
    EXPECT_EQ(instance.state,
              instance.id == victim ? InstanceState::kTerminated : InstanceState::kRunning)
        << instance.id;
  }
  EXPECT_EQ(provider->Revoke(victim, absl::Seconds(1)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(provider->Revoke("i-local-unknown", absl::Seconds(1)).code(),
            absl::StatusCode::kNotFound);

  // Terminate all: every group is gone and the files with them.
  std::vector<std::string> ids;
  for (const Instance& instance : all) ids.push_back(instance.id);
  ASSERT_TRUE(provider->Terminate(ids).ok());
  for (const auto& [id, pgid] : groups) {
    EXPECT_TRUE(Eventually([&] { return GroupGone(pgid); }, kPatience)) << id;
  }
  described = provider->Describe("job-local");
  ASSERT_TRUE(described.ok());
  EXPECT_TRUE(described->empty());
  EXPECT_EQ(provider->Terminate({"i-local-unknown"}).code(), absl::StatusCode::kNotFound);
}

TEST_F(LocalProviderTest, ParameterServersGetPortsOfTheirOwnAndTheBinDirIsOnThePath) {
  LocalProvider::Options options{.state_dir = (dir_ / "state").string(),
                                 .metadata = metadata_,
                                 .stop_grace = absl::Seconds(1),
                                 .bin_dir = (dir_ / "bin").string()};
  auto provider = LocalProvider::Create(options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  LaunchRequest request = Request(Role::kParameterServer, 2);
  request.ps_addresses.clear();  // the provider picks the ports
  request.command = absl::StrCat("echo \"SPOTDNN_PATH=$PATH\" > '", (dir_ / "out").string(),
                                 "'/$SPOTDNN_INSTANCE_ID.path; ", EnvThenSleep());
  absl::StatusOr<LaunchResult> ps = (*provider)->Launch(request);
  ASSERT_TRUE(ps.ok()) << ps.status();
  ASSERT_THAT(ps->instances, SizeIs(2));
  const std::string a = ps->instances[0].service_address;
  const std::string b = ps->instances[1].service_address;
  EXPECT_THAT(a, ::testing::StartsWith("127.0.0.1:"));
  EXPECT_THAT(b, ::testing::StartsWith("127.0.0.1:"));
  EXPECT_NE(a, b);
  for (const Instance& instance : ps->instances) {
    const std::string env_file = (dir_ / "out" / (instance.id + ".env")).string();
    ASSERT_TRUE(Eventually([&] { return fs::exists(env_file); }, kPatience)) << env_file;
    std::map<std::string, std::string> env = ReadEnv(env_file);
    EXPECT_EQ(env["SPOTDNN_PS_ADDRESSES"], absl::StrCat(a, ",", b));
    EXPECT_EQ(absl::StrCat("127.0.0.1:", env["SPOTDNN_PS_PORT"]), instance.service_address);
    std::map<std::string, std::string> path =
        ReadEnv((dir_ / "out" / (instance.id + ".path")).string());
    EXPECT_THAT(path["SPOTDNN_PATH"], ::testing::StartsWith((dir_ / "bin").string() + ":"));
  }
  // A relaunch with the same token answers the same servers, at the same addresses.
  absl::StatusOr<LaunchResult> again = (*provider)->Launch(request);
  ASSERT_TRUE(again.ok());
  ASSERT_THAT(again->instances, SizeIs(2));
  EXPECT_EQ(again->instances[0].service_address, a);
  EXPECT_EQ((*provider)->OutputLocation(), (dir_ / "state" / "logs").string());
}

TEST_F(LocalProviderTest, SameClientTokenDoesNotLaunchTwice) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> first = provider->Launch(Request(Role::kWorker, 2));
  absl::StatusOr<LaunchResult> again = provider->Launch(Request(Role::kWorker, 2));
  ASSERT_TRUE(first.ok() && again.ok());
  ASSERT_THAT(again->instances, SizeIs(2));
  EXPECT_EQ(first->instances[0].id, again->instances[0].id);
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-local");
  ASSERT_TRUE(described.ok());
  EXPECT_THAT(*described, SizeIs(2));
}

TEST_F(LocalProviderTest, AnInstanceThatWentByItselfSaysHowItsCommandEndedUnlessKilled) {
  auto provider = Provider();
  // One whose command ends (the agent's last line, as spotdnn-agent writes it), one killed.
  LaunchRequest ends = Request(Role::kWorker, 1);
  ends.command =
      "echo 'Traceback (most recent call last):'; echo 'ValueError: no data'; "
      "echo '[2026-11-28 10:00:00.000] [spotdnn-agent] [info] the command ended: exit status 1'";
  LaunchRequest killed = Request(Role::kWorker, 1, 1);
  killed.client_token = "killed";
  absl::StatusOr<LaunchResult> a = provider->Launch(ends);
  absl::StatusOr<LaunchResult> b = provider->Launch(killed);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<pid_t> group = provider->ProcessGroup(b->instances[0].id);
  ASSERT_TRUE(group.ok()) << group.status();
  ASSERT_EQ(kill(-*group, SIGKILL), 0);
  std::map<std::string, Instance> by_id;
  for (int k = 0; k < 250; ++k) {  // up to 5 s for both to go
    auto described = provider->Describe("job-local");
    ASSERT_TRUE(described.ok());
    by_id.clear();
    for (const Instance& i : *described) by_id[i.id] = i;
    if (by_id[a->instances[0].id].state == InstanceState::kTerminated &&
        by_id[b->instances[0].id].state == InstanceState::kTerminated) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  const Instance& ended = by_id[a->instances[0].id];
  ASSERT_EQ(ended.state, InstanceState::kTerminated);
  ASSERT_TRUE(ended.command_end.has_value());
  EXPECT_EQ(ended.command_end->status, 1);
  EXPECT_EQ(ended.command_end->how, "exit status 1");
  EXPECT_THAT(ended.command_end->last_lines,
              ElementsAre("Traceback (most recent call last):", "ValueError: no data"));
  const Instance& lost = by_id[b->instances[0].id];
  ASSERT_EQ(lost.state, InstanceState::kTerminated);
  EXPECT_FALSE(lost.command_end.has_value());
}

TEST(CommandEndFromLogTest, ReadsTheAgentsLastLineAndTheCommandsLinesBeforeIt) {
  const std::string log =
      "starting\n"
      "[default0]:SPOTDNN_SAMPLE step=3 loss=0.5\n"
      "[default0]:RuntimeError: boom\n"
      "[2026-11-28 10:00:00.000] [spotdnn-agent] [info] signal 15 received; passing it on\n"
      "[default0]:SPOTDNN_SAMPLE step=4 loss=0.4\n"
      "[2026-11-28 10:00:01.000] [spotdnn-agent] [info] the command ended: killed by signal 15 "
      "(Terminated)\n"
      "[2026-11-28 10:00:01.100] [spotdnn-agent] [info] samples: 2 lines read\n";
  auto end = CommandEndFromLog(log, 5);
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->status, 128 + 15);
  EXPECT_EQ(end->how, "killed by signal 15 (Terminated)");
  EXPECT_THAT(end->last_lines, ElementsAre("starting", "[default0]:RuntimeError: boom"));
  EXPECT_THAT(CommandEndFromLog(log, 1)->last_lines, ElementsAre("[default0]:RuntimeError: boom"));
  auto ok = CommandEndFromLog("the command ended: exit status 0\n", 5);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 0);
  EXPECT_TRUE(ok->last_lines.empty());
  // torchrun's report of a failed rank: its first line, after the rank's own last lines.
  const std::string torchrun =
      "Traceback (most recent call last):\n"
      "FileNotFoundError: no training data in /data\n"
      "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0\n"
      "Traceback (most recent call last):\n"
      "  File \"/usr/bin/torchrun\", line 33, in <module>\n"
      "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
      "/tmp/train.py FAILED\n"
      "[2026-11-28 10:00:01.000] [spotdnn-agent] [info] the command ended: exit status 1\n";
  EXPECT_THAT(CommandEndFromLog(torchrun, 3)->last_lines,
              ElementsAre("Traceback (most recent call last):",
                          "FileNotFoundError: no training data in /data",
                          "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: "
                          "1) local_rank: 0"));
  EXPECT_FALSE(CommandEndFromLog("training\nstep 3\n", 5).has_value());
  EXPECT_FALSE(CommandEndFromLog("the command ended: who knows\n", 5).has_value());
  EXPECT_FALSE(CommandEndFromLog("", 5).has_value());
}

TEST_F(LocalProviderTest, OwnerDestructionLeavesNothingRunning) {
  std::vector<pid_t> groups;
  {
    auto provider = Provider();
    absl::StatusOr<LaunchResult> launched = provider->Launch(Request(Role::kWorker, 2));
    ASSERT_TRUE(launched.ok());
    for (const Instance& instance : launched->instances) {
      absl::StatusOr<pid_t> pgid = provider->ProcessGroup(instance.id);
      ASSERT_TRUE(pgid.ok());
      groups.push_back(*pgid);
    }
  }
  for (pid_t pgid : groups)
    EXPECT_TRUE(Eventually([&] { return GroupGone(pgid); }, kPatience)) << pgid;
}

TEST_F(LocalProviderTest, ReaperKillsInstancesWhenTheLauncherCrashes) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    // The "launcher": starts instances, reports their groups, then dies without cleaning up.
    close(fds[0]);
    auto provider = LocalProvider::Create(
        {.state_dir = (dir_ / "state").string(), .metadata = metadata_, .owner = true});
    if (!provider.ok()) _exit(2);
    auto launched = (*provider)->Launch(Request(Role::kWorker, 2));
    if (!launched.ok()) _exit(3);
    for (const Instance& instance : launched->instances) {
      auto pgid = (*provider)->ProcessGroup(instance.id);
      int32_t value = pgid.ok() ? *pgid : 0;
      (void)!write(fds[1], &value, sizeof value);
    }
    _exit(1);  // a crash: no destructor runs
  }
  close(fds[1]);
  std::vector<pid_t> groups;
  int32_t value = 0;
  while (read(fds[0], &value, sizeof value) == sizeof value) groups.push_back(value);
  close(fds[0]);
  int status = 0;
  waitpid(launcher, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 1);
  ASSERT_THAT(groups, SizeIs(2));
  for (pid_t pgid : groups) {
    ASSERT_GT(pgid, 1);
    EXPECT_TRUE(Eventually([&] { return GroupGone(pgid); }, kPatience))
        << "group " << pgid << " survived";
  }
}

TEST_F(LocalProviderTest, AnotherProcessCanListAndTerminate) {
  auto owner = Provider();
  absl::StatusOr<LaunchResult> launched = owner->Launch(Request(Role::kWorker, 1));
  ASSERT_TRUE(launched.ok());
  auto watcher = Provider(/*owner=*/false);
  EXPECT_EQ(watcher->Launch(Request(Role::kWorker, 1)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::vector<Instance>> described = watcher->Describe("");
  ASSERT_TRUE(described.ok());
  ASSERT_THAT(*described, SizeIs(1));
  EXPECT_EQ(described->at(0).state, InstanceState::kRunning);
  absl::StatusOr<pid_t> pgid = watcher->ProcessGroup(described->at(0).id);
  ASSERT_TRUE(pgid.ok());
  ASSERT_TRUE(watcher->Terminate({described->at(0).id}).ok());
  // The owner reaps its child; then the group is gone.
  EXPECT_TRUE(Eventually(
      [&] {
        (void)owner->Describe("");
        return GroupGone(*pgid);
      },
      kPatience));
}

TEST_F(LocalProviderTest, BadRequestsNameTheField) {
  auto provider = Provider();
  LaunchRequest request = Request(Role::kWorker, 0);
  EXPECT_THAT(provider->Launch(request).status().message(), HasSubstr("count = 0"));
  request = Request(Role::kWorker, 1);
  request.job_id = "bad job";
  EXPECT_THAT(provider->Launch(request).status().message(), HasSubstr("job_id = \"bad job\""));
  EXPECT_EQ(LocalProvider::Create({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(provider->SpotPrices({"m5.xlarge"}, "").status().code(),
            absl::StatusCode::kUnimplemented);
}

// The local provider on the real metadata emulator: the instance's endpoint answers the AWS
// IMDSv2 protocol, shows nothing before a revocation, the spot instance-action after it (with the
// action time the provider stops it at), and the provider records when it stopped the instance.
TEST_F(LocalProviderTest, RevocationShowsOnTheInstancesEmulatedMetadataEndpoint) {
  auto emulator = detector::MetadataEmulator::Start({.threads = 8});
  ASSERT_TRUE(emulator.ok()) << emulator.status();
  const std::string base = absl::StrCat("http://127.0.0.1:", (*emulator)->port());
  LocalProvider::Options options{.state_dir = (dir_ / "state").string(),
                                 .metadata = std::make_shared<EmulatorMetadataClient>(base),
                                 .stop_grace = absl::Seconds(1)};
  auto provider = LocalProvider::Create(options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  absl::StatusOr<LaunchResult> launched = (*provider)->Launch(Request(Role::kWorker, 1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  const Instance instance = launched->instances.at(0);
  ASSERT_EQ(instance.metadata_endpoint, absl::StrCat(base, "/i/", instance.id));

  // What an agent on the instance does: a session token, then the spot instance-action.
  httplib::Client client("127.0.0.1", (*emulator)->port());
  auto instance_action = [&]() -> httplib::Result {
    const std::string root = absl::StrCat("/i/", instance.id);
    auto token = client.Put(root + "/latest/api/token",
                            {{"X-aws-ec2-metadata-token-ttl-seconds", "21600"}}, "", "text/plain");
    EXPECT_TRUE(token && token->status == 200);
    return client.Get(root + "/latest/meta-data/spot/instance-action",
                      {{"X-aws-ec2-metadata-token", token ? token->body : ""}});
  };
  auto before = instance_action();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 404);

  const absl::Time revoked_at = absl::Now();
  ASSERT_TRUE((*provider)->Revoke(instance.id, absl::Seconds(2)).ok());
  auto after = instance_action();
  ASSERT_TRUE(after);
  ASSERT_EQ(after->status, 200) << after->body;
  absl::StatusOr<detector::Notice> notice = detector::ParseAwsInstanceAction(after->body);
  ASSERT_TRUE(notice.ok()) << notice.status() << " in " << after->body;
  EXPECT_EQ(notice->action, "terminate");
  // The action time is the stop time, to the second (the AWS format has no fractions).
  EXPECT_NEAR(static_cast<double>(notice->effective_unix_ms),
              absl::ToUnixMillis(revoked_at + absl::Seconds(2)), 1500);

  (*provider)->WaitForRevocations();
  absl::StatusOr<std::vector<Instance>> described = (*provider)->Describe("job-local");
  ASSERT_TRUE(described.ok());
  ASSERT_THAT(*described, SizeIs(1));
  EXPECT_EQ((*described)[0].state, InstanceState::kTerminated);
  EXPECT_GE((*described)[0].end_time, revoked_at + absl::Seconds(2));
  EXPECT_LT((*described)[0].end_time, absl::Now() + absl::Seconds(1));
}

TEST(EmulatorMetadataClientTest, PostsTheNoticeToTheControlRoute) {
  httplib::Server server;
  std::mutex mu;
  std::map<std::string, std::string> got;
  server.Post("/emulator/notice", [&](const httplib::Request& request, httplib::Response&) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, v] : request.params) got[k] = v;
  });
  int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EmulatorMetadataClient client(absl::StrCat("http://127.0.0.1:", port, "/"));
  EXPECT_EQ(client.EndpointFor("i-1"), absl::StrCat("http://127.0.0.1:", port, "/i/i-1"));
  absl::Status published = client.PublishSpotNotice("i-1", absl::Now() + absl::Seconds(10));
  server.stop();
  thread.join();
  ASSERT_TRUE(published.ok()) << published;
  EXPECT_EQ(got["instance"], "i-1");
  EXPECT_EQ(got["cloud"], "aws");
  EXPECT_EQ(got["kind"], "notice");
  EXPECT_EQ(got["action"], "terminate");
  int64_t effective = 0;
  ASSERT_TRUE(absl::SimpleAtoi(got["effective_in_ms"], &effective));
  EXPECT_GT(effective, 5000);
  EXPECT_LE(effective, 10000);

  EmulatorMetadataClient nobody("http://127.0.0.1:1");
  EXPECT_EQ(nobody.PublishSpotNotice("i-1", absl::Now()).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace spotdnn::launcher

namespace spotdnn::launcher {
namespace {

// On-demand instances are neither limited by the spot capacity nor revoked, and do not
// use the capacity up.
TEST_F(LocalProviderTest, OnDemandIsNotLimitedByCapacityAndIsNeverRevoked) {
  LocalProvider::Options options{.state_dir = (dir_ / "state").string(),
                                 .metadata = metadata_,
                                 .capacity = {{"g4dn.4xlarge", 1}},
                                 .stop_grace = absl::Seconds(1)};
  auto provider = LocalProvider::Create(options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  LaunchRequest on_demand = Request(Role::kWorker, 2);
  on_demand.market = Market::kOnDemand;
  absl::StatusOr<LaunchResult> od = (*provider)->Launch(on_demand);
  ASSERT_TRUE(od.ok()) << od.status();
  ASSERT_THAT(od->instances, SizeIs(2));
  EXPECT_TRUE(od->error.ok()) << od->error;
  for (const Instance& i : od->instances) EXPECT_EQ(i.market, Market::kOnDemand);
  // The one spot instance the capacity allows still fits beside them; a second does not.
  absl::StatusOr<LaunchResult> spot = (*provider)->Launch(Request(Role::kWorker, 1, 2));
  ASSERT_TRUE(spot.ok()) << spot.status();
  ASSERT_THAT(spot->instances, SizeIs(1));
  EXPECT_EQ(spot->instances[0].market, Market::kSpot);
  absl::StatusOr<LaunchResult> more = (*provider)->Launch(Request(Role::kWorker, 1, 3));
  EXPECT_EQ(more.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(more.status().message(), HasSubstr("on-demand"));

  absl::Status revoke = (*provider)->Revoke(od->instances[0].id, absl::Seconds(1));
  EXPECT_EQ(revoke.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(revoke.message(), HasSubstr("on-demand"));
  // Another process sees the market in the instance files.
  auto watcher = Provider(/*owner=*/false);
  auto described = watcher->Describe("job-local");
  ASSERT_TRUE(described.ok()) << described.status();
  int on_demand_seen = 0;
  for (const Instance& i : *described) on_demand_seen += i.market == Market::kOnDemand;
  EXPECT_EQ(on_demand_seen, 2);
}

// A capacity trace replayed as the spot capacity, a trace second being 1/20 s here:
// 2 instances, then 1 from trace second 20 (1 s), 0 from 40, 2 again from 60. Spot launches beyond
// the count fail as a cloud without capacity does; when it drops, the newest spot instances get a
// notice on their metadata endpoint and stop; on-demand ones are untouched.
TEST_F(LocalProviderTest, ACapacityTraceRevokesSpotWhenItDropsAndLimitsLaunches) {
  auto trace = ParseCapacityTrace("time,count\n0,2\n20,2\n20,1\n40,1\n40,0\n60,0\n60,2\n", "t");
  ASSERT_TRUE(trace.ok()) << trace.status();
  const absl::Time origin = absl::Now();
  LocalProvider::Options options{.state_dir = (dir_ / "state").string(),
                                 .metadata = metadata_,
                                 .capacity_trace = {{"g4dn.4xlarge", *trace}},
                                 .capacity_trace_time_scale = 20,
                                 .capacity_trace_origin = origin,
                                 .trace_notice = absl::Milliseconds(200),
                                 .stop_grace = absl::Seconds(1)};
  auto made = LocalProvider::Create(options);
  ASSERT_TRUE(made.ok()) << made.status();
  LocalProvider& provider = **made;
  absl::StatusOr<LaunchResult> first = provider.Launch(Request(Role::kWorker, 1, 0));
  ASSERT_TRUE(first.ok()) << first.status();
  absl::SleepFor(absl::Milliseconds(20));  // a later launch time: the newer one goes first
  absl::StatusOr<LaunchResult> second = provider.Launch(Request(Role::kWorker, 1, 1));
  ASSERT_TRUE(second.ok()) << second.status();
  absl::StatusOr<LaunchResult> third = provider.Launch(Request(Role::kWorker, 1, 2));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  LaunchRequest on_demand = Request(Role::kWorker, 1, 3);
  on_demand.market = Market::kOnDemand;
  absl::StatusOr<LaunchResult> od = provider.Launch(on_demand);
  ASSERT_TRUE(od.ok()) << od.status();
  const std::string older = first->instances[0].id, newer = second->instances[0].id,
                    od_id = od->instances[0].id;

  auto state_of = [&](const std::string& id) { return StateOf(provider, id); };
  EXPECT_EQ(state_of(newer), InstanceState::kRunning);
  // From 1 s: the newer one is revoked (a notice first), the older one runs on.
  ASSERT_TRUE(Eventually([&] { return state_of(newer) == InstanceState::kTerminated; },
                         absl::Milliseconds(1500) + kPatience));
  EXPECT_GE(absl::Now() - origin, absl::Seconds(1));
  {
    std::lock_guard<std::mutex> lock(metadata_->mu);
    EXPECT_EQ(metadata_->notices.count(newer), 1u);
    EXPECT_EQ(metadata_->notices.count(od_id), 0u);
  }
  EXPECT_EQ(state_of(older), InstanceState::kRunning);
  // From 2 s: the older one too; the on-demand one stays.
  ASSERT_TRUE(Eventually([&] { return state_of(older) == InstanceState::kTerminated; },
                         absl::Milliseconds(1500) + kPatience));
  EXPECT_GE(absl::Now() - origin, absl::Seconds(2));
  EXPECT_EQ(state_of(od_id), InstanceState::kRunning);
  absl::StatusOr<LaunchResult> none = provider.Launch(Request(Role::kWorker, 1, 4));
  if (absl::Now() - origin < absl::Seconds(3)) {
    EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted) << none.status();
  }
  // From 3 s: capacity for 2 again.
  absl::SleepFor(std::max(absl::ZeroDuration(), origin + absl::Milliseconds(3100) - absl::Now()));
  absl::StatusOr<LaunchResult> back = provider.Launch(Request(Role::kWorker, 2, 5));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_THAT(back->instances, SizeIs(2));
  EXPECT_TRUE(back->error.ok()) << back->error;
}

// Zones: capacity traces per zone ("TYPE@ZONE"). A spot launch goes to the first zone (of the
// request's, else in name order) with room for all it asks and names the ones that refused; a drop
// in one zone revokes only the instances there; a blocked zone is never used.
TEST_F(LocalProviderTest, ZonesAreCapacityTracesOfTheirOwn) {
  auto one = ParseCapacityTrace("time,count\n0,1\n20,1\n20,0\n", "a");  // 0 from 1 s
  auto two = ParseCapacityTrace("time,count\n0,2\n", "b");
  ASSERT_TRUE(one.ok() && two.ok());
  const absl::Time origin = absl::Now();
  LocalProvider::Options options{
      .state_dir = (dir_ / "state").string(),
      .metadata = metadata_,
      .capacity_trace = {{"g4dn.4xlarge@zone-a", *one}, {"g4dn.4xlarge@zone-b", *two}},
      .capacity_trace_time_scale = 20,
      .capacity_trace_origin = origin,
      .trace_notice = absl::Milliseconds(200),
      .stop_grace = absl::Seconds(1)};
  auto made = LocalProvider::Create(options);
  ASSERT_TRUE(made.ok()) << made.status();
  LocalProvider& provider = **made;
  EXPECT_THAT(provider.ZonesFor("g4dn.4xlarge"), ElementsAre("zone-a", "zone-b"));
  auto first = provider.Launch(Request(Role::kWorker, 1, 0));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->instances[0].zone, "zone-a");
  // Zone a is full: the next goes to b, and a is named as refusing.
  auto second = provider.Launch(Request(Role::kWorker, 1, 1));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->instances[0].zone, "zone-b");
  ASSERT_THAT(second->refused_zones, SizeIs(1));
  EXPECT_THAT(second->refused_zones[0], HasSubstr("zone-a: InsufficientInstanceCapacity"));
  // The request's order, and a block that leaves b only.
  LaunchRequest ordered = Request(Role::kWorker, 1, 2);
  ordered.zones = {"zone-b", "zone-a"};
  auto third = provider.Launch(ordered);
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->instances[0].zone, "zone-b");
  LaunchRequest blocked = Request(Role::kWorker, 1, 3);
  blocked.avoid_zones = {"zone-b"};
  auto refused = provider.Launch(blocked);  // a is full, b blocked: no capacity
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("in zone-a"));
  blocked.avoid_zones = {"zone-a", "zone-b"};
  EXPECT_EQ(provider.Launch(blocked).status().code(), absl::StatusCode::kInvalidArgument);
  LaunchRequest unknown = Request(Role::kWorker, 1, 4);
  unknown.zones = {"zone-z"};
  auto bad = provider.Launch(unknown);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("\"zone-z\" is not a zone"));
  // From 1 s zone a has none: its instance goes, b's stay.
  auto state_of = [&](const std::string& id) { return StateOf(provider, id); };
  const std::string in_a = first->instances[0].id;
  ASSERT_TRUE(Eventually([&] { return state_of(in_a) == InstanceState::kTerminated; },
                         absl::Milliseconds(1500) + kPatience));
  EXPECT_EQ(state_of(second->instances[0].id), InstanceState::kRunning);
  EXPECT_EQ(state_of(third->instances[0].id), InstanceState::kRunning);
}

}  // namespace
}  // namespace spotdnn::launcher
