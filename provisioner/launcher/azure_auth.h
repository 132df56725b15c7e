// Azure credentials without an Azure SDK: a service principal's client secret (the OAuth 2.0
// client-credentials grant at Microsoft Entra ID, https://login.microsoftonline.com/TENANT/oauth2/
// v2.0/token), or, on an Azure VM, a managed identity's token from the instance metadata service.
// Both behind a CachedTokenSource that refreshes before expiry. No message holds the secret or a
// token.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_AZURE_AUTH_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_AZURE_AUTH_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "provisioner/launcher/access_token.h"

namespace spotdnn::launcher {

// The resource the providers ask tokens for: Azure Resource Manager.
inline constexpr char kAzureManagementResource[] = "https://management.azure.com/";

// A service principal's client secret.
struct AzureClientSecret {
  std::string tenant_id;
  std::string client_id;
  std::string client_secret;   // never printed
  std::string authority_host;  // from an auth file's activeDirectoryEndpointUrl; may be empty
  std::string source;          // "environment", "auth file PATH"

  // "client CLIENT_ID in tenant TENANT (from SOURCE)", never the secret.
  std::string DebugString() const;
};

// Parses an auth file: the JSON of `az ad sp create-for-rbac --sdk-auth` (clientId, clientSecret,
// tenantId, activeDirectoryEndpointUrl) or of `az ad sp create-for-rbac` (appId, password,
// tenant). INVALID_ARGUMENT naming what is missing; never quotes the secret.
absl::StatusOr<AzureClientSecret> ParseAzureAuthFile(const std::string& json);

// The client-credentials grant: POST AUTHORITY/TENANT/oauth2/v2.0/token with scope
// RESOURCE.default. UNAUTHENTICATED with Entra ID's error (e.g. invalid_client: AADSTS7000215)
// when refused; UNAVAILABLE when unreachable or 5xx.
absl::StatusOr<AccessToken> AzureClientSecretToken(const std::string& authority_host,
                                                   const AzureClientSecret& credentials,
                                                   const std::string& resource, absl::Time now,
                                                   absl::Duration timeout);

// A managed identity's token: GET IMDS/metadata/identity/oauth2/token?api-version=2018-02-01
// &resource=RESOURCE[&client_id=ID] with Metadata: true.
absl::StatusOr<AccessToken> AzureManagedIdentityToken(const std::string& imds_base,
                                                      const std::string& resource,
                                                      const std::string& client_id, absl::Time now,
                                                      absl::Duration timeout);

// Where to look for Azure credentials.
struct AzureCredentialOptions {
  // Reads an environment variable (empty when unset). Default: std::getenv.
  std::function<std::string(const std::string&)> getenv;
  // An auth file (see ParseAzureAuthFile); empty: $AZURE_AUTH_LOCATION.
  std::string auth_file;
  // Entra ID; empty: $AZURE_AUTHORITY_HOST, else https://login.microsoftonline.com.
  std::string authority_host;
  // The instance metadata service; empty: http://169.254.169.254.
  std::string identity_endpoint;
  std::string resource = kAzureManagementResource;
  absl::Duration timeout = absl::Seconds(10);
  // How long to wait for the metadata service when asking whether this is an Azure VM.
  absl::Duration identity_probe_timeout = absl::Seconds(2);
  absl::Time (*now)() = &absl::Now;
};

// A token source for the first credentials found: AZURE_TENANT_ID, AZURE_CLIENT_ID and
// AZURE_CLIENT_SECRET; then the auth file; then the VM's managed identity (user-assigned when
// AZURE_CLIENT_ID is set alone), asked once now. UNAUTHENTICATED listing what was tried.
absl::StatusOr<std::shared_ptr<CachedTokenSource>> AzureTokenSource(
    const AzureCredentialOptions& options = {});

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_AZURE_AUTH_H_
