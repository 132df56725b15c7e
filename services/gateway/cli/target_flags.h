// The training target `spotdnn predict` and `spotdnn plan` take (a loss, a number of global
// iterations, or epochs of a dataset), and the SLO and planning flags `plan` and `simulate` share.
#ifndef SPOTDNN_SERVICES_GATEWAY_TARGET_FLAGS_H_
#define SPOTDNN_SERVICES_GATEWAY_TARGET_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/gateway/cli/args.h"
#include "services/gateway/cli/command.h"
#include "spotdnn/v1/provisioner.pb.h"

namespace spotdnn::gateway {

// One of --loss L, --accuracy A, --target METRIC>=V|METRIC<=V, --iterations N (global steps) or
// --epochs E with --dataset-size S (samples); the fields not given are 0. `--target loss<=L` is
// --loss L; --accuracy A is `--target accuracy>=A`.
struct TargetFlags {
  double loss = 0;
  double iterations = 0;
  double epochs = 0;
  double dataset_size = 0;
  std::optional<v1::MetricTarget> metric;  // --accuracy or --target in a metric other than loss
  // "loss 0.5", "accuracy >= 0.88", "64000 iterations", "10 epochs of 50000 samples".
  std::string Describe() const;
  // Writes the target into a message with the fields target_loss, target_iterations,
  // target_epochs, dataset_size and target_metric (PredictRequest, LossCurveRequest, Slo).
  template <typename M>
  void ApplyTo(M* m) const {
    m->set_target_loss(loss);
    m->set_target_iterations(iterations);
    m->set_target_epochs(epochs);
    m->set_dataset_size(dataset_size);
    if (metric) {
      *m->mutable_target_metric() = *metric;
    } else {
      m->clear_target_metric();
    }
  }
};

// "METRIC>=VALUE" or "METRIC<=VALUE" (spaces around the parts allowed) as `flag`'s value: a loss
// at most L sets `loss`, anything else `metric`. INVALID_ARGUMENT naming the flag and the text:
// no >= or <=, a metric name not of 1 to 128 letters, digits and "_.-/:", a value that is not a
// finite number, a loss at least L, an accuracy at most A or outside (0, 1].
absl::StatusOr<TargetFlags> ParseTargetExpression(absl::string_view flag, absl::string_view text);

// Reads the target flags. INVALID_ARGUMENT names the flag: none or two targets, --iterations not
// a whole number >= 1, --epochs not positive, --dataset-size missing with --epochs (or given
// without it) or not a whole number >= 1, --accuracy not in (0, 1], --target as
// ParseTargetExpression says.
absl::StatusOr<TargetFlags> ParseTargetFlags(const Args& args);

// A metric target as every command's --json gives it: {"metric": "accuracy", "direction":
// "at-least", "value": 0.88} (the direction's enum name without its prefix, as a job spec's
// slo.target takes it).
std::string MetricTargetJson(const v1::MetricTarget& target);

// The table row of a prediction whose target lies beyond the best value the profile's runs
// reached: {"beyond the data", "an extrapolation: the runs reached 0.9332 at best"}.
std::vector<std::string> BeyondTheDataRow(const v1::Prediction& p);

// The target flags' help lines, for a command's flag table: --loss, --accuracy, --target.
std::vector<FlagHelp> MetricTargetFlagHelp();

// --budget USD: a positive number of US dollars; 0 when not given.
absl::StatusOr<double> ParseBudgetFlag(const Args& args);

// The planning options `plan` and `simulate` share: --strategy (exact, spotdnn, exhaustive),
// --on-demand, --margin, --overhead and --parameter-servers. INVALID_ARGUMENT names the flag.
absl::Status ParsePlanOptionFlags(const Args& args, v1::PlanOptions* options);

}  // namespace spotdnn::gateway

#endif  // SPOTDNN_SERVICES_GATEWAY_TARGET_FLAGS_H_
