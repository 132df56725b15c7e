// A minimal Amazon S3 client: PutObject, GetObject and ListObjectsV2 (every page, following
// continuation tokens) over the launcher's HTTP transport (http_retry.h), signed with SigV4
// (sigv4.h) with the payload's SHA-256 in x-amz-content-sha256. Virtual-hosted URLs on AWS
// (https://BUCKET.s3.REGION.amazonaws.com/KEY; path-style for bucket names with dots), path-style
// URLs (ENDPOINT/BUCKET/KEY) on an endpoint override (other S3-compatible stores, tests). S3
// errors map to statuses: NoSuchKey and NoSuchBucket -> NOT_FOUND, AccessDenied ->
// PERMISSION_DENIED naming the s3: action, InvalidAccessKeyId, SignatureDoesNotMatch and expired
// tokens -> UNAUTHENTICATED, 5xx, SlowDown and transport failures -> retried with backoff
// (Retry-After honoured), then UNAVAILABLE. Messages never hold the secret key or the session
// token.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_S3_CLIENT_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_S3_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher {

// A bucket and a key prefix, from s3://BUCKET[/PREFIX].
struct S3Location {
  std::string bucket;
  std::string prefix;  // no leading or trailing '/'; may be empty
};

// Parses s3://BUCKET[/PREFIX]. INVALID_ARGUMENT naming `field` and the text for another scheme,
// an empty or invalid bucket name (3-63 of a-z 0-9 . -).
absl::StatusOr<S3Location> ParseS3Uri(absl::string_view field, absl::string_view uri);

// One object of a listing.
struct S3Object {
  std::string key;
  int64_t size = 0;
  std::string etag;  // as S3 gives it (quoted)
};

// The client. Thread-compatible (one call at a time per client is not required: calls share no
// state but the options).
class S3Client {
 public:
  struct Options {
    std::string region = "us-east-1";
    // Empty: the region's AWS endpoint, virtual-hosted. Set (http(s)://HOST[:PORT]): path-style.
    std::string endpoint_url;
    AwsCredentials credentials;
    absl::Duration request_timeout = absl::Seconds(60);
    // Retries of 5xx, SlowDown and transport failures: the launcher's shared backoff, 4 attempts.
    base::BackoffOptions retry{.max_attempts = 4};
    absl::Time (*now)() = &absl::Now;
  };

  // INVALID_ARGUMENT for a bad endpoint URL or region, or credentials without keys.
  static absl::StatusOr<std::unique_ptr<S3Client>> Create(Options options);

  // Stores `body` as BUCKET/KEY (replacing it).
  absl::Status PutObject(const std::string& bucket, const std::string& key,
                         const std::string& body);
  // The object's bytes.
  absl::StatusOr<std::string> GetObject(const std::string& bucket, const std::string& key);
  // Every object whose key starts with `prefix`, in key order (all pages).
  absl::StatusOr<std::vector<S3Object>> ListObjects(const std::string& bucket,
                                                    const std::string& prefix);

  // The URL a request for BUCKET/KEY goes to (without the query).
  std::string ObjectUrl(const std::string& bucket, const std::string& key) const;

 private:
  explicit S3Client(Options options) : options_(std::move(options)), retry_(options_.retry) {}
  // Signs and sends one request, retrying what is worth retrying. `action` ("s3:GetObject")
  // and `what` ("s3://b/k") name it in errors.
  absl::StatusOr<std::string> Call(const std::string& method, const std::string& bucket,
                                   const std::string& key,
                                   const std::vector<std::pair<std::string, std::string>>& query,
                                   const std::string& body, const std::string& action);

  Options options_;
  base::BackoffPolicy retry_;
};

// Maps an S3 error (HTTP status, <Error><Code> and <Message>) of `action` on `what` to a status.
absl::Status S3ErrorToStatus(const std::string& action, const std::string& what, long http_status,
                             const std::string& code, const std::string& message);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_S3_CLIENT_H_
