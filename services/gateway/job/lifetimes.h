// A lifetime CSV (see provisioner/revocation_model.h) as the provisioner's simulation options, for
// `spotdnn run`'s slo.lifetimes and the CLI's --lifetimes.
#ifndef SPOTDNN_SERVICES_GATEWAY_JOB_LIFETIMES_H_
#define SPOTDNN_SERVICES_GATEWAY_JOB_LIFETIMES_H_

#include <string>

#include "absl/status/status.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::job {

// Reads the file into `options`' lifetime groups, one per section; lifetimes at or above
// `censor_at_s` are censored (infinity: none). Problems with single rows are skipped; NOT_FOUND or
// INVALID_ARGUMENT name the path.
absl::Status AddLifetimeFile(const std::string& path, double censor_at_s,
                             spotdnn::v1::SimulationOptions* options);

}  // namespace spotdnn::job

#endif  // SPOTDNN_SERVICES_GATEWAY_JOB_LIFETIMES_H_
