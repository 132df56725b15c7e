// AWS Signature Version 4 (AWS4-HMAC-SHA256): canonical request, string to sign and signature,
// carried in headers (Authorization) or in the query string (presigned). Pure computation over
// OpenSSL's SHA-256 and HMAC; nothing here logs, and no result or error holds the secret key.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_SIGV4_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_SIGV4_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace spotdnn::launcher {

// AWS credentials. The secret key and session token never appear in any message this library
// builds; DebugString shows the access key id only.
struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // empty for long-term keys
  std::string source;         // where they came from ("environment", "profile default", ...)

  // "AKID… (from SOURCE)", never the secret or the token.
  std::string DebugString() const;
};

// An HTTP request to sign. Header names keep their case; the query holds decoded key/value pairs
// in the order given.
struct HttpRequestToSign {
  std::string method = "GET";
  std::string path = "/";  // raw (not percent-encoded) path
  std::vector<std::pair<std::string, std::string>> query;
  std::vector<std::pair<std::string, std::string>> headers;  // must include Host
  std::string body;
};

// How to sign.
struct SigningParams {
  std::string region;
  std::string service;
  absl::Time time;
  bool normalize_path = true;       // remove "." and ".." segments and repeated slashes (not S3)
  bool sign_body = false;           // add x-amz-content-sha256 (header signing)
  bool omit_session_token = false;  // add the token after signing instead of signing it
  int expires_seconds = 3600;       // query signing: X-Amz-Expires
};

// What signing produced: the intermediate texts (for tests and debugging; no secret in them) and
// what to add to the request.
struct SignedParts {
  std::string canonical_request;
  std::string string_to_sign;
  std::string signature;  // lowercase hex
  // Header signing: headers to add (X-Amz-Date, X-Amz-Security-Token, x-amz-content-sha256,
  // Authorization). Query signing: query parameters to add, in the order to send them.
  std::vector<std::pair<std::string, std::string>> additions;
};

// Signs with an Authorization header. INVALID_ARGUMENT when the Host header, the access key or
// the secret key is missing, or the method is empty.
absl::StatusOr<SignedParts> SignWithHeaders(const HttpRequestToSign& request,
                                            const AwsCredentials& credentials,
                                            const SigningParams& params);
// Signs in the query string (a presigned request).
absl::StatusOr<SignedParts> SignWithQuery(const HttpRequestToSign& request,
                                          const AwsCredentials& credentials,
                                          const SigningParams& params);

// RFC 3986 percent-encoding as SigV4 wants it: unreserved characters kept, every other byte as
// %XY (uppercase); "/" kept when `keep_slash`.
std::string UriEncode(absl::string_view text, bool keep_slash);
// Decodes %XY escapes (and nothing else); invalid escapes stay as they are.
std::string UriDecode(absl::string_view text);
// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(absl::string_view data);
// Raw HMAC-SHA256 of `data` under `key`.
std::string HmacSha256(absl::string_view key, absl::string_view data);
// The x-www-form-urlencoded body (or query) of `params`, encoded with UriEncode, in order.
std::string FormEncode(const std::vector<std::pair<std::string, std::string>>& params);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_SIGV4_H_
