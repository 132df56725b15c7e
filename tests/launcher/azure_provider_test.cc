// The Azure provider against the fake Resource Manager on 127.0.0.1, with real tokens from the
// fake Entra ID: launch, list, delete, paging, idempotent PUTs, throttling and 5xx, capacity
// errors (at once and in the operation), zones and other locations, partial launches, expired
// tokens and retail prices.
#include "provisioner/launcher/azure_provider.h"

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/azure_auth.h"
#include "provisioner/launcher/vm_script.h"
#include "tests/launcher/fake_azure.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using testing::FakeAzure;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

constexpr char kSecret[] = "Sup3r~Secret.ValueThatMustNeverLeak";
constexpr char kSize[] = "Standard_NC6s_v3";
constexpr char kWestSubnet[] =
    "/subscriptions/0b1f6471-1bf0-4dda-aec3-cb9272f09590/resourceGroups/spotdnn-rg/providers/"
    "Microsoft.Network/virtualNetworks/spotdnn-westus2/subnets/training";
constexpr char kCentralSubnet[] =
    "/subscriptions/0b1f6471-1bf0-4dda-aec3-cb9272f09590/resourceGroups/spotdnn-rg/providers/"
    "Microsoft.Network/virtualNetworks/spotdnn-centralus/subnets/training";

std::string Base64Decode(const std::string& text) {
  std::string out;
  return absl::Base64Unescape(text, &out) ? out : std::string();
}

class AzureProviderTest : public ::testing::Test {
 protected:
  AzureProviderTest()
      : fake_({.client_secret = kSecret,
               .other_locations = {{"westus2", kWestSubnet}, {"centralus", kCentralSubnet}}}) {}

  std::unique_ptr<AzureProvider> Provider(const std::string& secret = kSecret,
                                          const std::string& group = "spotdnn-rg") {
    auto tokens =
        AzureTokenSource({.getenv =
                              [secret](const std::string& name) {
                                if (name == "AZURE_TENANT_ID")
                                  return std::string("00000000-0000-0000-0000-00000000a11e");
                                if (name == "AZURE_CLIENT_ID")
                                  return std::string("11111111-2222-3333-4444-555555555555");
                                if (name == "AZURE_CLIENT_SECRET") return secret;
                                return std::string();
                              },
                          .authority_host = fake_.url()});
    EXPECT_TRUE(tokens.ok()) << tokens.status();
    AzureProvider::Options options;
    options.subscription = "0b1f6471-1bf0-4dda-aec3-cb9272f09590";
    options.resource_group = group;
    options.location = "eastus";
    options.endpoint_url = fake_.url();
    options.prices_url = fake_.prices_url();
    options.token_source = *tokens;
    options.image = "microsoft-dsvm:ubuntu-hpc:2204:latest";
    options.subnet_id =
        "/subscriptions/0b1f6471-1bf0-4dda-aec3-cb9272f09590/resourceGroups/spotdnn-rg/providers/"
        "Microsoft.Network/virtualNetworks/spotdnn/subnets/training";
    options.zones = zones_;
    options.other_places = other_places_;
    options.location_images = location_images_;
    options.retry.max_attempts = 4;
    options.operation_poll = absl::Milliseconds(1);
    options.retry.sleep = [this](absl::Duration d) { sleeps_.push_back(d); };
    auto provider = AzureProvider::Create(options);
    EXPECT_TRUE(provider.ok()) << provider.status();
    return std::move(*provider);
  }

  static LaunchRequest Workers(int count) {
    return LaunchRequest{.job_id = "Job.42",
                         .instance_type = kSize,
                         .count = count,
                         .role = Role::kWorker,
                         .first_index = 3,
                         .command = "python train.py --it's-quoted",
                         .ps_addresses = {"10.1.0.4:2222"},
                         .batch_size = 32};
  }

  int Count(const std::string& method, const std::string& part) const {
    int n = 0;
    for (const std::string& r : fake_.requests()) {
      n += r.rfind(method + " ", 0) == 0 && r.find(part) != std::string::npos;
    }
    return n;
  }

  FakeAzure fake_;
  std::vector<absl::Duration> sleeps_;
  std::vector<std::string> zones_;  // the providers' availability zones (none: regional)
  std::vector<AzurePlace> other_places_;
  std::map<std::string, std::string> location_images_;
};

