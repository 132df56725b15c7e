#include "services/common/values.h"

#include <cmath>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace spotdnn::services {

absl::StatusOr<double> ParseNumber(absl::string_view field, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", text, "\": not a finite number"));
  }
  return value;
}

absl::StatusOr<int> ParseInt(absl::string_view field, absl::string_view text, int min, int max) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", text, "\": not a whole number"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %d: must be between %d and %d", field, value, min, max));
  }
  return value;
}

absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseCounts(absl::string_view field,
                                                                     absl::string_view text) {
  std::vector<std::pair<std::string, int>> counts;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::vector<absl::string_view> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", item, "\" is not TYPE=COUNT (e.g. p3.2xlarge=2)"));
    }
    int count = 0;
    if (!absl::SimpleAtoi(parts[1], &count)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", item, "\": count \"", parts[1], "\" is not a whole number"));
    }
    if (count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", item, "\": count ", count, " must be >= 0"));
    }
    std::string type(absl::StripAsciiWhitespace(parts[0]));
    if (!seen.insert(type).second) {
      return absl::InvalidArgumentError(absl::StrCat(field, ": ", type, " given more than once"));
    }
    counts.emplace_back(std::move(type), count);
  }
  if (counts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = \"", text, "\": give at least one TYPE=COUNT"));
  }
  return counts;
}

absl::StatusOr<double> ParseDuration(absl::string_view field, absl::string_view text,
                                     bool allow_zero) {
  const std::string bad =
      absl::StrCat(field, " = \"", text, "\": not a duration (e.g. 2400, 2400s, 40m, 1.5h, 1h30m)");
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  if (rest.empty()) return absl::InvalidArgumentError(bad);
  double total = 0;
  while (!rest.empty()) {
    size_t end = 0;
    while (end < rest.size() && (absl::ascii_isdigit(rest[end]) || rest[end] == '.')) ++end;
    double value = 0;
    if (end == 0 || !absl::SimpleAtod(rest.substr(0, end), &value)) {
      return absl::InvalidArgumentError(bad);
    }
    rest.remove_prefix(end);
    double unit = 1;
    if (!rest.empty()) {
      switch (rest[0]) {
        case 's':
          unit = 1;
          break;
        case 'm':
          unit = 60;
          break;
        case 'h':
          unit = 3600;
          break;
        case 'd':
          unit = 86400;
          break;
        default:
          return absl::InvalidArgumentError(bad);
      }
      rest.remove_prefix(1);
    } else if (total != 0) {
      return absl::InvalidArgumentError(bad);  // "1h30" is ambiguous
    }
    total += value * unit;
  }
  if (!(std::isfinite(total) && (total > 0 || (allow_zero && total == 0)))) {
    return absl::InvalidArgumentError(absl::StrCat(field, " = \"", text, "\": must be positive"));
  }
  return total;
}

}  // namespace spotdnn::services
