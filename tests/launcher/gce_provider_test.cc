// The Compute Engine provider against the fake Google Cloud on 127.0.0.1, with real tokens from
// the fake's JWT-bearer endpoint: launch, list, delete, paging, idempotent retries, throttling and
// 5xx, zone fallback and capacity errors, partial launches, expired tokens and prices.
#include "provisioner/launcher/gce_provider.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/google_auth.h"
#include "provisioner/launcher/vm_script.h"
#include "tests/launcher/fake_gce.h"
#include "tests/launcher/test_keys.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;
using testing::FakeGce;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr char kApiKey[] = "AIzaTestBillingKeyThatMustNeverLeak";
constexpr char kType[] = "n1-standard-8+nvidia-tesla-v100:1";

class GceProviderTest : public ::testing::Test {
 protected:
  GceProviderTest() : fake_({.public_key_pem = testing::kTestRsaKeyPem, .api_key = kApiKey}) {
    ServiceAccountKey key{.client_email = "launcher@spotdnn-test.iam.gserviceaccount.com",
                          .private_key_id = "k1",
                          .private_key = testing::kTestRsaKeyPem,
                          .token_uri = fake_.token_url()};
    tokens_ = ServiceAccountTokenSource(key, kGoogleCloudPlatformScope, absl::Seconds(5));
  }

  std::unique_ptr<GceProvider> Provider(std::vector<std::string> fallback = {"us-central1-b"}) {
    GceProvider::Options options;
    options.project = "spotdnn-test";
    options.zone = "us-central1-a";
    options.fallback_zones = std::move(fallback);
    options.endpoint_url = fake_.compute_url();
    options.billing_endpoint_url = fake_.billing_url();
    options.api_key = kApiKey;
    options.token_source = tokens_;
    options.image = "projects/spotdnn-test/global/images/family/spotdnn";
    options.service_account = "vm@spotdnn-test.iam.gserviceaccount.com";
    options.retry.max_attempts = 4;
    options.retry.sleep = [this](absl::Duration d) { sleeps_.push_back(d); };
    auto provider = GceProvider::Create(options);
    EXPECT_TRUE(provider.ok()) << provider.status();
    return std::move(*provider);
  }

  static LaunchRequest Workers(int count, const std::string& job = "job-42") {
    return LaunchRequest{.job_id = job,
                         .instance_type = kType,
                         .count = count,
                         .role = Role::kWorker,
                         .first_index = 0,
                         .command = "python train.py --it's-quoted",
                         .ps_addresses = {"10.128.0.5:2222"},
                         .batch_size = 64,
                         .extra_env = {{"SPOTDNN_DETECTOR", "10.0.0.1:50054"}}};
  }

  int Count(const std::string& method, const std::string& path_part) const {
    int n = 0;
    for (const std::string& r : fake_.requests()) {
      n += r.rfind(method + " ", 0) == 0 && r.find(path_part) != std::string::npos;
    }
    return n;
  }
  int Inserts() const { return Count("POST", "/instances?requestId="); }

  FakeGce fake_;
  std::shared_ptr<CachedTokenSource> tokens_;
  std::vector<absl::Duration> sleeps_;
};

std::string StartupScript(const json& body) {
  for (const json& item : body["metadata"]["items"]) {
    if (item["key"] == "startup-script") return item["value"];
  }
  return "";
}

