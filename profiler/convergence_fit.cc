// Placeholder until the fit lands (the lead is writing it).
#include "profiler/convergence_fit.h"

namespace spotdnn::profiler {
std::vector<ConvergenceRun> ConvergenceRunsOf(absl::Span<const Sample>, absl::string_view) {
  return {};
}
absl::StatusOr<ConvergenceFit> FitConvergence(absl::Span<const ConvergenceRun>,
                                              const ConvergenceFitOptions&) {
  return absl::UnimplementedError("not yet");
}
}  // namespace spotdnn::profiler
