// The provider a job spec names: its keys checked, and the provider built from them.
#include "provisioner/launcher/provider_factory.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/local_provider.h"
#include "tests/launcher/test_keys.h"

namespace spotdnn::launcher {
namespace {

using ::testing::HasSubstr;

TEST(ProviderFactoryTest, EveryKeyIsCheckedAndErrorsNameIt) {
  EXPECT_TRUE(ValidateProviderSpec({.name = "local"}).ok());
  EXPECT_TRUE(ValidateProviderSpec({.name = "local", .capacity = {{"p2.xlarge", 0}}}).ok());
  EXPECT_TRUE(ValidateProviderSpec({.name = "aws", .options = {{"image_id", "ami-1"}}}).ok());

  absl::Status s = ValidateProviderSpec({.name = "nimbus"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("provider.name = \"nimbus\""));
  EXPECT_THAT(s.message(), HasSubstr("local, aws"));

  s = ValidateProviderSpec({.name = "aws", .options = {{"image_id", "ami-1"}, {"zone", "a"}}});
  EXPECT_THAT(s.message(), HasSubstr("provider.zone: unknown key for aws"));
  s = ValidateProviderSpec({.name = "aws"});
  EXPECT_THAT(s.message(), HasSubstr("provider.image_id is required for aws"));
  s = ValidateProviderSpec(
      {.name = "aws", .options = {{"image_id", "ami-1"}}, .capacity = {{"p2.xlarge", 1}}});
  EXPECT_THAT(s.message(), HasSubstr("only the local provider takes a capacity"));
  s = ValidateProviderSpec({.name = "local", .options = {{"region", "x"}}}, "job.provider");
  EXPECT_THAT(s.message(), HasSubstr("job.provider.region: unknown key for local"));
}

TEST(ProviderFactoryTest, MakesTheNamedProvider) {
  const std::string dir = (std::filesystem::path(::testing::TempDir()) / "factory-local").string();
  auto local = MakeProvider({.name = "local"}, {.local_state_dir = dir});
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ((*local)->name(), "local");
  EXPECT_EQ((*local)->OutputLocation(), dir + "/logs");
  EXPECT_EQ(MakeProvider({.name = "aws"}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// A job's capacity trace starts when the job does: a new job replays it from its start whatever
// a job run before in the same state dir kept there (that job's time would put the new one at the
// trace's end, replaying nothing); only a resumed job continues from the time its first run kept.
TEST(ProviderFactoryTest, ANewJobReplaysTheCapacityTraceFromItsStart) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(::testing::TempDir()) / "factory-trace";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Two p2.xlarge for the first trace hour, none after.
  const fs::path trace = dir / "p2.csv";
  std::ofstream(trace) << "time_h,count\n0,2\n1,2\n1,0\n";
  const ProviderSpec spec{.name = "local",
                          .capacity_trace = {{"p2.xlarge", trace.string()}},
                          .capacity_trace_time_scale = 1};
  // Jobs that started two hours ago kept their trace time 0 there (and so did the providers
  // before trace times were kept per job, in one file for the whole state dir).
  const int64_t two_hours_ago = absl::ToUnixMillis(absl::Now() - absl::Hours(2));
  for (const std::string& job : {"", "earlier", "resumed"}) {
    std::ofstream(CapacityTraceOriginPath(dir.string(), job)) << two_hours_ago << "\n";
  }
  auto capacity_now = [&](const std::string& job, bool resume) {
    auto provider = MakeProvider(spec, {.local_state_dir = dir.string(),
                                        .local_wrapper = "none",
                                        .job_id = job,
                                        .resume = resume});
    EXPECT_TRUE(provider.ok()) << provider.status();
    if (!provider.ok()) return -2;
    auto* local = dynamic_cast<LocalProvider*>(provider->get());
    EXPECT_NE(local, nullptr);
    return local == nullptr ? -2 : local->SpotCapacityNow("p2.xlarge");
  };
  EXPECT_EQ(capacity_now("new-job", false), 2) << "a new job did not replay the trace's start";
  // A job of an earlier one's name run anew (the earlier record gone) starts the trace afresh too.
  EXPECT_EQ(capacity_now("earlier", false), 2);
  // A resumed job continues where its trace was: two hours in, no capacity left.
  EXPECT_EQ(capacity_now("resumed", true), 0);
  // And the new job's own time was kept for its resume: still at the trace's start.
  EXPECT_EQ(capacity_now("new-job", true), 2);
  fs::remove_all(dir);
}

TEST(ProviderFactoryTest, GceAndAzureKeysAreChecked) {
  const ProviderSpec gce{.name = "gce",
                         .options = {{"project", "p-1"},
                                     {"zone", "us-central1-a"},
                                     {"image", "projects/p-1/global/images/family/spotdnn"}}};
  EXPECT_TRUE(ValidateProviderSpec(gce).ok()) << ValidateProviderSpec(gce);
  ProviderSpec bad = gce;
  bad.options.erase("zone");
  EXPECT_THAT(ValidateProviderSpec(bad).message(), HasSubstr("provider.zone is required for gce"));
  bad = gce;
  bad.options["zones"] = "us-central1-b,us-central1";
  EXPECT_THAT(ValidateProviderSpec(bad).message(), HasSubstr("provider.zone = \"us-central1\""));
  bad = gce;
  bad.options["external_ip"] = "yes";
  EXPECT_THAT(ValidateProviderSpec(bad).message(), HasSubstr("provider.external_ip = \"yes\""));
  bad = gce;
  bad.options["boot_disk_gb"] = "5";
  EXPECT_THAT(ValidateProviderSpec(bad).message(), HasSubstr("provider.boot_disk_gb = \"5\""));
  bad = gce;
  bad.options["image_id"] = "x";
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.image_id: unknown key for gce"));

  const ProviderSpec azure{.name = "azure",
                           .options = {{"subscription", "0b1f6471-1bf0-4dda-aec3-cb9272f09590"},
                                       {"resource_group", "rg"},
                                       {"location", "eastus"},
                                       {"image", "microsoft-dsvm:ubuntu-hpc:2204:latest"},
                                       {"subnet_id", "/subscriptions/x/subnets/y"}}};
  EXPECT_TRUE(ValidateProviderSpec(azure).ok()) << ValidateProviderSpec(azure);
  bad = azure;
  bad.options.erase("subnet_id");
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.subnet_id is required for azure"));
  bad = azure;
  bad.options["max_price"] = "0";
  EXPECT_THAT(ValidateProviderSpec(bad).message(), HasSubstr("provider.max_price = \"0\""));
  bad = azure;
  bad.options["max_price"] = "-1";
  EXPECT_TRUE(ValidateProviderSpec(bad).ok());
  bad.options["region"] = "eastus";
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.region: unknown key for azure"));
}

TEST(ProviderFactoryTest, ZoneKeysAreChecked) {
  const ProviderSpec aws{.name = "aws",
                         .options = {{"image_id", "ami-1"},
                                     {"region", "eu-west-1"},
                                     {"subnets", "eu-west-1b=subnet-0bbb,eu-west-1a=subnet-0aaa"}}};
  EXPECT_TRUE(ValidateProviderSpec(aws).ok()) << ValidateProviderSpec(aws);
  ProviderSpec bad = aws;
  bad.options["subnets"] = "eu-west-1a=subnet-0aaa,us-east-1a=subnet-0bbb";
  absl::Status s = ValidateProviderSpec(bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("provider.subnets = \"eu-west-1a=subnet-0aaa,us-east-1a="));
  EXPECT_THAT(s.message(), HasSubstr("\"us-east-1a\" is not an availability zone of region "
                                     "eu-west-1"));
  bad = aws;
  bad.options["subnets"] = "eu-west-1a:subnet-0aaa";
  EXPECT_THAT(ValidateProviderSpec(bad).message(), HasSubstr("expected ZONE=SUBNET"));
  bad = aws;
  bad.options["subnet_id"] = "subnet-0ccc";
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.subnet_id = \"subnet-0ccc\": give subnet_id or subnets"));

  const ProviderSpec azure{.name = "azure",
                           .options = {{"subscription", "0b1f6471-1bf0-4dda-aec3-cb9272f09590"},
                                       {"resource_group", "rg"},
                                       {"location", "eastus"},
                                       {"image", "microsoft-dsvm:ubuntu-hpc:2204:latest"},
                                       {"subnet_id", "/subscriptions/x/subnets/y"},
                                       {"zones", "1,eastus-2,3"}}};
  EXPECT_TRUE(ValidateProviderSpec(azure).ok()) << ValidateProviderSpec(azure);
  bad = azure;
  bad.options["zones"] = "1,westus-2";
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.zones = \"1,westus-2\": \"westus-2\" is not an availability "
                        "zone of eastus"));
  // Other locations: a subnet per place, in order, and an image where the location needs its own.
  ProviderSpec moves = azure;
  moves.options["other_locations"] =
      "westus2-1=/subscriptions/x/virtualNetworks/w/subnets/y,centralus=/subscriptions/x/"
      "virtualNetworks/c/subnets/y";
  moves.options["location_images"] = "westus2=/subscriptions/x/images/trainer-westus2";
  EXPECT_TRUE(ValidateProviderSpec(moves).ok()) << ValidateProviderSpec(moves);
  bad = moves;
  bad.options["other_locations"] = "eastus-2=/subscriptions/x/virtualNetworks/w/subnets/y";
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.other_locations[0] = \"eastus-2=/subscriptions/x/virtualNetworks/"
                        "w/subnets/y\": eastus is the provider's own location"));
  bad = moves;
  bad.options["other_locations"] = "westus2-1=subnet-0aaa";
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.other_locations[0] = \"westus2-1=subnet-0aaa\": expected the "
                        "resource id of a subnet in westus2"));
  bad = moves;
  bad.options["location_images"] = "northeurope=a:b:c:d";
  EXPECT_THAT(ValidateProviderSpec(bad).message(),
              HasSubstr("provider.location_images[0] = \"northeurope=a:b:c:d\": \"northeurope\" "
                        "is not a location of other_locations"));
}

