// The AWS provider against a fake EC2 endpoint on 127.0.0.1: launch, describe, terminate, spot
// price refresh with NextToken pages, idempotent retries, the mapped errors, credentials.
#include "provisioner/launcher/aws_provider.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launcher/fake_ec2.h"

namespace spotdnn::launcher {
namespace {

using ::testing::ElementsAre;
using testing::FakeEc2;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

constexpr char kKey[] = "AKIDTESTLAUNCHER";
constexpr char kSecret[] = "s3cr3t/Key+ThatMustNeverLeak";
constexpr char kToken[] = "SessionTokenThatMustNeverLeak==";

std::string Base64Decode(const std::string& text) {
  std::string out;
  return absl::Base64Unescape(text, &out) ? out : std::string();
}

class AwsProviderTest : public ::testing::Test {
 protected:
  AwsProviderTest() : fake_(kKey, kSecret, kToken) {}

  // A provider with a subnet per zone: us-east-1a, then us-east-1b.
  std::unique_ptr<AwsProvider> ZonedProvider(bool placement_scores = false) {
    fake_.SetSubnetZone("subnet-0aaa", "us-east-1a");
    fake_.SetSubnetZone("subnet-0bbb", "us-east-1b");
    AwsProvider::Options options;
    options.region = "us-east-1";
    options.endpoint_url = fake_.url();
    options.credentials = {.access_key_id = kKey,
                           .secret_access_key = kSecret,
                           .session_token = kToken,
                           .source = "test"};
    options.image_id = "ami-0123456789abcdef0";
    options.subnets = {{.zone = "us-east-1a", .subnet_id = "subnet-0aaa"},
                       {.zone = "us-east-1b", .subnet_id = "subnet-0bbb"}};
    options.placement_scores = placement_scores;
    options.now = &Now;
    options.retry.max_attempts = 4;
    options.retry.sleep = [this](absl::Duration d) { sleeps_.push_back(d); };
    absl::StatusOr<std::unique_ptr<AwsProvider>> provider = AwsProvider::Create(options);
    EXPECT_TRUE(provider.ok()) << provider.status();
    return std::move(*provider);
  }

  // The zone (Placement) of each RunInstances request, in order.
  std::vector<std::string> RunZones() const {
    std::vector<std::string> out;
    for (auto request : fake_.requests()) {
      if (request["Action"] == "RunInstances") out.push_back(request["Placement.AvailabilityZone"]);
    }
    return out;
  }

  std::unique_ptr<AwsProvider> Provider(const std::string& secret = kSecret) {
    AwsProvider::Options options;
    options.region = "us-east-1";
    options.endpoint_url = fake_.url();
    options.credentials = {.access_key_id = kKey,
                           .secret_access_key = secret,
                           .session_token = kToken,
                           .source = "test"};
    options.image_id = "ami-0123456789abcdef0";
    options.subnet_id = "subnet-0abc";
    options.security_group_ids = {"sg-01", "sg-02"};
    options.retry.max_attempts = 4;
    options.retry.sleep = [this](absl::Duration d) { sleeps_.push_back(d); };
    absl::StatusOr<std::unique_ptr<AwsProvider>> provider = AwsProvider::Create(options);
    EXPECT_TRUE(provider.ok()) << provider.status();
    return std::move(*provider);
  }

  static LaunchRequest Workers(int count) {
    return LaunchRequest{.job_id = "job-42",
                         .instance_type = "g4dn.4xlarge",
                         .count = count,
                         .role = Role::kWorker,
                         .first_index = 0,
                         .command = "python train.py --it's-quoted",
                         .ps_addresses = {"10.0.0.5:2222"},
                         .batch_size = 64};
  }

  int RunInstancesCalls() const { return Calls("RunInstances"); }
  int Calls(const std::string& action) const {
    int n = 0;
    for (const std::string& a : fake_.actions()) n += a == action;
    return n;
  }

  // The zoned provider's clock.
  static absl::Time Now() { return now_; }
  static inline absl::Time now_ = absl::FromUnixSeconds(1767225600);

