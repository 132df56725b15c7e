// Parsers of the three clouds' metadata answers. They take the body of a 200 answer and never
// guess: anything malformed is an error (never a notice), and every error names the field and
// value it choked on. Bodies over kMaxMetadataBody bytes are rejected.
#ifndef SPOTDNN_DETECTOR_METADATA_PARSERS_H_
#define SPOTDNN_DETECTOR_METADATA_PARSERS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "detector/types.h"

namespace spotdnn::detector {

// Largest metadata answer the parsers accept.
inline constexpr size_t kMaxMetadataBody = 64 * 1024;

// An RFC 3339 time ("2017-09-18T08:22:00Z", fractions and offsets allowed) in Unix ms.
absl::StatusOr<int64_t> ParseRfc3339Ms(std::string_view field, std::string_view text);
// An RFC 7231 HTTP date ("Mon, 19 Sep 2016 18:29:47 GMT") in Unix ms.
absl::StatusOr<int64_t> ParseHttpDateMs(std::string_view field, std::string_view text);

// AWS /latest/meta-data/spot/instance-action: {"action": "terminate"|"stop"|"hibernate",
// "time": "…Z"} as a kNotice whose effective time is "time".
absl::StatusOr<Notice> ParseAwsInstanceAction(std::string_view body);
// AWS /latest/meta-data/events/recommendations/rebalance: {"noticeTime": "…Z"} as a kRebalance.
absl::StatusOr<Notice> ParseAwsRebalance(std::string_view body);
// AWS /latest/api/token: the token text (visible ASCII, at most 512 characters).
absl::StatusOr<std::string> ParseAwsToken(std::string_view body);

// GCE instance/preempted: "TRUE" or "FALSE" (surrounding whitespace allowed).
absl::StatusOr<bool> ParseGcePreempted(std::string_view body);
// GCE instance/maintenance-event: "NONE", "MIGRATE_ON_HOST_MAINTENANCE" or
// "TERMINATE_ON_HOST_MAINTENANCE"; anything else (a cut-short "NO" included) is an error.
absl::StatusOr<std::string> ParseGceMaintenanceEvent(std::string_view body);

// One Azure scheduled event.
struct AzureScheduledEvent {
  std::string event_id;
  std::string event_type;  // "Preempt", "Reboot", "Redeploy", "Freeze", "Terminate"
  std::string resource_type;
  std::vector<std::string> resources;
  std::string event_status;        // "Scheduled", "Started"
  int64_t not_before_unix_ms = 0;  // 0 when NotBefore is empty (the event started)
  std::string description;
  std::string event_source;
  int64_t duration_s = -1;
};

// Azure /metadata/scheduledevents (api-version 2020-07-01).
struct AzureScheduledEvents {
  int64_t document_incarnation = 0;
  std::vector<AzureScheduledEvent> events;  // the well-formed events
  // Why each malformed event was left out (field and value), e.g.
  // "scheduledevents.Events[1].NotBefore = \"soon\": expected an HTTP date …".
  std::vector<std::string> malformed;
};

// Parses an Azure Scheduled Events document. A malformed document (not JSON, no
// DocumentIncarnation or Events array) is an error; a malformed event is left out of `events` and
// named in `malformed`, so that one bad event cannot hide a valid Preempt beside it (and is never
// a notice itself).
absl::StatusOr<AzureScheduledEvents> ParseAzureScheduledEvents(std::string_view body);
// Azure /metadata/instance/compute (api-version 2021-02-01): this VM's name, "name", the name
// Scheduled Events put in an event's Resources. It must be 1 to 128 letters, digits, '-', '_' or
// '.' (what Azure allows in VM and scale-set instance names), so that a garbled answer can never
// become a name that some other VM's events would match.
absl::StatusOr<std::string> ParseAzureComputeName(std::string_view body);
// True when the event concerns the VM named `vm_name`: one of its Resources is that name, compared
// exactly as Azure writes both. Azure shows every VM of an availability set or scale-set placement
// group the events of all of them, so an event that does not name this VM (an empty Resources
// list included: it names no VM) is another VM's, and never this one's notice or acknowledgement.
bool AzureEventNamesVm(const AzureScheduledEvent& event, std::string_view vm_name);
// The notices for the VM `vm_name` in an Azure document (the events that name it, see
// AzureEventNamesVm): Preempt (and Terminate) as kNotice, the rest as kMaintenance; keyed by
// EventId. An empty `vm_name` names no VM: no notices.
std::vector<Notice> AzureNotices(const AzureScheduledEvents& document, std::string_view vm_name);
// The EventIds to acknowledge for the VM `vm_name`: its Preempt events not yet Started. (Any VM of
// a set may approve an event, and approving starts it for every VM it names: a VM must approve
// only its own.)
std::vector<std::string> AzurePreemptsToAcknowledge(const AzureScheduledEvents& document,
                                                    std::string_view vm_name);
// The POST body acknowledging `event_ids`: {"StartRequests": [{"EventId": "…"}, …]}.
std::string AzureStartRequestsBody(const std::vector<std::string>& event_ids);
// Parses a StartRequests body into its event ids (used by the emulator).
absl::StatusOr<std::vector<std::string>> ParseAzureStartRequests(std::string_view body);

}  // namespace spotdnn::detector

#endif  // SPOTDNN_DETECTOR_METADATA_PARSERS_H_