TEST(ProviderFactoryTest, MakesGceAndAzureProviders) {
  const std::string key_file = ::testing::TempDir() + "/factory-gce-key.json";
  std::ofstream(key_file) << nlohmann::json{{"type", "service_account"},
                                            {"client_email", "a@p-1.iam.gserviceaccount.com"},
                                            {"private_key", testing::kTestRsaKeyPem},
                                            {"token_uri", "http://127.0.0.1:9/token"}}
                                 .dump();
  auto gce = MakeProvider({.name = "gce",
                           .options = {{"project", "p-1"},
                                       {"zone", "us-central1-a"},
                                       {"image", "img"},
                                       {"credentials_file", key_file}}},
                          {});
  ASSERT_TRUE(gce.ok()) << gce.status();
  EXPECT_EQ((*gce)->name(), "gce");
  auto no_key = MakeProvider({.name = "gce",
                              .options = {{"project", "p-1"},
                                          {"zone", "us-central1-a"},
                                          {"image", "img"},
                                          {"credentials_file", "/nonexistent/key.json"}}},
                             {});
  EXPECT_EQ(no_key.status().code(), absl::StatusCode::kUnauthenticated);

  setenv("AZURE_TENANT_ID", "00000000-0000-0000-0000-00000000a11e", 1);
  setenv("AZURE_CLIENT_ID", "c", 1);
  setenv("AZURE_CLIENT_SECRET", "s", 1);
  auto azure = MakeProvider({.name = "azure",
                             .options = {{"subscription", "0b1f6471"},
                                         {"resource_group", "rg"},
                                         {"location", "eastus"},
                                         {"image", "a:b:c:d"},
                                         {"subnet_id", "/s"},
                                         {"max_price", "0.5"}}},
                            {});
  unsetenv("AZURE_TENANT_ID");
  unsetenv("AZURE_CLIENT_ID");
  unsetenv("AZURE_CLIENT_SECRET");
  ASSERT_TRUE(azure.ok()) << azure.status();
  EXPECT_EQ((*azure)->name(), "azure");
  std::remove(key_file.c_str());
}

}  // namespace
}  // namespace spotdnn::launcher
