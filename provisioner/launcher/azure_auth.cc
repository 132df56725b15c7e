#include "provisioner/launcher/azure_auth.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/http.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;

std::string FieldText(const json& doc, const char* key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string TrimSlash(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// A tenant goes into the token URL's path: a GUID or a domain name, nothing else.
absl::Status ValidateTenant(const std::string& tenant) {
  if (tenant.empty()) return absl::InvalidArgumentError("the tenant id is empty");
  for (char c : tenant) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tenant = \"", tenant, "\": expected a tenant GUID or a domain such as contoso.com"));
    }
  }
  return absl::OkStatus();
}

std::string ScopeOf(const std::string& resource) {
  return absl::StrCat(TrimSlash(resource), "/.default");
}

}  // namespace

std::string AzureClientSecret::DebugString() const {
  return absl::StrCat("client ", client_id, " in tenant ", tenant_id,
                      source.empty() ? "" : " (from " + source + ")");
}

absl::StatusOr<AzureClientSecret> ParseAzureAuthFile(const std::string& text) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return absl::InvalidArgumentError("Azure auth file: not a JSON object");
  AzureClientSecret out;
  // --sdk-auth's names first, then create-for-rbac's.
  out.client_id = FieldText(doc, "clientId");
  if (out.client_id.empty()) out.client_id = FieldText(doc, "appId");
  out.client_secret = FieldText(doc, "clientSecret");
  if (out.client_secret.empty()) out.client_secret = FieldText(doc, "password");
  out.tenant_id = FieldText(doc, "tenantId");
  if (out.tenant_id.empty()) out.tenant_id = FieldText(doc, "tenant");
  out.authority_host = TrimSlash(FieldText(doc, "activeDirectoryEndpointUrl"));
  if (out.client_id.empty() || out.client_secret.empty() || out.tenant_id.empty()) {
    std::vector<std::string> missing;
    if (out.client_id.empty()) missing.push_back("clientId (or appId)");
    if (out.client_secret.empty()) missing.push_back("clientSecret (or password)");
    if (out.tenant_id.empty()) missing.push_back("tenantId (or tenant)");
    return absl::InvalidArgumentError(
        absl::StrCat("Azure auth file: ", absl::StrJoin(missing, ", "), " missing"));
  }
  if (absl::Status s = ValidateTenant(out.tenant_id); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Azure auth file: ", s.message()));
  }
  return out;
}

absl::StatusOr<AccessToken> AzureClientSecretToken(const std::string& authority_host,
                                                   const AzureClientSecret& credentials,
                                                   const std::string& resource, absl::Time now,
                                                   absl::Duration timeout) {
  if (absl::Status s = ValidateTenant(credentials.tenant_id); !s.ok()) return s;
  const std::string url =
      absl::StrCat(TrimSlash(authority_host), "/", credentials.tenant_id, "/oauth2/v2.0/token");
  absl::StatusOr<HttpResponse> response =
      HttpSend({.method = "POST",
                .url = url,
                .headers = {{"Content-Type", "application/x-www-form-urlencoded"}},
                .body = QueryString({{"grant_type", "client_credentials"},
                                     {"client_id", credentials.client_id},
                                     {"client_secret", credentials.client_secret},
                                     {"scope", ScopeOf(resource)}}),
                .timeout = timeout});
  if (!response.ok()) return response.status();
  const std::string where = absl::StrCat("Microsoft Entra ID ", url);
  if (response->status == 200) return ParseTokenResponse(response->body, now, where);
  json error = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  std::string what = absl::StrCat("HTTP ", response->status);
  if (error.is_object() && !FieldText(error, "error").empty()) {
    std::string description = FieldText(error, "error_description");
    // The description's first line says it; the rest is trace and correlation ids.
    description = description.substr(0, description.find_first_of("\r\n"));
    what = absl::StrCat(FieldText(error, "error"), description.empty() ? "" : ": ", description);
  }
  if (response->status >= 500 || response->status == 429) {
    return absl::UnavailableError(absl::StrCat(where, ": ", what));
  }
  return absl::UnauthenticatedError(
      absl::StrCat(where, " refused ", credentials.DebugString(), ": ", what));
}