TEST_F(AzureProviderTest, LaunchDescribeTerminate) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 2u);
  const std::string stem = LaunchNameStem(DefaultClientToken(Workers(2)));
  EXPECT_EQ(launched->instances[0].id, stem + "-0");
  EXPECT_EQ(launched->instances[1].index, 4);

  std::vector<FakeAzure::Vm> vms = fake_.vms();
  ASSERT_EQ(vms.size(), 2u);
  const json& vm = vms[0].resource;
  EXPECT_EQ(vm["properties"]["priority"], "Spot");
  EXPECT_EQ(vm["properties"]["evictionPolicy"], "Delete");
  EXPECT_EQ(vm["properties"]["billingProfile"]["maxPrice"], -1);
  EXPECT_EQ(vm["properties"]["hardwareProfile"]["vmSize"], kSize);
  EXPECT_EQ(vm["properties"]["storageProfile"]["imageReference"]["offer"], "ubuntu-hpc");
  EXPECT_EQ(vm["properties"]["storageProfile"]["osDisk"]["deleteOption"], "Delete");
  EXPECT_EQ(vm["tags"]["spotdnn-job"], "Job.42");
  EXPECT_THAT(vm["properties"]["osProfile"]["linuxConfiguration"]["ssh"]["publicKeys"][0]["keyData"]
                  .get<std::string>(),
              HasSubstr("ssh-rsa AAAAB3NzaC1yc2E"));
  const std::string script =
      Base64Decode(vm["properties"]["osProfile"]["customData"].get<std::string>());
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_INDEX='3'"));
  EXPECT_THAT(script, HasSubstr("export SPOTDNN_JOB_ID='Job.42'"));
  EXPECT_THAT(script, HasSubstr("spotdnn-agent --cloud=azure --instance_id='" + stem + "-0'"));
  EXPECT_THAT(script, HasSubstr("http://169.254.169.254"));
  EXPECT_THAT(script, HasSubstr("'python train.py --it'\\''s-quoted'"));

  absl::StatusOr<std::vector<Instance>> described = provider->Describe("Job.42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 2u);
  std::vector<int> indexes;
  for (const Instance& instance : *described) {
    EXPECT_EQ(instance.state, InstanceState::kRunning);
    EXPECT_EQ(instance.job_id, "Job.42");
    EXPECT_EQ(instance.instance_type, kSize);
    EXPECT_THAT(instance.private_address, HasSubstr("10.1.0."));
    EXPECT_EQ(instance.metadata_cloud, "azure");
    EXPECT_TRUE(instance.metadata_endpoint.empty());
    indexes.push_back(instance.index);
  }
  EXPECT_THAT(indexes, UnorderedElementsAre(3, 4));
  EXPECT_TRUE(provider->Describe("job.42")->empty());  // tags are exact

  ASSERT_TRUE(provider->Terminate({launched->instances[0].id, launched->instances[1].id}).ok());
  EXPECT_TRUE(fake_.vms().empty());
  absl::Status unknown = provider->Terminate({"spotdnn-0000000000000000-0"});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
  EXPECT_THAT(unknown.message(), HasSubstr("spotdnn-0000000000000000-0"));
}

// An on-demand VM has priority Regular and neither an eviction policy nor a billing
// profile (Azure refuses those on a Regular VM); Describe reports its market.
TEST_F(AzureProviderTest, AnOnDemandLaunchIsARegularVm) {
  auto provider = Provider();
  LaunchRequest request = Workers(1);
  request.market = Market::kOnDemand;
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 1u);
  std::vector<FakeAzure::Vm> vms = fake_.vms();
  ASSERT_EQ(vms.size(), 1u);
  const json& properties = vms[0].resource["properties"];
  EXPECT_EQ(properties["priority"], "Regular");
  EXPECT_FALSE(properties.contains("evictionPolicy")) << properties;
  EXPECT_FALSE(properties.contains("billingProfile")) << properties;
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("Job.42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 1u);
  EXPECT_EQ((*described)[0].market, Market::kOnDemand);
}

TEST_F(AzureProviderTest, DescribeFollowsNextLinks) {
  auto provider = Provider();
  ASSERT_TRUE(provider->Launch(Workers(3)).ok());
  fake_.set_page_size(1);
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->size(), 3u);
  for (const Instance& i : *described) EXPECT_FALSE(i.private_address.empty());
}

