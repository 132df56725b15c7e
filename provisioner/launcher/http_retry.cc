#include "provisioner/launcher/http_retry.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace spotdnn::launcher {
namespace {

// The query of `url` as decoded key/value pairs, in order.
std::vector<std::pair<std::string, std::string>> DecodedQuery(absl::string_view url) {
  std::vector<std::pair<std::string, std::string>> out;
  const size_t question = url.find('?');
  if (question == absl::string_view::npos) return out;
  absl::string_view query = url.substr(question + 1);
  query = query.substr(0, query.find('#'));
  for (absl::string_view pair : absl::StrSplit(query, '&', absl::SkipEmpty())) {
    const size_t equals = pair.find('=');
    out.emplace_back(UriDecode(pair.substr(0, equals)),
                     equals == absl::string_view::npos ? "" : UriDecode(pair.substr(equals + 1)));
  }
  return out;
}

}  // namespace

absl::Status ValidateCloudRetry(const base::BackoffOptions& retry) {
  if (retry.max_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("retry.max_attempts = ", retry.max_attempts, ": must be >= 1"));
  }
  return base::ValidateBackoff(retry, "retry");
}

absl::Status BearerTokenSigner::Sign(HttpRequest& request) {
  absl::StatusOr<std::string> token = tokens_->Token();
  if (!token.ok()) return token.status();
  request.headers.insert(request.headers.begin(), {"Authorization", "Bearer " + *token});
  return absl::OkStatus();
}

bool BearerTokenSigner::Refresh() {
  tokens_->Invalidate();
  return true;
}

absl::Status SigV4Signer::Sign(HttpRequest& request) {
  const std::string& url = request.url;
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("url = \"", UrlForMessages(url), "\": not an absolute URL to sign"));
  }
  const size_t path_start = url.find_first_of("/?#", scheme + 3);
  const std::string authority = url.substr(scheme + 3, path_start - scheme - 3);
  std::string path = path_start == std::string::npos || url[path_start] != '/'
                         ? "/"
                         : url.substr(path_start, url.find_first_of("?#", path_start) - path_start);
  HttpRequestToSign to_sign{.method = request.method,
                            .path = UriDecode(path),
                            .query = DecodedQuery(url),
                            .headers = request.headers,
                            .body = request.body};
  bool has_host = false;
  for (const auto& [name, value] : to_sign.headers) {
    has_host |= absl::EqualsIgnoreCase(name, "host");
  }
  if (!has_host) {
    to_sign.headers.insert(to_sign.headers.begin(), {"Host", authority});
    request.headers.insert(request.headers.begin(), {"Host", authority});
  }
  SigningParams params = params_;
  params.time = now_();
  absl::StatusOr<SignedParts> parts = SignWithHeaders(to_sign, credentials_, params);
  if (!parts.ok()) return parts.status();
  request.headers.insert(request.headers.end(), parts->additions.begin(), parts->additions.end());
  return absl::OkStatus();
}

absl::Duration RetryAfter(const HttpResponse& response, absl::Time now) {
  const std::string text(absl::StripAsciiWhitespace(response.Header("retry-after")));
  if (text.empty()) return absl::ZeroDuration();
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    return seconds > 0 ? absl::Seconds(seconds) : absl::ZeroDuration();
  }
  // An HTTP date (RFC 9110 IMF-fixdate): "Wed, 21 Oct 2015 07:28:00 GMT".
  absl::Time when;
  std::string error;
  if (absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", text, absl::UTCTimeZone(), &when, &error) &&
      when > now) {
    return when - now;
  }
  return absl::ZeroDuration();
}

absl::StatusOr<HttpResponse> SendWithRetries(const HttpRequest& request, const std::string& what,
                                             const base::BackoffPolicy& retry,
                                             RequestSigner* signer, HttpAnswerCheck check) {
  base::Backoff backoff(retry);
  absl::Status last;
  bool refreshed = false;
  while (true) {
    absl::Duration retry_after = absl::ZeroDuration();
    bool at_once = false;
    HttpRequest sent = request;
    absl::Status signed_ok = signer == nullptr ? absl::OkStatus() : signer->Sign(sent);
    if (!signed_ok.ok()) {
      if (!absl::IsUnavailable(signed_ok)) return signed_ok;
      last = signed_ok;
    } else if (absl::StatusOr<HttpResponse> response = HttpSend(sent); !response.ok()) {
      last = response.status();
    } else {
      std::optional<HttpFailure> failure = check(*response);
      if (!failure.has_value()) return response;
      last = failure->status;
      const bool unauthorized = signer != nullptr && response->status == 401;
      if (unauthorized && refreshed) {
        return absl::UnauthenticatedError(absl::StrCat(failure->status.message(),
                                                       "; a fresh token from ", signer->Describe(),
                                                       " was refused too"));
      }
      if (unauthorized && signer->Refresh()) {
        // An expired or revoked token: fetch a fresh one and try again at once.
        refreshed = true;
        at_once = true;
      } else if (!failure->retryable) {
        return failure->status;
      } else {
        retry_after = RetryAfter(*response);
      }
    }
    if (at_once) {
      if (backoff.FailedRetryNow()) continue;
    } else if (std::optional<absl::Duration> wait = backoff.Failed(retry_after); wait) {
      retry.Sleep(*wait);
      continue;
    }
    return absl::UnavailableError(absl::StrCat(what, ": gave up after ", backoff.attempts(),
                                               " attempts; last error: ", last.message()));
  }
}

}  // namespace spotdnn::launcher
