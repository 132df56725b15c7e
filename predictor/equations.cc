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

namespace {

// W(R) = d sum n_k / (z_k + R) and its derivative in R.
void Utilization(absl::Span<const int> counts, absl::Span<const double> compute_s, double d,
                 double r, double& w, double& dw) {
  w = 0;
  dw = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (counts[k] == 0) continue;
    const double inv = 1.0 / (compute_s[k] + r);
    w += counts[k] * inv;
    dw -= counts[k] * inv * inv;
  }
  w *= d;
  dw *= d;
}

}  // namespace

PsLoad SharedPsLoad(absl::Span<const int> counts, absl::Span<const double> compute_s,
                    double service_s, double queueing) {
  const double d = service_s;
  const double kappa = queueing;
  double workers = 0;
  for (int n : counts) workers += n;
  PsLoad out;
  out.response_time_s = d;
  if (workers == 0) return out;
  // Where W(R) < 1, h(R) = (R - d)(1 - W(R)) - kappa d W(R) rises with R; it is <= 0 at R = d
  // (or W >= 1 there) and positive at R = d (N (1 + kappa) + 1), where W < 1: the root with W < 1
  // lies in between (for kappa = 0 above capacity, where W reaches 1).
  double lo = d, hi = d * (workers * (1 + kappa) + 1);
  double w = 0, dw = 0;
  Utilization(counts, compute_s, d, lo, w, dw);
  if (w <= 1 && kappa * w == 0) {  // no waiting at all (kappa = 0 below capacity, or idle)
    out.utilization = w;
    return out;
  }
  // First guess: the closed form for one class of workers as fast, on average, as these at R = d.
  const double z_eff = std::max(0.0, workers * d / w - d);
  double r = SharedPsIterationTime(static_cast<int>(workers), z_eff, d, kappa) - z_eff;
  r = std::clamp(r, lo, hi);
  for (int iter = 0; iter < 200; ++iter) {
    Utilization(counts, compute_s, d, r, w, dw);
    if (w >= 1) {
      // Past the servers' capacity: the root lies at a larger R (W < 1 there).
      lo = r;
      r = 0.5 * (lo + hi);
      if (hi - lo <= 1e-13 * hi) break;
      continue;
    }
    const double h = (r - d) * (1 - w) - kappa * d * w;
    if (h > 0) {
      hi = r;
    } else {
      lo = r;
    }
    if (hi - lo <= 1e-13 * hi || h == 0) break;
    const double dh = (1 - w) - (r - d) * dw - kappa * d * dw;
    double next = dh > 0 ? r - h / dh : 0.5 * (lo + hi);
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
    if (std::fabs(next - r) <= 1e-12 * r) {  // Newton converges quadratically: done
      r = next;
      break;
    }
    r = next;
  }
  Utilization(counts, compute_s, d, r, w, dw);
  out.response_time_s = r;
  out.utilization = std::min(w, 1.0);
  return out;
}

double SharedPsIterationTime(int workers, double compute_s, double service_s, double queueing) {
  const double a = compute_s + service_s;
  const double m = workers * service_s;
  return 0.5 * ((a + m) + std::sqrt((a - m) * (a - m) + 4 * queueing * service_s * m));
}

}  // namespace spotdnn::predictor
