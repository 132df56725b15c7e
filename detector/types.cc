#include "detector/types.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/limits.h"

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
    case InstanceState::kExited:
      return "exited";
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
    case EventKind::kExited:
      return "exited";
    default:
      return "unspecified";
  }
}

Notice ExitNotice(const CommandExit& exit) {
  Notice n;
  n.kind = EventKind::kExited;
  n.key = "exited";
  n.action = absl::StrCat(exit.status);
  const std::string how = limits::ValidUtf8(exit.how, limits::kMaxTextBytes / 4);
  // The newest lines matter most: keep as many of them as fit.
  size_t size = how.size();
  size_t first = exit.last_lines.size();
  std::vector<std::string> lines;
  while (first > 0) {
    std::string line = limits::ValidUtf8(exit.last_lines[first - 1], 200);
    line.erase(std::remove(line.begin(), line.end(), '\n'), line.end());
    if (size + 1 + line.size() > limits::kMaxTextBytes) break;
    size += 1 + line.size();
    lines.insert(lines.begin(), std::move(line));
    --first;
  }
  n.detail = how;
  for (const std::string& line : lines) absl::StrAppend(&n.detail, "\n", line);
  return n;
}

CommandExit ExitOf(std::string_view action, std::string_view detail) {
  CommandExit exit;
  if (!absl::SimpleAtoi(absl::string_view(action.data(), action.size()), &exit.status)) {
    exit.status = -1;
  }
  std::vector<std::string> lines =
      absl::StrSplit(absl::string_view(detail.data(), detail.size()), '\n');
  if (!lines.empty()) {
    exit.how = lines.front();
    exit.last_lines.assign(lines.begin() + 1, lines.end());
  }
  return exit;
}

}  // namespace spotdnn::detector
