#include "provisioner/launcher/capacity_trace.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace spotdnn::launcher {
namespace {

// Appends a step, merging it with the last one when it starts at the same time (the CSV files'
// two rows per change) or keeps the same count.
void AddStep(CapacityTrace& trace, double start_s, int count) {
  if (!trace.starts_s.empty() && trace.starts_s.back() == start_s) {
    trace.counts.back() = count;
  } else {
    trace.starts_s.push_back(start_s);
    trace.counts.push_back(count);
  }
  const size_t n = trace.counts.size();
  if (n >= 2 && trace.counts[n - 2] == trace.counts[n - 1]) {
    trace.starts_s.pop_back();
    trace.counts.pop_back();
  }
}

absl::StatusOr<CapacityTrace> ParseJson(absl::string_view text, const std::string& name) {
  nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return absl::InvalidArgumentError(absl::StrCat(name, ": not JSON"));
  const nlohmann::json* gap = nullptr;
  if (doc.contains("metadata") && doc["metadata"].is_object() &&
      doc["metadata"].contains("gap_seconds")) {
    gap = &doc["metadata"]["gap_seconds"];
  }
  if (gap == nullptr || !gap->is_number() || !(gap->get<double>() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": metadata.gap_seconds = ", gap == nullptr ? "missing" : gap->dump(),
                     ": expected seconds > 0"));
  }
  if (!doc.contains("data") || !doc["data"].is_array() || doc["data"].empty()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": data: expected a non-empty array"));
  }
  const double g = gap->get<double>();
  CapacityTrace trace;
  const nlohmann::json& data = doc["data"];
  for (size_t i = 0; i < data.size(); ++i) {
    if (!data[i].is_number() || data[i].get<double>() < 0 ||
        !std::isfinite(data[i].get<double>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": data[", i, "] = ", data[i].dump(), ": expected a count >= 0"));
    }
    AddStep(trace, static_cast<double>(i) * g, static_cast<int>(std::floor(data[i].get<double>())));
  }
  return trace;
}

absl::StatusOr<CapacityTrace> ParseCsv(absl::string_view text, const std::string& name) {
  CapacityTrace trace;
  double scale = 1;
  double last = 0;
  bool any = false;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || absl::StartsWith(line, "#")) continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ',');
    double t = 0, count = 0;
    const bool numbers = fields.size() == 2 &&
                         absl::SimpleAtod(absl::StripAsciiWhitespace(fields[0]), &t) &&
                         absl::SimpleAtod(absl::StripAsciiWhitespace(fields[1]), &count);
    if (!numbers && !any && trace.starts_s.empty() && line_number == 1) {
      // A header: the times are hours when it says so.
      const std::string header = absl::AsciiStrToLower(line);
      if (absl::StrContains(header, "hour") || absl::StrContains(header, "_h,") ||
          absl::StrContains(header, "(h)")) {
        scale = 3600;
      }
      continue;
    }
    const std::string where = absl::StrCat(name, ":", line_number, ": \"", line, "\"");
    if (!numbers || !std::isfinite(t) || !std::isfinite(count)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": expected time,count"));
    }
    if (t < 0 || (any && t < last)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": time goes back (", t, " after ", last, ")"));
    }
    if (count < 0) return absl::InvalidArgumentError(absl::StrCat(where, ": negative count"));
    // The step before the first row has the first row's count.
    AddStep(trace, any ? t * scale : 0, static_cast<int>(std::floor(count)));
    last = t;
    any = true;
  }
  if (!any) return absl::InvalidArgumentError(absl::StrCat(name, ": no time,count rows"));
  return trace;
}

}  // namespace

int CapacityTrace::CountAt(double t_s) const {
  if (counts.empty()) return 0;
  auto it = std::upper_bound(starts_s.begin(), starts_s.end(), t_s);
  if (it == starts_s.begin()) return counts.front();
  return counts[static_cast<size_t>(it - starts_s.begin()) - 1];
}

absl::StatusOr<CapacityTrace> ParseCapacityTrace(absl::string_view text, const std::string& name) {
  absl::string_view start = absl::StripLeadingAsciiWhitespace(text);
  if (absl::StartsWith(start, "{")) return ParseJson(start, name);
  return ParseCsv(text, name);
}

absl::StatusOr<CapacityTrace> ReadCapacityTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("capacity trace ", path, " cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseCapacityTrace(text.str(), path);
}

}  // namespace spotdnn::launcher
