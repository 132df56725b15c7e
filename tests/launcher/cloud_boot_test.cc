// A VM launched through the GCE and Azure providers really starts: the fake cloud boots it as a
// local process running the start-up script (GCE metadata) or custom data (Azure) the provider
// sent; its spotdnn-agent polls the cloud's metadata flavour on a spotdnn-metadata-emulator and
// reports to a spotdnn-detector; a preemption (GCE) or eviction (Azure) reaches WatchEvents as a
// notice for that VM and job, and the VM is gone afterwards.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/azure_provider.h"
#include "provisioner/launcher/gce_provider.h"
#include "provisioner/launcher/http.h"
#include "services/common/server.h"
#include "spotdnn/v1/detector.grpc.pb.h"
#include "tests/launcher/fake_azure.h"
#include "tests/launcher/fake_gce.h"
#include "tests/testing/child_process.h"

namespace spotdnn::launcher {
namespace {

namespace fs = std::filesystem;
using ::spotdnn::testing_util::Child;
using ::spotdnn::testing_util::ReadPort;
using ::testing::HasSubstr;

class CloudBootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("spotdnn-cloud-boot-", getpid(), "-",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    emulator_ = std::make_unique<Child>(
        std::vector<std::string>{bin_ + "/spotdnn-metadata-emulator",
                                 "--port_file=" + (dir_ / "emu").string(), "--threads=16"});
    emulator_port_ = ReadPort((dir_ / "emu").string());
    ASSERT_GT(emulator_port_, 0);
    detector_ = std::make_unique<Child>(std::vector<std::string>{
        bin_ + "/spotdnn-detector", "--listen=127.0.0.1:0",
        "--port_file=" + (dir_ / "det").string(), "--db=" + (dir_ / "d.db").string(),
        "--heartbeat_interval=200ms", "--poll_interval=100ms"});
    detector_port_ = ReadPort((dir_ / "det").string());
    ASSERT_GT(detector_port_, 0);
  }

  void TearDown() override {
    if (detector_ != nullptr) detector_->Stop();
    if (emulator_ != nullptr) emulator_->Stop();
    fs::remove_all(dir_);
  }

  std::string EmulatorUrl() const { return absl::StrCat("http://127.0.0.1:", emulator_port_); }

  // Boots VMs with the agent's binaries first on the PATH and their metadata on the emulator;
  // a preemption publishes `cloud`'s notice there.
  testing::BootOptions Boot(const std::string& cloud) {
    return {
        .bin_dir = bin_,
        .log_dir = (dir_ / "vms").string(),
        .metadata_url =
            [this](const std::string& name) { return absl::StrCat(EmulatorUrl(), "/i/", name); },
        .publish_notice =
            [this, cloud](const std::string& name, absl::Time effective) {
              const int64_t in_ms = absl::ToInt64Milliseconds(effective - absl::Now());
              (void)HttpSend(
                  {.method = "POST",
                   .url = absl::StrCat(EmulatorUrl(), "/emulator/notice?instance=", name, "&cloud=",
                                       cloud, "&effective_in_ms=", std::max<int64_t>(in_ms, 1))});
            }};
  }

  LaunchRequest Request(const std::string& type) const {
    return {.job_id = "boot-job",
            .instance_type = type,
            .count = 1,
            .command = "echo started; sleep 60",
            .extra_env = {{"SPOTDNN_DETECTOR", absl::StrCat("127.0.0.1:", detector_port_)}}};
  }

  // The first notice the detector streams (within 20 s).
  absl::StatusOr<v1::RevocationEvent> NextNotice() {
    auto stub =
        v1::Detector::NewStub(services::MakeChannel(absl::StrCat("127.0.0.1:", detector_port_)));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto reader = stub->WatchEvents(&context, v1::WatchEventsRequest());
    v1::RevocationEvent event;
    while (reader->Read(&event)) {
      if (event.kind() == v1::RevocationEvent::KIND_NOTICE) {
        context.TryCancel();
        reader->Finish();
        return event;
      }
    }
    return absl::DeadlineExceededError("no notice within 20 s: " +
                                       reader->Finish().error_message());
  }

  static std::string ReadWhenThere(const fs::path& path, const std::string& expected) {
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      if (text.str().find(expected) != std::string::npos) return text.str();
      absl::SleepFor(absl::Milliseconds(20));
    }
    return "";
  }

  const std::string bin_ = SPOTDNN_BINARY_DIR;
  fs::path dir_;
  std::unique_ptr<Child> emulator_;
  std::unique_ptr<Child> detector_;
  int emulator_port_ = 0;
  int detector_port_ = 0;
};

