// `spotdnn run` end to end through each fake cloud: `spotdnn up` starts the four services and the
// metadata emulator as processes; the gateway (a process) runs a job with provider gce or azure
// against the fake Google Cloud or Azure in this test, authenticating as a user would (a service
// account key file; a client secret in the environment). The fake boots every VM it creates as a
// local process running the start-up script the provider sent: its spotdnn-agent polls the
// cloud's metadata flavour (GCE instance/preempted, Azure Scheduled Events) on the emulator and
// reports to the detector, its command is spotdnn-sim-worker. A worker is preempted (GCE) or
// evicted (Azure) mid-run: the notice goes agent -> detector -> gateway, the gateway re-plans and
// launches the takeover through the fake cloud before the VM is deleted.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/http.h"
#include "services/gateway/job/job_store.h"
#include "tests/gateway/cli_runner.h"
#include "tests/launcher/fake_azure.h"
#include "tests/launcher/fake_gce.h"
#include "tests/launcher/test_keys.h"
#include "tests/testing/child_process.h"

namespace spotdnn::gateway {
namespace {

namespace fs = std::filesystem;
using job::InstanceRecord;
using job::JobEventRecord;
using job::JobStore;
using job::RevocationRecord;
using nlohmann::json;
using testing_util::Child;

constexpr char kAzureSecret[] = "e2e~Client.Secret-never-shown";

// The prototype's catalog and ResNet-110 profile with each AWS type renamed to a type of `cloud`
// (same GPUs, prices and measured speeds), so that the plan is the one the AWS tests know: 5 of
// the 8-GPU K80 type for a predicted 38 s.
std::map<std::string, std::string> TypeNames(const std::string& cloud) {
  if (cloud == "gce") {
    return {{"p2.xlarge", "n1-standard-4+nvidia-tesla-k80:1"},
            {"g4dn.4xlarge", "n1-standard-16+nvidia-tesla-t4:1"},
            {"g3.8xlarge", "n1-standard-32+nvidia-tesla-p4:2"},
            {"g3.16xlarge", "n1-standard-64+nvidia-tesla-p4:4"},
            {"p2.8xlarge", "n1-standard-32+nvidia-tesla-k80:8"},
            {"m5.xlarge", "n1-standard-4"}};
  }
  return {{"p2.xlarge", "Standard_NC6"},   {"g4dn.4xlarge", "Standard_NC16as_T4_v3"},
          {"g3.8xlarge", "Standard_NV12"}, {"g3.16xlarge", "Standard_NV24"},
          {"p2.8xlarge", "Standard_NC24"}, {"m5.xlarge", "Standard_D4s_v5"}};
}

std::string Renamed(const std::string& path, const std::string& cloud, const std::string& region) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  json doc = json::parse(text.str());
  std::string out = doc.dump();
  for (const auto& [aws, other] : TypeNames(cloud)) {
    out = absl::StrReplaceAll(out, {{"\"" + aws + "\"", "\"" + other + "\""}});
  }
  doc = json::parse(out);
  if (doc.contains("provider")) {
    doc["provider"] = cloud;
    doc["region"] = region;
    doc["name"] = "prototype-on-" + cloud;
  }
  return doc.dump(2);
}

class CloudEndToEnd : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() / absl::StrCat("spotdnn-cloud-e2e-", getpid(), "-", GetParam());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    CliRun up = Cli({"up", "--data-dir", dir_.string(), "--bin-dir", bin_, "--json"});
    ASSERT_EQ(up.code, 0) << up.err;
    emulator_ = json::parse(up.out).value("metadata_emulator", "");
    ASSERT_FALSE(emulator_.empty()) << up.out;
  }

  void TearDown() override {
    gce_.reset();
    azure_.reset();
    Cli({"down", "--data-dir", dir_.string()});
    fs::remove_all(dir_);
    for (const char* name :
         {"AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_AUTHORITY_HOST"}) {
      unsetenv(name);
    }
  }

  // VMs boot with this build's binaries on their PATH, their metadata on the stack's emulator; a
  // preemption publishes the cloud's notice there. An Azure eviction shows in the Scheduled Events
  // of every VM (as in an availability set or scale-set placement group), naming the victim in
  // its Resources: only the victim's agent may take it as its notice.
  launcher::testing::BootOptions Boot(const std::string& cloud) {
    return {.bin_dir = bin_,
            .log_dir = (dir_ / "vms").string(),
            .metadata_url = [this](const std::string& name) { return emulator_ + "/i/" + name; },
            .publish_notice =
                [this, cloud](const std::string& name, absl::Time effective) {
                  const int64_t in_ms =
                      std::max<int64_t>(1, absl::ToInt64Milliseconds(effective - absl::Now()));
                  auto sent = launcher::HttpSend(
                      {.method = "POST",
                       .url = absl::StrCat(emulator_, "/emulator/notice?instance=", name,
                                           "&cloud=", cloud, "&effective_in_ms=", in_ms,
                                           cloud == "azure" ? "&all_instances=true" : "")});
                  EXPECT_TRUE(sent.ok() && sent->status == 200);
                }};
  }

  // Starts the fake cloud and writes the job spec for it; returns the spec's path.
  std::string Prepare(const std::string& job,
                      const std::string& worker_command = "spotdnn-sim-worker") {
    const std::string cloud = GetParam();
    const std::string source = SPOTDNN_SOURCE_DIR;
    const std::string region = cloud == "gce" ? "us-central1" : "eastus";
    const fs::path catalog = dir_ / "catalog.json";
    const fs::path workload = dir_ / "workload.json";
    std::ofstream(catalog) << Renamed(source + "/deploy/catalogs/aws-spotdnn-prototype.json", cloud,
                                      region);
    std::ofstream(workload) << Renamed(source + "/deploy/workloads/resnet110.json", cloud, region);
    json provider;
    if (cloud == "gce") {
      gce_ = std::make_unique<launcher::testing::FakeGce>(launcher::testing::FakeGce::Options{
          .public_key_pem = launcher::testing::kTestRsaKeyPem, .private_ips_loopback = true});
      gce_->EnableBoot(Boot("gce"));
      const fs::path key = dir_ / "gce-key.json";
      std::ofstream(key) << json{
          {"type", "service_account"},
          {"project_id", "spotdnn-test"},
          {"private_key_id", "k1"},
          {"private_key", launcher::testing::kTestRsaKeyPem},
          {"client_email", "launcher@spotdnn-test.iam.gserviceaccount.com"},
          {"token_uri",
           gce_->token_url()}}.dump();
      provider = {{"name", "gce"},
                  {"project", "spotdnn-test"},
                  {"zone", "us-central1-a"},
                  {"image", "projects/spotdnn-test/global/images/family/spotdnn"},
                  {"credentials_file", key.string()},
                  {"endpoint_url", gce_->compute_url()}};
    } else {
      azure_ = std::make_unique<launcher::testing::FakeAzure>(launcher::testing::FakeAzure::Options{
          .client_secret = kAzureSecret, .private_ips_loopback = true});
      azure_->EnableBoot(Boot("azure"));
      // The gateway finds its service principal where a user puts it: in the environment.
      setenv("AZURE_TENANT_ID", "00000000-0000-0000-0000-00000000a11e", 1);
      setenv("AZURE_CLIENT_ID", "11111111-2222-3333-4444-555555555555", 1);
      setenv("AZURE_CLIENT_SECRET", kAzureSecret, 1);
      setenv("AZURE_AUTHORITY_HOST", azure_->url().c_str(), 1);
      provider = {{"name", "azure"},
                  {"subscription", "0b1f6471-1bf0-4dda-aec3-cb9272f09590"},
                  {"resource_group", "spotdnn-rg"},
                  {"location", "eastus"},
                  {"image", "microsoft-dsvm:ubuntu-hpc:2204:latest"},
                  {"subnet_id",
                   "/subscriptions/0b1f6471-1bf0-4dda-aec3-cb9272f09590/resourceGroups/spotdnn-rg/"
                   "providers/Microsoft.Network/virtualNetworks/spotdnn/subnets/training"},
                  {"endpoint_url", azure_->url()}};
    }
    const fs::path spec = dir_ / (job + ".json");
    std::ofstream(spec) << json{{"name", job},
                                {"workload", {{"file", workload.string()}}},
                                {"slo", {{"loss", 2.6}, {"deadline", "60s"}}},
                                {"catalog", catalog.string()},
                                {"provider", provider},
                                {"quotas", {{TypeNames(cloud)["p2.8xlarge"], 5}}},
                                {"commands",
                                 {{"worker", worker_command},
                                  {"parameter_server", "spotdnn-sim-worker"}}}}
                               .dump(2);
    return spec.string();
  }

  // The job's VMs in the fake cloud: name -> (role, index).
  std::map<std::string, std::pair<std::string, int>> Vms(const std::string& job) const {
    std::map<std::string, std::pair<std::string, int>> out;
    if (gce_ != nullptr) {
      for (const auto& vm : gce_->vms()) {
        const json& labels = vm.resource["labels"];
        if (labels.value("spotdnn-job", "") != job) continue;
        out[vm.name] = {labels.value("spotdnn-role", ""),
                        std::stoi(labels.value("spotdnn-index", "-1"))};
      }
    } else {
      for (const auto& vm : azure_->vms()) {
        const json& tags = vm.resource["tags"];
        if (tags.value("spotdnn-job", "") != job) continue;
        out[vm.name] = {tags.value("spotdnn-role", ""),
                        std::stoi(tags.value("spotdnn-index", "-1"))};
      }
    }
    return out;
  }

  std::unique_ptr<JobStore> Store() {
    auto store = JobStore::Open((dir_ / "jobs.db").string());
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? std::move(*store) : nullptr;
  }

  void WaitUntilTraining(const std::string& job, double iterations) {
    auto store = Store();
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 900; ++i) {
      auto record = store->GetJob(job);
      if (record.ok() && record->state == job::JobState::kRunning &&
          record->iterations_done >= iterations) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    FAIL() << "job " << job << " did not start training within 90 s";
  }

  static std::vector<json> JsonLines(const fs::path& path) {
    std::vector<json> out;
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto j = json::parse(line, nullptr, false);
      if (j.is_object()) out.push_back(j);
    }
    return out;
  }

  const std::string bin_ = SPOTDNN_BINARY_DIR;
  fs::path dir_;
  std::string emulator_;
  std::unique_ptr<launcher::testing::FakeGce> gce_;
  std::unique_ptr<launcher::testing::FakeAzure> azure_;
};

