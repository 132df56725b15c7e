// The one backoff policy of the tree: how long to wait before trying a failed operation again.
// The n-th wait (n = failures so far, from 1) is jittered from the ceiling
// min(max, initial * multiplier^(n-1)); a server's Retry-After is a floor for the next wait
// (trusted up to twice the cap); attempts and total waiting can be bounded. Every retry site uses
// it: the launcher's HTTP transport, the database, the service clients, the sample forwarder and
// the metadata poller, each with its own options.
#ifndef SPOTDNN_BASE_BACKOFF_H_
#define SPOTDNN_BASE_BACKOFF_H_

#include <functional>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace spotdnn::base {

// How a wait is drawn from its ceiling d.
enum class Jitter {
  kNone,   // d itself (deterministic: schedules, tests)
  kEqual,  // uniform in [d/2, d]
  kFull,   // uniform in [0, d] (AWS "full jitter": spreads clients that failed together)
};

// A retry site's settings.
struct BackoffOptions {
  // Attempts in all, the first included (1: no retry; 0: no limit).
  int max_attempts = 5;
  absl::Duration initial = absl::Milliseconds(200);  // ceiling of the first wait
  absl::Duration max = absl::Seconds(20);            // cap on every computed ceiling
  double multiplier = 2.0;
  Jitter jitter = Jitter::kFull;
  // Total time spent waiting after which no further attempt is made (infinite: no limit).
  absl::Duration max_total_wait = absl::InfiniteDuration();
  // How to wait; default absl::SleepFor (tests record instead of sleeping).
  std::function<void(absl::Duration)> sleep;
  // A uniform number in [0, 1) for the jitter; default a per-thread std::mt19937_64.
  std::function<double()> random;
};

// INVALID_ARGUMENT naming `field` (e.g. "retry") and the value when `options` make no sense
// (negative attempts, initial <= 0, max < initial, multiplier < 1).
absl::Status ValidateBackoff(const BackoffOptions& options, const char* field = "backoff");

// The policy: stateless, shared by every operation of a site. Thread-safe when its `sleep` and
// `random` are.
class BackoffPolicy {
 public:
  explicit BackoffPolicy(BackoffOptions options = {});

  // The ceiling of the wait after `failures` failures (>= 1): min(max, initial *
  // multiplier^(failures-1)).
  absl::Duration Ceiling(int failures) const;
  // The wait after `failures` failures: Ceiling(failures) jittered, at least `retry_after`
  // (a server's hint; taken up to twice `max`).
  absl::Duration Delay(int failures, absl::Duration retry_after = absl::ZeroDuration()) const;
  // Whether attempt number `attempts + 1` may be made after `attempts` attempts.
  bool MayAttempt(int attempts) const;
  // Waits `wait` with the configured sleep.
  void Sleep(absl::Duration wait) const;

  const BackoffOptions& options() const { return options_; }

 private:
  BackoffOptions options_;
};

// The state of one operation being retried under a policy:
//   Backoff backoff(policy);
//   while (true) {
//     Status s = TryOnce();
//     if (s.ok() || !Retryable(s)) return s;
//     std::optional<absl::Duration> wait = backoff.Failed();
//     if (!wait) return s;         // attempts or total wait used up
//     policy.Sleep(*wait);         // or schedule the next attempt *wait from now
//   }
class Backoff {
 public:
  explicit Backoff(const BackoffPolicy& policy) : policy_(&policy) {}

  // Records a failed attempt. The wait before the next attempt (at least `retry_after`), or
  // nullopt when the policy allows no further attempt.
  std::optional<absl::Duration> Failed(absl::Duration retry_after = absl::ZeroDuration());
  // Records a failed attempt that may be tried again at once (a refreshed credential): counts
  // the attempt, waits nothing. False when the policy allows no further attempt.
  bool FailedRetryNow();
  // Records a success: the next failure waits the first ceiling again.
  void Succeeded() { failures_ = 0; }

  // Failed attempts recorded so far (a success does not reset it).
  int attempts() const { return attempts_; }
  // Failures since the last success.
  int failures() const { return failures_; }
  // Time waited so far.
  absl::Duration waited() const { return waited_; }

 private:
  const BackoffPolicy* policy_;
  int attempts_ = 0;
  int failures_ = 0;
  absl::Duration waited_ = absl::ZeroDuration();
};

}  // namespace spotdnn::base

#endif  // SPOTDNN_BASE_BACKOFF_H_