TEST_F(GceProviderTest, LaunchDescribeTerminate) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(3));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 3u);

  // What Compute Engine was asked.
  std::vector<json> inserts = fake_.inserts();
  ASSERT_EQ(inserts.size(), 3u);
  const json& vm = inserts[1];
  EXPECT_EQ(vm["machineType"], "zones/us-central1-a/machineTypes/n1-standard-8");
  EXPECT_EQ(vm["scheduling"]["provisioningModel"], "SPOT");
  EXPECT_EQ(vm["scheduling"]["instanceTerminationAction"], "DELETE");
  EXPECT_EQ(vm["scheduling"]["automaticRestart"], false);
  EXPECT_EQ(vm["guestAccelerators"][0]["acceleratorType"],
            "zones/us-central1-a/acceleratorTypes/nvidia-tesla-v100");
  EXPECT_EQ(vm["guestAccelerators"][0]["acceleratorCount"], 1);
  EXPECT_EQ(vm["disks"][0]["initializeParams"]["sourceImage"],
            "projects/spotdnn-test/global/images/family/spotdnn");
  EXPECT_EQ(vm["serviceAccounts"][0]["email"], "vm@spotdnn-test.iam.gserviceaccount.com");
  EXPECT_EQ(vm["labels"]["spotdnn-job"], "job-42");
  EXPECT_EQ(vm["labels"]["spotdnn-index"], "1");
  const std::string script = StartupScript(vm);
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_INDEX='1'"));
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_ROLE='worker'"));
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_PS_ADDRESSES='10.128.0.5:2222'"));
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_INSTANCE_ID='" + vm["name"].get<std::string>()));
  EXPECT_THAT(script, HasSubstr("spotdnn-agent --cloud=gce --instance_id='"));
  EXPECT_THAT(script, HasSubstr("http://metadata.google.internal"));
  EXPECT_THAT(script, HasSubstr("'python train.py --it'\\''s-quoted'"));
  // Names from the client token, each insert with a UUID request id.
  const std::string stem = LaunchNameStem(DefaultClientToken(Workers(3)));
  EXPECT_EQ(vm["name"], stem + "-1");
  EXPECT_EQ(Inserts(), 3);

  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 3u);
  std::vector<int> indexes;
  for (const Instance& instance : *described) {
    EXPECT_EQ(instance.state, InstanceState::kRunning);
    EXPECT_EQ(instance.job_id, "job-42");
    EXPECT_EQ(instance.role, Role::kWorker);
    EXPECT_EQ(instance.instance_type, kType);
    EXPECT_THAT(instance.private_address, HasSubstr("10.128.0."));
    EXPECT_THAT(instance.public_address, HasSubstr("34.1.0."));
    EXPECT_EQ(instance.metadata_cloud, "gce");
    EXPECT_TRUE(instance.metadata_endpoint.empty());
    EXPECT_NE(instance.launch_time, absl::InfinitePast());
    indexes.push_back(instance.index);
  }
  EXPECT_THAT(indexes, UnorderedElementsAre(0, 1, 2));
  absl::StatusOr<std::vector<Instance>> other = provider->Describe("another-job");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());

  std::vector<std::string> ids;
  for (const Instance& instance : launched->instances) ids.push_back(instance.id);
  ASSERT_TRUE(provider->Terminate(ids).ok());
  EXPECT_TRUE(fake_.vms().empty());
  absl::Status unknown = provider->Terminate({"spotdnn-0000000000000000-0"});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
  EXPECT_THAT(unknown.message(), HasSubstr("spotdnn-0000000000000000-0"));
}

// An on-demand VM has provisioning model STANDARD, no termination action, and restarts
// after host maintenance like any standard VM; Describe reports its market.
TEST_F(GceProviderTest, AnOnDemandLaunchIsAStandardVm) {
  auto provider = Provider();
  LaunchRequest request = Workers(1);
  request.market = Market::kOnDemand;
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 1u);
  std::vector<json> inserts = fake_.inserts();
  ASSERT_EQ(inserts.size(), 1u);
  const json& scheduling = inserts[0]["scheduling"];
  EXPECT_EQ(scheduling["provisioningModel"], "STANDARD");
  EXPECT_FALSE(scheduling.contains("instanceTerminationAction")) << scheduling;
  EXPECT_FALSE(scheduling.contains("preemptible")) << scheduling;
  EXPECT_EQ(scheduling["automaticRestart"], true);
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 1u);
  EXPECT_EQ((*described)[0].market, Market::kOnDemand);
}