TEST_P(CloudEndToEnd, RevocationNoticeIsTakenOverBeforeTheVmGoes) {
  const std::string cloud = GetParam();
  const std::string job = "e2e-" + cloud;
  const std::string spec = Prepare(job);
  Child gateway({bin_ + "/spotdnn", "run", spec, "--json", "--data-dir", dir_.string()},
                (dir_ / "run.log").string());
  WaitUntilTraining(job, 5);

  // The plan's VMs run in the fake cloud, booted from their start-up scripts.
  const auto planned = Vms(job);
  ASSERT_EQ(planned.size(), 6u);  // 1 parameter server and 5 workers
  std::string victim;
  for (const auto& [name, role_index] : planned) {
    if (role_index.first == "worker" && role_index.second == 1) victim = name;
  }
  ASSERT_FALSE(victim.empty());
  const absl::Time revoked_at = absl::Now();
  // 5 s of notice: the takeover runs within about 1 s, and the VM goes while the job (about 12 s
  // long) still runs, on a busy machine too.
  const bool preempted = cloud == "gce" ? gce_->Preempt(victim, absl::Seconds(5))
                                        : azure_->Evict(victim, absl::Seconds(5));
  ASSERT_TRUE(preempted);

  std::optional<int> code = gateway.Wait(std::chrono::seconds(150));
  ASSERT_TRUE(code.has_value()) << "the gateway did not finish the job";
  EXPECT_EQ(*code, 0);
  std::vector<std::string> kinds;
  for (const auto& e : JsonLines(dir_ / "run.log")) kinds.push_back(e.value("event", ""));
  for (const char* kind : {"planned", "launched", "progress", "notice", "replanned", "takeover",
                           "ended", "finished"}) {
    EXPECT_THAT(kinds, ::testing::Contains(kind)) << "no " << kind << " event in the --json output";
  }

  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob(job);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFinished) << record->message;
  EXPECT_GE(record->iterations_done, record->target_iterations);

  // The cloud's own notice came through the agent and the detector.
  auto events = store->Events(job);
  ASSERT_TRUE(events.ok());
  const std::string cloud_notice =
      cloud == "gce" ? "instance/preempted = TRUE" : "Preempt (Scheduled, incarnation";
  bool notice_logged = false;
  for (const JobEventRecord& e : *events) {
    notice_logged |= e.kind == "notice" && absl::StrContains(e.detail, victim) &&
                     absl::StrContains(e.detail, cloud_notice);
  }
  EXPECT_TRUE(notice_logged) << "no notice with \"" << cloud_notice << "\" for " << victim;

  auto revocations = store->Revocations(job);
  ASSERT_TRUE(revocations.ok());
  ASSERT_EQ(revocations->size(), 1u);
  const RevocationRecord& r = revocations->front();
  EXPECT_EQ(r.instance_id, victim);
  EXPECT_EQ(r.status, job::RevocationStatus::kLaunched) << r.detail;
  EXPECT_GT(r.replanned_ms, 0);
  EXPECT_GE(r.cloud_notice_ms, absl::ToUnixMillis(revoked_at));
  EXPECT_GE(r.takeover_launched_ms, r.replanned_ms);
  const std::vector<std::string> takeover = absl::StrSplit(r.takeover_ids, ',', absl::SkipEmpty());
  ASSERT_FALSE(takeover.empty());

  auto instances = store->Instances(job);
  ASSERT_TRUE(instances.ok());
  std::map<std::string, InstanceRecord> by_id;
  for (const InstanceRecord& i : *instances) by_id[i.id] = i;
  ASSERT_EQ(by_id.count(victim), 1u);
  EXPECT_GT(by_id[victim].ended_ms, 0);
  EXPECT_LT(r.takeover_launched_ms, r.ended_ms)
      << "the takeover must run before the revoked VM is gone";
  for (const std::string& id : takeover) {
    ASSERT_EQ(by_id.count(id), 1u) << id;
    EXPECT_EQ(by_id[id].reason, job::LaunchReason::kTakeover);
    EXPECT_LT(by_id[id].launched_ms, r.ended_ms) << id;
  }
  for (const auto& [id, i] : by_id) {
    EXPECT_EQ(i.state, job::InstanceStatus::kEnded) << id;
    EXPECT_EQ(i.metadata_cloud, cloud) << id;
    EXPECT_TRUE(i.metadata_endpoint.empty()) << id;  // the agent reports, nobody polls the VM
  }
  // Every VM, the takeover's included, booted in the fake cloud; none is left.
  const std::vector<std::string> booted =
      cloud == "gce" ? gce_->host().booted() : azure_->host().booted();
  for (const auto& [id, i] : by_id) EXPECT_THAT(booted, ::testing::Contains(id));
  EXPECT_TRUE(Vms(job).empty()) << "VMs left running in the fake cloud";

  CliRun status = Cli({"status", job, "--json", "--data-dir", dir_.string()});
  ASSERT_EQ(status.code, 0) << status.err;
  const json summary = json::parse(status.out)["summary"];
  EXPECT_EQ(summary["state"], "finished");
  EXPECT_EQ(summary["revocations_handled"], 1);
  EXPECT_EQ(summary["takeover_instances"], takeover.size());
  const json& listed = summary["revocation_list"][0];
  EXPECT_EQ(listed["takeover_before_revoked_ended"], true);

  // Nothing secret in what the gateway printed.
  std::ifstream log(dir_ / "run.log");
  std::stringstream text;
  text << log.rdbuf();
  EXPECT_THAT(text.str(), ::testing::Not(::testing::HasSubstr(kAzureSecret)));
  EXPECT_THAT(text.str(), ::testing::Not(::testing::HasSubstr("PRIVATE KEY")));

  std::cout << "[measured] " << job << ": notice published -> takeover running "
            << (r.takeover_launched_ms - absl::ToUnixMillis(revoked_at)) / 1000.0
            << " s; detector saw the notice -> takeover running "
            << listed["notice_to_takeover_running_s"] << " s; predicted "
            << summary["predicted_time_s"] << " s, actual " << summary["actual_time_s"] << " s"
            << std::endl;
}

