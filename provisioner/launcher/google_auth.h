// Google Cloud credentials without a Google SDK: a service account's key file (a JWT signed RS256
// with OpenSSL, exchanged at the key's token_uri for an access token, RFC 7523), or, on a GCE VM,
// the metadata server's token for the VM's service account. Both behind a CachedTokenSource that
// refreshes before expiry. No message holds the private key, a JWT or a token.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_GOOGLE_AUTH_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_GOOGLE_AUTH_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "provisioner/launcher/access_token.h"

namespace spotdnn::launcher {

// The scope the providers ask for (Compute Engine and everything else the account may do).
inline constexpr char kGoogleCloudPlatformScope[] =
    "https://www.googleapis.com/auth/cloud-platform";

// URL-safe base64 without padding (RFC 7515 section 2).
std::string Base64UrlEncode(absl::string_view data);
// Decodes URL-safe base64 with or without padding; INVALID_ARGUMENT on other characters.
absl::StatusOr<std::string> Base64UrlDecode(absl::string_view text);

// RSASSA-PKCS1-v1_5 with SHA-256 (JWS "RS256") of `data` under the PEM private key (PKCS#8 or
// PKCS#1): the raw signature. INVALID_ARGUMENT when the key cannot be read or is not RSA (the
// message never quotes the key).
absl::StatusOr<std::string> SignRs256(absl::string_view data, const std::string& private_key_pem);
// True when `signature` is a valid RS256 signature of `data` under the PEM key (a public key, or
// the public half of a private key).
bool VerifyRs256(absl::string_view data, absl::string_view signature, const std::string& key_pem);
// A compact JWS: BASE64URL(header) "." BASE64URL(payload) "." BASE64URL(RS256 signature), the
// header and payload signed as the given bytes.
absl::StatusOr<std::string> SignJwsRs256(absl::string_view header, absl::string_view payload,
                                         const std::string& private_key_pem);

// What a service account key file (the JSON from `gcloud iam service-accounts keys create`) holds.
struct ServiceAccountKey {
  std::string client_email;
  std::string private_key_id;
  std::string private_key;  // PEM; never printed
  std::string token_uri = "https://oauth2.googleapis.com/token";
  std::string project_id;
};

// Parses a key file's JSON. INVALID_ARGUMENT naming the missing or wrong field (type must be
// "service_account"); never quotes the private key.
absl::StatusOr<ServiceAccountKey> ParseServiceAccountKey(const std::string& json);
// Reads and parses a key file (NOT_FOUND naming the path when it cannot be read).
absl::StatusOr<ServiceAccountKey> ReadServiceAccountKey(const std::string& path);

// The signed assertion a service account trades for an access token: header
// {"alg":"RS256","kid":KEY_ID,"typ":"JWT"}, claims {"aud":TOKEN_URI,"exp":IAT+lifetime,
// "iat":IAT,"iss":EMAIL,"scope":SCOPE} (keys in that order, no spaces), IAT = `now` in seconds.
absl::StatusOr<std::string> ServiceAccountAssertion(const ServiceAccountKey& key,
                                                    const std::string& scope, absl::Time now,
                                                    absl::Duration lifetime = absl::Hours(1));

// Trades an assertion at `token_uri` (grant_type urn:ietf:params:oauth:grant-type:jwt-bearer).
// UNAUTHENTICATED with the endpoint's error (e.g. invalid_grant) when refused; UNAVAILABLE when
// it cannot be reached or answers 5xx.
absl::StatusOr<AccessToken> ExchangeJwtAssertion(const std::string& token_uri,
                                                 const std::string& assertion, absl::Time now,
                                                 absl::Duration timeout);

// The GCE metadata server's token for the VM's default service account:
// GET BASE/computeMetadata/v1/instance/service-accounts/default/token, Metadata-Flavor: Google.
absl::StatusOr<AccessToken> GceMetadataToken(const std::string& metadata_base, absl::Time now,
                                             absl::Duration timeout);

// Where to look for Google credentials.
struct GoogleCredentialOptions {
  // A service account key file; empty: $GOOGLE_APPLICATION_CREDENTIALS, else the metadata server.
  std::string key_file;
  // Reads an environment variable (empty when unset). Default: std::getenv.
  std::function<std::string(const std::string&)> getenv;
  // The metadata server; empty: http://$GCE_METADATA_HOST when set, else
  // http://metadata.google.internal.
  std::string metadata_url;
  std::string scope = kGoogleCloudPlatformScope;
  absl::Duration timeout = absl::Seconds(10);
  // How long to wait for the metadata server when asking whether this is a GCE VM.
  absl::Duration metadata_probe_timeout = absl::Seconds(2);
  absl::Time (*now)() = &absl::Now;
};

// A token source for the first credentials found: the key file, then
// $GOOGLE_APPLICATION_CREDENTIALS, then the metadata server (asked once now, so that a machine
// without credentials is told at once). UNAUTHENTICATED listing what was tried.
absl::StatusOr<std::shared_ptr<CachedTokenSource>> GoogleTokenSource(
    const GoogleCredentialOptions& options = {});

// A token source over a service account key (what GoogleTokenSource builds for a key file).
std::shared_ptr<CachedTokenSource> ServiceAccountTokenSource(ServiceAccountKey key,
                                                             const std::string& scope,
                                                             absl::Duration timeout,
                                                             absl::Time (*now)() = &absl::Now,
                                                             const std::string& origin = "");

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_GOOGLE_AUTH_H_
