// LaunchCluster over the GCE and Azure providers and their fakes: the parameter server first and
// its private address:port in the workers' start-up scripts, a type without capacity reported for
// the re-plan (with what did start), the same cluster launched again making nothing new.
#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/azure_provider.h"
#include "provisioner/launcher/cluster_launcher.h"
#include "provisioner/launcher/gce_provider.h"
#include "provisioner/launcher/http.h"
#include "tests/launcher/fake_azure.h"
#include "tests/launcher/fake_gce.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string Base64Decode(const std::string& text) {
  std::string out;
  return absl::Base64Unescape(text, &out) ? out : std::string();
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

ClusterLaunchRequest Cluster(const std::string& ps_type,
                             std::vector<std::pair<std::string, int>> workers) {
  return {.job_id = "job-c",
          .command = "python train.py",
          .parameter_servers = 1,
          .parameter_server_type = ps_type,
          .workers = ConsecutiveGroups(workers),
          .ps_token = "job-c-ps",
          .worker_token_prefix = "job-c-w-"};
}

TEST(CloudClusterTest, GceReportsExhaustedTypesForTheReplan) {
  testing::FakeGce fake({});
  auto provider = GceProvider::Create(
      {.project = "spotdnn-test",
       .zone = "us-central1-a",
       .endpoint_url = fake.compute_url(),
       .token_source = std::make_shared<StaticTokenSource>(TokenFrom(fake.url(), false)),
       .image = "projects/p/global/images/i",
       .retry = {.sleep = [](absl::Duration) {}}});
  ASSERT_TRUE(provider.ok()) << provider.status();
  fake.SetCapacity("us-central1-a", "n1-standard-8", 1);  // 1 of 2
  fake.SetCapacity("us-central1-a", "a2-highgpu-1g", 0);  // none
  const ClusterLaunchRequest request =
      Cluster("n1-standard-4", {{"n1-standard-8+nvidia-tesla-v100:1", 2},
                                {"a2-highgpu-1g", 1},
                                {"n1-standard-8+nvidia-tesla-t4:1", 1}});
  absl::StatusOr<ClusterLaunchResult> result = LaunchCluster(**provider, request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->error.ok()) << result->error;
  // The t4 group is another instance type of the same machine type: its capacity ran out too.
  EXPECT_THAT(result->exhausted_types,
              ElementsAre("n1-standard-8+nvidia-tesla-v100:1", "a2-highgpu-1g",
                          "n1-standard-8+nvidia-tesla-t4:1"));
  EXPECT_THAT(result->shortfall,
              ElementsAre(Pair("a2-highgpu-1g", 1), Pair("n1-standard-8+nvidia-tesla-t4:1", 1),
                          Pair("n1-standard-8+nvidia-tesla-v100:1", 1)));
  ASSERT_EQ(result->ps_addresses.size(), 1u);
  EXPECT_THAT(result->ps_addresses[0], HasSubstr("10.128.0."));
  EXPECT_THAT(result->ps_addresses[0], HasSubstr(":2222"));
  ASSERT_EQ(result->instances.size(), 2u);  // the parameter server and one v100 worker
  for (const json& insert : fake.inserts()) {
    std::string script;
    for (const json& item : insert["metadata"]["items"]) {
      if (item["key"] == "startup-script") script = item["value"];
    }
    if (insert["labels"]["spotdnn-role"] == "ps") {
      EXPECT_THAT(script, HasSubstr("SPOTDNN_PS_PORT='2222'"));
    } else {
      EXPECT_THAT(script, HasSubstr("SPOTDNN_PS_ADDRESSES='" + result->ps_addresses[0] + "'"));
    }
  }

  // The same cluster again (a resumed gateway): the same VMs, nothing new.
  const size_t vms = fake.vms().size();
  absl::StatusOr<ClusterLaunchResult> again = LaunchCluster(**provider, request);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(fake.vms().size(), vms);
  EXPECT_EQ(again->ps_addresses, result->ps_addresses);
}

TEST(CloudClusterTest, AzureReportsExhaustedTypesForTheReplan) {
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
  fake.SetCapacity("Standard_NC6s_v3", 1, testing::FakeAzure::CapacityFailure::kAllocationFailed);
  fake.SetCapacity("Standard_ND40rs_v2", 0, testing::FakeAzure::CapacityFailure::kSkuNotAvailable);
  absl::StatusOr<ClusterLaunchResult> result = LaunchCluster(
      **provider,
      Cluster("Standard_D4s_v5",
              {{"Standard_NC6s_v3", 2}, {"Standard_ND40rs_v2", 1}, {"Standard_NC12s_v3", 1}}));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->error.ok()) << result->error;
  EXPECT_THAT(result->exhausted_types, ElementsAre("Standard_NC6s_v3", "Standard_ND40rs_v2"));
  EXPECT_THAT(result->shortfall,
              ElementsAre(Pair("Standard_NC6s_v3", 1), Pair("Standard_ND40rs_v2", 1)));
  ASSERT_EQ(result->instances.size(), 3u);  // ps, one NC6s_v3, one NC12s_v3
  ASSERT_EQ(result->ps_addresses.size(), 1u);
  EXPECT_THAT(result->ps_addresses[0], HasSubstr("10.1.0."));
  int workers = 0;
  for (const testing::FakeAzure::Vm& vm : fake.vms()) {
    const std::string script =
        Base64Decode(vm.resource["properties"]["osProfile"]["customData"].get<std::string>());
    if (vm.resource["tags"]["spotdnn-role"] == "worker") {
      ++workers;
      EXPECT_THAT(script, HasSubstr("SPOTDNN_PS_ADDRESSES='" + result->ps_addresses[0] + "'"));
    }
  }
  EXPECT_EQ(workers, 2);  // the VM whose allocation failed was deleted
}

}  // namespace
}  // namespace spotdnn::launcher
