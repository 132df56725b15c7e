// Reading Compute Engine and Cloud Billing answers: Google API errors as statuses, GCE's retry
// traits (which answers are transient), the mark that says "this zone has no capacity" (the launch
// tries the next zone), and JSON string members.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_GCE_ERRORS_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_GCE_ERRORS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace spotdnn::launcher {

// A Google API error ({"error": {"code", "message", "status", "errors": [{"reason"}]}}).
struct GoogleApiError {
  long http_status = 0;
  std::string status;  // e.g. "PERMISSION_DENIED"
  std::string reason;  // the first errors[].reason, e.g. "rateLimitExceeded"
  std::string message;
};

// Parses a Google API error body (an empty error when the body is not one).
GoogleApiError ParseGoogleApiError(long http_status, const std::string& body);

// The string member `key` of a JSON object, or "".
std::string JsonText(const nlohmann::json& doc, const char* key);

// The IAM permissions a Compute Engine API method ("instances.insert") needs, for
// PERMISSION_DENIED messages.
std::string GcePermissionFor(const std::string& api_method);

// True when `text` (an error message, reason or operation error code) says the zone has no
// capacity (ZONE_RESOURCE_POOL_EXHAUSTED and friends).
bool IsGceZoneCapacityCode(absl::string_view text);
// `status` marked as "this zone has no capacity", with `why` (the error's code and message).
absl::Status GceZoneCapacity(absl::Status status, absl::string_view why = "");
// Whether `status` carries that mark.
bool IsGceZoneCapacity(const absl::Status& status);
// The `why` of a status so marked (its message when none was given).
std::string GceZoneCapacityWhy(const absl::Status& status);

// A Compute Engine error of the call `what` as a status: capacity and quota RESOURCE_EXHAUSTED
// ("re-plan without instance type T" when `instance_type` is set), 403 PERMISSION_DENIED naming
// `permission`, rate limits, 429 and 5xx UNAVAILABLE.
absl::Status GoogleErrorToStatus(const std::string& what, const GoogleApiError& error,
                                 const std::string& permission, const std::string& instance_type);

// GCE's retry traits: 429, 5xx and 403 rate limits are transient; a zone without capacity is not.
bool IsRetryableGoogleError(const GoogleApiError& error);

// A Cloud Billing Catalog error that is not worth retrying as a status; `text` describes it.
absl::Status BillingErrorToStatus(long http_status, const GoogleApiError& error,
                                  const std::string& text);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_GCE_ERRORS_H_