TEST_F(GceProviderTest, DescribeFollowsPagesAndMatchesTheExactJob) {
  auto provider = Provider();
  ASSERT_TRUE(provider->Launch(Workers(5, "Job.A")).ok());
  ASSERT_TRUE(provider->Launch(Workers(1, "job_a")).ok());  // the same label value
  fake_.set_page_size(2);
  const int before = Count("GET", "/aggregated/instances");
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("Job.A");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->size(), 5u);
  EXPECT_EQ(Count("GET", "/aggregated/instances") - before, 3);  // 6 labelled job_a, 2 a page
  absl::StatusOr<std::vector<Instance>> all = provider->Describe("");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->size(), 6u);
}

TEST_F(GceProviderTest, TheSameLaunchAgainMakesNoSecondVm) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> first = provider->Launch(Workers(2));
  ASSERT_TRUE(first.ok());
  // A new provider (a restarted gateway) launching the same request finds the VMs it made.
  auto again = Provider()->Launch(Workers(2));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->instances.size(), 2u);
  EXPECT_EQ(again->instances[0].id, first->instances[0].id);
  EXPECT_EQ(again->instances[1].id, first->instances[1].id);
  EXPECT_EQ(fake_.vms().size(), 2u);
  EXPECT_EQ(Inserts(), 2);

  LaunchRequest more = Workers(2);
  more.first_index = 2;
  ASSERT_TRUE(provider->Launch(more).ok());
  EXPECT_EQ(fake_.vms().size(), 4u);
}

TEST_F(GceProviderTest, ALostResponseIsRetriedWithTheSameRequestId) {
  auto provider = Provider();
  fake_.Inject({.method = "POST",
                .path_contains = "/instances?requestId=",
                .http_status = 503,
                .after_effect = true});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances.size(), 1u);
  EXPECT_EQ(fake_.vms().size(), 1u);
  ASSERT_EQ(Inserts(), 2);
  std::vector<std::string> inserts;
  for (const std::string& r : fake_.requests()) {
    if (r.find("/instances?requestId=") != std::string::npos) inserts.push_back(r);
  }
  EXPECT_EQ(inserts[0], inserts[1]);
  EXPECT_EQ(sleeps_.size(), 1u);
}

TEST_F(GceProviderTest, ThrottlingIsRetriedWithFullJitter) {
  auto provider = Provider();
  fake_.Inject({.path_contains = "/compute/",
                .http_status = 429,
                .status = "RESOURCE_EXHAUSTED",
                .reason = "rateLimitExceeded"});
  fake_.Inject({.path_contains = "/compute/",
                .http_status = 403,
                .status = "PERMISSION_DENIED",
                .reason = "userRateLimitExceeded"});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances.size(), 1u);
  ASSERT_EQ(sleeps_.size(), 2u);
  EXPECT_LE(sleeps_[0], absl::Milliseconds(400));
  EXPECT_LE(sleeps_[1], absl::Milliseconds(800));
}

TEST_F(GceProviderTest, PersistentServerErrorsBecomeUnavailable) {
  auto provider = Provider();
  for (int i = 0; i < 4; ++i) {
    fake_.Inject({.path_contains = "/compute/", .http_status = 500, .reason = "backendError"});
  }
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  EXPECT_EQ(described.status().code(), absl::StatusCode::kUnavailable) << described.status();
  EXPECT_THAT(described.status().message(), HasSubstr("4 attempts"));
  EXPECT_EQ(sleeps_.size(), 3u);
}

