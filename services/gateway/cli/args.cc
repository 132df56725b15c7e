#include "services/gateway/cli/args.h"

#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "services/gateway/cli/flag_errors.h"

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
      std::vector<std::string> known(spec.switches.begin(), spec.switches.end());
      known.insert(known.end(), spec.values.begin(), spec.values.end());
      known.push_back("--help");
      return absl::InvalidArgumentError(UnknownFlagMessage(flag, known));
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

}  // namespace spotdnn::gateway
