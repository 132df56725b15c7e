// Errors in the user's words: the services name the fields of their requests
// ("options.quota_overrides[0].instance_type", "slo.target_loss"); the CLI says the flags the
// user typed ("--quota", "--loss") instead.
#ifndef SPOTDNN_SERVICES_GATEWAY_CLI_FLAG_ERRORS_H_
#define SPOTDNN_SERVICES_GATEWAY_CLI_FLAG_ERRORS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace spotdnn::gateway {

// Request field paths and the flags that set them.
using FieldFlags = std::vector<std::pair<std::string, std::string>>;

// The fields of Provisioner requests (Plan, Frontier, Simulate) and the flags of `spotdnn plan`
// and `spotdnn simulate` that set them.
const FieldFlags& ProvisionerFieldFlags();
// The fields of Predictor requests and the flags of `spotdnn predict`.
const FieldFlags& PredictorFieldFlags();

// `message` with every field path of `fields` (at a word's start, with any [index] and
// .subfield after it) replaced by its flag: "options.quota_overrides[0].instance_type = \"x\""
// becomes "--quota instance type = \"x\"", "slo.target_loss = 0.1" becomes "--loss = 0.1".
std::string NameFlags(const std::string& message, const FieldFlags& fields);
// The same status with its message so rewritten.
absl::Status NameFlags(const absl::Status& status, const FieldFlags& fields);

// The error for a flag the command does not take, with the nearest of `known` as a hint when it
// looks like a typo: "--worklaod: unknown flag; did you mean --workload?".
std::string UnknownFlagMessage(const std::string& flag, const std::vector<std::string>& known);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_CLI_FLAG_ERRORS_H_