TEST_F(GceProviderTest, AZoneWithoutCapacityFallsBackToTheNext) {
  auto provider = Provider({"us-central1-b", "us-central1-c"});
  fake_.SetCapacity("us-central1-a", "n1-standard-8", 0);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 2u);
  for (const FakeGce::Vm& vm : fake_.vms()) EXPECT_EQ(vm.zone, "us-central1-b");
  for (const Instance& instance : launched->instances) EXPECT_EQ(instance.zone, "us-central1-b");
  ASSERT_EQ(launched->refused_zones.size(), 1u);
  EXPECT_THAT(launched->refused_zones[0],
              HasSubstr("us-central1-a: ZONE_RESOURCE_POOL_EXHAUSTED: The zone"));
  // The same request again finds them in their zone.
  auto again = provider->Launch(Workers(2));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(fake_.vms().size(), 2u);
  // And they can be deleted there.
  std::vector<std::string> ids;
  for (const Instance& i : launched->instances) ids.push_back(i.id);
  EXPECT_TRUE(Provider()->Terminate(ids).ok());
  EXPECT_TRUE(fake_.vms().empty());
}

TEST_F(GceProviderTest, NoCapacityInAnyZoneAsksForAReplan) {
  auto provider = Provider();
  fake_.SetCapacity("us-central1-a", "n1-standard-8", 0);
  fake_.SetCapacity("us-central1-b", "n1-standard-8", 0);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted) << launched.status();
  EXPECT_THAT(launched.status().message(),
              HasSubstr("re-plan without instance type " + std::string(kType)));
  EXPECT_THAT(launched.status().message(), HasSubstr("us-central1-a, us-central1-b"));
  EXPECT_THAT(launched.status().message(),
              HasSubstr("us-central1-a: ZONE_RESOURCE_POOL_EXHAUSTED"));
  EXPECT_THAT(launched.status().message(),
              HasSubstr("us-central1-b: ZONE_RESOURCE_POOL_EXHAUSTED"));
  EXPECT_TRUE(fake_.vms().empty());
}

TEST_F(GceProviderTest, TheRequestsZonesSetTheOrderAndABlockedZoneIsNeverUsed) {
  auto provider = Provider({"us-central1-b", "us-central1-c"});
  fake_.SetCapacity("us-central1-c", "n1-standard-8", 0);
  LaunchRequest request = Workers(1);
  request.zones = {"us-central1-c", "us-central1-b", "us-central1-a"};
  request.avoid_zones = {"us-central1-b"};
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 1u);
  EXPECT_EQ(launched->instances[0].zone, "us-central1-a");
  ASSERT_EQ(launched->refused_zones.size(), 1u);
  EXPECT_THAT(launched->refused_zones[0], HasSubstr("us-central1-c: ZONE_RESOURCE_POOL_EXHAUSTED"));
  EXPECT_EQ(Count("POST", "/zones/us-central1-b/"), 0);
  EXPECT_EQ(Count("POST", "/zones/us-central1-c/instances?"), 1);

  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 1u);
  EXPECT_EQ((*described)[0].zone, "us-central1-a");
}

TEST_F(GceProviderTest, ZonesMustBeConfiguredAndOneMustBeLeft) {
  auto provider = Provider({});
  LaunchRequest request = Workers(1);
  request.zones = {"us-central1-a", "us-central1-f"};
  absl::StatusOr<LaunchResult> unknown = provider->Launch(request);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("zones[1] = \"us-central1-f\""));
  EXPECT_THAT(unknown.status().message(), HasSubstr("configured: us-central1-a"));

  // The only configured zone, blocked: nothing is launched anywhere.
  request.zones.clear();
  request.avoid_zones = {"us-central1-a"};
  absl::StatusOr<LaunchResult> blocked = provider->Launch(request);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(blocked.status().message(), HasSubstr("every zone is blocked: us-central1-a"));
  EXPECT_EQ(Inserts(), 0);
}

TEST_F(GceProviderTest, APartialLaunchIsReported) {
  auto provider = Provider();
  fake_.SetCapacity("us-central1-a", "n1-standard-8", 1);
  fake_.SetCapacity("us-central1-b", "n1-standard-8", 1);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(4));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances.size(), 2u);
  EXPECT_TRUE(launched->partial());
  EXPECT_EQ(launched->error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(launched->error.message(), HasSubstr("launched 2 of 4"));
}

