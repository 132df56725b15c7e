// Helpers the profiler's per-parameter fits, workload variants and speed curves share (fitting.cc,
// fit_variants.cc, speed_curve.cc). Internal to the profiler library.
#ifndef SPOTDNN_PROFILER_FIT_COMMON_H_
#define SPOTDNN_PROFILER_FIT_COMMON_H_

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "profiler/sample.h"

namespace spotdnn::profiler::fit_internal {

// Cauchy scale of log residuals: samples more than ~5% off count less and less.
inline constexpr double kLogResidualScale = 0.05;

// Most Ceres iterations of one per-parameter or speed-curve solve (FitSolverOptions).
inline constexpr int kMaxSolverIterations = 200;

// The median of `v`; NaN when `v` is empty.
inline double Median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + mid, v.end());
  double m = v[mid];
  if (v.size() % 2 == 0) {
    m = (m + *std::max_element(v.begin(), v.begin() + mid)) / 2;
  }
  return m;
}

// The sample's cluster size |N|, at least 1.
inline int Workers(const Sample& s) { return std::max(1, s.cluster_workers); }

// A sample's iteration time: measured, or |N| / cluster speed for identical workers.
inline double IterationTime(const Sample& s) {
  if (s.iteration_time_s > 0) return s.iteration_time_s;
  if (s.cluster_steps_per_s > 0) return Workers(s) / s.cluster_steps_per_s;
  return 0;
}

// A parameter the data do not determine: FAILED_PRECONDITION with `message`.
inline absl::Status Unidentified(absl::string_view message) {
  return absl::FailedPreconditionError(message);
}

// B_wk / B_req under eq. 8 with ratio r = B_ps / B_req.
template <typename T>
T BandwidthFraction(T p, T r, int workers) {
  const T shared = r / T(workers);
  if (shared < T(1)) return p * shared + (T(1) - p);
  return T(1);
}

// `p` clamped to [0, 1] (works on Ceres jets).
template <typename T>
T Clamp01(T p) {
  if (p < T(0)) return T(0);
  if (p > T(1)) return T(1);
  return p;
}

}  // namespace spotdnn::profiler::fit_internal

#endif  // SPOTDNN_PROFILER_FIT_COMMON_H_
