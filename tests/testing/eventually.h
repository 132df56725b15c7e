// Waiting in tests on what other threads or processes do: the one polling helper. Unit tests of
// timed code run on a base::FakeClock instead; this is for what must happen in real time (a
// server's thread, a child process, a socket).
#ifndef SPOTDNN_TESTS_TESTING_EVENTUALLY_H_
#define SPOTDNN_TESTS_TESTING_EVENTUALLY_H_

#include <functional>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace spotdnn::testing_util {

// Polls `pred` every `every` until it holds or `timeout` has passed; pred()'s last value. The
// assertion is on the outcome, not on how fast it came: the timeout only bounds a failing test.
inline bool Eventually(const std::function<bool()>& pred,
                       absl::Duration timeout = absl::Seconds(10),
                       absl::Duration every = absl::Milliseconds(10)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(every);
  }
  return pred();
}

}  // namespace spotdnn::testing_util

#endif  // SPOTDNN_TESTS_TESTING_EVENTUALLY_H_