TEST_F(GceProviderTest, QuotaErrorsAskForAReplanWithoutTryingOtherZones) {
  auto provider = Provider();
  fake_.InjectOperationError("QUOTA_EXCEEDED", "Quota 'NVIDIA_V100_GPUS' exceeded. Limit: 0.0");
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(launched.status().message(), HasSubstr("NVIDIA_V100_GPUS"));
  EXPECT_EQ(Inserts(), 1);
}

TEST_F(GceProviderTest, SlowOperationsAreWaitedFor) {
  auto provider = Provider();
  fake_.set_slow_operations(true);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 1u);
  EXPECT_EQ(launched->instances[0].state, InstanceState::kRunning);
  EXPECT_EQ(Count("POST", "/wait"), 1);
}

TEST_F(GceProviderTest, AMissingPermissionIsNamed) {
  auto provider = Provider();
  fake_.Inject({.method = "POST",
                .path_contains = "/instances?requestId=",
                .http_status = 403,
                .status = "PERMISSION_DENIED",
                .reason = "forbidden",
                .message = "Required 'compute.instances.create' permission for "
                           "'projects/spotdnn-test/zones/us-central1-a/instances/x'"});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(launched.status().message(), HasSubstr("roles/compute.instanceAdmin.v1"));
  EXPECT_EQ(Inserts(), 1);
}

TEST_F(GceProviderTest, AnExpiredTokenIsRefreshedAndTheCallRetried) {
  auto provider = Provider();
  ASSERT_TRUE(provider->Describe("job-42").ok());
  EXPECT_EQ(fake_.tokens_issued(), 1);
  fake_.ExpireTokens();  // the cached token is refused from now on
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(fake_.tokens_issued(), 2);
  EXPECT_TRUE(sleeps_.empty());  // a refresh is not a backoff
}

TEST_F(GceProviderTest, ARefusedKeyIsUnauthenticatedAndNothingLeaks) {
  ServiceAccountKey wrong{.client_email = "someone-else@spotdnn-test.iam.gserviceaccount.com",
                          .private_key = testing::kTestRsaKeyPem,
                          .token_uri = fake_.token_url()};
  GceProvider::Options options;
  options.project = "spotdnn-test";
  options.zone = "us-central1-a";
  options.endpoint_url = fake_.compute_url();
  options.token_source =
      ServiceAccountTokenSource(wrong, kGoogleCloudPlatformScope, absl::Seconds(5));
  auto provider = GceProvider::Create(options);
  ASSERT_TRUE(provider.ok());
  absl::Status s = (*provider)->Describe("job").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), HasSubstr("unknown issuer"));
  EXPECT_THAT(s.message(), Not(HasSubstr("PRIVATE KEY")));
  EXPECT_THAT(s.message(), Not(HasSubstr("ya29")));
}

json Sku(const std::string& description, const std::string& group, const std::string& usage,
         const std::string& region, const std::string& unit, int64_t units, int nanos) {
  return {{"name", "services/6F81-5844-456A/skus/" + description.substr(0, 8)},
          {"skuId", "0000-0000-0000"},
          {"description", description},
          {"category",
           {{"serviceDisplayName", "Compute Engine"},
            {"resourceFamily", "Compute"},
            {"resourceGroup", group},
            {"usageType", usage}}},
          {"serviceRegions", json::array({region})},
          {"pricingInfo",
           json::array({{{"effectiveTime", "2026-11-01T00:00:00Z"},
                         {"pricingExpression",
                          {{"usageUnit", unit},
                           {"displayQuantity", 1},
                           {"tieredRates", json::array({{{"startUsageAmount", 0},
                                                         {"unitPrice",
                                                          {{"currencyCode", "USD"},
                                                           {"units", std::to_string(units)},
                                                           {"nanos", nanos}}}}})}}}}})},
          {"serviceProviderName", "Google"}};
}