  FakeEc2 fake_;
  std::vector<absl::Duration> sleeps_;
};

TEST_F(AwsProviderTest, LaunchDescribeTerminate) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(3));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok());
  ASSERT_EQ(launched->instances.size(), 3u);
  EXPECT_FALSE(launched->partial());

  // What EC2 was asked.
  auto runs = fake_.requests();
  ASSERT_FALSE(runs.empty());
  std::map<std::string, std::string> run = runs.back();
  EXPECT_EQ(run["InstanceMarketOptions.MarketType"], "spot");
  EXPECT_EQ(run["InstanceMarketOptions.SpotOptions.SpotInstanceType"], "one-time");
  EXPECT_EQ(run["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"], "terminate");
  EXPECT_EQ(run["MaxCount"], "3");
  EXPECT_EQ(run["ImageId"], "ami-0123456789abcdef0");
  EXPECT_EQ(run["SubnetId"], "subnet-0abc");
  EXPECT_EQ(run["SecurityGroupId.2"], "sg-02");
  EXPECT_FALSE(run["ClientToken"].empty());
  EXPECT_EQ(run["TagSpecification.1.Tag.1.Key"], "spotdnn:job");
  EXPECT_EQ(run["TagSpecification.1.Tag.1.Value"], "job-42");
  std::string user_data = Base64Decode(run["UserData"]);
  EXPECT_THAT(user_data, HasSubstr("export SPOTDNN_ROLE='worker'"));
  EXPECT_THAT(user_data, HasSubstr("export SPOTDNN_PS_ADDRESSES='10.0.0.5:2222'"));
  EXPECT_THAT(user_data, HasSubstr("export SPOTDNN_BATCH_SIZE='64'"));
  EXPECT_THAT(user_data, HasSubstr("'python train.py --it'\\''s-quoted'"));
  EXPECT_THAT(user_data, HasSubstr("spotdnn-agent --cloud=aws"));

  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 3u);
  std::vector<int> indexes;
  for (const Instance& instance : *described) {
    EXPECT_EQ(instance.state, InstanceState::kRunning);
    EXPECT_EQ(instance.job_id, "job-42");
    EXPECT_EQ(instance.role, Role::kWorker);
    EXPECT_EQ(instance.instance_type, "g4dn.4xlarge");
    EXPECT_THAT(instance.private_address, HasSubstr("10.0.0."));
    indexes.push_back(instance.index);
  }
  EXPECT_THAT(indexes, UnorderedElementsAre(0, 1, 2));
  absl::StatusOr<std::vector<Instance>> other = provider->Describe("another-job");
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(other->empty());

  std::vector<std::string> ids;
  for (const Instance& instance : launched->instances) ids.push_back(instance.id);
  ASSERT_TRUE(provider->Terminate(ids).ok());
  described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok());
  for (const Instance& instance : *described) {
    EXPECT_EQ(instance.state, InstanceState::kTerminated);
  }
  absl::Status unknown = provider->Terminate({"i-doesnotexist"});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
  EXPECT_THAT(unknown.message(), HasSubstr("i-doesnotexist"));
}

// EC2 refuses a whole TerminateInstances call when one id is unknown (it forgets ended instances):
// the known ones must still be terminated, not left running and billing.
// An on-demand launch is RunInstances without the spot market options, with a client
// token of its own (the same request on spot and on on-demand are two launches), and Describe
// reports its market from EC2's instanceLifecycle.
TEST_F(AwsProviderTest, AnOnDemandLaunchHasNoSpotMarketOptions) {
  auto provider = Provider();
  LaunchRequest request = Workers(2);
  request.market = Market::kOnDemand;
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 2u);
  EXPECT_EQ(launched->instances[0].market, Market::kOnDemand);
  std::map<std::string, std::string> run = fake_.requests().back();
  for (const auto& [key, value] : run) {
    EXPECT_FALSE(absl::StartsWith(key, "InstanceMarketOptions")) << key << "=" << value;
  }
  EXPECT_EQ(run["InstanceType"], "g4dn.4xlarge");
  EXPECT_NE(run["ClientToken"], DefaultClientToken(Workers(2)));
  EXPECT_EQ(run["ClientToken"], DefaultClientToken(request));

  absl::StatusOr<LaunchResult> spot = provider->Launch(Workers(1));
  ASSERT_TRUE(spot.ok()) << spot.status();
  EXPECT_EQ(fake_.requests().back()["InstanceMarketOptions.MarketType"], "spot");
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  int on_demand = 0, on_spot = 0;
  for (const Instance& i : *described) {
    on_demand += i.market == Market::kOnDemand;
    on_spot += i.market == Market::kSpot;
  }
  EXPECT_EQ(on_demand, 2);
  EXPECT_EQ(on_spot, 1);
}

