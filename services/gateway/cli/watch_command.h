// `spotdnn watch` with its retry bounds spelled out (cli.h's Watch uses the defaults).
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_WATCH_COMMAND_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_WATCH_COMMAND_H_

#include <string_view>

#include "absl/time/time.h"
#include "services/gateway/cli/cli.h"

namespace spotdnn::gateway {

// The detector `spotdnn watch` asks when --server is not given.
inline constexpr std::string_view kDefaultDetectorAddress = "127.0.0.1:50054";

// How long `spotdnn watch` keeps trying a detector it cannot reach.
struct WatchRetryLimits {
  // Before the first stream is up (--timeout, when given, replaces it): then it exits 1 naming
  // the server.
  absl::Duration first_connect = absl::Seconds(10);
  // After a stream that was up broke: it resumes after the last event printed, and exits 1 when
  // no stream is up again within this long.
  absl::Duration resume = absl::Seconds(60);
  absl::Duration retry_every = absl::Milliseconds(500);
};

// `spotdnn watch` (see cli.h's Watch) with explicit retry bounds. A resume point past the
// detector's newest event (--after too large, or a detector whose event log was reset) exits 2
// naming both sequence numbers.
int WatchWithLimits(const Args& args, pb::Detector::StubInterface& stub, const Io& io,
                    const WatchRetryLimits& limits);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_WATCH_COMMAND_H_
