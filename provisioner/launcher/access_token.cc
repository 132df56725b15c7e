#include "provisioner/launcher/access_token.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace spotdnn::launcher {

CachedTokenSource::CachedTokenSource(std::string description, Fetch fetch, absl::Duration margin,
                                     absl::Time (*now)())
    : description_(std::move(description)), fetch_(std::move(fetch)), margin_(margin), now_(now) {}

absl::StatusOr<std::string> CachedTokenSource::Token() {
  std::lock_guard<std::mutex> lock(mu_);
  const absl::Time now = now_();
  if (!cached_.token.empty() && now < refresh_at_) return cached_.token;
  absl::StatusOr<AccessToken> fresh = fetch_();
  ++fetches_;
  if (!fresh.ok()) return fresh.status();
  if (fresh->token.empty()) {
    return absl::UnauthenticatedError(absl::StrCat(description_, ": an empty access token"));
  }
  cached_ = *std::move(fresh);
  const absl::Duration lifetime = cached_.expires_at - now;
  refresh_at_ = cached_.expires_at - std::min(margin_, lifetime / 2);
  return cached_.token;
}

void CachedTokenSource::Invalidate() {
  std::lock_guard<std::mutex> lock(mu_);
  cached_ = AccessToken{};
  refresh_at_ = absl::InfinitePast();
}

int CachedTokenSource::fetches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fetches_;
}

absl::StatusOr<AccessToken> ParseTokenResponse(const std::string& body, absl::Time now,
                                               const std::string& what) {
  nlohmann::json doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) {
    return absl::UnauthenticatedError(
        absl::StrCat(what, ": the token response is not a JSON object (", body.size(), " bytes)"));
  }
  auto token = doc.find("access_token");
  if (token == doc.end() || !token->is_string() || token->get<std::string>().empty()) {
    return absl::UnauthenticatedError(
        absl::StrCat(what, ": the token response has no access_token"));
  }
  double expires_in = 0;
  auto expires = doc.find("expires_in");
  if (expires != doc.end() && expires->is_number()) {
    expires_in = expires->get<double>();
  } else if (expires != doc.end() && expires->is_string()) {
    (void)absl::SimpleAtod(expires->get<std::string>(), &expires_in);
  }
  if (expires_in <= 0) {
    return absl::UnauthenticatedError(
        absl::StrCat(what, ": the token response has no positive expires_in"));
  }
  return AccessToken{.token = token->get<std::string>(),
                     .expires_at = now + absl::Seconds(expires_in)};
}

}  // namespace spotdnn::launcher