TEST_F(GceProviderTest, SpotPricesFromTheBillingCatalog) {
  auto provider = Provider();
  fake_.SetMachineType("n1-standard-8", 8, 30720);
  fake_.SetMachineType("a2-highgpu-1g", 12, 87040, "nvidia-tesla-a100", 1);
  fake_.SetMachineType("n1-standard-4", 4, 15360);
  const std::string r = "us-central1";
  fake_.AddSku(Sku("Spot Preemptible N1 Predefined Instance Core running in Americas", "N1Standard",
                   "Preemptible", r, "h", 0, 6655000));
  fake_.AddSku(Sku("Spot Preemptible N1 Predefined Instance Ram running in Americas", "N1Standard",
                   "Preemptible", r, "GiBy.h", 0, 892000));
  fake_.AddSku(Sku("Spot Preemptible Nvidia Tesla V100 GPU running in Americas", "GPU",
                   "Preemptible", r, "h", 0, 740000000));
  fake_.AddSku(Sku("Spot Preemptible A2 Instance Core running in Americas", "CPU", "Preemptible", r,
                   "h", 0, 9496000));
  fake_.AddSku(Sku("Spot Preemptible A2 Instance Ram running in Americas", "RAM", "Preemptible", r,
                   "GiBy.h", 0, 1273000));
  fake_.AddSku(Sku("Spot Preemptible Nvidia Tesla A100 GPU running in Americas", "GPU",
                   "Preemptible", r, "h", 1, 100000000));
  // Decoys: on-demand, another region, the older name of a SKU, a custom core, an 80GB A100.
  fake_.AddSku(Sku("N1 Predefined Instance Core running in Americas", "N1Standard", "OnDemand", r,
                   "h", 0, 31611000));
  fake_.AddSku(Sku("Spot Preemptible N1 Predefined Instance Core running in EMEA", "N1Standard",
                   "Preemptible", "europe-west4", "h", 0, 7000000));
  fake_.AddSku(Sku("Preemptible N1 Predefined Instance Core running in Americas", "N1Standard",
                   "Preemptible", r, "h", 0, 9999000));
  fake_.AddSku(Sku("Spot Preemptible Custom Instance Core running in Americas", "CPU",
                   "Preemptible", r, "h", 0, 8000000));
  fake_.AddSku(Sku("Spot Preemptible Nvidia A100 80GB GPU running in Americas", "GPU",
                   "Preemptible", r, "h", 2, 0));
  fake_.set_page_size(3);

  absl::StatusOr<std::vector<SpotPrice>> prices =
      provider->SpotPrices({kType, "a2-highgpu-1g", "n1-standard-4+nvidia-tesla-t4:2"}, "");
  ASSERT_TRUE(prices.ok()) << prices.status();
  std::map<std::string, double> by_type = CheapestPerType(*prices);
  ASSERT_EQ(by_type.size(), 2u);  // no T4 SKU: that type has no price
  EXPECT_NEAR(by_type[kType], 8 * 0.006655 + 30 * 0.000892 + 0.74, 1e-9);
  EXPECT_NEAR(by_type["a2-highgpu-1g"], 12 * 0.009496 + 85 * 0.001273 + 1.1, 1e-9);
  for (const SpotPrice& p : *prices) EXPECT_EQ(p.availability_zone, "us-central1");
  EXPECT_EQ(Count("GET", "/skus"), 4);  // 11 SKUs, 3 a page
  for (const std::string& request : fake_.requests()) {
    EXPECT_THAT(request, Not(HasSubstr(kApiKey)));  // the key goes in a header
  }
}

