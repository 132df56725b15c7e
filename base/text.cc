#include "base/text.h"

#include <cmath>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
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

std::vector<std::string> TellingLastLines(absl::string_view output, int max_lines) {
  std::vector<std::string> lines;  // newest first
  constexpr absl::string_view kTorchrunFailed =
      "ERROR:torch.distributed.elastic.multiprocessing.api:failed";
  if (const size_t failed = output.rfind(kTorchrunFailed);
      failed != absl::string_view::npos && max_lines > 0) {
    absl::string_view report = output.substr(failed);
    lines.emplace_back(absl::StripTrailingAsciiWhitespace(report.substr(0, report.find('\n'))));
    output = output.substr(0, failed);
  }
  while (!output.empty() && static_cast<int>(lines.size()) < max_lines) {
    const size_t cut = output.rfind('\n');
    absl::string_view line = cut == absl::string_view::npos ? output : output.substr(cut + 1);
    output = cut == absl::string_view::npos ? "" : output.substr(0, cut);
    line = absl::StripTrailingAsciiWhitespace(line);
    if (line.empty() || absl::StrContains(line, "[spotdnn-agent]") ||
        absl::StrContains(line, "SPOTDNN_SAMPLE")) {
      continue;
    }
    lines.emplace_back(line);
  }
  return {lines.rbegin(), lines.rend()};
}

}  // namespace spotdnn::base