TEST_F(AwsProviderTest, AnUnknownIdDoesNotLeaveTheOthersRunning) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 2u);
  std::vector<std::string> ids = {launched->instances[0].id, "i-forgotten0001",
                                  launched->instances[1].id};
  absl::Status terminated = provider->Terminate(ids);
  EXPECT_EQ(terminated.code(), absl::StatusCode::kNotFound) << terminated;
  EXPECT_THAT(terminated.message(), HasSubstr("i-forgotten0001"));
  EXPECT_THAT(terminated.message(), Not(HasSubstr(launched->instances[0].id)));
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 2u);
  for (const Instance& instance : *described) {
    EXPECT_EQ(instance.state, InstanceState::kTerminated) << instance.id;
  }
}

TEST_F(AwsProviderTest, DescribeFollowsNextToken) {
  auto provider = Provider();
  ASSERT_TRUE(provider->Launch(Workers(5)).ok());
  fake_.set_page_size(2);
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  EXPECT_EQ(described->size(), 5u);
  int describes = 0;
  for (const std::string& a : fake_.actions()) describes += a == "DescribeInstances";
  EXPECT_EQ(describes, 3);
}

TEST_F(AwsProviderTest, SameClientTokenNeverLaunchesTwice) {
  auto provider = Provider();
  absl::StatusOr<LaunchResult> first = provider->Launch(Workers(2));
  absl::StatusOr<LaunchResult> again = provider->Launch(Workers(2));
  ASSERT_TRUE(first.ok() && again.ok());
  ASSERT_EQ(again->instances.size(), 2u);
  EXPECT_EQ(first->instances[0].id, again->instances[0].id);
  EXPECT_EQ(first->instances[1].id, again->instances[1].id);
  EXPECT_EQ(fake_.instances().size(), 2u);

  // Another request (other first index) gets other instances.
  LaunchRequest more = Workers(2);
  more.first_index = 2;
  ASSERT_TRUE(provider->Launch(more).ok());
  EXPECT_EQ(fake_.instances().size(), 4u);
}

TEST_F(AwsProviderTest, LostResponseIsRetriedWithTheSameToken) {
  auto provider = Provider();
  // EC2 launches, then the answer is a 503: the retry must not launch a second set.
  fake_.Inject({.action = "RunInstances",
                .http_status = 503,
                .code = "Unavailable",
                .message = "The server is overloaded",
                .after_effect = true});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(3));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances.size(), 3u);
  EXPECT_EQ(fake_.instances().size(), 3u);
  EXPECT_EQ(RunInstancesCalls(), 2);
  EXPECT_EQ(sleeps_.size(), 1u);
  auto requests = fake_.requests();
  EXPECT_EQ(requests[0]["ClientToken"], requests[1]["ClientToken"]);
}

TEST_F(AwsProviderTest, ThrottlingIsRetriedWithBackoff) {
  auto provider = Provider();
  for (int i = 0; i < 2; ++i) {
    fake_.Inject({.action = "RunInstances",
                  .http_status = 503,
                  .code = "RequestLimitExceeded",
                  .message = "Request limit exceeded."});
  }
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances.size(), 1u);
  EXPECT_EQ(RunInstancesCalls(), 3);
  ASSERT_EQ(sleeps_.size(), 2u);
  // Full jitter stays under base * 2^attempt (200 ms, then 800 ms).
  EXPECT_LE(sleeps_[0], absl::Milliseconds(400));
  EXPECT_LE(sleeps_[1], absl::Milliseconds(800));
}

TEST_F(AwsProviderTest, ThrottlingHonoursRetryAfter) {
  auto provider = Provider();
  fake_.Inject({.action = "DescribeInstances",
                .http_status = 503,
                .code = "RequestLimitExceeded",
                .message = "Request limit exceeded.",
                .retry_after = "5"});
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(sleeps_.size(), 1u);
  EXPECT_EQ(sleeps_[0], absl::Seconds(5));  // the server's wait, not the 200 ms backoff
}

TEST_F(AwsProviderTest, PersistentServerErrorsBecomeUnavailable) {
  auto provider = Provider();
  for (int i = 0; i < 4; ++i) {
    fake_.Inject({.http_status = 500, .code = "InternalError", .message = "internal"});
  }
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  EXPECT_EQ(described.status().code(), absl::StatusCode::kUnavailable) << described.status();
  EXPECT_THAT(described.status().message(), HasSubstr("4 attempts"));
  EXPECT_EQ(fake_.actions().size(), 4u);
}

