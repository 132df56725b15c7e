#include "provisioner/launcher/cloud_provider.h"

#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/text.h"
#include "provisioner/launcher/sigv4.h"

namespace spotdnn::launcher {

absl::string_view RoleName(Role role) { return role == Role::kParameterServer ? "ps" : "worker"; }

absl::StatusOr<Role> ParseRole(absl::string_view text) {
  if (text == "ps") return Role::kParameterServer;
  if (text == "worker") return Role::kWorker;
  return absl::InvalidArgumentError(
      absl::StrCat("role = \"", std::string(text), "\": expected ps or worker"));
}

absl::string_view MarketName(Market market) {
  return market == Market::kOnDemand ? "on-demand" : "spot";
}

absl::StatusOr<Market> ParseMarket(absl::string_view text) {
  if (text.empty() || text == "spot") return Market::kSpot;
  if (text == "on-demand") return Market::kOnDemand;
  return absl::InvalidArgumentError(
      absl::StrCat("market = \"", std::string(text), "\": expected spot or on-demand"));
}

absl::string_view InstanceStateName(InstanceState state) {
  switch (state) {
    case InstanceState::kPending:
      return "pending";
    case InstanceState::kRunning:
      return "running";
    case InstanceState::kShuttingDown:
      return "shutting-down";
    case InstanceState::kTerminated:
      return "terminated";
    case InstanceState::kStopping:
      return "stopping";
    case InstanceState::kStopped:
      return "stopped";
  }
  return "pending";
}

absl::StatusOr<InstanceState> ParseInstanceState(absl::string_view text) {
  for (InstanceState s :
       {InstanceState::kPending, InstanceState::kRunning, InstanceState::kShuttingDown,
        InstanceState::kTerminated, InstanceState::kStopping, InstanceState::kStopped}) {
    if (InstanceStateName(s) == text) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("instance state = \"", std::string(text), "\": unknown"));
}

std::optional<CommandEnd> CommandEndFromLog(absl::string_view log, int max_lines) {
  constexpr absl::string_view kEnded = "the command ended: ";
  const size_t at = log.rfind(kEnded);
  if (at == absl::string_view::npos) return std::nullopt;
  CommandEnd end;
  absl::string_view how = log.substr(at + kEnded.size());
  end.how = std::string(absl::StripAsciiWhitespace(how.substr(0, how.find('\n'))));
  int number = 0;
  if (absl::StartsWith(end.how, "exit status ") && absl::SimpleAtoi(end.how.substr(12), &number)) {
    end.status = number;
  } else if (absl::StartsWith(end.how, "killed by signal ") &&
             absl::SimpleAtoi(absl::string_view(end.how).substr(17, end.how.find(' ', 17) - 17),
                              &number)) {
    end.status = 128 + number;
  } else {
    return std::nullopt;  // not the agent's line
  }
  // The lines before the agent's, newest first until `max_lines`.
  const size_t line_start = log.rfind('\n', at);
  absl::string_view before = line_start == absl::string_view::npos ? "" : log.substr(0, line_start);
  end.last_lines = base::TellingLastLines(before, max_lines);
  return end;
}

std::map<std::string, double> CheapestPerType(const std::vector<SpotPrice>& prices) {
  std::map<std::string, double> out;
  for (const SpotPrice& p : prices) {
    auto [it, inserted] = out.emplace(p.instance_type, p.price_per_hour);
    if (!inserted && p.price_per_hour < it->second) it->second = p.price_per_hour;
  }
  return out;
}

std::string DefaultClientToken(const LaunchRequest& request) {
  // EC2 allows 64 ASCII characters; a hash keeps long job ids within that.
  std::string key =
      absl::StrCat(request.job_id, "|", RoleName(request.role), "|", request.instance_type, "|",
                   request.first_index, "|", request.count);
  // On-demand requests get tokens of their own; spot ones keep the tokens they always had.
  if (request.market == Market::kOnDemand) absl::StrAppend(&key, "|on-demand");
  return absl::StrCat("spotdnn-", Sha256Hex(key).substr(0, 40));
}

std::string ClientTokenFor(const std::string& key) {
  bool ascii = true;
  for (char c : key) ascii = ascii && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
  if (!key.empty() && key.size() <= 64 && ascii) return key;
  return absl::StrCat("spotdnn-", Sha256Hex(key).substr(0, 40));
}

std::map<std::string, std::string> InstanceEnvironment(const LaunchRequest& request, int index,
                                                       const std::string& instance_id,
                                                       const std::string& metadata_endpoint) {
  std::map<std::string, std::string> env = request.extra_env;
  env["SPOTDNN_JOB_ID"] = request.job_id;
  env["SPOTDNN_ROLE"] = std::string(RoleName(request.role));
  if (index >= 0) env["SPOTDNN_INDEX"] = absl::StrCat(index);
  env["SPOTDNN_PS_ADDRESSES"] = absl::StrJoin(request.ps_addresses, ",");
  if (request.batch_size > 0) env["SPOTDNN_BATCH_SIZE"] = absl::StrCat(request.batch_size);
  env["SPOTDNN_INSTANCE_TYPE"] = request.instance_type;
  if (!instance_id.empty()) env["SPOTDNN_INSTANCE_ID"] = instance_id;
  if (!metadata_endpoint.empty()) env["SPOTDNN_METADATA_ENDPOINT"] = metadata_endpoint;
  return env;
}

absl::Status ValidateLaunchRequest(const LaunchRequest& request) {
  if (request.job_id.empty()) return absl::InvalidArgumentError("job_id is empty");
  for (char c : request.job_id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job_id = \"", request.job_id, "\": use letters, digits, '-', '_' and '.' only"));
    }
  }
  if (request.instance_type.empty()) return absl::InvalidArgumentError("instance_type is empty");
  if (request.count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("count = ", request.count, ": must be >= 1"));
  }
  if (request.first_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("first_index = ", request.first_index, ": must be >= 0"));
  }
  if (request.batch_size < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size = ", request.batch_size, ": must be >= 0"));
  }
  if (request.client_token.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("client_token has ", request.client_token.size(), " characters: at most 64"));
  }
  return absl::OkStatus();
}

}  // namespace spotdnn::launcher
