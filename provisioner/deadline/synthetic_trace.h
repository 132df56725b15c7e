// Synthetic availability traces with long outages, for tests and bench/deadline_bench: an
// alternating renewal process of up periods (exponential) and outages (Pareto, heavy-tailed), with
// slow regime changes (days of better or worse availability), sampled on a tick grid.
#ifndef SPOTDNN_PROVISIONER_DEADLINE_SYNTHETIC_TRACE_H_
#define SPOTDNN_PROVISIONER_DEADLINE_SYNTHETIC_TRACE_H_

#include <cstdint>

#include "provisioner/deadline/availability_trace.h"

namespace spotdnn::provisioner::deadline {

struct SyntheticTraceOptions {
  double availability = 0.5;        // long-run fraction of time with spot, in (0, 1)
  double mean_outage_s = 4 * 3600;  // mean outage length
  double outage_shape = 1.6;        // Pareto shape (> 1; smaller: heavier tail)
  double regime_s = 3 * 86400;      // mean length of a regime (availability scaled up or down)
  double regime_spread = 0.5;       // each regime scales the up periods by exp(U(-s, s))
  double duration_s = 45 * 86400;
  double gap_s = 195;
  uint64_t seed = 1;
};

// A trace of counts 0 or 1 (one instance).
AvailabilityTrace SyntheticTrace(const SyntheticTraceOptions& options);

}  // namespace spotdnn::provisioner::deadline

#endif  // SPOTDNN_PROVISIONER_DEADLINE_SYNTHETIC_TRACE_H_
