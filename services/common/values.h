// Value syntaxes shared by the CLI's flags and the job spec's fields: numbers, whole numbers in a
// range, TYPE=N lists and durations. Every error names the field (a flag such as "--loss" or a
// spec path such as "slo.deadline") and the value.
#ifndef SPOTDNN_SERVICES_COMMON_VALUES_H_
#define SPOTDNN_SERVICES_COMMON_VALUES_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::services {

// A finite number; "--loss = \"abc\": not a number".
absl::StatusOr<double> ParseNumber(absl::string_view field, absl::string_view text);
// A whole number within [min, max].
absl::StatusOr<int> ParseInt(absl::string_view field, absl::string_view text, int min, int max);
// "TYPE=N,TYPE=N" with N >= 0 and each TYPE once.
absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseCounts(absl::string_view field,
                                                                     absl::string_view text);
// Seconds from "2400", "2400s", "40m", "1.5h" (also "1h30m"); must be positive and finite, or
// also zero in any unit ("0", "0s", "0.0h") with `allow_zero`.
absl::StatusOr<double> ParseDuration(absl::string_view field, absl::string_view text,
                                     bool allow_zero = false);

}  // namespace spotdnn::services

#endif  // SPOTDNN_SERVICES_COMMON_VALUES_H_
