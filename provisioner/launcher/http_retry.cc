#include "provisioner/launcher/http_retry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "provisioner/launcher/vm_script.h"

namespace spotdnn::launcher {

absl::StatusOr<HttpResponse> SendWithRetries(const HttpRequest& request, const std::string& what,
                                             const RetryPolicy& policy, TokenSource* tokens,
                                             HttpAnswerCheck check) {
  absl::Status last;
  bool refreshed = false;
  absl::Duration wait;
  for (int attempt = 0; attempt < policy.max_attempts; ++attempt) {
    if (attempt > 0 && wait > absl::ZeroDuration()) policy.sleep(wait);
    wait = FullJitterBackoff(policy.backoff_base, policy.backoff_cap, attempt + 1);
    HttpRequest sent = request;
    if (tokens != nullptr) {
      absl::StatusOr<std::string> token = tokens->Token();
      if (!token.ok()) {
        if (!absl::IsUnavailable(token.status())) return token.status();
        last = token.status();
        continue;
      }
      sent.headers.insert(sent.headers.begin(), {"Authorization", "Bearer " + *token});
    }
    absl::StatusOr<HttpResponse> response = HttpSend(sent);
    if (!response.ok()) {
      last = response.status();
      continue;
    }
    std::optional<HttpFailure> failure = check(*response);
    if (!failure.has_value()) return response;
    if (tokens != nullptr && response->status == 401) {
      if (!refreshed) {
        // An expired or revoked token: fetch a fresh one and try again at once.
        tokens->Invalidate();
        refreshed = true;
        wait = absl::ZeroDuration();
        last = failure->status;
        continue;
      }
      return absl::UnauthenticatedError(absl::StrCat(failure->status.message(),
                                                     "; a fresh token from ", tokens->Describe(),
                                                     " was refused too"));
    }
    if (!failure->retryable) return failure->status;
    last = failure->status;
    wait = std::max(wait, failure->retry_after);
  }
  return absl::UnavailableError(absl::StrCat(what, ": gave up after ", policy.max_attempts,
                                             " attempts; last error: ", last.message()));
}

}  // namespace spotdnn::launcher
