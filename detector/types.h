// Domain types of the revocation detector: clouds, instance states, notices and events.
#ifndef SPOTDNN_DETECTOR_TYPES_H_
#define SPOTDNN_DETECTOR_TYPES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace spotdnn::detector {

// Which cloud's metadata service speaks for an instance.
enum class Cloud { kUnspecified = 0, kAws = 1, kGce = 2, kAzure = 3 };

// Lifecycle state of a watched instance.
// kExited: its command ended by itself (its agent said so); no heartbeats are expected from it.
enum class InstanceState {
  kUnknown = 0,
  kHealthy = 1,
  kNotice = 2,
  kRevoked = 3,
  kLost = 4,
  kExited = 5
};

// What happened to an instance.
enum class EventKind {
  kUnspecified = 0,
  kNotice = 1,       // spot interruption / preemption notice
  kRebalance = 2,    // AWS rebalance recommendation
  kMaintenance = 3,  // GCE host maintenance, Azure non-preempt scheduled events
  kRevoked = 4,      // the notice's deadline passed
  kLost = 5,         // heartbeats stopped
  kRecovered = 6,    // heartbeats came back after lost
  // The instance's command ended by itself (not a revocation). Its action is the shell's exit
  // status in decimal (128 + the signal for a signal); its detail says how it ended on the first
  // line and the command's last lines after it, one per line.
  kExited = 7,
};

// "aws", "gce", "azure", "unspecified".
std::string_view CloudName(Cloud cloud);
// Parses "aws"/"gce"/"azure" (case-insensitive); INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<Cloud> ParseCloud(std::string_view field, std::string_view text);
// "healthy", "notice", "revoked", "lost", "unknown".
std::string_view InstanceStateName(InstanceState state);
// "notice", "rebalance", "maintenance", "revoked", "lost", "recovered".
std::string_view EventKindName(EventKind kind);

// A notice read from a metadata service (by a poller or an agent).
struct Notice {
  EventKind kind = EventKind::kNotice;
  std::string action;             // "terminate", "stop", "hibernate", "preempt", "Preempt", …
  int64_t issued_unix_ms = 0;     // when the cloud says it issued it (0 = not said)
  int64_t effective_unix_ms = 0;  // when the instance goes (0 = unknown)
  std::string key;                // identifies the notice; the same key is reported once
  std::string detail;
};

// How an instance's command ended by itself, as its agent reports it (EventKind::kExited).
struct CommandExit {
  int status = 0;                       // the shell's: the exit status, or 128 + the signal
  std::string how;                      // "exit status 1", "killed by signal 9 (Killed)"
  std::vector<std::string> last_lines;  // the command's last lines, oldest first
};

// The notice an agent reports for `exit` (key "exited"): the status as its action, how and the
// last lines as its detail, the oldest lines left out to keep it within limits::kMaxTextBytes.
Notice ExitNotice(const CommandExit& exit);
// The exit an event of kind kExited carries (the inverse of ExitNotice).
CommandExit ExitOf(std::string_view action, std::string_view detail);

// One event in the detector's log.
struct Event {
  uint64_t sequence = 0;  // per detector, strictly increasing
  std::string instance_id;
  std::string job_id;
  Cloud cloud = Cloud::kUnspecified;
  EventKind kind = EventKind::kUnspecified;
  std::string action;
  int64_t notice_unix_ms = 0;     // when the detector (or agent) saw it
  int64_t effective_unix_ms = 0;  // when the instance goes (0 = unknown)
  std::string detail;
};

// A registered instance and what the detector knows about it.
struct WatchedInstance {
  std::string instance_id;
  std::string job_id;
  Cloud cloud = Cloud::kUnspecified;
  std::string
      metadata_endpoint;  // polled by the detector itself when set, e.g. http://127.0.0.1:8080/i/x
  InstanceState state = InstanceState::kUnknown;
  std::string reason;  // why unknown or lost
  int64_t last_heartbeat_unix_ms = 0;
  std::string replica;        // the replica that holds it
  std::string instance_type;  // e.g. "p3.2xlarge" (given by whoever registers it; may be empty)
  int64_t registered_unix_ms = 0;  // when its current lifetime started (set by the detector)
};

// One lifetime of an instance as the detector saw it: from its registration to its revocation
// notice (revoked), or to when it was unregistered, lost, or still running (censored).
struct Lifetime {
  std::string instance_id;
  std::string job_id;
  std::string instance_type;
  int64_t started_unix_ms = 0;
  int64_t ended_unix_ms = 0;
  bool revoked = false;
  std::string how;  // "notice", "unregistered", "lost", "registered again", "running"
};

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_TYPES_H_
