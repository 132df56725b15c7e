// Polls instances' metadata services over libcurl's multi interface: one thread, one epoll set,
// thousands of instances. Used by the detector (for endpoints it can reach) and by spotdnn-agent
// (for the one local metadata service); the code path is the same.
//
// Per cloud:
//   AWS   IMDSv2: PUT /latest/api/token (refreshed before expiry and after a 401), then every
//         interval GET spot/instance-action and events/recommendations/rebalance (404 = none).
//   GCE   instance/preempted and instance/maintenance-event, long-polled with
//         wait_for_change=true&last_etag=… (answers the moment the value flips).
//   Azure /metadata/instance/compute once, for this VM's name (retried until it answers; no
//         event is read before), then /metadata/scheduledevents every interval. Only the events
//         whose Resources name this VM are its notices (Azure shows every VM of an availability
//         set or placement group the events of all of them); optionally acknowledges this VM's
//         Preempt events, and only those.
// Failures (connect errors, timeouts, non-200/404 codes, 401 loops, unparsable bodies, a
// malformed event in an Azure document) make the round unhealthy with the reason and are retried
// with exponential backoff; they never produce a notice, and a notice read in the same round (on
// another channel, or a well-formed Azure event) is still reported.
#ifndef SPOTDNN_DETECTOR_METADATA_POLLER_H_
#define SPOTDNN_DETECTOR_METADATA_POLLER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "detector/types.h"

namespace spotdnn::detector {

// One metadata service to poll.
struct PollTarget {
  std::string instance_id;
  Cloud cloud = Cloud::kUnspecified;
  std::string endpoint;  // base URL, e.g. http://169.254.169.254 or http://127.0.0.1:P/i/ID
  // Whatever the caller needs to tell this target's results from those of an earlier target with
  // the same id (the detector: the instance's lifetime); echoed in each PollResult.
  int64_t tag = 0;
};

// How to poll.
struct PollerOptions {
  absl::Duration interval = absl::Seconds(1);  // AWS and Azure rounds
  absl::Duration request_timeout = absl::Milliseconds(800);
  absl::Duration connect_timeout = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(8);                // retry delay cap after failures
  int aws_token_ttl_s = 21600;                                  // asked for in the token PUT
  absl::Duration aws_token_refresh_margin = absl::Seconds(60);  // refresh this long before expiry
  bool gce_long_poll = true;                                    // wait_for_change; false = poll
  int gce_long_poll_timeout_s = 30;                             // timeout_sec of one long poll
  bool azure_ack =
      false;  // acknowledge this VM's Preempt events (POST StartRequests) once reported
  // Most connections to one host:port (0 = no limit). Real instances each have their own
  // metadata host; an emulator serving thousands of instances on one port wants a cap.
  int max_connections_per_host = 0;
  // Time: the wall clock of results and notices, and the steady clock rounds, retries and token
  // refreshes are scheduled on (libcurl's own timeouts are real time); null: the real clock.
  // Outlives the poller. Any other clock than the real one (a base::FakeClock in tests) has a
  // thread of the poller wait on it, so that what falls due when it moves starts at once; such a
  // clock is not advanced from another thread while the poller stops.
  base::Clock* clock = nullptr;
};

// What one round of polling an instance found.
struct PollResult {
  std::string instance_id;
  bool healthy = true;          // every check answered and parsed
  std::string reason;           // why not healthy
  std::vector<Notice> notices;  // notices read in this round (the same one repeats each round)
  int64_t observed_unix_ms = 0;
  int64_t tag = 0;  // the target's tag
};

// Parses a base URL for a target: http:// or https://, no query; INVALID_ARGUMENT naming
// `field` otherwise.
absl::Status ValidateEndpoint(std::string_view field, std::string_view endpoint);

// The poller. Add/Remove/Stop are thread-safe; the sink runs on the poller thread.
class MetadataPoller {
 public:
  using Sink = std::function<void(const PollResult&)>;

  MetadataPoller(PollerOptions options, Sink sink);
  ~MetadataPoller();
  MetadataPoller(const MetadataPoller&) = delete;
  MetadataPoller& operator=(const MetadataPoller&) = delete;

  // Starts the polling thread. INTERNAL when libcurl or epoll cannot be set up.
  absl::Status Start();
  // Stops the thread and abandons requests in flight. Idempotent.
  void Stop();

  // Starts polling a target (replacing one with the same id). INVALID_ARGUMENT for an empty id,
  // an unspecified cloud or a bad endpoint.
  absl::Status Add(const PollTarget& target);
  // Stops polling a target; unknown ids are ignored.
  void Remove(const std::string& instance_id);
  // Targets being polled.
  size_t size() const;
  // HTTP requests completed so far (for benches).
  uint64_t requests_completed() const { return requests_completed_.load(); }

 private:
  struct Impl;
  PollerOptions options_;
  Sink sink_;
  std::unique_ptr<Impl> impl_;
  std::thread thread_;
  std::atomic<uint64_t> requests_completed_{0};
};

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_METADATA_POLLER_H_
