// Command-line parsing for the spotdnn CLI: flags of one subcommand, and the value syntaxes the
// commands share (counts lists, numbers, durations). Every error names the flag and the value.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_ARGS_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_ARGS_H_

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace spotdnn::gateway {

// The flags one command accepts: those taking a value and boolean switches.
struct FlagSpec {
  std::set<std::string> values;    // e.g. "--loss"
  std::set<std::string> switches;  // e.g. "--json"
};

// Parsed arguments of one command.
class Args {
 public:
  // Accepts "--flag value", "--flag=value" and switches; anything not starting with "--" is
  // positional. INVALID_ARGUMENT for unknown flags, missing values and repeated flags.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv, const FlagSpec& spec);

  bool Has(absl::string_view flag) const;
  bool Switch(absl::string_view flag) const { return Has(flag); }
  std::optional<std::string> Get(absl::string_view flag) const;
  // The flag's value; INVALID_ARGUMENT "missing required flag --x" when absent.
  absl::StatusOr<std::string> Required(absl::string_view flag) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string, std::less<>> values_;
  std::vector<std::string> positional_;
};

// A finite number; "--loss = \"abc\": not a number".
absl::StatusOr<double> ParseNumber(absl::string_view flag, absl::string_view text);
// A whole number within [min, max].
absl::StatusOr<int> ParseInt(absl::string_view flag, absl::string_view text, int min, int max);
// "TYPE=N,TYPE=N" with N >= 0 and each TYPE once.
absl::StatusOr<std::vector<std::pair<std::string, int>>> ParseCounts(absl::string_view flag,
                                                                     absl::string_view text);
// Seconds from "2400", "2400s", "40m", "1.5h" (also "1h30m"); must be positive and finite, or
// also zero in any unit ("0", "0s", "0.0h") with `allow_zero`.
absl::StatusOr<double> ParseDuration(absl::string_view flag, absl::string_view text,
                                     bool allow_zero = false);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_ARGS_H_