TEST_F(AwsProviderTest, CapacityErrorsAskForAReplan) {
  auto provider = Provider();
  // EC2 answers InsufficientInstanceCapacity with a 500: still no retry, a re-plan.
  fake_.Inject({.action = "RunInstances",
                .http_status = 500,
                .code = "InsufficientInstanceCapacity",
                .message = "We currently do not have sufficient g4dn.4xlarge capacity"});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(launched.status().message(), HasSubstr("re-plan without instance type g4dn.4xlarge"));

  fake_.Inject({.action = "RunInstances",
                .code = "SpotMaxPriceTooLow",
                .message = "Your Spot request price of 0.1 is lower than the minimum"});
  launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(launched.status().message(), HasSubstr("SpotMaxPriceTooLow"));
  EXPECT_EQ(RunInstancesCalls(), 2);  // not retried
  EXPECT_TRUE(fake_.instances().empty());
}

TEST_F(AwsProviderTest, PartialLaunchIsReported) {
  auto provider = Provider();
  fake_.SetCapacity("g4dn.4xlarge", 2);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(5));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances.size(), 2u);
  EXPECT_EQ(launched->requested, 5);
  EXPECT_TRUE(launched->partial());
  EXPECT_EQ(launched->error.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(launched->error.message(), HasSubstr("launched 2 of 5"));
}

TEST_F(AwsProviderTest, MissingPermissionIsNamed) {
  auto provider = Provider();
  fake_.Inject({.action = "RunInstances",
                .http_status = 403,
                .code = "UnauthorizedOperation",
                .message = "You are not authorized to perform this operation."});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(launched.status().message(), HasSubstr("ec2:RunInstances"));
  EXPECT_EQ(RunInstancesCalls(), 1);
}