TEST_F(AzureProviderTest, TheSameLaunchAgainMakesNoSecondVm) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> first = provider->Launch(Workers(2));
  ASSERT_TRUE(first.ok());
  auto again = Provider()->Launch(Workers(2));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->instances.size(), 2u);
  EXPECT_EQ(again->instances[0].id, first->instances[0].id);
  EXPECT_EQ(fake_.vms().size(), 2u);
  EXPECT_EQ(Count("PUT", "/virtualMachines/"), 2);  // found, not PUT again
}

TEST_F(AzureProviderTest, ALostResponseIsRetriedAsTheSamePut) {
  auto provider = Provider();
  fake_.Inject(
      {.method = "PUT", .http_status = 500, .code = "InternalServerError", .after_effect = true});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(fake_.vms().size(), 1u);
  EXPECT_EQ(fake_.vms()[0].puts, 2);  // the second PUT updated the same VM
  EXPECT_EQ(sleeps_.size(), 1u);
}

TEST_F(AzureProviderTest, ThrottlingHonoursRetryAfter) {
  auto provider = Provider();
  fake_.Inject({.path_contains = "/virtualMachines",
                .http_status = 429,
                .code = "TooManyRequests",
                .message = "throttled",
                .retry_after_s = 7});
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("Job.42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(sleeps_.size(), 1u);
  EXPECT_GE(sleeps_[0], absl::Seconds(7));
}

TEST_F(AzureProviderTest, PersistentServerErrorsBecomeUnavailable) {
  auto provider = Provider();
  for (int i = 0; i < 4; ++i)
    fake_.Inject({.path_contains = "/virtualMachines", .http_status = 503});
  absl::Status s = provider->Describe("Job.42").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("4 attempts"));
}

TEST_F(AzureProviderTest, SkuNotAvailableAsksForAReplan) {
  auto provider = Provider();
  fake_.SetCapacity(kSize, 0, FakeAzure::CapacityFailure::kSkuNotAvailable);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted) << launched.status();
  EXPECT_THAT(launched.status().message(), HasSubstr("SkuNotAvailable"));
  EXPECT_THAT(launched.status().message(),
              HasSubstr(std::string("re-plan without instance type ") + kSize));
  EXPECT_TRUE(fake_.vms().empty());
  EXPECT_TRUE(sleeps_.empty());  // not retried
}

TEST_F(AzureProviderTest, AllocationFailedInTheOperationAsksForAReplanAndCleansUp) {
  auto provider = Provider();
  fake_.SetCapacity(kSize, 0, FakeAzure::CapacityFailure::kAllocationFailed);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted) << launched.status();
  EXPECT_THAT(launched.status().message(), HasSubstr("AllocationFailed"));
  EXPECT_TRUE(fake_.vms().empty());  // the failed VM resource was deleted
}

TEST_F(AzureProviderTest, APartialLaunchIsReported) {
  auto provider = Provider();
  fake_.SetCapacity(kSize, 1, FakeAzure::CapacityFailure::kSkuNotAvailable);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(3));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances.size(), 1u);
  EXPECT_TRUE(launched->partial());
  EXPECT_EQ(launched->error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(launched->error.message(), HasSubstr("launched 1 of 3"));
}

TEST_F(AzureProviderTest, SlowCreationIsFollowed) {
  auto provider = Provider();
  fake_.set_slow_operations(true);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances[0].state, InstanceState::kRunning);
  EXPECT_EQ(Count("GET", "/operations/"), 2);
  ASSERT_FALSE(sleeps_.empty());
  EXPECT_EQ(sleeps_[0], absl::Seconds(1));  // the operation's Retry-After
}

TEST_F(AzureProviderTest, AMissingRoleAssignmentIsNamed) {
  auto provider = Provider();
  fake_.Inject({.method = "PUT",
                .http_status = 403,
                .code = "AuthorizationFailed",
                .message = "The client does not have authorization to perform action "
                           "'Microsoft.Compute/virtualMachines/write'"});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(launched.status().message(), HasSubstr("Virtual Machine Contributor"));
}

