// The provider a job spec names: its keys checked, and the provider built from them.
#include "provisioner/launcher/provider_factory.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace spotdnn::launcher