TEST_F(AwsProviderTest, WrongSecretIsUnauthenticatedAndNeverLeaks) {
  auto provider = Provider("wrong-secret-that-must-not-leak");
  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  EXPECT_EQ(described.status().code(), absl::StatusCode::kUnauthenticated) << described.status();
  EXPECT_THAT(described.status().message(), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(described.status().message(), Not(HasSubstr("wrong-secret")));
  EXPECT_THAT(described.status().message(), Not(HasSubstr(kToken)));
  EXPECT_EQ(fake_.actions().size(), 1u);  // auth failures are not retried
}

TEST_F(AwsProviderTest, SpotPricesFollowNextTokenAndKeepTheLatest) {
  auto provider = Provider();
  absl::Time t0 = absl::FromUnixSeconds(1700000000);
  fake_.AddSpotPrice({"g4dn.4xlarge", "us-east-1a", 0.40, t0});
  fake_.AddSpotPrice({"g4dn.4xlarge", "us-east-1a", 0.37, t0 + absl::Hours(1)});
  fake_.AddSpotPrice({"g4dn.4xlarge", "us-east-1b", 0.52, t0 + absl::Hours(1)});
  fake_.AddSpotPrice({"p3.2xlarge", "us-east-1a", 0.95, t0});
  fake_.AddSpotPrice({"p3.2xlarge", "us-east-1c", 1.10, t0});
  fake_.AddSpotPrice({"m5.xlarge", "us-east-1a", 0.07, t0});
  fake_.set_page_size(2);
  absl::StatusOr<std::vector<SpotPrice>> prices =
      provider->SpotPrices({"g4dn.4xlarge", "p3.2xlarge"}, "");
  ASSERT_TRUE(prices.ok()) << prices.status();
  EXPECT_EQ(prices->size(), 4u);  // (type, zone) pairs
  std::map<std::string, double> cheapest = CheapestPerType(*prices);
  EXPECT_THAT(cheapest, ElementsAre(std::pair<const std::string, double>("g4dn.4xlarge", 0.37),
                                    std::pair<const std::string, double>("p3.2xlarge", 0.95)));
  int pages = 0;
  for (const auto& request : fake_.requests()) {
    if (request.at("Action") != "DescribeSpotPriceHistory") continue;
    ++pages;
    EXPECT_EQ(request.at("ProductDescription.1"), "Linux/UNIX");
  }
  EXPECT_EQ(pages, 3);  // 5 matching prices, 2 per page
}

TEST(AwsErrorsTest, ParseAndMap) {
  absl::StatusOr<Ec2Error> error = ParseEc2Error(
      "<?xml version=\"1.0\"?><Response><Errors><Error><Code>RequestLimitExceeded</Code>"
      "<Message>Request limit exceeded.</Message></Error></Errors><RequestID>abc</RequestID>"
      "</Response>");
  ASSERT_TRUE(error.ok());
  EXPECT_EQ(error->code, "RequestLimitExceeded");
  EXPECT_EQ(error->request_id, "abc");
  EXPECT_TRUE(IsRetryableEc2Error(400, error->code));
  EXPECT_FALSE(IsRetryableEc2Error(400, "InvalidParameterValue"));
  EXPECT_EQ(ParseEc2Error("not xml").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Ec2ErrorToStatus("RunInstances", 400, {.code = "InvalidAMIID.NotFound"}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Ec2ErrorToStatus("RunInstances", 401, {.code = "AuthFailure"}).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Ec2ErrorToStatus("X", 400, {.code = "IdempotentParameterMismatch"}).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(AwsProviderCreateTest, BadInputNamesTheField) {
  AwsProvider::Options options;
  options.endpoint_url = "ftp//nope";
  auto provider = AwsProvider::Create(options);
  EXPECT_EQ(provider.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(provider.status().message(), HasSubstr("endpoint_url"));
  options.endpoint_url = "";
  options.region = "US East";
  EXPECT_THAT(AwsProvider::Create(options).status().message(), HasSubstr("region = \"US East\""));
  options.region = "eu-west-1";
  auto ok = AwsProvider::Create(options);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)->endpoint_url(), "https://ec2.eu-west-1.amazonaws.com");
  auto no_ami = (*ok)->Launch({.job_id = "j", .instance_type = "t3.micro", .command = "true"});
  EXPECT_EQ(no_ami.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_ami.status().message(), HasSubstr("image_id"));
}

// --- zones ---

TEST_F(AwsProviderTest, AZoneWithoutCapacityPassesTheLaunchToTheNext) {
  auto provider = ZonedProvider();
  fake_.SetZoneCapacity("us-east-1a", "g4dn.4xlarge", 0);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 2u);
  for (const Instance& instance : launched->instances) EXPECT_EQ(instance.zone, "us-east-1b");
  ASSERT_EQ(launched->refused_zones.size(), 1u);
  EXPECT_THAT(launched->refused_zones[0], HasSubstr("us-east-1a: InsufficientInstanceCapacity"));
  EXPECT_THAT(RunZones(), ElementsAre("us-east-1a", "us-east-1b"));

  // Each zone's try has its own token, and the subnet of its zone.
  std::vector<std::map<std::string, std::string>> runs;
  for (auto request : fake_.requests()) {
    if (request["Action"] == "RunInstances") runs.push_back(request);
  }
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_NE(runs[0]["ClientToken"], runs[1]["ClientToken"]);
  EXPECT_EQ(runs[0]["SubnetId"], "subnet-0aaa");
  EXPECT_EQ(runs[1]["SubnetId"], "subnet-0bbb");

  absl::StatusOr<std::vector<Instance>> described = provider->Describe("job-42");
  ASSERT_TRUE(described.ok()) << described.status();
  ASSERT_EQ(described->size(), 2u);
  EXPECT_EQ((*described)[0].zone, "us-east-1b");
}

TEST_F(AwsProviderTest, APartialLaunchInAZoneLaunchesTheRestInTheNextAndOnlyOnce) {
  auto provider = ZonedProvider();
  fake_.SetZoneCapacity("us-east-1a", "g4dn.4xlarge", 1);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(3));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_TRUE(launched->error.ok()) << launched->error;
  ASSERT_EQ(launched->instances.size(), 3u);
  std::vector<std::string> placed;
  for (const Instance& instance : launched->instances) {
    placed.push_back(absl::StrCat(instance.index, "@", instance.zone));
  }
  EXPECT_THAT(placed, ElementsAre("0@us-east-1a", "1@us-east-1b", "2@us-east-1b"));
  EXPECT_THAT(launched->refused_zones, ElementsAre("us-east-1a: launched 1 of 3"));

  // The same launch again (a caller that lost the answer) finds them and launches nothing.
  absl::StatusOr<LaunchResult> again = provider->Launch(Workers(3));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->error.ok()) << again->error;
  ASSERT_EQ(again->instances.size(), 3u);
  EXPECT_EQ(again->instances[2].id, launched->instances[2].id);
  EXPECT_EQ(fake_.instances().size(), 3u);
  EXPECT_EQ(RunInstancesCalls(), 2);
}

TEST_F(AwsProviderTest, ABlockedZoneIsNeverUsed) {
  auto provider = ZonedProvider();
  LaunchRequest request = Workers(2);
  request.avoid_zones = {"us-east-1a", "europe-west4-a"};
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  ASSERT_EQ(launched->instances.size(), 2u);
  EXPECT_EQ(launched->instances[0].zone, "us-east-1b");
  EXPECT_THAT(RunZones(), ElementsAre("us-east-1b"));
  for (auto run : fake_.requests()) EXPECT_NE(run["SubnetId"], "subnet-0aaa");

  // Blocking both: nothing is asked of EC2.
  const size_t before = fake_.requests().size();
  request.avoid_zones = {"us-east-1b", "us-east-1a"};
  absl::StatusOr<LaunchResult> none = provider->Launch(request);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr("every zone is blocked: us-east-1a, us-east-1b"));
  EXPECT_EQ(fake_.requests().size(), before);
}