TEST_P(CloudEndToEnd, ACommandThatFailsOnEveryVmFailsTheJobWithItsLastLines) {
  // A VM runs on after its command ended: its agent reports the end (not a revocation), and the
  // gateway stops the VM and fails the job with the command's words, without a takeover.
  const std::string cloud = GetParam();
  const std::string job = "fails-" + cloud;
  const std::string spec =
      Prepare(job, "echo loading the data; echo 'ValueError: no data in /data/train' >&2; exit 3");
  Child gateway({bin_ + "/spotdnn", "run", spec, "--json", "--data-dir", dir_.string()},
                (dir_ / "run.log").string());
  std::optional<int> code = gateway.Wait(std::chrono::seconds(150));
  ASSERT_TRUE(code.has_value()) << "the gateway did not end the job";
  EXPECT_NE(*code, 0);
  auto store = Store();
  ASSERT_NE(store, nullptr);
  auto record = store->GetJob(job);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->state, job::JobState::kFailed) << record->message;
  EXPECT_THAT(record->message, ::testing::HasSubstr("ended with exit status 3"));
  EXPECT_THAT(record->message, ::testing::HasSubstr("ValueError: no data in /data/train"));
  auto revocations = store->Revocations(job);
  ASSERT_TRUE(revocations.ok());
  EXPECT_TRUE(revocations->empty()) << "a command's end was taken for a revocation";
  EXPECT_TRUE(Vms(job).empty()) << "VMs left running in the fake cloud";
  CliRun status = Cli({"status", job, "--data-dir", dir_.string()});
  EXPECT_THAT(status.out + status.err, ::testing::HasSubstr("ValueError: no data in /data/train"));
}

INSTANTIATE_TEST_SUITE_P(FakeClouds, CloudEndToEnd, ::testing::Values("gce", "azure"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace spotdnn::gateway
