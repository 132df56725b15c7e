#include "base/backoff.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace spotdnn::base {
namespace {

double DefaultRandom() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace

absl::Status ValidateBackoff(const BackoffOptions& options, const char* field) {
  if (options.max_attempts < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ".max_attempts = ", options.max_attempts,
                                                   ": must be >= 1, or 0 for no limit"));
  }
  if (options.initial <= absl::ZeroDuration() || options.max < options.initial) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".initial = ", absl::FormatDuration(options.initial), ", ", field,
                     ".max = ", absl::FormatDuration(options.max), ": need 0 < initial <= max"));
  }
  if (!(options.multiplier >= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".multiplier = ", options.multiplier, ": must be >= 1"));
  }
  return absl::OkStatus();
}

BackoffPolicy::BackoffPolicy(BackoffOptions options) : options_(std::move(options)) {
  if (!options_.sleep) options_.sleep = [](absl::Duration d) { absl::SleepFor(d); };
  if (!options_.random) options_.random = &DefaultRandom;
}

absl::Duration BackoffPolicy::Ceiling(int failures) const {
  const int n = std::max(failures, 1) - 1;
  // Past the cap the product only grows: stop multiplying there (and before it overflows).
  const double factor = std::pow(options_.multiplier, std::min(n, 1000));
  const absl::Duration ceiling = options_.initial * factor;
  return std::min(ceiling, options_.max);
}

absl::Duration BackoffPolicy::Delay(int failures, absl::Duration retry_after) const {
  const absl::Duration ceiling = Ceiling(failures);
  absl::Duration wait = ceiling;
  switch (options_.jitter) {
    case Jitter::kNone:
      break;
    case Jitter::kEqual:
      wait = ceiling / 2 + (ceiling / 2) * options_.random();
      break;
    case Jitter::kFull:
      wait = ceiling * options_.random();
      break;
  }
  return std::max(wait, std::min(retry_after, 2 * options_.max));
}

bool BackoffPolicy::MayAttempt(int attempts) const {
  return options_.max_attempts == 0 || attempts < options_.max_attempts;
}

void BackoffPolicy::Sleep(absl::Duration wait) const {
  if (wait > absl::ZeroDuration()) options_.sleep(wait);
}

std::optional<absl::Duration> Backoff::Failed(absl::Duration retry_after) {
  ++attempts_;
  ++failures_;
  if (!policy_->MayAttempt(attempts_)) return std::nullopt;
  const absl::Duration wait = policy_->Delay(failures_, retry_after);
  if (waited_ + wait > policy_->options().max_total_wait) return std::nullopt;
  waited_ += wait;
  return wait;
}

bool Backoff::FailedRetryNow() {
  ++attempts_;
  return policy_->MayAttempt(attempts_);
}

}  // namespace spotdnn::base