TEST_F(AwsProviderTest, EveryZoneRefusingIsResourceExhaustedNamingThem) {
  auto provider = ZonedProvider();
  fake_.SetZoneCapacity("us-east-1a", "g4dn.4xlarge", 0);
  fake_.SetZoneCapacity("us-east-1b", "g4dn.4xlarge", 0);
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(2));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted) << launched.status();
  EXPECT_THAT(launched.status().message(), HasSubstr("us-east-1a: InsufficientInstanceCapacity"));
  EXPECT_THAT(launched.status().message(), HasSubstr("us-east-1b: InsufficientInstanceCapacity"));
  EXPECT_THAT(launched.status().message(), HasSubstr("re-plan without instance type g4dn.4xlarge"));
  EXPECT_TRUE(fake_.instances().empty());
}

TEST_F(AwsProviderTest, RequestZonesSetTheOrderAndMustBeConfigured) {
  auto provider = ZonedProvider();
  LaunchRequest request = Workers(1);
  request.zones = {"us-east-1b", "us-east-1a"};
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances[0].zone, "us-east-1b");
  EXPECT_THAT(RunZones(), ElementsAre("us-east-1b"));

  request.zones = {"us-east-1a", "us-east-1c"};
  absl::StatusOr<LaunchResult> unknown = provider->Launch(request);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("zones[1] = \"us-east-1c\""));
}

TEST_F(AwsProviderTest, PlacementScoresNameTheSubnetsZonesAndAreKeptAWhile) {
  auto provider = ZonedProvider(/*placement_scores=*/true);
  fake_.SetPlacementScore("us-east-1a", "g4dn.4xlarge", 3);
  fake_.SetPlacementScore("us-east-1b", "g4dn.4xlarge", 9);
  fake_.SetPlacementScore("us-east-1c", "g4dn.4xlarge", 10);  // no subnet there: not this job's
  fake_.SetPlacementScore("us-east-1a", "p3.2xlarge", 1);
  absl::StatusOr<std::map<std::string, int>> scores =
      provider->SpotPlacementScores("g4dn.4xlarge", 4);
  ASSERT_TRUE(scores.ok()) << scores.status();
  EXPECT_THAT(*scores, ElementsAre(Pair("us-east-1a", 3), Pair("us-east-1b", 9)));
  std::map<std::string, std::string> asked;
  for (auto request : fake_.requests()) {
    if (request["Action"] == "GetSpotPlacementScores") asked = request;
  }
  EXPECT_EQ(asked["InstanceType.1"], "g4dn.4xlarge");
  EXPECT_EQ(asked["TargetCapacity"], "4");
  EXPECT_EQ(asked["SingleAvailabilityZone"], "true");
  EXPECT_EQ(asked["RegionName.1"], "us-east-1");

  // Kept for ten minutes: the same question within them asks nothing.
  fake_.SetPlacementScore("us-east-1a", "g4dn.4xlarge", 8);
  now_ += absl::Minutes(9);
  EXPECT_THAT(*provider->SpotPlacementScores("g4dn.4xlarge", 4),
              ElementsAre(Pair("us-east-1a", 3), Pair("us-east-1b", 9)));
  EXPECT_EQ(Calls("GetSpotPlacementScores"), 1);
  now_ += absl::Minutes(2);
  EXPECT_THAT(*provider->SpotPlacementScores("g4dn.4xlarge", 4),
              ElementsAre(Pair("us-east-1a", 8), Pair("us-east-1b", 9)));
  EXPECT_EQ(Calls("GetSpotPlacementScores"), 2);
  EXPECT_EQ(Calls("DescribeAvailabilityZones"), 1);  // the zone ids' names are kept for good
}