absl::StatusOr<AccessToken> AzureManagedIdentityToken(const std::string& imds_base,
                                                      const std::string& resource,
                                                      const std::string& client_id, absl::Time now,
                                                      absl::Duration timeout) {
  std::vector<std::pair<std::string, std::string>> query = {{"api-version", "2018-02-01"},
                                                            {"resource", resource}};
  if (!client_id.empty()) query.emplace_back("client_id", client_id);
  const std::string base = absl::StrCat(TrimSlash(imds_base), "/metadata/identity/oauth2/token");
  absl::StatusOr<HttpResponse> response = HttpSend({.url = base + "?" + QueryString(query),
                                                    .headers = {{"Metadata", "true"}},
                                                    .timeout = timeout});
  if (!response.ok()) return response.status();
  const std::string where = absl::StrCat("Azure instance metadata service ", base);
  if (response->status == 200) return ParseTokenResponse(response->body, now, where);
  json error = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
  std::string what = absl::StrCat("HTTP ", response->status);
  if (error.is_object() && !FieldText(error, "error").empty()) {
    what = absl::StrCat(FieldText(error, "error"), ": ", FieldText(error, "error_description"));
  }
  if (response->status >= 500 || response->status == 429) {
    return absl::UnavailableError(absl::StrCat(where, ": ", what));
  }
  return absl::UnauthenticatedError(
      absl::StrCat(where, ": ", what, " (does the VM have a managed identity",
                   client_id.empty() ? "" : " with client id " + client_id, "?)"));
}

absl::StatusOr<std::shared_ptr<CachedTokenSource>> AzureTokenSource(
    const AzureCredentialOptions& options) {
  auto getenv = options.getenv ? options.getenv : [](const std::string& name) {
    const char* value = std::getenv(name.c_str());
    return std::string(value == nullptr ? "" : value);
  };
  std::string authority = options.authority_host;
  if (authority.empty()) authority = getenv("AZURE_AUTHORITY_HOST");
  if (authority.empty()) authority = "https://login.microsoftonline.com";
  const std::string resource = options.resource;
  const absl::Duration timeout = options.timeout;
  absl::Time (*now)() = options.now;
  auto client_secret_source = [&](AzureClientSecret credentials) {
    const std::string host = credentials.authority_host.empty() ||
                                     !options.authority_host.empty() ||
                                     !getenv("AZURE_AUTHORITY_HOST").empty()
                                 ? authority
                                 : credentials.authority_host;
    const std::string description = credentials.DebugString();
    return std::make_shared<CachedTokenSource>(
        description,
        [credentials = std::move(credentials), host, resource, timeout, now]() {
          return AzureClientSecretToken(host, credentials, resource, now(), timeout);
        },
        absl::Minutes(5), now);
  };

  std::vector<std::string> tried;
  const std::string tenant = getenv("AZURE_TENANT_ID");
  const std::string client = getenv("AZURE_CLIENT_ID");
  const std::string secret = getenv("AZURE_CLIENT_SECRET");
  if (!tenant.empty() && !client.empty() && !secret.empty()) {
    if (absl::Status s = ValidateTenant(tenant); !s.ok()) {
      return absl::UnauthenticatedError(absl::StrCat("AZURE_TENANT_ID: ", s.message()));
    }
    return client_secret_source({.tenant_id = tenant,
                                 .client_id = client,
                                 .client_secret = secret,
                                 .source = "environment"});
  }
  tried.push_back("AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET are not all set");

  std::string file = options.auth_file;
  if (file.empty()) file = getenv("AZURE_AUTH_LOCATION");
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) {
      return absl::UnauthenticatedError(
          absl::StrCat("Azure auth file \"", file, "\" cannot be read"));
    }
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<AzureClientSecret> credentials = ParseAzureAuthFile(text.str());
    if (!credentials.ok()) {
      return absl::UnauthenticatedError(absl::StrCat(file, ": ", credentials.status().message()));
    }
    credentials->source = "auth file " + file;
    return client_secret_source(*std::move(credentials));
  }
  tried.push_back("no auth file given and AZURE_AUTH_LOCATION is not set");

  const std::string imds =
      options.identity_endpoint.empty() ? "http://169.254.169.254" : options.identity_endpoint;
  // AZURE_CLIENT_ID alone names a user-assigned identity, as the Azure SDKs read it.
  const std::string identity_client = secret.empty() ? client : "";
  absl::StatusOr<AccessToken> probe = AzureManagedIdentityToken(
      imds, resource, identity_client, now(), options.identity_probe_timeout);
  if (probe.ok()) {
    return std::make_shared<CachedTokenSource>(
        absl::StrCat("the VM's managed identity",
                     identity_client.empty() ? "" : " " + identity_client, " (", imds, ")"),
        [imds, resource, identity_client, timeout, now]() {
          return AzureManagedIdentityToken(imds, resource, identity_client, now(), timeout);
        },
        absl::Minutes(5), now);
  }
  tried.push_back(absl::StrCat("managed identity: ", probe.status().message()));
  return absl::UnauthenticatedError(absl::StrCat(
      "no Azure credentials found (", absl::StrJoin(tried, "; "),
      "): set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET, give an auth file "
      "(AZURE_AUTH_LOCATION), or run on an Azure VM with a managed identity"));
}

}  // namespace spotdnn::launcher
