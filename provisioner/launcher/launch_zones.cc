#include "provisioner/launcher/launch_zones.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace spotdnn::launcher {
namespace {

bool Has(const std::vector<std::string>& list, const std::string& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> LaunchZones(const LaunchRequest& request,
                                                     const ZoneSetting& setting) {
  auto canonical = [&](const std::string& zone) {
    return setting.canonical ? setting.canonical(zone) : zone;
  };
  const std::string configured_text =
      setting.configured.empty() ? "none" : absl::StrJoin(setting.configured, ", ");
  std::vector<std::string> avoid;
  for (const std::string& zone : request.avoid_zones) avoid.push_back(canonical(zone));

  if (setting.configured.empty()) {
    if (!request.zones.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("zones[0] = \"", request.zones[0], "\": the ", setting.provider,
                       " provider is not configured for any zone (give ", setting.key, ")"));
    }
    for (size_t i = 0; i < request.avoid_zones.size(); ++i) {
      if (setting.in_region && setting.in_region(avoid[i])) {
        return absl::InvalidArgumentError(absl::StrCat(
            "avoid_zones[", i, "] = \"", request.avoid_zones[i], "\": the ", setting.provider,
            " provider launches where the cloud chooses and cannot keep out of a zone (give ",
            setting.key, ")"));
      }
    }
    return std::vector<std::string>{""};
  }

  std::vector<std::string> order;
  for (size_t i = 0; i < request.zones.size(); ++i) {
    const std::string zone = canonical(request.zones[i]);
    if (!Has(setting.configured, zone)) {
      return absl::InvalidArgumentError(absl::StrCat("zones[", i, "] = \"", request.zones[i],
                                                     "\": the ", setting.provider,
                                                     " provider is not configured for this zone "
                                                     "(configured: ",
                                                     configured_text, ")"));
    }
    if (!Has(order, zone)) order.push_back(zone);
  }
  if (order.empty()) order = setting.configured;
  std::vector<std::string> out;
  std::vector<std::string> blocked;
  for (const std::string& zone : order) {
    (Has(avoid, zone) ? blocked : out).push_back(zone);
  }
  if (out.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("every zone is blocked: ", absl::StrJoin(blocked, ", "),
                     " (avoid_zones) for the ", setting.provider, " provider"));
  }
  return out;
}

std::string RefusedZone(absl::string_view zone, absl::string_view why) {
  return absl::StrCat(zone, ": ", why);
}

}  // namespace spotdnn::launcher
