// The launcher's one HTTP transport with retries: every call to a cloud API (EC2, S3, GCE, Azure,
// their price catalogs) goes through SendWithRetries, which sends over the one libcurl wrapper
// (HttpSend, http.h), signs each attempt with a decorator (a bearer token, SigV4), reads each
// answer with the service's retry traits (which answers are transient), and waits between
// attempts with the one backoff policy (base/backoff.h), honouring Retry-After everywhere.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_HTTP_RETRY_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_HTTP_RETRY_H_

#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/backoff.h"
#include "provisioner/launcher/access_token.h"
#include "provisioner/launcher/http.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher {

// Every cloud client (the providers, S3) takes its retries as `base::BackoffOptions retry` in its
// Options, whose defaults are the launcher's: 5 attempts, full jitter from 200 ms doubling,
// capped at 20 s. INVALID_ARGUMENT naming "retry." and the field when they make no sense (at
// least one attempt is required).
absl::Status ValidateCloudRetry(const base::BackoffOptions& retry);

// A decorator that adds credentials to each attempt of a request.
class RequestSigner {
 public:
  virtual ~RequestSigner() = default;
  // Adds the credentials to `request` (called again before every attempt, so that time-stamped
  // signatures and refreshed tokens are current). UNAVAILABLE is retried; other errors end the
  // call as they are.
  virtual absl::Status Sign(HttpRequest& request) = 0;
  // The service answered HTTP 401: forget cached credentials. True when one more attempt at
  // once may succeed (a fresh token); false when nothing would change.
  virtual bool Refresh() { return false; }
  // Where the credentials come from, for the error when a refreshed one is refused too.
  virtual std::string Describe() const { return ""; }
};

// "Authorization: Bearer TOKEN" from a token source (OAuth 2.0: GCE, Azure); refreshed on 401.
class BearerTokenSigner final : public RequestSigner {
 public:
  explicit BearerTokenSigner(TokenSource* tokens) : tokens_(tokens) {}
  absl::Status Sign(HttpRequest& request) override;
  bool Refresh() override;
  std::string Describe() const override { return tokens_->Describe(); }

 private:
  TokenSource* tokens_;
};

// AWS Signature Version 4 in headers (EC2, S3). The path and query signed are the request URL's,
// decoded; the request's headers (with Host, added from the URL when absent) are signed as sent.
class SigV4Signer final : public RequestSigner {
 public:
  // `params.time` is ignored: each attempt is signed at `now()`.
  SigV4Signer(AwsCredentials credentials, SigningParams params, absl::Time (*now)() = &absl::Now)
      : credentials_(std::move(credentials)), params_(std::move(params)), now_(now) {}
  absl::Status Sign(HttpRequest& request) override;

 private:
  AwsCredentials credentials_;
  SigningParams params_;
  absl::Time (*now_)();
};

// What an answer that is not accepted means: its error, and whether it is transient (worth
// another attempt after the backoff and any Retry-After the answer carries).
struct HttpFailure {
  absl::Status status;
  bool retryable = false;
};

// A service's retry traits: nullopt accepts the answer, a failure refuses it.
using HttpAnswerCheck = absl::FunctionRef<std::optional<HttpFailure>(const HttpResponse&)>;

// The server's Retry-After (delta seconds or an HTTP date, relative to `now`); zero when absent
// or unreadable.
absl::Duration RetryAfter(const HttpResponse& response, absl::Time now = absl::Now());

// Sends `request` until an answer is accepted, an answer or a signing error is final, or `retry`
// allows no further attempt. Each attempt is signed by `signer` (may be null). Transport errors
// and retryable failures wait retry.Delay (at least the answer's Retry-After) and try again. A
// first HTTP 401 that the signer can refresh is tried again at once; a second is
// UNAUTHENTICATED naming where the credentials come from. When the attempts run out:
// UNAVAILABLE "WHAT: gave up after N attempts; last error: ...".
absl::StatusOr<HttpResponse> SendWithRetries(const HttpRequest& request, const std::string& what,
                                             const base::BackoffPolicy& retry,
                                             RequestSigner* signer, HttpAnswerCheck check);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_HTTP_RETRY_H_
