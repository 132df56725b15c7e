// The spotDNN paper's equations (section III), one function each, numbered as in the paper.
// Inputs are taken as given; PerformanceModel validates before calling these.
#ifndef SPOTDNN_PREDICTOR_EQUATIONS_H_
#define SPOTDNN_PREDICTOR_EQUATIONS_H_

#include "absl/types/span.h"
#include "predictor/types.h"

namespace spotdnn::predictor {

// Eq. 9: P = a1 * sqrt(|N|) + b1, clamped to [0, 1].
double ContentionProbability(const ContentionModel& contention, int workers);

// Eq. 8: a worker's bandwidth; B_ps/|N| shared when B_req exceeds it, else B_req.
double WorkerBandwidth(double required_mb_per_s, double ps_total_mb_per_s, int workers,
                       double contention_probability);

// Eq. 7: T_comm = 2 S / B_wk + pcie_weight * 2 g S / B_pcie.
double CommunicationTime(double parameter_size_mb, double worker_bandwidth_mb_per_s, int gpus,
                         double pcie_bandwidth_mb_per_s, double pcie_weight = 1.0);

// Eq. 2: T_exp = 1 / sum_i (1 / T_i), one entry per worker.
double ExpectedIterationTime(absl::Span<const double> iteration_times_s);

// Eq. 5: R = sqrt((w_1 - 1)^2 + sum_{i>1} w_i^2), w_i = v_i / v, worker 1 the fastest.
double ConvergenceCoefficient(absl::Span<const double> worker_speeds);

// Eq. 3: loss after j normalized iterations.
double LossAfter(const LossModel& loss, double wa_batch, double convergence, int workers,
                 double normalized_iterations);

// Eq. 3 inverted: j such that LossAfter(...) == target_loss. May be negative or infinite; the
// caller decides what that means.
double IterationsToLoss(const LossModel& loss, double wa_batch, double convergence, int workers,
                        double target_loss);

// Eq. 10: b_k = 2^floor(log2(a2 * mem + b2)); 0 when a2 * mem + b2 < 1.
int LargestBatch(const MemoryModel& memory, double gpu_memory_gib);

// The shared parameter-server model (SharedPsModel) at its fixed point.
struct PsLoad {
  double response_time_s = 0;  // R: one exchange with the servers, waiting included
  double utilization = 0;      // W = d * sum_i 1 / (z_i + R), in [0, 1]
};

// R and W for counts[k] workers of compute time compute_s[k] (entries with count 0 are skipped),
// service time `service_s` = d per exchange on each server and queueing coefficient `queueing`:
// the unique R >= d with (R - d)(1 - W) = queueing * d * W. Allocates nothing; a few Newton steps
// kept inside a bisection bracket. service_s > 0, queueing >= 0, compute times >= 0.
PsLoad SharedPsLoad(absl::Span<const int> counts, absl::Span<const double> compute_s,
                    double service_s, double queueing);

// The same for `workers` identical workers of compute time z, in closed form:
// T = ((a + m) + sqrt((a - m)^2 + 4 queueing d m)) / 2 with a = z + d, m = workers d; returns T.
double SharedPsIterationTime(int workers, double compute_s, double service_s, double queueing);

}  // namespace spotdnn::predictor

#endif  // SPOTDNN_PREDICTOR_EQUATIONS_H_