TEST_F(AzureProviderTest, AnExpiredTokenIsRefreshedAndTheCallRetried) {
  auto provider = Provider();
  ASSERT_TRUE(provider->Describe("Job.42").ok());
  EXPECT_EQ(fake_.tokens_issued(), 1);
  fake_.ExpireTokens();
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(fake_.tokens_issued(), 2);
  EXPECT_TRUE(sleeps_.empty());
}

TEST_F(AzureProviderTest, AWrongSecretIsUnauthenticatedAndNeverLeaks) {
  auto provider = Provider("wrong-secret-never-shown");
  absl::Status s = provider->Describe("Job.42").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated) << s;
  EXPECT_THAT(s.message(), Not(HasSubstr("wrong-secret-never-shown")));
  EXPECT_THAT(s.message(), Not(HasSubstr(kSecret)));
}

TEST_F(AzureProviderTest, AnUnknownResourceGroupIsNamed) {
  auto provider = Provider(kSecret, "no-such-group");
  absl::Status s = provider->Describe("Job.42").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("resource_group = \"no-such-group\""));
}

json Price(const std::string& sku, const std::string& product, double price,
           const std::string& region = "eastus",
           const std::string& effective = "2026-10-01T00:00:00Z") {
  return {{"currencyCode", "USD"},
          {"tierMinimumUnits", 0.0},
          {"retailPrice", price},
          {"unitPrice", price},
          {"armRegionName", region},
          {"location", "US East"},
          {"effectiveStartDate", effective},
          {"meterName", sku},
          {"productName", product},
          {"skuName", sku},
          {"serviceName", "Virtual Machines"},
          {"serviceFamily", "Compute"},
          {"unitOfMeasure", "1 Hour"},
          {"type", "Consumption"},
          {"isPrimaryMeterRegion", true},
          {"armSkuName", kSize}};
}

TEST_F(AzureProviderTest, SpotPricesFollowNextPageLinks) {
  auto provider = Provider();
  fake_.AddPrice(Price("NC6s v3", "Virtual Machines NCSv3 Series", 3.06));
  fake_.AddPrice(Price("NC6s v3 Spot", "Virtual Machines NCSv3 Series Windows", 0.5));
  fake_.AddPrice(Price("NC6s v3 Low Priority", "Virtual Machines NCSv3 Series", 0.6));
  fake_.AddPrice(Price("NC6s v3 Spot", "Virtual Machines NCSv3 Series", 0.2, "westeurope"));
  fake_.AddPrice(Price("NC6s v3 Spot", "Virtual Machines NCSv3 Series", 0.41, "eastus",
                       "2026-01-01T00:00:00Z"));
  fake_.AddPrice(Price("NC6s v3 Spot", "Virtual Machines NCSv3 Series", 0.3672));
  fake_.set_page_size(2);
  absl::StatusOr<std::vector<SpotPrice>> prices =
      provider->SpotPrices({kSize, "Standard_ND40rs_v2"}, "");
  ASSERT_TRUE(prices.ok()) << prices.status();
  ASSERT_EQ(prices->size(), 1u);  // nothing for the ND40rs_v2
  EXPECT_EQ((*prices)[0].instance_type, kSize);
  EXPECT_DOUBLE_EQ((*prices)[0].price_per_hour, 0.3672);  // the latest Linux Spot price
  EXPECT_EQ((*prices)[0].availability_zone, "eastus");
  EXPECT_EQ(Count("GET", "/api/retail/prices"), 3 + 1);  // 5 eastus items, 2 a page; 1 empty
  EXPECT_THAT(provider->SpotPrices({"Standard_X' or 1 eq 1"}, "").status().message(),
              HasSubstr("expected a VM size"));
}

// --- zones ---

TEST_F(AzureProviderTest, AZoneWithoutCapacityPassesTheVmsToTheNext) {
  zones_ = {"1", "2", "3"};
  auto provider = Provider();
  fake_.SetZoneCapacity("1", kSize, 0, FakeAzure::CapacityFailure::kZonalAllocationFailed);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 2u);
  for (const Instance& instance : launched->instances) EXPECT_EQ(instance.zone, "eastus-2");
  ASSERT_EQ(launched->refused_zones.size(), 1u);
  EXPECT_THAT(launched->refused_zones[0], HasSubstr("eastus-1: ZonalAllocationFailed"));
  // The second VM starts where the first went; the failed one in zone 1 was deleted.
  EXPECT_THAT(fake_.put_zones(), ElementsAre("1", "2", "2"));
  EXPECT_EQ(fake_.vms().size(), 2u);

  absl::StatusOr<std::vector<Instance>> described = provider->Describe("Job.42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 2u);
  EXPECT_EQ((*described)[0].zone, "eastus-2");
}

