#include "base/text.h"

#include <cmath>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace spotdnn::base {

std::string FormatBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // Up a unit when the number would print as 1024 or more (1023.7 KiB rounds to "1024 KiB").
  while (std::round(value) >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  // One decimal while the number is small; "9.96" would print as "10.0": whole from there.
  if (std::round(value * 10) / 10 < 10) return absl::StrFormat("%.1f %s", value, kUnits[unit]);
  return absl::StrFormat("%.0f %s", value, kUnits[unit]);
}

std::string QuotedValue(absl::string_view value) {
  if (value.size() >= 2 && value.front() == '"' && value.back() == '"') return std::string(value);
  return absl::StrCat("\"", value, "\"");
}

}  // namespace spotdnn::base
