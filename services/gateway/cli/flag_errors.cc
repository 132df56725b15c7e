#include "services/gateway/cli/flag_errors.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "services/common/program.h"

namespace spotdnn::gateway {
namespace {

bool IsFieldChar(char c) { return absl::ascii_isalnum(c) || c == '_' || c == '.'; }

// The longest path of `fields` that `message` holds at `at`, or null.
const std::pair<std::string, std::string>* MatchAt(const std::string& message, size_t at,
                                                   const FieldFlags& fields) {
  const std::pair<std::string, std::string>* best = nullptr;
  for (const auto& f : fields) {
    if (message.compare(at, f.first.size(), f.first) != 0) continue;
    const size_t end = at + f.first.size();
    // The path must end there: "slo.target_loss" is not a match inside "slo.target_losses".
    if (end < message.size() && (absl::ascii_isalnum(message[end]) || message[end] == '_')) {
      continue;
    }
    if (best == nullptr || f.first.size() > best->first.size()) best = &f;
  }
  return best;
}

}  // namespace

const FieldFlags& ProvisionerFieldFlags() {
  static const FieldFlags* fields = new FieldFlags{
      {"slo.target_loss", "--loss"},
      {"slo.target_metric", "--target"},
      {"slo.target_iterations", "--iterations"},
      {"slo.target_epochs", "--epochs"},
      {"slo.dataset_size", "--dataset-size"},
      {"slo.deadline_s", "--deadline"},
      {"slo.budget_usd", "--budget"},
      {"options.quota_overrides", "--quota"},
      {"options.existing.instances", "--existing"},
      {"options.existing", "--existing"},
      {"options.bandwidth_margin", "--margin"},
      {"options.revocation_overhead_s", "--overhead"},
      {"options.max_cluster_size", "--max-size"},
      {"options.parameter_servers", "--parameter-servers"},
      {"options.exhaustive_limit", "--exhaustive-limit"},
      {"options.zone", "--zone"},
      {"options.region", "--region"},
      {"options.avoid_zones", "--avoid-zone"},
      {"options.confidence", "--confidence"},
      {"options.simulation.runs", "--runs"},
      {"options.simulation.seed", "--seed"},
      {"options.simulation.notice_s", "--notice"},
      {"options.simulation.takeover_delay_s", "--takeover-delay"},
      {"options.simulation.lost_iterations_per_revocation", "--lost-iterations"},
      {"options.simulation.replan_resolution", "--replan-resolution"},
      {"options.simulation.screening_runs", "--screening-runs"},
      {"options.simulation.max_candidates", "--max-candidates"},
      {"options.simulation.lifetimes", "--lifetimes"},
      {"options.simulation.lifetimes or lifetime_groups", "--lifetimes FILE"},
      {"options.simulation.lifetime_groups", "--lifetimes"},
      {"simulation.runs", "--runs"},
      {"simulation.notice_s", "--notice"},
      {"simulation.takeover_delay_s", "--takeover-delay"},
      {"simulation.lost_iterations_per_revocation", "--lost-iterations"},
      {"simulation.replan_resolution", "--replan-resolution"},
      {"simulation.screening_runs", "--screening-runs"},
      {"simulation.max_candidates", "--max-candidates"},
      {"cluster.instances", "--cluster"},
      {"cluster.parameter_servers", "--parameter-servers"},
      {"workload.name", "--workload"},
      {"catalog.name", "--catalog"},
      {"global_batch", "--global-batch"},
      {"global_batch_mode", "--global-batch"},
      {"local_batch", "--local-batch"},
  };
  return *fields;
}

const FieldFlags& PredictorFieldFlags() {
  static const FieldFlags* fields = new FieldFlags{
      {"target_loss", "--loss"},
      {"target_iterations", "--iterations"},
      {"target_epochs", "--epochs"},
      {"dataset_size", "--dataset-size"},
      {"target_metric", "--target"},
      {"cluster.instances", "--cluster"},
      {"cluster.parameter_servers", "--parameter-servers"},
      {"workload.name", "--workload"},
      {"catalog.name", "--catalog"},
      {"local_batch", "--local-batch"},
      {"global_batch", "--global-batch"},
      {"global_batch_mode", "--global-batch"},
  };
  return *fields;
}

std::string NameFlags(const std::string& message, const FieldFlags& fields) {
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    const bool word_start = i == 0 || !IsFieldChar(message[i - 1]);
    const auto* match = word_start ? MatchAt(message, i, fields) : nullptr;
    if (match == nullptr) {
      out.push_back(message[i++]);
      continue;
    }
    size_t j = i + match->first.size();
    // An index ("[0]") and the subfield after it (".instance_type") stay, in words.
    std::string sub;
    while (j < message.size()) {
      if (message[j] == '[') {
        const size_t close = message.find(']', j);
        if (close == std::string::npos) break;
        j = close + 1;
      } else if (message[j] == '.' && j + 1 < message.size() &&
                 (absl::ascii_isalpha(message[j + 1]) || message[j + 1] == '_')) {
        size_t k = j + 1;
        while (k < message.size() && (absl::ascii_isalnum(message[k]) || message[k] == '_')) ++k;
        if (!sub.empty()) sub.push_back(' ');
        sub += absl::StrReplaceAll(message.substr(j + 1, k - j - 1), {{"_", " "}});
        j = k;
      } else {
        break;
      }
    }
    out += match->second;
    if (!sub.empty()) out += " " + sub;
    i = j;
  }
  return out;
}

absl::Status NameFlags(const absl::Status& status, const FieldFlags& fields) {
  if (status.ok()) return status;
  return absl::Status(status.code(), NameFlags(std::string(status.message()), fields));
}

std::string UnknownFlagMessage(const std::string& flag, const std::vector<std::string>& known) {
  const std::string nearest = services::NearestName(flag, known);
  return absl::StrCat(flag, ": unknown flag",
                      nearest.empty() ? "" : absl::StrCat("; did you mean ", nearest, "?"));
}

}  // namespace spotdnn::gateway
