// Azure credentials against the fake Entra ID and instance metadata service: the client secret
// from the environment or an auth file, the managed identity, and what is said when none works.
#include "provisioner/launcher/azure_auth.h"

#include <cstdio>
#include <fstream>
#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/launcher/fake_azure.h"

namespace spotdnn::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kSecret[] = "Sup3r~Secret.ValueThatMustNeverLeak";

std::function<std::string(const std::string&)> Env(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
}

class AzureAuthTest : public ::testing::Test {
 protected:
  AzureAuthTest() : fake_({.client_secret = kSecret}) {}
  testing::FakeAzure fake_;
};

TEST_F(AzureAuthTest, ClientSecretFromTheEnvironment) {
  auto source =
      AzureTokenSource({.getenv = Env({{"AZURE_TENANT_ID", "00000000-0000-0000-0000-00000000a11e"},
                                       {"AZURE_CLIENT_ID", "11111111-2222-3333-4444-555555555555"},
                                       {"AZURE_CLIENT_SECRET", kSecret}}),
                        .authority_host = fake_.url()});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->Describe(), HasSubstr("client 11111111-2222-3333-4444-555555555555"));
  EXPECT_THAT((*source)->Describe(), Not(HasSubstr(kSecret)));
  absl::StatusOr<std::string> token = (*source)->Token();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(fake_.tokens_issued(), 1);

  // AZURE_AUTHORITY_HOST is honoured when no host is given.
  auto by_env =
      AzureTokenSource({.getenv = Env({{"AZURE_TENANT_ID", "00000000-0000-0000-0000-00000000a11e"},
                                       {"AZURE_CLIENT_ID", "11111111-2222-3333-4444-555555555555"},
                                       {"AZURE_CLIENT_SECRET", kSecret},
                                       {"AZURE_AUTHORITY_HOST", fake_.url()}})});
  ASSERT_TRUE(by_env.ok());
  EXPECT_TRUE((*by_env)->Token().ok());
}

TEST_F(AzureAuthTest, AWrongSecretIsRefusedWithoutQuotingIt) {
  auto source =
      AzureTokenSource({.getenv = Env({{"AZURE_TENANT_ID", "00000000-0000-0000-0000-00000000a11e"},
                                       {"AZURE_CLIENT_ID", "11111111-2222-3333-4444-555555555555"},
                                       {"AZURE_CLIENT_SECRET", "wrong-secret-never-shown"}}),
                        .authority_host = fake_.url()});
  ASSERT_TRUE(source.ok());
  absl::Status s = (*source)->Token().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("invalid_client: AADSTS7000215"));
  EXPECT_THAT(s.message(), Not(HasSubstr("wrong-secret-never-shown")));
  EXPECT_THAT(s.message(), Not(HasSubstr("Trace ID")));

  auto bad_tenant = AzureTokenSource({.getenv = Env({{"AZURE_TENANT_ID", "../evil"},
                                                     {"AZURE_CLIENT_ID", "c"},
                                                     {"AZURE_CLIENT_SECRET", "s"}})});
  EXPECT_THAT(bad_tenant.status().message(), HasSubstr("tenant = \"../evil\""));
}

TEST_F(AzureAuthTest, AuthFileInBothShapes) {
  const std::string sdk_auth = ::testing::TempDir() + "/azure-sdk-auth.json";
  std::ofstream(sdk_auth) << R"({"clientId": "11111111-2222-3333-4444-555555555555",
    "clientSecret": ")" << kSecret
                          << R"(", "subscriptionId": "0b1f6471-1bf0-4dda-aec3-cb9272f09590",
    "tenantId": "00000000-0000-0000-0000-00000000a11e", "activeDirectoryEndpointUrl": ")"
                          << fake_.url() << R"("})";
  auto source = AzureTokenSource({.getenv = Env({{"AZURE_AUTH_LOCATION", sdk_auth}})});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->Describe(), HasSubstr("auth file " + sdk_auth));
  EXPECT_TRUE((*source)->Token().ok());  // to the file's activeDirectoryEndpointUrl

  absl::StatusOr<AzureClientSecret> rbac = ParseAzureAuthFile(
      R"({"appId": "a", "displayName": "spotdnn", "password": "p", "tenant": "contoso.com"})");
  ASSERT_TRUE(rbac.ok()) << rbac.status();
  EXPECT_EQ(rbac->client_id, "a");
  EXPECT_EQ(rbac->tenant_id, "contoso.com");
  absl::Status missing = ParseAzureAuthFile(R"({"appId": "a", "password": "hunter2"})").status();
  EXPECT_THAT(missing.message(), HasSubstr("tenantId (or tenant) missing"));
  EXPECT_THAT(missing.message(), Not(HasSubstr("hunter2")));
  std::remove(sdk_auth.c_str());
}

TEST_F(AzureAuthTest, ManagedIdentityOnAVm) {
  auto source = AzureTokenSource({.getenv = Env({}), .identity_endpoint = fake_.url()});
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_THAT((*source)->Describe(), HasSubstr("managed identity"));
  absl::StatusOr<std::string> token = (*source)->Token();
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_THAT(*token, HasSubstr(".mi-"));
}

TEST(AzureAuthNoneTest, ListsWhatWasTried) {
  auto source = AzureTokenSource({.getenv = Env({}),
                                  .identity_endpoint = "http://127.0.0.1:9",
                                  .identity_probe_timeout = absl::Milliseconds(500)});
  EXPECT_EQ(source.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(source.status().message(), HasSubstr("AZURE_CLIENT_SECRET are not all set"));
  EXPECT_THAT(source.status().message(), HasSubstr("AZURE_AUTH_LOCATION is not set"));
  EXPECT_THAT(source.status().message(), HasSubstr("managed identity"));
}

}  // namespace
}  // namespace spotdnn::launcher