TEST_F(AzureProviderTest, SkuNotAvailableInAZoneMovesToo) {
  zones_ = {"1", "2"};
  auto provider = Provider();
  fake_.SetZoneCapacity("1", kSize, 0, FakeAzure::CapacityFailure::kSkuNotAvailable);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 1u);
  EXPECT_EQ(launched->instances[0].zone, "eastus-2");
  EXPECT_THAT(launched->refused_zones, ElementsAre(HasSubstr("eastus-1: SkuNotAvailable")));
}

TEST_F(AzureProviderTest, ABlockedZoneIsNeverUsed) {
  zones_ = {"1", "2"};
  auto provider = Provider();
  LaunchRequest request = Workers(1);
  request.avoid_zones = {"1"};  // bare: this location's zone 1
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances[0].zone, "eastus-2");
  EXPECT_THAT(fake_.put_zones(), ElementsAre("2"));

  request.first_index = 7;  // another launch
  request.avoid_zones = {"eastus-2", "eastus-1"};
  absl::StatusOr<LaunchResult> none = provider->Launch(request);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("every zone is blocked: eastus-1, eastus-2"));
  EXPECT_THAT(fake_.put_zones(), ElementsAre("2"));
}

TEST_F(AzureProviderTest, EveryZoneRefusingIsResourceExhaustedNamingThem) {
  zones_ = {"1", "2"};
  auto provider = Provider();
  fake_.SetZoneCapacity("1", kSize, 0, FakeAzure::CapacityFailure::kSkuNotAvailable);
  fake_.SetZoneCapacity("2", kSize, 0, FakeAzure::CapacityFailure::kAllocationFailed);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted) << launched.status();
  EXPECT_THAT(launched.status().message(), HasSubstr("eastus-1: SkuNotAvailable"));
  EXPECT_THAT(launched.status().message(), HasSubstr("eastus-2: AllocationFailed"));
  EXPECT_THAT(launched.status().message(),
              HasSubstr(std::string("re-plan without instance type ") + kSize));
  EXPECT_TRUE(fake_.vms().empty());
}

TEST_F(AzureProviderTest, RequestZonesSetTheOrderAndMustBeConfigured) {
  zones_ = {"1", "2"};
  auto provider = Provider();
  LaunchRequest request = Workers(1);
  request.zones = {"eastus-2", "1"};
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances[0].zone, "eastus-2");

  request.zones = {"westus-1"};
  absl::StatusOr<LaunchResult> unknown = provider->Launch(request);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("zones[0] = \"westus-1\""));
  EXPECT_THAT(unknown.status().message(), HasSubstr("configured: eastus-1, eastus-2"));
}

TEST_F(AzureProviderTest, RegionalVmsHaveNoZoneAndCannotKeepOutOfOne) {
  auto provider = Provider();
  LaunchRequest request = Workers(1);
  request.avoid_zones = {"eastus-3"};
  absl::StatusOr<LaunchResult> blocked = provider->Launch(request);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(blocked.status().message(), HasSubstr("avoid_zones[0] = \"eastus-3\""));
  request.avoid_zones = {"westus-3"};
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances[0].zone, "");
  EXPECT_THAT(fake_.put_zones(), ElementsAre(""));
}

// --- other locations ---

