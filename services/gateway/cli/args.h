// Command-line parsing for the spotdnn CLI: the flags and positional arguments of one command.
// Every error names the flag and the value.
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
#include "services/common/values.h"

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

// The value syntaxes the commands share (services/common/values.h).
using services::ParseCounts;
using services::ParseDuration;
using services::ParseInt;
using services::ParseNumber;

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_ARGS_H_