TEST_F(AwsProviderTest, PlacementScoresAreAskedOnlyWhenConfiguredAndARefusalIsNamed) {
  auto plain = ZonedProvider();
  absl::StatusOr<std::map<std::string, int>> none = plain->SpotPlacementScores("g4dn.4xlarge", 1);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
  EXPECT_TRUE(fake_.actions().empty());

  auto provider = ZonedProvider(/*placement_scores=*/true);
  fake_.Inject({.action = "GetSpotPlacementScores",
                .http_status = 403,
                .code = "UnauthorizedOperation",
                .message = "You are not authorized to perform this operation."});
  absl::StatusOr<std::map<std::string, int>> refused =
      provider->SpotPlacementScores("g4dn.4xlarge", 1);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("GetSpotPlacementScores"));
  // Not asked again until the answer would be: a job asks at every launch and zone check.
  now_ += absl::Minutes(1);
  EXPECT_EQ(provider->SpotPlacementScores("g4dn.4xlarge", 1).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Calls("GetSpotPlacementScores"), 1);
  EXPECT_THAT(provider->SpotPlacementScores("g4dn.4xlarge", 0).status().message(),
              HasSubstr("count = 0"));
}

TEST_F(AwsProviderTest, APriceRefusalDoesNotMoveToAnotherZone) {
  auto provider = ZonedProvider();
  fake_.Inject({.action = "RunInstances",
                .code = "SpotMaxPriceTooLow",
                .message = "Your Spot request price of 0.1 is lower than the minimum"});
  absl::StatusOr<LaunchResult> launched = provider->Launch(Workers(1));
  EXPECT_EQ(launched.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(launched.status().message(), HasSubstr("SpotMaxPriceTooLow"));
  EXPECT_EQ(RunInstancesCalls(), 1);
}

TEST_F(AwsProviderTest, WithoutZonesConfiguredZonesCannotBeChosenOrBlocked) {
  auto provider = Provider();
  LaunchRequest request = Workers(1);
  request.zones = {"us-east-1a"};
  EXPECT_THAT(provider->Launch(request).status().message(),
              HasSubstr("zones[0] = \"us-east-1a\": the aws provider is not configured"));
  request.zones.clear();
  request.avoid_zones = {"us-east-1a"};
  absl::StatusOr<LaunchResult> blocked = provider->Launch(request);
  EXPECT_EQ(blocked.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(blocked.status().message(), HasSubstr("avoid_zones[0] = \"us-east-1a\""));
  EXPECT_EQ(RunInstancesCalls(), 0);
  // Another region's zone is not one EC2 could pick here.
  request.avoid_zones = {"us-west-2a"};
  absl::StatusOr<LaunchResult> launched = provider->Launch(request);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ(launched->instances[0].zone, "us-east-1a");  // the fake's default subnet zone
}

TEST(AwsSubnetsTest, ParsedInOrderAndBadItemsNamed) {
  absl::StatusOr<std::vector<AwsZoneSubnet>> parsed =
      ParseAwsSubnets("us-east-1b=subnet-0bbb, us-east-1a=subnet-0aaa", "us-east-1", "subnets");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].zone, "us-east-1b");
  EXPECT_EQ((*parsed)[1].subnet_id, "subnet-0aaa");

  auto message = [](const std::string& text) {
    return std::string(ParseAwsSubnets(text, "us-east-1", "provider.subnets").status().message());
  };
  EXPECT_THAT(message("us-east-1a"), HasSubstr("\"us-east-1a\": expected ZONE=SUBNET"));
  EXPECT_THAT(message("us-west-2a=subnet-0aaa"),
              HasSubstr("the zone \"us-west-2a\" is not an availability zone of region us-east-1"));
  EXPECT_THAT(message("us-east-1a=sg-0aaa"), HasSubstr("the subnet \"sg-0aaa\""));
  EXPECT_THAT(message("us-east-1a=subnet-0aaa,us-east-1a=subnet-0bbb"),
              HasSubstr("the zone us-east-1a is given twice"));
  EXPECT_THAT(message(""), HasSubstr("provider.subnets = \"\""));

  AwsProvider::Options options;
  options.subnet_id = "subnet-0abc";
  options.subnets = {{.zone = "us-east-1a", .subnet_id = "subnet-0aaa"}};
  EXPECT_THAT(AwsProvider::Create(options).status().message(), HasSubstr("give one"));
  options.subnet_id.clear();
  options.subnets[0].zone = "eu-west-1a";
  EXPECT_THAT(AwsProvider::Create(options).status().message(), HasSubstr("eu-west-1a"));
}

// --- credentials ---

std::function<std::string(const std::string&)> Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

TEST(AwsCredentialsTest, EnvironmentFirst) {
  auto credentials =
      ResolveAwsCredentials({.getenv = Env({{"AWS_ACCESS_KEY_ID", "AKIDENV"},
                                            {"AWS_SECRET_ACCESS_KEY", "envsecret"},
                                            {"AWS_SESSION_TOKEN", "envtoken"},
                                            {"AWS_EC2_METADATA_DISABLED", "true"}})});
  ASSERT_TRUE(credentials.ok());
  EXPECT_EQ(credentials->access_key_id, "AKIDENV");
  EXPECT_EQ(credentials->session_token, "envtoken");
  EXPECT_EQ(credentials->source, "environment");
}

