#include "provisioner/deadline/synthetic_trace.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/str_format.h"

namespace spotdnn::provisioner::deadline {

AvailabilityTrace SyntheticTrace(const SyntheticTraceOptions& o) {
  AvailabilityTrace trace;
  trace.gap_s = o.gap_s;
  trace.source =
      absl::StrFormat("synthetic(a=%.2f,outage=%.1fh,shape=%.1f,seed=%d)", o.availability,
                      o.mean_outage_s / 3600, o.outage_shape, static_cast<int>(o.seed));
  const size_t ticks = static_cast<size_t>(std::ceil(o.duration_s / o.gap_s));
  trace.counts.assign(ticks, 0);
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> u01(0, 1);
  // Pareto with mean m and shape a: scale xm = m (a - 1) / a.
  const double xm = o.mean_outage_s * (o.outage_shape - 1) / o.outage_shape;
  const double mean_up = o.mean_outage_s * o.availability / (1 - o.availability);
  double t = 0, regime_end = 0, scale = 1;
  bool up = u01(rng) < o.availability;
  while (t < o.duration_s) {
    if (t >= regime_end) {
      regime_end = t - o.regime_s * std::log(1 - u01(rng));
      scale = std::exp((2 * u01(rng) - 1) * o.regime_spread);
    }
    double length;
    if (up) {
      length = -mean_up * scale * std::log(1 - u01(rng));
    } else {
      length = xm / std::pow(1 - u01(rng), 1 / o.outage_shape) / scale;
    }
    const size_t a = static_cast<size_t>(t / o.gap_s);
    const size_t b = std::min(ticks, static_cast<size_t>((t + length) / o.gap_s));
    if (up) {
      for (size_t k = a; k < b; ++k) trace.counts[k] = 1;
    }
    t += length;
    up = !up;
  }
  return trace;
}

}  // namespace spotdnn::provisioner::deadline
