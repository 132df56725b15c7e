// What the risk-aware commands share (spotdnn simulate, plan --confidence / --lifetimes, run's
// slo.confidence): reading a lifetime file into a request's simulation options, the simulation
// flags, and how a simulated plan is shown.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_RISK_OPTIONS_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_RISK_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "services/gateway/cli/args.h"
#include "services/gateway/cli/command.h"
#include "services/gateway/cli/output.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::gateway {

namespace pb = ::spotdnn::v1;

// The flags SimulationFlags reads, for a command's flag table.
std::vector<FlagHelp> SimulationFlagHelp();

// Fills `options` from --lifetimes, --censor-at, --map, --unmatched, --runs, --seed, --notice,
// --takeover-delay, --lost-iterations, --replan-resolution, --screening-runs and
// --max-candidates. INVALID_ARGUMENT names the flag and the value.
absl::Status SimulationFlags(const Args& args, pb::SimulationOptions* options);

// A risk estimate's fields as JSON: p_meet_deadline (and its interval), expected_cost_usd, the
// cost and time percentiles, revocations per run, runs and seed.
JsonObject RiskJson(const pb::RiskEstimate& r);
// "0.9521 [0.9477, 0.9561]".
std::string Probability(const pb::RiskEstimate& r);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_RISK_OPTIONS_H_