TEST_F(AzureProviderTest, OtherLocationsTakeTheVmsOnceThisOneHasNoCapacity) {
  zones_ = {"1"};
  other_places_ = {{.location = "westus2", .zone = "1", .subnet_id = kWestSubnet},
                   {.location = "centralus", .subnet_id = kCentralSubnet}};
  auto provider = Provider();
  EXPECT_THAT(provider->ZonesFor(kSize), ElementsAre("eastus-1", "westus2-1", "centralus"));
  fake_.SetZoneCapacity("1", kSize, 0, FakeAzure::CapacityFailure::kZonalAllocationFailed);
  fake_.SetZoneCapacity("westus2-1", kSize, 0, FakeAzure::CapacityFailure::kSkuNotAvailable);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 2u);
  for (const Instance& instance : launched->instances) EXPECT_EQ(instance.zone, "centralus");
  EXPECT_THAT(launched->refused_zones, ElementsAre(HasSubstr("eastus-1: ZonalAllocationFailed"),
                                                   HasSubstr("westus2-1: SkuNotAvailable")));
  // Each location once: the second VM goes where the first did.
  EXPECT_THAT(fake_.put_zones(), ElementsAre("1", "westus2-1", "centralus", "centralus"));
  ASSERT_EQ(fake_.vms().size(), 2u);
  for (const FakeAzure::Vm& vm : fake_.vms()) {
    EXPECT_EQ(vm.resource["location"], "centralus");
    EXPECT_FALSE(vm.resource.contains("zones"));
    EXPECT_EQ(vm.resource["properties"]["networkProfile"]["networkInterfaceConfigurations"][0]
                         ["properties"]["ipConfigurations"][0]["properties"]["subnet"]["id"],
              kCentralSubnet);
  }
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("Job.42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 2u);
  EXPECT_EQ((*described)[0].zone, "centralus");
}

TEST_F(AzureProviderTest, ALaunchKeepsToTheLocationItsZonesNameWithThatLocationsImage) {
  zones_ = {"1", "2"};
  other_places_ = {{.location = "westus2", .zone = "1", .subnet_id = kWestSubnet},
                   {.location = "westus2", .zone = "2", .subnet_id = kWestSubnet}};
  const std::string west_image =
      "/subscriptions/0b1f6471-1bf0-4dda-aec3-cb9272f09590/resourceGroups/spotdnn-rg/providers/"
      "Microsoft.Compute/images/trainer-westus2";
  location_images_ = {{"westus2", west_image}};
  auto provider = Provider();
  fake_.SetZoneCapacity("westus2-2", kSize, 0, FakeAzure::CapacityFailure::kAllocationFailed);
  LaunchRequest request = Workers(1);
  request.zones = {"westus2-2", "westus2-1"};  // one region, as a job moving there asks
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 1u);
  EXPECT_EQ(launched->instances[0].zone, "westus2-1");
  EXPECT_THAT(launched->refused_zones, ElementsAre(HasSubstr("westus2-2: AllocationFailed")));
  EXPECT_THAT(fake_.put_zones(), ElementsAre("westus2-2", "westus2-1"));
  ASSERT_EQ(fake_.vms().size(), 1u);
  const nlohmann::json west = fake_.vms()[0].resource;
  EXPECT_EQ(west["location"], "westus2");
  EXPECT_EQ(west["zones"], json::array({"1"}));
  EXPECT_EQ(west["properties"]["storageProfile"]["imageReference"]["id"], west_image);

  // Blocked places are never used; this location's VMs keep its own image and subnet.
  request = Workers(1);
  request.first_index = 7;
  request.avoid_zones = {"eastus-1", "westus2-1", "westus2-2"};
  launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances[0].zone, "eastus-2");
  EXPECT_THAT(fake_.put_zones(), ElementsAre("westus2-2", "westus2-1", "2"));
  for (const FakeAzure::Vm& vm : fake_.vms()) {
    if (vm.resource["location"] != "eastus") continue;
    EXPECT_EQ(vm.resource["properties"]["storageProfile"]["imageReference"]["offer"], "ubuntu-hpc");
  }
  request.zones = {"northeurope-1"};
  absl::StatusOr<LaunchResult> unknown = provider->Launch(request);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("configured: eastus-1, eastus-2, westus2-1, westus2-2"));
}

