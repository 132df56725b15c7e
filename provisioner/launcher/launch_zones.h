// Which zones a launch tries, and in which order: the request's zones (or the provider's
// configured ones), less the zones the request blocks. Shared by the cloud providers, which try
// each zone in turn while the previous one refuses for lack of capacity.
#ifndef SPOTDNN_PROVISIONER_LAUNCHER_LAUNCH_ZONES_H_
#define SPOTDNN_PROVISIONER_LAUNCHER_LAUNCH_ZONES_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "provisioner/launcher/cloud_provider.h"

namespace spotdnn::launcher {

// How a provider names and knows its zones.
struct ZoneSetting {
  std::string provider;  // "aws", "gce", "azure": for messages
  // The zones the provider is configured for, in its order. Empty: it does not choose a zone (the
  // cloud does), and cannot tell which one it would be.
  std::vector<std::string> configured;
  // The configuration key that gives zones, for messages ("provider.subnets").
  std::string key;
  // A caller's zone name in the provider's form (Azure: "1" -> "eastus-1"); identity when null.
  std::function<std::string(const std::string&)> canonical;
  // Whether a zone could be one the cloud picks when `configured` is empty (a zone of the
  // provider's region): such a zone in avoid_zones cannot be kept away from. Null: none.
  std::function<bool(const std::string&)> in_region;
};

// The zones to try, in order: request.zones (each one of `setting.configured`) or else the
// configured ones, without request.avoid_zones. {""} when the provider does not choose zones.
// INVALID_ARGUMENT naming a zone in `zones` the provider is not configured for, "every zone is
// blocked: ..." when avoid_zones leaves none, and, for a provider without configured zones, a
// zone of its region in avoid_zones (it cannot keep instances out of it).
absl::StatusOr<std::vector<std::string>> LaunchZones(const LaunchRequest& request,
                                                     const ZoneSetting& setting);

// "ZONE: why" for LaunchResult.refused_zones.
std::string RefusedZone(absl::string_view zone, absl::string_view why);

}  // namespace spotdnn::launcher

#endif  // SPOTDNN_PROVISIONER_LAUNCHER_LAUNCH_ZONES_H_
