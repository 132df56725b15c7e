// AWS credentials: the shared credentials file, the environment and the instance role (IMDSv2),
// resolved in the order the AWS SDKs use.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "provisioner/launcher/aws_provider.h"
#include "provisioner/launcher/http.h"

namespace spotdnn::launcher {
namespace {

// A GET or PUT to the instance metadata service (the instance role's credentials).
absl::StatusOr<std::string> MetadataRequest(const std::string& url, bool put,
                                            const std::string& header, absl::Duration timeout) {
  const size_t colon = header.find(':');
  // A PUT goes with an empty body and Content-Length: 0, as the metadata service expects.
  absl::StatusOr<HttpResponse> response =
      HttpSend({.method = put ? "PUT" : "GET",
                .url = url,
                .headers = {{header.substr(0, colon),
                             std::string(absl::StripAsciiWhitespace(header.substr(colon + 1)))}},
                .timeout = timeout});
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(absl::StrCat(url, ": HTTP ", response->status));
  }
  return std::move(response->body);
}

absl::StatusOr<AwsCredentials> InstanceRoleCredentials(const std::string& endpoint,
                                                       absl::Duration timeout) {
  absl::StatusOr<std::string> token = MetadataRequest(
      endpoint + "/latest/api/token", true, "X-aws-ec2-metadata-token-ttl-seconds: 21600", timeout);
  if (!token.ok()) return token.status();
  std::string auth = "X-aws-ec2-metadata-token: " + *token;
  const std::string base = endpoint + "/latest/meta-data/iam/security-credentials/";
  absl::StatusOr<std::string> roles = MetadataRequest(base, false, auth, timeout);
  if (!roles.ok()) return roles.status();
  std::string role(absl::StripAsciiWhitespace(roles->substr(0, roles->find('\n'))));
  if (role.empty()) return absl::NotFoundError("no instance role attached");
  absl::StatusOr<std::string> doc = MetadataRequest(base + role, false, auth, timeout);
  if (!doc.ok()) return doc.status();
  nlohmann::json json = nlohmann::json::parse(*doc, nullptr, /*allow_exceptions=*/false);
  auto text = [&json](const char* key) {
    auto it = json.find(key);
    return it != json.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (!json.is_object() || text("AccessKeyId").empty() || text("SecretAccessKey").empty()) {
    return absl::UnavailableError(
        absl::StrCat("instance role ", role, ": the credentials document is not readable"));
  }
  AwsCredentials credentials;
  credentials.access_key_id = text("AccessKeyId");
  credentials.secret_access_key = text("SecretAccessKey");
  credentials.session_token = text("Token");
  credentials.source = absl::StrCat("instance role ", role);
  return credentials;
}

}  // namespace

absl::StatusOr<AwsCredentials> ParseCredentialsFile(const std::string& text,
                                                    const std::string& profile) {
  std::map<std::string, std::string> keys;
  bool in_profile = false;
  bool found = false;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    std::string line(absl::StripAsciiWhitespace(raw));
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      std::string name(absl::StripAsciiWhitespace(line.substr(1, line.size() - 2)));
      if (absl::StartsWith(name, "profile "))
        name = std::string(absl::StripAsciiWhitespace(name.substr(8)));
      in_profile = name == profile;
      found = found || in_profile;
      continue;
    }
    if (!in_profile) continue;
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    keys[absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)))] =
        std::string(absl::StripAsciiWhitespace(line.substr(eq + 1)));
  }
  if (!found) return absl::NotFoundError(absl::StrCat("profile \"", profile, "\" not found"));
  AwsCredentials credentials;
  credentials.access_key_id = keys["aws_access_key_id"];
  credentials.secret_access_key = keys["aws_secret_access_key"];
  credentials.session_token = keys["aws_session_token"];
  credentials.source = absl::StrCat("profile ", profile);
  if (credentials.access_key_id.empty() || credentials.secret_access_key.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile \"", profile, "\": aws_access_key_id and aws_secret_access_key are both needed"));
  }
  return credentials;
}

absl::StatusOr<AwsCredentials> ResolveAwsCredentials(const CredentialSources& sources) {
  auto getenv = sources.getenv ? sources.getenv : [](const std::string& name) {
    const char* value = std::getenv(name.c_str());
    return std::string(value == nullptr ? "" : value);
  };
  std::vector<std::string> tried;
  std::string key = getenv("AWS_ACCESS_KEY_ID");
  std::string secret = getenv("AWS_SECRET_ACCESS_KEY");
  if (!key.empty() && !secret.empty()) {
    return AwsCredentials{.access_key_id = key,
                          .secret_access_key = secret,
                          .session_token = getenv("AWS_SESSION_TOKEN"),
                          .source = "environment"};
  }
  tried.push_back(key.empty() ? "AWS_ACCESS_KEY_ID is not set"
                              : "AWS_SECRET_ACCESS_KEY is not set");

  std::string file = sources.credentials_file;
  if (file.empty()) file = getenv("AWS_SHARED_CREDENTIALS_FILE");
  if (file.empty() && !getenv("HOME").empty()) file = getenv("HOME") + "/.aws/credentials";
  std::string profile = sources.profile;
  if (profile.empty()) profile = getenv("AWS_PROFILE");
  if (profile.empty()) profile = "default";
  if (!file.empty()) {
    std::ifstream in(file);
    if (in) {
      std::stringstream text;
      text << in.rdbuf();
      absl::StatusOr<AwsCredentials> from_file = ParseCredentialsFile(text.str(), profile);
      if (from_file.ok()) return from_file;
      tried.push_back(absl::StrCat(file, ": ", from_file.status().message()));
    } else {
      tried.push_back(absl::StrCat(file, " does not exist"));
    }
  }

  if (absl::AsciiStrToLower(getenv("AWS_EC2_METADATA_DISABLED")) != "true") {
    std::string endpoint = sources.metadata_endpoint;
    if (endpoint.empty()) endpoint = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    if (endpoint.empty()) endpoint = "http://169.254.169.254";
    while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
    absl::StatusOr<AwsCredentials> role =
        InstanceRoleCredentials(endpoint, sources.metadata_timeout);
    if (role.ok()) return role;
    tried.push_back(absl::StrCat("instance role: ", role.status().message()));
  }
  return absl::UnauthenticatedError(
      absl::StrCat("no AWS credentials found (", absl::StrJoin(tried, "; "), ")"));
}

}  // namespace spotdnn::launcher