TEST_F(CloudBootTest, GcePreemptionReachesTheDetector) {
  testing::FakeGce fake({});
  fake.EnableBoot(Boot("gce"));
  // The fake accepts only the tokens it issued: take one from its metadata server.
  auto token = std::make_shared<StaticTokenSource>(*[&]() -> absl::StatusOr<std::string> {
    auto got =
        HttpSend({.url = fake.url() + "/computeMetadata/v1/instance/service-accounts/default/token",
                  .headers = {{"Metadata-Flavor", "Google"}}});
    if (!got.ok()) return got.status();
    return nlohmann::json::parse(got->body)["access_token"].get<std::string>();
  }());
  auto provider = GceProvider::Create({.project = "spotdnn-test",
                                       .zone = "us-central1-a",
                                       .endpoint_url = fake.compute_url(),
                                       .token_source = token,
                                       .image = "projects/p/global/images/i"});
  ASSERT_TRUE(provider.ok());
  absl::StatusOr<LaunchResult> launched = (*provider)->Launch(Request("n1-standard-4"));
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 1u);
  const std::string name = launched->instances[0].id;
  ASSERT_EQ(fake.host().booted().size(), 1u);
  EXPECT_THAT(ReadWhenThere(dir_ / "vms" / name / "spotdnn-worker.log", "started"),
              HasSubstr("started"));

  // GCE gives 30 s; 3 s keep the test short (the notice is what counts here).
  ASSERT_TRUE(fake.Preempt(name, absl::Seconds(3)));
  absl::StatusOr<v1::RevocationEvent> notice = NextNotice();
  ASSERT_TRUE(notice.ok()) << notice.status() << "\nagent log:\n"
                           << ReadWhenThere(dir_ / "vms" / name / "spotdnn-worker.log", "");
  EXPECT_EQ(notice->instance_id(), name);
  EXPECT_EQ(notice->job_id(), "boot-job");
  EXPECT_EQ(notice->cloud(), v1::CLOUD_GCE);
  // Termination action DELETE: gone once the notice ran out.
  for (int i = 0; i < 100 && !fake.vms().empty(); ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(fake.vms().empty());
  EXPECT_EQ((*provider)->Terminate({name}).code(), absl::StatusCode::kNotFound);
}

TEST_F(CloudBootTest, AzureEvictionReachesTheDetector) {
  testing::FakeAzure fake({.client_secret = "s"});
  fake.EnableBoot(Boot("azure"));
  auto token = std::make_shared<StaticTokenSource>(*[&]() -> absl::StatusOr<std::string> {
    auto got = HttpSend({.url = fake.url() +
                                "/metadata/identity/oauth2/token?api-version=2018-02-01&resource="
                                "https%3A%2F%2Fmanagement.azure.com%2F",
                         .headers = {{"Metadata", "true"}}});
    if (!got.ok()) return got.status();
    return nlohmann::json::parse(got->body)["access_token"].get<std::string>();
  }());
  AzureProvider::Options options;
  options.subscription = "0b1f6471-1bf0-4dda-aec3-cb9272f09590";
  options.resource_group = "spotdnn-rg";
  options.location = "eastus";
  options.endpoint_url = fake.url();
  options.token_source = token;
  options.image = "a:b:c:d";
  options.subnet_id = "/subscriptions/x/subnets/y";
  options.operation_poll = absl::Milliseconds(10);
  auto provider = AzureProvider::Create(options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  absl::StatusOr<LaunchResult> launched = (*provider)->Launch(Request("Standard_NC6s_v3"));
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 1u);
  const std::string name = launched->instances[0].id;
  EXPECT_THAT(ReadWhenThere(dir_ / "vms" / name / "spotdnn-worker.log", "started"),
              HasSubstr("started"));

  ASSERT_TRUE(fake.Evict(name, absl::Seconds(2)));
  absl::StatusOr<v1::RevocationEvent> notice = NextNotice();
  ASSERT_TRUE(notice.ok()) << notice.status() << "\nagent log:\n"
                           << ReadWhenThere(dir_ / "vms" / name / "spotdnn-worker.log", "");
  EXPECT_EQ(notice->instance_id(), name);
  EXPECT_EQ(notice->job_id(), "boot-job");
  EXPECT_EQ(notice->cloud(), v1::CLOUD_AZURE);
  EXPECT_EQ(notice->action(), "Preempt");
  // Evicted with policy Delete: gone once the notice ran out.
  for (int i = 0; i < 100 && !fake.vms().empty(); ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_TRUE(fake.vms().empty());
  absl::StatusOr<std::vector<Instance>> left = (*provider)->Describe("boot-job");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
}

}  // namespace
}  // namespace spotdnn::launcher