TEST_F(GceProviderTest, ABadApiKeyIsUnauthenticated) {
  GceProvider::Options options;
  options.project = "spotdnn-test";
  options.zone = "us-central1-a";
  options.endpoint_url = fake_.compute_url();
  options.billing_endpoint_url = fake_.billing_url();
  options.api_key = "AIzaWrongKeyNeverShown";
  options.token_source = tokens_;
  auto provider = GceProvider::Create(options);
  ASSERT_TRUE(provider.ok());
  fake_.SetMachineType("n1-standard-8", 8, 30720);
  absl::Status s = (*provider)->SpotPrices({"n1-standard-8"}, "").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), HasSubstr("API key not valid"));
  EXPECT_THAT(s.message(), Not(HasSubstr("AIzaWrongKeyNeverShown")));
}

TEST(GceProviderCreateTest, BadInputNamesTheField) {
  GceProvider::Options options;
  options.project = "spotdnn-test";
  options.zone = "us-central1";
  options.token_source = std::make_shared<StaticTokenSource>("t");
  EXPECT_THAT(GceProvider::Create(options).status().message(), HasSubstr("zone = \"us-central1\""));
  options.zone = "us-central1-a";
  options.project = "My Project";
  EXPECT_THAT(GceProvider::Create(options).status().message(),
              HasSubstr("project = \"My Project\""));
  options.project = "spotdnn-test";
  options.token_source = nullptr;
  EXPECT_THAT(GceProvider::Create(options).status().message(), HasSubstr("token_source"));
  options.token_source = std::make_shared<StaticTokenSource>("t");
  auto provider = GceProvider::Create(options);
  ASSERT_TRUE(provider.ok());
  EXPECT_EQ((*provider)->endpoint_url(), "https://compute.googleapis.com/compute/v1");
  auto no_image =
      (*provider)->Launch({.job_id = "j", .instance_type = "n1-standard-8", .command = "true"});
  EXPECT_EQ(no_image.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_image.status().message(), HasSubstr("image"));
}

TEST(GceInstanceTypeTest, ParsesMachineTypesAndAccelerators) {
  auto plain = ParseGceInstanceType("a2-highgpu-1g");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->machine_type, "a2-highgpu-1g");
  EXPECT_EQ(plain->accelerator_count, 0);
  auto one = ParseGceInstanceType("n1-standard-8+nvidia-tesla-k80");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->accelerator_type, "nvidia-tesla-k80");
  EXPECT_EQ(one->accelerator_count, 1);
  auto four = ParseGceInstanceType("n1-highmem-16+nvidia-tesla-p100:4");
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(four->accelerator_count, 4);
  for (const char* bad : {"", "N1-standard-8", "n1-standard-8+", "n1+a+b", "n1-standard-8+gpu:0",
                          "n1-standard-8+gpu:x", "p3.2xlarge"}) {
    absl::Status s = ParseGceInstanceType(bad).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr(std::string("\"") + bad + "\"")) << bad;
  }
  EXPECT_EQ(*GceRegionOf("europe-west4-a"), "europe-west4");
  EXPECT_FALSE(GceRegionOf("europe-west4").ok());
  EXPECT_EQ(GceLabelValue("Job.A/42"), "job_a_42");
}

TEST(GoogleApiErrorTest, Parses) {
  GoogleApiError e =
      ParseGoogleApiError(403, R"({"error":{"code":403,"message":"m","status":"PERMISSION_DENIED",
               "errors":[{"reason":"forbidden"}]}})");
  EXPECT_EQ(e.reason, "forbidden");
  EXPECT_EQ(e.status, "PERMISSION_DENIED");
  e = ParseGoogleApiError(400, R"({"error":{"code":400,"message":"API key not valid",
      "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}})");
  EXPECT_EQ(e.reason, "API_KEY_INVALID");
  e = ParseGoogleApiError(502, "<html>bad gateway</html>");
  EXPECT_EQ(e.http_status, 502);
  EXPECT_TRUE(e.reason.empty());
}

}  // namespace
}  // namespace spotdnn::launcher
