// Placeholder until the model lands (the lead is writing it): the functions compile and answer
// "unreachable".
#include "predictor/convergence.h"

namespace spotdnn::predictor {
double LrSchedule::RateAt(double) const { return 1; }
absl::Status LrSchedule::Validate() const { return absl::OkStatus(); }
absl::StatusOr<LrSchedule> ParseLrSchedule(absl::string_view) {
  return absl::UnimplementedError("not yet");
}
std::string LrScheduleText(const LrSchedule&) { return "constant"; }
absl::Status ConvergenceModel::Validate() const { return absl::OkStatus(); }
double MeanValueAt(const ConvergenceModel& model, int, double, double) { return model.ceiling; }
StepQuantiles StepsToTarget(const ConvergenceModel&, int, double, double, double, int) {
  return {};
}
}  // namespace spotdnn::predictor