TEST(AwsCredentialsTest, ProfileFromTheSharedFile) {
  std::string path = ::testing::TempDir() + "/spotdnn-credentials";
  {
    std::ofstream out(path);
    out << "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = defsecret\n\n"
           "# comment\n[training]\naws_access_key_id=AKIDTRAIN\naws_secret_access_key=trsecret\n"
           "aws_session_token = trtoken\n[broken]\naws_access_key_id = AKIDBROKEN\n";
  }
  auto env = Env({{"AWS_SHARED_CREDENTIALS_FILE", path},
                  {"AWS_PROFILE", "training"},
                  {"AWS_EC2_METADATA_DISABLED", "true"}});
  auto credentials = ResolveAwsCredentials({.getenv = env});
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_EQ(credentials->access_key_id, "AKIDTRAIN");
  EXPECT_EQ(credentials->secret_access_key, "trsecret");
  EXPECT_EQ(credentials->session_token, "trtoken");

  auto fallback = ResolveAwsCredentials({.getenv = env, .profile = "default"});
  ASSERT_TRUE(fallback.ok());
  EXPECT_EQ(fallback->access_key_id, "AKIDDEFAULT");

  auto broken = ResolveAwsCredentials({.getenv = env, .profile = "broken"});
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(broken.status().message(), HasSubstr("profile \"broken\""));
  auto missing = ResolveAwsCredentials({.getenv = env, .profile = "nope"});
  EXPECT_THAT(missing.status().message(), HasSubstr("profile \"nope\" not found"));
  EXPECT_THAT(missing.status().message(), Not(HasSubstr("defsecret")));
  EXPECT_THAT(missing.status().message(), Not(HasSubstr("trsecret")));
  std::remove(path.c_str());
}

TEST(AwsCredentialsTest, InstanceRoleFromTheMetadataService) {
  httplib::Server imds;
  imds.Put("/latest/api/token", [](const httplib::Request& request, httplib::Response& response) {
    if (request.get_header_value("X-aws-ec2-metadata-token-ttl-seconds").empty()) {
      response.status = 400;
      return;
    }
    response.set_content("imds-token", "text/plain");
  });
  auto authorized = [](const httplib::Request& request) {
    return request.get_header_value("X-aws-ec2-metadata-token") == "imds-token";
  };
  imds.Get("/latest/meta-data/iam/security-credentials/",
           [&](const httplib::Request& request, httplib::Response& response) {
             if (!authorized(request)) {
               response.status = 401;
               return;
             }
             response.set_content("spotdnn-worker-role", "text/plain");
           });
  imds.Get("/latest/meta-data/iam/security-credentials/spotdnn-worker-role",
           [&](const httplib::Request& request, httplib::Response& response) {
             if (!authorized(request)) {
               response.status = 401;
               return;
             }
             response.set_content(
                 R"({"Code":"Success","AccessKeyId":"ASIAROLE","SecretAccessKey":"rolesecret",)"
                 R"("Token":"roletoken","Expiration":"2026-11-22T10:00:00Z"})",
                 "application/json");
           });
  int port = imds.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { imds.listen_after_bind(); });
  while (!imds.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto credentials = ResolveAwsCredentials(
      {.getenv = Env({}), .metadata_endpoint = "http://127.0.0.1:" + std::to_string(port)});
  imds.stop();
  thread.join();
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_EQ(credentials->access_key_id, "ASIAROLE");
  EXPECT_EQ(credentials->session_token, "roletoken");
  EXPECT_EQ(credentials->source, "instance role spotdnn-worker-role");
  EXPECT_THAT(credentials->DebugString(), Not(HasSubstr("rolesecret")));
}

TEST(AwsCredentialsTest, NoneFoundListsWhatWasTried) {
  auto credentials =
      ResolveAwsCredentials({.getenv = Env({{"AWS_EC2_METADATA_DISABLED", "true"}}),
                             .credentials_file = "/nonexistent/spotdnn/credentials"});
  EXPECT_EQ(credentials.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(credentials.status().message(), HasSubstr("AWS_ACCESS_KEY_ID is not set"));
  EXPECT_THAT(credentials.status().message(), HasSubstr("/nonexistent/spotdnn/credentials"));
}

}  // namespace
}  // namespace spotdnn::launcher
