// The training target `spotdnn predict` and `spotdnn plan` take (a loss, a number of global
// iterations, or epochs of a dataset), and the SLO and planning flags `plan` and `simulate` share.
#ifndef SPOTDNN_SERVICES_GATEWAY_TARGET_FLAGS_H_
#define SPOTDNN_SERVICES_GATEWAY_TARGET_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "services/gateway/cli/args.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::gateway {

// One of --loss L, --iterations N (global steps) or --epochs E with --dataset-size S (samples);
// the fields not given are 0.
struct TargetFlags {
  double loss = 0;
  double iterations = 0;
  double epochs = 0;
  double dataset_size = 0;
  // "loss 0.5", "64000 iterations", "10 epochs of 50000 samples".
  std::string Describe() const;
};

// Reads the target flags. INVALID_ARGUMENT names the flag: none or two targets, --iterations not
// a whole number >= 1, --epochs not positive, --dataset-size missing with --epochs (or given
// without it) or not a whole number >= 1.
absl::StatusOr<TargetFlags> ParseTargetFlags(const Args& args);

// --budget USD: a positive number of US dollars; 0 when not given.
absl::StatusOr<double> ParseBudgetFlag(const Args& args);

// The planning options `plan` and `simulate` share: --strategy (exact, spotdnn, exhaustive),
// --on-demand, --margin, --overhead and --parameter-servers. INVALID_ARGUMENT names the flag.
absl::Status ParsePlanOptionFlags(const Args& args, v1::PlanOptions* options);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_TARGET_FLAGS_H_
