#include "provisioner/launcher/gce_errors.h"

#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace spotdnn::launcher {
namespace {

using nlohmann::json;

// Marks a status as "this zone has no capacity": the launch tries the next zone.
constexpr char kZoneCapacityPayload[] = "spotdnn.dev/gce-zone-capacity";

}  // namespace

// The IAM permissions each API method needs, named in PERMISSION_DENIED errors.
std::string GcePermissionFor(const std::string& api_method) {
  static const std::map<std::string, std::string> kPermissions = {
      {"instances.insert",
       "compute.instances.create (with compute.disks.create, compute.subnetworks.use, "
       "compute.subnetworks.useExternalIp, compute.instances.setMetadata, "
       "compute.instances.setLabels, compute.instances.setServiceAccount and "
       "iam.serviceAccounts.actAs: roles/compute.instanceAdmin.v1 and "
       "roles/iam.serviceAccountUser)"},
      {"instances.get", "compute.instances.get"},
      {"instances.aggregatedList", "compute.instances.list"},
      {"instances.delete", "compute.instances.delete"},
      {"zoneOperations.wait", "compute.zoneOperations.get"},
      {"machineTypes.get", "compute.machineTypes.get"},
  };
  auto it = kPermissions.find(api_method);
  return it == kPermissions.end() ? api_method : it->second;
}

bool IsGceZoneCapacityCode(absl::string_view text) {
  return absl::StrContains(text, "ZONE_RESOURCE_POOL_EXHAUSTED") ||
         absl::StrContains(text, "RESOURCE_POOL_EXHAUSTED") ||
         absl::StrContains(text, "does not have enough resources available");
}

absl::Status GceZoneCapacity(absl::Status status, absl::string_view why) {
  status.SetPayload(kZoneCapacityPayload, absl::Cord(why.empty() ? status.message() : why));
  return status;
}

std::string GceZoneCapacityWhy(const absl::Status& status) {
  auto why = status.GetPayload(kZoneCapacityPayload);
  return why.has_value() ? std::string(*why) : std::string();
}

bool IsGceZoneCapacity(const absl::Status& status) {
  return status.GetPayload(kZoneCapacityPayload).has_value();
}

std::string JsonText(const json& doc, const char* key) {
  if (!doc.is_object()) return "";
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A Google API error as a status. `what` names the call.
absl::Status GoogleErrorToStatus(const std::string& what, const GoogleApiError& error,
                                 const std::string& permission, const std::string& instance_type) {
  std::string text = absl::StrCat(what, ": HTTP ", error.http_status);
  if (!error.status.empty()) absl::StrAppend(&text, " ", error.status);
  if (!error.reason.empty()) absl::StrAppend(&text, " (", error.reason, ")");
  if (!error.message.empty()) absl::StrAppend(&text, ": ", error.message);
  const std::string replan =
      instance_type.empty() ? "" : "; re-plan without instance type " + instance_type;
  if (IsGceZoneCapacityCode(error.message) || IsGceZoneCapacityCode(error.reason)) {
    return GceZoneCapacity(
        absl::ResourceExhaustedError(text + replan),
        absl::StrCat(error.reason.empty() ? error.status : error.reason, ": ", error.message));
  }
  if (error.reason == "quotaExceeded" || absl::StrContains(error.message, "QUOTA_EXCEEDED")) {
    return absl::ResourceExhaustedError(text + replan);
  }
  switch (error.http_status) {
    case 400:
      return absl::InvalidArgumentError(text);
    case 401:
      return absl::UnauthenticatedError(text);
    case 403:
      if (error.reason == "rateLimitExceeded" || error.reason == "userRateLimitExceeded") {
        return absl::UnavailableError(text);
      }
      return absl::PermissionDeniedError(absl::StrCat(text, "; the account needs ", permission));
    case 404:
      return absl::NotFoundError(text);
    case 409:
      if (error.reason == "alreadyExists" || error.status == "ALREADY_EXISTS") {
        return absl::AlreadyExistsError(text);
      }
      return absl::FailedPreconditionError(text);
    case 412:
      return absl::FailedPreconditionError(text);
    default:
      break;
  }
  if (error.http_status == 429 || error.http_status >= 500) return absl::UnavailableError(text);
  return absl::FailedPreconditionError(text);
}

bool IsRetryableGoogleError(const GoogleApiError& error) {
  if (IsGceZoneCapacityCode(error.message)) return false;
  return error.http_status == 429 || error.http_status >= 500 ||
         (error.http_status == 403 &&
          (error.reason == "rateLimitExceeded" || error.reason == "userRateLimitExceeded"));
}

// A Cloud Billing Catalog error that is not worth retrying as a status; `text` describes it.
absl::Status BillingErrorToStatus(long http_status, const GoogleApiError& error,
                                  const std::string& text) {
  if (http_status == 400 && absl::StrContains(absl::AsciiStrToLower(error.message), "api key")) {
    return absl::UnauthenticatedError(absl::StrCat(text, "; check the API key"));
  }
  if (http_status == 400) return absl::InvalidArgumentError(text);
  if (http_status == 401) return absl::UnauthenticatedError(text);
  if (http_status == 403) {
    return absl::PermissionDeniedError(
        absl::StrCat(text,
                     "; enable the Cloud Billing API (cloudbilling.googleapis.com) in the API "
                     "key's project and allow the key to call it"));
  }
  if (http_status == 404) return absl::NotFoundError(text);
  return absl::FailedPreconditionError(text);
}

GoogleApiError ParseGoogleApiError(long http_status, const std::string& body) {
  GoogleApiError out;
  out.http_status = http_status;
  json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object() || !doc.contains("error")) return out;
  const json& error = doc["error"];
  if (error.is_string()) {  // OAuth-style {"error": "invalid_grant"}
    out.reason = error.get<std::string>();
    out.message = JsonText(doc, "error_description");
    return out;
  }
  out.status = JsonText(error, "status");
  out.message = JsonText(error, "message");
  auto errors = error.find("errors");
  if (errors != error.end() && errors->is_array() && !errors->empty()) {
    out.reason = JsonText((*errors)[0], "reason");
  }
  // Newer errors carry the reason in details[].reason (google.rpc.ErrorInfo).
  auto details = error.find("details");
  if (out.reason.empty() && details != error.end() && details->is_array()) {
    for (const json& d : *details) {
      if (!JsonText(d, "reason").empty()) {
        out.reason = JsonText(d, "reason");
        break;
      }
    }
  }
  return out;
}

}  // namespace spotdnn::launcher