TEST(AzurePlacesTest, ParsesPlacesInOrderAndNamesABadOne) {
  auto places = ParseAzurePlaces({"westus2-1=/subscriptions/s/virtualNetworks/w/subnets/t",
                                  "WestUS=/subscriptions/s/subnets/u"},
                                 "eastus", "provider.other_locations");
  ASSERT_TRUE(places.ok()) << places.status();
  ASSERT_EQ(places->size(), 2u);
  EXPECT_EQ((*places)[0].Name(), "westus2-1");
  EXPECT_EQ((*places)[0].subnet_id, "/subscriptions/s/virtualNetworks/w/subnets/t");
  EXPECT_EQ((*places)[1].Name(), "westus");
  EXPECT_EQ((*places)[1].zone, "");
  struct Bad {
    std::string item, why;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"westus2-1", "expected PLACE=SUBNET_ID"},
           {"westus2-a=/subscriptions/s/subnets/t", "\"a\" is not an availability zone"},
           {"west us=/subscriptions/s/subnets/t", "expected a zone of another location"},
           {"eastus-1=/subscriptions/s/subnets/t", "eastus is the provider's own location"},
           {"westus2-1=/s", "expected the resource id of a subnet in westus2"}}) {
    EXPECT_THAT(ParseAzurePlaces({bad.item}, "eastus", "f").status().message(),
                HasSubstr("f[0] = \"" + bad.item + "\": " + bad.why))
        << bad.item;
  }
  EXPECT_THAT(ParseAzurePlaces(
                  {"westus-1=/subscriptions/s/subnets/t", "westus-1=/subscriptions/s/subnets/u"},
                  "eastus", "f")
                  .status()
                  .message(),
              HasSubstr("f[1] = \"westus-1=/subscriptions/s/subnets/u\": westus-1 is given twice"));
}

TEST(AzureProviderCreateTest, BadInputNamesTheField) {
  AzureProvider::Options options;
  options.subscription = "sub";
  options.resource_group = "rg";
  options.location = "East US";
  options.token_source = std::make_shared<StaticTokenSource>("t");
  EXPECT_THAT(AzureProvider::Create(options).status().message(),
              HasSubstr("location = \"East US\""));
  options.location = "eastus";
  options.max_price = 0;
  EXPECT_THAT(AzureProvider::Create(options).status().message(), HasSubstr("max_price = 0"));
  options.max_price = 0.35;
  options.resource_group = "a/b";
  EXPECT_THAT(AzureProvider::Create(options).status().message(), HasSubstr("resource_group"));
  options.resource_group = "rg";
  options.zones = {"eastus-2", "westus-1"};
  EXPECT_THAT(AzureProvider::Create(options).status().message(),
              HasSubstr("zones[1] = \"westus-1\": expected an availability zone of eastus"));
  options.zones = {"eastus-2", "3"};
  options.other_places = {
      {.location = "eastus", .zone = "1", .subnet_id = "/subscriptions/s/subnets/t"}};
  EXPECT_THAT(AzureProvider::Create(options).status().message(),
              HasSubstr("other_places[0] = \"eastus-1=/subscriptions/s/subnets/t\": eastus is the "
                        "provider's own location"));
  options.other_places = {{.location = "westus", .subnet_id = "/subscriptions/s/subnets/t"}};
  options.location_images = {{"northeurope", "a:b:c:d"}};
  EXPECT_THAT(AzureProvider::Create(options).status().message(),
              HasSubstr("location_images: \"northeurope\" is not a location of other_places"));
  options.location_images = {{"westus", "a:b"}};
  EXPECT_THAT(AzureProvider::Create(options).status().message(),
              HasSubstr("location_images.westus = \"a:b\": expected an image resource id"));
  options.other_places.clear();
  options.location_images.clear();
  auto provider = AzureProvider::Create(options);
  ASSERT_TRUE(provider.ok());
  EXPECT_EQ((*provider)->endpoint_url(), "https://management.azure.com");
  auto no_image = (*provider)->Launch({.job_id = "j", .instance_type = kSize, .command = "true"});
  EXPECT_THAT(no_image.status().message(), HasSubstr("image"));
}

TEST(ArmErrorTest, ParsesNestedDetails) {
  ArmError e = ParseArmError(409, R"({"error":{"code":"DeploymentFailed","message":"x",
               "details":[{"code":"SkuNotAvailable","message":"no capacity"}]}})");
  EXPECT_EQ(e.code, "SkuNotAvailable");
  EXPECT_EQ(e.message, "no capacity");
  EXPECT_TRUE(ParseArmError(500, "oops").code.empty());
}

TEST(EphemeralSshKeyTest, IsAnOpenSshRsaKey) {
  absl::StatusOr<std::string> key = EphemeralSshPublicKey();
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_THAT(*key, HasSubstr("ssh-rsa AAAAB3NzaC1yc2E"));  // "ssh-rsa" as the blob's first field
  EXPECT_NE(*key, *EphemeralSshPublicKey());
}

}  // namespace
}  // namespace spotdnn::launcher
