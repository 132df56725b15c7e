#include "services/gateway/cli_args.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace spotdnn::gateway {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv, const FlagSpec& spec) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      args.positional_.push_back(arg);
      continue;
    }
    std::string flag = arg;
    std::optional<std::string> value;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    if (spec.switches.contains(flag)) {
      if (value) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " takes no value (got \"", *value, "\")"));
      }
      value = "";
    } else if (spec.values.contains(flag)) {
      if (!value) {
        if (i + 1 >= argv.size()) {
          return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
        }
        value = argv[++i];
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag, " (see --help)"));
    }
    if (!args.values_.emplace(flag, *value).second) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " given more than once"));
    }
  }
  return args;
}

bool Args::Has(absl::string_view flag) const { return values_.find(flag) != values_.end(); }

std::optional<std::string> Args::Get(absl::string_view flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

absl::StatusOr<std::string> Args::Required(absl::string_view flag) const {
  auto value = Get(flag);
  if (!value) return absl::InvalidArgumentError(absl::StrCat("missing required flag ", flag));
  return *value;
}

absl::StatusOr<double> ParseNumber(absl::string_view flag, absl::string_view text) {
  double value = 0;
  if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " = \"", text, "\": not a finite number"));
  }
  return value;
}

absl::StatusOr<int> ParseInt(absl::string_view flag, absl::string_view text, int min, int max) {
  int value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " = \"", text, "\": not a whole number"));
  }
  if (value < min || value > max) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s = %d: must be between %d and %d", flag, value, min, max));
  }
  return value;
}

absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseCounts(absl::string_view flag,
                                                                     absl::string_view text) {
  std::vector<std::pair<std::string, int>> counts;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    std::vector<absl::string_view> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": \"", item, "\" is not TYPE=COUNT (e.g. p3.2xlarge=2)"));
    }
    int count = 0;
    if (!absl::SimpleAtoi(parts[1], &count)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": \"", item, "\": count \"", parts[1], "\" is not a whole number"));
    }
    if (count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": \"", item, "\": count ", count, " must be >= 0"));
    }
    std::string type(absl::StripAsciiWhitespace(parts[0]));
    if (!seen.insert(type).second) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": ", type, " given more than once"));
    }
    counts.emplace_back(std::move(type), count);
  }
  if (counts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " = \"", text, "\": give at least one TYPE=COUNT"));
  }
  return counts;
}

absl::StatusOr<double> ParseDuration(absl::string_view flag, absl::string_view text,
                                     bool allow_zero) {
  const std::string bad =
      absl::StrCat(flag, " = \"", text, "\": not a duration (e.g. 2400, 2400s, 40m, 1.5h, 1h30m)");
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
    return absl::InvalidArgumentError(absl::StrCat(flag, " = \"", text, "\": must be positive"));
  }
  return total;
}

}  // namespace spotdnn::gateway
