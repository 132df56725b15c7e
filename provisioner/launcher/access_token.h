// OAuth 2.0 bearer tokens for the Google and Azure providers: a token source hands out a valid
// access token, fetching a new one before the cached one expires, and forgets it when a service
// refused it (HTTP 401) so that the next call fetches a fresh one. Tokens never appear in any
// message; a source describes itself by where its tokens come from.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_ACCESS_TOKEN_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_ACCESS_TOKEN_H_

#include <functional>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace spotdnn::launcher {

// An access token and when it stops being accepted.
struct AccessToken {
  std::string token;
  absl::Time expires_at = absl::InfinitePast();
};

// Where a provider gets its bearer tokens. Thread-safe.
class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // A token that is valid now and for a while yet.
  virtual absl::StatusOr<std::string> Token() = 0;
  // Forgets the cached token (the service refused it): the next Token() fetches a new one.
  virtual void Invalidate() = 0;
  // Where the tokens come from, e.g. "service account a@p.iam.gserviceaccount.com (key file
  // /k.json)"; never a secret.
  virtual std::string Describe() const = 0;
};

// A TokenSource over a fetch function, caching its token. A token is refreshed once the time left
// is under `margin`, or under half its lifetime when that is shorter (a token that lives 60 s is
// used for 30 s).
class CachedTokenSource final : public TokenSource {
 public:
  using Fetch = std::function<absl::StatusOr<AccessToken>()>;

  CachedTokenSource(std::string description, Fetch fetch, absl::Duration margin = absl::Minutes(5),
                    absl::Time (*now)() = &absl::Now);

  // The cached token, or a new one from the fetch function (its error as it is).
  absl::StatusOr<std::string> Token() override;
  void Invalidate() override;
  std::string Describe() const override { return description_; }
  // How many times a token was fetched (for tests).
  int fetches() const;

 private:
  const std::string description_;
  const Fetch fetch_;
  const absl::Duration margin_;
  absl::Time (*const now_)();
  mutable std::mutex mu_;
  AccessToken cached_;                            // guarded by mu_
  absl::Time refresh_at_ = absl::InfinitePast();  // guarded by mu_
  int fetches_ = 0;                               // guarded by mu_
};

// A source that always hands out `token` (tests, and tokens a caller obtained elsewhere).
class StaticTokenSource final : public TokenSource {
 public:
  explicit StaticTokenSource(std::string token, std::string description = "a fixed token")
      : token_(std::move(token)), description_(std::move(description)) {}
  absl::StatusOr<std::string> Token() override { return token_; }
  void Invalidate() override {}
  std::string Describe() const override { return description_; }

 private:
  std::string token_;
  std::string description_;
};

// Parses an OAuth 2.0 token response ({"access_token": ..., "expires_in": N}, N a number or a
// numeric string as Azure's metadata service sends it) received at `now`. UNAUTHENTICATED naming
// `what` when the document holds no token; the token itself is never quoted.
absl::StatusOr<AccessToken> ParseTokenResponse(const std::string& body, absl::Time now,
                                               const std::string& what);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_ACCESS_TOKEN_H_
