// LaunchCluster over the AWS provider and the fake EC2 endpoint: parameter servers first, their
// addresses in the workers' user data, capacity errors reported per type for a re-plan.
#include "provisioner/launcher/cluster_launcher.h"

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "provisioner/launcher/aws_provider.h"
#include "tests/launcher/fake_ec2.h"

namespace spotdnn::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

std::string Base64Decode(const std::string& text) {
  std::string out;
  return absl::Base64Unescape(text, &out) ? out : std::string();
}

class ClusterLauncherTest : public ::testing::Test {
 protected:
  ClusterLauncherTest() : fake_("AKIDCLUSTER", "cluster-secret", "") {
    AwsProvider::Options options;
    options.endpoint_url = fake_.url();
    options.credentials = {.access_key_id = "AKIDCLUSTER", .secret_access_key = "cluster-secret"};
    options.image_id = "ami-0abc";
    options.retry.sleep = [](absl::Duration) {};
    provider_ = std::move(*AwsProvider::Create(options));
  }
  testing::FakeEc2 fake_;
  std::unique_ptr<AwsProvider> provider_;
};

TEST_F(ClusterLauncherTest, ReportsExhaustedTypesAndShortfall) {
  fake_.SetCapacity("g4dn.4xlarge", 1);  // 1 of 2
  fake_.SetCapacity("p3.2xlarge", 0);    // none
  absl::StatusOr<ClusterLaunchResult> result = LaunchCluster(
      *provider_,
      {.job_id = "job-c",
       .command = "python train.py",
       .parameter_servers = 1,
       .workers = ConsecutiveGroups({{"g4dn.4xlarge", 2}, {"p3.2xlarge", 1}, {"g3.4xlarge", 2}})});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->error.ok()) << result->error;
  EXPECT_FALSE(result->complete());
  EXPECT_THAT(result->exhausted_types, ElementsAre("g4dn.4xlarge", "p3.2xlarge"));
  EXPECT_THAT(result->shortfall, ElementsAre(Pair("g4dn.4xlarge", 1), Pair("p3.2xlarge", 1)));
  ASSERT_EQ(result->ps_addresses.size(), 1u);
  EXPECT_THAT(result->ps_addresses[0], HasSubstr(":2222"));
  EXPECT_EQ(result->instances.size(), 1u + 1u + 2u);  // ps, 1 g4dn, 2 g3

  for (const auto& request : fake_.requests()) {
    if (request.at("Action") == "RunInstances" && request.at("InstanceType") == "m5.xlarge") {
      EXPECT_THAT(Base64Decode(request.at("UserData")), HasSubstr("SPOTDNN_PS_PORT='2222'"));
    }
  }
  // Workers got the parameter server's address and consecutive indexes across types.
  int g3_first_index = -1;
  for (const auto& request : fake_.requests()) {
    if (request.at("Action") != "RunInstances" || request.at("InstanceType") != "g3.4xlarge") {
      continue;
    }
    std::string user_data = Base64Decode(request.at("UserData"));
    EXPECT_THAT(user_data, HasSubstr(result->ps_addresses[0]));
    g3_first_index = std::stoi(request.at("TagSpecification.1.Tag.3.Value"));
  }
  EXPECT_EQ(g3_first_index, 3);

  // The re-plan leaves the exhausted types out.
  predictor::InstanceCatalog catalog;
  catalog.name = "c";
  for (const char* name : {"g4dn.4xlarge", "p3.2xlarge", "g3.4xlarge"}) {
    catalog.types.push_back({.name = name, .quota = 5});
  }
  provisioner::PlanProblem problem;
  problem.max_counts = {5, 5, 5};
  ASSERT_TRUE(ExcludeTypes(catalog, result->exhausted_types, problem).ok());
  EXPECT_THAT(problem.max_counts, ElementsAre(0, 0, 5));
  EXPECT_THAT(ExcludeTypes(catalog, {"x1.32xlarge"}, problem).message(),
              HasSubstr("\"x1.32xlarge\""));
}

TEST_F(ClusterLauncherTest, OtherErrorsStopTheLaunch) {
  fake_.Inject({.action = "RunInstances",
                .http_status = 403,
                .code = "UnauthorizedOperation",
                .message = "You are not authorized to perform this operation."});
  absl::StatusOr<ClusterLaunchResult> result =
      LaunchCluster(*provider_, {.job_id = "job-d",
                                 .command = "true",
                                 .parameter_servers = 1,
                                 .workers = ConsecutiveGroups({{"g4dn.4xlarge", 1}})});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(
      LaunchCluster(*provider_, {.job_id = "job-d",
                                 .workers = {{.instance_type = "g4dn.4xlarge", .count = -1}}})
          .status()
          .message(),
      HasSubstr("workers[0] (g4dn.4xlarge) = -1"));
}

TEST(ClientTokenForTest, ShortKeysStayLongOnesAreHashedWithinTheCloudsLimit) {
  EXPECT_EQ(ClientTokenFor("job-7-w-p3.2xlarge"), "job-7-w-p3.2xlarge");
  const std::string sixty_four(64, 'k');
  EXPECT_EQ(ClientTokenFor(sixty_four), sixty_four);
  const std::string long_key = std::string(64, 'j') + "-takeover-1-p2.8xlarge";
  const std::string token = ClientTokenFor(long_key);
  EXPECT_LE(token.size(), 64u);
  EXPECT_THAT(token, ::testing::StartsWith("spotdnn-"));
  EXPECT_EQ(token, ClientTokenFor(long_key)) << "a resumed job must ask with the same token";
  EXPECT_NE(token, ClientTokenFor(long_key + "x"));
  EXPECT_NE(ClientTokenFor("tab\there"), "tab\there");
  EXPECT_TRUE(ValidateLaunchRequest(
                  {.job_id = "j", .instance_type = "p3.2xlarge", .count = 1, .client_token = token})
                  .ok());
}

}  // namespace
}  // namespace spotdnn::launcher
