#include "predictor/equations.h"

#include <algorithm>
#include <cmath>

namespace spotdnn::predictor {

double ContentionProbability(const ContentionModel& contention, int workers) {
  const double p = contention.a1 * std::sqrt(static_cast<double>(workers)) + contention.b1;
  return std::clamp(p, 0.0, 1.0);
}

double WorkerBandwidth(double required_mb_per_s, double ps_total_mb_per_s, int workers,
                       double contention_probability) {
  const double share = ps_total_mb_per_s / workers;
  if (required_mb_per_s > share) {
    return contention_probability * share + (1.0 - contention_probability) * required_mb_per_s;
  }
  return required_mb_per_s;
}

double CommunicationTime(double parameter_size_mb, double worker_bandwidth_mb_per_s, int gpus,
                         double pcie_bandwidth_mb_per_s, double pcie_weight) {
  return 2.0 * parameter_size_mb / worker_bandwidth_mb_per_s +
         pcie_weight * 2.0 * gpus * parameter_size_mb / pcie_bandwidth_mb_per_s;
}

double ExpectedIterationTime(absl::Span<const double> iteration_times_s) {
  double rate = 0;
  for (double t : iteration_times_s) rate += 1.0 / t;
  return 1.0 / rate;
}

double ConvergenceCoefficient(absl::Span<const double> worker_speeds) {
  if (worker_speeds.empty()) return 0;
  double total = 0;
  double fastest = 0;
  for (double v : worker_speeds) {
    total += v;
    fastest = std::max(fastest, v);
  }
  // (w_1 - 1)^2 + sum_{i>1} w_i^2 = sum_i w_i^2 - 2 w_1 + 1, with w_1 the fastest worker's share.
  double sum_sq = 0;
  for (double v : worker_speeds) sum_sq += (v / total) * (v / total);
  const double w1 = fastest / total;
  return std::sqrt(std::max(0.0, sum_sq - 2.0 * w1 + 1.0));
}

double LossAfter(const LossModel& loss, double wa_batch, double convergence, int workers,
                 double normalized_iterations) {
  return (loss.g2 * wa_batch + loss.g3) * std::sqrt((convergence + loss.g4) * workers) /
             (normalized_iterations + loss.g1) +
         loss.g5;
}

double IterationsToLoss(const LossModel& loss, double wa_batch, double convergence, int workers,
                        double target_loss) {
  return (loss.g2 * wa_batch + loss.g3) * std::sqrt((convergence + loss.g4) * workers) /
             (target_loss - loss.g5) -
         loss.g1;
}

int LargestBatch(const MemoryModel& memory, double gpu_memory_gib) {
  const double x = memory.a2 * gpu_memory_gib + memory.b2;
  if (!(x >= 1.0)) return 0;
  const int exponent = static_cast<int>(std::floor(std::log2(x)));
  return exponent >= 30 ? (1 << 30) : (1 << exponent);
}

}  // namespace spotdnn::predictor
