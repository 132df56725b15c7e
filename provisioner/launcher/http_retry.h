// The retry loop the Google and Azure providers share: an HTTP request sent again with full-jitter
// backoff while the answer is a transport failure or an error the provider calls retryable, with
// an OAuth 2.0 bearer token when a token source is given (refreshed once, at once, on HTTP 401).
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_HTTP_RETRY_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_HTTP_RETRY_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "provisioner/launcher/access_token.h"
#include "provisioner/launcher/http.h"

namespace spotdnn::launcher {

// How often and how long to wait between attempts.
struct RetryPolicy {
  int max_attempts = 1;
  absl::Duration backoff_base;  // full jitter on base * 2^attempt, capped at backoff_cap
  absl::Duration backoff_cap;
  std::function<void(absl::Duration)> sleep;
};

// What an answer that is not accepted means: its error, whether to try again, and how long the
// server asked us to wait first (zero: the backoff alone).
struct HttpFailure {
  absl::Status status;
  bool retryable = false;
  absl::Duration retry_after = absl::ZeroDuration();
};

// Reads an answer: nullopt accepts it, a failure refuses it.
using HttpAnswerCheck = absl::FunctionRef<std::optional<HttpFailure>(const HttpResponse&)>;

// Sends `request` up to policy.max_attempts times and returns the first accepted answer. With
// `tokens`, each attempt carries "Authorization: Bearer TOKEN": a token error other than
// UNAVAILABLE is returned as is, and a first HTTP 401 invalidates the token and tries again at
// once (a second one is UNAUTHENTICATED naming where the tokens come from). Retryable failures
// and transport errors wait and try again; the others are returned. When the attempts run out:
// UNAVAILABLE "WHAT: gave up after N attempts; last error: ...".
absl::StatusOr<HttpResponse> SendWithRetries(const HttpRequest& request, const std::string& what,
                                             const RetryPolicy& policy, TokenSource* tokens,
                                             HttpAnswerCheck check);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_HTTP_RETRY_H_
