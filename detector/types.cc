#include "detector/types.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace spotdnn::detector {

std::string_view CloudName(Cloud cloud) {
  switch (cloud) {
    case Cloud::kAws:
      return "aws";
    case Cloud::kGce:
      return "gce";
    case Cloud::kAzure:
      return "azure";
    default:
      return "unspecified";
  }
}

absl::StatusOr<Cloud> ParseCloud(std::string_view field, std::string_view text) {
  const std::string lower = absl::AsciiStrToLower(std::string(text));
  if (lower == "aws") return Cloud::kAws;
  if (lower == "gce" || lower == "gcp") return Cloud::kGce;
  if (lower == "azure") return Cloud::kAzure;
  return absl::InvalidArgumentError(absl::StrCat(std::string(field), " = \"", std::string(text),
                                                 "\": expected aws, gce or azure"));
}

std::string_view InstanceStateName(InstanceState state) {
  switch (state) {
    case InstanceState::kHealthy:
      return "healthy";
    case InstanceState::kNotice:
      return "notice";
    case InstanceState::kRevoked:
      return "revoked";
    case InstanceState::kLost:
      return "lost";
    default:
      return "unknown";
  }
}

std::string_view EventKindName(EventKind kind) {
  switch (kind) {
    case EventKind::kNotice:
      return "notice";
    case EventKind::kRebalance:
      return "rebalance";
    case EventKind::kMaintenance:
      return "maintenance";
    case EventKind::kRevoked:
      return "revoked";
    case EventKind::kLost:
      return "lost";
    case EventKind::kRecovered:
      return "recovered";
    default:
      return "unspecified";
  }
}

}  // namespace spotdnn::detector
